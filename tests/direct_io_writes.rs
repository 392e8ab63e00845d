//! POSIX writes with direct I/O (`KVIKIO_AUTO_DIRECT_IO_WRITE`, the `auto_direct_io_write`
//! setting): the whole pages inside each task's range go through the `O_DIRECT` descriptor,
//! counted in `posix_direct_write_bytes` and kept out of the page cache; unaligned heads and
//! tails through the page cache, so nothing outside the range changes; sources at every
//! alignment; tmpfs (with or without direct I/O, by kernel) byte-exact either way; "r" handles still
//! refuse. (`scripts/test.sh` also runs all of `tests/posix_writes.rs` with the setting on.) A
//! test binary of its own: the setting is process-wide and every test here turns it on.

mod common;

use common::{has_direct_io, random_bytes};
use gdsroute::{File, Status, settings};
use std::sync::{Mutex, MutexGuard};

const PAGE: usize = 4096;
const GUARD: usize = PAGE + 64;
const POISON: u8 = 0xA5;

static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

/// Holds the settings for one test, direct writes on; on drop puts back what the next test of
/// this file starts from (direct writes on, the default task size and thread count).
struct DirectWritesOn(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for DirectWritesOn {
    fn drop(&mut self) {
        settings::set_auto_direct_io_write(true);
        settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
        let _ = settings::set_num_threads(settings::default_num_threads());
    }
}

fn direct_writes_on() -> DirectWritesOn {
    let guard = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    settings::set_auto_direct_io_write(true);
    DirectWritesOn(guard)
}

/// The bytes of whole pages inside `offset .. offset + len` when the range is split into tasks
/// of `task` bytes whose boundaries after the first lie on pages (`split_for_direct_io`).
fn whole_pages(offset: usize, len: usize) -> u64 {
    let first = offset.next_multiple_of(PAGE);
    let end = (offset + len) / PAGE * PAGE;
    end.saturating_sub(first) as u64
}

/// Writes `data` at `offset` from memory that starts `misalign` bytes past a page inside poisoned
/// guards (`pwrite` + wait, or `write` when `sync`); checks the count and that the source memory
/// did not change; returns the handle's `posix_direct_write_bytes` for the write.
fn check_write(file: &File, data: &[u8], offset: u64, misalign: usize, sync: bool) -> u64 {
    let mut buf = vec![POISON; data.len() + 2 * GUARD + PAGE];
    let base = buf.as_ptr() as usize;
    let start = (base + GUARD).next_multiple_of(PAGE) + misalign - base;
    buf[start..start + data.len()].copy_from_slice(data);
    let before_buf = buf.clone();
    let before = file.stats().posix_direct_write_bytes;
    let src = buf[start..].as_ptr();
    // SAFETY: src holds data.len() readable bytes, and the buffer outlives the write.
    let n = unsafe {
        if sync {
            file.write_raw(src, data.len(), offset)
        } else {
            file.pwrite_raw(src, data.len(), offset).and_then(|op| op.wait())
        }
    };
    let what = format!("size {} offset {offset} misalign {misalign} sync {sync}", data.len());
    assert_eq!(n.unwrap_or_else(|e| panic!("{what}: {e}")), data.len(), "{what}");
    assert!(buf == before_buf, "the source changed: {what}");
    file.stats().posix_direct_write_bytes - before
}

/// Every size, offset, source alignment, task size and thread count on a file pre-filled with a
/// pattern, checked against a model with plain reads of the whole file after each round; the
/// direct bytes equal the whole pages of each range where the file system has direct I/O.
fn every_size_offset_alignment_in(dir: Option<&str>) {
    let _on = direct_writes_on();
    let pattern: Vec<u8> = (0..(2 << 20) + 4321).map(|i| (i % 253) as u8 ^ 0x3C).collect();
    let tmp = common::temp_file_in(dir, &pattern);
    let direct = has_direct_io(tmp.as_file());
    let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0o644, None).unwrap();
    let mut model = pattern.clone();
    let source = random_bytes(6 << 20, 41);
    let mut step = 0usize;
    let mut direct_total = 0u64;
    for &(task, threads) in &[(4096u64, 4usize), (65536, 1), (1 << 20, 8)] {
        settings::set_task_size(task).unwrap();
        settings::set_num_threads(threads).unwrap();
        let t = task as usize;
        for &size in &[0usize, 1, 4095, 4096, 4097, t - 1, t + 1, 2 * t + 7, (3 << 20) + 5] {
            let len = model.len() as u64;
            for &offset in &[0u64, 1, 4095, 4096, 777_777, len - 10, len, len + 4096 + 3] {
                for &misalign in &[0usize, 1, 2048] {
                    step += 1;
                    let at = (step * 7919) % (source.len() - size);
                    let data = &source[at..at + size];
                    let sync = step.is_multiple_of(5);
                    let got = check_write(&file, data, offset, misalign, sync);
                    let expect = if direct { whole_pages(offset as usize, size) } else { 0 };
                    assert_eq!(got, expect, "direct bytes: size {size} offset {offset} misalign {misalign} sync {sync} task {task}");
                    direct_total += got;
                    if !data.is_empty() {
                        let end = offset as usize + size;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[offset as usize..end].copy_from_slice(data);
                    }
                }
            }
            let back = std::fs::read(tmp.path()).unwrap();
            assert_eq!(back.len(), model.len(), "file size after size {size}, task {task}");
            assert!(back == model, "bytes differ after writes of size {size}, task {task}, {threads} threads");
        }
    }
    if direct {
        assert!(direct_total > 0);
    } else {
        eprintln!("no O_DIRECT on {dir:?}: bytes checked, direct bytes 0");
    }
}

#[test]
fn every_size_offset_alignment_task_size_and_thread_count_on_the_disk() {
    every_size_offset_alignment_in(None);
}

#[test]
fn every_size_offset_alignment_on_tmpfs() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    every_size_offset_alignment_in(Some("/dev/shm"));
}

#[test]
fn aligned_writes_go_direct_whole_and_leave_the_page_cache_alone() {
    let _on = direct_writes_on();
    let tmp = common::temp_file_in(None, &[]);
    if !has_direct_io(tmp.as_file()) {
        eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
        return;
    }
    settings::set_num_threads(4).unwrap();
    let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "w", 0o644, None).unwrap();
    let data = random_bytes(8 << 20, 42);
    assert_eq!(check_write(&file, &data, 0, 0, false), 8 << 20, "every byte of a page-aligned write goes direct");
    let resident = common::resident_pages(tmp.as_file(), data.len()).iter().filter(|&&r| r).count();
    assert_eq!(resident, 0, "direct writes left {resident} pages in the page cache");
    assert!(std::fs::read(tmp.path()).unwrap() == data);
    // An unaligned source goes through the scratch buffer, still direct.
    assert_eq!(check_write(&file, &data[..6 << 20], 1 << 20, 1, false), 6 << 20);
    // An unaligned offset: only the head and the tail shorter than a page are buffered.
    assert_eq!(check_write(&file, &data[..(6 << 20) + 10], 100, 0, false), whole_pages(100, (6 << 20) + 10));
    // The setting off again: the page cache as before.
    settings::set_auto_direct_io_write(false);
    assert_eq!(check_write(&file, &data[..4 << 20], 0, 0, false), 0);
    let mut expect = data.clone();
    expect[1 << 20..7 << 20].copy_from_slice(&data[..6 << 20]);
    expect[100..100 + (6 << 20) + 10].copy_from_slice(&data[..(6 << 20) + 10]);
    expect[..4 << 20].copy_from_slice(&data[..4 << 20]);
    assert!(std::fs::read(tmp.path()).unwrap() == expect);
}

/// A descriptor the caller opened `O_DSYNC` (or `O_SYNC`) keeps its promise on the direct path:
/// the direct descriptor gets the same flag, so the whole pages written through it are as durable
/// when the call returns as the head and tail written through the caller's.
#[test]
fn the_direct_descriptor_keeps_the_callers_sync_flags() {
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::fs::OpenOptionsExt;
    let _on = direct_writes_on();
    let tmp = common::temp_file_in(None, &[]);
    if !has_direct_io(tmp.as_file()) {
        eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
        return;
    }
    for sync in [libc::O_DSYNC, libc::O_SYNC] {
        let caller = std::fs::OpenOptions::new().read(true).write(true).custom_flags(sync).open(tmp.path()).unwrap();
        let file = File::open_fd(caller.as_fd(), None).unwrap();
        let data = random_bytes(1 << 20, 43);
        assert_eq!(check_write(&file, &data, 0, 0, false), 1 << 20, "the write went direct");
        let direct = file.direct_fd().unwrap().expect("a direct descriptor");
        let flags = unsafe { libc::fcntl(direct, libc::F_GETFL) };
        assert_eq!(flags & sync, sync, "the direct descriptor lost the caller's {sync:#o} ({flags:#o})");
        let callers = unsafe { libc::fcntl(caller.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(callers & sync, sync);
    }
}

#[test]
fn a_read_only_handle_still_refuses_and_a_write_only_one_still_cannot_read() {
    let _on = direct_writes_on();
    settings::set_auto_direct_io_read(true);
    let tmp = common::temp_file_in(None, &random_bytes(3 * PAGE, 43));
    let reader = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r", 0o644, None).unwrap();
    let err = reader.write_from(&[7u8; 2 * PAGE], 0).unwrap_err();
    assert_eq!(err.status(), Status::IoError, "{err}");
    let writer = File::open(tmp.path().as_os_str().as_encoded_bytes(), "w", 0o644, None).unwrap();
    assert_eq!(writer.write_from(&[7u8; 2 * PAGE], 0).unwrap(), 2 * PAGE);
    let mut buf = vec![0u8; 2 * PAGE];
    let err = writer.read_into(&mut buf, 0).unwrap_err();
    assert!(err.to_string().contains("write-only"), "{err}");
    settings::set_auto_direct_io_read(false);
    assert_eq!(std::fs::read(tmp.path()).unwrap(), vec![7u8; 2 * PAGE], "\"w\" truncated, then the write");
}

#[test]
fn the_c_api_reads_and_sets_the_setting() {
    let _on = direct_writes_on();
    use common::capi::{gdsroute_settings_get_auto_direct_io_write, gdsroute_settings_set_auto_direct_io_write};
    let mut on = false;
    // SAFETY: a valid out-pointer, then NULL (which must be refused).
    unsafe {
        assert_eq!(gdsroute_settings_get_auto_direct_io_write(&mut on), Status::Ok);
        assert!(on);
        assert_eq!(gdsroute_settings_set_auto_direct_io_write(false), Status::Ok);
        assert_eq!(gdsroute_settings_get_auto_direct_io_write(&mut on), Status::Ok);
        assert!(!on);
        assert_eq!(gdsroute_settings_get_auto_direct_io_write(std::ptr::null_mut()), Status::NullArgument);
    }
}

#[test]
fn a_fifo_is_never_reopened_for_direct_io() {
    // Reopening a FIFO opened "w" through /proc/self/fd blocked until a reader came (every
    // direct task of the handle then hung); only regular files and block devices are reopened.
    let _on = direct_writes_on();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // A reader for the "w" open to succeed, closed again before the write.
    // SAFETY: as above; a non-blocking read open of a FIFO returns at once.
    let reader = unsafe { libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0);
    let file = File::open(path.as_os_str().as_encoded_bytes(), "w", 0o644, None).unwrap();
    // SAFETY: closing the descriptor opened above, once.
    unsafe { libc::close(reader) };
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let data = [5u8; 3 * PAGE];
        let _ = done.send(file.write_from(&data, 0).map_err(|e| e.to_string()));
    });
    let outcome = result.recv_timeout(std::time::Duration::from_secs(10)).expect("the write hung");
    let err = outcome.unwrap_err();
    assert!(err.contains("Illegal seek") || err.contains("Broken pipe"), "{err}");
}
