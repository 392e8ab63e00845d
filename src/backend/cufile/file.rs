//! A file registered with cuFile (the per-file half of the AUTO probe; `gds` holds the process
//! half), on the descriptor the `GDSROUTE_CUFILE_FD` setting chooses: a second one opened with
//! `O_DIRECT` as KvikIO does, or, without nvidia-fs, the handle's own buffered one (see
//! `settings::CufileFd` for why).

use crate::sys::cufile::{CufileHandle, CufileLibrary};
use crate::backend::cufile::gds::{self, FallbackReason, Unusable};
use crate::settings::{CufileFd, Descriptor, FdChoice};
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// A registered file. It keeps the registered descriptor alive itself (its own `O_DIRECT` one or
/// a share of the handle's buffered one), so that descriptor closes only after `Drop`
/// deregistered the handle, whatever order its owners drop in.
pub struct CufileFile {
    handle: ManuallyDrop<CufileHandle<'static>>,
    library: &'static CufileLibrary,
    choice: FdChoice,
    _registered_fd: Arc<OwnedFd>,
}

impl CufileFile {
    /// Registers the file at `path` (`display` in messages), whose handle holds `buffered`, on the
    /// descriptor `setting` chooses from the driver's nvidia-fs version. An `O_DIRECT` descriptor
    /// is opened with `buffered`'s access mode.
    pub fn register(
        library: &'static CufileLibrary,
        setting: CufileFd,
        path: &CStr,
        display: &str,
        buffered: &Arc<OwnedFd>,
    ) -> Result<CufileFile, Unusable> {
        let _call = gds::CufileCall::enter()
            .ok_or_else(|| Unusable::new(FallbackReason::DriverOpenFailed, "cuFile was shut down"))?;
        let choice = setting.choose(library.properties().ok().map(|p| p.is_gds_available()));
        let fd = match choice.descriptor {
            Descriptor::Buffered => Arc::clone(buffered),
            Descriptor::Direct => Arc::new(open_direct(path, display, buffered)?),
        };
        let handle = library
            .register_handle(fd.as_raw_fd())
            .map_err(|e| Unusable::new(FallbackReason::RegisterFailed, format!("{e} for {display:?}")))?;
        Ok(CufileFile { handle: ManuallyDrop::new(handle), library, choice, _registered_fd: fd })
    }

    /// The library the handle belongs to.
    pub fn library(&self) -> &'static CufileLibrary {
        self.library
    }

    /// The registered handle.
    pub fn handle(&self) -> &CufileHandle<'static> {
        &self.handle
    }

    /// Which descriptor was registered, and why.
    pub fn choice(&self) -> FdChoice {
        self.choice
    }
}

impl Drop for CufileFile {
    fn drop(&mut self) {
        // Deregister only while cuFile may be called; after shutdown (or in a forked child) the
        // registration is left to the driver, which was closed. The descriptor closes after this.
        let call = gds::CufileCall::enter();
        if call.is_some() {
            // SAFETY: dropped exactly once, here; the field is not used afterwards.
            unsafe { ManuallyDrop::drop(&mut self.handle) };
        }
    }
}

/// Opens `path` again with `O_DIRECT` and the access mode of `like`.
fn open_direct(path: &CStr, display: &str, like: &OwnedFd) -> Result<OwnedFd, Unusable> {
    let failed = |err: std::io::Error| {
        Unusable::new(FallbackReason::DirectOpenFailed, format!("O_DIRECT open of {display:?} failed: {err}"))
    };
    // SAFETY: F_GETFL on a descriptor we hold; no pointer arguments.
    let flags = unsafe { libc::fcntl(like.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    let flags = (flags & libc::O_ACCMODE) | libc::O_DIRECT | libc::O_CLOEXEC;
    // SAFETY: path is NUL-terminated; no O_CREAT, so no mode argument.
    let raw = unsafe { libc::open(path.as_ptr(), flags) };
    if raw < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    // SAFETY: raw was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
