//! Where a read goes. This is the one place that decides between our POSIX backend and cuFile,
//! following KvikIO's rules (docs/routing.md, "The decision"): host memory always uses POSIX tasks;
//! device requests below the GDS threshold use POSIX inline on the calling thread; larger device
//! requests use cuFile per task unless compat mode ON (or an AUTO fallback) says otherwise, and
//! compat mode OFF turns "cuFile cannot serve this file" into an error.

use crate::sys::cuda::MemoryKind;
use crate::error::{Error, Result};
use crate::backend::cufile::gds::Unusable;
use crate::settings::CompatMode;
use crate::stats::{PosixReason, Route};

/// The decision for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The route every task of the call takes.
    pub route: Route,
    /// Run on the calling thread as one task instead of on the pool.
    pub inline: bool,
}

/// Decides the route of a call of `size` bytes into memory of `kind`. `cufile_verdict` is asked
/// only when cuFile is a candidate (it may open the cuFile driver and register the file).
pub fn plan(
    kind: &MemoryKind,
    size: usize,
    gds_threshold: u64,
    compat_mode: CompatMode,
    cufile_verdict: impl FnOnce() -> std::result::Result<(), Unusable>,
) -> Result<Plan> {
    let posix = |reason, inline| Ok(Plan { route: Route::Posix(reason), inline });
    if !kind.is_device() {
        return posix(PosixReason::HostMemory, false);
    }
    if (size as u64) < gds_threshold {
        return posix(PosixReason::BelowThreshold, true);
    }
    match compat_mode {
        CompatMode::On => posix(PosixReason::CompatOn, false),
        CompatMode::Auto => match cufile_verdict() {
            Ok(()) => Ok(Plan { route: Route::Cufile, inline: false }),
            Err(_) => posix(PosixReason::AutoFallback, false),
        },
        CompatMode::Off => match cufile_verdict() {
            Ok(()) => Ok(Plan { route: Route::Cufile, inline: false }),
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
                assert_eq!(p, Plan { route: Route::Posix(PosixReason::HostMemory), inline: false });
            }
        }
    }

    #[test]
    fn small_device_requests_are_posix_inline() {
        let p = plan(&DEVICE, 8192, 16384, CompatMode::Off, never).unwrap();
        assert_eq!(p, Plan { route: Route::Posix(PosixReason::BelowThreshold), inline: true });
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
