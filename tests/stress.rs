//! Load through the Rust API on the one shared pool: 8 threads x 16 handles x mixed sizes
//! (1 B to 9 MiB, random offsets, some past the end) with `read_into`, `pread_raw` +
//! `Operation::wait` and `read_raw`, every read checked byte for byte (and its guards). One thread
//! resizes the pool and changes the task size while reads run; some reads close or drop their
//! handle while in flight. Afterwards the process counters add up exactly and the OS thread
//! count is back where it was. One test function: the counters are process-wide.

use gdsroute::{File, settings};
use gdsroute::testing::{stats, thread_pool};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

#[test]
fn threads_by_handles_by_sizes_with_resizes_and_closes_in_flight() {
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

    thread_pool::set_global_num_threads(4).unwrap();
    let mut warm = [0u8; 4];
    handles[1].read_into(&mut warm, 0).unwrap();
    let threads_before = os_threads();
    stats::global().reset();

    let issued = Arc::new(AtomicU64::new(0));
    let requested = Arc::new(AtomicU64::new(0));
    let returned = Arc::new(AtomicU64::new(0));
    let closed_in_flight = Arc::new(AtomicU64::new(0));
    // Reads of a closed handle: failed calls, counted in calls and calls_failed (process-wide).
    let rejected_after_close = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    let resizer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let counts = [1usize, 3, 16, 2, 8, 5, 4];
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                thread_pool::set_global_num_threads(counts[i % counts.len()]).unwrap();
                settings::global().unwrap().set_task_size(if i.is_multiple_of(2) { 256 << 10 } else { 1 << 20 }).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            i
        })
    };

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
                            op.wait(thread_pool::global().ok())
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
                            op.wait(None)
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

    let c = stats::global().snapshot();
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

    thread_pool::set_global_num_threads(4).unwrap();
    // Retired workers leave after their last task; generous for ThreadSanitizer on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    while os_threads() > threads_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let threads_after = os_threads();
    // The resizer thread has been joined; the test harness thread count is unchanged.
    assert!(threads_after <= threads_before, "OS threads {threads_before} before, {threads_after} after");
    eprintln!(
        "stress: {issued} reads ({} closed in flight), {} MiB, {resizes} resizes, {elapsed:?}; OS threads {threads_before} -> {threads_after}",
        closed_in_flight.load(Ordering::Relaxed),
        returned.load(Ordering::Relaxed) >> 20
    );
}
