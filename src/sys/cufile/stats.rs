//! cuFile's own statistics (1.15+), read without fixed structs: the L3 layout grew in 1.19, so
//! `cuFileGetStatsL3` writes into a large zeroed buffer that is parsed at version-based offsets.
//! Only the per-GPU counters are read: they tell which route cuFile took (nvfs, p2p, posix), per
//! GPU (named by its UUID, the first 16 bytes of each entry) and summed over GPUs.

use std::ffi::c_int;

use super::codes::CufileFailure;
use super::driver::{read_u32, read_u64};
use super::library::{CufileLibrary, FnVoid, RawCufileError};

/// First cuFile version with the statistics API.
pub(crate) const STATS_MIN_VERSION: i32 = 1150;
/// First version with the larger L1/L2/L3 structs.
const BIG_LAYOUT_VERSION: i32 = 1190;
/// Per-GPU entries in `CUfileStatsLevel3_t`.
pub(crate) const MAX_GPUS: usize = 16;
const PER_GPU_SIZE: usize = 248;
/// Bytes handed to `cuFileGetStatsL3`: more than the 5112 the largest known layout writes.
const L3_BUFFER: usize = 8192;

/// Whether statistics can be read from the loaded library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsSupport {
    /// All needed symbols exist and the version is 1.15 or later.
    Available,
    /// Why not (a missing symbol, an unknown or too old version).
    MissingApi(String),
}

/// cuFile's per-GPU counters that gdsroute reads, listed once. A row: its meaning, the field of
/// `PerGpuTotals`, its byte offset in cuFile's `CUfilePerGpuStats_t` (docs: cufile-facts §1.2),
/// and the field of `gdsroute_stats` and of `gdsroute_device_stats` that reports it (the two
/// structs name it alike). `for_each_cufile_counter!(apply [args])` expands to
/// `apply! { [args] rows }`, so that `PerGpuTotals`, its parse, delta and sum (below) and the
/// copies into the C structs and their field lists (`stats`) are each written once for all
/// thirteen. A macro rather than a const table of (name, accessor) pairs: the copies assign named
/// fields of three distinct structs, which a table could reach only through one accessor per
/// struct and row, thirteen times over.
macro_rules! for_each_cufile_counter {
    ($apply:ident [$($args:tt)*]) => {
        $apply! { [$($args)*]
            // The read half of CUfilePerGpuStats_t.
            /// Bytes read into GPU memory.
            read_bytes @ 16 => cufile_read_bytes,
            /// Reads of any route.
            n_total_reads @ 48 => cufile_n_total_reads,
            /// Reads through PCIe P2PDMA (no nvidia-fs).
            n_p2p_reads @ 56 => cufile_n_p2p_reads,
            /// Reads through nvidia-fs (real GDS).
            n_nvfs_reads @ 64 => cufile_n_nvfs_reads,
            /// Reads through cuFile's POSIX/compat bounce path.
            n_posix_reads @ 72 => cufile_n_posix_reads,
            /// Reads with an unaligned offset or size.
            n_unaligned_reads @ 80 => cufile_n_unaligned_reads,
            /// Failed reads.
            n_reads_err @ 112 => cufile_n_reads_err,
            // The write half.
            /// Bytes written from GPU memory (cuFile's `writes_bytes`).
            write_bytes @ 120 => cufile_write_bytes_gpu,
            /// Writes of any route.
            n_total_writes @ 152 => cufile_n_total_writes,
            /// Writes through PCIe P2PDMA.
            n_p2p_writes @ 160 => cufile_n_p2p_writes,
            /// Writes through nvidia-fs.
            n_nvfs_writes @ 168 => cufile_n_nvfs_writes,
            /// Writes through cuFile's POSIX/compat bounce path.
            n_posix_writes @ 176 => cufile_n_posix_writes,
            /// Failed writes.
            n_writes_err @ 200 => cufile_n_writes_err,
        }
    };
}
pub(crate) use for_each_cufile_counter;

/// `PerGpuTotals` and its field-wise arithmetic, from the rows of `for_each_cufile_counter`.
macro_rules! per_gpu_totals {
    ([] $(#[$doc:meta] $field:ident @ $offset:literal => $reported_as:ident,)*) => {
        /// cuFile's per-GPU counters of one GPU, or summed over GPUs.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct PerGpuTotals {
            $(#[$doc] pub $field: u64,)*
        }

        impl PerGpuTotals {
            /// `combine` of each counter of `self` and the same counter of `other`.
            fn zip_with(&self, other: &PerGpuTotals, combine: impl Fn(u64, u64) -> u64) -> PerGpuTotals {
                PerGpuTotals { $($field: combine(self.$field, other.$field),)* }
            }

            /// The counters of one `CUfilePerGpuStats_t` entry, `at(offset)` reading its u64s.
            fn parse(at: impl Fn(usize) -> u64) -> PerGpuTotals {
                PerGpuTotals { $($field: at($offset),)* }
            }
        }
    };
}
for_each_cufile_counter!(per_gpu_totals []);

impl PerGpuTotals {
    /// Counters accumulated since `earlier` (saturating at 0, e.g. after someone else's reset).
    /// cuFile's statistics are process-wide, so report deltas, not absolutes.
    pub fn delta_since(&self, earlier: &PerGpuTotals) -> PerGpuTotals {
        self.zip_with(earlier, u64::saturating_sub)
    }

    fn plus(&self, other: &PerGpuTotals) -> PerGpuTotals {
        self.zip_with(other, u64::saturating_add)
    }
}

/// One GPU's entry of `CUfileStatsLevel3_t.per_gpu_stats`: its UUID (`char uuid[16]`, the bytes
/// `cuDeviceGetUuid` gives) and its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// The GPU's UUID as cuFile reports it.
    pub uuid: [u8; 16],
    /// Its counters.
    pub totals: PerGpuTotals,
}

/// Every GPU entry cuFile reported at one moment, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerGpuSnapshot(pub Vec<GpuCounters>);

impl PerGpuSnapshot {
    /// The counters summed over GPUs (saturating).
    pub fn total(&self) -> PerGpuTotals {
        self.0.iter().fold(PerGpuTotals::default(), |sum, g| sum.plus(&g.totals))
    }

    /// Each GPU's counters accumulated since `earlier`: the k-th entry of a UUID is matched with
    /// the k-th earlier entry of the same UUID (one UUID may stand in several entries; a GPU
    /// cuFile did not report then counts from zero; an all-zero UUID, which names no GPU, is
    /// matched by position instead).
    pub fn delta_since(&self, earlier: &PerGpuSnapshot) -> PerGpuSnapshot {
        let deltas = self.0.iter().enumerate().map(|(i, now)| {
            let before = if now.uuid == [0; 16] {
                earlier.0.get(i).filter(|e| e.uuid == [0; 16])
            } else {
                let k = self.0[..i].iter().filter(|e| e.uuid == now.uuid).count();
                earlier.0.iter().filter(|e| e.uuid == now.uuid).nth(k)
            };
            let totals = before.map_or(now.totals, |before| now.totals.delta_since(&before.totals));
            GpuCounters { uuid: now.uuid, totals }
        });
        PerGpuSnapshot(deltas.collect())
    }
}

/// Offsets of `num_gpus` and `per_gpu_stats` in `CUfileStatsLevel3_t` for a library version.
pub(crate) fn l3_offsets(version: i32) -> (usize, usize) {
    if version >= BIG_LAYOUT_VERSION {
        (1136, 1144)
    } else {
        (1024, 1032)
    }
}

/// The per-GPU entries of an L3 buffer written by a library of `version`, in cuFile's order.
/// `num_gpus` is clamped to 16.
pub(crate) fn parse_l3_per_gpu(buf: &[u8], version: i32) -> PerGpuSnapshot {
    let (num_at, gpus_at) = l3_offsets(version);
    let n = (read_u32(buf, num_at) as usize).min(MAX_GPUS);
    let entries = (0..n).map(|g| {
        let e = gpus_at + g * PER_GPU_SIZE;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&buf[e..e + 16]);
        let totals = PerGpuTotals::parse(|offset| read_u64(buf, e + offset));
        GpuCounters { uuid, totals }
    });
    PerGpuSnapshot(entries.collect())
}

/// The per-GPU counters of an L3 buffer summed over GPUs (`parse_l3_per_gpu(..).total()`).
#[cfg(test)] // the engine parses per GPU (`parse_l3_per_gpu`); the tests check the totals
pub(crate) fn parse_l3(buf: &[u8], version: i32) -> PerGpuTotals {
    parse_l3_per_gpu(buf, version).total()
}

/// The statistics calls of a library whose [`CufileLibrary::stats_support`] is `Available`.
/// Obtain it with [`CufileLibrary::stats`].
#[derive(Clone, Copy, Debug)]
pub struct CufileStats<'lib> {
    lib: &'lib CufileLibrary,
    version: i32,
}

/// A statistics symbol of the library, or the failure naming it missing.
fn symbol<F>(f: Option<F>, name: &'static str) -> Result<F, CufileFailure> {
    f.ok_or(CufileFailure::missing(name))
}

/// Calls an argument-less cuFile function, or reports it missing.
fn call_void(f: Option<FnVoid>, name: &'static str) -> Result<(), CufileFailure> {
    let f = symbol(f, name)?;
    // SAFETY: a symbol resolved from libcufile with this signature; it takes no arguments.
    check(name, unsafe { f() })
}

fn check(context: &'static str, r: RawCufileError) -> Result<(), CufileFailure> {
    if r.err == 0 {
        Ok(())
    } else {
        Err(CufileFailure::code(context, r.err, r.cu_err))
    }
}

impl CufileLibrary {
    /// Whether this library's statistics can be used: needs `cuFileGetVersion` ≥ 1150 and the
    /// symbols cuFileSetStatsLevel, cuFileStatsStart, cuFileStatsReset, cuFileGetStatsL3.
    pub fn stats_support(&self) -> StatsSupport {
        let s = &self.sym;
        let missing = [
            (s.set_stats_level.is_none(), "cuFileSetStatsLevel"),
            (s.stats_start.is_none(), "cuFileStatsStart"),
            (s.stats_reset.is_none(), "cuFileStatsReset"),
            (s.get_stats_l3.is_none(), "cuFileGetStatsL3"),
        ];
        if let Some(name) = missing.into_iter().find_map(|(missing, name)| missing.then_some(name)) {
            return StatsSupport::MissingApi(format!("libcufile {} lacks {name}", self.version_string()));
        }
        match self.version() {
            None => StatsSupport::MissingApi(
                "libcufile version unknown; stats layout cannot be chosen".into(),
            ),
            Some(v) if v < STATS_MIN_VERSION => StatsSupport::MissingApi(format!(
                "libcufile {} is older than 1.15",
                self.version_string()
            )),
            Some(_) => StatsSupport::Available,
        }
    }

    /// The statistics API, or `None` unless [`CufileLibrary::stats_support`] is `Available`.
    pub fn stats(&self) -> Option<CufileStats<'_>> {
        match (self.stats_support(), self.version()) {
            (StatsSupport::Available, Some(version)) => Some(CufileStats { lib: self, version }),
            _ => None,
        }
    }
}

impl CufileStats<'_> {
    /// `cuFileSetStatsLevel` (0 off … 3 per-GPU). Works before the driver opens, which is when
    /// it should be called; overrides `profile.cufile_stats` from cufile.json.
    /// Errors: 5022 for a level outside 0–3.
    pub fn set_level(&self, level: i32) -> Result<(), CufileFailure> {
        let f = symbol(self.lib.sym.set_stats_level, "cuFileSetStatsLevel")?;
        // SAFETY: plain integer argument; symbol present (checked by `stats()`).
        check("cuFileSetStatsLevel", unsafe { f(level as c_int) })
    }

    /// `cuFileGetStatsLevel` (the staged level before open).
    pub fn level(&self) -> Result<i32, CufileFailure> {
        let f = symbol(self.lib.sym.get_stats_level, "cuFileGetStatsLevel")?;
        let mut level: c_int = 0;
        // SAFETY: `level` is a valid writable int for the call.
        check("cuFileGetStatsLevel", unsafe { f(&mut level) })?;
        Ok(level)
    }

    /// `cuFileStatsStart`. Errors: 5001 before the driver is open.
    pub fn start(&self) -> Result<(), CufileFailure> {
        call_void(self.lib.sym.stats_start, "cuFileStatsStart")
    }

    /// `cuFileStatsStop`. gdsroute never calls it: with cuFile 1.15 it unmaps the statistics
    /// segment while cuFile's statistics thread still writes into it (docs/exit.md).
    pub fn stop(&self) -> Result<(), CufileFailure> {
        call_void(self.lib.sym.stats_stop, "cuFileStatsStop")
    }

    /// `cuFileStatsReset` (process-wide: it also resets counters other cuFile users see).
    /// Errors: 5001 before the driver is open.
    pub fn reset(&self) -> Result<(), CufileFailure> {
        call_void(self.lib.sym.stats_reset, "cuFileStatsReset")
    }

    /// `cuFileGetStatsL3`, summed over GPUs. Host-memory reads never appear here.
    /// Errors: 5001 before the driver is open; 5022 when the level is below 3.
    pub fn read_per_gpu_totals(&self) -> Result<PerGpuTotals, CufileFailure> {
        self.read_per_gpu().map(|s| s.total())
    }

    /// `cuFileGetStatsL3`, each GPU's entry with its UUID.
    /// Errors: as `read_per_gpu_totals`.
    pub fn read_per_gpu(&self) -> Result<PerGpuSnapshot, CufileFailure> {
        let f = symbol(self.lib.sym.get_stats_l3, "cuFileGetStatsL3")?;
        #[repr(C, align(8))]
        struct Buf([u8; L3_BUFFER]);
        let mut buf = Box::new(Buf([0; L3_BUFFER]));
        // SAFETY: the buffer is zeroed, 8-aligned, writable and 8 KiB, larger than every known
        // `CUfileStatsLevel3_t` (5000 bytes before 1.19, 5112 from 1.19).
        check("cuFileGetStatsL3", unsafe { f(buf.0.as_mut_ptr().cast()) })?;
        Ok(parse_l3_per_gpu(&buf.0, self.version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(buf: &mut [u8], at: usize, v: u64) {
        buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn offsets_follow_the_version() {
        assert_eq!(l3_offsets(1150), (1024, 1032));
        assert_eq!(l3_offsets(1180), (1024, 1032));
        assert_eq!(l3_offsets(1190), (1136, 1144));
        assert_eq!(l3_offsets(1200), (1136, 1144));
    }

    #[test]
    fn parse_sums_gpus_and_clamps() {
        let mut buf = vec![0u8; L3_BUFFER];
        buf[1024..1028].copy_from_slice(&2u32.to_ne_bytes());
        for g in 0..2 {
            let e = 1032 + g * PER_GPU_SIZE;
            put(&mut buf, e + 16, 4096);
            put(&mut buf, e + 48, 3);
            put(&mut buf, e + 72, 2);
            put(&mut buf, e + 64, 1);
            put(&mut buf, e + 112, 7);
            put(&mut buf, e + 120, 100);
            put(&mut buf, e + 152, 5);
            put(&mut buf, e + 168, 4);
            put(&mut buf, e + 176, 1);
            put(&mut buf, e + 200, 9);
        }
        let t = parse_l3(&buf, 1150);
        assert_eq!(
            (
                t.read_bytes,
                t.n_total_reads,
                t.n_posix_reads,
                t.n_nvfs_reads,
                t.n_reads_err
            ),
            (8192, 6, 4, 2, 14)
        );
        assert_eq!((t.write_bytes, t.n_total_writes, t.n_nvfs_writes, t.n_posix_writes, t.n_p2p_writes, t.n_writes_err), (200, 10, 8, 2, 0, 18));
        // Read with the 1.19 layout the same bytes mean nothing.
        assert_eq!(parse_l3(&buf, 1190), PerGpuTotals::default());
        // A bogus GPU count is clamped instead of reading past the buffer.
        buf[1024..1028].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse_l3(&buf, 1150).n_total_reads, 6);
    }

    #[test]
    fn each_gpu_keeps_its_uuid_and_its_own_counters() {
        let mut buf = vec![0u8; L3_BUFFER];
        buf[1136..1140].copy_from_slice(&3u32.to_ne_bytes());
        for g in 0..3 {
            let e = 1144 + g * PER_GPU_SIZE;
            buf[e..e + 16].copy_from_slice(&[0x10 + g as u8; 16]);
            put(&mut buf, e + 16, 1000 * (g as u64 + 1));
            put(&mut buf, e + 48, g as u64 + 1);
            put(&mut buf, e + 64, g as u64);
            put(&mut buf, e + 168, 7 * g as u64);
        }
        let s = parse_l3_per_gpu(&buf, 1190);
        assert_eq!(s.0.len(), 3);
        assert_eq!(s.0.iter().map(|g| g.uuid[0]).collect::<Vec<_>>(), [0x10, 0x11, 0x12]);
        assert_eq!(s.0.iter().map(|g| (g.totals.read_bytes, g.totals.n_total_reads, g.totals.n_nvfs_reads, g.totals.n_nvfs_writes)).collect::<Vec<_>>(), [(1000, 1, 0, 0), (2000, 2, 1, 7), (3000, 3, 2, 14)]);
        assert_eq!((s.total().read_bytes, s.total().n_total_reads, s.total().n_nvfs_writes), (6000, 6, 21));
        assert_eq!(parse_l3(&buf, 1190), s.total());
    }

    #[test]
    fn per_gpu_deltas_follow_the_uuid_not_the_position() {
        let gpu = |id: u8, reads: u64| GpuCounters { uuid: [id; 16], totals: PerGpuTotals { n_total_reads: reads, ..Default::default() } };
        let before = PerGpuSnapshot(vec![gpu(1, 5), gpu(2, 10)]);
        // cuFile lists the GPUs in another order and reports a third one it did not before.
        let now = PerGpuSnapshot(vec![gpu(2, 12), gpu(3, 4), gpu(1, 9)]);
        let d = now.delta_since(&before);
        assert_eq!(d.0, vec![gpu(2, 2), gpu(3, 4), gpu(1, 4)]);
        assert_eq!(d.total().n_total_reads, 10);
        // All-zero UUIDs name no GPU: matched by position.
        let anon = |reads| GpuCounters { uuid: [0; 16], totals: PerGpuTotals { n_total_reads: reads, ..Default::default() } };
        assert_eq!(PerGpuSnapshot(vec![anon(7), anon(9)]).delta_since(&PerGpuSnapshot(vec![anon(3), anon(9)])).0, vec![anon(4), anon(0)]);
        // One UUID in two entries: each matched with its own earlier entry, so nothing that did
        // not happen is counted (the first match of the UUID counted 1 read here).
        let same = PerGpuSnapshot(vec![gpu(1, 2), gpu(1, 3)]);
        assert_eq!(same.delta_since(&same).total().n_total_reads, 0);
        let later = PerGpuSnapshot(vec![gpu(1, 4), gpu(1, 3), gpu(1, 6)]);
        assert_eq!(later.delta_since(&same).0, vec![gpu(1, 2), gpu(1, 0), gpu(1, 6)]);
    }

    #[test]
    fn delta_saturates() {
        let a = PerGpuTotals {
            n_total_reads: 5,
            read_bytes: 10,
            ..Default::default()
        };
        let b = PerGpuTotals {
            n_total_reads: 8,
            read_bytes: 4,
            ..Default::default()
        };
        let d = b.delta_since(&a);
        assert_eq!((d.n_total_reads, d.read_bytes), (3, 0));
    }
}
