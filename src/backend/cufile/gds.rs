//! cuFile in this process: whether it can be used at all (the process-level half of KvikIO's AUTO
//! probe), opening its driver once and only after CUDA initialised (cuFile 1.16+ spins forever
//! without libcuda), and its own statistics as deltas since our start or reset. The per-file half
//! of the probe lives in `cufile_file`.
//!
//! The process half can start early, on a background thread (`begin_in_background`): a handle
//! opened by a program that uses CUDA, or `gdsroute_begin_device_setup`, starts it, and the first
//! device read joins it through `PROCESS` (docs/performance.md, "The first read of a fresh
//! process"). The exit handler waits for such a start, and a child forked during one never waits
//! for it.
//!
//! One job, hence one file: cuFile's process state. The verdict, the driver open (also
//! in the background), the call gate and shutdown all read and write `PROCESS` and `GATE`, and
//! their exit-order rules only hold together.

use crate::sys::cuda;
use crate::sys::cufile::{CufileLibrary, PerGpuSnapshot, StatsSupport};
use crate::stats::CufileStatsState;
use once_cell::sync::OnceCell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, Once, RwLock, RwLockReadGuard, TryLockError};
use std::time::{Duration, Instant};
pub(crate) use crate::abi::FallbackReason;


/// A verdict with its human-readable reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unusable {
    /// Machine-readable cause.
    pub reason: FallbackReason,
    /// What happened, with codes and hints.
    pub message: String,
}

impl Unusable {
    pub(crate) fn new(reason: FallbackReason, message: impl Into<String>) -> Unusable {
        Unusable { reason, message: message.into() }
    }

    /// The verdict under compat mode ON, for a handle or the process: decided without asking cuFile.
    pub(crate) fn compat_on() -> Unusable {
        Unusable::new(FallbackReason::CompatOn, "compat mode is ON: cuFile is never called")
    }
}

/// cuFile, loaded and with its driver open.
pub struct Gds {
    /// The loaded library (leaked: never unloaded).
    pub library: &'static CufileLibrary,
    stats_baseline: Mutex<Option<PerGpuSnapshot>>,
    stats_enabled: bool,
    /// Whether the driver reports nvidia-fs, asked once (`gds_available`).
    gds_available: OnceCell<Option<bool>>,
}

static PROCESS: OnceCell<Result<Gds, Unusable>> = OnceCell::new();

/// The process that began deciding `PROCESS` (0 before): a forked child must not call cuFile,
/// nor wait for an open that ran on a thread it does not have.
static OPENER: AtomicU32 = AtomicU32::new(0);

/// True in a child forked after this process (or an ancestor) began opening cuFile.
fn forked_from_opener() -> bool {
    let opener = OPENER.load(Ordering::SeqCst);
    opener != 0 && opener != std::process::id()
}

/// libcufile, loaded once (leaked: never unloaded), or why it cannot be.
static LIBRARY: OnceCell<Result<&'static CufileLibrary, Unusable>> = OnceCell::new();

/// The first process-level check: libcuda loads, `cuInit` works and there is a device.
fn cuda_check() -> Result<(), Unusable> {
    let driver = cuda::cuda().map_err(|e| Unusable::new(FallbackReason::CudaUnavailable, e.to_string()))?;
    if driver.device_count() < 1 {
        return Err(Unusable::new(FallbackReason::CudaUnavailable, "no CUDA device"));
    }
    Ok(())
}

/// The second: libcufile loads with the symbols reads need.
fn library() -> Result<&'static CufileLibrary, Unusable> {
    LIBRARY
        .get_or_init(|| {
            crate::trace::event("cufile.library_load.start", 0);
            let loaded = CufileLibrary::load(None).map(CufileLibrary::leak);
            crate::trace::event("cufile.library_load.end", 0);
            loaded.map_err(|e| Unusable::new(FallbackReason::LibraryUnavailable, e.to_string()))
        })
        .clone()
}

/// The process-level checks in the README's order, each only when those before it passed, so
/// that the reason reported is the most fundamental missing piece and its advice can work: CUDA,
/// then libcufile, then (AUTO only) the environment heuristics, then the driver open.
fn in_order<T>(
    auto: bool,
    cuda: impl FnOnce() -> Result<(), Unusable>,
    library: impl FnOnce() -> Result<(), Unusable>,
    environment: impl FnOnce() -> Result<(), Unusable>,
    open: impl FnOnce() -> Result<T, Unusable>,
) -> Result<T, Unusable> {
    cuda()?;
    library()?;
    if auto {
        environment()?;
    }
    open()
}

/// cuFile for a handle of `compat_mode` (OFF or AUTO): the process-level verdict, checks in the
/// README's order (`in_order`).
pub(crate) fn process_for(compat_mode: crate::settings::CompatMode) -> Result<&'static Gds, Unusable> {
    in_order(
        compat_mode == crate::settings::CompatMode::Auto,
        cuda_check,
        || library().map(|_| ()),
        auto_environment_check,
        process,
    )
}

fn open_process() -> Result<Gds, Unusable> {
    let _ = OPENER.compare_exchange(0, std::process::id(), Ordering::SeqCst, Ordering::SeqCst);
    crate::trace::event("cufile.process.start", 0);
    cuda_check()?;
    crate::trace::event("cufile.cuda_checked", 0);
    let library = library()?;
    // cuFile's driver open needs a CUDA context (cuDF's workaround for nvbug 4562392).
    let context = cuda::primary_context(0).map_err(|e| Unusable::new(FallbackReason::CudaUnavailable, e.to_string()))?;
    let _current = cuda::ScopedContext::push(context).map_err(|e| Unusable::new(FallbackReason::CudaUnavailable, e.to_string()))?;
    crate::trace::event("cufile.context", 0);
    // The live value even while another variable is bad (diagnose opens the driver then too); a
    // bad GDSROUTE_CUFILE_STATS itself leaves the default, on.
    let stats_enabled = crate::settings::live().cufile_stats();
    let stats = library.stats().filter(|_| stats_enabled);
    if let Some(stats) = &stats {
        // Level 3 (per-GPU counters) must be set before the driver opens.
        let _ = stats.set_level(3);
    }
    if GATE.is_closed() {
        // Shut down (or exiting) before the driver opened: never open it now.
        return Err(shut_down());
    }
    // The caller's driver settings, staged until now: cuFile reads them when it opens.
    super::driver_settings::apply_before_open(library);
    crate::trace::event("cufile.driver_open.start", 0);
    let opened = library.driver_open();
    crate::trace::event("cufile.driver_open.end", 0);
    opened.map_err(|e| {
        crate::log::log(crate::log::Level::Warn, || format!("cuFileDriverOpen failed: {e}"));
        Unusable::new(FallbackReason::DriverOpenFailed, e.to_string())
    })?;
    if GATE.is_closed() {
        // gdsroute_shutdown ran while the driver opened (it found no driver to close): close it
        // here, so that shutdown means no cuFile afterwards. A shutdown that begins after this
        // check finds the gate closing for every call and the exit handler closes the driver.
        let _ = library.driver_close();
        return Err(shut_down());
    }
    crate::log::log(crate::log::Level::Info, || {
        let properties = library.properties().map_or_else(|e| format!("properties unavailable: {e}"), |p| format!("{p:?}"));
        format!("cuFile {} ({}) driver opened; {properties}", library.version_string(), library.path())
    });
    for applied in super::driver_settings::applied_in_words() {
        crate::log::log(crate::log::Level::Info, || format!("cuFile driver setting: {applied}"));
    }
    let baseline = stats.and_then(|s| s.start().ok().and_then(|_| s.read_per_gpu().ok()));
    // SAFETY: registering a plain extern "C" function with no captured state.
    unsafe { libc::atexit(close_at_exit) };
    crate::trace::event("cufile.process.end", 0);
    Ok(Gds { library, stats_baseline: Mutex::new(baseline), stats_enabled, gds_available: OnceCell::new() })
}

/// Who may call cuFile: every call after the driver opened holds the gate shared; shutdown
/// closes it (no call starts once closing began, calls in flight drain) and then holds it
/// exclusively while the driver closes.
pub(crate) struct CallGate {
    closing: AtomicBool,
    shut: RwLock<bool>,
}

/// Permission to call cuFile, held for the duration of one call.
pub(crate) struct CufileCall(#[allow(dead_code)] RwLockReadGuard<'static, bool>);

impl CallGate {
    const fn new() -> CallGate {
        CallGate { closing: AtomicBool::new(false), shut: RwLock::new(false) }
    }

    fn enter(&'static self) -> Option<CufileCall> {
        if self.closing.load(Ordering::SeqCst) {
            return None;
        }
        let guard = self.shut.read().unwrap_or_else(|p| p.into_inner());
        (!*guard && !self.closing.load(Ordering::SeqCst)).then_some(CufileCall(guard))
    }

    /// Refuses every call from now on, without waiting or closing anything.
    fn begin_closing(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    fn is_closed(&self) -> bool {
        self.closing.load(Ordering::SeqCst) || *self.shut.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the gate to new calls, waits up to `drain` for the calls in flight, then, once
    /// only, runs `close` with the gate held. False when it was closed before, the calls did not
    /// drain in time (`close` is not run then, and a later call, the exit handler's, tries again),
    /// or `close` returned false.
    fn close(&self, drain: Duration, close: impl FnOnce() -> bool) -> bool {
        self.begin_closing();
        let deadline = Instant::now() + drain;
        let mut shut = loop {
            match self.shut.try_write() {
                Ok(guard) => break guard,
                Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                Err(TryLockError::WouldBlock) => return false,
            }
        };
        if *shut {
            return false;
        }
        *shut = true;
        close()
    }
}

static GATE: CallGate = CallGate::new();

/// How long shutdown waits for cuFile calls in flight (a 4 MiB cuFileRead takes milliseconds)
/// before it gives up and leaves the driver open.
const DRAIN_WAIT: Duration = Duration::from_millis(300);

/// Measured on the H200 (cuFile 1.15.1, statistics level 3, docs/exit.md): cuFileDriverOpen starts
/// five threads, one of which copies the statistics into their shared segment. Leaving the driver
/// open at exit lets cuFile's own static destructors free its table under that thread (10 of 10
/// processes crashed); cuFileStatsStop unmaps the segment while the thread still writes into it
/// (crashes during the stop: 7 of 40 with stop + close, 1 of 40 with stop alone); cuFileDriverClose
/// alone joins the threads before it frees anything (0 crashes). So this handler, registered
/// after the driver opened and therefore run before cuFile's destructors, only closes the driver,
/// after the cuFile calls in flight (a read still running on the pool) drained.
extern "C" fn close_at_exit() {
    let _ = std::panic::catch_unwind(shutdown);
}

/// Closes the driver reference gdsroute opened, which ends cuFile's threads (its statistics
/// thread included); cuFileStatsStop is never called (above). No cuFile call starts once this
/// began; calls in flight get [`DRAIN_WAIT`] to finish, else the driver is left open. Afterwards
/// cuFile is never called: AUTO handles use the POSIX backend, OFF reads fail with
/// `CufileUnavailable`; the driver is never opened afterwards either (a shutdown before cuFile's
/// first use, or during its driver open, keeps it closed). Does nothing in a forked child beyond
/// that. Returns whether the driver was closed: false also when an open on another thread had
/// passed its last check but not finished (no cuFile call can start then; the exit handler, or
/// a second shutdown, closes that driver).
pub fn shutdown() -> bool {
    // The exit report reads cuFile's counters while its calls are still allowed.
    if let Some(hook) = BEFORE_CLOSE.get() {
        hook();
    }
    // First, so that an open in progress on another thread (PROCESS not set yet) sees it.
    GATE.begin_closing();
    if forked_from_opener() {
        return false;
    }
    // A start in the background sees the gate closing and closes what it opened itself.
    BACKGROUND.wait_while_running(START_WAIT);
    let Some(Ok(gds)) = PROCESS.get() else { return false };
    GATE.close(DRAIN_WAIT, || gds.library.driver_close().is_ok())
}

/// Run at the start of `shutdown` (the exit report, armed with `GDSROUTE_REPORT`).
static BEFORE_CLOSE: OnceCell<fn()> = OnceCell::new();

/// Has `hook` run at the start of every `shutdown`, before cuFile's calls stop: the exit report,
/// which reads cuFile's counters (an upper layer's, hence a hook). Set once; later calls do
/// nothing.
pub(crate) fn before_driver_close(hook: fn()) {
    let _ = BEFORE_CLOSE.set(hook);
}

/// True once cuFile was shut down (or its shutdown began), or in a process other than the one
/// that opened it.
pub(crate) fn is_shut_down() -> bool {
    forked_from_opener() || GATE.is_closed()
}

impl CufileCall {
    /// `None` once cuFile's shutdown began or in a forked child.
    pub(crate) fn enter() -> Option<CufileCall> {
        if forked_from_opener() {
            return None;
        }
        GATE.enter()
    }
}

/// How long process exit (and `shutdown`) waits for a start in the background to finish: a
/// driver open took 0.4-0.7 s on the H200 (docs/performance.md); past this the process exits
/// anyway.
const START_WAIT: Duration = Duration::from_secs(5);

/// The start in the background: at most one per process, begun by [`begin_in_background`].
struct BackgroundStart {
    /// The process whose thread runs it (0: none runs or ran).
    running_in: Mutex<u32>,
    finished: Condvar,
}

static BACKGROUND: BackgroundStart = BackgroundStart { running_in: Mutex::new(0), finished: Condvar::new() };

impl BackgroundStart {
    /// Marks a start as running in this process; false if one already is.
    fn claim(&self) -> bool {
        let mut running = self.running_in.lock().unwrap_or_else(|p| p.into_inner());
        if *running == std::process::id() {
            return false;
        }
        *running = std::process::id();
        true
    }

    fn finish(&self) {
        *self.running_in.lock().unwrap_or_else(|p| p.into_inner()) = 0;
        self.finished.notify_all();
    }

    /// Waits up to `limit` for a start running in this process (one copied into a forked child
    /// has no thread there and is not waited for).
    fn wait_while_running(&self, limit: Duration) {
        let running = self.running_in.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.finished.wait_timeout_while(running, limit, |pid| *pid == std::process::id());
    }
}

/// What the calling thread may have to load before a start goes to the background.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Preload {
    /// The program already uses CUDA: libcuda is loaded.
    Cufile,
    /// The program may not have loaded libcuda yet (`gdsroute_begin_device_setup`).
    CudaAndCufile,
}

/// Begins, on a background thread, the process-level verdict for handles of `compat_mode`: CUDA's
/// initialisation and, unless the mode is ON, libcufile's checks and the driver open. Returns at
/// once; does nothing once the verdict is known, while a start runs, after shutdown or in a forked
/// child. The first device read (or `diagnose`) that needs the verdict waits for it; the verdict
/// and its reason are the ones that read would have reached itself.
///
/// The libraries are loaded on the calling thread first, and the exit handler that waits for the
/// start is registered after them: exit runs handlers in the reverse order of registration, so it
/// waits before the libraries' own destructors run, never while they run under the start.
pub(crate) fn begin_in_background(compat_mode: crate::settings::CompatMode, preload: Preload) {
    if PROCESS.get().is_some() || is_shut_down() || crate::sys::startup::forked_since_load() {
        return;
    }
    if preload == Preload::CudaAndCufile && !cuda::preload() {
        return; // no libcuda: the first device read reports it
    }
    let cufile_wanted = compat_mode != crate::settings::CompatMode::On;
    if compat_mode == crate::settings::CompatMode::Auto && auto_environment_check().is_err() {
        return; // AUTO's heuristics alone rule cuFile out: nothing to start, nothing to load
    }
    if cufile_wanted && library().is_err() {
        return; // the first device read reports it
    }
    static EXIT_HANDLER: Once = Once::new();
    // SAFETY: registering a plain extern "C" function with no captured state.
    EXIT_HANDLER.call_once(|| unsafe {
        libc::atexit(finish_start_at_exit);
    });
    if !BACKGROUND.claim() {
        return;
    }
    let started = std::thread::Builder::new().name("gdsroute-start".into()).spawn(move || {
        crate::trace::event("start.background", 0);
        let _ = std::panic::catch_unwind(|| {
            if cufile_wanted {
                let _ = process_for(compat_mode);
            } else {
                let _ = cuda_check();
            }
        });
        crate::trace::event("start.background_end", 0);
        BACKGROUND.finish();
    });
    if started.is_err() {
        BACKGROUND.finish(); // the first device read does it all itself
    }
}

/// Exit handler: no new cuFile call starts, and a start in the background gets [`START_WAIT`] to
/// finish (it closes a driver it opened once it sees the gate closing), so that no thread of ours
/// is inside CUDA or cuFile while their destructors run.
extern "C" fn finish_start_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let running = *BACKGROUND.running_in.lock().unwrap_or_else(|p| p.into_inner());
        if running == std::process::id() {
            GATE.begin_closing();
            BACKGROUND.wait_while_running(START_WAIT);
        }
    });
}

/// cuFile for this process, probed and opened on first use; the verdict is cached.
pub fn process() -> Result<&'static Gds, Unusable> {
    // Checked before the OnceCell: in a child forked during an open in the background it would
    // wait for ever.
    if is_shut_down() {
        return Err(shut_down());
    }
    PROCESS.get_or_init(open_process).as_ref().map_err(Clone::clone)
}

/// Why cuFile cannot be used in this process, when that is known already (`None`: not decided
/// yet, or usable): the process verdict, or one of its first two checks (CUDA, libcufile), which
/// a device read runs before the verdict and does not record in it. Loads nothing.
pub(crate) fn decided_unusable() -> Option<Unusable> {
    if let Some(Err(unusable)) = PROCESS.get() {
        return Some(unusable.clone());
    }
    if let Some(reason) = cuda::known_unavailable() {
        return Some(Unusable::new(FallbackReason::CudaUnavailable, reason));
    }
    LIBRARY.get().and_then(|library| library.as_ref().err().cloned())
}

fn shut_down() -> Unusable {
    Unusable::new(FallbackReason::DriverOpenFailed, "cuFile was shut down (gdsroute_shutdown, process exit, or this is a forked child)")
}

/// KvikIO's environment heuristics for AUTO: `/run/udev` must be a directory and the kernel not
/// WSL's. OFF skips them and lets cuFile itself fail. Checked after CUDA and libcufile
/// (`process_for`), so "set KVIKIO_COMPAT_MODE=off to try anyway" is only advised where OFF can
/// try.
pub(crate) fn auto_environment_check() -> Result<(), Unusable> {
    if !Path::new("/run/udev").is_dir() {
        return Err(Unusable::new(
            FallbackReason::NoUdev,
            "/run/udev is not a directory: without a udev database cuFileHandleRegister fails (5027); \
             mount /run/udev into the container or set KVIKIO_COMPAT_MODE=off to try anyway",
        ));
    }
    let mut uts = std::mem::MaybeUninit::<libc::utsname>::uninit();
    // SAFETY: uname fills the struct on success; it is read only then.
    if unsafe { libc::uname(uts.as_mut_ptr()) } == 0 {
        // SAFETY: uname returned 0; release is NUL-terminated.
        let release = unsafe { std::ffi::CStr::from_ptr(uts.assume_init_ref().release.as_ptr()) };
        if release.to_string_lossy().contains("icrosoft") {
            return Err(Unusable::new(FallbackReason::Wsl, "running under WSL, where cuFile is not supported"));
        }
    }
    Ok(())
}

impl Gds {
    /// Whether the open driver reports nvidia-fs (`None`: its properties could not be read),
    /// asked of cuFile once: its properties do not change while it is open (driver settings
    /// are applied before it opens), and every file's registration needs the answer, which was a
    /// `cuFileDriverGetProperties` per first device read of a file.
    pub(crate) fn gds_available(&self) -> Option<bool> {
        *self.gds_available.get_or_init(|| {
            // Inside the gate: after a shutdown cuFile is not called (the call could open its
            // driver again); unknown then, for good, which no registration needs any more.
            let _call = CufileCall::enter()?;
            self.library.properties().ok().map(|p| p.is_gds_available())
        })
    }

    fn totals_now(&self) -> Option<PerGpuSnapshot> {
        let _call = CufileCall::enter()?;
        self.library.stats().filter(|_| self.stats_enabled).and_then(|s| s.read_per_gpu().ok())
    }

    /// cuFile's per-GPU counters as deltas since start or reset, each GPU by its UUID, with the
    /// `CufileStatsState` they have (`Active` only with the deltas).
    pub fn per_gpu_deltas(&self) -> (CufileStatsState, Option<PerGpuSnapshot>) {
        if !self.stats_enabled {
            return (CufileStatsState::Disabled, None);
        }
        let baseline = self.stats_baseline.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match (baseline, self.totals_now()) {
            (Some(baseline), Some(now)) => (CufileStatsState::Active, Some(now.delta_since(&baseline))),
            _ => (CufileStatsState::ApiMissing, None),
        }
    }

    /// Makes the next deltas start from now.
    pub fn reset_counters(&self) {
        if let Some(now) = self.totals_now() {
            *self.stats_baseline.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        }
    }

    /// Whether the library offers statistics, for the diagnostic.
    pub fn stats_support(&self) -> StatsSupport {
        self.library.stats_support()
    }
}

/// cuFile's process state if its driver was opened; `None` before the first cuFile read or
/// when it was found unusable.
pub(crate) fn opened() -> Option<&'static Gds> {
    match PROCESS.get() {
        Some(Ok(gds)) => Some(gds),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn leaked_gate() -> &'static CallGate {
        Box::leak(Box::new(CallGate::new()))
    }

    #[test]
    fn close_waits_for_the_call_in_flight_and_refuses_new_ones() {
        let gate = leaked_gate();
        let call = gate.enter().expect("an open gate lets calls in");
        let (started, closing) = mpsc::channel();
        let closer = std::thread::spawn(move || {
            started.send(()).unwrap();
            gate.close(Duration::from_secs(10), || true)
        });
        closing.recv().unwrap();
        while !gate.closing.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert!(gate.enter().is_none(), "no call starts once closing began");
        assert!(gate.is_closed());
        std::thread::sleep(Duration::from_millis(20));
        assert!(!closer.is_finished(), "close must wait for the call in flight");
        drop(call);
        assert!(closer.join().unwrap(), "close runs once the call drained");
        assert!(gate.enter().is_none());
        assert!(!gate.close(Duration::ZERO, || panic!("a second close must not close again")));
    }

    #[test]
    fn a_call_that_does_not_drain_leaves_the_driver_open() {
        let gate = leaked_gate();
        let stuck = gate.enter().unwrap();
        let t0 = Instant::now();
        assert!(!gate.close(Duration::from_millis(30), || panic!("must not close under a running call")));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert!(gate.enter().is_none(), "still closed to new calls");
        drop(stuck);
        let mut closed = false;
        assert!(gate.close(Duration::from_millis(30), || {
            closed = true;
            true
        }));
        assert!(closed, "a later close (the exit handler's) closes once the call drained");
    }

    fn fails(reason: FallbackReason) -> impl FnOnce() -> Result<(), Unusable> {
        move || Err(Unusable::new(reason, format!("{reason:?}")))
    }

    fn passes() -> Result<(), Unusable> {
        Ok(())
    }

    #[test]
    fn the_most_fundamental_missing_piece_is_reported_first() {
        // Issue 15: without libcuda an AUTO handle said NO_UDEV and advised COMPAT_MODE=off.
        use FallbackReason::*;
        let open = || Ok::<(), Unusable>(());
        let reason = |r: Result<(), Unusable>| r.unwrap_err().reason;
        for auto in [true, false] {
            assert_eq!(reason(in_order(auto, fails(CudaUnavailable), fails(LibraryUnavailable), fails(NoUdev), open)), CudaUnavailable);
            assert_eq!(reason(in_order(auto, passes, fails(LibraryUnavailable), fails(NoUdev), open)), LibraryUnavailable);
        }
        assert_eq!(reason(in_order(true, passes, passes, fails(NoUdev), open)), NoUdev);
        assert!(in_order(false, passes, passes, fails(NoUdev), open).is_ok(), "OFF skips the heuristics");
        let driver = || Err::<(), _>(Unusable::new(DriverOpenFailed, "open"));
        assert_eq!(reason(in_order(true, passes, passes, fails(Wsl), driver)), Wsl);
        assert_eq!(reason(in_order(true, passes, passes, passes, driver)), DriverOpenFailed);
    }

    /// Runs `child` in a forked child and asserts that it returned true there.
    fn in_forked_child(child: impl FnOnce() -> bool) {
        // SAFETY: the child runs `child` (atomics, getpid, a lock no other thread can hold across
        // the fork here, small allocations: glibc's malloc is fork-safe) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
            // SAFETY: leaves the child at once, running no destructors or handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just created.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child failed: {status}");
    }

    #[test]
    fn a_child_forked_during_an_open_never_waits_for_it() {
        // As if this process had begun opening cuFile on a background thread: the child has no
        // such thread, so `process` must answer at once instead of waiting on `PROCESS`, and the
        // exit-time wait must not wait for a start that runs only in the parent.
        let _ = OPENER.compare_exchange(0, std::process::id(), Ordering::SeqCst, Ordering::SeqCst);
        let claimed = BACKGROUND.claim();
        in_forked_child(|| {
            let t0 = Instant::now();
            let refused = matches!(process(), Err(u) if u.message.contains("forked child"));
            BACKGROUND.wait_while_running(Duration::from_secs(30));
            finish_start_at_exit();
            refused && is_shut_down() && CufileCall::enter().is_none() && t0.elapsed() < Duration::from_secs(10)
        });
        if claimed {
            BACKGROUND.finish();
        }
        assert!(!forked_from_opener(), "the parent is the opener");
    }

    #[test]
    fn a_start_is_claimed_once_and_waited_for_until_it_finishes() {
        let start: &'static BackgroundStart = Box::leak(Box::new(BackgroundStart { running_in: Mutex::new(0), finished: Condvar::new() }));
        assert!(start.claim());
        assert!(!start.claim(), "one start at a time");
        let (waiting, waited) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            waiting.send(()).unwrap();
            start.wait_while_running(Duration::from_secs(30));
        });
        waited.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "the wait lasts while the start runs");
        start.finish();
        waiter.join().unwrap();
        assert!(start.claim(), "a finished start can be claimed again (a failed spawn leaves it to the first read)");
    }

    #[test]
    fn later_checks_do_not_run_after_a_failure() {
        let ran = std::cell::Cell::new(0);
        let count = || {
            ran.set(ran.get() + 1);
            Ok(())
        };
        let _ = in_order(true, fails(FallbackReason::CudaUnavailable), count, count, count);
        assert_eq!(ran.get(), 0);
    }
}
