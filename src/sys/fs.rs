//! File-system calls without policy: a file's status, its size and where its readable bytes end
//! (regular files and block devices), and the one `pread`/`pwrite` loop of both directions
//! (`transfer_once`: `EINTR` retried; `transfer_full`: short counts continued), and the calls on
//! a descriptor of a file handle (sync, truncate, `flock`, status flags, duplication). The POSIX
//! backend, direct I/O, readahead, the page cache and the handle ask here; what to read or write,
//! and how, is theirs.

use crate::direction::Direction;
use std::io;
use std::os::fd::RawFd;

/// Most bytes one `pread` or `pwrite` is asked for: Linux transfers at most 0x7ffff000 bytes per
/// call; asking for no more keeps the loops honest on other kernels too.
pub(crate) const MAX_SYSCALL_BYTES: usize = 0x7fff_f000;

/// One `pread` into `buf` (`Read`) or `pwrite` from it (`Write`) of at most `len` bytes (and at
/// most `MAX_SYSCALL_BYTES`), retried on `EINTR`; returns the bytes it moved.
///
/// # Safety
/// `buf` must be valid for `len` bytes for the duration of the call: writable for a read; a write
/// only reads it.
pub(crate) unsafe fn transfer_once(direction: Direction, fd: RawFd, buf: *mut u8, len: usize, offset: u64) -> io::Result<usize> {
    let want = len.min(MAX_SYSCALL_BYTES);
    loop {
        // SAFETY: forwarded from the caller (want <= len).
        let n = unsafe {
            match direction {
                Direction::Read => libc::pread(fd, buf.cast(), want, offset as libc::off_t),
                Direction::Write => libc::pwrite(fd, buf.cast_const().cast(), want, offset as libc::off_t),
            }
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Where `transfer_full` stopped before the end of its range: the bytes moved before the call
/// that failed (which started at the range's offset plus `moved`) and its error.
#[derive(Debug)]
pub(crate) struct Stopped {
    pub moved: usize,
    pub error: io::Error,
}

/// `transfer_once` until `len` bytes at `offset` moved, continuing after short counts. A read that
/// returns nothing is the end of the file: the bytes read so far, fewer than `len`, and no error.
/// A write that writes nothing is an error (`ErrorKind::WriteZero`), never a silent short count: a
/// write either covers its range or fails.
///
/// # Safety
/// As `transfer_once`.
pub(crate) unsafe fn transfer_full(direction: Direction, fd: RawFd, buf: *mut u8, len: usize, offset: u64) -> Result<usize, Stopped> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: buf + done .. buf + len lies inside the caller's range (done < len); callers
        // validated that offset + len fits in off_t.
        match unsafe { transfer_once(direction, fd, buf.add(done), len - done, offset + done as u64) } {
            Ok(0) => match direction {
                Direction::Read => break,
                Direction::Write => {
                    return Err(Stopped { moved: done, error: io::Error::new(io::ErrorKind::WriteZero, "pwrite wrote 0 bytes") });
                }
            },
            Ok(n) => done += n,
            Err(error) => return Err(Stopped { moved: done, error }),
        }
    }
    Ok(done)
}

/// `fstat` of an open file.
pub(crate) fn stat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full `struct stat` on success; we read it only then.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: rc == 0, so the struct was filled.
    Ok(unsafe { st.assume_init() })
}

/// The size of an open file, from `fstat` (a block device's from its `ioctl`: its `st_size` is
/// 0), as KvikIO's `get_file_size`.
pub(crate) fn file_size(fd: RawFd) -> io::Result<u64> {
    size_of(fd, &stat(fd)?)
}

/// `file_size` from the file's status `st`.
pub(crate) fn size_of(fd: RawFd, st: &libc::stat) -> io::Result<u64> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFBLK => block_device_size(fd),
        _ => Ok(st.st_size.max(0) as u64),
    }
}

/// Where the bytes a read can find end, from the file's status `st` (one `ioctl` more for a block
/// device): the size of a regular file or of a block device; `None` for other files (pipes,
/// character devices, directories, sockets), whose `st_size` says nothing about what a read
/// returns. A regular file of size 0 counts as unknown too: procfs and sysfs files report 0 and
/// still have bytes to read (they are read until a short read, as before).
pub(crate) fn readable_end_of(fd: RawFd, st: &libc::stat) -> io::Result<Option<u64>> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG if st.st_size == 0 => Ok(None),
        libc::S_IFREG => Ok(Some(st.st_size as u64)),
        libc::S_IFBLK => block_device_size(fd).map(Some),
        _ => Ok(None),
    }
}

/// `readable_end_of` after one `fstat`.
pub(crate) fn readable_end(fd: RawFd) -> io::Result<Option<u64>> {
    readable_end_of(fd, &stat(fd)?)
}

/// The size in bytes of the block device open as `fd` (its `st_size` is 0).
pub(crate) fn block_device_size(fd: RawFd) -> io::Result<u64> {
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    if unsafe { libc::ioctl(fd, BLKGETSIZE64, &mut bytes) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes)
}

/// `BLKGETSIZE64` of `<linux/fs.h>`: `_IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

/// Whether the file system of `fd` runs buffered writes to one file one at a time: ext4, XFS,
/// btrfs and tmpfs take the inode's lock exclusively around each buffered write
/// (`ext4_buffered_write_iter`, `xfs_file_buffered_write`, `btrfs_buffered_write`,
/// `shmem_file_write_iter`), so more threads writing one file through the page cache only queue
/// on that lock. False where it cannot tell or the file system may write ranges in parallel
/// (Lustre's range locks, network file systems), and for anything but a regular file (a block
/// device node on devtmpfs reports tmpfs, yet its writes take no inode lock).
pub(crate) fn serializes_buffered_writes(fd: RawFd) -> bool {
    if !stat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG) {
        return false;
    }
    matches!(file_system_magic(fd), Some(magic::EXT4 | magic::XFS | magic::BTRFS | magic::TMPFS))
}

/// File-system magic numbers (`statfs(2)`'s `f_type`, linux/magic.h) the library tells apart.
pub(crate) mod magic {
    pub(crate) const EXT4: u32 = 0xEF53; // ext2/3/4 share the magic
    pub(crate) const XFS: u32 = 0x5846_5342;
    pub(crate) const BTRFS: u32 = 0x9123_683E;
    pub(crate) const TMPFS: u32 = 0x0102_1994;
    pub(crate) const RAMFS: u32 = 0x8584_58F6;
    pub(crate) const NFS: u32 = 0x6969;
    pub(crate) const CIFS: u32 = 0xFF53_4D42;
    pub(crate) const SMB2: u32 = 0xFE53_4D42;
    pub(crate) const LUSTRE: u32 = 0x0BD0_0BD0;
    pub(crate) const GPFS: u32 = 0x4750_4653;
    pub(crate) const FUSE: u32 = 0x6573_5546;
    pub(crate) const OVERLAYFS: u32 = 0x794C_7630;
}

/// The magic number of the file system holding `fd` (`fstatfs`), `None` when the call fails.
pub(crate) fn file_system_magic(fd: RawFd) -> Option<u32> {
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer; a bad descriptor only makes the call fail.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return None;
    }
    // The magic is 32 bits wide; `f_type` is a signed word (sign-extended where it is 32 bits).
    Some((st.f_type as i64 & 0xFFFF_FFFF) as u32)
}

/// Runs a system call that returns -1 and sets errno on failure, again while it fails with
/// `EINTR`; returns its non-negative result.
fn retrying_eintr(mut call: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let r = call();
        if r >= 0 {
            return Ok(r);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `fsync(2)` (`data_only`: `fdatasync(2)`), retried on `EINTR`.
pub(crate) fn fsync(fd: RawFd, data_only: bool) -> io::Result<()> {
    // SAFETY: plain system calls on a descriptor; a bad one is an error, not UB.
    retrying_eintr(|| unsafe { if data_only { libc::fdatasync(fd) } else { libc::fsync(fd) } }).map(drop)
}

/// `ftruncate(2)` to `size` bytes (at most `i64::MAX`: callers check), retried on `EINTR`.
pub(crate) fn truncate(fd: RawFd, size: u64) -> io::Result<()> {
    let size = libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a plain system call on a descriptor.
    retrying_eintr(|| unsafe { libc::ftruncate(fd, size) }).map(drop)
}

/// `flock(2)` with `operation` (`LOCK_SH`, `LOCK_EX` or `LOCK_UN`, with `LOCK_NB` or not),
/// retried on `EINTR` (a signal that interrupts a wait for the lock waits again).
pub(crate) fn flock(fd: RawFd, operation: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor.
    retrying_eintr(|| unsafe { libc::flock(fd, operation) }).map(drop)
}

/// The file status flags and access mode of an open descriptor (`fcntl(F_GETFL)`).
pub(crate) fn status_flags(fd: RawFd) -> io::Result<libc::c_int> {
    // SAFETY: F_GETFL takes no argument and reads no memory of ours.
    retrying_eintr(|| unsafe { libc::fcntl(fd, libc::F_GETFL) })
}

/// A new descriptor of the open file description of `fd` (`fcntl(F_DUPFD_CLOEXEC)`), owned by
/// the caller: it shares the file offset, the status flags and `flock` locks with `fd`.
pub(crate) fn duplicate(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    duplicate_at_or_above(fd, 0)
}

/// `duplicate` onto the lowest free descriptor number at or above `lowest` (the kernel grows the
/// descriptor table to hold it: `sys::fd_table`).
pub(crate) fn duplicate_at_or_above(fd: RawFd, lowest: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes the lowest descriptor number to use; no memory of ours.
    let new = retrying_eintr(|| unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) })?;
    // SAFETY: just made by the kernel, owned by nobody else.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new) })
}

/// What `/proc/self/fd/N` links to for the descriptor `fd` (a path, `pipe:[...]`, a deleted
/// file's path with " (deleted)"), `None` where it cannot be read (no procfs).
pub(crate) fn descriptor_target(fd: RawFd) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn tmpfs_serializes_buffered_writes_and_procfs_is_not_known_to() {
        if let Ok(f) = tempfile::tempfile_in("/dev/shm") {
            assert!(serializes_buffered_writes(f.as_raw_fd()), "/dev/shm is tmpfs");
        }
        let proc = std::fs::File::open("/proc/self/status").unwrap();
        assert!(!serializes_buffered_writes(proc.as_raw_fd()));
        assert!(!serializes_buffered_writes(-1), "a bad descriptor says nothing");
        // /dev is devtmpfs, which reports tmpfs: a device node is not a file of it.
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(!serializes_buffered_writes(null.as_raw_fd()));
    }
}
