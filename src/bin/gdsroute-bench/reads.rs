//! Reads through the library (a file handle, or with `--mapping` a mapping handle): the whole file
//! (`big`) or random reads (`rand4k`, `rand64k`) into device or host memory, warm or cold, in
//! steady state or as the first read of the process, with settings set or the library's defaults;
//! every byte verified after each repetition.

use std::time::Instant;

use cudarc::driver::sys;
use gdsroute::Counters;

use crate::args::{Args, Kind, Mem};
use crate::buffers::{Buffer, Reference, splitmix64, verify_big};
use crate::capi::{self, Handle, Settings};
use crate::cuda;
use crate::measure::{self, Reps, median};
use crate::report::{self, Outcome};

/// One read measurement.
struct Config {
    mem: Mem,
    settings: Settings,
    cache: String,
    kind: Kind,
}

struct Bench {
    args: Args,
    file_size: u64,
    reference: Reference,
    ctx: Option<sys::CUcontext>,
    results: Vec<Outcome>,
}

/// `n` read offsets, multiples of `size`, each read fully inside the file (the same offsets in
/// tools/gpu/bench-kvikio.py).
fn random_offsets(seed: u64, n: usize, size: usize, file_size: u64) -> Vec<u64> {
    let blocks = (file_size / size as u64).max(1);
    let mut state = seed;
    (0..n)
        .map(|_| (splitmix64(&mut state) % blocks) * size as u64)
        .collect()
}

impl Bench {
    /// One workload pass: the whole file, or `rand_reads` random reads split over `callers`
    /// threads (each pread + wait in turn, into its own slot of the buffer). Returns bytes read.
    fn pass(
        &self,
        handle: &Handle,
        buf: usize,
        kind: Kind,
        offsets: &[u64],
    ) -> Result<u64, String> {
        match kind {
            Kind::Big => {
                let got = handle.pread(buf, self.file_size as usize, 0)?;
                gdsroute::trace::event("bench.read_done", got as u64);
                if got as u64 != self.file_size {
                    return Err(format!("short read: {got} of {} bytes", self.file_size));
                }
                Ok(got as u64)
            }
            Kind::Rand(size) => {
                let callers = self.args.callers.min(offsets.len());
                let per = offsets.len().div_ceil(callers);
                let ctx = self.ctx.map(|c| c as usize);
                std::thread::scope(|s| {
                    let workers: Vec<_> = offsets
                        .chunks(per)
                        .enumerate()
                        .map(|(c, chunk)| {
                            s.spawn(move || -> Result<u64, String> {
                                if let Some(ctx) = ctx {
                                    cuda::set_current(ctx as sys::CUcontext)?;
                                }
                                let mut bytes = 0u64;
                                for (i, &off) in chunk.iter().enumerate() {
                                    let slot = c * per + i;
                                    let got = handle.pread(buf + slot * size, size, off)?;
                                    if got != size {
                                        return Err(format!(
                                            "short read at {off}: {got} of {size}"
                                        ));
                                    }
                                    bytes += got as u64;
                                }
                                Ok(bytes)
                            })
                        })
                        .collect();
                    workers
                        .into_iter()
                        .map(|w| w.join().map_err(|_| "caller thread panicked".to_string())?)
                        .sum()
                })
            }
        }
    }

    fn verify(&mut self, buffer: &Buffer, kind: Kind, offsets: &[u64]) -> Result<(), String> {
        let reference = self.reference.get()?;
        match kind {
            Kind::Big => verify_big(reference, buffer)?,
            Kind::Rand(size) => {
                let mut all = vec![0u8; offsets.len() * size];
                buffer.copy_out(0, &mut all)?;
                for (slot, &off) in offsets.iter().enumerate() {
                    let off = off as usize;
                    if all[slot * size..(slot + 1) * size] != reference[off..off + size] {
                        return Err(format!(
                            "verification failed: read {slot} at file offset {off}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn measure(&mut self, cfg: &Config) -> Result<(), String> {
        if cfg.cache == "cold"
            && let Err(why) = measure::drop_caches()
        {
            println!(
                "NOTE cache=cold skipped (mem={} kind={}): cannot drop caches: {why}",
                cfg.mem.name(),
                cfg.kind.name()
            );
            return Ok(());
        }
        cfg.settings.apply()?;
        let opened = Instant::now();
        gdsroute::trace::event("bench.open", 0);
        let mut handle = Handle::open(&self.args.file, "r", cfg.settings.mode.as_deref())?;
        if self.args.mapping {
            handle = handle.with_mapping(&self.args.file)?;
        }
        let open_s = opened.elapsed().as_secs_f64();
        let (def_mode, threads, task) = capi::current_settings();
        let mode = cfg.settings.mode_or(def_mode);
        let first = self.args.first_only;
        let reads = match cfg.kind {
            Kind::Big => 1,
            Kind::Rand(_) => self.args.rand_reads,
        };
        let len = match cfg.kind {
            Kind::Big => self.file_size as usize,
            Kind::Rand(size) => reads * size,
        };
        measure::sleep_ms_from_env("BENCH_OPEN_SLEEP_MS");
        let mut buffer = Buffer::new(cfg.mem, len)?;
        gdsroute::trace::event("bench.allocated", len as u64);
        measure::sleep_ms_from_env("BENCH_ALLOC_SLEEP_MS");
        if self.args.prime_gpu {
            buffer.prime()?;
        }
        let addr = buffer.addr();

        // Steady state: one untimed pass first (pool threads, pinned buffers, cuFile verdict).
        if !first {
            let offsets = match cfg.kind {
                Kind::Big => vec![],
                Kind::Rand(size) => random_offsets(0, reads, size, self.file_size),
            };
            self.pass(&handle, addr, cfg.kind, &offsets)?;
        }

        let before = capi::stats();
        let (reps, rps) = self.timed_reps(&handle, &mut buffer, cfg, reads)?;
        let after = capi::stats();
        // The mapping handle's reads are in no counters.
        let (implementation, route) = match self.args.mapping {
            true => ("gdsroute-mapping", "mapping"),
            false => ("gdsroute", capi::read_route(&before, &after)),
        };
        let extra = self.extra_fields(&before, &after, open_s);
        let r = median(&rps);
        let rps_field = match cfg.kind {
            Kind::Big => "-".to_string(),
            Kind::Rand(_) => format!("{r:.0}"),
        };
        let line = format!(
            "RESULT impl={implementation} mem={} mode={mode} threads={threads} task={task} cache={} kind={} phase={} settings={} callers={} {} reads={reads} route={route} cufile_posix={} cufile_nvfs={}{extra}",
            cfg.mem.name(),
            cfg.cache,
            cfg.kind.name(),
            if first { "first" } else { "steady" },
            self.args.settings_label(),
            match cfg.kind {
                Kind::Big => 1,
                Kind::Rand(_) => self.args.callers.min(reads),
            },
            report::figures(&reps.gbps, &rps_field, median(&reps.cpu)),
            after
                .cufile_n_posix_reads
                .saturating_sub(before.cufile_n_posix_reads),
            after
                .cufile_n_nvfs_reads
                .saturating_sub(before.cufile_n_nvfs_reads),
        );
        report::emit(&mut self.results, line, &reps.gbps, 1, r);
        Ok(())
    }

    /// The timed repetitions of one configuration: per repetition the rate in GB/s and CPU
    /// seconds per GB, and the reads per second, each pass on a poisoned buffer (and dropped
    /// caches when cold) and verified after.
    fn timed_reps(&mut self, handle: &Handle, buffer: &mut Buffer, cfg: &Config, reads: usize) -> Result<(Reps, Vec<f64>), String> {
        let addr = buffer.addr();
        let mut reps = Reps::default();
        let mut rps = Vec::new();
        for rep in 0..self.args.reps {
            let offsets = match cfg.kind {
                Kind::Big => vec![],
                Kind::Rand(size) => random_offsets(rep as u64 + 1, reads, size, self.file_size),
            };
            buffer.poison()?;
            if cfg.cache == "cold" {
                measure::drop_caches()?;
            }
            gdsroute::trace::event("bench.timed", 0);
            let (bytes, secs, cpu_s) = measure::timed(|| self.pass(handle, addr, cfg.kind, &offsets))?;
            self.verify(buffer, cfg.kind, &offsets)?;
            reps.record(bytes as f64, secs, cpu_s);
            rps.push(reads as f64 / secs);
        }
        Ok((reps, rps))
    }

    /// The fields after the figures: pinned memory and the registered page cache, the timed
    /// repetitions' direct and uncached reads, the open call (`report::emit` adds the labels from
    /// the calling script and each repetition's rate).
    fn extra_fields(&self, before: &Counters, after: &Counters, open_s: f64) -> String {
        // Pinned memory and the registered page cache: every counter named *pinned* or *page_cache*
        // (process-wide, after the measurement), and the bytes copied from the registered page
        // cache during the timed repetitions.
        let mut extra = report::counter_fields(after, |name| name.contains("pinned") || name.contains("page_cache"));
        extra.push_str(&format!(" mapped_bytes={}", after.posix_mapped_bytes - before.posix_mapped_bytes));
        // Tasks of the timed repetitions whose data had to come from the disk (src/backend/posix/pread.rs).
        extra.push_str(&format!(" not_cached_tasks={}", after.posix_tasks_not_cached - before.posix_tasks_not_cached));
        // Bytes of the timed repetitions read with direct I/O (KVIKIO_AUTO_DIRECT_IO_READ).
        extra.push_str(&format!(" direct_bytes={}", after.posix_direct_bytes - before.posix_direct_bytes));
        extra.push_str(&format!(" page_cache_pin_max={}", capi::page_cache_pin_max()));
        // The open call itself (it starts the background preparation of the device route).
        extra.push_str(&format!(" open_s={open_s:.6}"));
        if self.args.prime_gpu {
            extra.push_str(" primed=1");
        }
        extra
    }
}

/// The reads over the configuration matrix: per memory kind, workload and cache state, every
/// setting combination; then the table (not with `--first-only`).
pub fn run(args: Args) -> Result<(), String> {
    let gpu = cuda::available();
    let ctx = match (&gpu, args.mems.contains(&Mem::Device)) {
        (Ok(()), true) => Some(cuda::context_of(0)?),
        _ => None,
    };
    let mems = measure::measurable(&args.mems, &gpu);
    let file_size = capi::read_file_size(&args.file)?;
    let reference = Reference::new(&args.file);
    let mut bench = Bench {
        args,
        file_size,
        reference,
        ctx,
        results: Vec::new(),
    };
    println!(
        "# gdsroute-bench {} file={} bytes={file_size} reps={} first_only={} default_settings={}",
        env!("CARGO_PKG_VERSION"),
        bench.args.file,
        bench.args.reps,
        bench.args.first_only,
        bench.args.default_settings
    );

    let a = &bench.args;
    let mut configs = Vec::new();
    for &mem in &mems {
        for &kind in &a.kinds {
            for cache in &a.caches {
                for settings in Settings::matrix(a) {
                    configs.push(Config { mem, settings, cache: cache.clone(), kind });
                }
            }
        }
    }
    let table = a.table && !a.first_only;
    for cfg in &configs {
        bench.measure(cfg)?;
    }
    if table {
        report::print_table(&bench.results);
    }
    print!("{}", gdsroute::trace::dump()); // empty unless built with the `trace` feature
    Ok(())
}
