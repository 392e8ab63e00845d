//! The C ABI. Every `extern "C"` function of the library lives in this module's files, one per
//! object family; this file holds the plumbing they share: the panic guard that turns errors and
//! panics into status codes, the thread-local last error, and pointer checks.
#![deny(missing_docs)]
#![allow(non_camel_case_types)]
// The pointer rules of every function are the C API conventions stated once in the header and README.
#![allow(clippy::missing_safety_doc)]
// cbindgen writes only `pub extern "C"` functions into the header, and `#[unsafe(no_mangle)]`
// exports them from the libraries whatever the module's visibility: they stay `pub`.
#![allow(unreachable_pub)]

/// Binds each named C function to the symbol version `GDSROUTE_0.1` of src/gdsroute.map, or to
/// the node named first (`symbol_version!(GDSROUTE_0.2: f, g)`) for a later release's functions.
/// One `.symver` per function, in the module that defines it (so in its object file); `@@@` makes
/// that the default version of the definition.
macro_rules! symbol_version {
    (GDSROUTE_0.2: $($name:ident),+ $(,)?) => {
        core::arch::global_asm!($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@GDSROUTE_0.2")),+);
    };
    ($($name:ident),+ $(,)?) => {
        core::arch::global_asm!($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@GDSROUTE_0.1")),+);
    };
}

pub(crate) mod batch;
pub(crate) mod diagnose;
pub(crate) mod driver;
pub(crate) mod file;
pub(crate) mod mapping;
pub(crate) mod memory;
pub(crate) mod monitor;
pub(crate) mod operation;
pub(crate) mod page_cache;
pub(crate) mod pool;
pub(crate) mod report;
pub(crate) mod settings;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod version;

use crate::error::{Error, Result};
use crate::abi::Status;
use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

struct LastError {
    status: Status,
    message: CString,
    os_error: i32,
}

thread_local! {
    /// Reached through `try_with` only: glibc runs `atexit` handlers (HDF5 closes its files in
    /// one) after the main thread's thread-local destructors, and `with` would then panic inside
    /// the panic guard. A call there keeps its status; its message is not kept.
    static LAST_ERROR: RefCell<Option<LastError>> = const { RefCell::new(None) };
}

/// Reads the thread's last error; `None` when none failed or the thread's state is gone.
fn with_last_error<T>(read: impl Fn(Option<&LastError>) -> T) -> T {
    LAST_ERROR
        .try_with(|cell| {
            let last = cell.try_borrow().ok();
            read(last.as_ref().and_then(|last| (**last).as_ref()))
        })
        .unwrap_or_else(|_| read(None))
}

/// Sets the thread's last error without failing the call (a batch wait that returns failed
/// completions describes the first one).
pub(crate) fn record_last_error(error: &Error) {
    let _ = catch_unwind(AssertUnwindSafe(|| set_last_error(error)));
}

fn set_last_error(error: &Error) {
    let message = CString::new(error.to_string().replace('\0', " ")).unwrap_or_default();
    let last = LastError { status: error.status(), message, os_error: error.os_error().unwrap_or(0) };
    let _ = LAST_ERROR.try_with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            *slot = Some(last);
        }
    });
}

/// Runs the body of an exported function: errors become their status code and the thread's last
/// error; a panic becomes `Status::Panic` and never unwinds into C.
pub(crate) fn guard(body: impl FnOnce() -> Result<()>) -> Status {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return Status::Ok,
        Ok(Err(e)) => e,
        Err(payload) => Error::Panic(crate::error::panic_message(&payload)),
    };
    // Building the message allocates; a panic there must not escape either.
    let _ = catch_unwind(AssertUnwindSafe(|| set_last_error(&error)));
    error.status()
}

/// A reference from a pointer that C promised is valid or NULL.
///
/// # Safety
/// `ptr` is NULL or points to a live `T`.
pub(crate) unsafe fn arg<'a, T>(ptr: *const T, name: &'static str) -> Result<&'a T> {
    // SAFETY: forwarded from the caller.
    unsafe { ptr.as_ref() }.ok_or(Error::NullArgument(name))
}

/// Checks an out-pointer; the value is written only on success by `write_out`.
pub(crate) fn out<T>(ptr: *mut T, name: &'static str) -> Result<*mut T> {
    if ptr.is_null() { Err(Error::NullArgument(name)) } else { Ok(ptr) }
}

/// Writes an output value.
///
/// # Safety
/// `ptr` was checked by `out` and points to writable memory for a `T`.
pub(crate) unsafe fn write_out<T>(ptr: *mut T, value: T) {
    // SAFETY: forwarded from the caller; `write` does not drop the old (uninitialised) value.
    unsafe { ptr.write(value) }
}

/// The body of a query on a handle of type `H` (a file or a mapping): checks `handle`
/// (`NULL_ARGUMENT` naming `handle_name`), then `value` (naming `name`), then writes
/// `answer(handle)` through `value`; nothing is written on an error.
///
/// # Safety
/// `handle` is NULL or a live handle; `value` is NULL or writable for a `T`.
pub(crate) unsafe fn query<H, T>(handle: *const H, handle_name: &'static str, value: *mut T, name: &'static str, answer: impl FnOnce(&H) -> Result<T>) -> Status {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let handle = unsafe { arg(handle, handle_name)? };
        let value = out(value, name)?;
        let answer = answer(handle)?;
        // SAFETY: checked by `out`.
        unsafe { write_out(value, answer) };
        Ok(())
    })
}

/// A caller's text output: `buf` of `buf_len` bytes (snprintf semantics) and the full length in
/// `*length`, checked once for every function that returns text (`length` not NULL, `buf` NULL
/// only with `buf_len` 0; `NULL_ARGUMENT` otherwise). Nothing is written until `write`.
pub(crate) struct TextOut {
    buf: *mut c_char,
    buf_len: usize,
    length: *mut usize,
}

impl TextOut {
    pub(crate) fn new(buf: *mut c_char, buf_len: usize, length: *mut usize) -> Result<TextOut> {
        let length = out(length, "length")?;
        if buf.is_null() && buf_len > 0 {
            return Err(Error::NullArgument("buf"));
        }
        Ok(TextOut { buf, buf_len, length })
    }

    /// Copies `text` into the buffer and its full length into `*length`.
    ///
    /// # Safety
    /// The caller's contract: `buf` is writable for `buf_len` bytes, `length` for a `usize`.
    pub(crate) unsafe fn write(self, text: &str) {
        // SAFETY: forwarded from the caller; `new` checked buf against buf_len.
        let n = unsafe { copy_to_c_buffer(text.as_bytes(), self.buf, self.buf_len) };
        // SAFETY: checked by `out` in `new`.
        unsafe { write_out(self.length, n) };
    }
}

/// The `struct_size` a caller set in its versioned struct at `dst` (see `copy_versioned_out`),
/// checked before any work is done for it.
///
/// Errors: `NullArgument`; `InvalidArgument` below 8.
///
/// # Safety
/// As `copy_versioned_out`.
pub(crate) unsafe fn versioned_size<T>(dst: *mut T, name: &'static str, c_type: &str) -> Result<u64> {
    let dst = out(dst, name)?;
    // SAFETY: struct_size is the struct's first field; the caller set it.
    let caller_size = unsafe { dst.cast::<u64>().read_unaligned() };
    if caller_size < 8 {
        return Err(Error::InvalidArgument(format!("{name}->struct_size is {caller_size}; set it to sizeof({c_type}) before the call")));
    }
    Ok(caller_size)
}

/// Copies `value`, a versioned struct (`#[repr(C)]`, its first field the `u64` `struct_size`),
/// into a caller's struct of `struct_size` bytes: the smaller of the two sizes (down to whole
/// 8-byte fields), with
/// `struct_size` set to the bytes written, so that a caller built against an older header, whose
/// struct is shorter, keeps working after fields are appended. `name` is the argument, `c_type`
/// the C type the message tells the caller to size it with.
///
/// # Safety
/// `dst` is NULL or points to at least `dst->struct_size` writable bytes; `T` starts with a
/// `u64` and has no padding that matters to the caller.
pub(crate) unsafe fn copy_versioned_out<T: Copy>(value: &T, dst: *mut T, name: &'static str, c_type: &str) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let caller_size = unsafe { versioned_size(dst, name, c_type) }?;
    // Whole 8-byte fields only: a size between two (no struct of an older header has one, its
    // first field being a u64) must not get half of the next.
    let n = (caller_size.min(std::mem::size_of::<T>() as u64) / 8 * 8) as usize;
    let mut src = *value;
    // SAFETY: the first 8 bytes of `src` are its struct_size.
    unsafe { (&raw mut src).cast::<u64>().write_unaligned(n as u64) };
    // SAFETY: n bytes fit both the source and the caller's struct.
    unsafe { std::ptr::copy_nonoverlapping((&raw const src).cast::<u8>(), dst.cast::<u8>(), n) };
    Ok(())
}

/// Copies `text` into a C buffer with snprintf semantics: at most `buf_len - 1` bytes and a NUL
/// (nothing when `buf_len` is 0, where `buf` may be NULL). Returns the full length.
///
/// # Safety
/// `buf` is NULL only when `buf_len` is 0; otherwise it is writable for `buf_len` bytes.
pub(crate) unsafe fn copy_to_c_buffer(text: &[u8], buf: *mut c_char, buf_len: usize) -> usize {
    if buf_len > 0 && !buf.is_null() {
        let n = text.len().min(buf_len - 1);
        // SAFETY: n + 1 <= buf_len bytes are written into the caller's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}
