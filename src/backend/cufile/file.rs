//! A file registered with cuFile (the per-file half of the AUTO probe; `gds` holds the process
//! half), on the descriptor the `GDSROUTE_CUFILE_FD` setting chooses: a second one opened with
//! `O_DIRECT` as KvikIO does, or, without nvidia-fs, the handle's own buffered one (see
//! `settings::CufileFd` for why).

use crate::sys::cufile::{CufileHandle, CufileLibrary};
use crate::backend::cufile::gds::{self, FallbackReason, Unusable};
use crate::settings::{CufileFd, Descriptor, FdChoice};
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd};
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
    /// Registers the file of `buffered` (`display` in messages) on the descriptor `setting`
    /// chooses from whether the driver reports nvidia-fs (`gds_available`, `Gds::gds_available`;
    /// `None`: unknown). An `O_DIRECT` descriptor is the same file
    /// opened again with `buffered`'s access mode.
    pub fn register(
        library: &'static CufileLibrary,
        setting: CufileFd,
        gds_available: Option<bool>,
        display: &str,
        buffered: &Arc<OwnedFd>,
    ) -> Result<CufileFile, Unusable> {
        let _call = gds::CufileCall::enter()
            .ok_or_else(|| Unusable::new(FallbackReason::DriverOpenFailed, "cuFile was shut down"))?;
        let choice = setting.choose(gds_available);
        let fd = match choice.descriptor {
            Descriptor::Buffered => Arc::clone(buffered),
            Descriptor::Direct => Arc::new(open_direct(display, buffered)?),
        };
        crate::trace::event("cufile.register.start", 0);
        let registered = library.register_handle(fd.as_raw_fd());
        crate::trace::event("cufile.register.end", 0);
        let handle = registered.map_err(|e| Unusable::new(FallbackReason::RegisterFailed, format!("{e} for {display:?}")))?;
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

/// Opens the file of `like` again with `O_DIRECT` and its access mode (the POSIX backend's
/// reopen, through `/proc/self/fd`: the same inode even if the path was renamed or replaced
/// since the open).
fn open_direct(display: &str, like: &OwnedFd) -> Result<OwnedFd, Unusable> {
    crate::backend::posix::direct_io::open_direct(like.as_raw_fd())
        .map_err(|err| Unusable::new(FallbackReason::DirectOpenFailed, format!("O_DIRECT open of {display:?} failed: {err}")))
}
