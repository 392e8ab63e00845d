//! Memory the library registers or pins for a caller: buffers registered with cuFile (KvikIO's
//! `buffer_register` / `buffer_deregister`, and `memory_register` / `memory_deregister` for a
//! whole allocation), and the pinned bounce buffers it keeps between calls (KvikIO's
//! `bounce_buffer_free`). The registry itself is `backend::cufile::buffers`.

use crate::backend::cufile::buffers::{self, REGISTERED};
use crate::backend::cufile::gds::{self, CufileCall};
use crate::backend::device;
use crate::error::{Error, Result};
use crate::sys::cuda;
use std::ffi::c_void;

pub use crate::abi::ObservedMemory;
pub use crate::backend::cufile::buffers::{Deregistration, Registration};

/// The flags `cuFileBufRegister` takes: `CU_FILE_RDMA_REGISTER` (1),
/// `CU_FILE_RDMA_RELAXED_ORDERING` (2).
const BUFFER_FLAGS: i32 = 0x3;

/// Registers `size` bytes at `ptr` (device or host memory) with cuFile for later reads and
/// writes (`cuFileBufRegister(ptr, size, flags)`), as KvikIO's `buffer_register`; reads and
/// writes of any part of it then pass the part's address as they always do. Where cuFile is not
/// used in this process (compat mode ON, or cuFile unusable: `cufile_usable`) the registration
/// is recorded and counted (`buffer_registrations_skipped`) and nothing is registered. Asking
/// whether cuFile is used may open cuFile's driver (as `cufile_usable`).
///
/// Reference-counted, unlike cuFile: registering a base again is success and one more
/// reference (its first size stays), and each registration needs its own deregistration; only
/// the last calls `cuFileBufDeregister`. Deregister before freeing the memory.
///
/// Errors: `NullArgument`; `InvalidArgument` for a zero size or flags outside 0..3; `Overflow`
/// when the range wraps the address space; CUDA's (the pointer's context); cuFile's refusal (not
/// enough pinned space: `max_device_pinned_mem_size`).
pub fn buffer_register(ptr: *const c_void, size: usize, flags: i32) -> Result<Registration> {
    if ptr.is_null() {
        return Err(Error::NullArgument("ptr"));
    }
    if size == 0 {
        return Err(Error::InvalidArgument("a buffer of 0 bytes cannot be registered".into()));
    }
    if (ptr as usize).checked_add(size).is_none() {
        return Err(Error::Overflow(format!("{size} bytes at {ptr:p} wrap the address space")));
    }
    check_flags(flags)?;
    register_range(ptr as usize, size, flags)
}

/// Registers the whole CUDA allocation that `ptr` points into (its base and size from
/// `cuMemGetAddressRange`), as KvikIO's `memory_register`; deregister it with
/// `memory_deregister` and any pointer into it. Otherwise as `buffer_register`.
///
/// Errors: `NullArgument`; `InvalidArgument` for flags outside 0..3; `CudaUnavailable` without
/// CUDA; `Cuda` when `ptr` is not CUDA memory (pageable host memory: use `buffer_register` with
/// its size); cuFile's refusal.
pub fn memory_register(ptr: *const c_void, flags: i32) -> Result<Registration> {
    check_flags(flags)?;
    let (base, size) = allocation_of(ptr)?;
    register_range(base, size, flags)
}

/// Drops one registration of the buffer registered at `ptr` (the pointer it was registered with);
/// the last one deregisters it from cuFile (`cuFileBufDeregister`), as KvikIO's
/// `buffer_deregister`.
///
/// Errors: `NullArgument`; `InvalidArgument` for a pointer not registered through gdsroute;
/// CUDA's (the pointer's context); cuFile's refusal.
pub fn buffer_deregister(ptr: *const c_void) -> Result<Deregistration> {
    if ptr.is_null() {
        return Err(Error::NullArgument("ptr"));
    }
    deregister_base(ptr as usize)
}

/// `buffer_deregister` of the allocation `ptr` points into (as KvikIO's `memory_deregister`):
/// undoes `memory_register`.
///
/// Errors: as `memory_register`'s lookup, then as `buffer_deregister`.
pub fn memory_deregister(ptr: *const c_void) -> Result<Deregistration> {
    let (base, _) = allocation_of(ptr)?;
    deregister_base(base)
}

/// The memory `ptr` points into, as the routing sees it (KvikIO's `is_host_memory`, with device
/// and managed memory told apart): `Host` for pageable and pinned host memory, and for any pointer
/// while the process has not loaded libcuda (nothing is loaded to ask). Never dereferences `ptr`.
///
/// Errors: `Cuda` for a driver failure other than "not CUDA memory".
pub fn memory_kind(ptr: *const c_void) -> Result<ObservedMemory> {
    Ok(match cuda::classify(ptr).map_err(Error::from)? {
        cuda::MemoryKind::Host | cuda::MemoryKind::PinnedHost => ObservedMemory::Host,
        cuda::MemoryKind::Device { .. } => ObservedMemory::Device,
        cuda::MemoryKind::Managed { .. } => ObservedMemory::Managed,
    })
}

/// References gdsroute holds on the registration at `ptr` (0: none).
pub fn buffer_references(ptr: *const c_void) -> u64 {
    REGISTERED.references(ptr as usize)
}

/// Frees the pinned bounce buffers no transfer holds, on every device (KvikIO's
/// `bounce_buffer_free`), and returns the bytes unpinned; the counters' `pinned_bytes` drop by as
/// much. Buffers lent to a transfer in flight are kept. Later device transfers through the POSIX
/// route pin buffers again (the first one after it pays that, as a fresh process's does).
pub fn bounce_buffer_free() -> u64 {
    device::free_idle_bounce_buffers()
}

/// Bytes registered with cuFile through gdsroute now (the counters' `buffer_registered_bytes`).
pub(crate) fn registered_bytes() -> u64 {
    REGISTERED.cufile_bytes()
}

fn allocation_of(ptr: *const c_void) -> Result<(usize, usize)> {
    if ptr.is_null() {
        return Err(Error::NullArgument("ptr"));
    }
    let (base, size) = cuda::allocation_range(ptr).map_err(|e| match Error::from(e) {
        Error::Cuda(m) => Error::Cuda(format!("{m}: {ptr:p} is not in a CUDA allocation (register host memory with its size: gdsroute_buffer_register)")),
        other => other,
    })?;
    Ok((base as usize, size))
}

/// cuFile when this process uses it for device memory (compat mode not ON, cuFile usable, not
/// shut down).
fn cufile_in_use() -> Result<Option<&'static gds::Gds>> {
    let compat_mode = crate::settings::global()?.compat_mode();
    if compat_mode == crate::settings::CompatMode::On {
        return Ok(None);
    }
    Ok(gds::process_for(compat_mode).ok())
}

fn check_flags(flags: i32) -> Result<()> {
    if flags & !BUFFER_FLAGS != 0 {
        return Err(Error::InvalidArgument(format!("buffer flags {flags:#x} have bits outside 0x3 (CU_FILE_RDMA_*)")));
    }
    Ok(())
}

/// Registers through the registry, with cuFile where it is used.
fn register_range(base: usize, len: usize, flags: i32) -> Result<Registration> {
    let gds = cufile_in_use()?;
    let call = gds.and_then(|g| CufileCall::enter().map(|gate| (g, gate)));
    let cufile_used = call.is_some();
    let _context = match call {
        Some(_) => cuda::enter_context_for(base as *const c_void)?,
        None => None,
    };
    let how = REGISTERED.register(
        base,
        len,
        call.map(|(g, gate)| {
            move || {
                // Held until cuFile returned (moved in: a binding of the outer closure would
                // let go before this runs), so that a shutdown or exit waits for the call.
                let _gate = gate;
                // SAFETY: the caller's contract (a live allocation of `len` bytes at `base`,
                // deregistered before it is freed); its context is current.
                unsafe { g.library.buf_register(base as *const c_void, len, flags) }
            }
        }),
    )?;
    crate::stats::record_buffer_registration(how == buffers::Registration::Cufile, !cufile_used);
    Ok(how)
}

fn deregister_base(base: usize) -> Result<Deregistration> {
    // Only the deregistration that reaches cuFile (the last reference, decided under the
    // registry's lock) needs its gate and the buffer's context; once cuFile is shut down its
    // registrations are gone with it, and the record just goes.
    let gds = gds::opened();
    let call = gds.and_then(|g| CufileCall::enter().map(|gate| (g, gate)));
    REGISTERED.deregister(base, || match &call {
        Some((g, _gate)) => {
            let _context = cuda::enter_context_for(base as *const c_void).ok().flatten();
            // SAFETY: registered by `register_range` with this base and not freed (the caller's
            // contract); its context is current.
            unsafe { g.library.buf_deregister(base as *const c_void) }
        }
        None => Ok(()),
    })
}
