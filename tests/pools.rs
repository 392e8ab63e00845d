//! Worker pools: a pool per drive under `KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE` (and per kind of
//! file system without one), a caller's pool with its CPUs, and reads and writes on each byte for
//! byte inside poisoned margins. The settings are process-wide, so every test holds `LOCK`. The
//! figure of the pools per drive (a disk file and a `/dev/shm` file read at once) is
//! `reads_of_two_drives_at_once_beside_each_alone`, run on the GPU machine with `--ignored`.

mod common;

use common::random_bytes;
use gdsroute::{File, Pool, settings};
use std::sync::Mutex;
use std::time::Instant;

static LOCK: Mutex<()> = Mutex::new(());

const POISON: u8 = 0xA5;
const GUARD: usize = 4099;

fn shm_is_tmpfs() -> bool {
    std::process::Command::new("stat").args(["-f", "-c", "%T", "/dev/shm"]).output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "tmpfs")
}

/// Reads `size` bytes at `offset` with a parallel read into a poisoned buffer and checks the bytes
/// and both margins.
fn check_pread(file: &File, data: &[u8], size: usize, offset: u64) {
    let mut buf = vec![POISON; size + 2 * GUARD];
    let n = unsafe { file.pread_raw(buf.as_mut_ptr().add(GUARD), size, offset) }.unwrap().wait().unwrap();
    let start = (offset as usize).min(data.len());
    let want = (data.len() - start).min(size);
    assert_eq!(n, want, "size {size} offset {offset}");
    assert!(buf[GUARD..GUARD + n] == data[start..start + n], "bytes, size {size} offset {offset}");
    assert!(buf[..GUARD].iter().all(|&b| b == POISON) && buf[GUARD + size..].iter().all(|&b| b == POISON), "margins, size {size} offset {offset}");
}

fn open_in(dir: &str, data: &[u8]) -> (tempfile::NamedTempFile, File) {
    let tmp = common::temp_file_in(Some(dir), data);
    let file = common::open(tmp.path(), None);
    (tmp, file)
}

#[test]
fn handles_get_their_drives_pool_under_the_setting_and_the_shared_pool_without() {
    let _lock = LOCK.lock().unwrap();
    let data = random_bytes((3 << 20) + 777, 71);
    settings::set_thread_pool_per_block_device(false);
    let (_t, shared) = open_in(env!("CARGO_TARGET_TMPDIR"), &data);
    assert_eq!(shared.pool_name().unwrap(), "shared");

    settings::set_thread_pool_per_block_device(true);
    assert!(settings::thread_pool_per_block_device().unwrap());
    let (_d, disk) = open_in(env!("CARGO_TARGET_TMPDIR"), &data);
    let disk_pool = disk.pool_name().unwrap();
    assert!(disk_pool.starts_with("drive ") || disk_pool.starts_with("no block device: "), "{disk_pool}");
    let (_d2, same_drive) = open_in(env!("CARGO_TARGET_TMPDIR"), &data);
    assert_eq!(same_drive.pool_name().unwrap(), disk_pool, "one pool per drive");
    let memory = shm_is_tmpfs().then(|| open_in("/dev/shm", &data));
    if let Some((_, file)) = &memory {
        assert_eq!(file.pool_name().unwrap(), "no block device: memory");
    }
    assert_eq!(shared.pool_name().unwrap(), "shared", "a handle opened before keeps its pool");
    let pools = gdsroute::drive_pools_in_use();
    assert!(pools.iter().any(|(name, _)| *name == disk_pool), "{pools:?}");

    // Every handle's reads are exact, on whichever pool, with several task sizes and threads.
    for (task, threads) in [(1 << 20, 4), (65536 + 3, 3), (4096, 1)] {
        settings::set_task_size(task).unwrap();
        settings::set_num_threads(threads).unwrap();
        assert!(gdsroute::drive_pools_in_use().iter().all(|(_, n)| *n == threads), "the drive pools follow the thread count");
        for file in [&shared, &disk].into_iter().chain(memory.as_ref().map(|(_, f)| f)) {
            for (size, offset) in [(data.len(), 0u64), (1 << 20, 4095), (100, data.len() as u64 - 50), (10, data.len() as u64 + 1)] {
                check_pread(file, &data, size, offset);
            }
        }
    }
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
    settings::set_num_threads(settings::default_num_threads()).unwrap();
    settings::set_thread_pool_per_block_device(false);
}

#[test]
fn a_caller_pool_runs_the_handles_reads_and_writes_and_outlives_its_owner_while_a_handle_holds_it() {
    let _lock = LOCK.lock().unwrap();
    let data = random_bytes((5 << 20) + 13, 72);
    let (_t, file) = open_in(env!("CARGO_TARGET_TMPDIR"), &data);
    let allowed: Vec<usize> = {
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }, 0);
        (0..1024).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
    };
    let pool = Pool::new(3, Some(&allowed[..1])).unwrap();
    assert_eq!(pool.num_threads(), 3);
    file.set_pool(Some(&pool)).unwrap();
    assert_eq!(file.pool_name().unwrap(), "caller");
    settings::set_task_size(1 << 20).unwrap();
    drop(pool); // the handle holds it now
    for (size, offset) in [(data.len(), 0u64), ((2 << 20) + 1, 4097), (5, 3)] {
        check_pread(&file, &data, size, offset);
    }
    // A write through the same pool, read back.
    let out_tmp = common::temp_file_in(Some(env!("CARGO_TARGET_TMPDIR")), &[]);
    let out = File::open(out_tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, None).unwrap();
    let writer_pool = Pool::new(2, None).unwrap();
    out.set_pool(Some(&writer_pool)).unwrap();
    let written = unsafe { out.pwrite_raw(data.as_ptr().add(11), data.len() - 11, 7) }.unwrap().wait().unwrap();
    assert_eq!(written, data.len() - 11);
    assert_eq!(std::fs::read(out_tmp.path()).unwrap()[7..], data[11..]);
    file.set_pool(None).unwrap();
    assert_eq!(file.pool_name().unwrap(), "shared");
    check_pread(&file, &data, data.len(), 0);
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
    file.close();
    assert!(matches!(file.set_pool(None), Err(gdsroute::Error::ClosedHandle { .. })));
    assert!(matches!(file.pool_name(), Err(gdsroute::Error::ClosedHandle { .. })));
}

#[test]
fn bad_pools_are_refused_with_a_reason() {
    for (threads, cpus, needle) in [(0, None, "0 threads"), (settings::MAX_THREADS + 1, None, "threads"), (1, Some(vec![]), "empty"), (1, Some(vec![1 << 20]), "CPU 1048576")] {
        match Pool::new(threads, cpus.as_deref()) {
            Err(gdsroute::Error::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
            other => panic!("{threads} {cpus:?}: {:?}", other.map(|p| p.num_threads())),
        }
    }
}

/// GB/s of `reps` parallel reads of `file` (warm or not, as the caller arranged).
fn read_rate(file: &File, len: usize, reps: usize) -> f64 {
    let mut buf = vec![0u8; len];
    let t = Instant::now();
    for _ in 0..reps {
        let n = unsafe { file.pread_raw(buf.as_mut_ptr(), len, 0) }.unwrap().wait().unwrap();
        assert_eq!(n, len);
    }
    (len * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// The figure of the pools per drive: a file on the disk, its pages dropped, read beside a warm
/// `/dev/shm` file, each rate beside the file read alone, with the shared pool and with a pool per
/// drive. Run on the GPU machine (tools/gpu/gpu-proof.sh): `pools --ignored --nocapture
/// reads_of_two`.
#[test]
#[ignore = "a figure for docs/performance.md, not a check"]
fn reads_of_two_drives_at_once_beside_each_alone() {
    let _lock = LOCK.lock().unwrap();
    if !shm_is_tmpfs() {
        eprintln!("pools_figure: /dev/shm is not a tmpfs here; nothing to measure");
        return;
    }
    let (disk_len, shm_len) = (2usize << 30, 1usize << 30);
    let disk_dir = std::env::var("GDSROUTE_TEST_DIR").unwrap_or("/var/tmp".into());
    let disk_data = random_bytes(disk_len, 73);
    let shm_data = random_bytes(shm_len, 74);
    // 16 threads per pool is the shared pool's default on the 16 cores of the H200 machine; 8 per
    // pool keeps the two pools of the per-drive runs within the cores.
    for (threads, per_drive) in [(16, false), (16, true), (8, false), (8, true)] {
        settings::set_num_threads(threads).unwrap();
        settings::set_thread_pool_per_block_device(per_drive);
        let (disk_tmp, disk) = open_in(&disk_dir, &disk_data);
        let (_s, shm) = open_in("/dev/shm", &shm_data);
        let drop_disk = || gdsroute::page_cache_tools::drop_file_page_cache(disk_tmp.path().as_os_str().as_encoded_bytes(), 0, 0, true).unwrap();
        read_rate(&shm, shm_len, 1); // warm
        let shm_alone = read_rate(&shm, shm_len, 4);
        drop_disk();
        let disk_alone = read_rate(&disk, disk_len, 1);
        drop_disk();
        let (shm_together, disk_together) = std::thread::scope(|s| {
            let d = s.spawn(|| read_rate(&disk, disk_len, 1));
            let shm_rate = read_rate(&shm, shm_len, 4);
            (shm_rate, d.join().unwrap())
        });
        eprintln!(
            "pools_figure: {threads} threads, {} disk pool '{}' shm pool '{}': shm alone {shm_alone:.2} GB/s together {shm_together:.2} ({:.0} %); disk (dropped) alone {disk_alone:.2} GB/s together {disk_together:.2} ({:.0} %)",
            if per_drive { "per drive" } else { "shared" },
            disk.pool_name().unwrap(),
            shm.pool_name().unwrap(),
            100.0 * shm_together / shm_alone,
            100.0 * disk_together / disk_alone,
        );
    }
    settings::set_thread_pool_per_block_device(false);
    settings::set_num_threads(settings::default_num_threads()).unwrap();
}

/// A read made and waited for on a caller pool's only worker (a monitor's callback, which may
/// make calls), with the shared pool at one thread: the waiter runs its own pool's queue, where
/// the read's job waits, instead of the shared pool's (it waited for itself).
#[test]
fn a_read_waited_for_on_its_own_pools_only_worker_completes() {
    let _l = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    static INNER: std::sync::OnceLock<File> = std::sync::OnceLock::new();
    let data = random_bytes(4 << 20, 41);
    let tmp = common::temp_file_in(None, &data);
    let open = || File::open(tmp.path().as_os_str().as_encoded_bytes(), "r", 0, None).unwrap();
    settings::set_num_threads(1).unwrap();
    settings::set_task_size(1 << 20).unwrap();
    let pool = Pool::new(1, None).unwrap();
    let outer = open();
    outer.set_pool(Some(&pool)).unwrap();
    let inner = INNER.get_or_init(open);
    inner.set_pool(Some(&pool)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let once = std::sync::atomic::AtomicBool::new(false);
    let id = gdsroute::monitor::add(
        move |_| {
            let on_worker = std::thread::current().name().is_some_and(|n| n.starts_with("gdsroute-"));
            if on_worker && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let mut buf = vec![0u8; 4 << 20];
                let n = INNER.get().unwrap().read_into(&mut buf, 0);
                let _ = tx.lock().unwrap().send(n.map(|n| (n, buf)));
            }
        },
        false,
    );
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4 << 20];
        outer.read_into(&mut buf, 0).unwrap()
    });
    let nested = rx.recv_timeout(std::time::Duration::from_secs(30));
    settings::set_num_threads(settings::default_num_threads()).unwrap();
    let (n, back) = nested.expect("the read waited for on its pool's only worker never completed").unwrap();
    assert_eq!(n, data.len());
    assert!(back == data);
    assert_eq!(reader.join().unwrap(), data.len());
    gdsroute::monitor::remove(id);
}

/// A caller's pool of one worker, busy (a monitor's callback holds it), and a thread-count
/// setting above one: the caller waiting for its read runs the read's tasks itself, as it does
/// for the shared pool, instead of waiting behind the busy worker.
#[test]
fn a_caller_waiting_on_a_busy_one_worker_pool_runs_its_tasks() {
    let _l = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let data = random_bytes(4 << 20, 77);
    let tmp = common::temp_file_in(None, &data);
    let open = || File::open(tmp.path().as_os_str().as_encoded_bytes(), "r", 0, None).unwrap();
    settings::set_num_threads(4).unwrap();
    settings::set_task_size(1 << 20).unwrap();
    let pool = Pool::new(1, None).unwrap();
    let (blocker, other) = (open(), open());
    blocker.set_pool(Some(&pool)).unwrap();
    other.set_pool(Some(&pool)).unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, release_rx) = (Mutex::new(held_tx), Mutex::new(release_rx));
    let once = std::sync::atomic::AtomicBool::new(false);
    let id = gdsroute::monitor::add(
        move |_| {
            let on_worker = std::thread::current().name().is_some_and(|n| n.starts_with("gdsroute-"));
            if on_worker && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let _ = held_tx.lock().unwrap().send(());
                // Until the caller's read below returned (at most 60 s).
                let _ = release_rx.lock().unwrap().recv_timeout(std::time::Duration::from_secs(60));
            }
        },
        false,
    );
    // Reads not waited for, until the callback of one of them holds the pool's only worker.
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    let mut held = Vec::new();
    loop {
        bufs.push(vec![0u8; 4 << 20]);
        let b = bufs.last_mut().unwrap();
        // SAFETY: `bufs` keeps each buffer until its operation is waited for below.
        held.push(unsafe { blocker.pread_raw(b.as_mut_ptr(), b.len(), 0) }.unwrap());
        if held_rx.recv_timeout(std::time::Duration::from_millis(500)).is_ok() {
            break;
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4 << 20];
        let n = other.read_into(&mut buf, 0);
        let _ = tx.send(());
        n.map(|n| (n, buf))
    });
    // The read returns while the worker is still held; then the worker is let go either way.
    let returned = rx.recv_timeout(std::time::Duration::from_secs(30)).is_ok();
    let _ = release_tx.send(());
    let (n, back) = reader.join().unwrap().unwrap();
    for op in held {
        op.wait().unwrap();
    }
    gdsroute::monitor::remove(id);
    settings::set_num_threads(settings::default_num_threads()).unwrap();
    assert!(returned, "the caller's read waited for the pool's busy worker");
    assert_eq!(n, data.len());
    assert!(back == data);
}
