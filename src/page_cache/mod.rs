//! The registered page cache: device reads of file ranges that were read before are copied by the
//! GPU's copy engine straight out of the page cache, with no CPU copy into a bounce buffer.
//!
//! Why: on the H200 the bounce route is bound by the CPU's page-cache copy (42-44 GB/s at 16
//! threads, the same plateau as plain `pread` into host memory), while copies from a registered
//! mapping of the file run at 54-55 GB/s from any number of threads. Registering costs about
//! 0.09 s per GiB, serialised in the driver (tools/probes/probe-mapped.py), so it cannot pay for a
//! range read once; it pays from the third read of a range on.
//!
//! How: a file is cut into `WINDOW`-sized windows. Reads add the bytes they take from each
//! window; once a window's bytes have been read twice over (in any chunking: one pass in small
//! calls does not count twice), it is queued for registration on a background thread
//! (`registrar`; reads never wait for it), within the process-wide limit of pinned bytes
//! (`budget`, the `page_cache_pin_max` setting; 0 turns all of this off). Later tasks copy from
//! the registered mapping; a window that is not registered (yet) goes through the bounce route as
//! before. Nothing is evicted to make room: once the limit is reached, further windows stay on the
//! bounce route, so a working set larger than the limit costs no repeated registrations.
//!
//! Correctness: before every task the file's identity (device, inode, size, modification and
//! change times) is compared with the one the windows were registered under, and any change drops
//! every window of the file (so a `write(2)` or a truncation sends the next reads through
//! `pread`). Windows are registered only for files unchanged for `QUIET` (the change time has a
//! coarse clock: a file rewritten to the same size within one tick would otherwise look the
//! same). The mapping is shared, so a write racing with a copy is seen partly, as with `pread`.
//! Ranges past the end of file always go through `pread`, which decides EOF.

mod budget;
mod registrar;

pub use budget::{Usage, default_pin_max, usage};
pub use registrar::DeviceReadInFlight;

use crate::sys::cuda::{self, FileMapping, RegisteredMapping};
use budget::{Reservation, page_size};
use registrar::{Job, registrar};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bytes per window: large enough that registration overhead per call is small (the probe gave
/// 0.099 s/GiB for 4 MiB pieces and 0.084 s/GiB for 64 MiB ones), small enough that a limit of a
/// few GiB covers many files.
pub const WINDOW: u64 = 64 << 20;

/// How many times over a window's bytes must have been read before it is registered.
const READS_BEFORE_REGISTERING: u64 = 2;

/// Windows with fewer bytes in the file are never registered: a copy of less gains little over
/// the bounce route, and many small files would each cost a registration and a mapping.
const MIN_REGISTERED_BYTES: u64 = 1 << 20;

/// How long a file must have been unchanged before its windows are registered. Unit tests read
/// files they have just written, and test `is_quiet_for` on its own.
#[cfg(not(test))]
const QUIET: Duration = Duration::from_secs(1);
#[cfg(test)]
const QUIET: Duration = Duration::ZERO;

/// What a file looked like when its windows were registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    /// True when the file has not changed for `QUIET` (by its change time).
    fn is_quiet(&self) -> bool {
        self.is_quiet_for(QUIET)
    }

    /// True when the change time lies at least `quiet` in the past (not in the future).
    fn is_quiet_for(&self, quiet: Duration) -> bool {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else { return false };
        let (secs, nanos) = self.ctime;
        let changed = Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
        now.checked_sub(changed).is_some_and(|age| age >= quiet)
    }
}

fn identity_of(fd: RawFd) -> std::io::Result<Identity> {
    let st = crate::sys::fs::stat(fd)?;
    Ok(Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// A registered window. Field order: the mapping is released before the budget share.
pub struct Mapping {
    registered: ManuallyDrop<RegisteredMapping>,
    file_offset: u64,
    _reservation: Reservation,
}

impl Mapping {
    fn new(registered: RegisteredMapping, file_offset: u64, reservation: Reservation) -> Mapping {
        Mapping { registered: ManuallyDrop::new(registered), file_offset, _reservation: reservation }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Once process exit has begun, CUDA may be tearing down: the pages are left to the OS.
        if !registrar::exiting() {
            // SAFETY: taken once, here.
            drop(unsafe { ManuallyDrop::take(&mut self.registered) });
        }
    }
}

impl Mapping {
    /// The host address of file byte `file_offset`, which lies inside this window.
    pub fn address_of(&self, file_offset: u64) -> *const u8 {
        debug_assert!(file_offset >= self.file_offset && file_offset - self.file_offset < self.registered.len() as u64);
        self.registered.as_ptr().wrapping_add((file_offset - self.file_offset) as usize)
    }
}

enum WindowState {
    /// Not registered; `bytes_read` bytes were read from it so far.
    Seen { bytes_read: u64 },
    /// Queued for (or in) registration.
    Pending,
    /// Registered: copies read it directly.
    Registered(Arc<Mapping>),
    /// Registration failed; this window stays on the bounce route.
    Refused,
}

#[derive(Default)]
struct State {
    identity: Option<Identity>,
    /// Bumped whenever the windows are dropped, so a registration that finishes afterwards is
    /// discarded instead of installed under a new identity.
    generation: u64,
    windows: HashMap<u64, WindowState>,
}

/// One piece of a task: copied from a registered window, or read through the bounce route.
pub enum Segment {
    /// `len` bytes at `file_offset`, copied from `mapping`.
    Registered { mapping: Arc<Mapping>, file_offset: u64, len: usize },
    /// `len` bytes at `file_offset` through `pread` and a bounce buffer.
    Bounce { file_offset: u64, len: usize },
}

impl Segment {
    /// Bytes this segment covers.
    pub fn len(&self) -> usize {
        match self {
            Segment::Registered { len, .. } | Segment::Bounce { len, .. } => *len,
        }
    }

    /// True for a segment of no bytes (never produced by `plan`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The registered windows of one open file.
pub struct PageCache {
    state: Mutex<State>,
    /// The file's (device, inode) when made by `for_descriptor`: every cache of the same file in
    /// the process drops its windows when any handle of it writes (`file_written`).
    file: Option<(u64, u64)>,
}

/// The caches of each open file (by device and inode), so that a write through one handle drops
/// the windows of every handle of the same file. Dead entries are swept when a cache is added.
type OpenFiles = HashMap<(u64, u64), Vec<std::sync::Weak<PageCache>>>;

static OPEN_FILES: once_cell::sync::Lazy<Mutex<OpenFiles>> = once_cell::sync::Lazy::new(Default::default);

fn open_files() -> MutexGuard<'static, OpenFiles> {
    OPEN_FILES.lock().unwrap_or_else(|p| p.into_inner())
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
    /// An empty cache for a file (nothing is registered until windows are read twice over).
    pub fn new() -> Arc<PageCache> {
        Arc::new(PageCache { state: Mutex::new(State::default()), file: None })
    }

    /// An empty cache for the file open on `fd`, known by its (device, inode) to the other
    /// caches of the same file, whose windows a write through this one drops (`file_written`).
    /// A descriptor that cannot be `fstat`ed gives a cache of its own (`new`).
    pub fn for_descriptor(fd: RawFd) -> Arc<PageCache> {
        let Ok(st) = crate::sys::fs::stat(fd) else { return PageCache::new() };
        let file = (st.st_dev, st.st_ino);
        let cache = Arc::new(PageCache { state: Mutex::new(State::default()), file: Some(file) });
        let mut files = open_files();
        files.retain(|_, caches| {
            caches.retain(|c| c.strong_count() > 0);
            !caches.is_empty()
        });
        files.entry(file).or_default().push(Arc::downgrade(&cache));
        cache
    }

    /// Drops every window of this file, in every cache of it in the process (all handles of the
    /// same device and inode): called before and after each write task, so that no device read
    /// copies bytes registered before the write (the identity check of `plan` sees most writes
    /// too, but not one that keeps the size within the time stamps' tick). Registrations still
    /// queued are discarded when they finish (the generation moved on).
    pub fn file_written(&self) {
        let caches: Vec<Arc<PageCache>> = match self.file {
            Some(file) => open_files().get(&file).map(|c| c.iter().filter_map(std::sync::Weak::upgrade).collect()).unwrap_or_default(),
            None => Vec::new(),
        };
        if caches.is_empty() {
            self.drop_windows();
        }
        for cache in caches {
            cache.drop_windows();
        }
    }

    /// Forgets this cache's windows and identity; the mappings are unregistered after the lock.
    fn drop_windows(&self) {
        let stale = {
            let mut state = self.lock();
            state.identity = None;
            state.generation += 1;
            std::mem::take(&mut state.windows)
        };
        drop(stale);
    }

    /// Windows this cache tracks now (read, pending, registered or refused), for tests.
    #[doc(hidden)]
    pub fn window_count(&self) -> usize {
        self.lock().windows.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the task `[offset, offset + len)` into segments, adds its bytes to the windows it
    /// reads, and queues windows that became hot for registration for device `ordinal`, within
    /// `limit` pinned bytes (> 0).
    pub fn plan(self: &Arc<Self>, fd: RawFd, offset: u64, len: usize, ordinal: i32, limit: u64) -> Vec<Segment> {
        let Ok(now) = identity_of(fd) else {
            return vec![Segment::Bounce { file_offset: offset, len }].into_iter().filter(|s| !s.is_empty()).collect();
        };
        let (segments, hot, stale) = self.plan_under_lock(now, offset, len, limit);
        drop(stale); // unregisters outside the lock
        self.start_registrations(fd, ordinal, hot);
        segments
    }

    /// `plan`'s bookkeeping under the lock: a file that changed (`now` is not the identity on
    /// record) drops its windows (returned as `stale`, to be unregistered after the lock), then
    /// each window of the range gives its segments, counts its bytes read and, once read often
    /// enough and within the pinning `limit`, becomes `Pending` with a reservation (`hot`).
    fn plan_under_lock(&self, now: Identity, offset: u64, len: usize, limit: u64) -> (Vec<Segment>, Vec<Hot>, HashMap<u64, WindowState>) {
        let end = offset.saturating_add(len as u64);
        let mut segments: Vec<Segment> = Vec::new();
        let mut hot = Vec::new();
        let mut state = self.lock();
        let stale = if state.identity != Some(now) {
            state.identity = Some(now);
            state.generation += 1;
            std::mem::take(&mut state.windows)
        } else {
            HashMap::new()
        };
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
        (segments, hot, stale)
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

    /// Registered windows and pending registrations of this file.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        let registered = state.windows.values().filter(|w| matches!(w, WindowState::Registered(_))).count();
        let pending = state.windows.values().filter(|w| matches!(w, WindowState::Pending)).count();
        (registered, pending)
    }

    /// True while window `index` still waits for the registration queued in `generation`.
    fn still_pending(&self, index: u64, generation: u64) -> bool {
        let state = self.lock();
        state.generation == generation && matches!(state.windows.get(&index), Some(WindowState::Pending))
    }

    /// Records the outcome of a registration (`Err(None)`: not attempted, e.g. no thread, no
    /// mapping or no active primary context). Outcomes for an older generation are dropped with their mapping.
    fn install(
        &self,
        index: u64,
        start: u64,
        generation: u64,
        result: Result<RegisteredMapping, Option<cuda::CudaFailure>>,
        reservation: Reservation,
    ) {
        let mut state = self.lock();
        if state.generation != generation {
            return; // the file changed meanwhile; the mapping and reservation drop after the lock
        }
        budget::count_registration(result.is_ok());
        let next = match result {
            Ok(registered) => WindowState::Registered(Arc::new(Mapping::new(registered, start, reservation))),
            Err(_) => WindowState::Refused,
        };
        state.windows.insert(index, next);
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
    use super::*;
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

    #[test]
    fn only_files_unchanged_for_a_while_are_quiet() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let at = |ago: Duration| {
            let t = now - ago;
            Identity { dev: 1, ino: 2, size: 3, mtime: (0, 0), ctime: (t.as_secs() as i64, t.subsec_nanos() as i64) }
        };
        assert!(at(Duration::from_secs(5)).is_quiet_for(Duration::from_secs(1)));
        assert!(!at(Duration::from_millis(10)).is_quiet_for(Duration::from_secs(1)));
        // A change time in the future (clock steps) is not quiet.
        let future = now + Duration::from_secs(60);
        let id = Identity { ctime: (future.as_secs() as i64, 0), ..at(Duration::ZERO) };
        assert!(!id.is_quiet_for(Duration::from_secs(1)));
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
                    assert!(end - mapping.file_offset <= mapping.registered.len() as u64, "{what}: past the mapping");
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
                let Ok(mut mapping) = Arc::try_unwrap(m) else { panic!("a test mapping is still shared") };
                // SAFETY: taken once; the emptied Mapping is forgotten right after.
                let registered = unsafe { ManuallyDrop::take(&mut mapping.registered) };
                std::mem::forget(mapping);
                registered.release_for_tests();
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

#[cfg(test)]
mod file_written_tests;
