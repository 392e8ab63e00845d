//! The registered page cache: device reads of file ranges that were read before are copied by the
//! GPU's copy engine straight out of the page cache, with no CPU copy into a bounce buffer.
//!
//! Why: on the H200 the bounce route is bound by the CPU's page-cache copy (42-44 GB/s at 16
//! threads, the same plateau as plain `pread` into host memory), while copies from a registered
//! mapping of the file run at 54-55 GB/s from any number of threads. Registering costs about
//! 0.09 s per GiB, serialised in the driver (scripts/probe-mapped.py), so it cannot pay for a
//! range read once; it pays from the third read of a range on.
//!
//! How: a file is cut into `WINDOW`-sized windows. Each call that touches a window counts once;
//! at the second call the window is queued for registration on one background thread (reads
//! never wait for it), within a process-wide budget of pinned bytes (the `page_cache_pin_max`
//! setting, 0 turns all of this off). Later tasks copy from the registered mapping; a window that
//! is not registered (yet) goes through the bounce route as before. Nothing is evicted to make
//! room: once the budget is used, further windows stay on the bounce route, so a working set
//! larger than the budget costs no repeated registrations.
//!
//! Correctness: the mapping is `MAP_SHARED`, so bytes written with `write(2)` are seen by later
//! copies. Before every task the file's identity (device, inode, size, modification and change
//! times) is compared with the one the windows were registered under; any change drops every
//! window of the file. Ranges past the end of file always go through `pread`, which decides EOF.

use crate::cuda::{self, RegisteredMapping, ScopedContext};
use once_cell::sync::{Lazy, OnceCell};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

/// Bytes per window: large enough that registration overhead per call is small (the probe gave
/// 0.099 s/GiB for 4 MiB pieces and 0.084 s/GiB for 64 MiB ones), small enough that a budget
/// of a few GiB covers many files.
pub const WINDOW: u64 = 64 << 20;

/// Calls that must have touched a window before it is registered.
const READS_BEFORE_REGISTERING: u32 = 2;

/// How long a registration waits for device reads in flight to finish. Registering stalls every
/// host-to-device copy of the process (measured 0.7 GB/s while it runs,
/// scripts/probe-register-interference.py), so it prefers the gaps between reads; a process that
/// never pauses still gets its windows registered after this delay.
const MAX_DEFERRAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Device reads running now in this process (tasks copying into device memory).
static DEVICE_READS_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// Marks a device read task as running until dropped.
pub struct DeviceReadInFlight(());

impl DeviceReadInFlight {
    /// Counts the calling task in until the guard drops.
    pub fn enter() -> DeviceReadInFlight {
        DEVICE_READS_IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        DeviceReadInFlight(())
    }
}

impl Drop for DeviceReadInFlight {
    fn drop(&mut self) {
        DEVICE_READS_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits until no device read runs, or `MAX_DEFERRAL` has passed.
fn wait_for_a_gap_between_reads() {
    let deadline = std::time::Instant::now() + MAX_DEFERRAL;
    while DEVICE_READS_IN_FLIGHT.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
}

const PAGE: u64 = 4096;

/// What a file looked like when its windows were registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn identity_of(fd: RawFd) -> std::io::Result<Identity> {
    // SAFETY: zeroed stat is a valid out-buffer; fstat writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the duration of the call (the caller holds it); valid out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// Pinned page-cache bytes of the whole process, against the budget.
static PINNED_BYTES: AtomicU64 = AtomicU64::new(0);
static PINNED_BYTES_PEAK: AtomicU64 = AtomicU64::new(0);
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);
static REFUSALS: AtomicU64 = AtomicU64::new(0);

/// Process-wide figures for the statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Page-cache bytes pinned now.
    pub pinned_bytes: u64,
    /// The most pinned at once.
    pub pinned_bytes_peak: u64,
    /// Windows registered so far.
    pub registrations: u64,
    /// Registrations the driver refused (those windows stay on the bounce route).
    pub refusals: u64,
}

/// The process-wide figures now.
pub fn usage() -> Usage {
    Usage {
        pinned_bytes: PINNED_BYTES.load(Ordering::Relaxed),
        pinned_bytes_peak: PINNED_BYTES_PEAK.load(Ordering::Relaxed),
        registrations: REGISTRATIONS.load(Ordering::Relaxed),
        refusals: REFUSALS.load(Ordering::Relaxed),
    }
}

/// Default budget: an eighth of physical memory, at most 16 GiB. Pinned page cache cannot be
/// reclaimed, so the default stays well below what a host needs for everything else.
pub fn default_pin_max() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let total = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
    (total / 8).min(16 << 30)
}

/// A share of the budget, given back on drop.
struct Reservation(u64);

impl Reservation {
    fn take(bytes: u64, budget: u64) -> Option<Reservation> {
        PINNED_BYTES
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| now.checked_add(bytes).filter(|&n| n <= budget))
            .ok()
            .map(|before| {
                PINNED_BYTES_PEAK.fetch_max(before + bytes, Ordering::Relaxed);
                Reservation(bytes)
            })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        PINNED_BYTES.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// A registered window. Field order: the mapping is released before the budget share.
pub struct Mapping {
    registered: RegisteredMapping,
    file_offset: u64,
    _reservation: Reservation,
}

enum WindowState {
    /// Touched by `reads` calls, the last one `last_call`.
    Seen { reads: u32, last_call: u64 },
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

impl Mapping {
    /// The host address of file byte `file_offset`, which lies inside this window.
    pub fn address_of(&self, file_offset: u64) -> *const u8 {
        debug_assert!(file_offset >= self.file_offset && file_offset - self.file_offset < self.registered.len() as u64);
        self.registered.as_ptr().wrapping_add((file_offset - self.file_offset) as usize)
    }
}

/// The registered windows of one open file.
pub struct PageCache {
    state: Mutex<State>,
    /// A duplicate of the file's descriptor, made at the first registration request, so that the
    /// background registration never maps a descriptor number the handle has closed and reused.
    fd: OnceCell<OwnedFd>,
}

/// Identifies one logical read call, so that the tasks of one call count as one read of a window.
pub fn next_call_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl PageCache {
    /// An empty cache for a file (nothing is registered until windows are read twice).
    pub fn new() -> Arc<PageCache> {
        Arc::new(PageCache { state: Mutex::new(State::default()), fd: OnceCell::new() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the task `[offset, offset + len)` of call `call` into segments, counts the read of
    /// every window it touches, and queues windows that became hot for registration in the
    /// context of device `ordinal`. `budget` is the pin limit in bytes (> 0).
    pub fn plan(self: &Arc<Self>, fd: RawFd, call: u64, offset: u64, len: usize, ordinal: i32, budget: u64) -> Vec<Segment> {
        let end = offset.saturating_add(len as u64);
        let Ok(now) = identity_of(fd) else {
            return vec![Segment::Bounce { file_offset: offset, len }];
        };
        let stale;
        let mut segments: Vec<Segment> = Vec::new();
        let mut queue = Vec::new();
        {
            let mut state = self.lock();
            stale = if state.identity != Some(now) {
                state.identity = Some(now);
                state.generation += 1;
                std::mem::take(&mut state.windows)
            } else {
                HashMap::new()
            };
            let generation = state.generation;
            let mut pos = offset;
            while pos < end {
                let index = pos / WINDOW;
                let window_end = ((index + 1) * WINDOW).min(end);
                let piece = (window_end - pos) as usize;
                if pos >= now.size {
                    push_bounce(&mut segments, pos, (end - pos) as usize);
                    break;
                }
                let piece_in_file = piece.min((now.size - pos) as usize);
                let window = state.windows.entry(index).or_insert(WindowState::Seen { reads: 0, last_call: 0 });
                match window {
                    WindowState::Registered(mapping) => {
                        segments.push(Segment::Registered { mapping: Arc::clone(mapping), file_offset: pos, len: piece_in_file });
                    }
                    WindowState::Seen { reads, last_call } => {
                        if *last_call != call {
                            *last_call = call;
                            *reads += 1;
                        }
                        if *reads >= READS_BEFORE_REGISTERING {
                            let start = index * WINDOW;
                            let bytes = (now.size - start).min(WINDOW).div_ceil(PAGE) * PAGE;
                            if let Some(reservation) = Reservation::take(bytes, budget) {
                                *window = WindowState::Pending;
                                queue.push(Job { cache: Arc::downgrade(self), index, start, bytes, generation, ordinal, reservation });
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
        }
        drop(stale); // unregisters outside the lock
        if !queue.is_empty() && self.fd.get_or_try_init(|| duplicate(fd)).is_ok() {
            let registrar = registrar();
            queue.into_iter().for_each(|job| registrar.submit(job));
        }
        segments
    }

    /// Registered windows and pending registrations of this file (for tests and diagnostics).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        let registered = state.windows.values().filter(|w| matches!(w, WindowState::Registered(_))).count();
        let pending = state.windows.values().filter(|w| matches!(w, WindowState::Pending)).count();
        (registered, pending)
    }

    fn install(&self, index: u64, start: u64, generation: u64, result: Result<RegisteredMapping, cuda::CudaFailure>, reservation: Reservation) {
        let mut state = self.lock();
        if state.generation != generation {
            return; // the file changed meanwhile; the mapping and reservation are dropped
        }
        let next = match result {
            Ok(registered) => {
                REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
                WindowState::Registered(Arc::new(Mapping { registered, file_offset: start, _reservation: reservation }))
            }
            Err(_) => {
                REFUSALS.fetch_add(1, Ordering::Relaxed);
                WindowState::Refused
            }
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

fn duplicate(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: the caller holds fd open for the duration of this call.
    unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}

/// A window to register.
struct Job {
    cache: Weak<PageCache>,
    index: u64,
    start: u64,
    bytes: u64,
    generation: u64,
    ordinal: i32,
    reservation: Reservation,
}

impl Job {
    fn run(self) {
        let Job { cache, index, start, bytes, generation, ordinal, reservation } = self;
        let Some(cache) = cache.upgrade() else { return };
        let Some(fd) = cache.fd.get() else { return };
        wait_for_a_gap_between_reads();
        // The device's primary context (retained for the life of the process) rather than the
        // reader's, which the application may destroy; PORTABLE makes the pages usable from all.
        let result = cuda::primary_context(ordinal).and_then(|ctx| {
            let _scope = ScopedContext::push(ctx)?;
            RegisteredMapping::new(fd.as_raw_fd(), start, bytes as usize)
        });
        cache.install(index, start, generation, result, reservation);
    }
}

/// The background thread that registers windows, one at a time (the driver serialises
/// registrations anyway, and reads must not wait for them).
struct Registrar {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// False when the thread could not be started: jobs are then dropped at once, which gives
    /// their budget back and leaves their windows on the bounce route.
    running: bool,
}

fn registrar() -> &'static Registrar {
    static REGISTRAR: Lazy<&'static Registrar> = Lazy::new(|| {
        let (tx, rx) = std::sync::mpsc::channel::<&'static Registrar>();
        let spawned = std::thread::Builder::new().name("gdsroute-pin".into()).spawn(move || {
            if let Ok(registrar) = rx.recv() {
                registrar.serve();
            }
        });
        let registrar: &'static Registrar =
            Box::leak(Box::new(Registrar { queue: Mutex::new(VecDeque::new()), ready: Condvar::new(), running: spawned.is_ok() }));
        let _ = tx.send(registrar);
        registrar
    });
    &REGISTRAR
}

impl Registrar {
    fn submit(&self, job: Job) {
        if !self.running {
            return;
        }
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).push_back(job);
        self.ready.notify_one();
    }

    fn serve(&self) {
        loop {
            let job = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(job) = queue.pop_front() {
                        break job;
                    }
                    queue = self.ready.wait(queue).unwrap_or_else(|p| p.into_inner());
                }
            };
            // A panic must not end the thread (later jobs would wait forever); the job's
            // window then stays Pending and its budget share is given back by unwinding.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Tests that reason about the process-wide budget run one at a time.
    static BUDGET: Mutex<()> = Mutex::new(());

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
        for _ in 0..2000 {
            if cache.counts().1 == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("registrations still pending after 2 s");
    }

    #[test]
    fn first_read_counts_and_tiles_the_task_with_bounce_segments() {
        let (_tmp, f) = file_of(3 * WINDOW + 5);
        let cache = PageCache::new();
        let fd = f.as_raw_fd();
        // One task spanning two windows: contiguous bounce pieces merge into one.
        let s = cache.plan(fd, 1, WINDOW - 10, 20, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', WINDOW - 10, 20)]);
        // Several tasks of the same call count once: nothing becomes pending.
        let s = cache.plan(fd, 1, WINDOW, 100, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', WINDOW, 100)]);
        assert_eq!(cache.counts(), (0, 0));
    }

    #[test]
    fn ranges_past_the_end_of_file_stay_on_pread() {
        let (_tmp, f) = file_of(WINDOW + 5);
        let cache = PageCache::new();
        let s = cache.plan(f.as_raw_fd(), 1, WINDOW, 4096, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', WINDOW, 4096)]);
        let s = cache.plan(f.as_raw_fd(), 2, 2 * WINDOW, 10, 0, u64::MAX);
        assert_eq!(shape(&s), vec![('B', 2 * WINDOW, 10)]);
    }

    #[test]
    fn second_call_queues_registration_within_the_budget_only() {
        let _serial = BUDGET.lock().unwrap_or_else(|p| p.into_inner());
        let (_tmp, f) = file_of(2 * WINDOW);
        let fd = f.as_raw_fd();
        let cache = PageCache::new();
        cache.plan(fd, 10, 0, 2 * WINDOW as usize, 0, WINDOW);
        let before = usage();
        // Budget for one window: the first becomes pending, the second stays on bounce.
        let s = cache.plan(fd, 11, 0, 2 * WINDOW as usize, 0, WINDOW + PINNED_BYTES.load(Ordering::Relaxed));
        assert_eq!(shape(&s), vec![('B', 0, 2 * WINDOW as usize)]);
        wait_until_settled(&cache);
        let after = usage();
        // Without a GPU the registration is refused and the window stays on bounce; with one it
        // is registered. Either way exactly one window was tried.
        assert_eq!((after.registrations + after.refusals) - (before.registrations + before.refusals), 1);
        let (registered, pending) = cache.counts();
        assert_eq!(pending, 0);
        assert!(registered <= 1);
    }

    #[test]
    fn a_changed_file_drops_its_windows() {
        let (tmp, f) = file_of(WINDOW);
        let fd = f.as_raw_fd();
        let cache = PageCache::new();
        cache.plan(fd, 20, 0, 4096, 0, 0);
        cache.plan(fd, 21, 0, 4096, 0, 0); // budget 0: stays Seen with 2 reads
        assert_eq!(cache.lock().windows.len(), 1);
        let generation = cache.lock().generation;
        tmp.as_file().set_len(WINDOW + 1).unwrap();
        cache.plan(fd, 22, 0, 4096, 0, 0);
        let state = cache.lock();
        assert_eq!(state.generation, generation + 1);
        assert!(matches!(state.windows.get(&0), Some(WindowState::Seen { reads: 1, .. })));
    }

    #[test]
    fn budget_reservations_are_exact() {
        let _serial = BUDGET.lock().unwrap_or_else(|p| p.into_inner());
        let base = PINNED_BYTES.load(Ordering::Relaxed);
        let a = Reservation::take(100, base + 150).unwrap();
        assert!(Reservation::take(100, base + 150).is_none());
        drop(a);
        assert!(Reservation::take(100, base + 150).is_some());
    }

    #[test]
    fn default_budget_is_bounded() {
        let d = default_pin_max();
        assert!(d > 0 && d <= 16 << 30, "{d}");
    }
}
