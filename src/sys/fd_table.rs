//! Room in the process's descriptor table ahead of the handles that need it. Linux grows a
//! process's table when an open needs a slot past its end (64, then 128, 256, 512, ...), and in a
//! process of several threads (any CUDA program, and gdsroute's pool) each growth waits for an RCU
//! grace period (`expand_fdtable`'s `synchronize_rcu`) on the opening thread. On the H200 machine
//! (2026-12-04) those waits took 3-27 ms each and 42 ms of the 62 that 512 opens and a batch read
//! of 512 files of 2 MiB took together (`docs/performance.md`, "Many small files").
//!
//! So a handle whose descriptor lies in the upper half of the room asked for so far has the
//! table grown ahead, by a short-lived thread of its own (`gdsroute-fds`; at once on the opening
//! thread when it is the process's only one, where growths wait for nothing), to 8 times the
//! descriptor's slots (at least 1,024, at most the soft `RLIMIT_NOFILE`), by duplicating a
//! descriptor onto that number and closing it again. The kernel grows tables only when asked
//! for a slot past the end and does not shrink them, so one growth of the right size replaces
//! the doublings, and its grace period passes on that thread: opens that fit the old table
//! never wait for a growth under way, and one that needs a slot past it waits only for the rest
//! of that grace period. The cost is the table's memory (8 bytes a slot and its bitmaps) and,
//! for the thread's moment, one descriptor high up; programs whose descriptors stay below 32
//! never ask.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The table's slots asked for so far (0: none).
static ASKED: AtomicUsize = AtomicUsize::new(0);

/// Below this many slots in use nothing is asked: the table's first 64 slots come with the
/// process.
const FIRST_ASK_AT: usize = 32;
/// Slots asked for at the first ask: the usual soft `RLIMIT_NOFILE`.
const FIRST_ROOM: usize = 1024;
/// Each ask makes room for this many times the slots in use.
const GROWTH: usize = 8;

/// Called with each descriptor a handle opened: grows the table ahead in the background when
/// `fd` lies in the upper half of the room asked for. One atomic load when it does not.
pub(crate) fn opened(fd: RawFd) {
    let asked = ASKED.load(Ordering::Relaxed);
    let Ok(in_use) = usize::try_from(fd).map(|fd| fd + 1) else { return };
    if room_to_ask(in_use, asked, usize::MAX).is_none() {
        return; // the common case, without the system call of the limit
    }
    let Some(room) = room_to_ask(in_use, asked, soft_limit()) else { return };
    if ASKED.compare_exchange(asked, room, Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return; // another handle asked at the same moment
    }
    if threads_in_process() == Some(1) {
        // Alone, the process's growths wait for no grace period: grow here, at once.
        grow_to(room);
        return;
    }
    let grown = std::thread::Builder::new().name("gdsroute-fds".into()).spawn(move || grow_to(room));
    if grown.is_err() {
        // No thread now (at exit, or out of threads): the next handle in the upper half asks again.
        let _ = ASKED.compare_exchange(room, asked, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The slots to ask for when `in_use` slots are in use, `asked` were asked for before and the
/// soft descriptor limit is `limit`; `None` when there is room enough or none can be had.
fn room_to_ask(in_use: usize, asked: usize, limit: usize) -> Option<usize> {
    if in_use < FIRST_ASK_AT || in_use * 2 <= asked {
        return None;
    }
    let room = in_use.saturating_mul(GROWTH).max(FIRST_ROOM).min(limit);
    (room > asked && room > in_use).then_some(room)
}

/// The threads of the process (`Threads:` of /proc/self/status), read only when room is asked.
fn threads_in_process() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:"))?.trim().parse().ok()
}

/// The soft `RLIMIT_NOFILE` (the descriptors an open may get are those below it).
fn soft_limit() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// Makes the kernel grow the table to hold `room` slots: a duplicate onto the lowest free
/// descriptor from `room - 1` up, closed at once. Failures change nothing (the table then grows
/// as it would have).
fn grow_to(room: usize) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(highest) = RawFd::try_from(room - 1) else { return };
    // A path-only descriptor of "/" to duplicate: it reads nothing and needs no permission.
    let Ok(anchor) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open("/") else { return };
    // Both descriptors close as they go out of scope.
    let _high = crate::sys::fs::duplicate_at_or_above(anchor.as_raw_fd(), highest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_once_past_half_of_the_room_and_never_past_the_limit() {
        assert_eq!(room_to_ask(3, 0, 1024), None, "a few descriptors ask nothing");
        assert_eq!(room_to_ask(31, 0, 1024), None);
        assert_eq!(room_to_ask(32, 0, 1024), Some(1024));
        assert_eq!(room_to_ask(40, 0, 1 << 20), Some(1024));
        assert_eq!(room_to_ask(512, 1024, 1 << 20), None, "within the lower half");
        assert_eq!(room_to_ask(513, 1024, 1 << 20), Some(513 * 8));
        assert_eq!(room_to_ask(513, 1024, 1024), None, "the limit is reached");
        assert_eq!(room_to_ask(40, 0, 50), Some(50), "capped by the limit");
        assert_eq!(room_to_ask(40, 0, 40), None, "no room above the slots in use");
        assert_eq!(room_to_ask(usize::MAX / 4, 0, usize::MAX), Some(usize::MAX), "no overflow");
    }

    /// The allocated slots of this process's table (`FDSize` of /proc/self/status).
    fn table_slots() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    /// Open descriptors numbered `from` or more: the other tests of this process open and close
    /// descriptors at the same time, at the lowest free numbers.
    fn open_descriptors_from(from: usize) -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<usize>().ok()).filter(|&fd| fd >= from).count()
    }

    #[test]
    fn a_growth_makes_the_room_and_leaves_no_descriptor_behind() {
        let room = 4096.min(soft_limit());
        let high = room / 2;
        let before = open_descriptors_from(high);
        grow_to(room);
        assert!(table_slots() >= room, "FDSize {} after growing to {room}", table_slots());
        assert_eq!(open_descriptors_from(high), before, "the high duplicate is closed");
        grow_to(usize::MAX); // past any limit: nothing happens, nothing is left open
        assert_eq!(open_descriptors_from(high), before);
    }
}
