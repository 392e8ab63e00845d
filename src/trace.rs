//! A timeline of where a process's device reads spend their time (preparation at open, pinning,
//! each task), for investigations such as the first read's cost (docs/routing.md, "Preparing the device route at open"). Compiled
//! in only with the `trace` cargo feature; without it every call is empty and inlined away. A
//! trace build also writes the timeline at exit into the file `GDSROUTE_TRACE_FILE` names (for C
//! programs, which have no `dump`), after a line `TRACE_START_MONOTONIC_US <µs>` that places the
//! first event on the CLOCK_MONOTONIC time line of the program's own marks.

/// Records `name` with `value` (bytes, or 0) at the current time on the calling thread.
#[inline(always)]
pub fn event(name: &'static str, value: u64) {
    #[cfg(feature = "trace")]
    timeline::record(name, value);
    #[cfg(not(feature = "trace"))]
    let _ = (name, value);
}

/// The events so far, one line each: `TRACE <µs since the first event> t<thread> <name> <value>`;
/// empty without the `trace` feature.
pub fn dump() -> String {
    #[cfg(feature = "trace")]
    return timeline::dump();
    #[cfg(not(feature = "trace"))]
    String::new()
}

#[cfg(feature = "trace")]
mod timeline {
    use once_cell::sync::Lazy;
    use std::cell::Cell;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    static START: Lazy<Instant> = Lazy::new(Instant::now);
    static EVENTS: Mutex<Vec<(u128, u64, &'static str, u64)>> = Mutex::new(Vec::new());
    static NEXT_THREAD: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static THREAD: Cell<u64> = Cell::new(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
    }

    /// CLOCK_MONOTONIC in µs (what `Instant` reads on Linux).
    fn monotonic_us() -> u128 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u128 * 1_000_000 + ts.tv_nsec as u128 / 1000
    }

    static START_US: Lazy<u128> = Lazy::new(|| {
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(write_file_at_exit) };
        monotonic_us()
    });

    extern "C" fn write_file_at_exit() {
        let _ = std::panic::catch_unwind(|| {
            if let Some(path) = std::env::var_os("GDSROUTE_TRACE_FILE") {
                let _ = std::fs::write(path, format!("TRACE_START_MONOTONIC_US {}\n{}", *START_US, dump()));
            }
        });
    }

    pub(super) fn record(name: &'static str, value: u64) {
        Lazy::force(&START_US);
        let at = START.elapsed().as_micros();
        let thread = THREAD.with(Cell::get);
        EVENTS.lock().unwrap_or_else(|p| p.into_inner()).push((at, thread, name, value));
    }

    pub(super) fn dump() -> String {
        let events = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
        events.iter().map(|(at, t, name, v)| format!("TRACE {at} t{t} {name} {v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_reach_the_dump_only_with_the_feature() {
        event("test.event", 42);
        let dump = dump();
        if cfg!(feature = "trace") {
            let line = dump.lines().find(|l| l.ends_with(" test.event 42")).expect("recorded");
            assert!(line.starts_with("TRACE "), "{line}");
        } else {
            assert!(dump.is_empty());
        }
    }
}
