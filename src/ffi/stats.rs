//! Process-wide counters, their reset, and their rendering as text or JSON; the same per device.

use super::{TextOut, arg, guard, out, write_out};
use crate::error::{Error, Result};
use crate::api::process;
use crate::stats::{self, Counters, DeviceCounters};
use crate::abi::Status;
use std::ffi::c_char;
pub(crate) use crate::abi::StatsFormat;


/// Copies `counters` into a caller's struct of `struct_size` bytes (min of the two sizes) and
/// sets its `struct_size` to the bytes written.
///
/// # Safety
/// `dst` is NULL or points to at least `dst->struct_size` writable bytes.
pub(crate) unsafe fn copy_counters_out(counters: &Counters, dst: *mut Counters) -> Result<()> {
    // SAFETY: forwarded from the caller; `Counters` starts with its `struct_size`.
    unsafe { super::copy_versioned_out(counters, dst, "stats", "gdsroute_stats") }
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

/// Zeroes the process-wide counters, and what the exit report measures beside them (the time
/// calls were in flight, behind its rates, and the files fallen back); cuFile's own counters are
/// reported relative to this moment from now on (cuFile's process-global statistics themselves
/// are not reset, so other cuFile users in the process are not disturbed).
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
    let render = || {
        // SAFETY: the caller passes a stats struct with `struct_size` set, or NULL.
        let counters = unsafe { copy_counters_in(stats)? };
        // Only the fields the caller's struct holds (its struct_size), never zeros for the rest.
        rendering(format, || counters.text_within(counters.struct_size), || counters.json_within(counters.struct_size))
    };
    // SAFETY: the caller's buffer and length pointer, as documented above.
    unsafe { render_out(buf, buf_len, length, render) }
}

/// The rendering that `format` (a `StatsFormat` value) asks for: `text()` or `json()`.
fn rendering(format: u32, text: impl FnOnce() -> String, json: impl FnOnce() -> String) -> Result<String> {
    match format {
        f if f == StatsFormat::Text as u32 => Ok(text()),
        f if f == StatsFormat::Json as u32 => Ok(json()),
        value => Err(Error::InvalidEnum { what: "stats format", value }),
    }
}

/// The body of both render functions: checks the text output (`buf`, `length`) first, then
/// writes what `render` returns into it with snprintf semantics.
///
/// # Safety
/// `buf` is NULL or writable for `buf_len` bytes; `length` is NULL or writable for a `usize`.
unsafe fn render_out(buf: *mut c_char, buf_len: usize, length: *mut usize, render: impl FnOnce() -> Result<String>) -> Status {
    guard(|| {
        let text_out = TextOut::new(buf, buf_len, length)?;
        let text = render()?;
        // SAFETY: the caller's buffer and length pointer (checked by `TextOut::new`).
        unsafe { text_out.write(&text) };
        Ok(())
    })
}

symbol_version!(gdsroute_stats_get, gdsroute_stats_reset, gdsroute_stats_render);

/// The element size of a caller's array of device counters: `array[0].struct_size`, which must
/// hold `struct_size` and `device_ordinal` and keep the next element aligned.
///
/// # Safety
/// `array` is non-NULL and points to at least `array[0].struct_size * len` bytes (readable; for
/// `gdsroute_stats_get_devices` writable).
unsafe fn device_stride(array: *const DeviceCounters, len: usize) -> Result<usize> {
    // SAFETY: struct_size is the first field of the first element; the caller set it.
    let size = unsafe { array.cast::<u64>().read_unaligned() };
    if size < 16 || size % 8 != 0 {
        return Err(Error::InvalidArgument(format!(
            "array[0].struct_size is {size}; set it to sizeof(gdsroute_device_stats) (at least 16, a multiple of 8)"
        )));
    }
    let stride = usize::try_from(size).map_err(|_| Error::Overflow(format!("array[0].struct_size {size} exceeds size_t")))?;
    if stride.checked_mul(len).is_none_or(|total| total > isize::MAX as usize) {
        return Err(Error::Overflow(format!("{len} elements of {stride} bytes exceed the address space")));
    }
    Ok(stride)
}

/// Copies the process-wide counters of each device into `array`, one `gdsroute_device_stats` per
/// device in ascending `device_ordinal`, at most `capacity` of them, and the number of devices
/// with counters into `*count` (which may exceed `capacity`: call with `array = NULL, capacity = 0`
/// to size the array). A device has counters once a read or write task moved bytes into or out of
/// its memory (device or managed memory; host memory belongs to no device), once it has bounce
/// buffers, or while cuFile's own per-GPU statistics report it, matched by the GPU's UUID.
/// `gdsroute_stats_reset` zeroes the devices' counters and keeps them listed. CUDA is never
/// initialised for this: without a device transfer, `*count` is 0.
///
/// Set `array[0].struct_size = sizeof(gdsroute_device_stats)` first: the library takes it as the
/// size of every element (so a caller built against an older header, with a smaller struct,
/// keeps working), writes at most that many bytes into each, and sets each written element's
/// `struct_size` to the bytes it wrote. Elements past the devices are left untouched. The task
/// counters of all devices are one consistent snapshot, taken under the lock that also guards the
/// process totals of `gdsroute_stats_get`.
///
/// Errors: `NULL_ARGUMENT` (`count`; `array` when `capacity > 0`), `INVALID_ARGUMENT`
/// (`array[0].struct_size` below 16 or not a multiple of 8), `OVERFLOW` (`capacity` elements of
/// that size exceed the address space).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_stats_get_devices(array: *mut DeviceCounters, capacity: usize, count: *mut usize) -> Status {
    guard(|| {
        let count = out(count, "count")?;
        if capacity > 0 && array.is_null() {
            return Err(Error::NullArgument("array"));
        }
        // SAFETY: the caller's contract above (checked non-NULL when capacity > 0).
        let stride = if capacity > 0 { unsafe { device_stride(array, capacity)? } } else { 0 };
        let devices = process::device_counters();
        let n = stride.min(DeviceCounters::SIZE as usize);
        for (i, device) in devices.iter().take(capacity).enumerate() {
            let src = DeviceCounters { struct_size: n as u64, ..*device };
            // SAFETY: element i starts i * stride bytes in, inside the caller's array of
            // `capacity` elements; n bytes fit both it and the source.
            unsafe { std::ptr::copy_nonoverlapping((&raw const src).cast::<u8>(), array.cast::<u8>().add(i * stride), n) };
        }
        // SAFETY: checked by `out`.
        unsafe { write_out(count, devices.len()) };
        Ok(())
    })
}

/// Renders `count` device counters from `array` (as `gdsroute_stats_get_devices` filled them) as
/// text (`GDSROUTE_STATS_FORMAT_TEXT`: per device a summary line in words, e.g. "device 1: 12
/// read tasks, 48 MiB, all through the POSIX backend; bounce buffers 68 MiB pinned on NUMA node
/// 1", then its counters that are not 0, indented) or JSON (`GDSROUTE_STATS_FORMAT_JSON`: an array
/// of one object per device with every field), into `buf` with snprintf semantics, and the full
/// length (without NUL) into `*length`. A function of its own rather than a part of
/// `gdsroute_stats_render`: that one renders exactly the one struct it is given, as before, and
/// this one the array `gdsroute_stats_get_devices` gives. `array[0].struct_size` is the size of
/// every element, and only the fields within each element's own `struct_size` are rendered.
/// `count = 0` (where `array` may be NULL) renders "no device counters ..." or `[]`. Call with
/// `buf = NULL, buf_len = 0` to size the buffer.
///
/// Errors: `NULL_ARGUMENT` (`length`; `array` when `count > 0`; `buf` when `buf_len > 0`),
/// `INVALID_ENUM`, `INVALID_ARGUMENT` and `OVERFLOW` (as `gdsroute_stats_get_devices`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_stats_render_devices(
    array: *const DeviceCounters,
    count: usize,
    format: u32,
    buf: *mut c_char,
    buf_len: usize,
    length: *mut usize,
) -> Status {
    let render = || {
        if array.is_null() && count > 0 {
            return Err(Error::NullArgument("array"));
        }
        // SAFETY: the caller's contract above (checked non-NULL when count > 0).
        let stride = if count > 0 { unsafe { device_stride(array, count)? } } else { 0 };
        let n = stride.min(DeviceCounters::SIZE as usize);
        let devices: Vec<DeviceCounters> = (0..count)
            .map(|i| {
                let mut value = DeviceCounters::default();
                // SAFETY: element i lies inside the caller's array; n bytes fit ours.
                unsafe { std::ptr::copy_nonoverlapping(array.cast::<u8>().add(i * stride), (&raw mut value).cast::<u8>(), n) };
                // Each element renders the fields it holds, never more than the array's stride.
                value.struct_size = value.struct_size.min(n as u64);
                value
            })
            .collect();
        // An element too small to hold its ordinal (unfilled, or of no layout) is an error, not
        // a device rendered from bytes it does not claim.
        if let Some(i) = devices.iter().position(|d| d.struct_size < 16) {
            return Err(Error::InvalidArgument(format!("array[{i}].struct_size is {}; a filled element holds at least 16", devices[i].struct_size)));
        }
        rendering(format, || stats::render_devices_text(&devices), || stats::render_devices_json(&devices))
    };
    // SAFETY: the caller's buffer and length pointer, as documented above.
    unsafe { render_out(buf, buf_len, length, render) }
}

symbol_version!(GDSROUTE_0.2: gdsroute_stats_get_devices, gdsroute_stats_render_devices);
