//! The page-cache tools (`gdsroute::page_cache_tools`, KvikIO's `get_page_cache_info` and
//! `drop_file_page_cache`): resident pages of ranges before and after a drop, on a file system
//! that keeps files in the page cache (the target directory); range edges; bad paths.

use gdsroute::page_cache_tools::{Residency, drop_file_page_cache, drop_system_page_cache, page_cache_info, supports_direct_io};
use gdsroute::Error;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;

const PAGE: u64 = 4096;

/// Held by the tests that count resident pages and by the one that drops the whole system's page
/// cache: run as root, that drop evicts the pages the others have just read.
static SYSTEM_PAGE_CACHE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_tmpfs(path: &std::path::Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == 0x0102_1994 }
}

fn file_of(bytes: usize) -> tempfile::NamedTempFile {
    let mut tmp = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
    tmp.write_all(&data).unwrap();
    tmp.as_file().sync_all().unwrap();
    tmp
}

fn read_all(path: &std::path::Path, len: usize) {
    let mut buf = vec![0u8; len];
    std::fs::File::open(path).unwrap().read_exact(&mut buf).unwrap();
}

#[test]
fn pages_are_resident_after_a_read_and_gone_after_a_drop() {
    let _system = SYSTEM_PAGE_CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let tmp = file_of((4 << 20) + 100);
    let path = tmp.path().as_os_str().as_bytes();
    let pages = ((4u64 << 20) + 100).div_ceil(PAGE);
    read_all(tmp.path(), (4 << 20) + 100);
    let info = page_cache_info(path, 0, 0).unwrap();
    assert_eq!(info, Residency { resident: pages, total: pages }, "a file just read is in the page cache");
    if is_tmpfs(tmp.path()) {
        eprintln!("the target directory is on tmpfs: its pages cannot be dropped; not checked");
        return;
    }
    drop_file_page_cache(path, 0, 0, true).unwrap();
    assert_eq!(page_cache_info(path, 0, 0).unwrap(), Residency { resident: 0, total: pages }, "dropped");
    // One MiB read back: exactly those pages return.
    read_all(tmp.path(), 1 << 20);
    let head = page_cache_info(path, 0, 1 << 20).unwrap();
    assert_eq!(head.total, 256);
    assert!(head.resident >= 256 - 32, "the pages read are resident (read-ahead may add more): {head:?}");
    // A drop of a range leaves the rest.
    drop_file_page_cache(path, 0, 512 * 1024, false).unwrap();
    let first = page_cache_info(path, 0, 512 * 1024).unwrap();
    assert_eq!(first.resident, 0, "{first:?}");
    let second = page_cache_info(path, 512 * 1024, 512 * 1024).unwrap();
    assert_eq!(second.resident, 128, "{second:?}");
}

#[test]
fn ranges_count_the_pages_they_span_and_nothing_past_the_end() {
    let tmp = file_of(100 * PAGE as usize + 10);
    let path = tmp.path().as_os_str().as_bytes();
    assert_eq!(page_cache_info(path, 10 * PAGE, 5 * PAGE).unwrap().total, 5);
    assert_eq!(page_cache_info(path, 1, PAGE).unwrap().total, 2, "a range across a page boundary spans two pages");
    assert_eq!(page_cache_info(path, 100 * PAGE, 0).unwrap().total, 1, "the last, partial page");
    assert_eq!(page_cache_info(path, 200 * PAGE, 10).unwrap(), Residency::default(), "past the end: nothing");
    assert_eq!(page_cache_info(path, u64::MAX, u64::MAX).unwrap(), Residency::default());
    let empty = file_of(0);
    assert_eq!(page_cache_info(empty.path().as_os_str().as_bytes(), 0, 0).unwrap(), Residency::default());
    drop_file_page_cache(empty.path().as_os_str().as_bytes(), 0, 0, true).unwrap();
}

#[test]
fn bad_paths_are_clear_errors() {
    for bad in [&b""[..], b"a\0b"] {
        assert!(matches!(page_cache_info(bad, 0, 0), Err(Error::InvalidPath(_))), "{bad:?}");
        assert!(matches!(drop_file_page_cache(bad, 0, 0, false), Err(Error::InvalidPath(_))));
        assert!(matches!(supports_direct_io(bad), Err(Error::InvalidPath(_))));
    }
    let missing = b"/nonexistent/gdsroute-page-cache-tools";
    let err = page_cache_info(missing, 0, 0).unwrap_err();
    assert!(matches!(err, Error::Open { .. }) && err.os_error() == Some(libc::ENOENT), "{err}");
    assert!(matches!(drop_file_page_cache(missing, 0, 0, false), Err(Error::Open { .. })));
    assert!(matches!(supports_direct_io(missing), Err(Error::Open { .. })));
}

#[test]
fn direct_io_support_is_answered() {
    let tmp = file_of(PAGE as usize);
    let disk = supports_direct_io(tmp.path().as_os_str().as_bytes()).unwrap();
    eprintln!("O_DIRECT in the target directory: {disk}");
    // /proc files refuse O_DIRECT with EINVAL: the answer is "no", not an error.
    assert!(!supports_direct_io(b"/proc/self/status").unwrap());
}

#[test]
fn dropping_the_system_page_cache_needs_root() {
    let _system = SYSTEM_PAGE_CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Root in a container may still be refused (/proc/sys read-only).
        match drop_system_page_cache() {
            Ok(()) => {}
            Err(e) => assert!(matches!(e.os_error(), Some(libc::EACCES) | Some(libc::EROFS) | Some(libc::EPERM)), "{e}"),
        }
    } else {
        assert_eq!(drop_system_page_cache().unwrap_err().os_error(), Some(libc::EACCES));
    }
}
