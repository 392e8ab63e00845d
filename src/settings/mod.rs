//! Process-wide settings, KvikIO-equivalent: read from the environment once, at the first call
//! that needs them, and changeable at run time through setters (atomics, so thread-safe). A bad
//! environment value never aborts: every call that needs settings returns it as an error.

mod compat_mode;
mod cufile_fd;
pub mod env;

pub use compat_mode::CompatMode;
pub use cufile_fd::{CufileFd, Descriptor, FdChoice};

use crate::error::{Error, Result};
use env::EnvSource;
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// Environment variable names (KvikIO's).
pub mod vars {
    /// Compat mode: on/off/auto.
    pub const COMPAT_MODE: &str = "KVIKIO_COMPAT_MODE";
    /// Worker threads.
    pub const NTHREADS: &str = "KVIKIO_NTHREADS";
    /// Alias of `NTHREADS`.
    pub const NUM_THREADS: &str = "KVIKIO_NUM_THREADS";
    /// Bytes per parallel task.
    pub const TASK_SIZE: &str = "KVIKIO_TASK_SIZE";
    /// Device requests smaller than this go to the POSIX backend.
    pub const GDS_THRESHOLD: &str = "KVIKIO_GDS_THRESHOLD";
    /// Size of each pinned bounce buffer.
    pub const BOUNCE_BUFFER_SIZE: &str = "KVIKIO_BOUNCE_BUFFER_SIZE";
    /// POSIX reads of page-aligned ranges through an `O_DIRECT` descriptor (default off).
    pub const AUTO_DIRECT_IO_READ: &str = "KVIKIO_AUTO_DIRECT_IO_READ";
    /// gdsroute's own: collect cuFile's statistics (default on).
    pub const CUFILE_STATS: &str = "GDSROUTE_CUFILE_STATS";
    /// gdsroute's own: most page-cache bytes the registered page cache may pin (0 = off).
    pub const PAGE_CACHE_PIN_MAX: &str = "GDSROUTE_PAGE_CACHE_PIN_MAX";
    /// gdsroute's own: which descriptor cuFile is given: auto/direct/buffered.
    pub const CUFILE_FD: &str = "GDSROUTE_CUFILE_FD";
}

/// KvikIO's default task size: 4 MiB.
pub const DEFAULT_TASK_SIZE: u64 = 4 << 20;
/// KvikIO's default GDS threshold: 16 KiB.
pub const DEFAULT_GDS_THRESHOLD: u64 = 16 << 10;
/// KvikIO's default bounce buffer: 16 MiB.
pub const DEFAULT_BOUNCE_BUFFER_SIZE: u64 = 16 << 20;
/// Upper bound on worker threads; a guard against typos such as 100000.
pub const MAX_THREADS: usize = 1024;

/// Default worker count. KvikIO defaults to 1 thread, its best-known performance trap
/// (kvikio#453): one thread copies ~6 GB/s out of the page cache. We use one thread per core,
/// at least 4 (reads block in the kernel, so a 2-core box still gains from overlap) and at most
/// 16 (measured plateau of page-cache reads on a 16-core GPU server).
pub fn default_num_threads() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4);
    cores.clamp(4, 16)
}

/// Where a setting's current value came from.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default = 0,
    /// An environment variable.
    Environment = 1,
    /// A setter call.
    Api = 2,
}

impl Source {
    fn from_u8(v: u8) -> Source {
        match v {
            1 => Source::Environment,
            2 => Source::Api,
            _ => Source::Default,
        }
    }

    /// Lower-case name for messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Environment => "environment",
            Source::Api => "api",
        }
    }
}

/// The values a read uses, copied once at the start of the call so that a concurrent setter
/// cannot change them halfway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Compat mode for handles opened without an explicit one.
    pub compat_mode: CompatMode,
    /// Bytes per task.
    pub task_size: u64,
    /// Device requests below this size use the POSIX backend.
    pub gds_threshold: u64,
    /// Bytes per pinned bounce buffer.
    pub bounce_buffer_size: u64,
    /// Most page-cache bytes the registered page cache may pin; 0 turns it off.
    pub page_cache_pin_max: u64,
    /// POSIX reads take page-aligned ranges with direct I/O (`direct_io`).
    pub direct_io_read: bool,
}

/// The live settings.
pub struct Settings {
    compat_mode: AtomicU8,
    compat_mode_source: AtomicU8,
    num_threads: AtomicUsize,
    task_size: AtomicU64,
    gds_threshold: AtomicU64,
    bounce_buffer_size: AtomicU64,
    cufile_stats: AtomicBool,
    page_cache_pin_max: AtomicU64,
    cufile_fd: AtomicU8,
    auto_direct_io_read: AtomicBool,
}

fn positive(name: &str, value: u64) -> Result<u64> {
    if value == 0 {
        return Err(Error::InvalidSetting(format!("{name} must be a positive integer, got 0")));
    }
    if value > isize::MAX as u64 {
        return Err(Error::InvalidSetting(format!("{name}={value} exceeds the address space")));
    }
    Ok(value)
}

fn thread_count(name: &str, value: u64) -> Result<usize> {
    if value == 0 || value > MAX_THREADS as u64 {
        return Err(Error::InvalidSetting(format!(
            "{name}={value}: the number of threads must be between 1 and {MAX_THREADS}"
        )));
    }
    Ok(value as usize)
}

impl Settings {
    /// Builds settings from an environment, validating every variable.
    pub fn from_env(env: &dyn EnvSource) -> Result<Settings> {
        let compat = env::read_compat_mode(env, vars::COMPAT_MODE)?;
        let threads = env::read_unsigned_with_alias(env, vars::NTHREADS, vars::NUM_THREADS, false)?
            .map(|n| thread_count(vars::NTHREADS, n))
            .transpose()?;
        let task = env::read_unsigned(env, vars::TASK_SIZE, false)?.map(|v| positive(vars::TASK_SIZE, v)).transpose()?;
        let threshold = env::read_unsigned(env, vars::GDS_THRESHOLD, true)?;
        let bounce = env::read_unsigned(env, vars::BOUNCE_BUFFER_SIZE, false)?
            .map(|v| positive(vars::BOUNCE_BUFFER_SIZE, v))
            .transpose()?;
        let cufile_stats = env::read_bool(env, vars::CUFILE_STATS)?;
        let pin_max = env::read_unsigned(env, vars::PAGE_CACHE_PIN_MAX, true)?;
        let cufile_fd = env::read_word(env, vars::CUFILE_FD, CufileFd::parse, "auto, direct or buffered (any case)")?;
        let direct_io_read = env::read_bool(env, vars::AUTO_DIRECT_IO_READ)?;
        let source = if compat.is_some() { Source::Environment } else { Source::Default };
        Ok(Settings {
            compat_mode: AtomicU8::new(compat.unwrap_or(CompatMode::Auto) as u8),
            compat_mode_source: AtomicU8::new(source as u8),
            num_threads: AtomicUsize::new(threads.unwrap_or_else(default_num_threads)),
            task_size: AtomicU64::new(task.unwrap_or(DEFAULT_TASK_SIZE)),
            gds_threshold: AtomicU64::new(threshold.unwrap_or(DEFAULT_GDS_THRESHOLD)),
            bounce_buffer_size: AtomicU64::new(bounce.unwrap_or(DEFAULT_BOUNCE_BUFFER_SIZE)),
            cufile_stats: AtomicBool::new(cufile_stats.unwrap_or(true)),
            page_cache_pin_max: AtomicU64::new(pin_max.unwrap_or_else(crate::page_cache::default_pin_max)),
            cufile_fd: AtomicU8::new(cufile_fd.unwrap_or_default() as u8),
            auto_direct_io_read: AtomicBool::new(direct_io_read.unwrap_or(false)),
        })
    }

    /// The values a read should use now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            compat_mode: self.compat_mode(),
            task_size: self.task_size.load(Ordering::Relaxed),
            gds_threshold: self.gds_threshold.load(Ordering::Relaxed),
            bounce_buffer_size: self.bounce_buffer_size.load(Ordering::Relaxed),
            page_cache_pin_max: self.page_cache_pin_max.load(Ordering::Relaxed),
            direct_io_read: self.auto_direct_io_read(),
        }
    }

    /// Current process-wide compat mode.
    pub fn compat_mode(&self) -> CompatMode {
        CompatMode::from_raw(self.compat_mode.load(Ordering::Relaxed) as u32).unwrap_or(CompatMode::Auto)
    }

    /// Where the compat mode came from.
    pub fn compat_mode_source(&self) -> Source {
        Source::from_u8(self.compat_mode_source.load(Ordering::Relaxed))
    }

    /// Changes the compat mode for handles opened from now on (as in KvikIO).
    pub fn set_compat_mode(&self, mode: CompatMode) {
        self.compat_mode.store(mode as u8, Ordering::Relaxed);
        self.compat_mode_source.store(Source::Api as u8, Ordering::Relaxed);
    }

    /// Worker threads of the shared pool.
    pub fn num_threads(&self) -> usize {
        self.num_threads.load(Ordering::Relaxed)
    }

    /// Records a new thread count; `crate::thread_pool` applies it to the running pool.
    pub fn set_num_threads(&self, n: usize) -> Result<()> {
        let n = thread_count("number of threads", n as u64)?;
        self.num_threads.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes per task.
    pub fn task_size(&self) -> u64 {
        self.task_size.load(Ordering::Relaxed)
    }

    /// Sets the bytes per task (> 0).
    pub fn set_task_size(&self, v: u64) -> Result<()> {
        self.task_size.store(positive("task size", v)?, Ordering::Relaxed);
        Ok(())
    }

    /// GDS threshold in bytes.
    pub fn gds_threshold(&self) -> u64 {
        self.gds_threshold.load(Ordering::Relaxed)
    }

    /// Sets the GDS threshold (0 allowed: every device request may use cuFile).
    pub fn set_gds_threshold(&self, v: u64) {
        self.gds_threshold.store(v, Ordering::Relaxed);
    }

    /// Bytes per pinned bounce buffer.
    pub fn bounce_buffer_size(&self) -> u64 {
        self.bounce_buffer_size.load(Ordering::Relaxed)
    }

    /// Sets the bounce buffer size (> 0); buffers of the old size are released as they return.
    pub fn set_bounce_buffer_size(&self, v: u64) -> Result<()> {
        self.bounce_buffer_size.store(positive("bounce buffer size", v)?, Ordering::Relaxed);
        Ok(())
    }
}

impl Settings {
    /// Whether cuFile's statistics are turned on when cuFile is first opened.
    pub fn cufile_stats(&self) -> bool {
        self.cufile_stats.load(Ordering::Relaxed)
    }

    /// Chooses whether cuFile's statistics are collected; effective only before cuFile is opened
    /// (the first device read that probes cuFile), since cuFile takes the level at driver open.
    pub fn set_cufile_stats(&self, on: bool) {
        self.cufile_stats.store(on, Ordering::Relaxed);
    }

    /// Most page-cache bytes the registered page cache may pin (0: off).
    pub fn page_cache_pin_max(&self) -> u64 {
        self.page_cache_pin_max.load(Ordering::Relaxed)
    }

    /// Sets the pin limit for registrations from now on (0 turns the registered page cache off
    /// for new reads; windows already registered stay pinned, unused, until their file changes
    /// or its handle closes).
    pub fn set_page_cache_pin_max(&self, bytes: u64) {
        self.page_cache_pin_max.store(bytes, Ordering::Relaxed);
    }

    /// Which descriptor cuFile is given when a file is registered.
    pub fn cufile_fd(&self) -> CufileFd {
        CufileFd::from_raw(self.cufile_fd.load(Ordering::Relaxed) as u32).unwrap_or_default()
    }

    /// Whether POSIX reads take page-aligned ranges with direct I/O (KvikIO's
    /// `auto_direct_io_read`, default off).
    pub fn auto_direct_io_read(&self) -> bool {
        self.auto_direct_io_read.load(Ordering::Relaxed)
    }

    /// Turns direct I/O for POSIX reads on or off, for reads started from now on.
    pub fn set_auto_direct_io_read(&self, on: bool) {
        self.auto_direct_io_read.store(on, Ordering::Relaxed);
    }

    /// Chooses the descriptor for files registered from now on (a handle registers at its first
    /// device read that considers cuFile); files already registered keep theirs.
    pub fn set_cufile_fd(&self, fd: CufileFd) {
        self.cufile_fd.store(fd as u8, Ordering::Relaxed);
    }
}

static GLOBAL: OnceCell<std::result::Result<Settings, String>> = OnceCell::new();

/// The process-wide settings, reading the environment on first use. A bad variable makes this
/// (and so every call that needs settings) fail with the same message for the process lifetime.
pub fn global() -> Result<&'static Settings> {
    GLOBAL
        .get_or_init(|| Settings::from_env(&env::ProcessEnv).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|msg| Error::InvalidSetting(msg.clone()))
}

#[cfg(test)]
mod tests {
    use super::env::tests::MapEnv;
    use super::*;

    #[test]
    fn defaults_match_kvikio_except_threads() {
        let s = Settings::from_env(&MapEnv::of(&[])).unwrap();
        let snap = s.snapshot();
        assert_eq!(snap.compat_mode, CompatMode::Auto);
        assert_eq!(snap.task_size, 4 << 20);
        assert_eq!(snap.gds_threshold, 16 << 10);
        assert_eq!(snap.bounce_buffer_size, 16 << 20);
        assert_eq!(snap.page_cache_pin_max, crate::page_cache::default_pin_max());
        assert!(snap.page_cache_pin_max <= 16 << 30);
        assert!((4..=16).contains(&s.num_threads()));
        assert_eq!(s.compat_mode_source(), Source::Default);
        assert_eq!(s.cufile_fd(), CufileFd::Auto);
        assert!(!snap.direct_io_read, "off by default, as in KvikIO");
    }

    #[test]
    fn environment_values_apply() {
        let env = MapEnv::of(&[
            ("KVIKIO_COMPAT_MODE", "on"),
            ("KVIKIO_NUM_THREADS", "3"),
            ("KVIKIO_TASK_SIZE", "3221225472"),
            ("KVIKIO_GDS_THRESHOLD", "0"),
            ("KVIKIO_BOUNCE_BUFFER_SIZE", "65536"),
            ("GDSROUTE_PAGE_CACHE_PIN_MAX", "0"),
            ("GDSROUTE_CUFILE_FD", " Buffered "),
            ("KVIKIO_AUTO_DIRECT_IO_READ", "On"),
        ]);
        let s = Settings::from_env(&env).unwrap();
        assert_eq!(s.compat_mode(), CompatMode::On);
        assert_eq!(s.compat_mode_source(), Source::Environment);
        assert_eq!(s.num_threads(), 3);
        assert_eq!(s.task_size(), 3 << 30);
        assert_eq!(s.gds_threshold(), 0);
        assert_eq!(s.bounce_buffer_size(), 65536);
        assert_eq!(s.page_cache_pin_max(), 0);
        assert_eq!(s.cufile_fd(), CufileFd::Buffered);
        assert!(s.snapshot().direct_io_read);
    }

    #[test]
    fn bad_environment_values_are_errors() {
        for (k, v) in [
            ("KVIKIO_TASK_SIZE", "4MiB"),
            ("KVIKIO_TASK_SIZE", "0"),
            ("KVIKIO_NTHREADS", "0"),
            ("KVIKIO_NTHREADS", "100000"),
            ("KVIKIO_BOUNCE_BUFFER_SIZE", "-1"),
            ("KVIKIO_GDS_THRESHOLD", ""),
            ("KVIKIO_COMPAT_MODE", "sometimes"),
            ("GDSROUTE_CUFILE_STATS", "maybe"),
            ("GDSROUTE_PAGE_CACHE_PIN_MAX", "1GiB"),
            ("GDSROUTE_PAGE_CACHE_PIN_MAX", "-5"),
            ("GDSROUTE_CUFILE_FD", "o_direct"),
            ("GDSROUTE_CUFILE_FD", ""),
            ("GDSROUTE_CUFILE_FD", "1"),
            ("KVIKIO_AUTO_DIRECT_IO_READ", "2"),
            ("KVIKIO_AUTO_DIRECT_IO_READ", "enabled"),
        ] {
            let err = Settings::from_env(&MapEnv::of(&[(k, v)])).err().unwrap_or_else(|| panic!("{k}={v}"));
            assert!(matches!(err, Error::InvalidSetting(_)));
            assert!(err.to_string().contains(k), "{err}");
        }
    }

    #[test]
    fn setters_validate() {
        let s = Settings::from_env(&MapEnv::of(&[])).unwrap();
        assert!(s.set_task_size(0).is_err());
        assert!(s.set_bounce_buffer_size(0).is_err());
        assert!(s.set_num_threads(0).is_err());
        assert!(s.set_num_threads(MAX_THREADS + 1).is_err());
        s.set_task_size(5 << 30).unwrap();
        assert_eq!(s.task_size(), 5 << 30);
        s.set_compat_mode(CompatMode::Off);
        assert_eq!(s.compat_mode_source(), Source::Api);
        s.set_cufile_fd(CufileFd::Direct);
        assert_eq!(s.cufile_fd(), CufileFd::Direct);
        s.set_auto_direct_io_read(true);
        assert!(s.snapshot().direct_io_read);
    }
}
