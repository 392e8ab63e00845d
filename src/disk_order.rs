//! Turns in file order for the disk reads of one parallel read. A task whose range is not in the
//! page cache waits until every earlier task of its operation has passed its turn, reads, then
//! passes; tasks whose ranges are cached pass at once and read in parallel as usual. The disk
//! then sees one stream in file order (with the kernel's readahead ahead of it) instead of one
//! stream per thread.
//!
//! Why: the H200 machine's disk (virtio, reported rotational) read a cold 1 GiB file at 1.72-2.00
//! GB/s as one in-order stream and at 1.40-1.72 with 16 threads reading 4 MiB tasks
//! (`scripts/probe-cold.py`, notes/benchmarks.md session 5). Which devices get turns is the
//! `GDSROUTE_COLD_ORDER` setting (default: those the kernel reports as rotational).
//!
//! A turn is a hint, never a condition for correctness: a task that sees no earlier task pass for
//! `STALL_LIMIT` goes ahead anyway, so a stuck or unscheduled predecessor can only cost order.

use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a waiting task tolerates no progress at all before it reads out of turn.
const STALL_LIMIT: Duration = Duration::from_millis(500);

struct State {
    passed: Vec<bool>,
    /// Lowest task index that has not passed: the task whose turn it is.
    frontier: usize,
}

/// The turns of one operation's tasks, indexed 0.. in file order.
pub struct Turns {
    state: Mutex<State>,
    moved: Condvar,
}

impl Turns {
    /// Turns for `tasks` tasks, one handle per task in order.
    pub fn for_tasks(tasks: usize) -> Vec<Turn> {
        let turns = Arc::new(Turns { state: Mutex::new(State { passed: vec![false; tasks], frontier: 0 }), moved: Condvar::new() });
        (0..tasks).map(|index| Turn { turns: Arc::clone(&turns), index, passed: false, waited_in_turn: false }).collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics under this lock; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One task's turn. Dropping it passes the turn, so a task that fails or panics never holds up
/// the tasks after it.
pub struct Turn {
    turns: Arc<Turns>,
    index: usize,
    passed: bool,
    /// `wait` returned in turn (not after a stall).
    waited_in_turn: bool,
}

impl Turn {
    /// For a task about to read `offset .. offset + len` (`len > 0`) of `fd`: when the range does
    /// not look cached (`posix::looks_cached`), waits for the turn and returns it, to be passed
    /// once the reads are done; otherwise passes at once (cached ranges are read in parallel,
    /// and so is everything where `cachestat` is missing) and returns `None`.
    pub fn wait_if_cold(mut self, fd: RawFd, offset: u64, len: usize) -> Option<Turn> {
        if crate::posix::looks_cached(fd, offset, len) != Some(false) {
            return None;
        }
        self.waited_in_turn = self.wait();
        Some(self)
    }

    /// True when `wait_if_cold` waited and got its turn (the task reads in file order).
    pub fn waited_in_turn(&self) -> bool {
        self.waited_in_turn
    }

    /// Blocks until every earlier task has passed, or until no earlier task has passed for
    /// `STALL_LIMIT`. Returns false in the second case (the task goes out of turn).
    pub fn wait(&self) -> bool {
        let turns = &self.turns;
        let mut state = turns.lock();
        while state.frontier < self.index {
            let seen = state.frontier;
            let (next, timeout) = turns.moved.wait_timeout_while(state, STALL_LIMIT, |s| s.frontier == seen).unwrap_or_else(|p| p.into_inner());
            state = next;
            if timeout.timed_out() {
                return false;
            }
        }
        true
    }

    /// Lets the tasks after this one go (once all before it have passed too).
    pub fn pass(mut self) {
        self.pass_now();
    }

    fn pass_now(&mut self) {
        if std::mem::replace(&mut self.passed, true) {
            return;
        }
        let turns = &self.turns;
        let mut state = turns.lock();
        state.passed[self.index] = true;
        let before = state.frontier;
        while state.passed.get(state.frontier) == Some(&true) {
            state.frontier += 1;
        }
        if state.frontier != before {
            turns.moved.notify_all();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.pass_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    #[test]
    fn tasks_that_wait_run_in_index_order_whatever_order_they_arrive_in() {
        for round in 0..20u64 {
            let turns = Turns::for_tasks(16);
            let order = Arc::new(Mutex::new(Vec::new()));
            let mut rng = fastrand::Rng::with_seed(round);
            let mut shuffled: Vec<Turn> = turns;
            rng.shuffle(&mut shuffled);
            let threads: Vec<_> = shuffled
                .into_iter()
                .map(|turn| {
                    let order = Arc::clone(&order);
                    let delay = rng.u64(0..300);
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_micros(delay));
                        assert!(turn.wait());
                        order.lock().unwrap().push(turn.index);
                        turn.pass();
                    })
                })
                .collect();
            threads.into_iter().for_each(|t| t.join().unwrap());
            assert_eq!(*order.lock().unwrap(), (0..16).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_task_passed_early_lets_later_ones_go_and_a_dropped_turn_passes() {
        let mut turns = Turns::for_tasks(4).into_iter();
        let (t0, t1, t2, t3) = (turns.next().unwrap(), turns.next().unwrap(), turns.next().unwrap(), turns.next().unwrap());
        t2.pass(); // cached: passes before its turn
        let waiter = std::thread::spawn(move || {
            assert!(t3.wait());
            t3.index
        });
        drop(t1); // failed or panicked: its turn passes too
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "task 3 went before task 0 passed");
        assert!(t0.wait(), "the first task never waits");
        t0.pass();
        assert_eq!(waiter.join().unwrap(), 3);
    }

    #[test]
    fn a_stalled_predecessor_only_delays_by_the_stall_limit() {
        let mut turns = Turns::for_tasks(3).into_iter();
        let _stuck = turns.next().unwrap();
        let t1 = turns.next().unwrap();
        let t2 = turns.next().unwrap();
        let went = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let went2 = Arc::clone(&went);
        let later = std::thread::spawn(move || {
            let in_turn = t2.wait();
            went2.fetch_add(1, Ordering::SeqCst);
            in_turn
        });
        assert!(!t1.wait(), "task 1 must give up on its stuck predecessor");
        assert!(start.elapsed() >= STALL_LIMIT);
        assert!(!later.join().unwrap());
        assert!(start.elapsed() < STALL_LIMIT * 4, "{:?}", start.elapsed());
        assert_eq!(went.load(Ordering::SeqCst), 1);
    }
}
