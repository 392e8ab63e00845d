//! What the exit report needs beyond the counters: the time calls were in flight, per direction
//! (from the moment one call of that direction started with none in flight to the moment the
//! last one ended: the wall time the process spent reading, or writing, however many calls
//! overlapped), the files whose device transfers fell back to the POSIX route, by reason, and
//! whether this process started a call (a forked child that never made one prints no report):
//! a flag a fork handler clears in the child, so that a call pays no `getpid`.

use crate::abi::FallbackReason;
use crate::direction::Direction;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct InFlight {
    calls: u64,
    since: Option<Instant>,
    busy: Duration,
}

const IDLE: InFlight = InFlight { calls: 0, since: None, busy: Duration::ZERO };

/// Reads, writes.
static IN_FLIGHT: [Mutex<InFlight>; 2] = [Mutex::new(IDLE), Mutex::new(IDLE)];

/// This process started a call (cleared in a forked child by `forgotten_in_child`).
static MADE_CALLS: AtomicBool = AtomicBool::new(false);

extern "C" fn forgotten_in_child() {
    MADE_CALLS.store(false, Ordering::Relaxed);
    // The parent's calls in flight are not the child's: their time so far stays (the child's
    // report counts its parent's work), and no more is added. A lock held at the fork (another
    // thread inside `call_started`) is left as it is.
    for slot in &IN_FLIGHT {
        if let Ok(mut s) = slot.try_lock() {
            if let Some(since) = s.since.take() {
                s.busy += since.elapsed();
            }
            s.calls = 0;
        }
    }
}

/// Files whose device transfers fell back, by `FallbackReason` value.
static FALLBACKS: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

fn slot(direction: Direction) -> std::sync::MutexGuard<'static, InFlight> {
    IN_FLIGHT[direction as usize].lock().unwrap_or_else(|p| p.into_inner())
}

/// A call of `direction` starts.
pub(crate) fn call_started(direction: Direction) {
    static FORK_HANDLER: Once = Once::new();
    FORK_HANDLER.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::pthread_atfork(None, None, Some(forgotten_in_child)) };
    });
    if !MADE_CALLS.load(Ordering::Relaxed) {
        MADE_CALLS.store(true, Ordering::Relaxed);
    }
    let mut s = slot(direction);
    if s.calls == 0 {
        s.since = Some(Instant::now());
    }
    s.calls += 1;
}

/// A call of `direction` ended (counted as any call's end: finished, rejected or settled).
pub(crate) fn call_ended(direction: Direction) {
    let mut s = slot(direction);
    if s.calls == 0 {
        return; // a call whose start was not seen (none should be)
    }
    s.calls -= 1;
    if s.calls == 0
        && let Some(since) = s.since.take()
    {
        s.busy += since.elapsed();
    }
}

/// How many calls of `direction` are in flight now (started, not ended; the caller's own included).
pub(crate) fn calls_in_flight(direction: Direction) -> u64 {
    slot(direction).calls
}

/// The time calls of `direction` were in flight so far, including a stretch still running.
pub(crate) fn busy(direction: Direction) -> Duration {
    let s = slot(direction);
    s.busy + s.since.map_or(Duration::ZERO, |since| since.elapsed())
}

/// Starts the report's measures again (`gdsroute_stats_reset`, with the counters they go with):
/// no time in flight so far (a stretch running now counts from now on, its calls still in
/// flight), no file fallen back.
pub(crate) fn reset() {
    for direction in [Direction::Read, Direction::Write] {
        let mut s = slot(direction);
        s.busy = Duration::ZERO;
        if s.since.is_some() {
            s.since = Some(Instant::now());
        }
    }
    for count in &FALLBACKS {
        count.store(0, Ordering::Relaxed);
    }
}

/// Whether this process started a call (a child forked from one that did has not, until it does).
pub(crate) fn this_process_made_calls() -> bool {
    MADE_CALLS.load(Ordering::Relaxed)
}

/// A file's device transfers fell back to the POSIX route for `reason`.
pub(crate) fn record_fallback(reason: FallbackReason) {
    if let Some(count) = FALLBACKS.get(reason as usize) {
        count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Files that fell back so far, by reason (those with none left out).
pub(crate) fn fallbacks() -> Vec<(FallbackReason, u64)> {
    FallbackReason::ALL.iter().filter_map(|&r| Some((r, FALLBACKS.get(r as usize)?.load(Ordering::Relaxed))).filter(|(_, n)| *n > 0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_calls_count_their_wall_time_once() {
        let before = busy(Direction::Write);
        call_started(Direction::Write);
        call_started(Direction::Write);
        std::thread::sleep(Duration::from_millis(20));
        call_ended(Direction::Write);
        std::thread::sleep(Duration::from_millis(20));
        call_ended(Direction::Write);
        let stretch = busy(Direction::Write) - before;
        // Other tests' writes may add their own time; the stretch is at least the 40 ms.
        assert!(stretch >= Duration::from_millis(40), "{stretch:?}");
        call_ended(Direction::Write); // an unmatched end changes nothing
        assert!(this_process_made_calls());
    }

    /// A child forked while a call of its parent is in flight has no call in flight: its time in
    /// flight keeps the parent's so far and grows no more.
    #[test]
    fn a_child_forked_during_a_call_has_none_in_flight() {
        let text = crate::test_support::run_ignored_test("stats::activity::tests::fork_child", &[]);
        assert!(text.contains("forked: ok"), "{text}");
    }

    #[test]
    #[ignore = "a child process of a_child_forked_during_a_call_has_none_in_flight"]
    fn fork_child() {
        call_started(Direction::Read); // the parent's call, in flight at the fork
        // SAFETY: the child calls only this module's functions (its locks were free at the fork:
        // this process has no other thread making calls) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let (calls, first) = (calls_in_flight(Direction::Read), busy(Direction::Read));
            std::thread::sleep(Duration::from_millis(300));
            let grew = busy(Direction::Read) - first;
            let ok = calls == 0 && grew < Duration::from_millis(100);
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for this process's own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        call_ended(Direction::Read);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child had the parent's call in flight (status {status})");
        println!("forked: ok");
    }

    /// In a process of its own: the measures are process-wide, and other tests run beside this.
    #[test]
    fn a_reset_starts_the_time_in_flight_and_the_fallbacks_again() {
        let text = crate::test_support::run_ignored_test("stats::activity::tests::reset_child", &[]);
        assert!(text.contains("reset: ok"), "{text}");
    }

    #[test]
    #[ignore = "a child process of a_reset_starts_the_time_in_flight_and_the_fallbacks_again"]
    fn reset_child() {
        call_started(Direction::Read);
        std::thread::sleep(Duration::from_millis(300));
        record_fallback(FallbackReason::CompatOn);
        assert!(busy(Direction::Read) >= Duration::from_millis(300));
        reset();
        // The call still in flight counts from the reset on, not from its start.
        assert!(busy(Direction::Read) < Duration::from_millis(300), "{:?}", busy(Direction::Read));
        assert!(fallbacks().is_empty());
        call_ended(Direction::Read);
        assert_eq!(calls_in_flight(Direction::Read), 0);
        println!("reset: ok");
    }
}
