//! The work and memory of a read are bounded by the bytes the file has, not by the size asked
//! for nor by the number of tasks (issue 15): the largest requests the API accepts on a small
//! file, cached and not, return its bytes without touching memory past them; a task size of one
//! byte keeps a multi-MiB read's memory flat; files without a size (a character device, a FIFO,
//! a directory) and write-only handles end at their first short or failed task; bytes a file
//! gains during a read are not read.

mod common;

use common::{POISON, random_bytes};
use gdsroute::{File, Status, settings};
use std::sync::Mutex;

/// Settings and the peak-memory mark are process-wide; these tests run one at a time. Taken
/// even when poisoned, so that one failure does not fail the others.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

const PAGE: usize = 4096;
const FILE_LEN: usize = 5000;

/// The largest request `check_range` accepts at offset 0: offset + size up to `i64::MAX`.
const LARGEST: usize = i64::MAX as usize;

/// An anonymous `MAP_NORESERVE` mapping of `len` bytes whose first `open` bytes are readable
/// and writable (and poisoned); the rest is `PROT_NONE`, so that any write there fails (EFAULT
/// from the kernel, SIGSEGV from a copy) instead of going unnoticed.
struct Guarded {
    base: *mut u8,
    len: usize,
    open: usize,
}

impl Guarded {
    /// The largest such mapping the address space allows, from 1 TiB down.
    fn largest(open: usize) -> Guarded {
        let mut len = 1usize << 40;
        loop {
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) };
            if p != libc::MAP_FAILED {
                assert_eq!(unsafe { libc::mprotect(p, open, libc::PROT_READ | libc::PROT_WRITE) }, 0);
                let base = p.cast::<u8>();
                unsafe { std::ptr::write_bytes(base, POISON, open) };
                return Guarded { base, len, open };
            }
            assert!(len > 1 << 30, "cannot map even 1 GiB");
            len /= 2;
        }
    }

    fn open_bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.base, self.open) }
    }

    fn poison(&self) {
        unsafe { std::ptr::write_bytes(self.base, POISON, self.open) };
    }

    /// Pages of the whole mapping in memory (`mincore`): only those written can be.
    fn resident_pages(&self) -> usize {
        let mut vec = vec![0u8; self.len.div_ceil(PAGE).min(1 << 20)];
        let checked = vec.len() * PAGE;
        assert_eq!(unsafe { libc::mincore(self.base.cast(), checked, vec.as_mut_ptr()) }, 0);
        vec.iter().filter(|&&v| v & 1 == 1).count()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Restores the default task size and thread count however a test ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
        settings::set_num_threads(4).unwrap();
    }
}

/// Reads `size` bytes at 0 into `dst` with `read_raw` (`sync`) or `pread_raw` and a wait.
fn read(file: &File, dst: *mut u8, size: usize, sync: bool) -> gdsroute::Result<usize> {
    if sync {
        unsafe { file.read_raw(dst, size, 0) }
    } else {
        unsafe { file.pread_raw(dst, size, 0) }.and_then(|op| op.wait())
    }
}

#[test]
fn the_largest_requests_on_a_small_file_read_its_bytes_and_nothing_past_them() {
    let _lock = lock();
    let data = random_bytes(FILE_LEN, 151);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    let dst = Guarded::largest(2 * PAGE);
    eprintln!("destination: {} GiB mapped, {} bytes writable", dst.len >> 30, dst.open);
    for cached in [false, true] {
        for sync in [true, false] {
            for size in [dst.len, 1 << 62, LARGEST] {
                let what = format!("size {size} sync {sync} cached {cached}");
                let evicted = !cached && common::evict(tmp.path(), 0);
                dst.poison();
                let before = file.stats();
                let n = read(&file, dst.base, size, sync).unwrap_or_else(|e| panic!("{what}: {e}"));
                let after = file.stats();
                assert_eq!(n, FILE_LEN, "{what}");
                assert!(dst.open_bytes()[..FILE_LEN] == data[..], "bytes differ: {what}");
                assert!(dst.open_bytes()[FILE_LEN..].iter().all(|&b| b == POISON), "written past the file's bytes: {what}");
                assert_eq!(dst.resident_pages(), 2, "{what}");
                // One task: the 5000 bytes fit in one (KVIKIO_TASK_SIZE is 4 MiB here).
                assert_eq!((after.calls - before.calls, after.tasks - before.tasks), (1, 1), "{what}");
                assert_eq!((after.bytes_read - before.bytes_read, after.calls_short - before.calls_short), (FILE_LEN as u64, 1), "{what}");
                if evicted {
                    eprintln!("{what}: read after eviction");
                }
            }
        }
    }
}

#[test]
fn requests_at_or_past_the_end_run_no_task() {
    let _lock = lock();
    let data = random_bytes(FILE_LEN, 152);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    let mut buf = vec![POISON; PAGE];
    for offset in [FILE_LEN as u64, FILE_LEN as u64 + 1, 1 << 40, i64::MAX as u64 - 1] {
        let size = (i64::MAX as u64 - offset) as usize;
        for sync in [true, false] {
            let before = file.stats();
            let n = if sync {
                unsafe { file.read_raw(buf.as_mut_ptr(), size, offset) }
            } else {
                unsafe { file.pread_raw(buf.as_mut_ptr(), size, offset) }.and_then(|op| op.wait())
            };
            let after = file.stats();
            assert_eq!(n.unwrap(), 0, "offset {offset} sync {sync}");
            assert_eq!((after.calls - before.calls, after.calls_short - before.calls_short, after.tasks - before.tasks), (1, 1, 0), "offset {offset} sync {sync}");
            assert_eq!(after.bytes_requested, before.bytes_requested.saturating_add(size as u64), "counted as asked for, up to the counter's limit");
        }
    }
    assert!(buf.iter().all(|&b| b == POISON));
}

/// The process's peak resident memory in bytes (`VmHWM`), and its current (`VmRSS`).
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} missing"));
        line[name.len()..].trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() << 10
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Sets the peak mark back to the current resident memory (Linux 4.0 and later); false where
/// that cannot be done.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[test]
fn one_byte_tasks_keep_memory_flat() {
    // With KVIKIO_TASK_SIZE=1, every byte is a task: 2 Mi of them here. Memory must not grow
    // with the task count (it was about 340 bytes per task, 2.75 GB for 8 MiB).
    let _lock = lock();
    let _restore = Restore;
    const LEN: usize = 2 << 20;
    const BOUND: u64 = 64 << 20;
    let data = random_bytes(LEN, 153);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    let mut buf = vec![POISON; LEN + 2 * 64];
    // Warm the file and every page of the buffer, the thread pool and the library's state first.
    assert_eq!(file.read_into(&mut buf[64..64 + LEN], 0).unwrap(), LEN);
    buf.fill(POISON);
    settings::set_task_size(1).unwrap();
    for threads in [4usize, 1] {
        settings::set_num_threads(threads).unwrap();
        let peak_reset = reset_peak();
        let (peak_before, rss_before) = memory();
        let before = file.stats();
        let n = file.read_into(&mut buf[64..64 + LEN], 0).unwrap();
        let after = file.stats();
        let (peak_after, _) = memory();
        let base = if peak_reset { rss_before } else { peak_before };
        let growth = peak_after.saturating_sub(base);
        eprintln!("{threads} threads: {} tasks, peak resident memory grew by {} KiB (peak mark reset: {peak_reset})", after.tasks - before.tasks, growth >> 10);
        assert_eq!(n, LEN);
        assert!(buf[64..64 + LEN] == data[..], "bytes differ");
        assert!(buf[..64].iter().chain(&buf[64 + LEN..]).all(|&b| b == POISON), "guard bytes overwritten");
        assert_eq!(after.tasks - before.tasks, LEN as u64, "one task per byte");
        assert!(growth < BOUND, "peak resident memory grew by {growth} bytes for a {LEN}-byte read ({threads} threads)");
        buf.fill(POISON);
    }
    // A request of at most one page is one task whatever the task size.
    for (size, tasks) in [(10usize, 1u64), (PAGE, 1), (PAGE + 1, PAGE as u64 + 1)] {
        let before = file.stats();
        assert_eq!(file.read_into(&mut buf[..size], 0).unwrap(), size);
        assert_eq!(file.stats().tasks - before.tasks, tasks, "size {size}");
    }
}

#[test]
fn files_without_a_size_end_at_their_first_short_or_failed_task() {
    // /dev/null reads 0 bytes, a directory fails with EISDIR, a write-only handle with EBADF: with
    // the largest request each ends after a few tasks, not 2^41 of them.
    let _lock = lock();
    let dst = Guarded::largest(PAGE);
    let null = File::open(b"/dev/null", "r", 0, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let directory = common::open(dir.path(), None);
    let write_only_path = dir.path().join("w.bin");
    let write_only = File::open(write_only_path.as_os_str().as_encoded_bytes(), "w", 0o644, None).unwrap();
    for sync in [true, false] {
        for size in [1 << 62, LARGEST] {
            let what = format!("size {size} sync {sync}");
            assert_eq!(read(&null, dst.base, size, sync).unwrap(), 0, "/dev/null {what}");
            let err = read(&directory, dst.base, size, sync).unwrap_err();
            assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EISDIR)), "directory {what}: {err}");
            let err = read(&write_only, dst.base, size, sync).unwrap_err();
            assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EBADF)), "write-only {what}: {err}");
        }
    }
    assert!(dst.open_bytes().iter().all(|&b| b == POISON));
    // At most one task per pool thread, and the waiter's, ran past the first.
    for (name, file) in [("/dev/null", &null), ("directory", &directory), ("write-only", &write_only)] {
        let c = file.stats();
        assert!(c.tasks <= 4 * (4 + 2), "{name}: {} tasks", c.tasks);
    }
    // procfs files report size 0 and still have bytes: they are read until a short read, as
    // before the clipping (and as KvikIO does). An empty regular file reads 0 bytes.
    let status = File::open(b"/proc/self/status", "r", 0, None).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    for sync in [true, false] {
        let n = read(&status, buf.as_mut_ptr(), buf.len(), sync).unwrap();
        assert!(n > 0 && buf[..n].starts_with(b"Name:"), "/proc/self/status sync {sync}: {n} bytes");
    }
    let empty_path = dir.path().join("empty.bin");
    std::fs::write(&empty_path, b"").unwrap();
    let empty = File::open(empty_path.as_os_str().as_encoded_bytes(), "r", 0, None).unwrap();
    for sync in [true, false] {
        assert_eq!(read(&empty, dst.base, LARGEST, sync).unwrap(), 0, "empty file sync {sync}");
    }
    assert!(empty.stats().tasks <= 4 + 2, "empty file: {} tasks", empty.stats().tasks);
    // /dev/zero has no end: a read fills what was asked.
    let zero = File::open(b"/dev/zero", "r", 0, None).unwrap();
    let mut buf = vec![POISON; 3 * PAGE + 7];
    assert_eq!(zero.read_into(&mut buf, 0).unwrap(), buf.len());
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn bytes_a_file_gains_during_a_read_are_not_read() {
    // The read's range is the file's size at the call: tasks that run after the file grew stop
    // there. Deterministic: the one pool thread is busy until the file has grown.
    let _lock = lock();
    let _restore = Restore;
    settings::set_num_threads(1).unwrap();
    settings::set_task_size(1 << 20).unwrap();
    let data = random_bytes(3 << 20, 154);
    let mut tmp = common::temp_file_in(None, &data[..1 << 20]);
    let file = common::open(tmp.path(), None);
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
    gdsroute::testing::submit_to_pool(move || {
        busy_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(std::time::Duration::from_secs(120));
    })
    .unwrap();
    busy_rx.recv().unwrap();
    let mut buf = vec![POISON; 3 << 20];
    let op = unsafe { file.pread_raw(buf.as_mut_ptr(), buf.len(), 0) }.unwrap();
    assert!(!op.is_done());
    use std::io::Write;
    tmp.write_all(&data[1 << 20..]).unwrap();
    tmp.flush().unwrap();
    assert_eq!(file.size().unwrap(), 3 << 20);
    release_tx.send(()).unwrap();
    assert_eq!(op.wait().unwrap(), 1 << 20);
    drop(op);
    assert!(buf[..1 << 20] == data[..1 << 20]);
    assert!(buf[1 << 20..].iter().all(|&b| b == POISON), "bytes past the size at the call were read");
    // The next read sees them.
    assert_eq!(file.read_into(&mut buf, 0).unwrap(), 3 << 20);
    assert!(buf == data);
}
