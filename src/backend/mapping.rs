//! Reads out of a shared, read-only mapping of a file range (the mapping handle,
//! `api::mapping`), without a load or store of the mapping in user space: host memory is filled
//! by the kernel's copy (`process_copy::copy_either_side_bad`, `process_vm_readv` on this
//! process), device memory by the same copy into a pinned bounce buffer and a host-to-device copy
//! from it (`device::bounce_in_with`). A page of the mapping past the end of a file truncated
//! under it then reads as `EFAULT` instead of raising `SIGBUS`, so no signal handler is needed;
//! `stopped` tells which side faulted and says so.

use crate::backend::device::bounce_in_with;
use crate::backend::posix::{self, Delivered};
use crate::error::{Error, Result};
use crate::sys::cuda::{FileMapping, MemoryKind};
use crate::sys::process_copy::{ShortCopy, copy_either_side_bad};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// A mapped range of an open file: `mapping` (none for an empty range) holds the file's bytes
/// from `mapped_from`, a page boundary, on; the descriptor stays open for `fstat` and for the
/// `pread`s that stand in for the kernel copy where it is refused.
#[derive(Debug)]
pub(crate) struct MappedRange {
    mapping: Option<FileMapping>,
    mapped_from: u64,
    fd: OwnedFd,
    path: String,
}

impl MappedRange {
    /// Maps `len` bytes of `fd` from `offset` (any offset: the mapping starts at the page before
    /// it). Errors: `Io` with the errno of `mmap`; `Overflow` where the range with its lead does
    /// not fit a `usize`.
    pub(crate) fn new(fd: OwnedFd, path: String, offset: u64, len: usize) -> Result<MappedRange> {
        let mapped_from = offset - offset % crate::sys::page_cache::page_size();
        let lead = (offset - mapped_from) as usize;
        let mapping = match len {
            0 => None,
            _ => {
                let mapped = len.checked_add(lead).ok_or_else(|| Error::Overflow(format!("a mapping of {len} bytes at offset {offset} exceeds the address space")))?;
                Some(FileMapping::new(fd.as_raw_fd(), mapped_from, mapped).map_err(|source| Error::Io { op: "mmap", path: path.clone(), offset, source })?)
            }
        };
        Ok(MappedRange { mapping, mapped_from, fd, path })
    }

    /// The file's current size (`fstat`).
    pub(crate) fn file_size(&self) -> Result<u64> {
        crate::sys::fs::file_size(self.fd.as_raw_fd()).map_err(|source| Error::Io { op: "fstat", path: self.path.clone(), offset: 0, source })
    }

    /// The mapped byte at file offset `offset`, which the caller keeps inside the mapped range.
    fn source(&self, offset: u64) -> *const u8 {
        let base = self.mapping.as_ref().map_or(std::ptr::null(), FileMapping::as_ptr);
        base.wrapping_add((offset - self.mapped_from) as usize)
    }

    /// Copies the `len` bytes at file offset `offset` into host memory at `dst`. Returns `len`;
    /// on an error the bytes before the failing one are in `dst`, nothing after it.
    ///
    /// # Safety
    /// `offset .. offset + len` lies in the mapped range; `dst .. dst + len` is the caller's
    /// memory to overwrite and nothing else writes it meanwhile (a page of it that cannot be
    /// written is an error, `EFAULT`, not a crash).
    pub(crate) unsafe fn read_host(&self, dst: *mut u8, len: usize, offset: u64) -> Result<usize> {
        // SAFETY: forwarded from the caller.
        unsafe { self.copy_out(dst, len, offset) }.map(|()| len).map_err(|(_, e)| e)
    }

    /// Copies the `len` bytes at file offset `offset` into device memory of `kind` at `dst`
    /// through a pinned bounce buffer of `buffer_size` (the setting) at most. Returns `len`; on
    /// an error, as `read_host`, the bytes before the failing one have reached `dst`.
    ///
    /// # Safety
    /// `offset .. offset + len` lies in the mapped range; `dst .. dst + len` is device memory of
    /// `kind` that the caller may overwrite.
    pub(crate) unsafe fn read_device(&self, kind: &MemoryKind, dst: u64, len: usize, offset: u64, buffer_size: u64) -> Result<usize> {
        // A piece that stops short is copied to the device as far as it got, which ends the
        // loop; the error is reported after that copy.
        let mut failed = None;
        let fill = |_step: usize, host: *mut u8, want: usize, pos: u64| {
            // SAFETY: pos .. pos + want lies in the caller's range, so in the mapping; host is a
            // piece of the bounce buffer that no copy reads any more.
            let bytes = match unsafe { self.copy_out(host, want, pos) } {
                Ok(()) => want,
                Err((copied, e)) => {
                    failed = Some(e);
                    copied
                }
            };
            Ok(Delivered { bytes, not_cached: false, direct_bytes: 0 })
        };
        // SAFETY: forwarded from the caller.
        let copied = unsafe { bounce_in_with(kind, dst, len, offset, buffer_size, false, fill) }?.bytes;
        match failed {
            Some(e) => Err(e),
            None => Ok(copied),
        }
    }

    /// The copy of `read_host`: on an error, the bytes copied before it and why.
    ///
    /// # Safety
    /// As `read_host`.
    unsafe fn copy_out(&self, dst: *mut u8, len: usize, offset: u64) -> std::result::Result<(), (usize, Error)> {
        // A file truncated into the range's last page leaves that page mapped, reading zeros past
        // the new end, where no copy faults: the file's size tells it, and only the bytes the
        // file still has are copied. (A truncation during the copy is told by the fault, below.)
        let end = offset + len as u64;
        let (len, shrank) = match self.file_size() {
            Ok(size) if size < end => ((size.saturating_sub(offset)) as usize, Some(size.max(offset))),
            _ => (len, None),
        };
        // SAFETY: forwarded from the caller (a part of its range); either side may fault, which
        // the call reports.
        match unsafe { copy_either_side_bad(dst, self.source(offset), len) } {
            Ok(()) => match shrank {
                Some(at) => Err((len, self.shrank(at))),
                None => Ok(()),
            },
            // SAFETY: forwarded from the caller.
            Err(stop) => unsafe { self.stopped(stop, dst, len, offset) },
        }
    }

    /// A copy of `len` bytes at `offset` into `dst` that stopped after `stop.copied` bytes: the
    /// error that says why, or, where the kernel refused the copy itself (`ENOSYS`, `EPERM`: a
    /// seccomp filter), the rest read with `pread` from the same file, which is what the mapping
    /// shows. On an error, the bytes copied before it.
    ///
    /// # Safety
    /// As `read_host`.
    unsafe fn stopped(&self, stop: ShortCopy, dst: *mut u8, len: usize, offset: u64) -> std::result::Result<(), (usize, Error)> {
        let at = offset + stop.copied as u64;
        if stop.error.raw_os_error() != Some(libc::EFAULT) {
            let rest = len - stop.copied;
            // SAFETY: the rest of the caller's range.
            return match unsafe { posix::read_full_at(self.fd.as_raw_fd(), dst.wrapping_add(stop.copied), rest, at) } {
                Ok(n) if n == rest => Ok(()),
                Ok(n) => Err((stop.copied + n, self.shrank(at + n as u64))),
                // What the failing `pread` had read before it is in `dst` but not reported: only
                // what the copy delivered counts.
                Err(failed) => Err((stop.copied, Error::Io { op: "pread (the copy out of the mapping was refused)", path: self.path.clone(), offset: failed.offset, source: failed.error })),
            };
        }
        // Which side faulted: the mapped byte alone, copied into memory of our own.
        let mut byte = 0u8;
        // SAFETY: one byte of ours; the source may fault, which the call reports.
        if unsafe { copy_either_side_bad(&mut byte, self.source(at), 1) }.is_ok() {
            return Err((stop.copied, Error::Io { op: "copy from the mapping into the buffer", path: self.path.clone(), offset: at, source: stop.error }));
        }
        let error = match self.file_size() {
            Ok(size) if size <= at => self.shrank(at),
            // The file still has the byte: its page could not be read in (a disk error, which
            // `pread` names).
            _ => {
                // SAFETY: one byte of ours.
                let source = match unsafe { posix::read_full_at(self.fd.as_raw_fd(), &mut byte, 1, at) } {
                    Err(failed) => failed.error,
                    Ok(_) => stop.error,
                };
                Error::Io { op: "page-in of the mapped file", path: self.path.clone(), offset: at, source }
            }
        };
        Err((stop.copied, error))
    }

    /// The file no longer has the mapped byte at `offset`.
    fn shrank(&self, offset: u64) -> Error {
        let size = self.file_size().unwrap_or(0);
        Error::MappedFileShrank { path: self.path.clone(), offset, size, source: io::Error::from_raw_os_error(libc::EFAULT) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::FromRawFd;

    /// A file of `len` bytes (`i * 7 % 256` at `i`), mapped from `offset` to its end.
    fn mapped(len: usize, offset: u64) -> (tempfile::NamedTempFile, MappedRange, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&data).unwrap();
        // SAFETY: a fresh descriptor of the file, owned by the range.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::dup(tmp.as_file().as_raw_fd())) };
        let range = MappedRange::new(fd, "f".into(), offset, len - offset as usize).unwrap();
        (tmp, range, data)
    }

    /// Where the kernel refuses the copy itself (a seccomp filter: `ENOSYS`, `EPERM`), the rest
    /// comes from `pread` of the same file; a file that shrank meanwhile is said so, with the
    /// bytes delivered before its end.
    #[test]
    fn a_refused_copy_is_finished_by_pread() {
        let (tmp, range, data) = mapped(20_000, 4097);
        for errno in [libc::ENOSYS, libc::EPERM] {
            let mut dst = vec![0xA5u8; 15_000];
            let stop = ShortCopy { copied: 100, error: io::Error::from_raw_os_error(errno) };
            // SAFETY: dst holds the bytes named; the range lies in the mapping.
            unsafe { range.stopped(stop, dst.as_mut_ptr(), dst.len(), 4097) }.unwrap();
            assert!(dst[..100].iter().all(|&b| b == 0xA5), "the copied part is the copy's");
            assert!(dst[100..] == data[4197..19_097]);
        }
        tmp.as_file().set_len(10_000).unwrap();
        let mut dst = vec![0xA5u8; 15_000];
        let stop = ShortCopy { copied: 0, error: io::Error::from_raw_os_error(libc::ENOSYS) };
        // SAFETY: as above.
        let (copied, err) = unsafe { range.stopped(stop, dst.as_mut_ptr(), dst.len(), 4097) }.unwrap_err();
        assert_eq!(copied, 10_000 - 4097);
        assert!(matches!(err, Error::MappedFileShrank { offset: 10_000, size: 10_000, .. }), "{err}");
        assert!(dst[..copied] == data[4097..10_000] && dst[copied..].iter().all(|&b| b == 0xA5));
    }

    #[test]
    fn an_empty_range_maps_nothing() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        // SAFETY: as in `mapped`.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::dup(tmp.as_file().as_raw_fd())) };
        let range = MappedRange::new(fd, "f".into(), 0, 0).unwrap();
        assert!(range.mapping.is_none());
        assert_eq!(range.file_size().unwrap(), 0);
    }
}
