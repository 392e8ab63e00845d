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
//!
//! Files: `plan` cuts tasks into segments and finds hot windows, `identity` decides when windows
//! stop being valid, `budget` keeps the pin limit, `registrar` registers on its own thread; this
//! file holds the cache a handle keeps (`PageCache`), its windows and their registration outcomes.

mod budget;
mod identity;
mod plan;
mod registrar;

#[allow(unreachable_pub)] // the public surface (src/lib.rs, src/api/) re-exports these through this path
pub use budget::{Usage, usage};
pub(crate) use budget::default_pin_max;
pub(crate) use identity::{QueuedWrite, drop_windows_of};
#[allow(unreachable_pub)] // the public surface (src/lib.rs, src/api/) re-exports these through this path
pub use plan::WINDOW;
pub(crate) use plan::Segment;
pub(crate) use registrar::DeviceReadInFlight;

use crate::sys::cuda::{self, RegisteredMapping};
use budget::Reservation;
use identity::Identity;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

/// A registered window.
pub(crate) struct Mapping {
    /// The registration and its share of the pin budget, released together, the mapping first.
    held: ManuallyDrop<(RegisteredMapping, Reservation)>,
    file_offset: u64,
}

impl Mapping {
    fn new(registered: RegisteredMapping, file_offset: u64, reservation: Reservation) -> Mapping {
        Mapping { held: ManuallyDrop::new((registered, reservation)), file_offset }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: taken once, here.
        let (registered, reservation) = unsafe { ManuallyDrop::take(&mut self.held) };
        if registrar::exiting() {
            // Once process exit has begun, CUDA may be tearing down: the pages are left to the OS.
            std::mem::forget(registered);
            return;
        }
        // Unregistering may wait for the device: not on a thread a caller's stream waits for (a
        // stream-ordered task that held the last reference of a window the cache dropped
        // meanwhile), where that wait could be for the task's own stream.
        cuda::outside_stream_ordered_task(move || {
            if !registered.release() {
                // Leaked still pinned: its share of the budget stays taken, and counted.
                std::mem::forget(reservation);
            }
        });
    }
}

#[cfg(test)]
impl Mapping {
    /// Frees a test window (never registered: `RegisteredMapping::unregistered_for_tests`) once
    /// nothing else holds it, skipping `Drop`, which would try to unregister it.
    pub(crate) fn release_for_tests(mapping: Arc<Mapping>) {
        let Ok(mut mapping) = Arc::try_unwrap(mapping) else { panic!("a test window is still held") };
        // SAFETY: taken once; the emptied Mapping is forgotten right after.
        let (registered, _reservation) = unsafe { ManuallyDrop::take(&mut mapping.held) };
        std::mem::forget(mapping);
        registered.release_for_tests();
    }

    /// The window's length in bytes.
    pub(crate) fn len_for_tests(&self) -> usize {
        self.held.0.len()
    }
}

impl Mapping {
    /// The host address of file byte `file_offset`, which lies inside this window.
    pub(crate) fn address_of(&self, file_offset: u64) -> *const u8 {
        let registered = &self.held.0;
        debug_assert!(file_offset >= self.file_offset && file_offset - self.file_offset < registered.len() as u64);
        registered.as_ptr().wrapping_add((file_offset - self.file_offset) as usize)
    }
}

/// Registered windows held for copies made later than they were planned (a stream-ordered
/// read's queued copies, `io::relay`), until the stream has passed them. Let go on any thread: a
/// window the cache dropped meanwhile, whose last holder this is, is unregistered on a thread of
/// its own, since unregistering may wait for the device, and so for the stream of the copies.
pub(crate) struct KeptWindows(Vec<Arc<Mapping>>);

impl KeptWindows {
    pub(crate) fn new(mappings: Vec<Arc<Mapping>>) -> KeptWindows {
        KeptWindows(mappings)
    }
}

impl Drop for KeptWindows {
    fn drop(&mut self) {
        // `into_inner` gives the mapping to exactly one of its last holders, so none is
        // unregistered here even when the cache lets go of it at the same time.
        let last: Vec<Mapping> = self.0.drain(..).filter_map(Arc::into_inner).collect();
        if !last.is_empty() {
            cuda::on_release_thread(move || drop(last));
        }
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
    /// Bumped whenever the file is known to have changed (a write through a handle of it, or a
    /// new identity): what a copy planned earlier asks about (`unchanged_since`). A drop of the
    /// windows that is no change (`drop_windows_of`) leaves it.
    changes: u64,
    windows: HashMap<u64, WindowState>,
}

/// The registered windows of one open file.
pub(crate) struct PageCache {
    state: Mutex<State>,
    /// The file's (device, inode) when made by `for_descriptor`: every cache of the same file in
    /// the process drops its windows when any handle of it writes (`file_written`).
    file: Option<(u64, u64)>,
}

impl PageCache {
    /// An empty cache for a file (nothing is registered until windows are read twice over).
    #[cfg(test)]
    pub(crate) fn new() -> Arc<PageCache> {
        PageCache::of_file(None)
    }

    /// An empty cache, known to the other caches of `file` (device, inode) if given.
    fn of_file(file: Option<(u64, u64)>) -> Arc<PageCache> {
        Arc::new(PageCache { state: Mutex::new(State::default()), file })
    }

    /// Windows this cache tracks now (read, pending, registered or refused).
    #[cfg(test)]
    pub(crate) fn window_count(&self) -> usize {
        self.lock().windows.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

impl Drop for PageCache {
    fn drop(&mut self) {
        // The last handle of a file may go on a thread that streams wait for (a stream-ordered
        // call's waiter or relay worker held the file): its windows are let go as dropped
        // windows are (`release_windows`), not unregistered there.
        let windows = std::mem::take(&mut self.state.get_mut().unwrap_or_else(|p| p.into_inner()).windows);
        identity::release_windows(windows);
    }
}

#[cfg(test)]
mod file_written_tests;
