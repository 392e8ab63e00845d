//! The exit report (the Rust side is `api::report`).

use super::{TextOut, guard};
use crate::abi::{StatsFormat, Status};
use crate::error::Error;
use std::ffi::{CStr, c_char};

/// Adds `delta` to the counter `name` of `section` in the exit report (`GDSROUTE_REPORT`): a
/// library built on gdsroute (an HDF5 driver, a framework's loader) reports its own counters
/// beside the routes, under its own section. Counters start at 0 and saturate; the report lists
/// sections and names in byte order. Thread-safe. Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (an
/// empty section or name).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_report_add_counter(section: *const c_char, name: *const c_char, delta: u64) -> Status {
    guard(|| {
        if section.is_null() {
            return Err(Error::NullArgument("section"));
        }
        if name.is_null() {
            return Err(Error::NullArgument("name"));
        }
        // SAFETY: both non-NULL and NUL-terminated (the caller's contract).
        let (section, name) = unsafe { (CStr::from_ptr(section).to_string_lossy(), CStr::from_ptr(name).to_string_lossy()) };
        if section.is_empty() || name.is_empty() {
            return Err(Error::InvalidArgument("a report counter needs a section and a name".into()));
        }
        crate::api::report::add_counter(&section, &name, delta);
        Ok(())
    })
}

/// Renders the exit report now, as text (`GDSROUTE_STATS_FORMAT_TEXT`) or one JSON object
/// (`GDSROUTE_STATS_FORMAT_JSON`), into `buf` (snprintf semantics; full length in `*length`; `buf`
/// may be NULL when `buf_len` is 0): the calls, bytes and GB/s of each direction over the time its
/// calls were in flight, per route; POSIX tasks by reason; files that fell back, by reason;
/// cuFile's own counters when live; the sections of `gdsroute_report_add_counter`. The same report
/// `GDSROUTE_REPORT` writes at exit. Errors: `NULL_ARGUMENT`, `INVALID_ENUM`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_report_render(format: u32, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status {
    guard(|| {
        let json = match format {
            f if f == StatsFormat::Text as u32 => false,
            f if f == StatsFormat::Json as u32 => true,
            value => return Err(Error::InvalidEnum { what: "stats format", value }),
        };
        let text_out = TextOut::new(buf, buf_len, length)?;
        let text = crate::api::report::render(json);
        // SAFETY: the caller's buffer and length pointer (checked by `TextOut::new`).
        unsafe { text_out.write(&text) };
        Ok(())
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_report_add_counter, gdsroute_report_render);
