//! Monitors (the Rust side is `api::monitor`).

use super::{guard, out, write_out};
use crate::abi::{MONITOR_TASKS, Observation, Status};
use crate::error::Error;
use std::ffi::c_void;

/// Registers `callback` to see every logical call (`gdsroute_file_read`, `_pread`, `_write`,
/// `_pwrite` and the stream-ordered calls) as it ends, and with `flags` `GDSROUTE_MONITOR_TASKS`
/// every task too: its file, offset and size, the bytes moved, start and end times
/// (`CLOCK_MONOTONIC` ns), the memory, route and POSIX reason, and whether it succeeded
/// (`gdsroute_observation`, valid during the callback only: copy what you keep). KvikIO's
/// monitors see neither stream-ordered calls nor tasks. A call that fails before it is routed
/// (a closed handle, a bad range) is observed with route NONE. `*id` receives the monitor's id
/// for `gdsroute_monitor_remove`.
///
/// The callback runs on the thread that ended the call: the caller's for a synchronous call,
/// the pool thread that finished a parallel call's last task otherwise, after the call was
/// counted and before its result is handed out (`gdsroute_op_wait` returns after it). It must be
/// short, must not wait for the operation it observes, and must not unwind (C++: catch
/// everything); it may make other calls (which no monitor observes, nor their tasks: a callback
/// that reads would otherwise call itself) and add or remove monitors, its own included. It runs
/// while the library holds locks of the call it observes (of a parallel call's operation; of a
/// batch when the batch is cancelled or freed) and, for a stream-ordered call, before the
/// caller's stream goes on: it must not wait for that stream, nor call its own batch. Cost: with
/// no monitor a call pays one atomic load (docs/observing.md, "Monitors"). Errors:
/// `NULL_ARGUMENT` (`callback`, `id`), `INVALID_ARGUMENT` (flags other than 0 and
/// `GDSROUTE_MONITOR_TASKS`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_monitor_add(
    callback: Option<unsafe extern "C" fn(observation: *const Observation, user_data: *mut c_void)>,
    user_data: *mut c_void,
    flags: u32,
    id: *mut u64,
) -> Status {
    guard(|| {
        let Some(callback) = callback else { return Err(Error::NullArgument("callback")) };
        let id = out(id, "id")?;
        if flags & !MONITOR_TASKS != 0 {
            return Err(Error::InvalidArgument(format!("monitor flags {flags:#x} (0 or GDSROUTE_MONITOR_TASKS)")));
        }
        let user_data = user_data as usize;
        // SAFETY: the caller's callback, called with a valid observation and its own pointer.
        let registered = crate::api::monitor::add(move |o| unsafe { callback(o, user_data as *mut c_void) }, flags & MONITOR_TASKS != 0);
        // SAFETY: checked by `out`.
        unsafe { write_out(id, registered) };
        Ok(())
    })
}

/// Removes the monitor `id`: when this returns no callback of it runs on another thread, and
/// none starts later (a callback removing its own monitor does not wait for itself). From inside
/// a callback, removing another monitor waits for that monitor's callbacks on other threads: two
/// callbacks that remove each other's monitors at the same time wait for each other for ever,
/// so remove other monitors outside callbacks. Errors:
/// `INVALID_ARGUMENT` (no monitor has that id: never added, or removed already).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_monitor_remove(id: u64) -> Status {
    guard(|| {
        if crate::api::monitor::remove(id) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("no monitor {id} is registered")))
        }
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_monitor_add, gdsroute_monitor_remove);
