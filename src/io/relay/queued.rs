//! Queued copies, the copy engine's way of relaying a call whose size is known at the call
//! (`Relay::queue`): the operations queued on the caller's stream at the call (`stream_ops`) and a
//! task's part between them (`Relay::run_queued_task`).

use super::{Relay, StreamInFlight};
use crate::direction::Direction;
use crate::error::Result;
use crate::io::open_file::OpenFile;
use crate::page_cache::{KeptWindows, Segment};
use crate::settings::Snapshot;
use crate::sys::cuda::MemoryKind;
use std::os::fd::AsRawFd;
use crate::io::stream_order::StreamKey;
use crate::io::task_split::Chunk;
use crate::sys::cuda::relay::{Control, KeepAlive, MAX_SLOTS, RelayKernel, StreamOp};
use std::sync::atomic::{AtomicU32, Ordering};

/// The copy engine's ring (`QueuedCopies`): slots of a task each (4 MiB, the default task size, as
/// the synchronous route's bounce buffers), 32 of them (128 MiB per stream with relayed calls).
pub(super) const QUEUED_SLOT_BYTES: u32 = 4 << 20;
pub(super) const QUEUED_SLOTS: u32 = 32;

/// How a call in `direction` uses the ring: (slots per copy, groups). A read copies four slots
/// (16 MiB) at a time through the whole ring, so that the relay pool's 16 threads find a free slot
/// while the copy engine drains others (a 1 GiB call queues 64 copies); a write copies two at a
/// time through four slots (16 MiB), so that a slot's bytes are still in the CPU's cache when a
/// task `pwrite`s them (a file's buffered writes go one at a time, `buffered_write_workers`, so a
/// deeper ring only lets the copies run further ahead). Measured: reads in a row at 0.96 of
/// `pread` with 32 slots copied four at a time against 0.87-0.90 with 16 copied two at a time (an
/// H100); writes on the H200 at 0.86-1.03 of `pwrite` through 16 MiB of the ring against
/// 0.73-0.86 through 64 MiB and 0.77-0.82 through 32 (docs/performance.md, "The whole build on an
/// H100, and the default turned on").
pub(super) fn shape(direction: RelayKernel) -> (u32, u32) {
    match direction {
        RelayKernel::In => (4, QUEUED_SLOTS / 4),
        _ => (2, 2),
    }
}
const _: () = assert!(QUEUED_SLOTS.is_multiple_of(4) && QUEUED_SLOTS / 4 <= MAX_SLOTS);

/// The parts of a read's range that lie in the file's registered page-cache windows at the call
/// (`page_cache`), planned at the call (`RegisteredRuns::plan`). A piece wholly in them is
/// copied by the copy engine straight from there, as a synchronous read of those windows is
/// (54-55 GB/s where `pread` into a ring reaches about 51 on the H100s), and no task reads it.
pub(crate) struct RegisteredRuns {
    /// (offset in the call, bytes, host address of the first), in order, not overlapping.
    pub(crate) runs: Vec<(u64, usize, usize)>,
    /// The count of the file's known changes when they were planned: once the stream reached the
    /// call the engine asks whether the windows still hold the file's bytes
    /// (`PageCache::unchanged_since`), and fails the call if not.
    pub(crate) changes: u64,
    /// Keeps the windows registered until the stream has passed the call (`relay::retire`).
    pub(crate) keep: KeepAlive,
}

impl RegisteredRuns {
    /// The parts of a relayed read's range (`len` bytes at `offset` into device memory of `kind`)
    /// that lie in `file`'s registered windows now, planned as a synchronous task plans its
    /// segments (so the read counts towards its windows' registration too). `None` where the
    /// registered page cache does not serve the read (turned off, direct I/O, no window
    /// registered) or a stream-ordered write of the file is queued: it will drop the windows
    /// before the stream gets to the read. `snapshot`: the settings the call read.
    pub(crate) fn plan(file: &OpenFile, kind: &MemoryKind, offset: u64, len: u64, snapshot: &Snapshot) -> Option<RegisteredRuns> {
        let (Some(ordinal), budget @ 1..) = (kind.device_ordinal(), snapshot.page_cache_pin_max) else { return None };
        if snapshot.direct_io(Direction::Read) || file.page_cache.queued_write_pending() {
            return None;
        }
        let (segments, changes) = file.page_cache.plan_noting_changes(file.fd.as_raw_fd(), offset, usize::try_from(len).ok()?, ordinal, budget);
        let (mut runs, mut windows) = (Vec::new(), Vec::new());
        for segment in segments {
            if let Segment::Registered { mapping, file_offset, len } = segment {
                runs.push((file_offset - offset, len, mapping.address_of(file_offset) as usize));
                windows.push(mapping);
            }
        }
        let changes = changes.filter(|_| !runs.is_empty())?;
        Some(RegisteredRuns { runs, changes, keep: Box::new(KeptWindows::new(windows)) })
    }
}

/// The copy engine's way of relaying a call whose size is known at the call: its copies between
/// the ring and the caller's buffer queued on the caller's stream at the call (`stream_ops`,
/// `relay::queue`) between waits and stores on the control block's words, so that the copy engine
/// moves the bytes and the stream needs no SM (reads at 0.96 of `pread` on an H100, where a relay
/// kernel gave 0.40 on the H200: docs/performance.md). A piece is `piece_slots` consecutive
/// slots, copied at once; group `g` of the ring holds pieces `g`, `g + groups`, ...
pub(super) struct QueuedCopies {
    /// Bytes the queued copies move: the size given at the call (a read's is not clipped to the
    /// file then, which an earlier write on the stream may still extend).
    pub(super) len: u64,
    pub(super) piece_slots: u32,
    /// Per group: tasks done of the piece it holds now.
    pub(super) done: Box<[AtomicU32]>,
    /// A read's pieces copied from registered windows (`RegisteredRuns`): per piece, the parts
    /// (host address, offset in the call, bytes) that tile it; empty for a piece through the ring
    /// (and for every piece of a call without registered runs).
    registered: Vec<Vec<(usize, u64, usize)>>,
}

impl QueuedCopies {
    /// A call of `len` bytes through a ring of `groups` groups of `piece_slots` slots.
    pub(super) fn new(len: u64, piece_slots: u32, groups: u32) -> QueuedCopies {
        QueuedCopies { len, piece_slots, done: (0..groups).map(|_| AtomicU32::new(0)).collect(), registered: Vec::new() }
    }

    /// Takes the pieces (of slots of `slot_bytes`) that lie wholly in `runs` (`RegisteredRuns`)
    /// from registered memory instead of the ring. Returns how many pieces that is.
    pub(super) fn take_from_registered(&mut self, runs: &[(u64, usize, usize)], slot_bytes: u32) -> u64 {
        let piece_bytes = self.piece_bytes(slot_bytes);
        let mut taken = 0;
        self.registered = (0..self.pieces(slot_bytes))
            .map(|j| {
                let (start, end) = (j * piece_bytes, ((j + 1) * piece_bytes).min(self.len));
                let mut parts = Vec::new();
                let mut covered = start;
                for &(at, len, host) in runs {
                    let run_end = at + len as u64;
                    if run_end <= covered || at >= end {
                        continue;
                    }
                    if at > covered {
                        break; // a gap: the piece goes through the ring
                    }
                    let part_end = run_end.min(end);
                    parts.push((host + (covered - at) as usize, covered, (part_end - covered) as usize));
                    covered = part_end;
                    if covered == end {
                        break;
                    }
                }
                if covered == end {
                    taken += 1;
                    parts
                } else {
                    Vec::new()
                }
            })
            .collect();
        taken
    }

    /// True when piece `j` is copied from registered memory.
    pub(super) fn is_registered(&self, j: u64) -> bool {
        self.registered.get(j as usize).is_some_and(|parts| !parts.is_empty())
    }

    /// The slots of the ring the call uses (a write uses part of it): its tasks' chunk `i` lies
    /// in slot `i % slots`, which is where piece `i / piece_slots`'s group puts it.
    pub(super) fn slots(&self) -> u32 {
        self.piece_slots * self.groups()
    }

    pub(super) fn piece_bytes(&self, slot_bytes: u32) -> u64 {
        self.piece_slots as u64 * slot_bytes as u64
    }

    pub(super) fn pieces(&self, slot_bytes: u32) -> u64 {
        self.len.div_ceil(self.piece_bytes(slot_bytes))
    }

    pub(super) fn groups(&self) -> u32 {
        self.done.len() as u32
    }

    /// The operations queued on the caller's stream for the call in `direction` (`In`: the ring
    /// to the buffer; `Out`: the buffer to the ring), through slots of `slot_bytes`:
    /// - the stream stores `started`; the relay waiter then hands the call to the relay pool;
    /// - `In`: for piece `j` of group `g = j % groups`, it waits for the group's header to reach
    ///   `j + 1` (its tasks filled it), copies it to the buffer, and stores `progress = j + 1`
    ///   (the group is free for piece `j + groups`); a piece in registered memory is copied from
    ///   there at once, and its group is left as it is;
    /// - `Out`: for piece `j`, once the tasks wrote piece `j - groups` of the group to the file
    ///   (header `j - groups + 1`), it copies the buffer's piece into the group and stores
    ///   `progress = j + 1` (the tasks may write it);
    /// - at the end it waits for `stop` (the call is settled, so that later work on the stream
    ///   sees it done) and stores `exited` (the control block and ring may be reused).
    pub(super) fn stream_ops(&self, direction: RelayKernel, slot_bytes: u32) -> Vec<StreamOp> {
        use crate::sys::cuda::relay::{W_EXITED, W_HEADERS, W_PROGRESS, W_STARTED, W_STOP};
        let (len, groups) = (self.len, self.groups());
        let piece_bytes = self.piece_bytes(slot_bytes);
        let pieces = self.pieces(slot_bytes);
        let mut ops = Vec::with_capacity(3 * pieces as usize + 3);
        ops.push(StreamOp::Write { word: W_STARTED, value: 1 });
        for j in 0..pieces {
            let group = (j % groups as u64) as usize;
            let (ring_offset, buffer_offset) = (group * piece_bytes as usize, j * piece_bytes);
            let n = (len - buffer_offset).min(piece_bytes) as usize;
            let header = W_HEADERS + 2 * group;
            match direction {
                RelayKernel::In if self.is_registered(j) => {
                    let parts = &self.registered[j as usize];
                    ops.extend(parts.iter().map(|&(host, buffer_offset, len)| StreamOp::FromRegistered { host, buffer_offset, len }));
                }
                RelayKernel::In => {
                    ops.push(StreamOp::Wait { word: header, value: j as u32 + 1 });
                    ops.push(StreamOp::ToBuffer { ring_offset, buffer_offset, len: n });
                }
                _ => {
                    if j >= groups as u64 {
                        ops.push(StreamOp::Wait { word: header, value: (j - groups as u64) as u32 + 1 });
                    }
                    ops.push(StreamOp::ToRing { ring_offset, buffer_offset, len: n });
                }
            }
            ops.push(StreamOp::Write { word: W_PROGRESS, value: j as u32 + 1 });
        }
        ops.push(StreamOp::Wait { word: W_STOP, value: 1 });
        ops.push(StreamOp::Write { word: W_EXITED, value: 1 });
        ops
    }
}

impl Relay {
    /// A relay of queued copies for a call of `len` bytes in `direction` through a ring of
    /// `slot_bytes` slots used as `(piece_slots, groups)` (`shape`), where a read takes the
    /// pieces that lie wholly in `registered`'s runs from there; and the operations to queue on
    /// its stream (`QueuedCopies::stream_ops`).
    #[allow(clippy::too_many_arguments)] // the call, its ring, its stream and its registered runs
    pub(super) fn with_queued_copies(
        control: Control,
        direction: RelayKernel,
        len: u64,
        (piece_slots, groups): (u32, u32),
        slot_bytes: u32,
        key: StreamKey,
        buffer: u64,
        in_flight: Option<StreamInFlight>,
        registered: Option<RegisteredRuns>,
    ) -> (Relay, Vec<StreamOp>) {
        let mut copies = QueuedCopies::new(len, piece_slots, groups);
        let registered = registered.filter(|r| direction == RelayKernel::In && copies.take_from_registered(&r.runs, slot_bytes) > 0);
        let (ops, slots) = (copies.stream_ops(direction, slot_bytes), copies.slots());
        let mut relay = Relay::new(control, direction, Some(copies), slot_bytes, slots, key, buffer, in_flight);
        if let Some(registered) = registered {
            relay.registered_changes = Some(registered.changes);
            relay.keep = Some(registered.keep);
        }
        (relay, ops)
    }

    /// `run_task` for queued copies: task `index` (at `at_slot` in the ring; `chunk` in the call)
    /// belongs to piece `index / piece_slots`; the task that finishes its piece publishes it. A
    /// task of a piece copied from registered memory moves nothing: `registered` counts it.
    pub(super) fn run_queued_task(
        &self,
        q: &QueuedCopies,
        index: u64,
        (chunk, at_slot): (Chunk, Chunk),
        move_bytes: impl FnOnce(Chunk) -> Result<usize>,
        registered: impl FnOnce(Chunk) -> Result<usize>,
    ) -> Result<usize> {
        let piece = index / q.piece_slots as u64;
        let group = (piece % q.groups() as u64) as u32;
        let pieces = q.pieces(self.slot_bytes);
        // A read takes only what the file held once the stream reached the call (`go`).
        let read_want = self.read_len().saturating_sub((index * self.slot_bytes as u64) as usize).min(chunk.len);
        if self.kernel == RelayKernel::In && q.is_registered(piece) {
            // The engine checked that the windows still hold the file's bytes (they lie in the
            // file as it was at the call, which is still its size).
            let counted = registered(Chunk { len: read_want, ..chunk }).inspect_err(|_| self.abort())?;
            // A read settles once its last byte is in device memory.
            if piece + 1 == pieces {
                self.wait_for_kernel(pieces);
            }
            return Ok(counted);
        }
        let moved = match self.kernel {
            RelayKernel::In => {
                // The group is free once the stream copied the piece that used it before.
                if piece >= q.groups() as u64 && !self.wait_for_kernel(piece - q.groups() as u64 + 1) {
                    return Ok(0);
                }
                // The rest of the slot becomes zeros, which the queued copy moves.
                let moved = if read_want == 0 { 0 } else { move_bytes(Chunk { len: read_want, ..at_slot }).inspect_err(|_| self.abort())? };
                if moved < at_slot.len {
                    // SAFETY: the task's part of its slot, inside the ring, which only this task
                    // writes until it publishes the piece.
                    unsafe { std::ptr::write_bytes(self.slots_base().add(at_slot.buf_offset + moved), 0, at_slot.len - moved) };
                }
                moved
            }
            _ => {
                if !self.wait_for_kernel(piece + 1) {
                    return Ok(0);
                }
                move_bytes(at_slot).inspect_err(|_| self.abort())?
            }
        };
        let piece_start = piece * q.piece_bytes(self.slot_bytes);
        let tasks_in_piece = (q.len - piece_start).min(q.piece_bytes(self.slot_bytes)).div_ceil(self.slot_bytes as u64) as u32;
        let group_done = &q.done[group as usize];
        if group_done.fetch_add(1, Ordering::AcqRel) + 1 == tasks_in_piece {
            group_done.store(0, Ordering::Release);
            self.control.publish_piece(group, piece);
            // A read settles once its last byte is in device memory.
            if self.kernel == RelayKernel::In && piece + 1 == pieces {
                self.wait_for_kernel(pieces);
            }
        }
        Ok(moved)
    }
}
