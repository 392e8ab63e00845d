//! Load through the Rust API on the one shared pool: 8 threads x 16 handles x mixed sizes
//! (1 B to 9 MiB, random offsets, some past the end) with `read_into`, `pread_raw` +
//! `Operation::wait` and `read_raw`, every read checked byte for byte (and its guards). One thread
//! resizes the pool and changes the task size while reads run; some reads close or drop their
//! handle while in flight. Afterwards the process counters add up exactly and the OS thread
//! count is back where it was.
//!
//! Then writers and readers of shared files: writer threads own distinct ranges of three files
//! (one of them past each file's first end, so the file grows) and write them through two "r+"
//! handles per file with every write call, reading each round back through the "r" handles;
//! reader threads read a range no one writes through all four handles; a resizer changes the
//! pool and the task size meanwhile. Checksums of every range are verified at the end, and the
//! process counters add up. The two tests take one lock: the counters are process-wide.

use gdsroute::{File, counters, settings};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GUARD: usize = 32;
const POISON: u8 = 0x5A;
const MIB: usize = 1 << 20;
const NFILES: usize = 16;
const NTHREADS: usize = 8;
const ITERATIONS: usize = 400;

/// Log-uniform from 1 B to 9 MiB.
fn random_size(rng: &mut fastrand::Rng) -> usize {
    let bits = rng.u32(0..24);
    let size = (1usize << bits) + rng.usize(0..1usize << bits);
    size.min(9 * MIB)
}

fn os_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The counters, pool and task size are process-wide: one test at a time.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits (generously, for ThreadSanitizer on a loaded machine) until the OS thread count is back
/// at `before` after the pool is set to 4 threads; retired workers leave after their last task.
fn assert_threads_back(before: usize) -> usize {
    settings::set_num_threads(4).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while os_threads() > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = os_threads();
    // The resizer thread has been joined; the test harness thread count is unchanged.
    assert!(after <= before, "OS threads {before} before, {after} after");
    after
}

/// Spawns the thread that resizes the pool (`counts`) and changes the task size (`tasks`) every
/// 20 ms until `stop`; it returns the number of changes.
fn spawn_resizer(stop: &Arc<AtomicBool>, counts: &'static [usize], tasks: &'static [u64]) -> std::thread::JoinHandle<usize> {
    let stop = Arc::clone(stop);
    std::thread::spawn(move || {
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            settings::set_num_threads(counts[i % counts.len()]).unwrap();
            settings::set_task_size(tasks[i % tasks.len()]).unwrap();
            i += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        i
    })
}

#[test]
fn threads_by_handles_by_sizes_with_resizes_and_closes_in_flight() {
    let _lock = lock();
    let mut rng = fastrand::Rng::with_seed(0xDEAD_BEEF_1234_5678);
    let dir = tempfile::tempdir().unwrap();
    let mut contents = Vec::new();
    let mut paths = Vec::new();
    for i in 0..NFILES {
        let len = if i == 0 { 1 } else { (rng.u64(..) % (12 * MIB as u64)) as usize + 1 };
        let mut data = Vec::with_capacity(len + 8);
        while data.len() < len {
            data.extend_from_slice(&rng.u64(..).to_le_bytes());
        }
        data.truncate(len);
        let path = dir.path().join(format!("f{i:02}.bin"));
        std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
        contents.push(data);
        paths.push(path);
    }
    let contents = Arc::new(contents);
    let handles: Arc<Vec<File>> =
        Arc::new(paths.iter().map(|p| File::open(p.as_os_str().as_encoded_bytes(), "r", 0, None).unwrap()).collect());
    let paths = Arc::new(paths);

    settings::set_num_threads(4).unwrap();
    let mut warm = [0u8; 4];
    handles[1].read_into(&mut warm, 0).unwrap();
    let threads_before = os_threads();
    counters::reset_process_counters();

    let issued = Arc::new(AtomicU64::new(0));
    let requested = Arc::new(AtomicU64::new(0));
    let returned = Arc::new(AtomicU64::new(0));
    let closed_in_flight = Arc::new(AtomicU64::new(0));
    // Reads of a closed handle: failed calls, counted in calls and calls_failed (process-wide).
    let rejected_after_close = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    let resizer = spawn_resizer(&stop, &[1, 3, 16, 2, 8, 5, 4], &[256 << 10, 1 << 20]);

    let readers: Vec<_> = (0..NTHREADS)
        .map(|t| {
            let (contents, handles, paths) = (Arc::clone(&contents), Arc::clone(&handles), Arc::clone(&paths));
            let (issued, requested, returned, closed) =
                (Arc::clone(&issued), Arc::clone(&requested), Arc::clone(&returned), Arc::clone(&closed_in_flight));
            let rejected = Arc::clone(&rejected_after_close);
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(t as u64 + 1));
                let mut raw = vec![0u8; 9 * MIB + 2 * GUARD];
                for _ in 0..ITERATIONS {
                    let fi = (rng.u64(..) % NFILES as u64) as usize;
                    let size = random_size(&mut rng);
                    let data = &contents[fi];
                    let offset = rng.u64(..) % (data.len() as u64 + 65536);
                    let mode = rng.u64(..) % 8;
                    raw[..size + 2 * GUARD].fill(POISON);
                    let got = match mode {
                        0..=2 => handles[fi].read_into(&mut raw[GUARD..GUARD + size], offset),
                        3..=4 => {
                            let op = unsafe { handles[fi].pread_raw(raw[GUARD..].as_mut_ptr(), size, offset) }.unwrap();
                            op.wait()
                        }
                        5..=6 => unsafe { handles[fi].read_raw(raw[GUARD..].as_mut_ptr(), size, offset) },
                        _ => {
                            // A private handle closed (or simply dropped) while its read runs.
                            let f = File::open(paths[fi].as_os_str().as_encoded_bytes(), "r", 0, None).unwrap();
                            let op = unsafe { f.pread_raw(raw[GUARD..].as_mut_ptr(), size, offset) }.unwrap();
                            if rng.u64(..).is_multiple_of(2) {
                                f.close();
                                assert!(f.read_into(&mut [0u8; 1], 0).is_err(), "read after close must fail");
                                rejected.fetch_add(1, Ordering::Relaxed); // a failed call, counted
                            }
                            drop(f);
                            closed.fetch_add(1, Ordering::Relaxed);
                            op.wait()
                        }
                    };
                    issued.fetch_add(1, Ordering::Relaxed);
                    requested.fetch_add(size as u64, Ordering::Relaxed);
                    let got = got.unwrap_or_else(|e| panic!("file {fi} size {size} offset {offset}: {e}"));
                    returned.fetch_add(got as u64, Ordering::Relaxed);
                    let start = (offset as usize).min(data.len());
                    let expect = (data.len() - start).min(size);
                    assert_eq!(got, expect, "file {fi} size {size} offset {offset}");
                    assert!(raw[GUARD..GUARD + got] == data[start..start + got], "bytes differ: file {fi} size {size} offset {offset}");
                    assert!(raw[..GUARD].iter().all(|&b| b == POISON), "front guard written");
                    assert!(raw[GUARD + got..GUARD + size + GUARD].iter().all(|&b| b == POISON), "written past the read");
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let resizes = resizer.join().unwrap();
    let elapsed = started.elapsed();

    let c = counters::process_counters();
    let issued = issued.load(Ordering::Relaxed);
    assert_eq!(issued, (NTHREADS * ITERATIONS) as u64);
    let rejected = rejected_after_close.load(Ordering::Relaxed);
    assert_eq!(c.calls, issued + rejected);
    assert_eq!(c.calls_failed, rejected);
    assert_eq!(c.tasks_failed, 0);
    assert_eq!(c.bytes_requested, requested.load(Ordering::Relaxed));
    assert_eq!(c.bytes_read, returned.load(Ordering::Relaxed));
    assert_eq!(c.task_bytes, c.bytes_read);
    assert_eq!(c.tasks, c.posix_tasks);
    assert_eq!(c.posix_tasks, c.posix_tasks_host_memory);
    assert_eq!(c.posix_bytes, c.task_bytes);
    assert_eq!((c.cufile_tasks, c.cufile_bytes), (0, 0));
    let per_handle: u64 = handles.iter().map(|h| h.stats().calls).sum();
    assert_eq!(per_handle + closed_in_flight.load(Ordering::Relaxed) + rejected, c.calls + 1, "+1: the warm-up read");

    let threads_after = assert_threads_back(threads_before);
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
    eprintln!(
        "stress: {issued} reads ({} closed in flight), {} MiB, {resizes} resizes, {elapsed:?}; OS threads {threads_before} -> {threads_after}",
        closed_in_flight.load(Ordering::Relaxed),
        returned.load(Ordering::Relaxed) >> 20
    );
}

/// FNV-1a over `bytes`.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Random bytes of `rng`.
fn random_data(rng: &mut fastrand::Rng, len: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(len + 8);
    while data.len() < len {
        data.extend_from_slice(&rng.u64(..).to_le_bytes());
    }
    data.truncate(len);
    data
}

/// Files written and read at once.
const WFILES: usize = 3;
/// Each file: a range no one writes, then one range per writer; the last writer's range starts at
/// the file's first end.
const STATIC_LEN: usize = MIB + 12345;
const REGION: usize = 512 * 1024 + 4097;
const WRITERS_PER_FILE: usize = 2;
const ROUNDS: usize = 16;
const READERS: usize = 2;
const READS: usize = 120;

/// Reads `len` bytes at `offset` through `file` by one of the three read calls.
fn read_by(file: &File, how: u64, len: usize, offset: u64) -> Vec<u8> {
    let mut back = vec![0u8; len];
    let n = match how % 3 {
        0 => file.read_into(&mut back, offset),
        1 => unsafe { file.pread_raw(back.as_mut_ptr(), len, offset) }.and_then(|op| op.wait()),
        _ => unsafe { file.read_raw(back.as_mut_ptr(), len, offset) },
    };
    assert_eq!(n.unwrap_or_else(|e| panic!("read of {len} at {offset}: {e}")), len);
    back
}

#[test]
fn writers_and_readers_of_shared_files_with_resizes_in_flight() {
    let _lock = lock();
    let mut rng = fastrand::Rng::with_seed(0x5EED_0F38_17E5);
    let dir = tempfile::tempdir().unwrap();
    let region_at = |w: usize| (STATIC_LEN + w * REGION) as u64;
    let mut statics = Vec::new();
    let mut paths = Vec::new();
    for i in 0..WFILES {
        // The static range and every writer's range but the last one's exist at the start.
        let contents = random_data(&mut rng, region_at(WRITERS_PER_FILE - 1) as usize);
        let path = dir.path().join(format!("w{i}.bin"));
        std::fs::write(&path, &contents).unwrap();
        statics.push(contents[..STATIC_LEN].to_vec());
        paths.push(path);
    }
    let open = |path: &std::path::Path, flags| File::open(path.as_os_str().as_encoded_bytes(), flags, 0, None).unwrap();
    // Per file: two "r+" handles (writes, and some reads) and two "r" handles (reads).
    let writable: Arc<Vec<[File; 2]>> = Arc::new(paths.iter().map(|p| [open(p, "r+"), open(p, "r+")]).collect());
    let readable: Arc<Vec<[File; 2]>> = Arc::new(paths.iter().map(|p| [open(p, "r"), open(p, "r")]).collect());
    let statics = Arc::new(statics);

    settings::set_num_threads(4).unwrap();
    readable[0][0].read_into(&mut [0u8; 4], 0).unwrap();
    let threads_before = os_threads();
    counters::reset_process_counters();
    let (writes, bytes_written, reads, bytes_read) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let resizer = spawn_resizer(&stop, &[2, 5, 1, 8, 3, 4], &[64 << 10, 256 << 10, 4096, 1 << 20]);

    let writers: Vec<_> = (0..WFILES * WRITERS_PER_FILE)
        .map(|t| {
            let (writable, readable) = (Arc::clone(&writable), Arc::clone(&readable));
            let (writes, bytes_written, reads, bytes_read) = (Arc::clone(&writes), Arc::clone(&bytes_written), Arc::clone(&reads), Arc::clone(&bytes_read));
            std::thread::spawn(move || {
                let (fi, w) = (t / WRITERS_PER_FILE, t % WRITERS_PER_FILE);
                let at = region_at(w);
                let mut rng = fastrand::Rng::with_seed(0xC0FF_EE00 + t as u64);
                let mut data = Vec::new();
                for round in 0..ROUNDS {
                    data = random_data(&mut rng, REGION);
                    let file = &writable[fi][round % 2];
                    // Whole range by each write call, or in two calls split anywhere.
                    let calls: Vec<(usize, usize)> = if round % 4 == 3 {
                        let cut = rng.usize(1..REGION);
                        vec![(0, cut), (cut, REGION)]
                    } else {
                        vec![(0, REGION)]
                    };
                    for (k, &(lo, hi)) in calls.iter().enumerate() {
                        let (len, offset) = (hi - lo, at + lo as u64);
                        let n = match (round + k) % 3 {
                            0 => file.write_from(&data[lo..hi], offset),
                            1 => unsafe { file.pwrite_raw(data[lo..].as_ptr(), len, offset) }.and_then(|op| op.wait()),
                            _ => unsafe { file.write_raw(data[lo..].as_ptr(), len, offset) },
                        };
                        assert_eq!(n.unwrap_or_else(|e| panic!("writer {t} round {round}: {e}")), len);
                        writes.fetch_add(1, Ordering::Relaxed);
                        bytes_written.fetch_add(len as u64, Ordering::Relaxed);
                    }
                    // Read back through another handle: an "r" one, every fourth round the other "r+".
                    let reader = if round % 4 == 1 { &writable[fi][(round + 1) % 2] } else { &readable[fi][round % 2] };
                    let back = read_by(reader, round as u64, REGION, at);
                    reads.fetch_add(1, Ordering::Relaxed);
                    bytes_read.fetch_add(REGION as u64, Ordering::Relaxed);
                    assert_eq!(checksum(&back), checksum(&data), "writer {t} round {round}: read back");
                }
                data
            })
        })
        .collect();
    let readers: Vec<_> = (0..READERS)
        .map(|t| {
            let (writable, readable, statics) = (Arc::clone(&writable), Arc::clone(&readable), Arc::clone(&statics));
            let (reads, bytes_read) = (Arc::clone(&reads), Arc::clone(&bytes_read));
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(0xBEAD_0000 + t as u64);
                for i in 0..READS {
                    let fi = rng.usize(..WFILES);
                    let len = random_size(&mut rng).min(STATIC_LEN);
                    let offset = rng.usize(..=STATIC_LEN - len);
                    let h = rng.usize(..4);
                    let file = if h < 2 { &readable[fi][h] } else { &writable[fi][h - 2] };
                    let back = read_by(file, rng.u64(..), len, offset as u64);
                    assert!(back == statics[fi][offset..offset + len], "reader {t} read {i}: file {fi} handle {h} {len} bytes at {offset}");
                    reads.fetch_add(1, Ordering::Relaxed);
                    bytes_read.fetch_add(len as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let last: Vec<Vec<u8>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let resizes = resizer.join().unwrap();
    let elapsed = started.elapsed();

    for (fi, path) in paths.iter().enumerate() {
        let back = std::fs::read(path).unwrap();
        assert_eq!(back.len() as u64, region_at(WRITERS_PER_FILE), "file {fi}: size");
        assert_eq!(checksum(&back[..STATIC_LEN]), checksum(&statics[fi]), "file {fi}: the range no one writes");
        for w in 0..WRITERS_PER_FILE {
            let at = region_at(w) as usize;
            assert_eq!(checksum(&back[at..at + REGION]), checksum(&last[fi * WRITERS_PER_FILE + w]), "file {fi}: writer {w}'s range");
        }
    }
    let c = counters::process_counters();
    let (writes, bytes_written, reads, bytes_read) = (writes.load(Ordering::Relaxed), bytes_written.load(Ordering::Relaxed), reads.load(Ordering::Relaxed), bytes_read.load(Ordering::Relaxed));
    assert_eq!((c.write_calls, c.write_calls_failed, c.bytes_written), (writes, 0, bytes_written));
    assert_eq!((c.write_tasks, c.write_tasks_failed, c.cufile_write_tasks), (c.posix_write_tasks, 0, 0));
    assert_eq!(c.posix_write_bytes, bytes_written);
    assert_eq!((c.calls, c.calls_failed, c.tasks_failed, c.bytes_read), (reads, 0, 0, bytes_read));
    assert_eq!((c.tasks, c.posix_tasks_host_memory, c.posix_bytes), (c.posix_tasks, c.posix_tasks, bytes_read));
    let per_handle: (u64, u64) = writable.iter().chain(readable.iter()).flatten().map(|h| h.stats()).fold((0, 0), |(w, r), s| (w + s.write_calls, r + s.calls));
    assert_eq!(per_handle, (writes, reads + 1), "+1: the warm-up read");
    let threads_after = assert_threads_back(threads_before);
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
    eprintln!(
        "writers and readers: {writes} writes ({} MiB, {} tasks), {reads} reads ({} MiB), {resizes} resizes, {elapsed:?}; OS threads {threads_before} -> {threads_after}",
        bytes_written >> 20,
        c.write_tasks,
        bytes_read >> 20
    );
}
