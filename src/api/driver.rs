//! cuFile's driver as a caller sees it (KvikIO's `DriverProperties`): its properties, and the
//! settings it takes (poll mode, the largest direct I/O, its buffer cache, the pinned-memory
//! limit). Settings apply only if given before cuFile's driver opens in this process
//! (`backend::cufile::driver_settings` says why); after that they are refused with
//! `Error::DriverOpen` (`CUFILE_DRIVER_OPEN`).

use crate::backend::cufile::driver_settings;
use crate::backend::cufile::gds::{self, CufileCall};
use crate::error::{Error, Result};
use crate::sys::cufile::DriverControl;

pub use crate::abi::CufileDriverProperties;

/// cuFile's driver properties, opening the driver if it is not open (under compat mode AUTO or
/// OFF: the process half of the verdict, 0.4 to 0.5 s once per process and cuFile's threads, as
/// `cufile_usable`); the driver settings staged until then are applied first.
///
/// Errors: `CufileUnavailable` under compat mode ON (cuFile is never called) or where cuFile
/// cannot be used (the reason); `Cufile` when `cuFileDriverGetProperties` fails or is missing.
pub fn properties() -> Result<CufileDriverProperties> {
    let compat_mode = crate::settings::global()?.compat_mode();
    if compat_mode == crate::settings::CompatMode::On {
        return Err(Error::CufileUnavailable(gds::Unusable::compat_on().message));
    }
    let gds = gds::process_for(compat_mode).map_err(|u| Error::CufileUnavailable(u.message))?;
    let Some(_call) = CufileCall::enter() else {
        return Err(Error::CufileUnavailable("cuFile was shut down".into()));
    };
    let p = gds.library.properties().map_err(|e| Error::Cufile(e.to_string()))?;
    let (_, applied) = driver_settings::applied();
    let refused = applied.iter().filter(|a| a.refused.is_some()).count() as u64;
    const POLL_MODE: u32 = 1 << 0;
    const ALLOW_COMPAT_MODE: u32 = 1 << 1;
    Ok(CufileDriverProperties {
        struct_size: std::mem::size_of::<CufileDriverProperties>() as u64,
        nvfs_major: p.nvfs_major.into(),
        nvfs_minor: p.nvfs_minor.into(),
        poll_mode: u64::from(p.dcontrolflags & POLL_MODE != 0),
        allow_compat_mode: u64::from(p.dcontrolflags & ALLOW_COMPAT_MODE != 0),
        poll_threshold_kb: p.poll_thresh_size,
        max_direct_io_size_kb: p.max_direct_io_size,
        status_flags: p.dstatusflags.into(),
        control_flags: p.dcontrolflags.into(),
        feature_flags: p.fflags.into(),
        max_device_cache_size_kb: p.max_device_cache_size.into(),
        per_buffer_cache_size_kb: p.per_buffer_cache_size.into(),
        max_device_pinned_mem_size_kb: p.max_device_pinned_mem_size.into(),
        max_batch_io_size: p.max_batch_io_size.into(),
        max_batch_io_timeout_ms: p.max_batch_io_timeout_msecs.into(),
        settings_applied: applied.len() as u64 - refused,
        settings_refused: refused,
    })
}

/// Poll mode (`cuFileDriverSetPollMode`): whether cuFile polls for the completion of I/O of at
/// most `threshold_kb` KiB instead of waiting (KvikIO's `set_nvfs_poll_mode` and
/// `set_nvfs_poll_thresh_size` together, as cuFile takes them).
///
/// Errors (each setter): `DriverOpen` once cuFile's driver opened in this process or began opening
/// (the first device read through cuFile, `begin_device_setup`, `cufile_usable`, `properties`,
/// a buffer registration); `CufileUnavailable` when cuFile is known to be unusable here.
pub fn set_poll_mode(enabled: bool, threshold_kb: usize) -> Result<()> {
    driver_settings::stage(DriverControl::PollMode { enabled, threshold_kb })
}

/// The largest direct I/O nvidia-fs issues, in KiB (`cuFileDriverSetMaxDirectIOSize`).
///
/// Errors: `InvalidArgument` for 0; as `set_poll_mode`.
pub fn set_max_direct_io_size(kb: usize) -> Result<()> {
    driver_settings::stage(DriverControl::MaxDirectIoKb(kb))
}

/// The GPU memory cuFile reserves per device for its bounce buffers, in KiB
/// (`cuFileDriverSetMaxCacheSize`, KvikIO's `set_max_device_cache_size`). Withheld from cuFile 1.15
/// and older at the open (counted in `settings_refused`): given before the open it made processes
/// crash at exit there (docs/local-api.md, "cuFile driver properties").
///
/// Errors: `InvalidArgument` for 0; as `set_poll_mode`.
pub fn set_max_cache_size(kb: usize) -> Result<()> {
    driver_settings::stage(DriverControl::MaxCacheKb(kb))
}

/// The most device memory `cuFileBufRegister` may pin, in KiB
/// (`cuFileDriverSetMaxPinnedMemSize`, KvikIO's `set_max_pinned_memory_size`). Withheld from cuFile
/// 1.15 and older, as `set_max_cache_size`.
///
/// Errors: `InvalidArgument` for 0; as `set_poll_mode`.
pub fn set_max_pinned_memory_size(kb: usize) -> Result<()> {
    driver_settings::stage(DriverControl::MaxPinnedMemoryKb(kb))
}

/// Each setting the driver open applied, in words, with cuFile's refusal if it refused
/// (`gdsroute-diagnose` prints them). Empty before the open or when none was set.
pub fn applied_settings() -> Vec<String> {
    driver_settings::applied_in_words()
}
