//! Process-wide counters, their reset, and their rendering as text or JSON.

use super::{arg, copy_to_c_buffer, guard, out, write_out};
use crate::error::{Error, Result};
use crate::api::process;
use crate::stats::Counters;
use crate::abi::Status;
use std::ffi::c_char;
pub use crate::abi::StatsFormat;


/// Copies `counters` into a caller's struct of `struct_size` bytes (min of the two sizes) and
/// sets its `struct_size` to the bytes written.
///
/// # Safety
/// `dst` is NULL or points to at least `dst->struct_size` writable bytes.
pub(crate) unsafe fn copy_counters_out(counters: &Counters, dst: *mut Counters) -> Result<()> {
    let dst = out(dst, "stats")?;
    // SAFETY: struct_size is the struct's first field; the caller set it.
    let caller_size = unsafe { dst.cast::<u64>().read_unaligned() };
    if caller_size < 8 {
        return Err(Error::InvalidArgument(format!(
            "stats->struct_size is {caller_size}; set it to sizeof(gdsroute_stats) before the call"
        )));
    }
    let n = caller_size.min(Counters::SIZE) as usize;
    let src = Counters { struct_size: n as u64, ..*counters };
    // SAFETY: n bytes fit both the source and the caller's struct.
    unsafe { std::ptr::copy_nonoverlapping((&raw const src).cast::<u8>(), dst.cast::<u8>(), n) };
    Ok(())
}

/// Reads a caller's struct, treating fields beyond its `struct_size` as 0.
///
/// # Safety
/// `src` is NULL or points to at least `src->struct_size` readable bytes.
unsafe fn copy_counters_in(src: *const Counters) -> Result<Counters> {
    // SAFETY: forwarded from the caller; only struct_size is read through the reference's
    // first field before the size is known.
    let first = unsafe { arg(src.cast::<u64>(), "stats")? };
    if *first < 8 {
        return Err(Error::InvalidArgument(format!(
            "stats->struct_size is {first}; a stats struct filled by gdsroute_stats_get has it set"
        )));
    }
    let n = (*first).min(Counters::SIZE) as usize;
    let mut value = Counters::default();
    // SAFETY: n bytes are readable in the caller's struct and fit ours.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), (&raw mut value).cast::<u8>(), n) };
    Ok(value)
}

/// Copies the process-wide counters into `*stats`, with cuFile's own per-GPU counters
/// (`cufile_n_*`, deltas since cuFile was opened or `gdsroute_stats_reset`) when cuFile is in use
/// and has a statistics API (`cufile_stats_state`).
///
/// Set `stats->struct_size = sizeof(gdsroute_stats)` first: the library writes at most that many
/// bytes (so older callers keep working after fields are appended) and sets `struct_size` to the
/// bytes it wrote. The snapshot is consistent even while reads run. Errors: `NULL_ARGUMENT`,
/// `INVALID_ARGUMENT` (`struct_size` below 8).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_stats_get(stats: *mut Counters) -> Status {
    // SAFETY: the caller's contract above.
    guard(|| unsafe { copy_counters_out(&process::process_counters(), stats) })
}

/// Zeroes the process-wide counters; cuFile's own counters are reported relative to this moment
/// from now on (cuFile's process-global statistics themselves are not reset, so other cuFile
/// users in the process are not disturbed).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_stats_reset() -> Status {
    guard(|| {
        process::reset_process_counters();
        Ok(())
    })
}

/// Renders `*stats` as text (`GDSROUTE_STATS_FORMAT_TEXT`) or JSON (`GDSROUTE_STATS_FORMAT_JSON`)
/// into `buf` with snprintf semantics, and the full length (without NUL) into `*length`. Only the
/// fields within `stats->struct_size` are rendered (a caller built against an older header has
/// fewer).
/// Call with `buf = NULL, buf_len = 0` to size the buffer. Errors: `NULL_ARGUMENT`,
/// `INVALID_ENUM`, `INVALID_ARGUMENT` (`struct_size` below 8).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_stats_render(
    stats: *const Counters,
    format: u32,
    buf: *mut c_char,
    buf_len: usize,
    length: *mut usize,
) -> Status {
    guard(|| {
        let length = out(length, "length")?;
        if buf.is_null() && buf_len > 0 {
            return Err(Error::NullArgument("buf"));
        }
        // SAFETY: the caller passes a stats struct with `struct_size` set, or NULL.
        let counters = unsafe { copy_counters_in(stats)? };
        let text = match format {
            // Only the fields the caller's struct holds (its struct_size), never zeros for the rest.
            f if f == StatsFormat::Text as u32 => counters.text_within(counters.struct_size),
            f if f == StatsFormat::Json as u32 => counters.json_within(counters.struct_size),
            value => return Err(Error::InvalidEnum { what: "stats format", value }),
        };
        // SAFETY: buf is writable for buf_len bytes (checked non-NULL when buf_len > 0).
        let n = unsafe { copy_to_c_buffer(text.as_bytes(), buf, buf_len) };
        // SAFETY: checked by `out`.
        unsafe { write_out(length, n) };
        Ok(())
    })
}

symbol_version!(gdsroute_stats_get, gdsroute_stats_reset, gdsroute_stats_render);
