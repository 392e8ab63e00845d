//! One job: the calls a file driver (HDF5's) needs of a handle, through the Rust API: exclusive
//! creation ("x", "x+"), handles from a caller's descriptor (`File::open_fd`), truncation and
//! `flock` locks. Every byte is checked against the file itself (read with std), reads land
//! inside poisoned guards, and each refusal is checked for its status, errno and message. The
//! page-cache windows a truncation drops are tested beside the cache
//! (src/page_cache/file_written_tests.rs): without a GPU no window is ever registered.

mod common;

use common::{POISON, has_direct_io, random_bytes};
use gdsroute::{File, Status};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
const GUARD: usize = 4096 + 17;

fn bytes_of(path: &Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}

fn open(path: &Path, flags: &str) -> File {
    File::open(bytes_of(path), flags, 0o644, None).unwrap_or_else(|e| panic!("{flags}: {e}"))
}

/// Reads `len` bytes at `offset` through `file` into the middle of a poisoned buffer, with
/// `read_raw` (`parallel` false) or `pread_raw`; checks the guards on both sides and returns the
/// bytes the read reported.
fn guarded_read(file: &File, len: usize, offset: u64, parallel: bool) -> gdsroute::Result<Vec<u8>> {
    let mut buf = vec![POISON; len + 2 * GUARD];
    let dst = buf[GUARD..].as_mut_ptr();
    // SAFETY: dst holds len writable bytes; the buffer outlives the read (waited for below).
    let n = unsafe {
        if parallel { file.pread_raw(dst, len, offset).and_then(|op| op.wait()) } else { file.read_raw(dst, len, offset) }
    }?;
    assert!(n <= len, "read {n} of {len} bytes");
    assert!(buf[..GUARD].iter().all(|&b| b == POISON), "the guard before the buffer was written");
    assert!(buf[GUARD + len..].iter().all(|&b| b == POISON), "the guard after the buffer was written");
    Ok(buf[GUARD..GUARD + n].to_vec())
}

/// Writes `data` at `offset`, synchronously (`write_raw`) or in parallel (`pwrite_raw`).
fn write(file: &File, data: &[u8], offset: u64, parallel: bool) -> gdsroute::Result<usize> {
    if parallel {
        file.write_from(data, offset)
    } else {
        // SAFETY: the slice is valid and unchanged for the call.
        unsafe { file.write_raw(data.as_ptr(), data.len(), offset) }
    }
}

/// Writes `data` at `offset` into `model` (the file's expected contents), growing it with zeros.
fn apply(model: &mut Vec<u8>, data: &[u8], offset: usize) {
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

fn assert_file_is(path: &Path, model: &[u8], what: &str) {
    let back = std::fs::read(path).unwrap();
    assert_eq!(back.len(), model.len(), "{what}: file size");
    assert!(back == model, "{what}: file bytes differ");
}

/// The error of a call that must fail (`File` has no `Debug` for `unwrap_err`).
fn error_of<T>(result: gdsroute::Result<T>) -> gdsroute::Error {
    match result {
        Ok(_) => panic!("the call succeeded"),
        Err(err) => err,
    }
}

fn assert_os_error<T>(result: gdsroute::Result<T>, status: Status, errno: i32, needle: &str) -> gdsroute::Error {
    let err = error_of(result);
    assert_eq!(err.status(), status, "{err}");
    assert_eq!(err.os_error(), Some(errno), "{err}");
    assert!(err.to_string().contains(needle), "{err:?} does not mention {needle:?}");
    err
}

/// The process's umask, from procfs (asking `umask(2)` would change it under the other tests).
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:")).expect("Umask in /proc/self/status");
    u32::from_str_radix(line.trim(), 8).unwrap()
}

/// A raw descriptor of `path` opened with `flags` (no `O_CLOEXEC` games), owned.
/// Held by the tests that start child processes and by those that need a lock to go when their
/// descriptors close: a child holds every descriptor of this process from its fork to its exec
/// (`O_CLOEXEC` acts only at the exec), and with them the locks of their open files.
static CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn no_child_starts() -> std::sync::MutexGuard<'static, ()> {
    CHILDREN.lock().unwrap_or_else(|p| p.into_inner())
}

fn raw_open(path: &Path, flags: libc::c_int) -> OwnedFd {
    let c = std::ffi::CString::new(bytes_of(path)).unwrap();
    // SAFETY: a NUL-terminated path; no mode without O_CREAT.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open {path:?} {flags:#o}: {}", std::io::Error::last_os_error());
    // SAFETY: just opened, owned here.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

// ---------------------------------------------------------------------------------------------
// Exclusive creation
// ---------------------------------------------------------------------------------------------

#[test]
fn x_creates_a_new_file_with_its_mode_and_refuses_an_existing_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(5 * MIB + 4321, 11);
    for (flags, access) in [("x", libc::O_WRONLY), ("x+", libc::O_RDWR)] {
        let path = dir.path().join(format!("new-{flags}"));
        let file = File::open(bytes_of(&path), flags, 0o640, None).unwrap_or_else(|e| panic!("{flags}: {e}"));
        assert_eq!(file.fd_open_flags().unwrap() & libc::O_ACCMODE, access, "{flags}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640 & !umask(), "{flags}: the mode given, less the umask");
        assert_eq!(file.size().unwrap(), 0);
        assert_eq!(write(&file, &data[..1000], 0, false).unwrap(), 1000);
        assert_eq!(write(&file, &data[1000..], 1000, true).unwrap(), data.len() - 1000);
        assert_file_is(&path, &data, flags);
        if flags == "x+" {
            assert!(guarded_read(&file, data.len() + 10, 0, true).unwrap() == data);
            assert!(guarded_read(&file, 4096, 77, false).unwrap() == data[77..77 + 4096]);
        } else {
            // Write-only, as "w": a read fails with EBADF and the message names the flags.
            assert_os_error(guarded_read(&file, 10, 0, false), Status::IoError, libc::EBADF, "write-only (\"x\")");
        }
        drop(file);
        // The file exists now: both exclusive modes refuse it with EEXIST and leave it alone.
        for again in ["x", "x+"] {
            let err = assert_os_error(File::open(bytes_of(&path), again, 0o600, None), Status::OpenFailed, libc::EEXIST, &path.to_string_lossy());
            assert!(err.to_string().contains(&format!("{again:?}")), "{err}");
        }
        assert_file_is(&path, &data, "after the refused opens");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o640 & !umask());
    }
    // O_EXCL does not follow a symbolic link: one to a missing file exists, and nothing is created.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path().join("missing"), &link).unwrap();
    assert_os_error(File::open(bytes_of(&link), "x+", 0o600, None), Status::OpenFailed, libc::EEXIST, "link");
    assert!(!dir.path().join("missing").exists());
    // Flags near the new ones stay invalid.
    for bad in ["xx", "x+b", "X", "+x", "xr"] {
        let err = error_of(File::open(bytes_of(&dir.path().join("bad")), bad, 0o600, None));
        assert_eq!(err.status(), Status::InvalidFlags, "{bad}: {err}");
        assert!(err.to_string().contains("\"x+\""), "{err}");
    }
    assert!(!dir.path().join("bad").exists());
}

// ---------------------------------------------------------------------------------------------
// Handles from a caller's descriptor
// ---------------------------------------------------------------------------------------------

#[test]
fn a_handle_from_a_read_write_descriptor_reads_and_writes_every_byte() {
    let mut model = random_bytes(9 * MIB + 777, 21);
    let tmp = common::temp_file_in(None, &model);
    let caller = std::fs::OpenOptions::new().read(true).write(true).open(tmp.path()).unwrap();
    let file = File::open_fd(caller.as_fd(), None).unwrap();
    assert_eq!(file.path().unwrap(), tmp.path().to_string_lossy(), "named by what /proc/self/fd links to");
    let fd = file.fd().unwrap();
    assert_ne!(fd, caller.as_raw_fd(), "the handle holds a duplicate");
    // SAFETY: F_GETFD on a descriptor the handle holds open.
    assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, 0, "the duplicate is close-on-exec");
    assert_eq!(file.fd_open_flags().unwrap() & libc::O_ACCMODE, libc::O_RDWR);
    assert_eq!(file.size().unwrap(), model.len() as u64);

    for (i, &(len, offset)) in [(1usize, 0u64), (4095, 1), (MIB + 3, 4096), (5 * MIB + 1, 777_777), (3 * MIB, model.len() as u64 + 12345)].iter().enumerate() {
        let data = random_bytes(len, 100 + i as u64);
        assert_eq!(write(&file, &data, offset, i % 2 == 1).unwrap(), len);
        apply(&mut model, &data, offset as usize);
        assert_file_is(tmp.path(), &model, &format!("write {i}"));
    }
    for (i, &(len, offset)) in [(model.len(), 0u64), (4097, 4095), (8 * MIB, 1234), (100, model.len() as u64 - 10), (10, model.len() as u64 + 5)].iter().enumerate() {
        let want = &model[(offset as usize).min(model.len())..(offset as usize + len).min(model.len())];
        for parallel in [false, true] {
            assert!(guarded_read(&file, len, offset, parallel).unwrap() == want, "read {i}, parallel {parallel}");
        }
    }
    // The caller's descriptor sees the handle's writes, and the handle the caller's.
    let mut back = vec![0u8; 4096];
    caller.read_exact_at(&mut back, 4096).unwrap();
    assert!(back == model[4096..8192]);
    caller.write_all_at(b"caller", 10).unwrap();
    apply(&mut model, b"caller", 10);
    assert!(guarded_read(&file, 16, 8, false).unwrap() == model[8..24]);

    // Freed, the handle closes its duplicate only: the caller's descriptor stays open and usable.
    drop(file);
    // SAFETY: F_GETFD takes no argument.
    assert!(unsafe { libc::fcntl(caller.as_raw_fd(), libc::F_GETFD) } >= 0, "the caller's descriptor was closed");
    caller.write_all_at(b"after", 20).unwrap();
    apply(&mut model, b"after", 20);
    assert_file_is(tmp.path(), &model, "written through the caller's descriptor after the handle went");
}

#[test]
fn a_handle_outlives_the_callers_descriptor() {
    let data = random_bytes(3 * MIB + 5, 22);
    let tmp = common::temp_file_in(None, &data);
    let caller = raw_open(tmp.path(), libc::O_RDONLY);
    let file = File::open_fd(caller.as_fd(), None).unwrap();
    drop(caller);
    assert!(guarded_read(&file, data.len(), 0, true).unwrap() == data);
    // The file removed: the handle still reads it, and its name says so.
    std::fs::remove_file(tmp.path()).unwrap();
    let again = raw_open(Path::new(&format!("/proc/self/fd/{}", file.fd().unwrap())), libc::O_RDONLY);
    let deleted = File::open_fd(again.as_fd(), None).unwrap();
    assert!(deleted.path().unwrap().ends_with("(deleted)"), "{}", deleted.path().unwrap());
    assert!(guarded_read(&deleted, 4096, 5, false).unwrap() == data[5..4101]);
}

#[test]
fn the_access_mode_of_the_descriptor_is_the_handles() {
    let data = random_bytes(2 * MIB + 99, 23);
    let tmp = common::temp_file_in(None, &data);
    let path = tmp.path().to_string_lossy().into_owned();

    // O_RDONLY: reads as "r"; every write, and a truncation, refused at once with EBADF.
    let caller = raw_open(tmp.path(), libc::O_RDONLY);
    let file = File::open_fd(caller.as_fd(), None).unwrap();
    assert_eq!(file.fd_open_flags().unwrap() & libc::O_ACCMODE, libc::O_RDONLY);
    assert!(guarded_read(&file, data.len(), 0, true).unwrap() == data);
    for parallel in [false, true] {
        for size in [0usize, 3] {
            let err = assert_os_error(write(&file, &b"xyz"[..size], 0, parallel), Status::IoError, libc::EBADF, "read-only descriptor (O_RDONLY)");
            assert!(err.to_string().contains(&path), "{err}");
        }
    }
    assert_os_error(file.truncate(1), Status::IoError, libc::EBADF, "truncate of a file opened from a read-only descriptor");
    assert_file_is(tmp.path(), &data, "O_RDONLY");
    drop(file);

    // O_WRONLY: writes as "w" without truncating; a read fails with EBADF.
    let caller = raw_open(tmp.path(), libc::O_WRONLY);
    let file = File::open_fd(caller.as_fd(), None).unwrap();
    assert_eq!(file.size().unwrap(), data.len() as u64, "no truncation at open");
    assert_eq!(file.fd_open_flags().unwrap() & libc::O_ACCMODE, libc::O_WRONLY);
    for parallel in [false, true] {
        assert_os_error(guarded_read(&file, 100, 0, parallel), Status::IoError, libc::EBADF, "write-only descriptor (O_WRONLY)");
    }
    let mut model = data.clone();
    let more = random_bytes(MIB + 1, 24);
    assert_eq!(write(&file, &more, 12345, true).unwrap(), more.len());
    apply(&mut model, &more, 12345);
    assert_file_is(tmp.path(), &model, "O_WRONLY");
    // O_RDONLY with O_APPEND cannot write, so it is taken.
    let caller = raw_open(tmp.path(), libc::O_RDONLY | libc::O_APPEND);
    assert!(guarded_read(&File::open_fd(caller.as_fd(), None).unwrap(), 64, 1, false).unwrap() == model[1..65]);
}

#[test]
fn descriptors_a_handle_cannot_use_are_refused() {
    let data = random_bytes(10_000, 25);
    let tmp = common::temp_file_in(None, &data);
    let name = tmp.path().to_string_lossy().into_owned();
    // O_PATH: neither reads nor writes.
    let path_only = raw_open(tmp.path(), libc::O_PATH);
    let err = assert_os_error(File::open_fd(path_only.as_fd(), None), Status::OpenFailed, libc::EBADF, "O_PATH");
    assert!(err.to_string().contains(&name), "{err}");
    // O_APPEND that can write: Linux's pwrite would append wherever the handle writes.
    for access in [libc::O_WRONLY, libc::O_RDWR] {
        let append = raw_open(tmp.path(), access | libc::O_APPEND);
        let err = error_of(File::open_fd(append.as_fd(), None));
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
        assert!(err.to_string().contains("O_APPEND") && err.to_string().contains(&name), "{err}");
    }
    // O_DIRECT, where the file system has it: the handle's own transfers are buffered.
    if has_direct_io(tmp.as_file()) {
        let direct = raw_open(tmp.path(), libc::O_RDWR | libc::O_DIRECT);
        let err = error_of(File::open_fd(direct.as_fd(), None));
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
        assert!(err.to_string().contains("O_DIRECT"), "{err}");
    }
    assert_file_is(tmp.path(), &data, "refused descriptors change nothing");
    // A number that is no descriptor (above any limit), which only C can pass: EBADF.
    #[allow(improper_ctypes)] // `File` crosses as an opaque pointer, as in C
    unsafe extern "C" {
        fn gdsroute_file_open_fd(fd: libc::c_int, file: *mut *mut File) -> Status;
        fn gdsroute_last_error_errno() -> i32;
    }
    let mut handle = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the errno is the calling thread's.
    let (status, errno) = unsafe { (gdsroute_file_open_fd(1 << 30, &mut handle), gdsroute_last_error_errno()) };
    assert_eq!((status, errno), (Status::OpenFailed, libc::EBADF));
    assert!(handle.is_null());
}

/// The O_DIRECT descriptor a handle from a descriptor opens (from /proc/self/fd, with its access
/// mode) serves direct reads and writes as a path-opened handle's does. Run in a child process
/// with direct I/O on in its environment, so that no other test here reads with it.
#[test]
fn a_handle_from_a_descriptor_takes_direct_io() {
    let _children = no_child_starts();
    let tmp = tempfile::NamedTempFile::new().unwrap();
    if !has_direct_io(tmp.as_file()) {
        eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
        return;
    }
    let env = [("KVIKIO_AUTO_DIRECT_IO_READ", "1".into()), ("KVIKIO_AUTO_DIRECT_IO_WRITE", "1".into())];
    common::run_ignored_test("child_with_direct_io", &env);
}

#[test]
#[ignore = "run by a_handle_from_a_descriptor_takes_direct_io in a child process"]
fn child_with_direct_io() {
    assert!(gdsroute::settings::auto_direct_io_read().unwrap() && gdsroute::settings::auto_direct_io_write().unwrap());
    let mut model = random_bytes(8 * MIB + 4096 + 5, 26);
    let tmp = common::temp_file_in(None, &model);
    let caller = raw_open(tmp.path(), libc::O_RDWR);
    let file = File::open_fd(caller.as_fd(), None).unwrap();
    assert_eq!(file.direct_fd().unwrap(), None, "none before a direct task");
    let data = random_bytes(4 * MIB, 27);
    assert_eq!(write(&file, &data, 4096, true).unwrap(), data.len());
    apply(&mut model, &data, 4096);
    assert!(guarded_read(&file, model.len(), 0, true).unwrap() == model);
    let stats = file.stats();
    assert!(stats.posix_direct_write_bytes > 0 && stats.posix_direct_bytes > 0, "no direct I/O: {stats:?}");
    let direct = file.direct_fd().unwrap().expect("the O_DIRECT descriptor");
    // SAFETY: F_GETFL on a descriptor the handle holds open.
    let flags = unsafe { libc::fcntl(direct, libc::F_GETFL) };
    assert_eq!(flags & libc::O_ACCMODE, libc::O_RDWR);
    assert_ne!(flags & libc::O_DIRECT, 0);
    assert_file_is(tmp.path(), &model, "direct writes");
    println!("direct I/O through a handle from a descriptor: ok");
}

// ---------------------------------------------------------------------------------------------
// Truncation
// ---------------------------------------------------------------------------------------------

#[test]
fn truncate_shrinks_and_grows_and_reads_follow() {
    let len = 6 * MIB + 321;
    let data = random_bytes(len, 31);
    let tmp = common::temp_file_in(None, &data);
    let file = open(tmp.path(), "r+");
    let reader = open(tmp.path(), "r");
    let from_fd = File::open_fd(raw_open(tmp.path(), libc::O_RDONLY).as_fd(), None).unwrap();
    let mut model = data.clone();
    for (round, size) in [len / 3, 2 * MIB, 1, 0, 4 * MIB + 7, len + 3 * MIB, MIB - 1].into_iter().enumerate() {
        file.truncate(size as u64).unwrap();
        model.resize(size, 0); // a shrink drops the tail, an extension reads as zeros
        assert_eq!(file.size().unwrap(), size as u64, "round {round}");
        assert_file_is(tmp.path(), &model, &format!("round {round}"));
        for handle in [&file, &reader, &from_fd] {
            for parallel in [false, true] {
                // The whole old length: a short count at the new end, the bytes the file has.
                assert!(guarded_read(handle, len + 3 * MIB, 0, parallel).unwrap() == model, "round {round}");
                assert!(guarded_read(handle, 4096, size as u64, parallel).unwrap().is_empty(), "round {round}: at the end");
                assert!(guarded_read(handle, 4096, size as u64 + 4096, parallel).unwrap().is_empty(), "round {round}: past it");
                let offset = size.saturating_sub(100);
                assert!(guarded_read(handle, 4096, offset as u64, parallel).unwrap() == model[offset..], "round {round}: across it");
            }
        }
        // Writes after a truncation land where asked, past the end too.
        let more = random_bytes(MIB / 2 + round, 40 + round as u64);
        let at = size / 2 + round * 4097;
        assert_eq!(write(&file, &more, at as u64, round % 2 == 0).unwrap(), more.len());
        apply(&mut model, &more, at);
        assert_file_is(tmp.path(), &model, &format!("round {round}, written"));
        assert!(guarded_read(&reader, model.len(), 0, true).unwrap() == model);
    }
}

#[test]
fn truncate_refusals_change_nothing() {
    let data = random_bytes(70_000, 32);
    let tmp = common::temp_file_in(None, &data);
    let name = tmp.path().to_string_lossy().into_owned();
    let reader = open(tmp.path(), "r");
    let err = assert_os_error(reader.truncate(0), Status::IoError, libc::EBADF, "truncate of a file opened read-only (\"r\")");
    assert!(err.to_string().contains(&name), "{err}");
    let file = open(tmp.path(), "r+");
    for size in [i64::MAX as u64 + 1, u64::MAX] {
        let err = file.truncate(size).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
        assert!(err.to_string().contains(&size.to_string()) && err.to_string().contains(&name), "{err}");
    }
    // The largest off_t is passed on; file systems refuse it (EFBIG, EINVAL), an I/O error.
    if let Err(err) = file.truncate(i64::MAX as u64) {
        assert_eq!(err.status(), Status::IoError, "{err}");
        assert!(err.os_error().is_some_and(|e| e != 0), "{err}");
        assert_file_is(tmp.path(), &data, "refused by the file system");
    }
    file.truncate(data.len() as u64).unwrap();
    file.close();
    let err = file.truncate(0).unwrap_err();
    assert_eq!(err.status(), Status::ClosedHandle, "{err}");
    assert_file_is(tmp.path(), &data, "after the refusals");
    // "w" and "x" handles truncate (write-only is enough).
    let dir = tempfile::tempdir().unwrap();
    for flags in ["w", "x"] {
        let path = dir.path().join(flags);
        let file = open(&path, flags);
        file.truncate(12345).unwrap();
        assert_file_is(&path, &[0u8; 12345], flags);
    }
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

fn would_block(result: gdsroute::Result<()>, what: &str) {
    let err = result.expect_err(what);
    assert_eq!(err.status(), Status::IoError, "{what}: {err}");
    assert_eq!(err.os_error(), Some(libc::EWOULDBLOCK), "{what}: {err}");
    assert!(err.to_string().contains("flock(LOCK_"), "{what}: {err}");
}

#[test]
fn two_handles_of_a_file_conflict_as_two_holders() {
    let tmp = common::temp_file_in(None, b"locked");
    let (a, b) = (open(tmp.path(), "r+"), open(tmp.path(), "r"));
    a.lock(true, false).unwrap();
    would_block(b.lock(true, false), "exclusive against exclusive");
    would_block(b.lock(false, false), "shared against exclusive");
    a.lock(true, false).unwrap(); // locking again is no conflict with itself
    a.unlock().unwrap();
    b.lock(true, false).unwrap();
    would_block(a.lock(false, false), "the other way round");
    b.unlock().unwrap();
    // Shared and shared: both hold it; an upgrade waits for the other to let go.
    a.lock(false, false).unwrap();
    b.lock(false, false).unwrap();
    would_block(a.lock(true, false), "an upgrade while another holds it shared");
    b.unlock().unwrap();
    a.lock(true, false).unwrap();
    a.lock(false, false).unwrap(); // and down again
    b.lock(false, false).unwrap();
    b.unlock().unwrap();
    b.unlock().unwrap(); // without a lock: nothing to do
    // Closing a handle opened by path lets its lock go.
    a.lock(true, false).unwrap();
    a.close();
    b.lock(true, false).unwrap();
    for result in [a.lock(true, false), a.unlock()] {
        assert_eq!(result.unwrap_err().status(), Status::ClosedHandle);
    }
}

#[test]
fn a_waiting_lock_waits_for_the_holder_and_through_signals() {
    extern "C" fn ignore(_: libc::c_int) {}
    // A handler without SA_RESTART: a signal makes the waiting flock fail with EINTR, which the
    // library must take as "wait again".
    // SAFETY: a zeroed sigaction with a plain handler and an empty mask.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0);
    }
    let tmp = common::temp_file_in(None, b"locked");
    let holder = open(tmp.path(), "r+");
    let waiter = Arc::new(open(tmp.path(), "r"));
    holder.lock(true, true).unwrap();
    let returned = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let thread = {
        let (waiter, returned) = (Arc::clone(&waiter), Arc::clone(&returned));
        std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            let result = waiter.lock(false, true);
            returned.store(true, Ordering::Release);
            result
        })
    };
    let id = rx.recv().unwrap();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        if returned.load(Ordering::Acquire) {
            let result = thread.join().unwrap();
            panic!("the waiting lock returned while another handle held it: {:?}", result.map_err(|e| e.to_string()));
        }
        // SAFETY: the thread is alive: its lock call has not returned, which needs the unlock below.
        assert_eq!(unsafe { libc::pthread_kill(id, libc::SIGUSR1) }, 0);
    }
    holder.unlock().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !thread.is_finished() {
        assert!(Instant::now() < deadline, "the waiting lock was not granted after the unlock");
        std::thread::sleep(Duration::from_millis(5));
    }
    thread.join().unwrap().expect("a signal ended the wait instead of waiting again");
    would_block(holder.lock(true, false), "the waiter holds it shared now");
}

#[test]
fn a_handle_from_a_descriptor_locks_with_the_callers_descriptor() {
    let _children = no_child_starts();
    let tmp = common::temp_file_in(None, b"locked");
    let caller = raw_open(tmp.path(), libc::O_RDWR);
    let file = File::open_fd(caller.as_fd(), None).unwrap();
    file.lock(true, false).unwrap();
    // The same open file description: the caller's descriptor holds the same lock...
    // SAFETY: plain system calls on descriptors owned here.
    assert_eq!(unsafe { libc::flock(caller.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    // ...while another description of the file (another open) conflicts with both.
    let other = raw_open(tmp.path(), libc::O_RDONLY);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) }, -1);
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EWOULDBLOCK));
    would_block(open(tmp.path(), "r").lock(false, false), "a handle opened by path");
    // Freeing the handle leaves the lock with the caller's descriptor; closing that releases it.
    drop(file);
    would_block(open(tmp.path(), "r").lock(false, false), "after the handle went");
    drop(caller);
    open(tmp.path(), "r").lock(true, false).unwrap();
}

#[test]
fn a_lock_held_here_is_seen_by_another_process() {
    let _children = no_child_starts();
    let tmp = common::temp_file_in(None, b"locked");
    let file = open(tmp.path(), "r+");
    let path = tmp.path().as_os_str().to_owned();
    file.lock(true, false).unwrap();
    common::run_ignored_test("child_tries_the_lock", &[("GDSROUTE_TEST_LOCK_FILE", path.clone()), ("GDSROUTE_TEST_LOCK_HELD", "exclusive".into())]);
    file.lock(false, false).unwrap();
    common::run_ignored_test("child_tries_the_lock", &[("GDSROUTE_TEST_LOCK_FILE", path.clone()), ("GDSROUTE_TEST_LOCK_HELD", "shared".into())]);
    file.unlock().unwrap();
    common::run_ignored_test("child_tries_the_lock", &[("GDSROUTE_TEST_LOCK_FILE", path), ("GDSROUTE_TEST_LOCK_HELD", "none".into())]);
}

#[test]
#[ignore = "run by a_lock_held_here_is_seen_by_another_process in a child process"]
fn child_tries_the_lock() {
    let path = std::env::var_os("GDSROUTE_TEST_LOCK_FILE").expect("started by the parent test");
    let held = std::env::var("GDSROUTE_TEST_LOCK_HELD").unwrap();
    let file = open(Path::new(&path), "r");
    match held.as_str() {
        "exclusive" => {
            would_block(file.lock(true, false), "exclusive, held exclusively by the parent");
            would_block(file.lock(false, false), "shared, held exclusively by the parent");
        }
        "shared" => {
            would_block(file.lock(true, false), "exclusive, held shared by the parent");
            file.lock(false, false).unwrap();
        }
        _ => file.lock(true, false).unwrap(),
    }
    println!("lock held {held}: as expected");
}
