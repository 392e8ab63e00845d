//! Process-wide settings, KvikIO-equivalent: read from the environment once, at the first call
//! that needs them, and changeable at run time through setters (atomics, so thread-safe). A bad
//! environment value never aborts: every call that needs settings returns it as an error, until
//! a setter replaces that setting's value (each setting keeps its own environment error).

mod compat_mode;
mod cufile_fd;
pub mod env;

pub use compat_mode::CompatMode;
pub use cufile_fd::{CufileFd, Descriptor, FdChoice};

use crate::direction::Direction;
use crate::error::{Error, Result};
use env::EnvSource;
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU64, AtomicUsize, Ordering};

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
    /// POSIX writes of the whole pages inside a range through an `O_DIRECT` descriptor
    /// (`DEFAULT_AUTO_DIRECT_IO_WRITE`).
    pub const AUTO_DIRECT_IO_WRITE: &str = "KVIKIO_AUTO_DIRECT_IO_WRITE";
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
/// Default of `KVIKIO_AUTO_DIRECT_IO_WRITE`. KvikIO's is on; ours is off: measured on the H200
/// machine and on the evidence from Lustre, docs/writes.md "Direct-I/O writes".
pub const DEFAULT_AUTO_DIRECT_IO_WRITE: bool = false;
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
    /// POSIX writes take the whole pages of their range with direct I/O (`direct_io`).
    pub direct_io_write: bool,
}

impl Snapshot {
    /// Whether POSIX tasks of `direction` take their aligned middle through `O_DIRECT`
    /// (`KVIKIO_AUTO_DIRECT_IO_READ`, `KVIKIO_AUTO_DIRECT_IO_WRITE`).
    pub fn direct_io(&self, direction: Direction) -> bool {
        match direction {
            Direction::Read => self.direct_io_read,
            Direction::Write => self.direct_io_write,
        }
    }
}

/// One setting, for the environment error it may carry. The order is the order in which the
/// environment is read and errors are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    CompatMode,
    NumThreads,
    TaskSize,
    GdsThreshold,
    BounceBufferSize,
    CufileStats,
    PageCachePinMax,
    CufileFd,
    AutoDirectIoRead,
    AutoDirectIoWrite,
}

const KEYS: usize = 10;

impl Key {
    fn bit(self) -> u16 {
        1 << self as u16
    }
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
    auto_direct_io_write: AtomicBool,
    /// The message of each setting whose environment variable was bad (fixed at start).
    env_errors: [Option<String>; KEYS],
    /// The settings of `env_errors` no setter has replaced yet (`Key::bit`s).
    unrepaired: AtomicU16,
}

/// A setter's value from the API: positive, and addressable.
fn positive(what: &str, value: u64) -> Result<u64> {
    if value == 0 {
        return Err(Error::InvalidSetting(format!("{what} 0: must be a positive integer")));
    }
    if value > isize::MAX as u64 {
        return Err(Error::InvalidSetting(format!("{what} {value}: out of range (max {})", isize::MAX)));
    }
    Ok(value)
}

fn thread_count(what: &str, value: u64) -> Result<usize> {
    if value == 0 || value > MAX_THREADS as u64 {
        return Err(Error::InvalidSetting(format!("{what} {value}: out of range (1 to {MAX_THREADS})")));
    }
    Ok(value as usize)
}

/// Keeps a setting's environment error in `errors` and gives the default (`None`) instead.
fn keep<T>(errors: &mut [Option<String>; KEYS], key: Key, read: Result<Option<T>>) -> Option<T> {
    read.unwrap_or_else(|e| {
        errors[key as usize] = Some(e.to_string());
        None
    })
}

impl Settings {
    /// Builds settings from an environment, validating every variable; the first bad one (in
    /// `Key` order) is the error.
    pub fn from_env(env: &dyn EnvSource) -> Result<Settings> {
        let settings = Settings::from_env_keeping_errors(env);
        settings.check()?;
        Ok(settings)
    }

    /// Builds settings from an environment; a bad variable leaves its setting at the default and
    /// its error kept, returned by `check` until a setter replaces the value.
    pub fn from_env_keeping_errors(env: &dyn EnvSource) -> Settings {
        let mut errors: [Option<String>; KEYS] = Default::default();
        let e = &mut errors;
        let sizes = 1..=isize::MAX as u64;
        let compat = keep(e, Key::CompatMode, env::read_compat_mode(env, vars::COMPAT_MODE));
        let threads = keep(
            e,
            Key::NumThreads,
            env::read_with_alias(env, vars::NTHREADS, vars::NUM_THREADS, |env, name| {
                env::read_unsigned(env, name, 1..=MAX_THREADS as u64)
            }),
        );
        let task = keep(e, Key::TaskSize, env::read_unsigned(env, vars::TASK_SIZE, sizes.clone()));
        let threshold = keep(e, Key::GdsThreshold, env::read_unsigned(env, vars::GDS_THRESHOLD, 0..=u64::MAX));
        let bounce = keep(e, Key::BounceBufferSize, env::read_unsigned(env, vars::BOUNCE_BUFFER_SIZE, sizes));
        let cufile_stats = keep(e, Key::CufileStats, env::read_bool(env, vars::CUFILE_STATS));
        let pin_max = keep(e, Key::PageCachePinMax, env::read_unsigned(env, vars::PAGE_CACHE_PIN_MAX, 0..=u64::MAX));
        let cufile_fd = keep(
            e,
            Key::CufileFd,
            env::read_word(env, vars::CUFILE_FD, CufileFd::parse, "auto, direct or buffered (any case)"),
        );
        let direct_io_read = keep(e, Key::AutoDirectIoRead, env::read_bool(env, vars::AUTO_DIRECT_IO_READ));
        let direct_io_write = keep(e, Key::AutoDirectIoWrite, env::read_bool(env, vars::AUTO_DIRECT_IO_WRITE));
        let unrepaired = errors.iter().enumerate().filter(|(_, m)| m.is_some()).fold(0u16, |bits, (i, _)| bits | 1 << i);
        let source = if compat.is_some() { Source::Environment } else { Source::Default };
        Settings {
            compat_mode: AtomicU8::new(compat.unwrap_or(CompatMode::Auto) as u8),
            compat_mode_source: AtomicU8::new(source as u8),
            num_threads: AtomicUsize::new(threads.map_or_else(default_num_threads, |n| n as usize)),
            task_size: AtomicU64::new(task.unwrap_or(DEFAULT_TASK_SIZE)),
            gds_threshold: AtomicU64::new(threshold.unwrap_or(DEFAULT_GDS_THRESHOLD)),
            bounce_buffer_size: AtomicU64::new(bounce.unwrap_or(DEFAULT_BOUNCE_BUFFER_SIZE)),
            cufile_stats: AtomicBool::new(cufile_stats.unwrap_or(true)),
            page_cache_pin_max: AtomicU64::new(pin_max.unwrap_or_else(crate::page_cache::default_pin_max)),
            cufile_fd: AtomicU8::new(cufile_fd.unwrap_or_default() as u8),
            auto_direct_io_read: AtomicBool::new(direct_io_read.unwrap_or(false)),
            auto_direct_io_write: AtomicBool::new(direct_io_write.unwrap_or(DEFAULT_AUTO_DIRECT_IO_WRITE)),
            env_errors: errors,
            unrepaired: AtomicU16::new(unrepaired),
        }
    }

    /// The error of the first setting whose environment variable was bad and that no setter has
    /// replaced since; `Ok` when there is none.
    pub fn check(&self) -> Result<()> {
        let unrepaired = self.unrepaired.load(Ordering::Relaxed);
        match (0..KEYS).find(|i| unrepaired & (1 << i) != 0) {
            None => Ok(()),
            Some(i) => Err(Error::InvalidSetting(self.env_errors[i].clone().unwrap_or_default())),
        }
    }

    /// A setter replaced `key`'s value: its environment error no longer applies.
    fn repaired(&self, key: Key) {
        self.unrepaired.fetch_and(!key.bit(), Ordering::Relaxed);
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
            direct_io_write: self.auto_direct_io_write(),
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
        self.repaired(Key::CompatMode);
    }

    /// Worker threads of the shared pool.
    pub fn num_threads(&self) -> usize {
        self.num_threads.load(Ordering::Relaxed)
    }

    /// Records a new thread count; `crate::io::thread_pool` applies it to the running pool.
    pub fn set_num_threads(&self, n: usize) -> Result<()> {
        let n = thread_count("number of threads", n as u64)?;
        self.num_threads.store(n, Ordering::Relaxed);
        self.repaired(Key::NumThreads);
        Ok(())
    }

    /// Bytes per task.
    pub fn task_size(&self) -> u64 {
        self.task_size.load(Ordering::Relaxed)
    }

    /// Sets the bytes per task (> 0).
    pub fn set_task_size(&self, v: u64) -> Result<()> {
        self.task_size.store(positive("task size", v)?, Ordering::Relaxed);
        self.repaired(Key::TaskSize);
        Ok(())
    }

    /// GDS threshold in bytes.
    pub fn gds_threshold(&self) -> u64 {
        self.gds_threshold.load(Ordering::Relaxed)
    }

    /// Sets the GDS threshold (0 allowed: every device request may use cuFile).
    pub fn set_gds_threshold(&self, v: u64) {
        self.gds_threshold.store(v, Ordering::Relaxed);
        self.repaired(Key::GdsThreshold);
    }

    /// Bytes per pinned bounce buffer.
    pub fn bounce_buffer_size(&self) -> u64 {
        self.bounce_buffer_size.load(Ordering::Relaxed)
    }

    /// Sets the bounce buffer size (> 0); buffers of the old size are released as they return.
    pub fn set_bounce_buffer_size(&self, v: u64) -> Result<()> {
        self.bounce_buffer_size.store(positive("bounce buffer size", v)?, Ordering::Relaxed);
        self.repaired(Key::BounceBufferSize);
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
        self.repaired(Key::CufileStats);
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
        self.repaired(Key::PageCachePinMax);
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
        self.repaired(Key::AutoDirectIoRead);
    }

    /// Whether POSIX writes take the whole pages of their range with direct I/O (KvikIO's
    /// `auto_direct_io_write`; default `DEFAULT_AUTO_DIRECT_IO_WRITE`).
    pub fn auto_direct_io_write(&self) -> bool {
        self.auto_direct_io_write.load(Ordering::Relaxed)
    }

    /// Turns direct I/O for POSIX writes on or off, for writes started from now on.
    pub fn set_auto_direct_io_write(&self, on: bool) {
        self.auto_direct_io_write.store(on, Ordering::Relaxed);
        self.repaired(Key::AutoDirectIoWrite);
    }

    /// Chooses the descriptor for files registered from now on (a handle registers at its first
    /// device read that considers cuFile); files already registered keep theirs.
    pub fn set_cufile_fd(&self, fd: CufileFd) {
        self.cufile_fd.store(fd as u8, Ordering::Relaxed);
        self.repaired(Key::CufileFd);
    }
}

static GLOBAL: OnceCell<Settings> = OnceCell::new();

/// The process-wide settings as setters change them, reading the environment on first use, bad
/// variables or not.
pub fn live() -> &'static Settings {
    GLOBAL.get_or_init(|| Settings::from_env_keeping_errors(&env::ProcessEnv))
}

/// The process-wide settings, reading the environment on first use. While a variable is bad and
/// no setter has replaced its setting, this (and so every call that needs settings) fails with
/// that variable's message.
pub fn global() -> Result<&'static Settings> {
    let settings = live();
    settings.check()?;
    Ok(settings)
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
        assert_eq!(snap.direct_io_write, DEFAULT_AUTO_DIRECT_IO_WRITE);
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
            ("KVIKIO_AUTO_DIRECT_IO_WRITE", if DEFAULT_AUTO_DIRECT_IO_WRITE { "0" } else { "1" }),
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
        assert_eq!(s.snapshot().direct_io_write, !DEFAULT_AUTO_DIRECT_IO_WRITE);
        assert!(s.snapshot().direct_io(Direction::Read));
        assert_eq!(s.snapshot().direct_io(Direction::Write), !DEFAULT_AUTO_DIRECT_IO_WRITE);
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
            assert!(err.to_string().starts_with(&format!("{k}={v:?}: ")), "{err}");
        }
    }

    #[test]
    fn aliased_thread_counts_compare_by_value() {
        // Issue 15: KVIKIO_NTHREADS=4 with KVIKIO_NUM_THREADS=04 (or " 4") was a conflict.
        for alias in ["4", "04", " 4", "+4"] {
            let env = MapEnv::of(&[("KVIKIO_NTHREADS", "4"), ("KVIKIO_NUM_THREADS", alias)]);
            let s = Settings::from_env(&env).unwrap_or_else(|e| panic!("{alias:?}: {e}"));
            assert_eq!(s.num_threads(), 4);
        }
        let env = MapEnv::of(&[("KVIKIO_NTHREADS", "4"), ("KVIKIO_NUM_THREADS", "5")]);
        let err = Settings::from_env(&env).err().unwrap().to_string();
        assert!(err.contains("KVIKIO_NUM_THREADS=\"5\" conflicts"), "{err}");
    }

    #[test]
    fn overflowing_digits_say_out_of_range() {
        let env = MapEnv::of(&[("KVIKIO_NTHREADS", "99999999999999999999")]);
        let err = Settings::from_env(&env).err().unwrap().to_string();
        assert_eq!(err, "KVIKIO_NTHREADS=\"99999999999999999999\": out of range (max 1024)");
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "99999999999999999999")]);
        let err = Settings::from_env(&env).err().unwrap().to_string();
        assert_eq!(err, format!("KVIKIO_TASK_SIZE=\"99999999999999999999\": out of range (max {})", isize::MAX));
        let env = MapEnv::of(&[("KVIKIO_NTHREADS", "1025")]);
        assert_eq!(Settings::from_env(&env).err().unwrap().to_string(), "KVIKIO_NTHREADS=\"1025\": out of range (max 1024)");
    }

    #[test]
    fn a_setter_replaces_a_bad_variable_and_only_that_one() {
        // Issue 15: after one bad variable every setter failed too, so a program could not repair
        // its own settings.
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "4MiB"), ("KVIKIO_COMPAT_MODE", "sometimes"), ("KVIKIO_NTHREADS", "0")]);
        let s = Settings::from_env_keeping_errors(&env);
        assert!(s.check().unwrap_err().to_string().starts_with("KVIKIO_COMPAT_MODE="));
        assert!(s.set_task_size(0).is_err(), "an invalid value repairs nothing");
        s.set_task_size(1 << 20).unwrap();
        assert_eq!(s.task_size(), 1 << 20);
        assert!(s.check().unwrap_err().to_string().starts_with("KVIKIO_COMPAT_MODE="));
        s.set_compat_mode(CompatMode::On);
        assert!(s.check().unwrap_err().to_string().starts_with("KVIKIO_NTHREADS="));
        s.set_num_threads(2).unwrap();
        s.check().unwrap();
        assert_eq!((s.compat_mode(), s.num_threads()), (CompatMode::On, 2));
        // Every setting can be repaired by its own setter.
        let all = [
            ("KVIKIO_COMPAT_MODE", "x"),
            ("KVIKIO_NUM_THREADS", "x"),
            ("KVIKIO_TASK_SIZE", "x"),
            ("KVIKIO_GDS_THRESHOLD", "x"),
            ("KVIKIO_BOUNCE_BUFFER_SIZE", "x"),
            ("GDSROUTE_CUFILE_STATS", "x"),
            ("GDSROUTE_PAGE_CACHE_PIN_MAX", "x"),
            ("GDSROUTE_CUFILE_FD", "x"),
            ("KVIKIO_AUTO_DIRECT_IO_READ", "x"),
            ("KVIKIO_AUTO_DIRECT_IO_WRITE", "x"),
        ];
        let s = Settings::from_env_keeping_errors(&MapEnv::of(&all));
        let setters: [&dyn Fn(&Settings); 10] = [
            &|s| s.set_compat_mode(CompatMode::Auto),
            &|s| s.set_num_threads(3).unwrap(),
            &|s| s.set_task_size(4096).unwrap(),
            &|s| s.set_gds_threshold(0),
            &|s| s.set_bounce_buffer_size(4096).unwrap(),
            &|s| s.set_cufile_stats(false),
            &|s| s.set_page_cache_pin_max(0),
            &|s| s.set_cufile_fd(CufileFd::Buffered),
            &|s| s.set_auto_direct_io_read(true),
            &|s| s.set_auto_direct_io_write(true),
        ];
        for ((var, _), set) in all.iter().zip(setters) {
            let err = s.check().unwrap_err().to_string();
            assert!(err.starts_with(&format!("{var}=")), "{var}: {err}");
            set(&s);
        }
        s.check().unwrap();
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
