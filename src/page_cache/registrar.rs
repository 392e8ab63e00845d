//! The background thread that registers windows, one at a time (the driver serialises
//! registrations anyway), so that reads never wait for a registration.
//!
//! Registering stalls every host-to-device copy of the process while it runs (measured 0.7 GB/s
//! instead of 52, whatever the piece size: tools/probes/probe-register-interference.py), so each job
//! first waits, up to `MAX_DEFERRAL`, for a moment when no device read is in flight. At process
//! exit no registration is started any more and the exit waits for the one running, so that none
//! races CUDA's own teardown.

use super::{PageCache, budget::Reservation};
use crate::sys::cuda::{self, FileMapping, RegisteredMapping, ScopedContext};
use once_cell::sync::Lazy;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a registration waits for a gap between device reads; a process that never pauses
/// still gets its windows registered after this delay.
const MAX_DEFERRAL: Duration = Duration::from_millis(100);

/// Device reads running now in this process (tasks copying into device memory).
static DEVICE_READS_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// Set by the exit handler: no registration starts after it.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Set when the driver answered that it cannot register file pages (`CUDA_ERROR_NOT_SUPPORTED`):
/// no window of any file is tried again in this process.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// True once the driver said it cannot register file pages.
pub(super) fn unsupported() -> bool {
    UNSUPPORTED.load(Ordering::Relaxed)
}

/// Held while a registration runs; the exit handler takes it and never gives it back.
static REGISTERING: Mutex<()> = Mutex::new(());

/// The process that started the registrar (a forked child inherits the exit handler, and the
/// lock in whatever state it was, but not the thread).
static REGISTRAR_PID: AtomicU64 = AtomicU64::new(0);

/// How long exit waits for a registration in progress (it may be reading pages from a slow file
/// system).
const EXIT_WAIT: Duration = Duration::from_millis(300);

/// True once process exit has begun (registrations stop; mappings are left to the OS).
pub(super) fn exiting() -> bool {
    STOPPING.load(Ordering::Acquire)
}

/// Marks a device read task as running until dropped.
pub(crate) struct DeviceReadInFlight(());

impl DeviceReadInFlight {
    /// Counts the calling task in until the guard drops.
    pub(crate) fn enter() -> DeviceReadInFlight {
        DEVICE_READS_IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        DeviceReadInFlight(())
    }
}

impl Drop for DeviceReadInFlight {
    fn drop(&mut self) {
        DEVICE_READS_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits until no device read runs, `MAX_DEFERRAL` has passed, or the process exits.
fn wait_for_a_gap_between_reads() {
    let deadline = Instant::now() + MAX_DEFERRAL;
    while DEVICE_READS_IN_FLIGHT.load(Ordering::Acquire) > 0 && Instant::now() < deadline && !STOPPING.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// A window to register: its mapping (made by the reader) and its share of the limit.
pub(super) struct Job {
    pub(super) cache: Weak<PageCache>,
    pub(super) index: u64,
    pub(super) start: u64,
    pub(super) generation: u64,
    pub(super) ordinal: i32,
    pub(super) mapping: FileMapping,
    pub(super) reservation: Reservation,
}

impl Job {
    fn run(self) {
        let Job { cache, index, start, generation, ordinal, mapping, reservation } = self;
        let wanted = || cache.upgrade().filter(|c| c.still_pending(index, generation));
        // Checked before the wait (a closed or changed file gives its mapping and budget back at
        // once) and after it (so that it costs no registration).
        if wanted().is_none() {
            return;
        }
        wait_for_a_gap_between_reads();
        let Some(cache) = wanted() else { return };
        let result = register(mapping, ordinal);
        cache.install(index, start, generation, result, reservation);
    }

    /// Marks the window refused without registering (the job cannot run).
    fn abandon(self) {
        if let Some(cache) = self.cache.upgrade() {
            cache.install(self.index, self.start, self.generation, Err(None), self.reservation);
        }
    }
}

/// Maps and pins the job's window, in the device's primary context when the application has
/// activated it (it is retained for the life of the process and never destroyed under us;
/// PORTABLE makes the pages usable from every context). A process that only uses contexts of its
/// own gets no registrations rather than a primary context it did not ask for.
fn register(mapping: FileMapping, ordinal: i32) -> Result<RegisteredMapping, Option<cuda::CudaFailure>> {
    // Exit may have begun: no CUDA call then, not even the context's look-up.
    let _registering = REGISTERING.lock().unwrap_or_else(|p| p.into_inner());
    if STOPPING.load(Ordering::Acquire) {
        return Err(None);
    }
    let ctx = cuda::active_primary_context(ordinal).map_err(Some)?.ok_or(None)?;
    let _scope = ScopedContext::push(ctx).map_err(Some)?;
    RegisteredMapping::register(mapping).map_err(|e| {
        if e.code() == Some(cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED as u32) {
            UNSUPPORTED.store(true, Ordering::Relaxed);
        }
        Some(e)
    })
}

/// The job queue and its thread.
pub(super) struct Registrar {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// False when the thread could not be started.
    running: bool,
}

/// The process's registrar, started on first use.
pub(super) fn registrar() -> &'static Registrar {
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
        REGISTRAR_PID.store(u64::from(std::process::id()), Ordering::Release);
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(stop_at_exit) };
        registrar
    });
    &REGISTRAR
}

extern "C" fn stop_at_exit() {
    if REGISTRAR_PID.load(Ordering::Acquire) != u64::from(std::process::id()) {
        return; // a forked child: no registrar thread here, and the lock may never be released
    }
    STOPPING.store(true, Ordering::Release);
    // Wait (bounded) for a registration in progress and keep the lock: none starts after this.
    let deadline = Instant::now() + EXIT_WAIT;
    while Instant::now() < deadline {
        match REGISTERING.try_lock() {
            Ok(guard) => return std::mem::forget(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => return std::mem::forget(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

impl Registrar {
    /// Queues a job; without a thread (none started, or a forked child, which has none), the
    /// window is marked refused at once.
    pub(super) fn submit(&self, job: Job) {
        let forked = REGISTRAR_PID.load(Ordering::Acquire) != u64::from(std::process::id());
        if !self.running || forked || STOPPING.load(Ordering::Acquire) {
            job.abandon();
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
            // A panic must not end the thread (later jobs would wait forever). The window then
            // stays pending; unwinding gives its budget share back.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_in_a_forked_child_does_not_wait_for_the_parents_registration() {
        // As in a child forked while the parent's registrar held the lock: the holder never
        // releases it in the child. The exit handler must return at once and change nothing.
        // The registrar is started first, so that its start cannot store its pid mid-test.
        let _ = registrar();
        let registering = REGISTERING.lock().unwrap_or_else(|p| p.into_inner());
        let parent = REGISTRAR_PID.swap(u64::from(std::process::id()) + 1, Ordering::AcqRel);
        let started = Instant::now();
        stop_at_exit();
        let took = started.elapsed();
        REGISTRAR_PID.store(parent, Ordering::Release);
        drop(registering);
        assert!(!exiting(), "a child's exit must not stop the registrar");
        assert!(took < EXIT_WAIT, "the handler waited {took:?} for a lock nobody will release");
    }
}
