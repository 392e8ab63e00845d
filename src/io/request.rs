//! A request as the engine takes it: which way it goes (`Direction`), the caller's memory and the
//! file range (`Request`), the memory it moves bytes to or from (`Target`, classified once per call
//! with the CUDA driver) and the range checks every call passes before it reaches a route.

use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::sys::cuda::{self, MemoryKind};

/// One call: its direction, the caller's memory (`buf`, host or device, `size` bytes) and the
/// file offset.
#[derive(Clone, Copy)]
pub(crate) struct Request {
    pub direction: Direction,
    pub buf: *mut u8,
    pub size: usize,
    pub offset: u64,
}

/// A caller's buffer pointer moved into a task. The caller guarantees (C API contract, or the
/// borrow in `File::read_into`) that it stays valid until the operation finishes.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(*mut u8);
// SAFETY: the pointer is only dereferenced by tasks of one operation, on disjoint ranges.
unsafe impl Send for SendPtr {}
// SAFETY: shared between the threads running tasks of one operation, which only compute the
// addresses of their own, disjoint ranges from it (`at`).
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// A pointer the caller keeps valid as above.
    pub(crate) fn new(ptr: *mut u8) -> SendPtr {
        SendPtr(ptr)
    }

    /// The address `offset` bytes in (a method, so closures capture the whole Send wrapper).
    pub(crate) fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// The memory side of a call: where a read's bytes go, or where a write's come from.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    /// Host memory, read into or written from directly by the POSIX backend.
    Host(SendPtr),
    /// Device or managed memory.
    Device {
        /// The pointer's kind (device, context).
        kind: MemoryKind,
        /// The address of the caller's buffer.
        address: u64,
        /// Start of its allocation (cuFile is given base + offset, as KvikIO does).
        base: u64,
        /// `address - base`.
        base_offset: u64,
    },
}

pub(crate) fn target_of(dst: *mut u8) -> Result<Target> {
    let kind = cuda::classify(dst.cast())?;
    if !kind.is_device() {
        return Ok(Target::Host(SendPtr(dst)));
    }
    let (base, _) = cuda::allocation_range(dst.cast())?;
    let address = dst as u64;
    Ok(Target::Device { kind, address, base, base_offset: address - base })
}

/// A request's size and offset fit `ssize_t` and `off_t`.
pub(crate) fn check_range(size: usize, offset: u64) -> Result<()> {
    if size > isize::MAX as usize {
        return Err(Error::Overflow(format!("size {size} exceeds ssize_t")));
    }
    let end = offset.checked_add(size as u64);
    if offset > i64::MAX as u64 || end.is_none_or(|e| e > i64::MAX as u64) {
        return Err(Error::Overflow(format!("offset {offset} + size {size} exceeds off_t")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_checks() {
        assert!(check_range(10, 0).is_ok());
        assert!(check_range(0, i64::MAX as u64).is_ok());
        assert!(matches!(check_range(1, i64::MAX as u64), Err(Error::Overflow(_))));
        assert!(matches!(check_range(usize::MAX, 0), Err(Error::Overflow(_))));
        assert!(matches!(check_range(0, u64::MAX), Err(Error::Overflow(_))));
    }
}
