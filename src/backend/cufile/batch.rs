//! cuFile's batch submission: a list of I/Os, over one or more registered files, through
//! `cuFileBatchIOSetUp` / `Submit` / `GetStatus` on the calling thread, in windows of at most the
//! driver's `max_batch_io_size`, each window waited for before the next is submitted.
//!
//! Each `run` takes one batch handle of the driver's full size from its library's idle ones (or
//! sets one up) and gives it back when it returns: on the H200 (cuFile 1.15.1, 2026-12-03) a
//! set-up took 0.1-0.2 ms but a destroy 96-108 ms, and the first batch's cost (21 ms for
//! 8 × 4 MiB, 1.5 ms later) is in its I/O, not its handle. A handle cuFile failed on is
//! destroyed instead. Measured there too: cuFile never reports an I/O of size 0 (so none is
//! submitted), reports none after a cancel, and answers `GetStatus` at once, empty, when nothing
//! is in flight.
//!
//! One job in one file, although over 450 lines: running a list of I/Os through cuFile's batch
//! calls, with the failure paths that must never leave a submitted window unwaited.

use super::gds::CufileCall;
use super::synchronous;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::sys::cuda::{ContextHandle, MemoryKind, ScopedContext};
use crate::sys::cufile::{CufileBatch, CufileHandle, CufileLibrary, IoFailure, RawBatchEvent, batch_status, code_message};
use std::any::Any;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::{Duration, Instant};

/// I/Os per submission when the driver's properties do not say: cuFile 1.15's
/// `max_batch_io_size` (129 fails the set-up with 5022).
const DEFAULT_WINDOW: u32 = 128;

/// How long one `cuFileBatchIOGetStatus` waits; it is asked again until the window is done.
const POLL: Duration = Duration::from_secs(1);

/// Empty answers in a row, each well before `POLL`, after which the I/Os not reported are
/// taken as lost.
const LOST_AFTER: u32 = 3;

/// One I/O of a cuFile batch: `size` bytes at `file_offset` of the registered file `handle`
/// (`path` in messages), moved between it and the memory of `kind` at `base + base_offset`.
pub struct BatchIo<'a> {
    pub direction: Direction,
    pub handle: &'a CufileHandle<'a>,
    pub path: &'a str,
    pub kind: &'a MemoryKind,
    pub base: u64,
    pub base_offset: u64,
    pub size: usize,
    pub file_offset: u64,
}

impl BatchIo<'_> {
    fn op(&self) -> &'static str {
        match self.direction {
            Direction::Read => "cuFile batch read",
            Direction::Write => "cuFile batch write",
        }
    }
}

/// True when the library has all five batch calls (cuFile 1.2 and later).
pub fn available(library: &CufileLibrary) -> bool {
    library.batch_available()
}

/// Runs `ios` through cuFile's batch API on the calling thread and calls `done(index, result)`
/// once per I/O (index into `ios`), in the order cuFile reports them. A result is the bytes
/// moved: a read is short only at the end of the file (one that cuFile ends short earlier is
/// finished with `cuFileRead`), a write moves `size` bytes or fails; an error names the file,
/// the offset and cuFile's code, as `synchronous::task`'s do. I/Os of size 0 and I/Os whose
/// offsets do not fit cuFile's `off_t` are answered without cuFile. At most the driver's
/// `max_batch_io_size` I/Os (128 when it does not say) are submitted at once; a new window
/// also starts where device memory of another CUDA context comes (host memory goes in any), the
/// window's context made current around its calls.
///
/// Returns `Ok` once every I/O was answered and nothing is in flight. After a first window was
/// submitted, a window whose context cannot be made current answers its I/Os with that error;
/// a refused submission answers its I/Os with cuFile's error and all later ones as not
/// submitted; a failing `cuFileBatchIOGetStatus` cancels the batch and answers what was in
/// flight with its error, the later ones as not submitted.
///
/// Errors (nothing was submitted and `done` was never called; the caller may run the I/Os
/// another way): `CufileUnavailable` when the library lacks the batch calls or cuFile was shut
/// down; `Cuda` when the first window's context cannot be made current; `Cufile` when
/// `cuFileBatchIOSetUp` or the first `cuFileBatchIOSubmit` fails (5049: compat mode off and GDS
/// unusable).
///
/// A panic in `done` is held until nothing is in flight (no window is submitted after it, and
/// `done` is not called again), then resumed.
///
/// # Safety
/// Each I/O's `base + base_offset .. + size` is memory of its `kind` inside the allocation at
/// `base` (a write only reads it), not used elsewhere until `run` returns; each handle stays
/// registered until then.
pub unsafe fn run(library: &CufileLibrary, ios: &[BatchIo<'_>], done: impl FnMut(usize, Result<usize>)) -> Result<()> {
    if !available(library) {
        return Err(Error::CufileUnavailable(format!("the loaded libcufile ({}) has no batch API", library.path())));
    }
    let _call = CufileCall::enter().ok_or_else(|| Error::CufileUnavailable("cuFile was shut down".into()))?;
    let mut report = Report { done, panic: None };
    // Answered without cuFile, but only once something was submitted: an `Err` from `run`
    // must mean that `done` was never called.
    let mut answered = Vec::new();
    let mut live = Vec::new();
    for (i, io) in ios.iter().enumerate() {
        match answer_without_cufile(library, io) {
            Some(result) => answered.push((i, result)),
            None => live.push(i),
        }
    }
    if live.is_empty() {
        answered.into_iter().for_each(|(i, r)| report.done(i, r));
        return report.finish();
    }
    // The full size whatever the work, so that the handle serves any later batch.
    let capacity = window_limit(library);
    let windows = windows(&live, |i| context_key(ios[i].kind), capacity as usize);
    let setup = {
        // In the first window's context, as the calls after it.
        let _context = ScopedContext::for_kind(window_kind(ios, &windows[0])).map_err(Error::from)?;
        crate::trace::event("cufile_batch.setup.start", capacity.into());
        let setup = library.batch_setup(capacity);
        crate::trace::event("cufile_batch.setup.end", 0);
        setup
    };
    let mut batch = match setup {
        None => return Err(Error::CufileUnavailable("the loaded libcufile has no batch API".into())),
        Some(Err(e)) => return Err(Error::Cufile(format!("{e} (setting up a batch of {capacity} I/Os)"))),
        Some(Ok(batch)) => batch,
    };
    let mut broken: Option<String> = None;
    for (n, window) in windows.iter().enumerate() {
        if report.panic.is_some() {
            break; // nothing more is submitted for a caller that panicked
        }
        if let Some(why) = &broken {
            for &i in window {
                let io = &ios[i];
                report.done(i, Err(Error::Cufile(format!("{} of {:?} at offset {} was not submitted: {why}", io.op(), io.path, io.file_offset))));
            }
            continue;
        }
        // SAFETY: forwarded from the caller.
        match unsafe { submit_and_wait(library, &batch, ios, window, &mut report) } {
            Window::Finished => {}
            Window::NotSubmitted(e) if n == 0 => return Err(e),
            Window::Refused(e) if n == 0 => {
                batch.retire();
                return Err(e);
            }
            Window::NotSubmitted(e) => window.iter().for_each(|&i| report.done(i, Err(e.clone()))),
            Window::Refused(e) => {
                window.iter().for_each(|&i| report.done(i, Err(e.clone())));
                broken = Some(e.to_string());
            }
            Window::Broken(why) => broken = Some(why),
        }
        if n == 0 {
            answered.drain(..).for_each(|(i, r)| report.done(i, r));
        }
    }
    if broken.is_some() {
        batch.retire();
    }
    drop(batch); // kept for the next batch, or destroyed: nothing is in flight
    report.finish()
}

/// `done`, with a panic in it held until nothing is in flight (unwinding through `run` while
/// cuFile still writes the caller's buffers would let them be freed under it).
struct Report<F> {
    done: F,
    panic: Option<Box<dyn Any + Send>>,
}

impl<F: FnMut(usize, Result<usize>)> Report<F> {
    fn done(&mut self, index: usize, result: Result<usize>) {
        if self.panic.is_none() {
            self.panic = catch_unwind(AssertUnwindSafe(|| (self.done)(index, result))).err();
        }
    }

    fn finish(self) -> Result<()> {
        match self.panic {
            Some(payload) => resume_unwind(payload),
            None => Ok(()),
        }
    }
}

/// How one window ended.
enum Window {
    /// Every I/O answered.
    Finished,
    /// Nothing of it was submitted and none of it answered: its context could not be made current.
    NotSubmitted(Error),
    /// Nothing of it was submitted and none of it answered: cuFile refused the submission, and
    /// the batch handle is not to be trusted with more.
    Refused(Error),
    /// Every I/O answered, but the batch handle is not to be trusted with more (the reason).
    Broken(String),
}

/// The answer to an I/O that never reaches cuFile: size 0, or numbers beyond `off_t` /
/// `ssize_t`, or a handle of another library.
fn answer_without_cufile(library: &CufileLibrary, io: &BatchIo<'_>) -> Option<Result<usize>> {
    if io.size == 0 {
        return Some(Ok(0));
    }
    let end = io.file_offset.checked_add(io.size as u64);
    let fits = |v: Option<u64>| v.is_some_and(|v| i64::try_from(v).is_ok());
    if !fits(end) || !fits(io.base_offset.checked_add(io.size as u64)) || isize::try_from(io.size).is_err() {
        return Some(Err(Error::Overflow(format!(
            "{} of {:?}: {} bytes at offset {} (buffer offset {}) exceed cuFile's offsets",
            io.op(),
            io.path,
            io.size,
            io.file_offset,
            io.base_offset
        ))));
    }
    if !io.handle.belongs_to(library) {
        return Some(Err(Error::Internal(format!("{} of {:?}: the file is registered with another libcufile", io.op(), io.path))));
    }
    None
}

/// The driver's `max_batch_io_size`, or [`DEFAULT_WINDOW`] when the properties do not say.
fn window_limit(library: &CufileLibrary) -> u32 {
    match library.properties() {
        Ok(p) if p.max_batch_io_size > 0 => p.max_batch_io_size,
        _ => DEFAULT_WINDOW,
    }
}

/// What decides the context an I/O's memory needs (`context_for`): none for host memory,
/// else the device and the allocating context.
type ContextKey = Option<(i32, Option<ContextHandle>)>;

fn context_key(kind: &MemoryKind) -> ContextKey {
    match *kind {
        MemoryKind::Host | MemoryKind::PinnedHost => None,
        MemoryKind::Device { ordinal, context } | MemoryKind::Managed { ordinal, context } => Some((ordinal, context)),
    }
}

/// Cuts `live` (indices, ascending) into windows of at most `capacity` I/Os whose memory needs
/// at most one context (`key` of an index): host memory goes in any window.
fn windows(live: &[usize], key: impl Fn(usize) -> ContextKey, capacity: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<(Vec<usize>, ContextKey)> = Vec::new();
    for &i in live {
        let k = key(i);
        match out.last_mut() {
            Some((w, wk)) if w.len() < capacity && (k.is_none() || wk.is_none() || *wk == k) => {
                w.push(i);
                if wk.is_none() {
                    *wk = k;
                }
            }
            _ => out.push((vec![i], k)),
        }
    }
    out.into_iter().map(|(w, _)| w).collect()
}

/// The memory whose context a window runs in: its first device memory, else its first I/O's.
fn window_kind<'a>(ios: &'a [BatchIo<'_>], window: &[usize]) -> &'a MemoryKind {
    let owner = window.iter().copied().find(|&i| context_key(ios[i].kind).is_some()).unwrap_or(window[0]);
    ios[owner].kind
}

/// Submits one window and waits until every I/O of it was answered.
///
/// # Safety
/// As for [`run`]; `window` holds ascending indices into `ios`, at most the batch's capacity.
unsafe fn submit_and_wait<F: FnMut(usize, Result<usize>)>(
    library: &CufileLibrary,
    batch: &CufileBatch<'_>,
    ios: &[BatchIo<'_>],
    window: &[usize],
    report: &mut Report<F>,
) -> Window {
    let _context = match ScopedContext::for_kind(window_kind(ios, window)) {
        Ok(context) => context,
        Err(e) => return Window::NotSubmitted(e.into()),
    };
    // Kept until the window is done: cuFile may read the parameters after the submit returned.
    let mut params: Vec<_> = window
        .iter()
        .map(|&i| {
            let io = &ios[i];
            // Offsets checked by `answer_without_cufile`.
            io.handle.batch_io(io.direction == Direction::Write, io.base as *mut c_void, io.base_offset as i64, io.size, io.file_offset as i64, i)
        })
        .collect();
    let bytes: usize = window.iter().map(|&i| ios[i].size).sum();
    crate::trace::event("cufile_batch.submit", bytes as u64);
    // SAFETY: every I/O's memory and handle are the caller's contract; the batch is waited for
    // below before `run` returns.
    if let Err(e) = unsafe { batch.submit(&mut params) } {
        let first = &ios[window[0]];
        return Window::Refused(Error::Cufile(format!(
            "{e}: {} I/Os from {} of {:?} at offset {}",
            window.len(),
            first.op(),
            first.path,
            first.file_offset
        )));
    }
    let mut pending = vec![true; window.len()];
    let mut left = window.len();
    let mut stray = 0usize;
    let mut quick_and_empty = 0;
    let mut events = vec![RawBatchEvent { cookie: std::ptr::null_mut(), status: 0, ret: 0 }; window.len()];
    while left > 0 {
        let asked = Instant::now();
        let got = match batch.status(1, &mut events[..left], POLL) {
            Ok(0) if asked.elapsed() < POLL / 2 => {
                // cuFile answers at once, empty, only when it has nothing in flight: after a few
                // such answers what is left will never be reported.
                quick_and_empty += 1;
                if quick_and_empty == LOST_AFTER {
                    let _ = batch.cancel();
                    answer_pending(ios, window, &pending, report, |io| {
                        Error::Internal(format!("{} of {:?} at offset {}: cuFile reports nothing in flight, yet never reported it", io.op(), io.path, io.file_offset))
                    });
                    return Window::Broken("cuFile lost I/Os of an earlier window".into());
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Ok(got) => got,
            Err(e) => {
                let cancel = match batch.cancel() {
                    Ok(()) => "the batch was cancelled".to_string(),
                    Err(c) => format!("and {c}"),
                };
                let why = format!("{e} ({cancel})");
                answer_pending(ios, window, &pending, report, |io| {
                    Error::Cufile(format!("{} of {:?} at offset {} did not complete: {why}", io.op(), io.path, io.file_offset))
                });
                return Window::Broken(why);
            }
        };
        quick_and_empty = 0;
        for event in &events[..got] {
            let index = event.cookie as usize;
            let slot = window.binary_search(&index).ok().filter(|&s| pending[s]);
            let Some(slot) = slot else {
                stray += 1;
                continue;
            };
            if event.status & FINAL == 0 {
                continue; // still waiting or pending: reported again when it ends
            }
            pending[slot] = false;
            left -= 1;
            // SAFETY: forwarded from the caller; only this I/O's range is touched.
            let result = unsafe { outcome(library, &ios[index], event) };
            report.done(index, result);
        }
        if left > 0 && stray > 0 && stray + (window.len() - left) >= window.len() {
            // cuFile reported as many I/Os as were submitted, some under cookies it was never
            // given: what it did with the rest is unknown.
            let _ = batch.cancel();
            let why = format!("cuFile reported {stray} events with cookies outside the window");
            answer_pending(ios, window, &pending, report, |io| {
                Error::Internal(format!("{} of {:?} at offset {}: {why}", io.op(), io.path, io.file_offset))
            });
            return Window::Broken(why);
        }
    }
    crate::trace::event("cufile_batch.complete", bytes as u64);
    Window::Finished
}

/// Every status bit that ends an I/O.
const FINAL: u32 = batch_status::COMPLETE | batch_status::FAILED | batch_status::CANCELED | batch_status::INVALID | batch_status::TIMEOUT;

/// Answers each I/O of `window` still pending with `error`.
fn answer_pending<F: FnMut(usize, Result<usize>)>(
    ios: &[BatchIo<'_>],
    window: &[usize],
    pending: &[bool],
    report: &mut Report<F>,
    error: impl Fn(&BatchIo<'_>) -> Error,
) {
    for (&i, _) in window.iter().zip(pending).filter(|(_, p)| **p) {
        report.done(i, Err(error(&ios[i])));
    }
}

/// The result of one finished I/O from its event.
///
/// # Safety
/// As for [`run`], for this I/O (a short read is finished with `cuFileRead`).
unsafe fn outcome(library: &CufileLibrary, io: &BatchIo<'_>, event: &RawBatchEvent) -> Result<usize> {
    let op = io.op();
    let ret = event.ret as isize;
    if ret < 0 {
        return Err(failure(io, ret));
    }
    let ended = [
        (batch_status::FAILED, "FAILED"),
        (batch_status::CANCELED, "CANCELED"),
        (batch_status::INVALID, "INVALID"),
        (batch_status::TIMEOUT, "TIMEOUT"),
    ];
    if let Some((_, name)) = ended.iter().find(|(bit, _)| event.status & bit != 0) {
        return Err(Error::Cufile(format!("{op} of {:?} at offset {} ended with status {name}", io.path, io.file_offset)));
    }
    let n = ret as usize;
    match io.direction {
        _ if n > io.size => Err(Error::Internal(format!("{op} of {:?} at offset {} reported {n} of {} bytes", io.path, io.file_offset, io.size))),
        Direction::Write if n < io.size => {
            Err(Error::Cufile(format!("{op} of {:?} at offset {} wrote {n} of {} bytes", io.path, io.file_offset, io.size)))
        }
        Direction::Read if n > 0 && n < io.size => {
            // SAFETY: the rest of this I/O's own range, under the caller's contract.
            let rest = unsafe {
                synchronous::transfer(
                    Direction::Read,
                    "cuFileRead",
                    library,
                    io.handle,
                    io.path,
                    io.base,
                    io.base_offset + n as u64,
                    io.size - n,
                    io.file_offset + n as u64,
                )
            }?;
            Ok(n + rest)
        }
        _ => Ok(n),
    }
}

/// The error of a negative `ret`: -1 is a file-system error whose errno the batch API does not
/// carry; the others are `-CUfileOpError`, or, outside cuFile's codes, maybe a negated errno
/// (cuFile's log shows "-5" for failed sub-I/Os), said as both.
fn failure(io: &BatchIo<'_>, ret: isize) -> Error {
    let op = io.op();
    if ret == -1 {
        let source = std::io::Error::other("a file-system error (cuFile's batch API does not report its errno)");
        return Error::Io { op, path: io.path.to_string(), offset: io.file_offset, source };
    }
    let code = match IoFailure::decode(ret, 0) {
        IoFailure::Cufile(code) | IoFailure::Errno(code) => code,
    };
    let text = match code_message(code) {
        "unknown cuFile error" if code < 4096 => {
            format!("not a cuFile code; as a negated errno: {}", std::io::Error::from_raw_os_error(code))
        }
        text => text.to_string(),
    };
    Error::Cufile(format!("{op} of {:?} at offset {} returned {ret}: {text}", io.path, io.file_offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_joins_any_window_and_each_device_context_has_its_own() {
        let gpu0 = MemoryKind::Device { ordinal: 0, context: None };
        let gpu1 = MemoryKind::Device { ordinal: 1, context: None };
        assert_eq!(context_key(&MemoryKind::Host), context_key(&MemoryKind::PinnedHost));
        assert_eq!(context_key(&gpu1), context_key(&MemoryKind::Managed { ordinal: 1, context: None }));
        let kinds = [&MemoryKind::Host, &MemoryKind::PinnedHost, &gpu0, &gpu0, &MemoryKind::Host, &gpu1, &MemoryKind::Host];
        let live: Vec<usize> = (0..kinds.len()).collect();
        let key = |i: usize| context_key(kinds[i]);
        assert_eq!(windows(&live, key, 128), [vec![0, 1, 2, 3, 4], vec![5, 6]]);
        assert_eq!(windows(&live, key, 2), [vec![0, 1], vec![2, 3], vec![4, 5], vec![6]]);
        assert_eq!(windows(&[1, 3, 5], key, 128), [vec![1, 3], vec![5]]);
        assert_eq!(FINAL & 3, 0, "WAITING (1) and PENDING (2) I/Os are not done");
    }
}
