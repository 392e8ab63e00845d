//! Memory the library registers or pins for a caller: buffers registered with cuFile and the
//! pinned bounce buffers (the Rust side is `api::memory`).

use super::{guard, out, write_out};
use crate::abi::Status;
use crate::api::memory;
use std::ffi::c_void;

/// Registers `size` bytes at `ptr` (device or host memory) with cuFile for later reads and
/// writes, as KvikIO's `buffer_register`: `cuFileBufRegister(ptr, size, flags)`, flags 0 or
/// `CU_FILE_RDMA_REGISTER` (1) and `CU_FILE_RDMA_RELAXED_ORDERING` (2). Reads and writes of any
/// part of the buffer then pass that part's address as always. Where cuFile is not used in this
/// process (compat mode ON, or cuFile unusable: `gdsroute_cufile_usable`), nothing is registered
/// and the call is counted (`buffer_registrations_skipped`); asking may open cuFile's driver
/// (0.4 to 0.5 s once per process). Registration pins device memory for nvidia-fs: it pays for
/// buffers reused over many reads on a machine with nvidia-fs, and for `cuFileReadAsync`
/// (`GDSROUTE_CUFILE_ASYNC=native`); without nvidia-fs it brought no speed-up (measured on the
/// H200, about 35 ms per GiB to register: docs/local-api.md, "Buffer registration").
///
/// Reference-counted, unlike cuFile: registering the same `ptr` again returns OK and adds a
/// reference (the first `size` stays); each registration needs its own
/// `gdsroute_buffer_deregister`, and only the last one deregisters from cuFile. Deregister before
/// freeing the memory. Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (size 0, flags outside 0..3),
/// `OVERFLOW` (the range wraps), `CUDA_ERROR`, `CUFILE_ERROR` (cuFile refused, e.g. more than
/// `max_device_pinned_mem_size`).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_buffer_register(ptr: *const c_void, size: usize, flags: i32) -> Status {
    guard(|| memory::buffer_register(ptr, size, flags).map(|_| ()))
}

/// Drops one registration of the buffer registered at `ptr` (the pointer given to
/// `gdsroute_buffer_register`); the last one calls `cuFileBufDeregister`. Errors:
/// `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`ptr` is not registered through gdsroute), `CUDA_ERROR`,
/// `CUFILE_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_buffer_deregister(ptr: *const c_void) -> Status {
    guard(|| memory::buffer_deregister(ptr).map(|_| ()))
}

/// Registers the whole CUDA allocation `ptr` points into (its base and size from
/// `cuMemGetAddressRange`), as KvikIO's `memory_register`; otherwise as
/// `gdsroute_buffer_register`. Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (flags outside 0..3),
/// `CUDA_UNAVAILABLE`, `CUDA_ERROR` (`ptr` is not CUDA memory: register pageable host memory with
/// `gdsroute_buffer_register` and its size), `CUFILE_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_memory_register(ptr: *const c_void, flags: i32) -> Status {
    guard(|| memory::memory_register(ptr, flags).map(|_| ()))
}

/// Undoes one `gdsroute_memory_register` of the allocation `ptr` points into (any pointer into
/// it), as KvikIO's `memory_deregister`. Errors: as `gdsroute_memory_register`'s lookup, then as
/// `gdsroute_buffer_deregister`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_memory_deregister(ptr: *const c_void) -> Status {
    guard(|| memory::memory_deregister(ptr).map(|_| ()))
}

/// The registrations gdsroute holds on the buffer registered at `ptr`, into `*references` (0:
/// not registered through gdsroute; a pointer inside a registered buffer is not its base and
/// gives 0). Errors: `NULL_ARGUMENT` (`references`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_buffer_references(ptr: *const c_void, references: *mut u64) -> Status {
    guard(|| {
        let references = out(references, "references")?;
        // SAFETY: checked non-NULL above; the caller's contract.
        unsafe { write_out(references, memory::buffer_references(ptr)) };
        Ok(())
    })
}

/// Frees the pinned bounce buffers that no transfer holds, on every device (KvikIO's
/// bounce-buffer release, `bounce_buffer_free`), and writes the bytes unpinned into the
/// optional `*bytes_freed`;
/// the counters' `pinned_bytes` drop by as much. Buffers lent to a transfer in flight are kept
/// and go back to their pool. Later device transfers through the POSIX route pin buffers again,
/// so the first one afterwards pays that, as a fresh process's does. Never fails.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_bounce_buffer_free(bytes_freed: *mut usize) -> Status {
    guard(|| {
        let freed = memory::bounce_buffer_free();
        if !bytes_freed.is_null() {
            // SAFETY: non-NULL, the caller's contract.
            unsafe { write_out(bytes_freed, freed as usize) };
        }
        Ok(())
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_buffer_register, gdsroute_buffer_deregister, gdsroute_memory_register, gdsroute_memory_deregister);
/// Writes into `*kind` the memory `ptr` points into, as gdsroute routes it: a
/// `gdsroute_observed_memory` value, `HOST` (pageable or pinned host memory), `DEVICE` or
/// `MANAGED` (KvikIO's `is_host_memory`, with the two device kinds told apart). While the process
/// has not loaded libcuda every pointer is `HOST` and nothing is loaded; `ptr` is never
/// dereferenced (NULL is `HOST`). For code built on gdsroute that must treat device buffers
/// apart (an HDF5 driver zero-filling past the end of a file). Errors: `NULL_ARGUMENT` (`kind`),
/// `CUDA_ERROR` (the driver failed otherwise than "not CUDA memory").
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_memory_kind(ptr: *const c_void, kind: *mut u32) -> Status {
    guard(|| {
        let kind = out(kind, "kind")?;
        let found = memory::memory_kind(ptr)?;
        // SAFETY: checked by `out`; the caller's contract.
        unsafe { write_out(kind, found as u32) };
        Ok(())
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_buffer_references, gdsroute_bounce_buffer_free);
symbol_version!(GDSROUTE_0.2: gdsroute_memory_kind);
