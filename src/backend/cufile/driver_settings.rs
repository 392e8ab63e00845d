//! cuFile's driver settings as a caller sets them through gdsroute (KvikIO's `DriverProperties`
//! setters: poll mode and its threshold, the largest direct I/O, cuFile's buffer cache, the
//! pinned-memory limit), and when they take effect. cuFile reads its settings when the driver
//! opens; on 1.15 a setter called after the open returns success and changes nothing (measured on
//! the H200, docs/local-api.md, "cuFile driver properties"). So a setting is staged here and
//! applied just before gdsroute's `cuFileDriverOpen` (`apply_before_open`, called by `gds`), in
//! the background start too; from the moment the open takes them, a setter is refused with
//! `DriverOpen`, so that a setting never seems to work when it did not.

use super::gds;
use crate::error::{Error, Result};
use crate::sys::cufile::{CufileLibrary, DriverControl};
use std::sync::Mutex;

/// What the driver open did with a staged setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Applied {
    pub control: DriverControl,
    /// cuFile's refusal, in words (`None`: accepted).
    pub refused: Option<String>,
}

#[derive(Default)]
struct State {
    /// The latest value of each setting, in the order first set.
    staged: Vec<DriverControl>,
    /// The driver open took the staged settings: later ones are refused.
    taken: bool,
    applied: Vec<Applied>,
}

static STATE: Mutex<State> = Mutex::new(State { staged: Vec::new(), taken: false, applied: Vec::new() });

fn lock() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    /// `stage` on this state, given the process verdict if it is known to be "unusable".
    fn stage(&mut self, control: DriverControl, unusable: Option<gds::Unusable>) -> Result<()> {
        match control {
            DriverControl::MaxDirectIoKb(0) | DriverControl::MaxCacheKb(0) | DriverControl::MaxPinnedMemoryKb(0) => {
                return Err(Error::InvalidArgument(format!("{control:?}: a size of 0 KiB")));
            }
            _ => {}
        }
        if self.taken {
            return Err(Error::DriverOpen(format!(
                "{control:?} not applied: cuFile's driver is open (or opening) in this process, and cuFile reads its settings only when it opens; \
                 set driver settings before the first device read, gdsroute_begin_device_setup, gdsroute_cufile_usable or a driver-properties query"
            )));
        }
        if let Some(unusable) = unusable {
            return Err(Error::CufileUnavailable(format!("{control:?} not applied: {}", unusable.message)));
        }
        let same_setting = |c: &&mut DriverControl| std::mem::discriminant(*c) == std::mem::discriminant(&control);
        match self.staged.iter_mut().find(same_setting) {
            Some(earlier) => *earlier = control,
            None => self.staged.push(control),
        }
        Ok(())
    }

    /// Closes staging and applies each staged setting with `apply` (its refusal in words).
    fn take(&mut self, apply: impl Fn(DriverControl) -> std::result::Result<(), String>) {
        self.taken = true;
        let staged = std::mem::take(&mut self.staged);
        self.applied = staged.into_iter().map(|control| Applied { control, refused: apply(control).err() }).collect();
    }
}

/// Stages `control` for the driver open, replacing an earlier value of the same setting.
///
/// Errors: `InvalidArgument` for a size of 0 KiB; `DriverOpen` once gdsroute's driver open took
/// the settings (also while that open still runs in the background); `CufileUnavailable` when
/// the process verdict says cuFile cannot be used, so no driver will open.
pub(crate) fn stage(control: DriverControl) -> Result<()> {
    lock().stage(control, gds::decided_unusable())
}

/// The newest cuFile measured to crash at process exit after `cuFileDriverSetMaxCacheSize` or
/// `cuFileDriverSetMaxPinnedMemSize` before its driver opened (1.15.1 on the H200, 2026-12-03:
/// SIGSEGV at exit in each of the processes that set one of them, none in those that set poll
/// mode or the direct I/O size, tests/gpu_driver.rs). Those two are not applied up to it.
const CRASHES_AT_EXIT_AFTER_CACHE_SETTERS: i32 = 1150;

/// Why gdsroute does not apply `control` to cuFile `version` (`None`: it applies it).
fn withheld(control: DriverControl, version: Option<i32>) -> Option<String> {
    let sized = matches!(control, DriverControl::MaxCacheKb(_) | DriverControl::MaxPinnedMemoryKb(_));
    let crashy = version.is_none_or(|v| v <= CRASHES_AT_EXIT_AFTER_CACHE_SETTERS);
    (sized && crashy).then(|| {
        format!(
            "not applied: with cuFile {} this setter before the driver opens makes the process crash at exit (measured on cuFile 1.15, 2026-12-03); \
             set it in cufile.json instead (properties.max_device_cache_size_kb, properties.max_device_pinned_mem_size_kb)",
            version.map_or("of unknown version".to_string(), |v| format!("{}.{}", v / 1000, v % 1000 / 10))
        )
    })
}

/// Applies the staged settings to `library` and closes staging; called by the driver open,
/// immediately before `cuFileDriverOpen`. A setting that would crash the process at exit on this
/// cuFile (`withheld`) is recorded as refused instead.
pub(crate) fn apply_before_open(library: &CufileLibrary) {
    let version = library.version();
    lock().take(|control| match withheld(control, version) {
        Some(why) => Err(why),
        None => library.set_driver_control(control).map_err(|e| e.to_string()),
    });
}

/// Each setting the driver open applied, in words, with cuFile's refusal if it refused. Empty
/// before the open or when none was set.
pub(crate) fn applied_in_words() -> Vec<String> {
    applied()
        .1
        .iter()
        .map(|a| match &a.refused {
            None => format!("{:?}: applied before the driver opened", a.control),
            Some(why) => format!("{:?}: refused by cuFile before the driver opened: {why}", a.control),
        })
        .collect()
}

/// The settings the driver open applied (empty before it, or when none were staged), and
/// whether staging is closed.
pub(crate) fn applied() -> (bool, Vec<Applied>) {
    let state = lock();
    (state.taken, state.applied.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_of_zero_is_refused_and_nothing_is_staged() {
        let mut state = State::default();
        for control in [DriverControl::MaxDirectIoKb(0), DriverControl::MaxCacheKb(0), DriverControl::MaxPinnedMemoryKb(0)] {
            assert!(matches!(state.stage(control, None), Err(Error::InvalidArgument(_))), "{control:?}");
        }
        assert!(state.staged.is_empty());
        assert!(matches!(stage(DriverControl::MaxCacheKb(0)), Err(Error::InvalidArgument(_))), "the process's staging checks too");
    }

    #[test]
    fn a_later_value_replaces_the_earlier_and_the_open_applies_each_once_in_order() {
        let mut state = State::default();
        state.stage(DriverControl::MaxCacheKb(1024), None).unwrap();
        state.stage(DriverControl::PollMode { enabled: true, threshold_kb: 4 }, None).unwrap();
        state.stage(DriverControl::MaxCacheKb(2048), None).unwrap();
        let calls = std::cell::RefCell::new(Vec::new());
        state.take(|c| {
            calls.borrow_mut().push(c);
            if matches!(c, DriverControl::PollMode { .. }) { Err("refused".into()) } else { Ok(()) }
        });
        assert_eq!(*calls.borrow(), [DriverControl::MaxCacheKb(2048), DriverControl::PollMode { enabled: true, threshold_kb: 4 }]);
        assert_eq!(state.applied.iter().map(|a| a.refused.is_some()).collect::<Vec<_>>(), [false, true]);
        assert!(state.staged.is_empty());
    }

    #[test]
    fn the_cache_setters_are_withheld_from_cufile_versions_that_crash_at_exit() {
        for control in [DriverControl::MaxCacheKb(65536), DriverControl::MaxPinnedMemoryKb(1 << 20)] {
            for version in [Some(1150), Some(1140), None] {
                let why = withheld(control, version).expect("withheld");
                assert!(why.contains("crash at exit") && why.contains("cufile.json"), "{why}");
            }
            assert_eq!(withheld(control, Some(1160)), None, "newer versions are given it");
        }
        assert_eq!(withheld(DriverControl::PollMode { enabled: true, threshold_kb: 8 }, Some(1150)), None);
        assert_eq!(withheld(DriverControl::MaxDirectIoKb(8192), Some(1150)), None);
        assert!(withheld(DriverControl::MaxCacheKb(1), Some(1150)).unwrap().contains("cuFile 1.15 "));
    }

    #[test]
    fn after_the_open_took_them_a_setting_is_refused_as_driver_open() {
        let mut state = State::default();
        state.take(|_| Ok(()));
        let e = state.stage(DriverControl::MaxDirectIoKb(8192), None).unwrap_err();
        assert!(matches!(e, Error::DriverOpen(ref m) if m.contains("before the first device read")), "{e}");
        assert!(state.staged.is_empty() && state.applied.is_empty());
    }

    #[test]
    fn where_cufile_cannot_be_used_a_setting_says_why() {
        let mut state = State::default();
        let unusable = gds::Unusable::new(crate::abi::FallbackReason::CudaUnavailable, "no CUDA device");
        let e = state.stage(DriverControl::MaxPinnedMemoryKb(1 << 20), Some(unusable)).unwrap_err();
        assert!(matches!(e, Error::CufileUnavailable(ref m) if m.contains("no CUDA device")), "{e}");
    }
}
