//! The host's part of the protocol against the played kernel and the played queued copies: every
//! byte through the slots in order, the end of a file, a failing chunk, a write.

use super::played::{SLOT, play_in, play_out, relay};
use super::*;
use crate::sys::cuda::relay::StreamOp;
use std::sync::Arc;

/// A buffer that outlives the played kernel, 5 bytes past a 16-byte boundary: chunks lie 5
/// bytes into their slots.
fn buffer(len: usize, fill: u8) -> &'static mut [u8] {
    let memory: &'static mut [u8] = Box::leak(vec![fill; len + 100 + 21].into_boxed_slice());
    let lead = (16 - memory.as_ptr() as usize % 16) % 16 + 5;
    &mut memory[lead..lead + len + 100]
}

/// Runs the call's chunks on `threads` threads claiming them in order, as the pool's jobs do; no
/// chunk may come from registered memory.
fn run_chunks(relay: &Arc<Relay>, len: usize, threads: usize, read: impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static) -> Vec<Result<usize>> {
    run_chunks_with_registered(relay, len, threads, read, |c| panic!("chunk at {} is not in registered memory", c.file_offset))
}

/// `run_chunks`, where `registered` counts the chunks that the queued copies take from
/// registered memory.
fn run_chunks_with_registered(
    relay: &Arc<Relay>,
    len: usize,
    threads: usize,
    read: impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static,
    registered: impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static,
) -> Vec<Result<usize>> {
    let chunks = len.div_ceil(SLOT as usize);
    let next = Arc::new(AtomicU64::new(0));
    let (read, registered) = (Arc::new(read), Arc::new(registered));
    let results = Arc::new(std::sync::Mutex::new(vec![None; chunks]));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (relay, next, read, registered, results) = (Arc::clone(relay), Arc::clone(&next), Arc::clone(&read), Arc::clone(&registered), Arc::clone(&results));
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                if i >= chunks {
                    return;
                }
                let chunk = Chunk { buf_offset: i * SLOT as usize, file_offset: (i * SLOT as usize) as u64, len: (len - i * SLOT as usize).min(SLOT as usize) };
                let result = relay.run_task(chunk, |c| read(c), |c| registered(c));
                results.lock().unwrap()[i] = Some(result);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    Arc::try_unwrap(results).unwrap().into_inner().unwrap().into_iter().map(Option::unwrap).collect()
}

/// A read of `file`'s bytes into the slot at `c.buf_offset`, as the host route would.
fn reader(relay: &Arc<Relay>, file: Arc<Vec<u8>>) -> impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static {
    let base = relay.slots_base() as usize;
    move |c: Chunk| {
        let from = (c.file_offset as usize).min(file.len());
        let n = c.len.min(file.len() - from);
        // SAFETY: the chunk's slot inside the test's ring.
        unsafe { std::ptr::copy_nonoverlapping(file[from..].as_ptr(), (base + c.buf_offset) as *mut u8, n) };
        Ok(n)
    }
}

#[test]
fn a_read_passes_every_chunk_through_the_slots_in_order() {
    for (len, threads) in [(SLOT as usize * 23 + 17, 3), (SLOT as usize * 4, 8), (5, 2), (SLOT as usize * 9, 1)] {
        let dst = buffer(len, 0xEE);
        let (relay, page) = relay(RelayKernel::In, dst.as_ptr() as u64);
        let file: Arc<Vec<u8>> = Arc::new((0..len).map(|i| (i * 7 + 3) as u8).collect());
        let kernel = play_in(page, dst.as_ptr() as u64);
        relay.go(len as u64);
        let results = run_chunks(&relay, len, threads, reader(&relay, Arc::clone(&file)));
        let total: usize = results.iter().map(|r| *r.as_ref().unwrap()).sum();
        assert_eq!(total, len);
        assert_eq!(relay.control.chunks_moved() as usize, len.div_ceil(SLOT as usize), "the last task waited for the kernel");
        relay.control.stop();
        kernel.join().unwrap();
        assert!(dst[..len] == file[..], "{len} bytes on {threads} threads");
        assert!(dst[len..].iter().all(|&b| b == 0xEE), "nothing past the range");
    }
}

#[test]
fn the_end_of_the_file_stops_the_kernel_and_no_task_waits_for_ever() {
    // Planned for 20 chunks, but the file ends in chunk 5 (it shrank after the plan).
    let len = SLOT as usize * 20;
    let dst = buffer(len, 0);
    let (relay, page) = relay(RelayKernel::In, dst.as_ptr() as u64);
    let file: Arc<Vec<u8>> = Arc::new((0..SLOT as usize * 5 + 9).map(|i| i as u8).collect());
    let kernel = play_in(page, dst.as_ptr() as u64);
    relay.go(len as u64);
    let results = run_chunks(&relay, len, 3, reader(&relay, Arc::clone(&file)));
    assert_eq!(*results[5].as_ref().unwrap(), 9);
    assert!(results[..5].iter().all(|r| *r.as_ref().unwrap() == SLOT as usize));
    relay.control.stop();
    assert_eq!(kernel.join().unwrap(), 6, "the kernel stopped after the short chunk");
    assert!(dst[..file.len()] == file[..]);
}

#[test]
fn a_failing_chunk_stops_the_kernel_and_the_other_tasks() {
    let len = SLOT as usize * 30;
    let dst = buffer(len, 0);
    let (relay, page) = relay(RelayKernel::In, dst.as_ptr() as u64);
    let kernel = play_in(page, dst.as_ptr() as u64);
    relay.go(len as u64);
    let good = reader(&relay, Arc::new(vec![1u8; len]));
    let results = run_chunks(&relay, len, 4, move |c| if c.file_offset == 6 * SLOT as u64 { Err(crate::error::Error::Internal("EIO".into())) } else { good(c) });
    assert!(results[6].is_err());
    assert!(relay.control.stopped(), "the kernel is told to move no more");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(!kernel.is_finished(), "the stream is held until the call is settled");
    relay.control.stop();
    kernel.join().unwrap();
}

/// The end of a read through queued copies: its tasks delivered `bytes` in all, the last one
/// having waited for the last of the `pieces` copies; then the call settles and the played
/// stream leaves.
fn settle_queued_read(relay: &Relay, stream: std::thread::JoinHandle<()>, results: &[Result<usize>], bytes: usize, pieces: usize) {
    let total: usize = results.iter().map(|r| *r.as_ref().unwrap()).sum();
    assert_eq!(total, bytes);
    assert_eq!(relay.control.chunks_moved() as usize, pieces, "the last task waited for the last copy");
    relay.stop();
    stream.join().unwrap();
}

/// Plays the stream reaching the call (the waiter's part): once it stored `started`.
fn wait_started(relay: &Relay) {
    while !relay.control.started() {
        std::thread::yield_now();
    }
}

#[test]
fn queued_copies_of_a_read_move_every_byte_and_zeros_past_the_end_of_the_file() {
    let piece = (SLOT * super::played::shape(RelayKernel::In).0) as usize;
    // (bytes asked, bytes the file has past the offset once the stream reached the call, threads)
    for (len, file_len, threads) in [(SLOT as usize * 23 + 17, SLOT as usize * 23 + 17, 3), (piece * 4, piece * 4, 8), (5, 5, 2), (SLOT as usize * 9, SLOT as usize * 9, 1), (SLOT as usize * 11, SLOT as usize * 4 + 7, 3)] {
        let dst = buffer(len, 0xEE);
        let (relay, stream) = super::played::queued(RelayKernel::In, dst.as_ptr() as u64, len as u64);
        wait_started(&relay);
        let file: Arc<Vec<u8>> = Arc::new((0..file_len).map(|i| (i * 7 + 3) as u8).collect());
        relay.go(file_len as u64);
        let results = run_chunks(&relay, relay.tasks_len(file_len), threads, reader(&relay, Arc::clone(&file)));
        settle_queued_read(&relay, stream, &results, file_len, len.div_ceil(piece));
        assert!(dst[..file_len] == file[..], "{len} bytes on {threads} threads");
        assert!(dst[file_len..len].iter().all(|&b| b == 0), "zeros past the end of the file");
        assert!(dst[len..].iter().all(|&b| b == 0xEE), "nothing past the range");
    }
}

#[test]
fn queued_copies_of_a_read_past_the_end_of_the_file_copy_zeros_and_let_the_stream_go() {
    let len = SLOT as usize * 9 + 3;
    let dst = buffer(len, 0xEE);
    let (relay, stream) = super::played::queued(RelayKernel::In, dst.as_ptr() as u64, len as u64);
    wait_started(&relay);
    // The engine's path where the call has nothing to move.
    relay.nothing_to_move();
    relay.stop();
    stream.join().unwrap();
    assert!(dst[..len].iter().all(|&b| b == 0));
    assert!(dst[len..].iter().all(|&b| b == 0xEE));
}

#[test]
fn a_failing_chunk_lets_queued_copies_pass_but_holds_the_stream_until_the_call_settles() {
    let len = SLOT as usize * 30;
    let dst = buffer(len, 0);
    let (relay, stream) = super::played::queued(RelayKernel::In, dst.as_ptr() as u64, len as u64);
    wait_started(&relay);
    relay.go(len as u64);
    let good = reader(&relay, Arc::new(vec![1u8; len]));
    let results = run_chunks(&relay, len, 4, move |c| if c.file_offset == 6 * SLOT as u64 { Err(crate::error::Error::Internal("EIO".into())) } else { good(c) });
    assert!(results[6].is_err());
    assert!(relay.control.stopped());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(!stream.is_finished(), "the stream is held until the call is settled");
    relay.stop();
    stream.join().unwrap();
}

#[test]
fn queued_copies_of_a_write_give_the_tasks_every_byte() {
    for (len, threads) in [(SLOT as usize * 13 + 5, 3), (SLOT as usize * 2, 1), (1, 2)] {
        let src = buffer(len, 0);
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i * 11) as u8;
        }
        let (relay, stream) = super::played::queued(RelayKernel::Out, src.as_ptr() as u64, len as u64);
        wait_started(&relay);
        relay.go(len as u64);
        let file = Arc::new(std::sync::Mutex::new(vec![0u8; len]));
        let base = relay.slots_base() as usize;
        let out = Arc::clone(&file);
        let results = run_chunks(&relay, len, threads, move |c: Chunk| {
            // SAFETY: the chunk's slot inside the test's ring.
            let bytes = unsafe { std::slice::from_raw_parts((base + c.buf_offset) as *const u8, c.len) };
            out.lock().unwrap()[c.file_offset as usize..c.file_offset as usize + c.len].copy_from_slice(bytes);
            Ok(c.len)
        });
        assert!(results.iter().all(|r| r.is_ok()));
        relay.stop();
        stream.join().unwrap();
        assert!(file.lock().unwrap()[..] == src[..len], "{len} bytes on {threads} threads");
    }
}

#[test]
fn a_gibibyte_read_queues_64_copies_and_a_write_128() {
    let (piece_slots, groups) = queued::shape(RelayKernel::In);
    let read = QueuedCopies::new(1 << 30, piece_slots, groups);
    assert!(read.slots() <= QUEUED_SLOTS);
    let ops = read.stream_ops(RelayKernel::In, QUEUED_SLOT_BYTES);
    let copies = ops.iter().filter(|op| matches!(op, StreamOp::ToBuffer { .. })).count();
    assert_eq!((copies, ops.len()), (64, 3 * 64 + 3));
    let (piece_slots, groups) = queued::shape(RelayKernel::Out);
    let write = QueuedCopies::new((1 << 30) + 1, piece_slots, groups);
    assert!(write.slots() <= QUEUED_SLOTS);
    let write = write.stream_ops(RelayKernel::Out, QUEUED_SLOT_BYTES);
    assert_eq!(write.iter().filter(|op| matches!(op, StreamOp::ToRing { .. })).count(), 129);
    assert_eq!(write.iter().filter(|op| matches!(op, StreamOp::ToRing { len: 1, .. })).count(), 1, "the last piece is one byte");
    assert_eq!(write.iter().filter(|op| matches!(op, StreamOp::Wait { .. })).count(), 129 - groups as usize + 1, "a write's piece waits only for its group's piece before");
}

#[test]
fn a_write_takes_every_chunk_the_kernel_fills() {
    let len = SLOT as usize * 13 + 5;
    let src = buffer(len, 0);
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i * 11) as u8;
    }
    let (relay, page) = relay(RelayKernel::Out, src.as_ptr() as u64);
    let kernel = play_out(page, src.as_ptr() as u64);
    relay.go(len as u64);
    let file = Arc::new(std::sync::Mutex::new(vec![0u8; len]));
    let base = relay.slots_base() as usize;
    let out = Arc::clone(&file);
    let results = run_chunks(&relay, len, 3, move |c: Chunk| {
        // SAFETY: the chunk's slot inside the test's ring.
        let bytes = unsafe { std::slice::from_raw_parts((base + c.buf_offset) as *const u8, c.len) };
        out.lock().unwrap()[c.file_offset as usize..c.file_offset as usize + c.len].copy_from_slice(bytes);
        Ok(c.len)
    });
    assert!(results.iter().all(|r| r.is_ok()));
    relay.control.stop();
    kernel.join().unwrap();
    assert!(file.lock().unwrap()[..] == src[..len]);
}

/// Runs of host memory standing for registered windows of `file` (a copy of its bytes, leaked:
/// the played stream may copy from it until joined), for the call's ranges `[at, end)`.
fn registered_runs(file: &[u8], ranges: &[(usize, usize)]) -> RegisteredRuns {
    let windows: &'static [u8] = Box::leak(file.to_vec().into_boxed_slice());
    let runs = ranges.iter().map(|&(at, end)| (at as u64, end - at, windows.as_ptr() as usize + at)).collect();
    RegisteredRuns { runs, changes: 7, keep: Box::new(()) }
}

#[test]
fn registered_runs_take_only_the_pieces_they_cover_wholly() {
    let piece = (SLOT * super::played::shape(RelayKernel::In).0) as usize;
    let len = piece * 6 + 100;
    let runs = registered_runs(&vec![0u8; len], &[(0, piece), (2 * piece + 1, 3 * piece), (3 * piece, 4 * piece + 9), (4 * piece + 9, 5 * piece), (6 * piece, len)]);
    let (piece_slots, groups) = super::played::shape(RelayKernel::In);
    let mut copies = QueuedCopies::new(len as u64, piece_slots, groups);
    // Pieces 0 and 3 (inside one run each), 4 (two runs meeting inside it) and 6 (the short last
    // one); piece 2 has a gap at its start, pieces 1 and 5 no run at all.
    assert_eq!(copies.take_from_registered(&runs.runs, SLOT), 4);
    assert_eq!((0..7).filter(|&j| copies.is_registered(j)).collect::<Vec<_>>(), [0, 3, 4, 6]);
    let ops = copies.stream_ops(RelayKernel::In, SLOT);
    let base = runs.runs[0].2;
    let from_registered: Vec<(usize, u64, usize)> = ops
        .iter()
        .filter_map(|op| match *op {
            StreamOp::FromRegistered { host, buffer_offset, len } => Some((host - base, buffer_offset, len)),
            _ => None,
        })
        .collect();
    let p = piece as u64;
    assert_eq!(from_registered, [(0, 0, piece), (3 * piece, 3 * p, piece), (4 * piece, 4 * p, 9), (4 * piece + 9, 4 * p + 9, piece - 9), (6 * piece, 6 * p, 100)]);
    let ring_copies = ops.iter().filter(|op| matches!(op, StreamOp::ToBuffer { .. })).count();
    let waits = ops.iter().filter(|op| matches!(op, StreamOp::Wait { .. })).count();
    assert_eq!((ring_copies, waits), (3, 3 + 1), "the ring's pieces wait for their tasks, the registered ones for nothing (and the end for stop)");
    assert_eq!(ops.iter().filter(|op| matches!(op, StreamOp::Write { word: crate::sys::cuda::relay::W_PROGRESS, .. })).count(), 7, "every piece stores its progress");
}

#[test]
fn a_read_copies_registered_pieces_from_there_and_reads_only_the_others() {
    let piece = (SLOT * super::played::shape(RelayKernel::In).0) as usize;
    let len = SLOT as usize * 23 + 17; // 12 pieces, the last short
    let file: Arc<Vec<u8>> = Arc::new((0..len).map(|i| (i * 13 + 1) as u8).collect());
    // Registered: pieces 0-1, 3-5 (piece 4 in two runs), 11 (the last); piece 2 only in part.
    let ranges = [(0, 2 * piece), (2 * piece + 100, 3 * piece), (3 * piece, 4 * piece + 500), (4 * piece + 500, 6 * piece), (11 * piece, len)];
    let registered_pieces = [0, 1, 3, 4, 5, 11];
    for threads in [1, 3, 8] {
        let dst = buffer(len, 0xEE);
        let runs = registered_runs(&file, &ranges);
        let (relay, stream) = super::played::queued_with_registered(RelayKernel::In, dst.as_ptr() as u64, len as u64, Some(runs));
        assert_eq!(relay.registered_changes(), Some(7));
        wait_started(&relay);
        relay.go(len as u64);
        let (read_at, registered_at) = (Arc::new(std::sync::Mutex::new(Vec::new())), Arc::new(std::sync::Mutex::new(Vec::new())));
        let (reads, counted) = (Arc::clone(&read_at), Arc::clone(&registered_at));
        let read = reader(&relay, Arc::clone(&file));
        let results = run_chunks_with_registered(&relay, len, threads, move |c| {
            reads.lock().unwrap().push(c.file_offset as usize / piece);
            read(c)
        }, move |c| {
            counted.lock().unwrap().push((c.file_offset as usize / piece, c.len));
            Ok(c.len)
        });
        settle_queued_read(&relay, stream, &results, len, len.div_ceil(piece));
        assert!(dst[..len] == file[..], "every byte, on {threads} threads");
        assert!(dst[len..].iter().all(|&b| b == 0xEE), "nothing past the range");
        let read_pieces: std::collections::BTreeSet<usize> = read_at.lock().unwrap().iter().copied().collect();
        let registered_chunks = registered_at.lock().unwrap().clone();
        assert!(read_pieces.iter().all(|p| !registered_pieces.contains(p)), "no registered piece is read: {read_pieces:?}");
        assert_eq!(read_pieces.len(), 12 - registered_pieces.len());
        let registered_bytes: usize = registered_chunks.iter().map(|(_, n)| n).sum();
        assert_eq!(registered_bytes, 5 * piece + (len - 11 * piece), "the registered pieces' chunks are counted with their bytes");
    }
}

/// Two first relayed calls at once make one relay pool: eight threads ask for it together, and
/// one pool is made (the one not kept left its workers parked for the process's life).
#[test]
fn first_relayed_calls_at_once_make_one_pool() {
    // Three processes: without the mend about half of them raced into two pools or more.
    for _ in 0..3 {
        let text = crate::test_support::run_ignored_test("io::relay::tests::pool_race_child", &[]);
        assert!(text.contains("pools made by the race: 1\n"), "{text}");
    }
}

/// The child of `first_relayed_calls_at_once_make_one_pool` (a process whose relay pool is not
/// made yet).
#[test]
#[ignore = "a child process of first_relayed_calls_at_once_make_one_pool"]
fn pool_race_child() {
    let threads = crate::io::thread_pool::global().unwrap().num_threads();
    let before = crate::io::thread_pool::pools_made();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let askers: Vec<_> = (0..8)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                pool().unwrap().num_threads()
            })
        })
        .collect();
    for asker in askers {
        assert_eq!(asker.join().unwrap(), threads);
    }
    println!("pools made by the race: {}", crate::io::thread_pool::pools_made() - before);
}
