//! The engine's stream mode without CUDA: calls queued behind fake gates that behave as one CUDA
//! stream does (a call's point is reached once the stream's earlier work is done, i.e. the work
//! before the first call and every earlier call's release), through the real engine, pool,
//! waiter and operations, into host memory; and relayed calls whose kernel a thread plays
//! (`io::relay::played`), through the real engine, relay waiter and relay pool. One job, although
//! over 450 lines: the stream mode's behaviour through the engine, on CPU.

use super::file::File;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::operation::Operation;
use crate::io::request::Request;
use crate::io::stream_order::{Gate, ParamPointers, Params, StreamKey, StreamSource};
use crate::settings::CompatMode;
use crate::test_support::{random_bytes, temp_file_in};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A stream as the gates see it: whether the work queued before its first call is done, which
/// calls released it (in the order they did), and a fault to report.
#[derive(Default)]
struct FakeStream {
    state: Mutex<FakeState>,
    changed: Condvar,
}

#[derive(Default)]
struct FakeState {
    earlier_work_done: bool,
    calls: usize,
    released: Vec<usize>,
    fault: Option<String>,
}

struct FakeGate {
    stream: Arc<FakeStream>,
    index: usize,
}

impl Gate for FakeGate {
    fn is_reached(&self) -> Result<bool> {
        let state = self.stream.state.lock().unwrap();
        if let Some(fault) = &state.fault {
            return Err(Error::Cuda(fault.clone()));
        }
        Ok(state.earlier_work_done && state.released.len() == self.index)
    }

    fn release(&self) {
        let mut state = self.stream.state.lock().unwrap();
        state.released.push(self.index);
        self.stream.changed.notify_all();
    }

    /// Its stream's own key, so that the waiter asks only its first queued call, as for CUDA.
    fn stream(&self) -> Option<StreamKey> {
        Some(StreamKey::for_tests(Arc::as_ptr(&self.stream) as usize))
    }
}

impl FakeStream {
    fn new() -> Arc<FakeStream> {
        Arc::new(FakeStream::default())
    }

    fn gate(self: &Arc<Self>) -> StreamSource {
        StreamSource::Fake(self.gate_for_tests())
    }

    /// The gate of the stream's next call.
    fn gate_for_tests(self: &Arc<Self>) -> Box<dyn Gate> {
        let mut state = self.state.lock().unwrap();
        state.calls += 1;
        Box::new(FakeGate { stream: Arc::clone(self), index: state.calls - 1 })
    }

    fn finish_earlier_work(&self) {
        self.state.lock().unwrap().earlier_work_done = true;
    }

    fn released(&self) -> Vec<usize> {
        self.state.lock().unwrap().released.clone()
    }

    /// Waits (without a time limit: a hang is the failure) until `n` calls released the stream.
    fn wait_released(&self, n: usize) {
        let mut state = self.state.lock().unwrap();
        while state.released.len() < n {
            state = self.changed.wait(state).unwrap();
        }
    }
}

fn open(tmp: &tempfile::NamedTempFile, flags: &str) -> File {
    File::open(tmp.path().as_os_str().as_encoded_bytes(), flags, 0o644, Some(CompatMode::On)).unwrap()
}

/// A call on the fake stream through the engine's stream mode, as `read_async_raw` makes one.
fn queue(file: &File, direction: Direction, buf: *mut u8, size: usize, offset: u64, stream: StreamSource, params: Params) -> Result<Operation> {
    // SAFETY: the tests keep their buffers alive until the operations settled.
    unsafe { file.stream_call_for_tests(Request { direction, buf, size, offset }, stream, params) }
}

const POISON: u8 = 0xA7;

#[test]
fn more_calls_on_one_stream_than_pool_threads_run_in_stream_order() {
    let threads = crate::io::thread_pool::global().unwrap().num_threads();
    let calls = 3 * threads + 4;
    let piece = 3 * 4096 + 17;
    let data = random_bytes(calls * piece, 24);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r");
    let stream = FakeStream::new();
    let mut buffers: Vec<Vec<u8>> = (0..calls).map(|_| vec![POISON; piece + 8]).collect();
    let ops: Vec<Operation> = buffers
        .iter_mut()
        .enumerate()
        .map(|(i, b)| queue(&file, Direction::Read, b[4..].as_mut_ptr(), piece, (i * piece) as u64, stream.gate(), Params::Given).unwrap())
        .collect();
    // Nothing runs before the stream reaches the first call.
    std::thread::sleep(Duration::from_millis(20));
    assert!(ops.iter().all(|o| !o.is_done()));
    assert!(stream.released().is_empty());
    assert!(buffers.iter().all(|b| b.iter().all(|&x| x == POISON)), "a buffer was written before the stream reached its call");
    stream.finish_earlier_work();
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(op.wait().unwrap(), piece, "call {i}");
    }
    // An operation settles just before its call releases the stream.
    stream.wait_released(calls);
    assert_eq!(stream.released(), (0..calls).collect::<Vec<_>>(), "released out of stream order");
    for (i, b) in buffers.iter().enumerate() {
        assert!(b[4..4 + piece] == data[i * piece..(i + 1) * piece], "bytes of call {i}");
        assert!(b[..4].iter().chain(&b[4 + piece..]).all(|&x| x == POISON), "guard bytes of call {i}");
    }
    let c = file.stats();
    assert_eq!((c.calls, c.stream_calls_ordered, c.bytes_read), (calls as u64, calls as u64, data.len() as u64));
}

#[test]
fn a_stream_held_back_does_not_hold_back_another() {
    let data = random_bytes(1 << 16, 25);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r");
    let (held, free) = (FakeStream::new(), FakeStream::new());
    let mut a = vec![POISON; 4096];
    let mut b = vec![POISON; 4096];
    let op_a = queue(&file, Direction::Read, a.as_mut_ptr(), 4096, 0, held.gate(), Params::Given).unwrap();
    let op_b = queue(&file, Direction::Read, b.as_mut_ptr(), 4096, 4096, free.gate(), Params::Given).unwrap();
    free.finish_earlier_work();
    assert_eq!(op_b.wait().unwrap(), 4096);
    assert!(b == data[4096..8192]);
    assert!(!op_a.is_done());
    held.finish_earlier_work();
    assert_eq!(op_a.wait().unwrap(), 4096);
    assert!(a == data[..4096]);
}

#[test]
fn end_of_file_is_a_short_count_and_errors_come_through_the_operation() {
    let data = random_bytes(10_000, 26);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r");
    let stream = FakeStream::new();
    let mut buf = vec![POISON; 20_000];
    let short = queue(&file, Direction::Read, buf.as_mut_ptr(), 20_000, 0, stream.gate(), Params::Given).unwrap();
    let past = queue(&file, Direction::Read, buf.as_mut_ptr(), 100, 50_000, stream.gate(), Params::Given).unwrap();
    stream.finish_earlier_work();
    assert_eq!(short.wait().unwrap(), 10_000);
    assert_eq!(past.wait().unwrap(), 0);
    assert!(buf[..10_000] == data[..]);
    assert!(buf[10_000..].iter().all(|&x| x == POISON), "past the end of file written");
    let c = file.stats();
    assert_eq!((c.calls, c.calls_short, c.calls_failed), (2, 2, 0));

    // A fault of the stream before the call fails it, after which the stream is released.
    let faulty = FakeStream::new();
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 100, 0, faulty.gate(), Params::Given).unwrap();
    faulty.state.lock().unwrap().fault = Some("CUDA_ERROR_ILLEGAL_ADDRESS".into());
    let err = op.wait().unwrap_err();
    assert!(matches!(err, Error::Cuda(ref m) if m.contains("ILLEGAL")), "{err}");
    faulty.wait_released(1);
    assert_eq!(faulty.released(), [0]);
    assert_eq!(file.stats().calls_failed, 1);
}

/// A stream-ordered write counts as queued (keeping relayed reads off the file's registered
/// windows) until it starts, and also when a fault of its stream fails it before it started: the
/// count is not lost with the call's forgotten transfer.
#[test]
fn a_write_failed_by_a_stream_fault_no_longer_counts_as_queued() {
    let tmp = temp_file_in(None, &[3u8; 8192]);
    let file = open(&tmp, "r+");
    let page_cache = &file.open_file_for_tests().page_cache;
    let data = random_bytes(4096, 36);
    let faulty = FakeStream::new();
    let op = queue(&file, Direction::Write, data.as_ptr().cast_mut(), 4096, 0, faulty.gate(), Params::Given).unwrap();
    assert!(page_cache.queued_write_pending(), "a queued write counts");
    faulty.state.lock().unwrap().fault = Some("CUDA_ERROR_LAUNCH_FAILED".into());
    assert!(matches!(op.wait().unwrap_err(), Error::Cuda(_)));
    faulty.wait_released(1);
    assert!(!page_cache.queued_write_pending(), "the failed write still counts as queued");
    // And one the stream reached counts no longer once it started.
    let stream = FakeStream::new();
    let op = queue(&file, Direction::Write, data.as_ptr().cast_mut(), 4096, 4096, stream.gate(), Params::Given).unwrap();
    assert!(page_cache.queued_write_pending());
    stream.finish_earlier_work();
    assert_eq!(op.wait().unwrap(), 4096);
    assert!(!page_cache.queued_write_pending());
    assert_eq!(std::fs::read(tmp.path()).unwrap()[4096..], data[..], "the written bytes");
}

/// A stream-ordered call is in flight (`stats::activity`) only while its transfer runs: once
/// calls settled, through the stream or by a fault before it, none is left counted, so later lone
/// reads are still seen as alone (spread over the pool) and busy time stops. In a child process:
/// the count is process-wide, and other tests run beside this one.
#[test]
fn settled_stream_ordered_calls_leave_nothing_in_flight() {
    let text = crate::test_support::run_ignored_test("api::stream_order_tests::in_flight_child", &[]);
    assert!(text.contains("in flight after settling: 0 reads, 0 writes"), "{text}");
}

#[test]
#[ignore = "a child process of settled_stream_ordered_calls_leave_nothing_in_flight"]
fn in_flight_child() {
    use crate::stats::activity::calls_in_flight;
    let data = random_bytes(3 * 4096, 37);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r+");
    let mut buf = vec![POISON; 4096];
    let stream = FakeStream::new();
    let read = queue(&file, Direction::Read, buf.as_mut_ptr(), 4096, 0, stream.gate(), Params::Given).unwrap();
    let write = queue(&file, Direction::Write, data.as_ptr().cast_mut(), 4096, 4096, stream.gate(), Params::Given).unwrap();
    // Queued behind the stream's earlier work: not in flight yet.
    assert_eq!((calls_in_flight(Direction::Read), calls_in_flight(Direction::Write)), (0, 0));
    stream.finish_earlier_work();
    assert_eq!(read.wait().unwrap(), 4096);
    assert_eq!(write.wait().unwrap(), 4096);
    let faulty = FakeStream::new();
    let failed = queue(&file, Direction::Read, buf.as_mut_ptr(), 4096, 0, faulty.gate(), Params::Given).unwrap();
    faulty.state.lock().unwrap().fault = Some("CUDA_ERROR_LAUNCH_FAILED".into());
    assert!(failed.wait().is_err());
    faulty.wait_released(1);
    stream.wait_released(2);
    let c = file.stats();
    assert_eq!((c.calls, c.calls_failed, c.write_calls), (2, 1, 1));
    println!("in flight after settling: {} reads, {} writes", calls_in_flight(Direction::Read), calls_in_flight(Direction::Write));
}

/// A panic while the waiter starts a call fails that call and lets its stream go, and the
/// waiter goes on: a later call on another stream still runs.
#[test]
fn a_panic_starting_a_call_fails_it_releases_its_stream_and_spares_the_waiter() {
    use crate::io::stream_order::queue_behind_for_tests;
    let request = Request { direction: Direction::Read, buf: std::ptr::null_mut(), size: 1, offset: 0 };
    let doomed = FakeStream::new();
    let op = queue_behind_for_tests(doomed.gate_for_tests(), request, |_| panic!("a panic inside a transfer's start")).unwrap();
    doomed.finish_earlier_work();
    let err = op.wait().unwrap_err();
    assert!(matches!(err, Error::Internal(ref m) if m.contains("without a result")), "{err}");
    doomed.wait_released(1);
    let data = random_bytes(4096, 38);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r");
    let stream = FakeStream::new();
    let mut buf = vec![POISON; 4096];
    let later = queue(&file, Direction::Read, buf.as_mut_ptr(), 4096, 0, stream.gate(), Params::Given).unwrap();
    stream.finish_earlier_work();
    assert_eq!(later.wait().unwrap(), 4096);
    assert!(buf == data);
}

#[test]
fn bad_arguments_fail_at_the_call_and_a_read_only_handle_refuses_writes() {
    let tmp = temp_file_in(None, &[1u8; 100]);
    let file = open(&tmp, "r");
    let stream = FakeStream::new();
    let mut buf = [0u8; 8];
    let err = queue(&file, Direction::Read, buf.as_mut_ptr(), usize::MAX, 0, stream.gate(), Params::Given).err().unwrap();
    assert!(matches!(err, Error::Overflow(_)), "{err}");
    let err = queue(&file, Direction::Write, buf.as_mut_ptr(), 8, 0, stream.gate(), Params::Given).err().unwrap();
    assert_eq!(err.os_error(), Some(libc::EBADF), "{err}");
    let params = Params::Behind(ParamPointers { size: std::ptr::null(), offset: &0, bytes: &mut 0 });
    let err = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, stream.gate(), params).err().unwrap();
    assert!(matches!(err, Error::NullArgument("size_p")), "{err}");
    // The bytes' pointer is named as the C function names it, and a pointer not aligned for its
    // word is refused before anything reads it.
    let params = Params::Behind(ParamPointers { size: &1, offset: &0, bytes: std::ptr::null_mut() });
    let err = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, stream.gate(), params).err().unwrap();
    assert!(matches!(err, Error::NullArgument("bytes_read_p")), "{err}");
    let words = [0u64; 3];
    let misaligned = words.as_ptr().cast::<u8>().wrapping_add(1);
    let params = Params::Behind(ParamPointers { size: misaligned.cast(), offset: &0, bytes: &mut 0 });
    let err = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, stream.gate(), params).err().unwrap();
    assert!(matches!(err, Error::InvalidArgument(ref m) if m.contains("`size_p` is not aligned")), "{err}");
    let params = Params::Behind(ParamPointers { size: &1, offset: misaligned.cast(), bytes: &mut 0 });
    let err = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, stream.gate(), params).err().unwrap();
    assert!(matches!(err, Error::InvalidArgument(ref m) if m.contains("`file_offset_p` is not aligned")), "{err}");
    file.close();
    let err = queue(&file, Direction::Read, buf.as_mut_ptr(), 8, 0, stream.gate(), Params::Given).err().unwrap();
    assert!(matches!(err, Error::ClosedHandle { .. }), "{err}");
    let c = file.stats();
    assert_eq!((c.calls, c.calls_failed, c.write_calls, c.write_calls_failed, c.stream_calls_ordered), (6, 6, 1, 1, 0));
}

#[test]
fn the_pointer_form_reads_size_and_offset_when_the_stream_gets_there() {
    let data = random_bytes(1 << 16, 27);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r+");
    let stream = FakeStream::new();
    let mut buf = vec![POISON; 9000];
    // Boxed: the pointers stay valid until the stream passed the call.
    let (size, offset, bytes) = (Box::new(1usize), Box::new(0u64), Box::new(-7isize));
    let params = Params::Behind(ParamPointers { size: &*size, offset: &*offset, bytes: (&*bytes as *const isize).cast_mut() });
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, stream.gate(), params).unwrap();
    // Work queued before the call computes them (here: the test, before the stream gets there).
    // SAFETY: nothing else reads or writes them until the stream reaches the call.
    unsafe {
        (&*size as *const usize).cast_mut().write_volatile(8000);
        (&*offset as *const u64).cast_mut().write_volatile(1000);
    }
    stream.finish_earlier_work();
    assert_eq!(op.wait().unwrap(), 8000);
    assert_eq!(*bytes, 8000, "bytes reported before the stream went on");
    assert!(buf[..8000] == data[1000..9000]);
    assert!(buf[8000..].iter().all(|&x| x == POISON));

    // A write through pointers: the bytes reach the file; an offset that overflows fails the
    // operation and reports -1.
    let src = random_bytes(5000, 28);
    let (size, offset, bytes) = (Box::new(5000usize), Box::new(300u64), Box::new(0isize));
    let params = Params::Behind(ParamPointers { size: &*size, offset: &*offset, bytes: (&*bytes as *const isize).cast_mut() });
    let op = queue(&file, Direction::Write, src.as_ptr().cast_mut(), 0, 0, stream.gate(), params).unwrap();
    assert_eq!(op.wait().unwrap(), 5000);
    assert_eq!(*bytes, 5000);
    let back = std::fs::read(tmp.path()).unwrap();
    assert!(back[300..5300] == src[..] && back[..300] == data[..300] && back[5300..] == data[5300..]);
    let (size, offset, bytes) = (Box::new(10usize), Box::new(u64::MAX - 3), Box::new(0isize));
    let params = Params::Behind(ParamPointers { size: &*size, offset: &*offset, bytes: (&*bytes as *const isize).cast_mut() });
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, stream.gate(), params).unwrap();
    assert!(matches!(op.wait(), Err(Error::Overflow(_))));
    assert_eq!(*bytes, -1);
    stream.wait_released(3);
    assert_eq!(stream.released(), [0, 1, 2]);

    // The same on a stream the call blocks on: the operation fails, not the call.
    let (size, offset, bytes) = (Box::new(10usize), Box::new(u64::MAX - 3), Box::new(0isize));
    let params = Params::Behind(ParamPointers { size: &*size, offset: &*offset, bytes: (&*bytes as *const isize).cast_mut() });
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, StreamSource::FakeBlocking, params).unwrap();
    assert!(matches!(op.wait(), Err(Error::Overflow(_))));
    assert_eq!(*bytes, -1);
    // And a good one moves its bytes before the call returns.
    let (size, offset, bytes) = (Box::new(100usize), Box::new(7u64), Box::new(0isize));
    let params = Params::Behind(ParamPointers { size: &*size, offset: &*offset, bytes: (&*bytes as *const isize).cast_mut() });
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 0, 0, StreamSource::FakeBlocking, params).unwrap();
    assert_eq!(*bytes, 100);
    assert_eq!(op.wait().unwrap(), 100);
    assert!(buf[..100] == back[7..107]);
}

#[test]
fn a_write_then_a_read_on_one_stream_sees_the_written_bytes() {
    // The read's end of file is where the file ends when the stream gets there, after the write.
    let tmp = temp_file_in(None, &[]);
    let file = open(&tmp, "r+");
    let stream = FakeStream::new();
    let src = random_bytes(100_000, 29);
    let mut dst = vec![POISON; 100_000];
    let write = queue(&file, Direction::Write, src.as_ptr().cast_mut(), src.len(), 0, stream.gate(), Params::Given).unwrap();
    let read = queue(&file, Direction::Read, dst.as_mut_ptr(), dst.len(), 0, stream.gate(), Params::Given).unwrap();
    stream.finish_earlier_work();
    assert_eq!(write.wait().unwrap(), src.len());
    assert_eq!(read.wait().unwrap(), src.len());
    assert!(dst == src);
}

#[test]
fn freeing_an_operation_early_does_not_wait_and_the_transfer_still_happens() {
    let data = random_bytes(1 << 16, 30);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r");
    let stream = FakeStream::new();
    let mut buf = vec![POISON; 1 << 16];
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 1 << 16, 0, stream.gate(), Params::Given).unwrap();
    drop(op);
    // The handle may go too: the call holds the file.
    drop(file);
    stream.finish_earlier_work();
    stream.wait_released(1);
    assert!(buf == data);
}

/// At exit the calls still queued release their streams (a stream must never be left waiting):
/// a child process queues three calls on a stream whose earlier work never ends and exits.
#[test]
fn exiting_with_calls_queued_releases_every_stream() {
    // Not `run_ignored_test`: the child exits from inside its test, so no test result is printed.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["api::stream_order_tests::exit_child_with_calls_queued", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{:?}: {text}", out.status);
    assert!(text.contains("calls queued, exiting"), "the child did not run: {text}");
    for i in 0..3 {
        assert!(text.contains(&format!("stream released by call {i}")), "call {i} left its stream waiting: {text}");
    }
}

/// The child of `exiting_with_calls_queued_releases_every_stream`.
#[test]
#[ignore = "a child process of exiting_with_calls_queued_releases_every_stream"]
fn exit_child_with_calls_queued() {
    /// A gate never reached, which says when it is released.
    struct Held(usize);
    impl Gate for Held {
        fn is_reached(&self) -> Result<bool> {
            Ok(false)
        }
        fn release(&self) {
            eprintln!("stream released by call {}", self.0);
        }
    }
    let tmp = temp_file_in(None, &[7u8; 4096]);
    let file = open(&tmp, "r");
    let mut buf = vec![0u8; 4096];
    let ops: Vec<Operation> =
        (0..3).map(|i| queue(&file, Direction::Read, buf.as_mut_ptr(), 4096, 0, StreamSource::Fake(Box::new(Held(i))), Params::Given).unwrap()).collect();
    eprintln!("calls queued, exiting");
    std::mem::forget(ops);
    std::process::exit(0);
}

/// A stream-ordered call runs under the settings it read at the call: a task size changed
/// before the stream reaches it does not change how it is split (nor, on the GPU, its route or
/// the buffers prepared for it).
#[test]
fn a_queued_call_runs_under_the_settings_of_its_call() {
    let text = crate::test_support::run_ignored_test("api::stream_order_tests::settings_at_the_call_child", &[]);
    assert!(text.contains("tasks of the 256 KiB write: 1, of the read: 1"), "{text}");
}

/// The child of `a_queued_call_runs_under_the_settings_of_its_call` (the settings are the
/// process's).
#[test]
#[ignore = "a child process of a_queued_call_runs_under_the_settings_of_its_call"]
fn settings_at_the_call_child() {
    crate::api::settings::set_task_size(4 << 20).unwrap();
    let data = random_bytes(256 << 10, 91);
    let tmp = temp_file_in(None, &[]);
    let file = open(&tmp, "r+");
    let stream = FakeStream::new();
    let write = queue(&file, Direction::Write, data.as_ptr().cast_mut(), data.len(), 0, stream.gate(), Params::Given).unwrap();
    let mut back = vec![0u8; data.len()];
    let read = queue(&file, Direction::Read, back.as_mut_ptr(), back.len(), 0, stream.gate(), Params::Given).unwrap();
    crate::api::settings::set_task_size(64 << 10).unwrap();
    stream.finish_earlier_work();
    assert_eq!(write.wait().unwrap(), data.len());
    assert_eq!(read.wait().unwrap(), data.len());
    assert!(back == data, "the read gives the written bytes");
    let c = file.stats();
    println!("tasks of the 256 KiB write: {}, of the read: {}", c.write_tasks, c.tasks);
}

/// A child forked while calls are queued inherits the exit handler but not the waiter thread nor
/// the streams: its `exit` returns at once, also when the fork came while the waiter looked at
/// its queue (its lock held), and lets none of the parent's streams go (pinned memory is shared
/// with a forked child, so a release there would let the parent's stream run past its call).
#[test]
fn a_forked_childs_exit_leaves_the_parents_streams_alone() {
    let text = crate::test_support::run_ignored_test("api::stream_order_tests::fork_child_with_calls_queued", &[]);
    for lock in ["free", "held"] {
        assert!(text.contains(&format!("a child forked with the waiter's lock {lock} exited: true")), "{text}");
    }
    assert!(text.contains("the parent's stream released by a forked child: false"), "{text}");
}

/// The child of `a_forked_childs_exit_leaves_the_parents_streams_alone`.
#[test]
#[ignore = "a child process of a_forked_childs_exit_leaves_the_parents_streams_alone"]
fn fork_child_with_calls_queued() {
    use std::sync::atomic::{AtomicU32, Ordering};
    /// A gate never reached whose release writes a word that the parent shares with its children.
    struct Shared(&'static AtomicU32);
    impl Gate for Shared {
        fn is_reached(&self) -> Result<bool> {
            Ok(false)
        }
        fn release(&self) {
            self.0.store(1, Ordering::SeqCst);
        }
    }
    // SAFETY: a new shared anonymous page, never unmapped.
    let page = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
    assert_ne!(page, libc::MAP_FAILED);
    // SAFETY: the page is aligned, zeroed and lives as long as the process.
    let word: &'static AtomicU32 = unsafe { AtomicU32::from_ptr(page.cast()) };
    let tmp = temp_file_in(None, &[7u8; 4096]);
    let file = open(&tmp, "r");
    let mut buf = vec![0u8; 4096];
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 4096, 0, StreamSource::Fake(Box::new(Shared(word))), Params::Given).unwrap();
    let fork_and_exit = || {
        // SAFETY: the child calls only `exit`, which runs the exit handlers under test.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe { libc::exit(0) };
        }
        pid
    };
    for (lock, pid) in [("free", fork_and_exit()), ("held", crate::io::stream_order::with_waiters_locked_for_tests(fork_and_exit))] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut status = 0;
        // SAFETY: waiting for (and, past the deadline, killing) this process's own child.
        let exited = loop {
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            }
            if std::time::Instant::now() > deadline {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                unsafe { libc::waitpid(pid, &mut status, 0) };
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        eprintln!("a child forked with the waiter's lock {lock} exited: {exited}");
    }
    eprintln!("the parent's stream released by a forked child: {}", word.load(Ordering::SeqCst) != 0);
    // This process's own exit releases the call.
    std::mem::forget(op);
    std::mem::forget(buf);
}

/// A call that starts a waiter while another thread is in `exit` (its handler has run) is refused
/// at the call and lets its stream go, instead of holding it past the handler: the exit handler
/// run by hand, then a relayed call, the first of the process, whose played stream must finish.
#[test]
fn a_call_that_would_start_a_waiter_after_the_exit_handler_is_refused() {
    let text = crate::test_support::run_ignored_test("api::stream_order_tests::late_waiter_child", &[]);
    assert!(text.contains("the relayed call after the exit handler: refused, the process is exiting"), "{text}");
    assert!(text.contains("its stream let go"), "{text}");
}

/// The child of `a_call_that_would_start_a_waiter_after_the_exit_handler_is_refused`.
#[test]
#[ignore = "a child process of a_call_that_would_start_a_waiter_after_the_exit_handler_is_refused"]
fn late_waiter_child() {
    use crate::sys::cuda::relay::RelayKernel;
    let stream = FakeStream::new();
    let tmp = temp_file_in(None, &[7u8; 8192]);
    let file = open(&tmp, "r");
    let mut first = vec![0u8; 4096];
    // The first waiter, and with it the exit handler.
    let op = queue(&file, Direction::Read, first.as_mut_ptr(), 4096, 0, stream.gate(), Params::Given).unwrap();
    crate::io::stream_order::release_all_at_exit_for_tests();
    let buf = relay_buffer(4096);
    let dst = buf[GUARD_BYTES..].as_mut_ptr();
    let (relay, played) = crate::io::relay::played::queued(RelayKernel::In, dst as u64, 4096);
    match queue(&file, Direction::Read, dst, 4096, 0, StreamSource::FakeRelay(relay), Params::Given) {
        Err(e) if e.to_string().contains("the process is exiting") => eprintln!("the relayed call after the exit handler: refused, the process is exiting"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("the relayed call after the exit handler was taken"),
    }
    played.join().unwrap();
    eprintln!("its stream let go");
    drop(op);
    std::mem::forget(first);
}

/// Host memory standing for a device buffer the played relay kernel reaches: `len` bytes 5 past a
/// 16-byte boundary with `GUARD_BYTES` of poison on each side, kept for the process's life (the
/// kernel's thread may still hold it when a failing test unwinds).
fn relay_buffer(len: usize) -> &'static mut [u8] {
    let memory: &'static mut [u8] = Box::leak(vec![POISON; len + 2 * GUARD_BYTES + 21].into_boxed_slice());
    let lead = (16 - memory.as_ptr() as usize % 16) % 16 + 5;
    &mut memory[lead..lead + len + 2 * GUARD_BYTES]
}

const GUARD_BYTES: usize = 64;

/// A relayed call's stream, played by a thread (`io::relay::played`): the relay for a call in
/// `direction` on the buffer at `buffer` of `size` bytes, and a join of the thread.
type PlayStream = fn(crate::sys::cuda::relay::RelayKernel, u64, usize) -> (Arc<crate::io::relay::Relay>, Box<dyn FnOnce()>);

/// Relayed reads (many chunks, more than the ring's slots; one across the end of the file; one
/// past it) and a write of many chunks past the end of the file, through the engine, with the
/// stream played by `play`; `past_end`: what the requested range past the end of the file holds
/// after a read (`None`: left as it was).
fn relayed_calls_through_the_engine(seed: u64, play: PlayStream, past_end: Option<u8>) {
    use crate::sys::cuda::relay::RelayKernel;
    let slot = crate::io::relay::played::SLOT as usize;
    let data = random_bytes(slot * 23 + 17, seed);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r+");
    for (size, offset) in [(slot * 21 + 5, 7u64), (slot * 4, (slot * 21) as u64), (slot, (data.len() + 3) as u64)] {
        let buf = relay_buffer(size);
        let dst = buf[GUARD_BYTES..].as_mut_ptr();
        let (relay, stream) = play(RelayKernel::In, dst as u64, size);
        let op = queue(&file, Direction::Read, dst, size, offset, StreamSource::FakeRelay(relay), Params::Given).unwrap();
        let start = (offset as usize).min(data.len());
        let expect = &data[start..(start + size).min(data.len())];
        assert_eq!(op.wait().unwrap(), expect.len(), "read of {size} at {offset}");
        stream();
        let (read, past) = buf[GUARD_BYTES..].split_at(expect.len());
        assert!(read == expect, "read of {size} at {offset}: bytes");
        let past_range = past[..size - expect.len()].iter().all(|&b| b == past_end.unwrap_or(POISON));
        assert!(past_range, "read of {size} at {offset}: the requested range past the end of the file");
        assert!(buf[..GUARD_BYTES].iter().chain(&buf[GUARD_BYTES + size..]).all(|&b| b == POISON), "read of {size} at {offset}: nothing else written");
    }
    let size = slot * 9 + 3;
    let buf = relay_buffer(size);
    let produced = random_bytes(size, seed + 1);
    buf[GUARD_BYTES..GUARD_BYTES + size].copy_from_slice(&produced);
    let src = buf[GUARD_BYTES..].as_mut_ptr();
    let (relay, stream) = play(RelayKernel::Out, src as u64, size);
    let offset = data.len() as u64 - 10;
    let op = queue(&file, Direction::Write, src, size, offset, StreamSource::FakeRelay(relay), Params::Given).unwrap();
    assert_eq!(op.wait().unwrap(), size);
    stream();
    let back = std::fs::read(tmp.path()).unwrap();
    assert!(back[..offset as usize] == data[..offset as usize], "the bytes before the write stay");
    assert_eq!(back.len(), offset as usize + size);
    let wrong = back[offset as usize..].iter().zip(&produced).position(|(b, p)| b != p);
    assert_eq!(wrong, None, "the file holds the written bytes (first wrong byte of the write)");
    let c = file.stats();
    assert_eq!((c.stream_calls_relayed, c.calls, c.write_calls, c.calls_failed, c.write_calls_failed), (4, 3, 1, 0, 0));
}

#[test]
fn relayed_calls_move_every_byte_through_the_engine() {
    use crate::io::relay::played;
    use crate::sys::cuda::relay::RelayKernel;
    relayed_calls_through_the_engine(31, |direction, buffer, _| {
        let (relay, page) = played::relay(direction, buffer);
        let kernel: Box<dyn FnOnce()> = match direction {
            RelayKernel::In => {
                let kernel = played::play_in(page, buffer);
                Box::new(move || { kernel.join().unwrap(); })
            }
            _ => {
                let kernel = played::play_out(page, buffer);
                Box::new(move || kernel.join().unwrap())
            }
        };
        (relay, kernel)
    }, None);
}

#[test]
fn relayed_calls_with_queued_copies_move_every_byte_through_the_engine() {
    relayed_calls_through_the_engine(33, |direction, buffer, size| {
        let (relay, stream) = crate::io::relay::played::queued(direction, buffer, size as u64);
        (relay, Box::new(move || stream.join().unwrap()))
    }, Some(0));
}

/// A relayed read whose queued copies take pieces from registered windows (host memory standing
/// for them here): through the engine those pieces are counted as copied from the registered page
/// cache and every byte arrives; once the file changed between the call and the stream reaching
/// it, the call fails instead, and the stream is let go.
#[test]
fn relayed_reads_count_registered_pieces_and_fail_once_the_file_changed() {
    use crate::io::relay::{RegisteredRuns, played};
    use crate::sys::cuda::relay::RelayKernel;
    use std::os::fd::AsRawFd;
    let piece = (played::SLOT * played::shape(RelayKernel::In).0) as usize;
    let data = random_bytes(piece * 5 + 3, 35);
    let tmp = temp_file_in(None, &data);
    let file = open(&tmp, "r+");
    let open_file = file.open_file_for_tests();
    let windows: &'static [u8] = Box::leak(data.clone().into_boxed_slice());
    let size = data.len();
    // Pieces 0-1 and 3 registered; 2 and 4-5 through the ring.
    let runs = |changes| RegisteredRuns {
        runs: vec![(0, 2 * piece, windows.as_ptr() as usize), (3 * piece as u64, piece, windows.as_ptr() as usize + 3 * piece)],
        changes,
        keep: Box::new(()),
    };
    for changed in [false, true] {
        // The plan at the call: the file's change count as the page cache has it now.
        let changes = open_file.page_cache.plan_noting_changes(open_file.fd.as_raw_fd(), 0, 0, 0, 1 << 30).1.unwrap();
        if changed {
            // A write through another handle of the file drops its windows (the same bytes: the
            // read would be right, but nothing can tell from here).
            let other = open(&tmp, "r+");
            assert_eq!(other.write_from(&data[..10], 0).unwrap(), 10);
        }
        let buf = relay_buffer(size);
        let dst = buf[GUARD_BYTES..].as_mut_ptr();
        let (relay, stream) = played::queued_with_registered(RelayKernel::In, dst as u64, size as u64, Some(runs(changes)));
        let before = file.stats();
        let op = queue(&file, Direction::Read, dst, size, 0, StreamSource::FakeRelay(relay), Params::Given).unwrap();
        let result = op.wait();
        stream.join().unwrap();
        let c = file.stats();
        if changed {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("the file changed before the stream reached it"), "{err}");
            assert_eq!(c.calls_failed - before.calls_failed, 1);
        } else {
            assert_eq!(result.unwrap(), size);
            assert!(buf[GUARD_BYTES..GUARD_BYTES + size] == data[..], "every byte");
            assert_eq!(c.posix_mapped_bytes - before.posix_mapped_bytes, 3 * piece as u64, "the registered pieces' bytes");
            assert_eq!(c.calls_failed, 0);
        }
        assert!(buf[..GUARD_BYTES].iter().chain(&buf[GUARD_BYTES + size..]).all(|&b| b == POISON), "nothing outside the range");
    }
}

/// Monitors see a stream-ordered call as one whether it was ordered on its stream or blocked
/// (`stream_ordered` 1 both ways).
#[test]
fn monitors_see_a_blocking_stream_ordered_call_as_one() {
    let tmp = temp_file_in(None, &[9u8; 4096]);
    let path = std::ffi::CString::new(tmp.path().as_os_str().as_encoded_bytes()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (watched, mine) = (Arc::clone(&seen), path.clone());
    let id = crate::api::monitor::add(
        move |o| {
            // SAFETY: a call observation's path is the file's, valid during the callback.
            let ours = !o.path.is_null() && unsafe { std::ffi::CStr::from_ptr(o.path) } == mine.as_c_str();
            if ours && o.kind == crate::abi::ObservationKind::Call as u32 {
                watched.lock().unwrap().push(o.stream_ordered);
            }
        },
        false,
    );
    let file = open(&tmp, "r");
    let mut buf = vec![0u8; 100];
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 100, 0, StreamSource::FakeBlocking, Params::Given).unwrap();
    assert_eq!(op.wait().unwrap(), 100);
    let stream = FakeStream::new();
    let op = queue(&file, Direction::Read, buf.as_mut_ptr(), 100, 0, stream.gate(), Params::Given).unwrap();
    stream.finish_earlier_work();
    assert_eq!(op.wait().unwrap(), 100);
    crate::api::monitor::remove(id);
    assert_eq!(*seen.lock().unwrap(), [1, 1], "blocking, then ordered");
}

/// A stream-ordered call refused at its checks (a range past the largest offset, a write on a
/// handle opened "r") is counted and observed, once, as a failed call.
#[test]
fn a_stream_ordered_call_refused_at_the_call_is_observed_once() {
    let tmp = temp_file_in(None, &[9u8; 4096]);
    let file = open(&tmp, "r");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watched = Arc::clone(&seen);
    let id = crate::api::monitor::add(
        move |o| {
            // Refused before its file is known: told by the offsets these calls ask for.
            if o.kind == crate::abi::ObservationKind::Call as u32 && o.size == 77 && (o.file_offset == u64::MAX || o.file_offset == 4095) {
                watched.lock().unwrap().push((o.stream_ordered, o.ok));
            }
        },
        false,
    );
    let mut buf = vec![0u8; 77];
    let stream = FakeStream::new();
    assert!(queue(&file, Direction::Read, buf.as_mut_ptr(), 77, u64::MAX, stream.gate(), Params::Given).is_err());
    assert!(queue(&file, Direction::Write, buf.as_mut_ptr(), 77, 4095, stream.gate(), Params::Given).is_err());
    crate::api::monitor::remove(id);
    assert_eq!(*seen.lock().unwrap(), [(1, 0), (1, 0)]);
    let c = file.stats();
    assert_eq!((c.calls_failed, c.write_calls_failed), (1, 1));
}
