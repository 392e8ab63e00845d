//! Planning: which bytes of a task come from a registered window and which through the bounce
//! route. A file is cut into `WINDOW`-sized windows; each task adds the bytes it reads to its
//! windows, and a window read `READS_BEFORE_REGISTERING` times over is reserved and queued for
//! registration. Whether the windows are still valid is `identity`'s job.

use super::budget::{Reservation, page_size};
use super::identity::{Identity, identity_of};
use super::registrar::{self, Job, registrar};
use super::{Mapping, PageCache, WindowState};
use crate::sys::cuda::FileMapping;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::Arc;

/// Bytes per window: large enough that registration overhead per call is small (the probe gave
/// 0.099 s/GiB for 4 MiB pieces and 0.084 s/GiB for 64 MiB ones), small enough that a limit of a
/// few GiB covers many files.
pub const WINDOW: u64 = 64 << 20;

/// How many times over a window's bytes must have been read before it is registered.
const READS_BEFORE_REGISTERING: u64 = 2;

/// Windows with fewer bytes in the file are never registered: a copy of less gains little over
/// the bounce route, and many small files would each cost a registration and a mapping.
const MIN_REGISTERED_BYTES: u64 = 1 << 20;

/// One piece of a task: copied from a registered window, or read through the bounce route.
pub(crate) enum Segment {
    /// `len` bytes at `file_offset`, copied from `mapping`.
    Registered { mapping: Arc<Mapping>, file_offset: u64, len: usize },
    /// `len` bytes at `file_offset` through `pread` and a bounce buffer.
    Bounce { file_offset: u64, len: usize },
}

impl Segment {
    /// Bytes this segment covers.
    pub(crate) fn len(&self) -> usize {
        match self {
            Segment::Registered { len, .. } | Segment::Bounce { len, .. } => *len,
        }
    }

    /// True for a segment of no bytes (never produced by `plan`).
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A window that became hot in `plan`, to be mapped and queued once the lock is released.
struct Hot {
    index: u64,
    start: u64,
    bytes: u64,
    generation: u64,
    reservation: Reservation,
}

impl PageCache {
    /// Cuts the task `[offset, offset + len)` into segments, adds its bytes to the windows it
    /// reads, and queues windows that became hot for registration for device `ordinal`, within
    /// `limit` pinned bytes (> 0).
    pub(crate) fn plan(self: &Arc<Self>, fd: RawFd, offset: u64, len: usize, ordinal: i32, limit: u64) -> Vec<Segment> {
        self.plan_noting_changes(fd, offset, len, ordinal, limit).0
    }

    /// `plan`, and the count of the file's known changes its `Registered` segments belong to (for
    /// `unchanged_since`; `None` where the file could not be `fstat`ed: no segment is registered).
    pub(crate) fn plan_noting_changes(self: &Arc<Self>, fd: RawFd, offset: u64, len: usize, ordinal: i32, limit: u64) -> (Vec<Segment>, Option<u64>) {
        let Ok(now) = identity_of(fd) else {
            return (vec![Segment::Bounce { file_offset: offset, len }].into_iter().filter(|s| !s.is_empty()).collect(), None);
        };
        let (segments, hot, stale, changes) = self.plan_under_lock(now, offset, len, limit);
        super::identity::release_windows(stale); // unregisters outside the lock
        self.start_registrations(fd, ordinal, hot);
        (segments, Some(changes))
    }

    /// `plan`'s bookkeeping under the lock: a file that changed (`now` is not the identity on
    /// record) drops its windows (returned as `stale`, to be unregistered after the lock), then
    /// each window of the range gives its segments, counts its bytes read and, once read often
    /// enough and within the pinning `limit`, becomes `Pending` with a reservation (`hot`). Also
    /// returns the count of the file's known changes the segments belong to.
    fn plan_under_lock(&self, now: Identity, offset: u64, len: usize, limit: u64) -> (Vec<Segment>, Vec<Hot>, HashMap<u64, WindowState>, u64) {
        let end = offset.saturating_add(len as u64);
        let mut segments: Vec<Segment> = Vec::new();
        let mut hot = Vec::new();
        let mut state = self.lock();
        let stale = state.forget_windows_if_changed(now);
        let generation = state.generation;
        let eligible = now.is_quiet() && !registrar::unsupported();
        let mut pos = offset;
        while pos < end {
            let index = pos / WINDOW;
            let window_end = index.saturating_add(1).saturating_mul(WINDOW).min(end);
            let piece = (window_end - pos) as usize;
            if pos >= now.size {
                push_bounce(&mut segments, pos, (end - pos) as usize);
                break;
            }
            let piece_in_file = piece.min((now.size - pos) as usize);
            let start = index * WINDOW;
            let in_file = (now.size - start).min(WINDOW);
            let window = state.windows.entry(index).or_insert(WindowState::Seen { bytes_read: 0 });
            match window {
                WindowState::Registered(mapping) => {
                    segments.push(Segment::Registered { mapping: Arc::clone(mapping), file_offset: pos, len: piece_in_file });
                }
                WindowState::Seen { bytes_read } => {
                    *bytes_read = bytes_read.saturating_add(piece_in_file as u64);
                    if eligible && in_file >= MIN_REGISTERED_BYTES && *bytes_read >= READS_BEFORE_REGISTERING * in_file {
                        let bytes = in_file.div_ceil(page_size()) * page_size();
                        if let Some(reservation) = Reservation::take(bytes, limit) {
                            *window = WindowState::Pending;
                            hot.push(Hot { index, start, bytes, generation, reservation });
                        }
                    }
                    push_bounce(&mut segments, pos, piece_in_file);
                }
                WindowState::Pending | WindowState::Refused => push_bounce(&mut segments, pos, piece_in_file),
            }
            if piece_in_file < piece {
                // The file ends inside this piece: pread finds out how much is really there.
                push_bounce(&mut segments, pos + piece_in_file as u64, piece - piece_in_file);
            }
            pos = window_end;
        }
        (segments, hot, stale, state.changes)
    }

    /// Maps the windows `plan` found hot and hands them to the background registrar.
    fn start_registrations(self: &Arc<Self>, fd: RawFd, ordinal: i32, hot: Vec<Hot>) {
        for Hot { index, start, bytes, generation, reservation } in hot {
            // Mapped here, while the handle's descriptor is surely open: the mapping keeps the
            // file, so the background registration needs no descriptor of its own.
            match FileMapping::new(fd, start, bytes as usize) {
                Ok(mapping) => registrar().submit(Job { cache: Arc::downgrade(self), index, start, generation, ordinal, mapping, reservation }),
                Err(_) => self.install(index, start, generation, Err(None), reservation),
            }
        }
    }
}

/// Merges a bounce piece into the previous one when they are contiguous (one pread loop).
fn push_bounce(segments: &mut Vec<Segment>, file_offset: u64, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(Segment::Bounce { file_offset: prev, len: prev_len }) = segments.last_mut()
        && *prev + *prev_len as u64 == file_offset
    {
        *prev_len += len;
        return;
    }
    segments.push(Segment::Bounce { file_offset, len });
}

#[cfg(test)]
mod tests {
    use super::super::budget::{self, usage};
    use super::*;
    use crate::sys::cuda::RegisteredMapping;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    use std::io::Write;
    use std::os::fd::AsRawFd;

    fn file_of(len: u64) -> (tempfile::NamedTempFile, std::fs::File) {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file_mut().set_len(len).unwrap();
        tmp.flush().unwrap();
        let f = std::fs::File::open(tmp.path()).unwrap();
        (tmp, f)
    }

    fn shape(segments: &[Segment]) -> Vec<(char, u64, usize)> {
        segments
            .iter()
            .map(|s| match s {
                Segment::Registered { file_offset, len, .. } => ('R', *file_offset, *len),
                Segment::Bounce { file_offset, len } => ('B', *file_offset, *len),
            })
            .collect()
    }

    fn wait_until_settled(cache: &PageCache) {
        // Generous: a guard against hangs, also under ThreadSanitizer, not a timing assertion.
        for _ in 0..60_000 {
            if cache.counts().1 == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("registrations still pending after 60 s");
    }

    fn bytes_read(cache: &PageCache, index: u64) -> Option<u64> {
        match cache.lock().windows.get(&index) {
            Some(WindowState::Seen { bytes_read }) => Some(*bytes_read),
            _ => None,
        }
    }

    #[test]
    fn a_first_pass_counts_bytes_and_tiles_with_bounce_segments() {
        let (_tmp, f) = file_of(3 * WINDOW + 5);
        let cache = PageCache::new();
        let fd = f.as_raw_fd();
        // A task spanning two windows: contiguous bounce pieces merge into one.
        let s = cache.plan(fd, WINDOW - 10, 20, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', WINDOW - 10, 20)]);
        assert_eq!((bytes_read(&cache, 0), bytes_read(&cache, 1)), (Some(10), Some(10)));
        assert_eq!(cache.counts(), (0, 0));
    }

    #[test]
    fn one_pass_in_small_calls_registers_nothing() {
        let _serial = budget::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (_tmp, f) = file_of(4 * WINDOW);
        let cache = PageCache::new();
        for offset in (0..4 * WINDOW).step_by((WINDOW / 2) as usize) {
            cache.plan(f.as_raw_fd(), offset, (WINDOW / 2) as usize, 0, u64::MAX);
        }
        assert_eq!(cache.counts(), (0, 0), "one pass must not queue anything");
        assert!((0..4).all(|i| bytes_read(&cache, i) == Some(WINDOW)));
    }

    #[test]
    fn small_files_are_never_registered() {
        let (_tmp, f) = file_of(MIN_REGISTERED_BYTES - 1);
        let cache = PageCache::new();
        for _ in 0..3 {
            cache.plan(f.as_raw_fd(), 0, (MIN_REGISTERED_BYTES - 1) as usize, 0, u64::MAX);
        }
        assert_eq!(cache.counts(), (0, 0));
        assert_eq!(bytes_read(&cache, 0), Some(3 * (MIN_REGISTERED_BYTES - 1)));
    }

    #[test]
    fn ranges_past_the_end_of_file_stay_on_pread() {
        let (_tmp, f) = file_of(WINDOW + 5);
        let cache = PageCache::new();
        let s = cache.plan(f.as_raw_fd(), WINDOW, 4096, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', WINDOW, 4096)]);
        let s = cache.plan(f.as_raw_fd(), 2 * WINDOW, 10, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', 2 * WINDOW, 10)]);
    }

    #[test]
    fn a_second_pass_queues_registration_within_the_limit_only() {
        let _serial = budget::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (_tmp, f) = file_of(2 * WINDOW);
        let fd = f.as_raw_fd();
        let cache = PageCache::new();
        cache.plan(fd, 0, 2 * WINDOW as usize, 0, WINDOW);
        let before = usage();
        // Room for one window: the first becomes pending, the second stays on bounce.
        let limit = WINDOW + before.pinned_bytes;
        let s = cache.plan(fd, 0, 2 * WINDOW as usize, 0, limit);
        assert_eq!(shape(&s), vec![('B', 0, 2 * WINDOW as usize)]);
        wait_until_settled(&cache);
        let after = usage();
        // Without a GPU the registration is refused and the window stays on bounce; with one it
        // is registered. Either way exactly one window was tried.
        assert_eq!((after.registrations + after.refusals) - (before.registrations + before.refusals), 1);
        let (registered, pending) = cache.counts();
        assert_eq!(pending, 0);
        assert!(registered <= 1);
        assert!(bytes_read(&cache, 1).is_some_and(|b| b == 2 * WINDOW));
    }

    #[test]
    fn a_changed_file_drops_its_windows() {
        let (tmp, f) = file_of(WINDOW);
        let fd = f.as_raw_fd();
        let cache = PageCache::new();
        cache.plan(fd, 0, 4096, 0, 0);
        cache.plan(fd, 0, 4096, 0, 0);
        assert_eq!(bytes_read(&cache, 0), Some(8192));
        let generation = cache.lock().generation;
        tmp.as_file().set_len(WINDOW + 1).unwrap();
        cache.plan(fd, 0, 4096, 0, 0);
        assert_eq!(cache.lock().generation, generation + 1);
        assert_eq!(bytes_read(&cache, 0), Some(4096));
    }

    /// A value near one of `anchors` (within a page either side) or anywhere up to `max`.
    fn near(rng: &mut fastrand::Rng, anchors: &[u64], max: u64) -> u64 {
        if rng.u8(0..3) == 0 {
            return rng.u64(0..=max);
        }
        let anchor = anchors[rng.usize(0..anchors.len())];
        (anchor + rng.u64(0..=2 * page_size())).saturating_sub(page_size()).min(max)
    }

    /// Checks that `segments` tile `[offset, offset + len)` of a file of `size` bytes exactly and
    /// that every registered segment lies inside its window's mapping and inside the file.
    fn assert_tiles(segments: &[Segment], offset: u64, len: usize, size: u64, what: &str) {
        let mut pos = offset;
        let mut previous_was_bounce = false;
        for s in segments {
            assert!(!s.is_empty(), "{what}: empty segment");
            match s {
                Segment::Registered { mapping, file_offset, len } => {
                    assert_eq!(*file_offset, pos, "{what}: gap or overlap");
                    let end = file_offset + *len as u64;
                    assert!(end <= size, "{what}: registered bytes past EOF ({end} > {size})");
                    assert_eq!(mapping.file_offset % WINDOW, 0, "{what}");
                    assert_eq!(file_offset / WINDOW, mapping.file_offset / WINDOW, "{what}: wrong window");
                    assert!(end - mapping.file_offset <= mapping.len_for_tests() as u64, "{what}: past the mapping");
                    pos = end;
                    previous_was_bounce = false;
                }
                Segment::Bounce { file_offset, len } => {
                    assert_eq!(*file_offset, pos, "{what}: gap or overlap");
                    assert!(!previous_was_bounce, "{what}: contiguous bounce pieces not merged");
                    pos += *len as u64;
                    previous_was_bounce = true;
                }
            }
        }
        assert_eq!(pos, offset + len as u64, "{what}: segments do not cover the task");
    }

    /// Drops the windows of `cache`, releasing the test mappings (never registered) without
    /// their `Drop`. Every segment of them must have been dropped already.
    fn forget_windows(cache: &PageCache) {
        for (_, w) in std::mem::take(&mut cache.lock().windows) {
            if let WindowState::Registered(m) = w {
                Mapping::release_for_tests(m);
            }
        }
    }

    #[test]
    fn plan_tiles_every_task_exactly() {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
        let mut rng = fastrand::Rng::with_seed(seed);
        for case in 0..300 {
            let sizes = [0, 1, page_size() - 1, page_size(), WINDOW - 1, WINDOW, WINDOW + 1, 2 * WINDOW + page_size() + 3];
            let mut size = if rng.bool() { sizes[rng.usize(0..sizes.len())] } else { rng.u64(0..4 * WINDOW) };
            let (tmp, f) = file_of(size);
            let fd = f.as_raw_fd();
            let cache = PageCache::new();
            for round in 0..3 {
                cache.plan(fd, 0, 1, 0, 0); // sets the identity (limit 0: nothing queued)
                {
                    let mut state = cache.lock();
                    for index in 0..=size / WINDOW + 1 {
                        let start = index * WINDOW;
                        let next = match rng.u8(0..5) {
                            0 => continue,
                            1 => WindowState::Pending,
                            2 => WindowState::Refused,
                            3 => WindowState::Seen { bytes_read: rng.u64(0..WINDOW) },
                            _ if start < size => {
                                let bytes = (size - start).min(WINDOW).div_ceil(page_size()) * page_size();
                                let registered = RegisteredMapping::unregistered_for_tests(bytes as usize);
                                WindowState::Registered(Arc::new(Mapping::new(registered, start, Reservation::none())))
                            }
                            _ => continue,
                        };
                        state.windows.insert(index, next);
                    }
                }
                let anchors: Vec<u64> = (0..=size / WINDOW + 2).map(|i| i * WINDOW).chain([size, size / 2]).collect();
                for task in 0..40 {
                    let offset = near(&mut rng, &anchors, size + 2 * WINDOW);
                    let end = near(&mut rng, &anchors, size + 2 * WINDOW).max(offset);
                    let len = (end - offset) as usize;
                    let what = format!("seed {seed:#x} case {case} round {round} task {task}: size {size}, [{offset}, +{len})");
                    let segments = cache.plan(fd, offset, len, 0, 0);
                    if len == 0 {
                        assert!(segments.is_empty(), "{what}");
                    }
                    assert_tiles(&segments, offset, len, size, &what);
                    for s in segments {
                        if let Segment::Registered { mapping, .. } = s {
                            assert!(Arc::strong_count(&mapping) > 1, "{what}: mapping not held by the cache");
                        }
                    }
                }
                // The file grows or shrinks: nothing of the old windows may be used any more.
                forget_windows(&cache);
                size = rng.u64(0..3 * WINDOW);
                tmp.as_file().set_len(size).unwrap();
            }
            forget_windows(&cache);
        }
        // Tasks near the largest offset a read can have (check_range: offset + len <= i64::MAX).
        let (_tmp, f) = file_of(WINDOW + 1);
        let cache = PageCache::new();
        let top = i64::MAX as u64;
        for (offset, len) in [(top - 1, 1usize), (top - 3 * WINDOW, 3 * WINDOW as usize), (top, 0)] {
            let segments = cache.plan(f.as_raw_fd(), offset, len, 0, 0);
            assert_tiles(&segments, offset, len, WINDOW + 1, "near i64::MAX");
        }
    }
}
