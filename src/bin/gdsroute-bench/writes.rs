//! Writes (`--write`): the library's writes from device or host memory over the configuration
//! matrix, and (`--ceiling`, `--ceiling-direct`) what plain `pwrite` from pinned memory reaches
//! on the same file system; every file read back and verified.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;

use gdsroute::Counters;

use crate::args::{Args, Mem, Open};
use crate::buffers::{Buffer, HostMemory, fill_random, verify_written};
use crate::capi::{self, Handle, Settings};
use crate::cuda;
use crate::measure::{self, Reps, median};
use crate::report::{self, Outcome};

/// Bytes per piece of the ceiling's writers (the library's default task size).
const PIECE: usize = 4 << 20;

/// `shm` for a file on tmpfs (`/dev/shm`), else `disk`: the file system a write line is about.
fn fs_label(path: &str) -> String {
    let dir = Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(c_dir) = CString::new(dir.as_os_str().as_bytes()) else {
        return "disk".into();
    };
    // SAFETY: a zeroed statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable buffer.
    let ok = unsafe { libc::statfs(c_dir.as_ptr(), &mut st) } == 0;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    if ok && st.f_type as i64 == TMPFS_MAGIC { "shm" } else { "disk" }.into()
}

/// The direct-I/O write setting the library was given, as the lines report it: the variable
/// `KVIKIO_AUTO_DIRECT_IO_WRITE` read as the library reads booleans (1/true/on/yes or
/// 0/false/off/no, any case), `default` when it is unset, else its value as given. The scripts set
/// it per process for both libraries; the bench never calls the setting's setter.
fn direct_write_setting() -> String {
    match std::env::var("KVIKIO_AUTO_DIRECT_IO_WRITE") {
        Err(_) => "default".into(),
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => "1".into(),
            "0" | "false" | "off" | "no" => "0".into(),
            other => format!("invalid:{}", other.split_whitespace().collect::<Vec<_>>().join("_")),
        },
    }
}

fn remove_if_there(path: &str) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("remove {path}: {e}")),
        _ => Ok(()),
    }
}

/// Before a measurement's first write: no file for `w`, an empty one for `r+` (which does not
/// create).
fn prepare_file(path: &str, open: Open) -> Result<(), String> {
    remove_if_there(path)?;
    if open == Open::Rewrite {
        std::fs::File::create(path).map_err(|e| format!("create {path}: {e}"))?;
    }
    Ok(())
}

/// Removes the written file when the run ends, however it ends.
struct RemoveAtEnd(String);

impl Drop for RemoveAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The write measurements through the library.
struct Writes<'a> {
    args: &'a Args,
    fs: &'a str,
    /// The bytes every timed write writes, random, made on the host once.
    data: HostMemory,
    /// One source buffer per memory kind, allocated once.
    sources: Vec<(Mem, Buffer)>,
}

impl Writes<'_> {
    /// One configuration: untimed, the library's first write (from the poisoned source: it
    /// starts the pool threads and pinned buffers, makes the cuFile verdict, and for `r+`
    /// writes the file that the repetitions rewrite, its pages cached unless direct writes
    /// bypassed the cache), then the data copied into the source; then `--reps` timed writes
    /// (`pwrite` + wait only; `w` removes the file and opens a new one before each, `r+` reopens
    /// the same), each optionally followed by a timed `fsync`; then the file verified.
    fn measure(&mut self, mem: Mem, settings: &Settings, open: Open, results: &mut Vec<Outcome>) -> Result<(), String> {
        settings.apply()?;
        let path = self.args.file.as_str();
        let size = self.args.size;
        let mode = settings.mode.as_deref();
        let buffer = &mut self.sources.iter_mut().find(|(m, _)| *m == mem).ok_or("no source buffer")?.1;
        let src = buffer.addr();
        buffer.poison()?;
        prepare_file(path, open)?;
        let first = Handle::open(path, open.flag(), mode)?.pwrite(src, size, 0)?;
        if first != size {
            return Err(format!("first write: {first} of {size} bytes"));
        }
        buffer.upload(&self.data)?;
        let (def_mode, threads, task) = capi::current_settings();

        let before = capi::stats();
        let mut reps = Reps::default();
        let (mut open_s, mut sync_s) = (Vec::new(), Vec::new());
        for _ in 0..self.args.reps {
            if open == Open::New {
                remove_if_there(path)?;
            }
            let opened = Instant::now();
            let handle = Handle::open(path, open.flag(), mode)?;
            open_s.push(opened.elapsed().as_secs_f64());
            let (done, secs, cpu_s) = measure::timed(|| handle.pwrite(src, size, 0))?;
            if done != size {
                return Err(format!("short write: {done} of {size} bytes"));
            }
            if self.args.sync {
                let t1 = Instant::now();
                handle.sync()?;
                sync_s.push(t1.elapsed().as_secs_f64());
            }
            drop(handle);
            reps.record(size as f64, secs, cpu_s);
        }
        let after = capi::stats();
        let source = &*buffer;
        verify_written(path, |off, dst| source.copy_out(off, dst), &self.data)?;

        let mode = settings.mode_or(def_mode);
        // The write counters of the timed repetitions: tasks, bytes per route, and any counter
        // of direct-I/O writes the library has (none before KVIKIO_AUTO_DIRECT_IO_WRITE).
        let delta = |name: &str| {
            let pick = |c: &Counters| c.entries().iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
            pick(&after).saturating_sub(pick(&before))
        };
        let mut counters = String::new();
        let direct_names = after.entries().into_iter().map(|(n, _)| n).filter(|n| n.contains("direct") && n.contains("write"));
        for name in ["write_tasks", "posix_write_bytes", "cufile_write_bytes"].into_iter().chain(direct_names) {
            counters.push_str(&format!(" {name}={}", delta(name)));
        }
        let pinned = report::counter_fields(&after, |name| name.starts_with("pinned"));
        let sync = if self.args.sync { format!(" sync_s={:.4}", median(&sync_s)) } else { String::new() };
        let line = format!(
            "RESULT impl=gdsroute dir=write mem={} fs={} open={} direct_write={} mode={mode} threads={threads} task={task} kind=big phase=steady settings={} callers=1 {} writes=1 bytes={size} route={}{counters}{pinned} open_s={:.6}{sync}",
            mem.name(),
            self.fs,
            open.flag(),
            direct_write_setting(),
            self.args.settings_label(),
            report::figures(&reps.gbps, "-", median(&reps.cpu)),
            capi::write_route(&before, &after),
            median(&open_s),
        );
        report::emit(results, line, &reps.gbps, 2, f64::NAN);
        Ok(())
    }
}

/// The library's writes: per memory kind, every setting combination, each open mode.
fn library_writes(args: &Args, fs: &str, mems: &[Mem], results: &mut Vec<Outcome>) -> Result<(), String> {
    let mut data = HostMemory::new(args.size)?;
    fill_random(&mut data);
    let mut sources = Vec::new();
    for &mem in mems {
        sources.push((mem, Buffer::new(mem, args.size)?));
    }
    let mut writes = Writes { args, fs, data, sources };
    for &mem in mems {
        for settings in Settings::matrix(args) {
            for &open in &args.opens {
                writes.measure(mem, &settings, open, results)?;
            }
        }
    }
    Ok(())
}

/// `pwrite` of all of `buf` at `offset`, continuing short writes and retrying `EINTR`.
fn pwrite_all(fd: std::os::fd::RawFd, buf: &[u8], offset: u64) -> Result<(), String> {
    let mut done = 0usize;
    while done < buf.len() {
        let at = offset + done as u64;
        // SAFETY: the range lies inside buf.
        let n = unsafe { libc::pwrite(fd, buf[done..].as_ptr().cast(), buf.len() - done, at as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("pwrite at {at}: {e}"));
        }
        if n == 0 {
            return Err(format!("pwrite at {at} wrote 0 bytes"));
        }
        done += n as usize;
    }
    Ok(())
}

/// `threads` threads each write their contiguous share of `[0, size)` (a whole number of 4 MiB
/// pieces, the last share shorter) with plain `pwrite`, piece by piece; the piece at file
/// offset `o` comes from `src[o..]`, or, when `src` is shorter than `size` (one piece of poison
/// for the untimed first write), from the start of `src` each time. The threads are started
/// first and released together: returns the wall and CPU seconds from the release to the last
/// thread's end.
fn parallel_pwrite(fd: std::os::fd::RawFd, src: &[u8], size: usize, threads: usize) -> Result<(f64, f64), String> {
    let share = size.div_ceil(threads).div_ceil(PIECE) * PIECE;
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                s.spawn(move || -> Result<(), String> {
                    start.wait();
                    let (begin, end) = ((i * share).min(size), ((i + 1) * share).min(size));
                    let mut off = begin;
                    while off < end {
                        let n = PIECE.min(end - off);
                        let from = if src.len() >= size { off } else { 0 };
                        pwrite_all(fd, &src[from..from + n], off as u64)?;
                        off += n;
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        let (results, secs, cpu_s) = measure::timed(|| {
            Ok(workers.into_iter().map(|w| w.join().map_err(|_| "writer thread panicked".to_string())).collect::<Vec<_>>())
        })?;
        for r in results {
            r??;
        }
        Ok((secs, cpu_s))
    })
}

/// Opens the ceiling's file as the library's `w` or `r+` would, with `O_DIRECT` if asked.
fn open_plain(path: &str, open: Open, direct: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    match open {
        Open::New => options.write(true).create(true).truncate(true),
        Open::Rewrite => options.read(true).write(true),
    };
    options.mode(0o644).custom_flags(if direct { libc::O_DIRECT } else { 0 }).open(path)
}

/// The ceilings: plain `pwrite` from pinned memory into the same file system (the same
/// repetitions, removal and first write as the library's measurements), per thread count, open
/// mode and with or without `O_DIRECT`.
fn run_ceilings(args: &Args, fs: &str, pinned: bool, results: &mut Vec<Outcome>) -> Result<(), String> {
    let size = args.size;
    let mut source = if pinned {
        HostMemory::pinned(size)?
    } else {
        println!("NOTE no GPU: the ceiling writes from pageable memory (mem=pageable), not pinned");
        HostMemory::new(size)?
    };
    fill_random(&mut source);
    let src: &[u8] = &source;
    let mut poison = HostMemory::new(PIECE.min(size.next_multiple_of(4096)))?;
    poison.fill(0xA5);
    let path = args.file.as_str();
    let plans = [(false, &args.ceiling), (true, &args.ceiling_direct)];
    for (direct, threads_list) in plans {
        for &threads in threads_list.iter().flatten() {
            for &open in &args.opens {
                prepare_file(path, open)?;
                let file = match open_plain(path, open, direct) {
                    Ok(f) => f,
                    Err(e) if direct => {
                        println!("NOTE ceiling O_DIRECT skipped (fs={fs} open={}): {path}: {e}", open.flag());
                        continue;
                    }
                    Err(e) => return Err(format!("open {path}: {e}")),
                };
                parallel_pwrite(file.as_raw_fd(), &poison, size, threads)?;
                drop(file);
                let mut reps = Reps::default();
                for _ in 0..args.reps {
                    if open == Open::New {
                        remove_if_there(path)?;
                    }
                    let file = open_plain(path, open, direct).map_err(|e| format!("open {path}: {e}"))?;
                    let (secs, cpu_s) = parallel_pwrite(file.as_raw_fd(), src, size, threads)?;
                    drop(file);
                    reps.record(size as f64, secs, cpu_s);
                }
                verify_written(path, |off, dst| {
                    dst.copy_from_slice(&src[off..off + dst.len()]);
                    Ok(())
                }, src)?;
                let line = format!(
                    "RESULT impl=ceiling dir=write mem={} fs={fs} open={} direct_write={} mode=na threads={threads} task={PIECE} kind=big phase=steady settings=set callers={threads} {} writes={} bytes={size} route=pwrite",
                    if pinned { "pinned" } else { "pageable" },
                    open.flag(),
                    u8::from(direct),
                    report::figures(&reps.gbps, "-", median(&reps.cpu)),
                    size.div_ceil(PIECE),
                );
                report::emit(results, line, &reps.gbps, 2, f64::NAN);
            }
        }
    }
    Ok(())
}

/// `--write`: the library's writes over the configuration matrix, or (`--ceiling`,
/// `--ceiling-direct`) the plain-`pwrite` ceilings; then the table.
pub fn run(args: Args) -> Result<(), String> {
    let gpu = cuda::available();
    let ceiling = args.ceiling();
    let needs_cuda = ceiling || args.mems.contains(&Mem::Device);
    let _ctx = match (&gpu, needs_cuda) {
        (Ok(()), true) => Some(cuda::context_of(0)?),
        _ => None,
    };
    // The library's writes leave device memory out without a GPU; the ceilings write from host
    // memory whatever --mem says.
    let mems = if ceiling { Vec::new() } else { measure::measurable(&args.mems, &gpu) };
    if Path::new(&args.file).exists() && !args.overwrite {
        return Err(format!("{} exists: --write truncates and removes its file (give --overwrite to allow it)", args.file));
    }
    let _remove = RemoveAtEnd(args.file.clone());
    let fs = args.fs.clone().unwrap_or_else(|| fs_label(&args.file));
    println!(
        "# gdsroute-bench {} write file={} fs={fs} bytes={} reps={} default_settings={} direct_write={} sync={}",
        env!("CARGO_PKG_VERSION"),
        args.file,
        args.size,
        args.reps,
        args.default_settings,
        direct_write_setting(),
        args.sync,
    );
    let mut results = Vec::new();
    if ceiling {
        run_ceilings(&args, &fs, gpu.is_ok(), &mut results)?;
    } else {
        library_writes(&args, &fs, &mems, &mut results)?;
    }
    if args.table {
        report::print_table(&results);
    }
    Ok(())
}
