//! Says what kind of memory a pointer refers to (pageable host, pinned host, device, managed) and
//! which device and context own it, the way KvikIO's `is_host_memory`/`get_context_from_pointer`
//! do; `allocation_range` finds the allocation that contains a pointer (cuFile wants the base).

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUpointer_attribute, CUresult};

use super::context::{ContextHandle, ScopedContext, current_context, primary_context};
use super::driver::cuda;
use super::error::{CudaFailure, check, result_name};

/// What a pointer refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Pageable host memory, or any pointer when CUDA is unavailable.
    Host,
    /// Page-locked host memory known to CUDA (cuMemAllocHost/cuMemHostAlloc/cuMemHostRegister).
    PinnedHost,
    /// Device memory on the GPU with this ordinal.
    Device {
        /// The device ordinal (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`).
        ordinal: i32,
        /// The allocating context, `None` when the driver reports none (e.g. cuMemCreate/VMM).
        context: Option<ContextHandle>,
    },
    /// Managed (unified) memory, associated with this device.
    Managed {
        /// The device ordinal (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`).
        ordinal: i32,
        /// The allocating context, `None` when the driver reports none.
        context: Option<ContextHandle>,
    },
}

impl MemoryKind {
    /// True for the kinds a read must reach through the GPU (device and managed memory); KvikIO
    /// treats managed memory as device memory too.
    pub fn is_device(&self) -> bool {
        matches!(self, MemoryKind::Device { .. } | MemoryKind::Managed { .. })
    }

    /// The device ordinal of device and managed memory; `None` for host memory.
    pub fn device_ordinal(&self) -> Option<i32> {
        match *self {
            MemoryKind::Device { ordinal, .. } | MemoryKind::Managed { ordinal, .. } => Some(ordinal),
            MemoryKind::Host | MemoryKind::PinnedHost => None,
        }
    }
}

/// Classifies `ptr`. Never dereferences it.
///
/// Returns: `Host` when the process has not loaded libcuda (nothing is loaded then: a host-only
/// program never initialises CUDA through this), when CUDA is unavailable (or this is a forked
/// child, where no device memory can exist), when the driver answers `CUDA_ERROR_INVALID_VALUE` (pageable memory) or
/// `CUDA_ERROR_NOT_INITIALIZED`, or reports memory type 0; otherwise the kind with device and
/// context.
///
/// Errors: any other CUresult from `cuPointerGetAttributes`.
///
/// Thread safety: any thread; needs no current context.
pub fn classify(ptr: *const c_void) -> Result<MemoryKind, CudaFailure> {
    if !super::driver::may_hold_cuda_memory() || cuda().is_err() {
        return Ok(MemoryKind::Host);
    }
    let mut attributes: [CUpointer_attribute; 4] = [
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_CONTEXT,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    ];
    // One zeroed 8-byte slot per attribute: the driver writes an unsigned int (memory type), a
    // bool (is managed), a CUcontext and an int (ordinal) into the start of its slot.
    let mut slots = [0u64; 4];
    let base = slots.as_mut_ptr();
    // SAFETY: indices 0..4 are within `slots`.
    let mut data: [*mut c_void; 4] = std::array::from_fn(|i| unsafe { base.add(i) }.cast());
    // SAFETY: cuda() succeeded, so the symbol is present; the arrays have 4 entries each, every
    // data pointer is a writable 8-byte slot, and the driver only reads the address `ptr`.
    let r = unsafe {
        sys::cuPointerGetAttributes(
            attributes.len() as u32,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr as usize as sys::CUdeviceptr,
        )
    };
    match r {
        CUresult::CUDA_SUCCESS => {}
        CUresult::CUDA_ERROR_INVALID_VALUE | CUresult::CUDA_ERROR_NOT_INITIALIZED => {
            return Ok(MemoryKind::Host);
        }
        other => {
            return Err(CudaFailure::Call {
                call: "cuPointerGetAttributes",
                name: result_name(other),
                code: other as u32,
            });
        }
    }
    // Little-endian slots: the low bytes hold the value the driver wrote.
    let memory_type = slots[0] as u32;
    let is_managed = slots[1] as u8 != 0;
    let context = ContextHandle::from_address(slots[2] as usize);
    let ordinal = slots[3] as u32 as i32;
    const HOST: u32 = sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;
    Ok(match (memory_type, is_managed) {
        (0, _) => MemoryKind::Host,
        (_, true) => MemoryKind::Managed { ordinal, context },
        (HOST, false) => MemoryKind::PinnedHost,
        _ => MemoryKind::Device { ordinal, context },
    })
}

/// The allocation containing `ptr`: `(base, size)` from `cuMemGetAddressRange`, so that
/// `ptr - base` is the offset cuFile needs for a registered buffer.
///
/// Errors: `Unavailable`/`Forked` when CUDA cannot be used; the driver's CUresult when `ptr` is
/// not CUDA memory (pageable host memory gives `CUDA_ERROR_INVALID_VALUE`).
///
/// Thread safety: any thread; pushes the owning context (or, for pinned host memory, the
/// primary context of device 0 when none is current) for the duration of the call.
pub(crate) fn allocation_range(ptr: *const c_void) -> Result<(u64, usize), CudaFailure> {
    let _scope = enter_context_for(ptr)?;
    let mut base: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: cuda() succeeded; both out-pointers are valid locals; the driver only looks the
    // address up in its tables.
    check("cuMemGetAddressRange", unsafe {
        sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr as usize as sys::CUdeviceptr)
    })?;
    Ok((base, size))
}

/// Makes current, for a driver call about `ptr` (CUDA's or cuFile's), the context that owns it,
/// or for host memory the primary context of device 0 when no context is current (the driver
/// needs one); `None` when the current context serves. Undone when the value drops.
///
/// Errors: `Unavailable`/`Forked` when CUDA cannot be used; those of `classify` and `push`.
pub(crate) fn enter_context_for(ptr: *const c_void) -> Result<Option<ScopedContext>, CudaFailure> {
    cuda()?;
    let kind = classify(ptr)?;
    let ctx = match context_for(&kind)? {
        Some(ctx) => Some(ctx),
        None if current_context()?.is_none() => Some(primary_context(0)?),
        None => None,
    };
    ctx.map(ScopedContext::push).transpose()
}

/// The context a transfer to memory of this kind should run in, chosen like KvikIO: the
/// pointer's own context when the driver reported one, else the primary context of its device.
/// `None` for host memory (no context needed).
///
/// Errors: those of `primary_context`.
pub(crate) fn context_for(kind: &MemoryKind) -> Result<Option<ContextHandle>, CudaFailure> {
    match *kind {
        MemoryKind::Host | MemoryKind::PinnedHost => Ok(None),
        MemoryKind::Device {
            context: Some(ctx), ..
        }
        | MemoryKind::Managed {
            context: Some(ctx), ..
        } => Ok(Some(ctx)),
        MemoryKind::Device {
            ordinal,
            context: None,
        }
        | MemoryKind::Managed {
            ordinal,
            context: None,
        } => primary_context(ordinal).map(Some),
    }
}

impl ScopedContext {
    /// Pushes the context that `kind` needs (see `context_for`); `None` for host memory.
    ///
    /// Errors: those of `context_for` and `push`.
    pub fn for_kind(kind: &MemoryKind) -> Result<Option<Self>, CudaFailure> {
        context_for(kind)?.map(Self::push).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_needs_no_context() {
        assert_eq!(context_for(&MemoryKind::Host).unwrap(), None);
        assert!(
            ScopedContext::for_kind(&MemoryKind::PinnedHost)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn stack_and_heap_are_host_without_a_gpu() {
        let on_stack = 7u64;
        let on_heap = vec![0u8; 4096];
        for p in [
            (&on_stack as *const u64).cast::<c_void>(),
            on_heap.as_ptr().cast(),
            std::ptr::null(),
        ] {
            assert_eq!(classify(p).unwrap(), MemoryKind::Host);
        }
    }

    #[test]
    fn allocation_range_of_host_memory_is_an_error_not_a_panic() {
        let on_heap = Box::new([0u8; 64]);
        assert!(allocation_range(on_heap.as_ptr().cast()).is_err());
    }
}
