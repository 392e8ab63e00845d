//! Where a call goes, a read or a write alike. This is the one place that decides between our
//! POSIX backend and cuFile, following KvikIO's rules (docs/routing.md, "The decision"): host
//! memory always uses POSIX tasks; device requests below the GDS threshold use POSIX as one task
//! on the calling thread; larger device requests use cuFile per task unless compat mode ON (or an
//! AUTO fallback) says otherwise, and compat mode OFF turns "cuFile cannot serve this file" into
//! an error. It also names the call's runner (`schedule::Runner`).

use crate::backend::cufile::gds::Unusable;
use crate::error::{Error, Result};
use crate::io::schedule::Runner;
use crate::settings::CompatMode;
use crate::stats::{PosixReason, Route};
use crate::sys::cuda::MemoryKind;

/// The decision for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The route every task of the call takes.
    pub route: Route,
    /// Who runs its tasks: the calling thread (one task) or the pool.
    pub runner: Runner,
}

/// Decides the route of a call of `size` bytes into memory of `kind`. `cufile_verdict` is asked
/// only when cuFile is a candidate (it may open the cuFile driver and register the file).
pub(crate) fn plan(
    kind: &MemoryKind,
    size: usize,
    gds_threshold: u64,
    compat_mode: CompatMode,
    cufile_verdict: impl FnOnce() -> std::result::Result<(), Unusable>,
) -> Result<Plan> {
    let posix = |reason, runner| Ok(Plan { route: Route::Posix(reason), runner });
    if !kind.is_device() {
        return posix(PosixReason::HostMemory, Runner::Pool);
    }
    if (size as u64) < gds_threshold {
        return posix(PosixReason::BelowThreshold, Runner::CallingThread);
    }
    match compat_mode {
        CompatMode::On => posix(PosixReason::CompatOn, Runner::Pool),
        CompatMode::Auto => match cufile_verdict() {
            Ok(()) => Ok(Plan { route: Route::Cufile, runner: Runner::Pool }),
            Err(_) => posix(PosixReason::AutoFallback, Runner::Pool),
        },
        CompatMode::Off => match cufile_verdict() {
            Ok(()) => Ok(Plan { route: Route::Cufile, runner: Runner::Pool }),
            Err(why) => Err(Error::CufileUnavailable(format!("compat mode is OFF and {}", why.message))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cufile::gds::FallbackReason;

    const DEVICE: MemoryKind = MemoryKind::Device { ordinal: 0, context: None };

    fn usable() -> std::result::Result<(), Unusable> {
        Ok(())
    }

    fn unusable() -> std::result::Result<(), Unusable> {
        Err(Unusable::new(FallbackReason::RegisterFailed, "cuFileHandleRegister failed: 5027"))
    }

    fn never() -> std::result::Result<(), Unusable> {
        panic!("cuFile must not be probed for this request")
    }

    #[test]
    fn host_memory_is_always_posix() {
        for mode in [CompatMode::On, CompatMode::Off, CompatMode::Auto] {
            for kind in [MemoryKind::Host, MemoryKind::PinnedHost] {
                let p = plan(&kind, 1 << 30, 16384, mode, never).unwrap();
                assert_eq!(p, Plan { route: Route::Posix(PosixReason::HostMemory), runner: Runner::Pool });
            }
        }
    }

    #[test]
    fn small_device_requests_are_posix_on_the_calling_thread() {
        let p = plan(&DEVICE, 8192, 16384, CompatMode::Off, never).unwrap();
        assert_eq!(p, Plan { route: Route::Posix(PosixReason::BelowThreshold), runner: Runner::CallingThread });
        // The comparison is strict, as in KvikIO.
        assert_eq!(plan(&DEVICE, 16384, 16384, CompatMode::Auto, usable).unwrap().route, Route::Cufile);
    }

    #[test]
    fn compat_modes() {
        assert_eq!(plan(&DEVICE, 1 << 20, 16384, CompatMode::On, never).unwrap().route, Route::Posix(PosixReason::CompatOn));
        assert_eq!(plan(&DEVICE, 1 << 20, 16384, CompatMode::Auto, usable).unwrap().route, Route::Cufile);
        assert_eq!(
            plan(&DEVICE, 1 << 20, 16384, CompatMode::Auto, unusable).unwrap().route,
            Route::Posix(PosixReason::AutoFallback)
        );
        assert_eq!(plan(&DEVICE, 1 << 20, 16384, CompatMode::Off, usable).unwrap().route, Route::Cufile);
        let err = plan(&DEVICE, 1 << 20, 16384, CompatMode::Off, unusable).unwrap_err();
        assert!(matches!(err, Error::CufileUnavailable(ref m) if m.contains("5027")), "{err}");
        let managed = MemoryKind::Managed { ordinal: 0, context: None };
        assert_eq!(plan(&managed, 1 << 20, 16384, CompatMode::On, never).unwrap().route, Route::Posix(PosixReason::CompatOn));
    }
}
