//! The one description of every setting: its environment variable and aliases, how its value is
//! parsed and validated, its default, the line that documents it, its getter and setter. The
//! `settings_table!` entries below generate the live values' keys, the table `TABLE` that
//! `Settings::from_env` reads and `gdsroute-diagnose` shows, the typed getters and setters, and
//! `Snapshot`; a new setting is one entry here. The order of the entries is the order in which the
//! environment is read and its errors are reported.

use super::env::Parse;
use super::{
    CompatMode, CufileAsync, CufileFd, StreamOrdered, DEFAULT_AUTO_DIRECT_IO_WRITE, DEFAULT_BOUNCE_BUFFER_SIZE, DEFAULT_GDS_THRESHOLD, DEFAULT_MIN_TASK_SIZE, DEFAULT_TASK_SIZE, MAX_THREADS,
    Settings, default_num_threads, positive, thread_count,
};
use crate::error::Result;

/// How a setting's type is kept in its atomic slot (a `u64`) and shown in reports.
pub(crate) trait Value: Copy {
    fn to_raw(self) -> u64;
    fn from_raw(raw: u64) -> Self;
    fn show(self) -> String;
}

/// `Value` for integers: kept as they are, shown in decimal.
macro_rules! number_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn to_raw(self) -> u64 {
                self as u64
            }
            fn from_raw(raw: u64) -> $t {
                raw as $t
            }
            fn show(self) -> String {
                self.to_string()
            }
        }
    )*};
}

/// `Value` for the C enums of word settings: kept as their C value (an unknown one reads as
/// `$fallback`), shown by name.
macro_rules! word_value {
    ($($t:ident or $fallback:expr),*) => {$(
        impl Value for $t {
            fn to_raw(self) -> u64 {
                self as u64
            }
            fn from_raw(raw: u64) -> $t {
                $t::from_raw(raw as u32).unwrap_or($fallback)
            }
            fn show(self) -> String {
                self.name().to_string()
            }
        }
    )*};
}

number_value!(u64, usize);
word_value!(CompatMode or CompatMode::Auto, CufileFd or CufileFd::default(), CufileAsync or CufileAsync::Tasks, StreamOrdered or StreamOrdered::Auto);

impl Value for bool {
    fn to_raw(self) -> u64 {
        self as u64
    }
    fn from_raw(raw: u64) -> bool {
        raw != 0
    }
    fn show(self) -> String {
        (if self { "on" } else { "off" }).to_string()
    }
}

/// The description of one setting, an entry of `TABLE`.
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    /// Other variables that set the same value (KvikIO's spellings).
    pub aliases: &'static [&'static str],
    /// What it is, in one line (the label `gdsroute-diagnose` gives it).
    pub doc: &'static str,
    pub(super) key: Key,
    pub(super) parse: Parse,
    pub(super) default: fn() -> u64,
    show: fn(u64) -> String,
}

impl Setting {
    /// A value of this setting as reports show it (`on`/`off`, a number, a word).
    pub fn show(&self, raw: u64) -> String {
        (self.show)(raw)
    }
}

/// Generates, from one entry per setting: `Key`, `TABLE`, `Snapshot`, the getters and setters of
/// `Settings` and `Settings::snapshot`. A setter with `checked by` validates its value first and
/// returns `Result<()>`; one without accepts every value of its type.
macro_rules! settings_table {
    ($(
        $key:ident {
            name: $name:literal, aliases: [$($alias:literal),*],
            doc: $doc:literal,
            parse: $parse:expr,
            default: $default:expr,
            get: $get:ident -> $ty:ty,
            set: $set:ident $(checked by $check:expr)?, $set_doc:literal $(,)?
        }
    )*) => {
        /// One setting: the index of its live value, its environment error and its source.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Key { $($key),* }

        /// How many settings there are.
        pub(super) const COUNT: usize = [$(Key::$key),*].len();

        /// Every setting, in the order the environment is read and its errors are reported.
        pub static TABLE: [Setting; COUNT] = [$(Setting {
            name: $name,
            aliases: &[$($alias),*],
            doc: $doc,
            key: Key::$key,
            parse: $parse,
            default: || <$ty as Value>::to_raw($default),
            show: |raw| <$ty as Value>::from_raw(raw).show(),
        }),*];

        /// Every setting's value, copied once at the start of a call so that a concurrent setter
        /// cannot change them halfway.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct Snapshot { $(#[doc = $doc] pub $get: $ty,)* }

        impl Settings {
            $(
                #[doc = $doc]
                pub(crate) fn $get(&self) -> $ty {
                    <$ty as Value>::from_raw(self.raw(Key::$key))
                }
                settings_table!(@set $key $set $ty, $set_doc $(, $check)?);
            )*

            /// The values a call should use now.
            pub(crate) fn snapshot(&self) -> Snapshot {
                Snapshot { $($get: self.$get()),* }
            }
        }
    };
    (@set $key:ident $set:ident $ty:ty, $set_doc:literal) => {
        #[doc = $set_doc]
        pub(crate) fn $set(&self, value: $ty) {
            self.replace(Key::$key, <$ty as Value>::to_raw(value));
        }
    };
    (@set $key:ident $set:ident $ty:ty, $set_doc:literal, $check:expr) => {
        #[doc = $set_doc]
        pub(crate) fn $set(&self, value: $ty) -> Result<()> {
            let check: fn(u64) -> Result<u64> = $check;
            self.replace(Key::$key, check(<$ty as Value>::to_raw(value))?);
            Ok(())
        }
    };
}

settings_table! {
    CompatMode {
        name: "KVIKIO_COMPAT_MODE", aliases: [], doc: "compat mode of handles opened without one",
        parse: Parse::Word {
            parse: |text| CompatMode::parse(text).map(CompatMode::to_raw),
            expected: "one of on/true/yes/1, off/false/no/0, auto (any case)",
        },
        default: CompatMode::Auto, get: compat_mode -> CompatMode,
        set: set_compat_mode, "Changes the compat mode for handles opened from now on (as in KvikIO).",
    }
    NumThreads {
        name: "KVIKIO_NTHREADS", aliases: ["KVIKIO_NUM_THREADS"], doc: "worker threads of the shared pool",
        parse: Parse::Unsigned(1..=MAX_THREADS as u64), default: default_num_threads(), get: num_threads -> usize,
        set: set_num_threads checked by |n| thread_count("number of threads", n),
            "Records a new thread count (1 to `MAX_THREADS`); `crate::io::thread_pool` applies it to the running pool.",
    }
    TaskSize {
        name: "KVIKIO_TASK_SIZE", aliases: [], doc: "bytes per task",
        parse: Parse::Unsigned(1..=isize::MAX as u64), default: DEFAULT_TASK_SIZE, get: task_size -> u64,
        set: set_task_size checked by |v| positive("task size", v), "Sets the bytes per task (> 0).",
    }
    MinTaskSize {
        name: "GDSROUTE_MIN_TASK_SIZE", aliases: [],
        doc: "a parallel read on the POSIX routes smaller than threads x task size is spread over the pool in tasks no smaller than this (0: KvikIO's split)",
        parse: Parse::Unsigned(0..=isize::MAX as u64), default: DEFAULT_MIN_TASK_SIZE, get: min_task_size -> u64,
        set: set_min_task_size, "Sets the smallest task a small read is spread into (0: tasks of the task size only, as KvikIO).",
    }
    GdsThreshold {
        name: "KVIKIO_GDS_THRESHOLD", aliases: [], doc: "GDS threshold in bytes (smaller device requests use the POSIX backend)",
        parse: Parse::Unsigned(0..=u64::MAX), default: DEFAULT_GDS_THRESHOLD, get: gds_threshold -> u64,
        set: set_gds_threshold, "Sets the GDS threshold (0 allowed: every device request may use cuFile).",
    }
    BounceBufferSize {
        name: "KVIKIO_BOUNCE_BUFFER_SIZE", aliases: [], doc: "bytes per pinned bounce buffer",
        parse: Parse::Unsigned(1..=isize::MAX as u64), default: DEFAULT_BOUNCE_BUFFER_SIZE, get: bounce_buffer_size -> u64,
        set: set_bounce_buffer_size checked by |v| positive("bounce buffer size", v),
            "Sets the bounce buffer size (> 0); buffers of the old size are released as they return.",
    }
    CufileStats {
        name: "GDSROUTE_CUFILE_STATS", aliases: [], doc: "cuFile statistics collection (taken when cuFile is first opened)",
        parse: Parse::Bool, default: true, get: cufile_stats -> bool,
        set: set_cufile_stats,
            "Chooses whether cuFile's statistics are collected; effective only before cuFile is opened \
             (the first device read that probes cuFile), since cuFile takes the level at driver open.",
    }
    PageCachePinMax {
        name: "GDSROUTE_PAGE_CACHE_PIN_MAX", aliases: [], doc: "page-cache bytes the registered page cache may pin (0: off)",
        parse: Parse::Unsigned(0..=u64::MAX), default: crate::page_cache::default_pin_max(), get: page_cache_pin_max -> u64,
        set: set_page_cache_pin_max,
            "Sets the pin limit for registrations from now on (0 turns the registered page cache off \
             for new reads; windows already registered stay pinned, unused, until their file changes \
             or its handle closes).",
    }
    CufileFd {
        name: "GDSROUTE_CUFILE_FD", aliases: [], doc: "cuFile descriptor",
        parse: Parse::Word { parse: |text| CufileFd::parse(text).map(CufileFd::to_raw), expected: "auto, direct or buffered (any case)" },
        default: CufileFd::default(), get: cufile_fd -> CufileFd,
        set: set_cufile_fd,
            "Chooses the descriptor for files registered from now on (a handle registers at its first \
             device read that considers cuFile); files already registered keep theirs.",
    }
    AutoDirectIoRead {
        name: "KVIKIO_AUTO_DIRECT_IO_READ", aliases: [], doc: "direct I/O for the page-aligned ranges of POSIX reads",
        parse: Parse::Bool, default: false, get: auto_direct_io_read -> bool,
        set: set_auto_direct_io_read, "Turns direct I/O for POSIX reads on or off, for reads started from now on.",
    }
    AutoDirectIoWrite {
        name: "KVIKIO_AUTO_DIRECT_IO_WRITE", aliases: [], doc: "direct I/O for the whole pages of POSIX writes",
        parse: Parse::Bool, default: DEFAULT_AUTO_DIRECT_IO_WRITE, get: auto_direct_io_write -> bool,
        set: set_auto_direct_io_write, "Turns direct I/O for POSIX writes on or off, for writes started from now on.",
    }
    PrepareAtOpen {
        name: "GDSROUTE_PREPARE_AT_OPEN", aliases: [],
        doc: "a handle opened by a program that uses CUDA prepares the device route in the background",
        parse: Parse::Bool, default: true, get: prepare_at_open -> bool,
        set: set_prepare_at_open,
            "Chooses whether handles opened from now on start, in the background, what the first device \
             read needs (pool streams, bounce buffers, cuFile's verdict and driver open) when the \
             program already uses CUDA; off leaves all of it to the first device read.",
    }
    StreamOrdered {
        name: "GDSROUTE_STREAM_ORDERED", aliases: [],
        doc: "stream-ordered calls queue on their stream without blocking the caller: auto (on streams the legacy default stream does not wait for), on (every stream) or off (KvikIO's blocking fallback)",
        parse: Parse::Word { parse: |text| StreamOrdered::parse(text).map(StreamOrdered::to_raw), expected: "auto, or 1/true/on/yes or 0/false/off/no" },
        default: StreamOrdered::Auto, get: stream_ordered -> StreamOrdered,
        set: set_stream_ordered,
            "Chooses, for stream-ordered calls from now on, between queueing them on their stream (on), \
             queueing them only on streams the legacy default stream does not wait for (auto), and \
             synchronising the stream and moving the bytes on the calling thread, as KvikIO's fallback does (off).",
    }
    StreamRelay {
        name: "GDSROUTE_STREAM_RELAY", aliases: [],
        doc: "under GDSROUTE_STREAM_ORDERED=auto, calls on streams the legacy default stream waits for are relayed (copies or a kernel queued on the stream move the bytes) instead of blocking",
        parse: Parse::Bool, default: true, get: stream_relay -> bool,
        set: set_stream_relay,
            "Chooses, for stream-ordered calls from now on under auto, between relaying those on the legacy and per-thread \
             default streams and on blocking streams (on, the default) and KvikIO's blocking fallback there (off).",
    }
    ThreadPoolPerBlockDevice {
        name: "KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE", aliases: [],
        doc: "handles get the worker pool of the drive that holds their file (one per kind of file system without one)",
        parse: Parse::Bool, default: false, get: thread_pool_per_block_device -> bool,
        set: set_thread_pool_per_block_device,
            "Chooses, for handles opened from now on, between the shared pool (off) and a pool per physical drive (on), as KvikIO.",
    }
    CufileAsync {
        name: "GDSROUTE_CUFILE_ASYNC", aliases: [], doc: "stream-ordered calls cuFile serves: tasks (the engine's stream mode) or native (cuFileReadAsync/WriteAsync on registered streams)",
        parse: Parse::Word { parse: |text| CufileAsync::parse(text).map(CufileAsync::to_raw), expected: "tasks or native (any case)" },
        default: CufileAsync::Tasks, get: cufile_async -> CufileAsync,
        set: set_cufile_async,
            "Chooses how stream-ordered calls that cuFile serves run, for calls and stream registrations from now on.",
    }
}
