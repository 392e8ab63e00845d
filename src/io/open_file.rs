//! The open file as its reads and writes see it, shared by the handle and its calls in flight: the
//! descriptor and how it was opened (KvikIO's flags, or a caller's descriptor duplicated), the
//! per-file half of cuFile's probe, the `O_DIRECT` descriptor opened at first use and the windows
//! registered with the page cache, which a truncation drops. Calls in flight keep it alive, so
//! closing a handle never lets a task read or write a recycled descriptor.

use crate::backend::cufile::file::CufileFile;
use crate::direction::Direction;
use crate::backend::cufile::gds::{self, FallbackReason, Unusable};
use crate::error::{Error, Result};
use crate::io::thread_pool::{Assigned, ThreadPool};
use crate::page_cache::PageCache;
use crate::settings::{self, CompatMode};
use once_cell::sync::OnceCell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// KvikIO's open flags, and Python's exclusive creation ("x", "x+"). Stricter than KvikIO, which
/// looks at two characters only: the whole string must be one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenFlags {
    /// "r": read only.
    Read,
    /// "r+": read and write.
    ReadWrite,
    /// "w": write only, create, truncate.
    Write,
    /// "w+": read and write, create, truncate.
    WriteRead,
    /// "x": write only, create; the file must not exist (`O_EXCL`).
    Exclusive,
    /// "x+": read and write, create; the file must not exist (`O_EXCL`).
    ExclusiveRead,
}

impl OpenFlags {
    /// Parses "r", "r+", "w", "w+", "x" or "x+".
    pub(crate) fn parse(text: &str) -> Result<OpenFlags> {
        match text {
            "r" => Ok(OpenFlags::Read),
            "r+" => Ok(OpenFlags::ReadWrite),
            "w" => Ok(OpenFlags::Write),
            "w+" => Ok(OpenFlags::WriteRead),
            "x" => Ok(OpenFlags::Exclusive),
            "x+" => Ok(OpenFlags::ExclusiveRead),
            _ => Err(Error::InvalidFlags(text.to_string())),
        }
    }

    pub(crate) fn os_flags(self) -> libc::c_int {
        let how = match self {
            OpenFlags::Read | OpenFlags::ReadWrite => 0,
            OpenFlags::Write | OpenFlags::WriteRead => libc::O_CREAT | libc::O_TRUNC,
            OpenFlags::Exclusive | OpenFlags::ExclusiveRead => libc::O_CREAT | libc::O_EXCL,
        };
        self.access().os_flags() | how | libc::O_CLOEXEC
    }

    /// What the descriptor these flags open may do.
    pub(crate) fn access(self) -> Access {
        match self {
            OpenFlags::Read => Access::ReadOnly,
            OpenFlags::Write | OpenFlags::Exclusive => Access::WriteOnly,
            OpenFlags::ReadWrite | OpenFlags::WriteRead | OpenFlags::ExclusiveRead => Access::ReadWrite,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpenFlags::Read => "r",
            OpenFlags::ReadWrite => "r+",
            OpenFlags::Write => "w",
            OpenFlags::WriteRead => "w+",
            OpenFlags::Exclusive => "x",
            OpenFlags::ExclusiveRead => "x+",
        }
    }
}

/// What a handle's descriptor may do: its access mode (`O_ACCMODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    WriteOnly,
    ReadWrite,
}

impl Access {
    fn os_flags(self) -> libc::c_int {
        match self {
            Access::ReadOnly => libc::O_RDONLY,
            Access::WriteOnly => libc::O_WRONLY,
            Access::ReadWrite => libc::O_RDWR,
        }
    }

    /// The access mode of a descriptor's status flags (`fcntl(F_GETFL)`); `None` for the mode 3,
    /// which neither reads nor writes.
    pub(crate) fn of_status_flags(flags: libc::c_int) -> Option<Access> {
        match flags & libc::O_ACCMODE {
            libc::O_RDONLY => Some(Access::ReadOnly),
            libc::O_WRONLY => Some(Access::WriteOnly),
            libc::O_RDWR => Some(Access::ReadWrite),
            _ => None,
        }
    }
}

/// How a handle got its descriptor, for its access and its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// `open(2)` of a path with these flags (`File::open`).
    Path(OpenFlags),
    /// A duplicate of a caller's descriptor with this access mode (`File::open_fd`).
    Descriptor(Access),
}

impl Opened {
    pub(crate) fn access(self) -> Access {
        match self {
            Opened::Path(flags) => flags.access(),
            Opened::Descriptor(access) => access,
        }
    }

    /// The operation named in the `EBADF` error of a read on a write-only handle.
    fn read_refused(self) -> &'static str {
        match self {
            Opened::Path(OpenFlags::Exclusive) => "read of a file opened write-only (\"x\")",
            Opened::Descriptor(_) => "read of a file opened from a write-only descriptor (O_WRONLY)",
            Opened::Path(_) => "read of a file opened write-only (\"w\")",
        }
    }

    /// The operation named in the `EBADF` error of a write (`truncate`: a truncation) on a
    /// read-only handle.
    fn write_refused(self, truncate: bool) -> &'static str {
        match (self, truncate) {
            (Opened::Descriptor(_), false) => "write to a file opened from a read-only descriptor (O_RDONLY)",
            (Opened::Descriptor(_), true) => "truncate of a file opened from a read-only descriptor (O_RDONLY)",
            (Opened::Path(_), false) => "write to a file opened read-only (\"r\")",
            (Opened::Path(_), true) => "truncate of a file opened read-only (\"r\")",
        }
    }
}

/// The open state shared by the handle and its reads and writes in flight.
pub(crate) struct OpenFile {
    /// Shared with the cuFile registration when that registered this descriptor.
    pub fd: Arc<OwnedFd>,
    pub path: String,
    pub opened: Opened,
    /// The per-file half of the AUTO probe, decided at the first device read that needs it.
    pub cufile: OnceCell<std::result::Result<CufileFile, Unusable>>,
    /// Windows of this file registered for direct copies (device POSIX reads).
    pub page_cache: Arc<PageCache>,
    /// A second descriptor with `O_DIRECT` and the handle's access mode, for POSIX reads under
    /// `auto_direct_io_read` and writes under `auto_direct_io_write`, opened at the first such
    /// task; the error where the file system has no direct I/O.
    pub direct: OnceCell<std::result::Result<OwnedFd, String>>,
    /// Whether AUTO's environment heuristics pass for this file (`gds::auto_environment_check`),
    /// asked at its first AUTO device read (`cufile_serves`).
    pub auto_environment: OnceCell<bool>,
    /// Whether the file system runs buffered writes to this file one at a time
    /// (`sys::fs::serializes_buffered_writes`), asked at the first parallel write.
    pub serialized_buffered_writes: OnceCell<bool>,
    /// The pool its parallel calls run on: chosen at open, or a caller's given later.
    pub pool: Mutex<Assigned>,
    /// `path` NUL-terminated, made at its first use (the monitors' observations).
    pub c_path: OnceCell<std::ffi::CString>,
}

impl OpenFile {
    /// The open state of a descriptor the handle owns now, `path` its name in messages: its page
    /// cache known to the other handles of the file, its pool chosen as at open, nothing else
    /// decided yet.
    ///
    /// Errors: the drive's pool (settings, threads).
    pub(crate) fn new(fd: OwnedFd, path: String, opened: Opened) -> Result<OpenFile> {
        crate::sys::fd_table::opened(fd.as_raw_fd());
        let fd = Arc::new(fd);
        let page_cache = PageCache::for_descriptor(fd.as_raw_fd());
        crate::trace::event("open.page_cache", 0);
        let pool = Assigned::at_open(|| crate::sys::drive::drive_of(fd.as_raw_fd()))?;
        Ok(OpenFile {
            fd,
            path,
            opened,
            cufile: OnceCell::new(),
            page_cache,
            direct: OnceCell::new(),
            auto_environment: OnceCell::new(),
            serialized_buffered_writes: OnceCell::new(),
            pool: Mutex::new(pool),
            c_path: OnceCell::new(),
        })
    }

    /// The path as C wants it (an interior NUL, impossible for a path that opened, gives "").
    pub(crate) fn c_path(&self) -> &std::ffi::CStr {
        self.c_path.get_or_init(|| std::ffi::CString::new(self.path.as_str()).unwrap_or_default())
    }

    /// The pool its parallel calls run on now.
    ///
    /// Errors: the shared pool could not be made (settings, threads).
    pub(crate) fn pool(&self) -> Result<ThreadPool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).pool()
    }

    pub(crate) fn io_error(&self, op: &'static str, offset: u64, source: std::io::Error) -> Error {
        // Keep errno intact for gdsroute_last_error_errno; say why EBADF happens in the op text.
        let op = if source.raw_os_error() == Some(libc::EBADF) && self.opened.access() == Access::WriteOnly { self.opened.read_refused() } else { op };
        Error::Io { op, path: self.path.clone(), offset, source }
    }

    /// The part of a request of `size` bytes at `offset` that a read can find, and whether the
    /// file's size bounds it: the request is clipped to the file's size at this moment (one
    /// `fstat`; a block device's size by `ioctl`). Bytes the file gains later, during the read,
    /// are not read (KvikIO reads on until a read comes back short or at end of file, so it may
    /// return them). A file whose size says nothing about its reads (a pipe, a character device, a
    /// directory) and a write-only handle (whose reads must fail as before, though "w" truncated
    /// the file) are not clipped. A zero-byte request makes no system call.
    pub(crate) fn readable(&self, size: usize, offset: u64) -> Result<(usize, bool)> {
        if size == 0 {
            return Ok((0, true));
        }
        if self.opened.access() == Access::WriteOnly {
            return Ok((size, false));
        }
        let end = crate::sys::fs::readable_end(self.fd.as_raw_fd()).map_err(|e| self.io_error("fstat", offset, e))?;
        Ok(match end {
            // The result is at most `size`, so it fits.
            Some(end) => (end.saturating_sub(offset).min(size as u64) as usize, true),
            None => (size, false),
        })
    }

    /// The part of a request that its tasks cover, by direction: a read covers what the file has
    /// ([`OpenFile::readable`]); a write covers the whole request (writes extend the file), and
    /// fails on a handle opened "r" (`IO_ERROR`, errno `EBADF`, the message naming the path).
    /// Returns the bytes and whether their extent is bounded by the file's size.
    pub(crate) fn extent(&self, direction: Direction, size: usize, offset: u64) -> Result<(usize, bool)> {
        match direction {
            Direction::Read => self.readable(size, offset),
            Direction::Write => {
                // Refused before anything runs, whatever the size: the descriptor cannot write.
                self.refuse_unless_writable(false, offset)?;
                Ok((size, true))
            }
        }
    }

    /// `IO_ERROR` with `EBADF`, naming the path, where the handle's descriptor cannot write: a
    /// write (`truncate` false) or a truncation refused before any system call, as the
    /// descriptor itself would refuse it (`ftruncate` says `EINVAL` there; `EBADF` keeps one
    /// answer for every call that changes the file).
    fn refuse_unless_writable(&self, truncate: bool, offset: u64) -> Result<()> {
        if self.opened.access() != Access::ReadOnly {
            return Ok(());
        }
        let source = std::io::Error::from_raw_os_error(libc::EBADF);
        Err(Error::Io { op: self.opened.write_refused(truncate), path: self.path.clone(), offset, source })
    }

    /// Truncates or extends the file to `size` bytes (`ftruncate`; at most `i64::MAX`, which the
    /// caller checked). The registered page-cache windows of the file, in every handle of it in
    /// the process, are dropped before and after: a window pinned before a shrink keeps the old
    /// pages, detached from the file (`sys::cuda::registered`); dropped, no later device read
    /// copies them whatever the change time's tick (the identity check of `page_cache::plan` is
    /// the second line), and the pinned memory is given back at once (reads in flight finish on
    /// the windows they hold, as a read racing a write sees either bytes). Calls in flight are
    /// not waited for.
    ///
    /// Errors: `Io` (`EBADF` at once for a read-only handle; `EFBIG`, `EPERM`, `EIO`, ...).
    pub(crate) fn set_len(&self, size: u64) -> Result<()> {
        self.refuse_unless_writable(true, size)?;
        self.page_cache.file_written();
        let result = crate::sys::fs::truncate(self.fd.as_raw_fd(), size);
        self.page_cache.file_written();
        result.map_err(|e| self.io_error("ftruncate", size, e))
    }

    /// The `O_DIRECT` descriptor for a task under `auto_direct_io_read` or `_write` (`wanted`),
    /// opened on first use with the handle's access mode (so a read on a "w" handle, or a write
    /// on an "r" one, fails with `EBADF` as through the handle's own descriptor); `None` when not
    /// wanted or where the file system has no direct I/O.
    pub(crate) fn direct_fd(&self, wanted: bool) -> Option<RawFd> {
        wanted.then(|| self.direct_descriptor().ok()).flatten()
    }

    /// How many pool workers a parallel write of this file through the page cache gets: one
    /// (beside the thread that waits) where the file system takes the inode's lock around each
    /// buffered write, since more threads would only queue on it; else all.
    pub(crate) fn buffered_write_workers(&self) -> usize {
        let serialized = *self.serialized_buffered_writes.get_or_init(|| crate::sys::fs::serializes_buffered_writes(self.fd.as_raw_fd()));
        if serialized { 1 } else { usize::MAX }
    }

    /// `direct_fd`, or why there is none.
    pub(crate) fn direct_descriptor(&self) -> std::result::Result<RawFd, String> {
        let opened = self.direct.get_or_init(|| crate::backend::posix::direct_io::open_direct(self.fd.as_raw_fd()).map_err(|e| format!("O_DIRECT open failed: {e}")));
        opened.as_ref().map(|fd| fd.as_raw_fd()).map_err(Clone::clone)
    }

    /// Registers the file with cuFile (the per-file probe), on the descriptor the
    /// `GDSROUTE_CUFILE_FD` setting chooses now.
    fn register_with_cufile(&self, compat_mode: CompatMode) -> std::result::Result<CufileFile, Unusable> {
        // CUDA, libcufile, then AUTO's environment heuristics, then the driver (README's order).
        let gds = gds::process_for(compat_mode)?;
        let setting = settings::live().cufile_fd();
        CufileFile::register(gds.library, setting, gds.gds_available(), &self.path, &self.fd)
    }

    /// Whether cuFile serves this file's device requests, for routing: [`OpenFile::cufile`], except
    /// that in AUTO a failing environment heuristic answers "no" without the rest of the verdict,
    /// since the route is then POSIX whatever the reason: loading libcufile only to name the reason
    /// took 5.4 ms of a fresh process's first read (docs/performance.md, "The first read of a fresh
    /// process"). The reason itself is decided, in the README's order, when it is asked for.
    pub(crate) fn cufile_serves(&self, compat_mode: CompatMode) -> std::result::Result<(), Unusable> {
        if compat_mode == CompatMode::Auto && self.cufile.get().is_none() {
            let passes = *self.auto_environment.get_or_init(|| {
                let check = gds::auto_environment_check();
                if let Err(u) = &check {
                    self.log_fallback(u);
                }
                check.is_ok()
            });
            if !passes {
                return Err(Unusable::new(FallbackReason::NoUdev, "AUTO's environment heuristics rule cuFile out"));
            }
        }
        self.cufile(compat_mode).map(|_| ())
    }

    /// Logs, once per file (each caller decides a verdict once), that its device transfers fall
    /// back to the POSIX route and why, and counts the file under its reason (the exit report).
    fn log_fallback(&self, why: &Unusable) {
        crate::stats::activity::record_fallback(why.reason);
        crate::log::log(crate::log::Level::Info, || format!("{}: device transfers take the POSIX route: {} ({:?})", self.path, why.message, why.reason));
    }

    /// The per-file verdict; once cuFile was shut down, "unusable" whatever was decided before,
    /// so AUTO falls back and OFF reports it.
    pub(crate) fn cufile(&self, compat_mode: CompatMode) -> std::result::Result<&CufileFile, Unusable> {
        if gds::is_shut_down() {
            return Err(Unusable::new(
                FallbackReason::DriverOpenFailed,
                "cuFile was shut down (gdsroute_shutdown, process exit, or this is a forked child)",
            ));
        }
        self.cufile
            .get_or_init(|| {
                let verdict = self.register_with_cufile(compat_mode);
                match &verdict {
                    Err(u) if compat_mode == CompatMode::Auto => self.log_fallback(u),
                    Err(u) => crate::log::log(crate::log::Level::Warn, || format!("{}: cuFile cannot serve it under compat mode OFF, device transfers fail: {} ({:?})", self.path, u.message, u.reason)),
                    Ok(_) => crate::log::log(crate::log::Level::Info, || format!("{}: registered with cuFile; device transfers from the GDS threshold up go through cuFile", self.path)),
                }
                verdict
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_routing_without_a_udev_database_decides_nothing_else() {
        // Where AUTO's heuristics fail, routing says "not cuFile" without the verdict (which
        // would load libcufile); the verdict, asked for, still runs every check in order.
        if std::path::Path::new("/run/udev").is_dir() {
            return; // this machine passes the heuristic: nothing to show
        }
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let file = OpenFile::new(OwnedFd::from(tmp.reopen().unwrap()), "test".into(), Opened::Path(OpenFlags::Read)).unwrap();
        assert!(file.cufile_serves(CompatMode::Auto).is_err());
        assert!(file.cufile.get().is_none(), "the verdict was not decided for routing");
        assert_eq!(file.auto_environment.get(), Some(&false));
        assert!(file.cufile(CompatMode::Auto).is_err());
        assert!(file.cufile.get().is_some(), "asked for, the verdict is decided and kept");
    }

    #[test]
    fn flags_are_strict() {
        assert_eq!(OpenFlags::parse("r").unwrap(), OpenFlags::Read);
        assert_eq!(OpenFlags::parse("w+").unwrap(), OpenFlags::WriteRead);
        for bad in ["", "a", "xx", "x+b", "X", "+x", "rb", "r+b", "R", "ww"] {
            assert!(matches!(OpenFlags::parse(bad), Err(Error::InvalidFlags(_))), "{bad}");
        }
        assert_ne!(OpenFlags::Read.os_flags() & libc::O_CLOEXEC, 0);
    }

    #[test]
    fn every_flag_string_round_trips_to_its_open_flags() {
        let table = [
            ("r", libc::O_RDONLY),
            ("r+", libc::O_RDWR),
            ("w", libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC),
            ("w+", libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC),
            ("x", libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL),
            ("x+", libc::O_RDWR | libc::O_CREAT | libc::O_EXCL),
        ];
        for (text, os) in table {
            let flags = OpenFlags::parse(text).unwrap();
            assert_eq!(flags.as_str(), text);
            assert_eq!(flags.os_flags(), os | libc::O_CLOEXEC, "{text}");
            assert_eq!(Access::of_status_flags(os), Some(flags.access()), "{text}");
        }
        assert_eq!(Access::of_status_flags(libc::O_ACCMODE), None);
    }
}
