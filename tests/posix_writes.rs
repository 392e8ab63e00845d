//! Writes on the POSIX route, every byte checked with plain `pread`s of the whole file against a
//! model: random data, sizes around page and task boundaries, offsets (unaligned, at and past the
//! end, inside a hole), task sizes and thread counts, a pattern around the range that must
//! survive; open modes; the registered page cache's windows dropped by writes; faults (EFBIG from
//! a file-size limit, ENOSPC on a small tmpfs, EIO/EINTR/short writes through the fault shim),
//! after each of which the library keeps working.

mod common;

use common::random_bytes;
use gdsroute::{File, Status, settings};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// Settings are process-wide; tests that change them run one at a time.
static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;
const CHILD_ENV: &str = "GDSROUTE_WRITES_CHILD";

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn whole_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Applies a write to the model of the file: a gap past the end becomes zeros (a hole).
fn apply(model: &mut Vec<u8>, data: &[u8], offset: usize) {
    if data.is_empty() {
        return;
    }
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

/// Writes `data` at `offset` by one of the three calls.
fn write(file: &File, data: &[u8], offset: u64, how: usize) -> gdsroute::Result<usize> {
    match how % 3 {
        0 => file.write_from(data, offset),
        1 => unsafe { file.pwrite_raw(data.as_ptr(), data.len(), offset) }.and_then(|op| op.wait()),
        _ => unsafe { file.write_raw(data.as_ptr(), data.len(), offset) },
    }
}

#[test]
fn every_size_offset_task_size_and_thread_count() {
    let _lock = lock();
    let pattern: Vec<u8> = (0..(3 * MIB + 12345)).map(|i| (i % 251) as u8 ^ 0x5A).collect();
    let tmp = common::temp_file_in(None, &pattern);
    let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0o644, None).unwrap();
    let mut model = pattern.clone();
    let source = random_bytes(8 * MIB, 3);
    let mut step = 0usize;
    for &task in &[4096u64, 65536, MIB as u64] {
        settings::set_task_size(task).unwrap();
        for &threads in &[1usize, 4] {
            settings::set_num_threads(threads).unwrap();
            let t = task as usize;
            for &size in &[0usize, 1, 4095, 4096, 4097, t - 1, t + 1, 3 * MIB + 5] {
                let len = model.len() as u64;
                for &offset in &[0u64, 1, 4095, 777_777, len - 10, len, len + 4096 + 3] {
                    step += 1;
                    let start = (step * 7919) % (source.len() - size);
                    let data = &source[start..start + size];
                    let n = write(&file, data, offset, step).unwrap_or_else(|e| panic!("size {size} offset {offset}: {e}"));
                    assert_eq!(n, size, "size {size} offset {offset}");
                    apply(&mut model, data, offset as usize);
                }
                let back = whole_file(tmp.path());
                assert_eq!(back.len(), model.len(), "file size after size {size}, task {task}");
                assert!(back == model, "bytes differ after writes of size {size}, task {task}, {threads} threads");
            }
        }
    }
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
    // Several MiB in one call, read back through the library too.
    let data = random_bytes(7 * MIB + 333, 9);
    assert_eq!(file.write_from(&data, 12345).unwrap(), data.len());
    apply(&mut model, &data, 12345);
    let mut back = vec![0u8; model.len()];
    assert_eq!(file.read_into(&mut back, 0).unwrap(), model.len());
    assert!(back == model);
}

#[test]
fn writes_inside_a_hole_keep_the_hole_around_them() {
    let _lock = lock();
    let tmp = tempfile::NamedTempFile::new().unwrap();
    tmp.as_file().set_len(64 * MIB as u64).unwrap();
    tmp.as_file().write_all_at(b"end", 64 * MIB as u64 - 3).unwrap();
    let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, None).unwrap();
    let data = random_bytes(3 * MIB + 1, 4);
    assert_eq!(file.write_from(&data, 20 * MIB as u64 + 17).unwrap(), data.len());
    let f = std::fs::File::open(tmp.path()).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 64 * MIB as u64, "a write inside the file does not change its size");
    let mut back = vec![0xEEu8; data.len() + 2 * 4096];
    f.read_exact_at(&mut back, 20 * MIB as u64 + 17 - 4096).unwrap();
    assert!(back[..4096].iter().all(|&b| b == 0) && back[4096 + data.len()..].iter().all(|&b| b == 0), "hole bytes changed");
    assert!(back[4096..4096 + data.len()] == data[..]);
    let mut end = [0u8; 3];
    f.read_exact_at(&mut end, 64 * MIB as u64 - 3).unwrap();
    assert_eq!(&end, b"end");
}

#[test]
fn open_modes_truncate_keep_or_refuse() {
    let _lock = lock();
    let tmp = common::temp_file_in(None, &[7u8; 10000]);
    let path = tmp.path().as_os_str().as_encoded_bytes();
    // "r+" keeps the file; a write changes only its range.
    let file = File::open(path, "r+", 0o644, None).unwrap();
    assert_eq!(file.write_from(b"abc", 100).unwrap(), 3);
    let back = whole_file(tmp.path());
    assert_eq!(back.len(), 10000);
    assert_eq!(&back[99..104], &[7, b'a', b'b', b'c', 7]);
    drop(file);
    // "r" refuses every write before anything runs, a zero-byte one too, and names the path.
    let file = File::open(path, "r", 0o644, None).unwrap();
    for size in [0usize, 3] {
        for how in 0..3 {
            let err = write(&file, &b"xyz"[..size], 0, how).unwrap_err();
            assert_eq!(err.status(), Status::IoError, "{err}");
            assert_eq!(err.os_error(), Some(libc::EBADF), "{err}");
            assert!(err.to_string().contains("read-only") && err.to_string().contains(&*tmp.path().to_string_lossy()), "{err}");
        }
    }
    let c = file.stats();
    assert_eq!((c.write_calls, c.write_calls_failed, c.write_tasks, c.calls), (6, 6, 0, 0));
    assert_eq!(whole_file(tmp.path()).len(), 10000);
    file.sync().unwrap(); // fsync is allowed on a read-only descriptor
    drop(file);
    // "w" truncates at open; a write then makes the file exactly its range.
    let file = File::open(path, "w", 0o644, None).unwrap();
    assert_eq!(whole_file(tmp.path()).len(), 0);
    assert_eq!(file.write_from(b"hello", 2).unwrap(), 5);
    assert_eq!(whole_file(tmp.path()), b"\0\0hello");
    file.sync().unwrap();
    file.datasync().unwrap();
    let c = file.stats();
    assert_eq!((c.write_calls, c.write_calls_failed, c.bytes_written, c.write_tasks, c.posix_write_tasks, c.posix_write_bytes), (1, 0, 5, 1, 1, 5));
    file.close();
    assert_eq!(file.write_from(b"x", 0).unwrap_err().status(), Status::ClosedHandle);
    assert_eq!(file.sync().unwrap_err().status(), Status::ClosedHandle);
}

#[test]
fn a_zero_byte_write_returns_0_and_runs_no_task() {
    let _lock = lock();
    let tmp = common::temp_file_in(None, b"0123456789");
    let file = common::open(tmp.path(), None);
    let file_rw = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, None).unwrap();
    drop(file);
    for how in 0..3 {
        assert_eq!(write(&file_rw, &[], 1 << 40, how).unwrap(), 0);
    }
    let c = file_rw.stats();
    assert_eq!((c.write_calls, c.write_tasks, c.bytes_written), (3, 0, 0));
    assert_eq!(whole_file(tmp.path()), b"0123456789", "a zero-byte write past the end does not extend the file");
    // Overflowing ranges are refused before anything runs.
    let err = unsafe { file_rw.write_raw([0u8; 2].as_ptr(), 2, i64::MAX as u64) }.unwrap_err();
    assert_eq!(err.status(), Status::Overflow);
}

/// Runs `child` (an ignored test of this file) in a new process with `CHILD_ENV` = `scenario`.
fn run_child(scenario: &str, env: &[(&str, String)]) -> Option<String> {
    let mut all: Vec<(&str, std::ffi::OsString)> = vec![(CHILD_ENV, scenario.into())];
    all.extend(env.iter().map(|(k, v)| (*k, v.into())));
    Some(common::run_ignored_test("child", &all))
}

#[test]
fn efbig_from_a_file_size_limit_names_the_first_failing_offset() {
    run_child("efbig", &[]);
}

#[test]
fn eintr_and_short_writes_are_continued_under_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shim) = common::build_fault_shim(dir.path()) else { return };
    run_child("retry", &[("LD_PRELOAD", shim.display().to_string()), ("FAULT_EINTR_EVERY", "3".into()), ("FAULT_SHORT_EVERY", "2".into())]);
}

#[test]
fn eio_mid_write_under_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shim) = common::build_fault_shim(dir.path()) else { return };
    run_child("eio", &[("LD_PRELOAD", shim.display().to_string()), ("FAULT_EIO_AT", (5 * MIB + 1).to_string()), ("FAULT_PATH_CONTAINS", "eio-target".into())]);
}


/// The library still reads and writes correctly after a fault.
fn still_works(dir: &Path) {
    let path = dir.join("after-fault.bin");
    let data = random_bytes(3 * MIB + 7, 11);
    let file = File::open(path.as_os_str().as_encoded_bytes(), "w+", 0o644, None).unwrap();
    assert_eq!(file.write_from(&data, 0).unwrap(), data.len());
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_into(&mut back, 0).unwrap(), data.len());
    assert!(back == data);
}

/// The scenarios run in a child process; does nothing unless started by `run_child`.
#[test]
#[ignore = "run by the fault tests of this file in a child process"]
fn child() {
    let Ok(scenario) = std::env::var(CHILD_ENV) else { return };
    let dir = tempfile::tempdir().unwrap();
    settings::set_task_size(MIB as u64).unwrap();
    settings::set_num_threads(4).unwrap();
    let data = random_bytes(10 * MIB + 4321, 7);
    match scenario.as_str() {
        "efbig" => {
            // SIGXFSZ would kill the process; ignored, the write fails with EFBIG instead.
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
            let limit = 5 * MIB as u64 + 100; // inside a task: its first pwrite comes back short
            let lim = libc::rlimit { rlim_cur: limit, rlim_max: libc::RLIM_INFINITY };
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &lim) }, 0);
            let path = dir.path().join("efbig.bin");
            let file = File::open(path.as_os_str().as_encoded_bytes(), "w+", 0o644, None).unwrap();
            for how in 0..3 {
                let err = write(&file, &data, 0, how).unwrap_err();
                assert_eq!(err.os_error(), Some(libc::EFBIG), "{err}");
                assert!(err.to_string().contains(&format!("at offset {limit}")), "the first failing offset: {err}");
                let back = whole_file(&path);
                assert_eq!(back.len() as u64, limit, "everything below the limit reached the file");
                assert!(back[..] == data[..limit as usize]);
            }
            let c = file.stats();
            assert_eq!((c.write_calls, c.write_calls_failed, c.bytes_written), (3, 3, 0));
            assert!(c.write_tasks_failed >= 3 && c.posix_write_bytes <= 3 * limit, "{c:?}");
            let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &unlimited) }, 0);
            assert_eq!(file.write_from(&data, 0).unwrap(), data.len());
            assert!(whole_file(&path) == data);
            still_works(dir.path());
        }
        "retry" => {
            let path = dir.path().join("retry.bin");
            let file = File::open(path.as_os_str().as_encoded_bytes(), "w+", 0o644, None).unwrap();
            let mut model = Vec::new();
            for i in 0..24usize {
                let size = (i * 654_321) % (4 * MIB) + 1;
                let offset = (i * 1_234_567) % (12 * MIB);
                let start = (i * 4099) % (data.len() - size);
                assert_eq!(write(&file, &data[start..start + size], offset as u64, i).unwrap(), size);
                apply(&mut model, &data[start..start + size], offset);
            }
            assert!(whole_file(&path) == model);
            assert_eq!(file.stats().write_calls_failed, 0);
            // The shim really interrupted and shortened writes: [EINTR, short, EIO, calls].
            let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fault_shim_counts".as_ptr()) };
            assert!(!sym.is_null(), "fault shim not preloaded");
            let counts: extern "C" fn(*mut u64) = unsafe { std::mem::transmute(sym) };
            let mut c = [0u64; 4];
            counts(c.as_mut_ptr());
            assert!(c[0] > 0 && c[1] > 0, "no fault injected: {c:?}");
        }
        "eio" => {
            let path = dir.path().join("eio-target.bin");
            std::fs::write(&path, vec![0xABu8; 12 * MIB]).unwrap();
            let file = File::open(path.as_os_str().as_encoded_bytes(), "r+", 0o644, None).unwrap();
            for how in 0..3 {
                let err = write(&file, &data, 0, how).unwrap_err();
                assert_eq!(err.os_error(), Some(libc::EIO), "{err}");
                // In tasks, the failing task's pwrite starts at 5 MiB; in one call (`write_raw`),
                // the one pwrite of the whole range starts at 0 and writes nothing, or, with
                // direct-I/O writes (scripts/test.sh runs this file with them on too), the 4 MiB
                // piece of the thread's scratch buffer that holds the faulted offset does.
                let at: &[usize] = if how == 2 { &[0, 4 * MIB] } else { &[5 * MIB] };
                assert!(at.iter().any(|at| err.to_string().contains(&format!("at offset {at}:"))), "the first failing offset: {err}");
            }
            // Tasks other than the failing one reached the file; nothing past the range changed.
            let back = whole_file(&path);
            assert!(back[..5 * MIB] == data[..5 * MIB] && back[6 * MIB..data.len()] == data[6 * MIB..]);
            assert!(back[data.len()..].iter().all(|&b| b == 0xAB));
            // Writes that avoid the faulted offset still work on the same handle.
            assert_eq!(file.write_from(&data[..MIB], 0).unwrap(), MIB);
            still_works(dir.path());
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn enospc_on_a_small_tmpfs() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root (no tmpfs mount)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"]).arg(dir.path()).status().is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs");
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let _lock = lock();
        let path = dir.path().join("full.bin");
        let file = File::open(path.as_os_str().as_encoded_bytes(), "w+", 0o644, None).unwrap();
        let data = random_bytes(8 * MIB, 8);
        for how in 0..3 {
            let err = write(&file, &data, 0, how).unwrap_err();
            assert_eq!(err.os_error(), Some(libc::ENOSPC), "{err}");
        }
        assert_eq!(file.stats().write_calls_failed, 3);
        // Space freed, the same handle writes again.
        unsafe { libc::ftruncate(std::fs::OpenOptions::new().write(true).open(&path).unwrap().as_raw_fd(), 0) };
        assert_eq!(file.write_from(&data[..MIB], 0).unwrap(), MIB);
        assert!(whole_file(&path) == data[..MIB]);
    });
    let _ = Command::new("umount").arg(dir.path()).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn writers_and_readers_of_distinct_ranges_of_a_shared_file() {
    let _lock = lock();
    settings::set_num_threads(4).unwrap();
    settings::set_task_size(256 << 10).unwrap();
    let tmp = tempfile::NamedTempFile::new().unwrap();
    let path = tmp.path().as_os_str().as_encoded_bytes().to_vec();
    let shared = std::sync::Arc::new(File::open(&path, "r+", 0, None).unwrap());
    const REGION: usize = MIB + 4097;
    const THREADS: usize = 6;
    let checksum = |b: &[u8]| b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3));
    let last: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let shared = std::sync::Arc::clone(&shared);
                let path = path.clone();
                scope.spawn(move || {
                    // Each thread writes through the shared handle and reads through its own.
                    let own = File::open(&path, "r", 0, None).unwrap();
                    let offset = (t * REGION) as u64;
                    let mut data = Vec::new();
                    for round in 0..12u64 {
                        data = random_bytes(REGION, t as u64 * 1000 + round);
                        let n = if round % 2 == 0 { shared.write_from(&data, offset) } else { unsafe { shared.write_raw(data.as_ptr(), data.len(), offset) } };
                        assert_eq!(n.unwrap(), REGION);
                        let mut back = vec![0u8; REGION];
                        assert_eq!(own.read_into(&mut back, offset).unwrap(), REGION);
                        assert_eq!(checksum(&back), checksum(&data), "thread {t} round {round}");
                    }
                    data
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let back = whole_file(tmp.path());
    assert_eq!(back.len(), THREADS * REGION);
    for (t, data) in last.iter().enumerate() {
        assert_eq!(checksum(&back[t * REGION..(t + 1) * REGION]), checksum(data), "region {t}");
    }
    let c = shared.stats();
    assert_eq!((c.write_calls, c.write_calls_failed, c.bytes_written), (THREADS as u64 * 12, 0, (THREADS * REGION * 12) as u64));
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}
