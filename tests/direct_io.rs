//! POSIX reads with direct I/O (`KVIKIO_AUTO_DIRECT_IO_READ`, the `auto_direct_io_read`
//! setting): every byte correct for sizes, offsets and destination alignments around pages and
//! tasks, task sizes and thread counts, guard bytes untouched; the page-aligned middle counted in
//! `posix_direct_bytes` and kept out of the page cache; file systems without direct I/O and
//! write-only handles read as without the setting. A test binary of its own: the setting is
//! process-wide and every test here turns it on.

mod common;

use common::{POISON, has_direct_io, random_bytes};
use gdsroute::{File, settings};
use std::sync::{Mutex, MutexGuard};

const GUARD: usize = 4096 + 64;
const PAGE: usize = 4096;

/// Settings are process-wide: one test at a time, each with direct I/O on.
static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

/// Holds the settings for one test; on drop (also when the test fails) puts back direct I/O on
/// and the default task size and thread count for the next test.
struct DirectIoOn(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Drop for DirectIoOn {
    fn drop(&mut self) {
        settings::set_auto_direct_io_read(true);
        settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
        let _ = settings::set_num_threads(settings::default_num_threads());
    }
}

fn direct_io_on() -> DirectIoOn {
    let guard = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    settings::set_auto_direct_io_read(true);
    DirectIoOn(guard)
}

/// A temporary file of `len` random bytes and its data, on a file system with direct I/O; `None`
/// (the test then has nothing to check) where the temporary directory has none.
fn file_with_direct_io(len: usize, seed: u64) -> Option<(tempfile::NamedTempFile, Vec<u8>)> {
    let data = random_bytes(len, seed);
    let tmp = common::temp_file_in(None, &data);
    if !has_direct_io(tmp.as_file()) {
        eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
        return None;
    }
    Some((tmp, data))
}

/// Reads `size` bytes at `offset` (`pread`, or `read` when `sync`) into a destination that starts
/// `misalign` bytes past a page, inside poisoned guards; checks every byte and the guards, and
/// returns the handle's `posix_direct_bytes` for the read.
fn check_read(file: &File, data: &[u8], size: usize, offset: u64, misalign: usize, sync: bool) -> u64 {
    let mut buf = vec![POISON; size + 2 * GUARD + PAGE];
    let base = buf.as_ptr() as usize;
    let start = (base + GUARD).next_multiple_of(PAGE) + misalign - base;
    let dst = buf[start..].as_mut_ptr();
    let before = file.stats().posix_direct_bytes;
    // SAFETY: dst holds size writable bytes, and the buffer outlives the read.
    let n = unsafe {
        if sync {
            file.read_raw(dst, size, offset).unwrap()
        } else {
            file.pread_raw(dst, size, offset).unwrap().wait().unwrap()
        }
    };
    let from = (offset as usize).min(data.len());
    let expect = (data.len() - from).min(size);
    let what = format!("size {size} offset {offset} misalign {misalign} sync {sync}");
    assert_eq!(n, expect, "{what}");
    assert!(buf[start..start + n] == data[from..from + n], "bytes differ: {what}");
    assert!(buf[..start].iter().all(|&b| b == POISON), "written before the destination: {what}");
    assert!(buf[start + n..].iter().all(|&b| b == POISON), "written past the bytes read: {what}");
    file.stats().posix_direct_bytes - before
}

#[test]
fn every_size_offset_alignment_task_size_and_thread_count() {
    let _on = direct_io_on();
    let data = random_bytes((3 << 20) + 12345, 31);
    let tmp = common::temp_file_in(None, &data);
    let direct = has_direct_io(tmp.as_file());
    let file = common::open(tmp.path(), None);
    let len = data.len() as u64;
    let mut direct_total = 0;
    for &(task, threads) in &[(4096u64, 4usize), (65536, 1), (1 << 20, 8), (4 << 20, 3)] {
        settings::set_task_size(task).unwrap();
        settings::set_num_threads(threads).unwrap();
        let t = task as usize;
        for &size in &[0usize, 1, 4095, 4096, 4097, t + 1, 2 * t + 7, (3 << 20) + 5] {
            for &offset in &[0u64, 1, 4095, 4096, 777_777, len - 10, len, len + 4096] {
                for &misalign in &[0usize, 1, 2048] {
                    direct_total += check_read(&file, &data, size, offset, misalign, false);
                }
            }
        }
    }
    for &size in &[1usize, 4097, 5 << 20] {
        for &offset in &[0u64, 3, len - 1] {
            direct_total += check_read(&file, &data, size, offset, 0, true);
        }
    }
    if direct {
        assert!(direct_total > 0, "nothing was read with direct I/O");
    } else {
        assert_eq!(direct_total, 0);
        eprintln!("no O_DIRECT on the temporary directory's file system: bytes checked, counter 0");
    }
}

#[test]
fn aligned_reads_go_direct_whole_and_leave_the_page_cache_alone() {
    let _on = direct_io_on();
    let Some((tmp, data)) = file_with_direct_io(8 << 20, 32) else { return };
    settings::set_num_threads(4).unwrap();
    let file = common::open(tmp.path(), None);
    let evicted = common::evict(tmp.path(), 0);
    // Page-aligned offset, size and destination: every byte through O_DIRECT.
    assert_eq!(check_read(&file, &data, 6 << 20, 1 << 20, 0, false), 6 << 20);
    if evicted {
        let cached = common::resident_pages(tmp.as_file(), data.len()).iter().filter(|&&r| r).count();
        assert_eq!(cached, 0, "direct reads brought {cached} pages into the page cache");
    }
    // An unaligned destination goes through the scratch buffer: still all direct.
    assert_eq!(check_read(&file, &data, 6 << 20, 1 << 20, 1, false), 6 << 20);
    // An unaligned offset: the first task ends on a page, so only the head is buffered.
    assert_eq!(check_read(&file, &data, 6 << 20, 100, 100, false), (6 << 20) - (PAGE as u64 - 100) - 100);
    // With the setting off again: the page cache as before.
    settings::set_auto_direct_io_read(false);
    assert_eq!(check_read(&file, &data, 6 << 20, 1 << 20, 0, false), 0);
}

#[test]
fn file_systems_without_direct_io_read_through_the_page_cache() {
    let _on = direct_io_on();
    // tmpfs refuses O_DIRECT opens (EINVAL): the handle reads as without the setting.
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let data = random_bytes((2 << 20) + 333, 33);
    let tmp = common::temp_file_in(Some("/dev/shm"), &data);
    let expect_direct = has_direct_io(tmp.as_file());
    let file = common::open(tmp.path(), None);
    let direct: u64 = [(0u64, data.len()), (4096, 1 << 20), (5, 100_000)]
        .iter()
        .map(|&(offset, size)| check_read(&file, &data, size, offset, 0, false))
        .sum();
    assert_eq!(direct > 0, expect_direct, "direct bytes {direct}");
}

#[test]
fn a_write_only_handle_still_cannot_read() {
    let _on = direct_io_on();
    let tmp = common::temp_file_in(None, &random_bytes(3 * PAGE, 34));
    let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "w", 0o644, None).unwrap();
    let mut buf = vec![0u8; 2 * PAGE];
    let err = file.read_into(&mut buf, 0).unwrap_err();
    assert!(err.to_string().contains("write-only"), "{err}");
}

#[test]
fn the_c_api_reads_and_sets_the_setting() {
    let _on = direct_io_on();
    use common::capi::{gdsroute_settings_get_auto_direct_io_read, gdsroute_settings_set_auto_direct_io_read};
    use gdsroute::Status;
    let mut on = false;
    // SAFETY: a valid out-pointer, then NULL (which must be refused).
    unsafe {
        assert_eq!(gdsroute_settings_get_auto_direct_io_read(&mut on), Status::Ok);
        assert!(on);
        assert_eq!(gdsroute_settings_set_auto_direct_io_read(false), Status::Ok);
        assert_eq!(gdsroute_settings_get_auto_direct_io_read(&mut on), Status::Ok);
        assert!(!on);
        assert_eq!(gdsroute_settings_get_auto_direct_io_read(std::ptr::null_mut()), Status::NullArgument);
    }
}

#[test]
fn diagnose_reports_the_setting_and_the_files_verdict() {
    let _on = direct_io_on();
    let tmp = common::temp_file_in(None, &random_bytes(PAGE, 35));
    let report = gdsroute::diagnose::report(Some(tmp.path().as_os_str().as_encoded_bytes()));
    assert!(report.contains("(KVIKIO_AUTO_DIRECT_IO_READ): on"), "{report}");
    let verdict = if has_direct_io(tmp.as_file()) { "POSIX reads take page-aligned ranges with direct I/O" } else { "POSIX reads go through the page cache (O_DIRECT open failed" };
    assert!(report.contains(verdict), "{report}");
}

#[test]
fn a_file_truncated_during_direct_reads_never_sees_writes_outside_the_range() {
    // A direct read that meets an end of file moved by a concurrent truncation writes zeros past
    // the bytes it reports (the device writes whole blocks), but never outside the requested
    // range, and the bytes it reports are the file's. The file is cut and rewritten with the same
    // bytes in a loop, so every byte read below the cut must equal the original; above it a byte
    // may also be 0 (the page cache's part of the read can copy the page the cut is zeroing).
    const CUT: usize = 41_060; // not on a page: every cut zeroes part of a cached page
    let _on = direct_io_on();
    let Some((tmp, data)) = file_with_direct_io(1 << 20, 36) else { return };
    settings::set_num_threads(4).unwrap();
    let file = common::open(tmp.path(), None);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cutter = {
        let (stop, f, data) = (stop.clone(), tmp.reopen().unwrap(), data.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.set_len(CUT as u64).unwrap();
                f.write_all_at(&data[CUT..], CUT as u64).unwrap();
            }
        })
    };
    let size = data.len();
    let mut buf = vec![POISON; size + 2 * GUARD + PAGE];
    let base = buf.as_ptr() as usize;
    let start = (base + GUARD).next_multiple_of(PAGE) - base;
    for _ in 0..300 {
        buf.fill(POISON);
        // SAFETY: size writable bytes at start; the read is waited for before the next use.
        let n = unsafe { file.pread_raw(buf[start..].as_mut_ptr(), size, 0).unwrap().wait().unwrap() };
        common::assert_bytes_across_cut(&buf[start..start + n], &data, CUT, "direct read");
        assert!(buf[..start].iter().chain(&buf[start + size..]).all(|&b| b == POISON), "written outside the range");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    cutter.join().unwrap();
}
