//! Process-wide settings, KvikIO-equivalent: read from the environment once, at the first call
//! that needs them, and changeable at run time through setters (atomics, so thread-safe). A bad
//! environment value never aborts: every call that needs settings returns it as an error, until
//! a setter replaces that setting's value (each setting keeps its own environment error).
//!
//! Each setting is described once, in `table` (variable, aliases, parse, default, doc line,
//! getter and setter); this module keeps the live values that table describes. `env` reads the
//! variables, by one rule for every value.

mod compat_mode;
mod cufile_async;
mod cufile_fd;
pub(crate) mod env;
mod stream_ordered;
mod table;
mod threads;

pub(crate) use compat_mode::CompatMode;
pub(crate) use cufile_async::CufileAsync;
#[allow(unreachable_pub)] // the public surface (src/lib.rs, src/api/) re-exports these through this path
pub use cufile_fd::{Descriptor, FdChoice};
pub(crate) use cufile_fd::CufileFd;
pub(crate) use stream_ordered::StreamOrdered;
#[allow(unreachable_pub)] // the public surface (src/lib.rs, src/api/) re-exports these through this path
pub use table::{Setting, TABLE};
pub(crate) use table::Snapshot;

use crate::direction::Direction;
use crate::error::{Error, Result};
use env::EnvSource;
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, Ordering};
use table::{COUNT, Key};

/// KvikIO's default task size: 4 MiB.
pub const DEFAULT_TASK_SIZE: u64 = 4 << 20;
/// KvikIO's default GDS threshold: 16 KiB.
pub const DEFAULT_GDS_THRESHOLD: u64 = 16 << 10;
/// Default of `GDSROUTE_MIN_TASK_SIZE`: a read on the POSIX routes smaller than the pool's share
/// (threads x task size) is spread over the pool in tasks no smaller than this (docs/routing.md,
/// "Small reads spread over the pool").
pub const DEFAULT_MIN_TASK_SIZE: u64 = 256 << 10;
/// KvikIO's default bounce buffer: 16 MiB.
pub const DEFAULT_BOUNCE_BUFFER_SIZE: u64 = 16 << 20;
/// Default of `KVIKIO_AUTO_DIRECT_IO_WRITE`. KvikIO's is on; ours is off: measured on the H200
/// machine and on the evidence from Lustre, docs/writes.md "Direct-I/O writes".
pub const DEFAULT_AUTO_DIRECT_IO_WRITE: bool = false;
/// Upper bound on worker threads; a guard against typos such as 100000.
pub const MAX_THREADS: usize = 1024;

/// Default worker count. KvikIO defaults to 1 thread, its best-known performance trap
/// (kvikio#453): one thread copies ~6 GB/s out of the page cache. A process alone gets one thread
/// per usable core, at least 4 (reads block in the kernel, so a 2-core box still gains from
/// overlap) and at most 16 (measured plateau of page-cache reads on a 16-core GPU server). A rank
/// of an MPI job gets its share of the node: the CPUs its launcher bound it to, or the node's CPUs
/// divided by the ranks on the node (from the launcher's variables), 2 to 16. Decided once per
/// process; the rule and its reasons: `threads::choose`, docs/routing.md, "The thread count".
pub fn default_num_threads() -> usize {
    threads::process().threads
}

/// How this process's default thread count was made (local ranks, CPUs, the share), for reports.
pub(crate) fn thread_default() -> &'static threads::ThreadDefault {
    threads::process()
}

/// Where a setting's current value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The built-in default.
    Default,
    /// An environment variable.
    Environment,
    /// A setter call.
    Api,
}

impl Source {
    /// Every source, by its number in `Settings::sources`.
    const ALL: [Source; 3] = [Source::Default, Source::Environment, Source::Api];

    /// Lower-case name for messages and JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Environment => "environment",
            Source::Api => "api",
        }
    }
}

impl Snapshot {
    /// Whether POSIX tasks of `direction` take their aligned middle through `O_DIRECT`
    /// (`KVIKIO_AUTO_DIRECT_IO_READ`, `KVIKIO_AUTO_DIRECT_IO_WRITE`).
    pub(crate) fn direct_io(&self, direction: Direction) -> bool {
        match direction {
            Direction::Read => self.auto_direct_io_read,
            Direction::Write => self.auto_direct_io_write,
        }
    }
}

// `unrepaired` keeps one bit per setting.
const _: () = assert!(COUNT <= 16);

/// The live settings: one value and one source per entry of `TABLE`, in its order.
pub(crate) struct Settings {
    /// Each setting's value as `table::Value` keeps it.
    values: [AtomicU64; COUNT],
    /// Where each value came from (`Source::ALL` index).
    sources: [AtomicU8; COUNT],
    /// The message of each setting whose environment variable was bad (fixed at start).
    env_errors: [Option<String>; COUNT],
    /// The settings of `env_errors` no setter has replaced yet (one bit per `Key`).
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

/// A setter's thread count: 1 to `MAX_THREADS`.
fn thread_count(what: &str, value: u64) -> Result<u64> {
    if value == 0 || value > MAX_THREADS as u64 {
        return Err(Error::InvalidSetting(format!("{what} {value}: out of range (1 to {MAX_THREADS})")));
    }
    Ok(value)
}

impl Settings {
    /// Builds settings from an environment, validating every variable; the first bad one (in
    /// `TABLE` order) is the error.
    #[cfg(test)]
    pub(crate) fn from_env(env: &dyn EnvSource) -> Result<Settings> {
        let settings = Settings::from_env_keeping_errors(env);
        settings.check()?;
        Ok(settings)
    }

    /// Builds settings from an environment; a bad variable leaves its setting at the default and
    /// its error kept, returned by `check` until a setter replaces the value.
    pub(crate) fn from_env_keeping_errors(env: &dyn EnvSource) -> Settings {
        let mut env_errors: [Option<String>; COUNT] = Default::default();
        let read: [Option<u64>; COUNT] = std::array::from_fn(|i| {
            let setting = &TABLE[i];
            let parse = |env: &dyn EnvSource, name: &str| env::read(env, name, &setting.parse);
            env::read_with_aliases(env, setting.name, setting.aliases, parse).unwrap_or_else(|e| {
                env_errors[i] = Some(e.to_string());
                None
            })
        });
        let unrepaired = (0..COUNT).filter(|&i| env_errors[i].is_some()).fold(0u16, |bits, i| bits | 1 << i);
        Settings {
            values: std::array::from_fn(|i| AtomicU64::new(read[i].unwrap_or_else(TABLE[i].default))),
            sources: std::array::from_fn(|i| {
                AtomicU8::new(if read[i].is_some() { Source::Environment } else { Source::Default } as u8)
            }),
            env_errors,
            unrepaired: AtomicU16::new(unrepaired),
        }
    }

    /// The error of the first setting whose environment variable was bad and that no setter has
    /// replaced since; `Ok` when there is none.
    pub(crate) fn check(&self) -> Result<()> {
        let unrepaired = self.unrepaired.load(Ordering::Relaxed);
        match (0..COUNT).find(|i| unrepaired & (1 << i) != 0) {
            None => Ok(()),
            Some(i) => Err(Error::InvalidSetting(self.env_errors[i].clone().unwrap_or_default())),
        }
    }

    /// The raw value of `key` (typed by its getter).
    fn raw(&self, key: Key) -> u64 {
        self.values[key as usize].load(Ordering::Relaxed)
    }

    /// A setter's value for `key`: stored, its source the API, its environment error repaired.
    fn replace(&self, key: Key, raw: u64) {
        self.values[key as usize].store(raw, Ordering::Relaxed);
        self.sources[key as usize].store(Source::Api as u8, Ordering::Relaxed);
        self.unrepaired.fetch_and(!(1 << key as u16), Ordering::Relaxed);
    }

    /// `setting`'s current value as reports show it.
    pub(crate) fn shown(&self, setting: &Setting) -> String {
        setting.show(self.raw(setting.key))
    }

    /// Where `setting`'s current value came from.
    pub(crate) fn source(&self, setting: &Setting) -> Source {
        Source::ALL[self.sources[setting.key as usize].load(Ordering::Relaxed) as usize]
    }

    /// Where `setting`'s value came from as reports show it: the source's name, and for the
    /// default thread count how it was made ("default, rank-aware: ...").
    pub(crate) fn source_shown(&self, setting: &Setting) -> String {
        match self.source(setting) {
            Source::Default if setting.key == Key::NumThreads => format!("default, {}", thread_default().describe()),
            source => source.name().to_string(),
        }
    }

    /// Where the compat mode came from.
    pub(crate) fn compat_mode_source(&self) -> Source {
        self.source(&TABLE[Key::CompatMode as usize])
    }
}

static GLOBAL: OnceCell<Settings> = OnceCell::new();

/// The process-wide settings as setters change them, reading the environment on first use, bad
/// variables or not.
pub(crate) fn live() -> &'static Settings {
    GLOBAL.get_or_init(|| {
        let settings = Settings::from_env_keeping_errors(&env::ProcessEnv);
        settings.log_read();
        settings
    })
}

impl Settings {
    /// Logs what the environment gave each setting (debug) and each bad variable (warn).
    fn log_read(&self) {
        use crate::log::{Level, log};
        for (i, setting) in TABLE.iter().enumerate() {
            if let Some(error) = &self.env_errors[i] {
                log(Level::Warn, || format!("setting {}: {error}; calls fail until a setter replaces it", setting.name));
            }
            log(Level::Debug, || format!("setting {} = {} ({})", setting.name, setting.show(self.raw(setting.key)), self.source_shown(setting)));
        }
    }
}

/// The process-wide settings, reading the environment on first use. While a variable is bad and
/// no setter has replaced its setting, this (and so every call that needs settings) fails with
/// that variable's message.
pub(crate) fn global() -> Result<&'static Settings> {
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
        assert_eq!(s.num_threads(), default_num_threads());
        assert!((2..=16).contains(&s.num_threads()));
        assert_eq!(s.compat_mode_source(), Source::Default);
        assert_eq!(s.cufile_fd(), CufileFd::Auto);
        assert!(!snap.auto_direct_io_read, "off by default, as in KvikIO");
        assert_eq!(snap.auto_direct_io_write, DEFAULT_AUTO_DIRECT_IO_WRITE);
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
        assert!(s.snapshot().auto_direct_io_read);
        assert_eq!(s.snapshot().auto_direct_io_write, !DEFAULT_AUTO_DIRECT_IO_WRITE);
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
    fn the_table_is_in_key_order_with_one_name_each() {
        for (i, setting) in TABLE.iter().enumerate() {
            assert_eq!(setting.key as usize, i, "{}", setting.name);
        }
        let mut names: Vec<&str> = TABLE.iter().flat_map(|s| std::iter::once(s.name).chain(s.aliases.iter().copied())).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a variable names two settings");
    }

    #[test]
    fn setter_errors_say_what_and_the_range() {
        let s = Settings::from_env(&MapEnv::of(&[])).unwrap();
        assert_eq!(s.set_task_size(0).unwrap_err().to_string(), "task size 0: must be a positive integer");
        let huge = isize::MAX as u64 + 1;
        assert_eq!(s.set_bounce_buffer_size(huge).unwrap_err().to_string(), format!("bounce buffer size {huge}: out of range (max {})", isize::MAX));
        assert_eq!(s.set_num_threads(0).unwrap_err().to_string(), "number of threads 0: out of range (1 to 1024)");
        assert_eq!(s.source(&TABLE[2]), Source::Default);
        s.set_task_size(1 << 20).unwrap();
        assert_eq!((s.source(&TABLE[2]), s.shown(&TABLE[2])), (Source::Api, "1048576".to_string()));
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
        assert!(s.snapshot().auto_direct_io_read);
    }
}
