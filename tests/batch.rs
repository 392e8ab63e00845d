//! Batches through the Rust API on the POSIX route (host memory): every entry's bytes against
//! the file with poisoned guards around every buffer, mixed sizes and directions, end of file,
//! failing entries beside good ones (a closed handle, a write to an "r" handle, a range past
//! `off_t`, EIO through the fault shim), the in-flight limit, cancel while running, a batch
//! dropped with entries in flight, a batch across 1,000 files, exit with a batch in flight, and
//! the counters (a submission is one call per direction, on each handle and process-wide). The tests run
//! one at a time: they read the process-wide counters.

mod common;

use common::{POISON, random_bytes};
use gdsroute::batch::{BATCH_MAX_ENTRIES, BATCH_READ, BatchEntry};
use gdsroute::{Batch, BatchCompletion, BatchOp, Direction, Error, File, Pool, Status, counters, settings};
use std::collections::HashMap;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
const GUARD: usize = 64;
const MIB: usize = 1 << 20;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn open(path: &Path, flags: &str) -> File {
    File::open(path.as_os_str().as_encoded_bytes(), flags, 0o644, None).unwrap()
}

/// A buffer of `size` bytes between two poisoned guards.
struct Guarded(Vec<u8>);

impl Guarded {
    fn new(size: usize) -> Guarded {
        Guarded(vec![POISON; size + 2 * GUARD])
    }
    fn filled(data: &[u8]) -> Guarded {
        let mut g = Guarded::new(data.len());
        g.0[GUARD..GUARD + data.len()].copy_from_slice(data);
        g
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0[GUARD..].as_mut_ptr()
    }
    fn body(&self) -> &[u8] {
        &self.0[GUARD..self.0.len() - GUARD]
    }
    /// Nothing outside the first `n` bytes of the body was written.
    fn untouched_after(&self, n: usize) -> bool {
        self.0[..GUARD].iter().all(|&b| b == POISON) && self.0[GUARD + n..].iter().all(|&b| b == POISON)
    }
}

/// Waits for all `n` completions, by cookie.
fn wait_all(batch: &Batch, n: usize) -> HashMap<u64, BatchCompletion> {
    let mut done = HashMap::new();
    while done.len() < n {
        for c in batch.wait(1, 64, Some(Duration::from_secs(60))) {
            assert!(done.insert(c.cookie, c).is_none(), "a cookie completed twice");
        }
    }
    assert_eq!(batch.in_flight(), 0);
    done
}

#[test]
fn mixed_reads_and_writes_deliver_every_byte_and_nothing_outside() {
    let _serial = serial();
    settings::set_task_size(64 << 10).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(4 * MIB + 3 * 4096 + 17, 1);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let reader = open(&src, "r");
    let out_path = dir.path().join("out.bin");
    let writer = open(&out_path, "w+");
    let len = data.len() as u64;
    // (size, offset) of reads: the issue's sizes, at the start, inside, across and past the end.
    let reads: Vec<(usize, u64)> = vec![(0, 0), (1, 0), (4095, 1), (4 * MIB + 1, 4096), (4 * MIB + 1, 0), (4095, len - 100), (1, len), (4 * MIB + 1, len + 5), (64 << 10, 4095)];
    let mut bufs: Vec<Guarded> = reads.iter().map(|&(size, _)| Guarded::new(size)).collect();
    // Writes: pieces of `data` at their own offsets, disjoint, mixed sizes.
    let writes: Vec<(usize, u64)> = vec![(0, 0), (1, 0), (4095, 1), (4 * MIB + 1, 4096)];
    let mut wbufs: Vec<Guarded> = writes.iter().map(|&(size, off)| Guarded::filled(&data[off as usize..off as usize + size])).collect();
    let mut ops = Vec::new();
    for (i, (&(size, offset), buf)) in reads.iter().zip(bufs.iter_mut()).enumerate() {
        ops.push(BatchOp { file: &reader, buf: buf.ptr(), size, offset, direction: Direction::Read, cookie: i as u64 });
    }
    for (i, (&(size, offset), buf)) in writes.iter().zip(wbufs.iter_mut()).enumerate() {
        ops.push(BatchOp { file: &writer, buf: buf.ptr(), size, offset, direction: Direction::Write, cookie: 100 + i as u64 });
    }
    let before = counters::process_counters();
    let batch = Batch::new(ops.len()).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    let done = wait_all(&batch, ops.len());
    for (i, &(size, offset)) in reads.iter().enumerate() {
        let start = (offset as usize).min(data.len());
        let expect = (data.len() - start).min(size);
        let got = done[&(i as u64)].result.as_ref().unwrap_or_else(|e| panic!("read {i}: {e}"));
        assert_eq!(*got, expect, "read {i} ({size} at {offset})");
        assert!(bufs[i].body()[..expect] == data[start..start + expect], "read {i}: bytes differ");
        assert!(bufs[i].untouched_after(expect), "read {i}: written outside its range");
    }
    for (i, &(size, _)) in writes.iter().enumerate() {
        assert_eq!(*done[&(100 + i as u64)].result.as_ref().unwrap(), size, "write {i}");
        assert!(wbufs[i].untouched_after(size));
    }
    let written = std::fs::read(&out_path).unwrap();
    assert_eq!(written.len(), 4096 + 4 * MIB + 1);
    assert!(written == data[..written.len()], "the written file differs");
    // A submission is one call per direction, on each handle and process-wide; its entries' tasks
    // and bytes are the handles'.
    let (r, w) = (reader.stats(), writer.stats());
    assert_eq!((r.calls, r.calls_failed, w.write_calls, w.write_calls_failed), (1, 0, 1, 0));
    assert_eq!((r.write_calls, w.calls), (0, 0));
    assert_eq!(r.bytes_requested, reads.iter().map(|&(size, _)| size as u64).sum::<u64>());
    let expect_read: u64 = reads.iter().map(|&(size, offset)| (data.len() as u64).saturating_sub(offset).min(size as u64)).sum();
    assert_eq!(r.bytes_read, expect_read);
    assert!(r.posix_tasks >= 2 * 65, "entries above the task size run as several tasks: {}", r.posix_tasks);
    let after = counters::process_counters();
    assert_eq!((after.calls - before.calls, after.write_calls - before.write_calls), (1, 1));
    assert_eq!(after.bytes_read - before.bytes_read, expect_read);
    assert_eq!(after.calls_short - before.calls_short, 1, "the batch's reads came back short of what was asked");
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}

#[test]
fn failing_entries_complete_with_their_status_beside_good_ones() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(100_000, 2);
    let path = dir.path().join("f.bin");
    std::fs::write(&path, &data).unwrap();
    let good = open(&path, "r");
    let closed = open(&path, "r");
    closed.close();
    let mut bufs: Vec<Guarded> = (0..5).map(|_| Guarded::new(data.len())).collect();
    let ops = [
        BatchOp { file: &good, buf: bufs[0].ptr(), size: data.len(), offset: 0, direction: Direction::Read, cookie: 0 },
        BatchOp { file: &closed, buf: bufs[1].ptr(), size: 10, offset: 0, direction: Direction::Read, cookie: 1 },
        BatchOp { file: &good, buf: bufs[2].ptr(), size: 10, offset: 0, direction: Direction::Write, cookie: 2 },
        BatchOp { file: &good, buf: bufs[3].ptr(), size: 10, offset: u64::MAX - 3, direction: Direction::Read, cookie: 3 },
        BatchOp { file: &good, buf: bufs[4].ptr(), size: 1000, offset: 99_500, direction: Direction::Read, cookie: 4 },
    ];
    let batch = Batch::new(8).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    let done = wait_all(&batch, ops.len());
    assert_eq!(*done[&0].result.as_ref().unwrap(), data.len());
    assert!(bufs[0].body() == &data[..]);
    assert!(matches!(done[&1].result, Err(Error::ClosedHandle { .. })), "{:?}", done[&1].result);
    let Err(e) = &done[&2].result else { panic!("a write to an \"r\" handle succeeded") };
    assert_eq!(e.os_error(), Some(libc::EBADF), "{e}");
    assert!(matches!(done[&3].result, Err(Error::Overflow(_))), "{:?}", done[&3].result);
    assert_eq!(*done[&4].result.as_ref().unwrap(), 500);
    assert!(bufs[4].body()[..500] == data[99_500..]);
    for (i, buf) in bufs.iter().enumerate().take(4).skip(1) {
        assert!(buf.untouched_after(0), "failed entry {i} wrote its buffer");
    }
    assert!(bufs[4].untouched_after(500));
    // One read call on the handle, failed since one of its read entries failed; one write call.
    let s = good.stats();
    assert_eq!((s.calls, s.calls_failed, s.write_calls, s.write_calls_failed), (1, 1, 1, 1));
    assert_eq!(s.bytes_read, data.len() as u64 + 500);
}

#[test]
fn more_entries_than_the_batch_takes_are_refused_whole() {
    let _serial = serial();
    assert!(matches!(Batch::new(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(Batch::new(gdsroute::batch::BATCH_MAX_ENTRIES + 1), Err(Error::InvalidArgument(_))));
    let data = random_bytes(8192, 3);
    let tmp = common::temp_file_in(None, &data);
    let file = open(tmp.path(), "r");
    let mut bufs: Vec<Guarded> = (0..6).map(|_| Guarded::new(4096)).collect();
    let ops: Vec<BatchOp> = bufs.iter_mut().enumerate().map(|(i, b)| BatchOp { file: &file, buf: b.ptr(), size: 4096, offset: 0, direction: Direction::Read, cookie: i as u64 }).collect();
    let batch = Batch::new(4).unwrap();
    let e = unsafe { batch.submit(&ops[..5]) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("at most 4"), "{e}");
    assert_eq!(batch.in_flight(), 0, "nothing of a refused submission is in flight");
    assert_eq!(file.stats().calls, 0, "nothing of it ran");
    unsafe { batch.submit(&ops[..3]) }.unwrap();
    assert!(unsafe { batch.submit(&ops[3..5]) }.is_err());
    unsafe { batch.submit(&ops[3..4]) }.unwrap();
    // A poll returns what is there; min above what is in flight waits for those in flight.
    let mut got = batch.wait(10, 2, None);
    assert_eq!(got.len(), 2, "max bounds what is returned");
    got.extend(batch.wait(10, 10, None));
    assert_eq!(got.len(), 4);
    assert!(batch.wait(1, 1, Some(Duration::ZERO)).is_empty(), "nothing in flight: a poll returns none");
    assert!(batch.wait(1, 1, Some(Duration::from_millis(10))).is_empty());
    unsafe { batch.submit(&ops[4..6]) }.unwrap();
    assert_eq!(wait_all(&batch, 2).len(), 2);
    for b in &bufs {
        assert!(b.body() == &data[..4096]);
    }
}

// The C ABI's batch calls, as include/gdsroute.h declares them; `Batch` and `File` cross only as
// pointers, opaque as in C.
#[allow(improper_ctypes)]
unsafe extern "C" {
    fn gdsroute_batch_create(max_entries: usize, batch: *mut *mut Batch) -> Status;
    fn gdsroute_batch_submit(batch: *mut Batch, entries: *const BatchEntry, count: usize) -> Status;
    fn gdsroute_batch_free(batch: *mut Batch);
    fn gdsroute_last_error_message(buf: *mut c_char, buf_len: usize) -> usize;
}

fn last_error_message() -> String {
    let mut buf = [0 as c_char; 512];
    let n = unsafe { gdsroute_last_error_message(buf.as_mut_ptr(), buf.len()) }.min(buf.len() - 1);
    String::from_utf8_lossy(&buf[..n].iter().map(|&c| c as u8).collect::<Vec<u8>>()).into_owned()
}

#[test]
fn a_count_past_the_room_left_is_refused_before_the_entries_are_read() {
    let _serial = serial();
    let data = random_bytes(4096, 8);
    let tmp = common::temp_file_in(None, &data);
    let file = open(tmp.path(), "r");
    let mut buf = Guarded::new(4096);
    let entry = BatchEntry { file: &file, buf: buf.ptr().cast(), size: 4096, file_offset: 0, opcode: BATCH_READ, reserved: 0, cookie: 1 };
    let mut batch: *mut Batch = std::ptr::null_mut();
    assert_eq!(unsafe { gdsroute_batch_create(4, &mut batch) }, Status::Ok);
    // One entry in memory, counts that claim more: none may be read, nor an array of them sized.
    for count in [5, BATCH_MAX_ENTRIES + 1, 1 << 40, usize::MAX / std::mem::size_of::<BatchEntry>() + 1, usize::MAX] {
        assert_eq!(unsafe { gdsroute_batch_submit(batch, &entry, count) }, Status::InvalidArgument, "count {count}");
        let message = last_error_message();
        assert!(message.contains(&format!("{count} entries submitted with 0 in flight")) && message.contains("at most 4"), "{message}");
    }
    assert_eq!(file.stats().calls, 0, "nothing ran");
    // What is left of the room counts: 3 of 4 are taken.
    let three = [entry; 3];
    assert_eq!(unsafe { gdsroute_batch_submit(batch, three.as_ptr(), 3) }, Status::Ok);
    assert_eq!(unsafe { gdsroute_batch_submit(batch, &entry, 1 << 40) }, Status::InvalidArgument);
    assert!(last_error_message().contains("with 3 in flight"), "{}", last_error_message());
    unsafe { gdsroute_batch_free(batch) };
}

#[test]
fn refused_entries_are_named_by_their_index() {
    let _serial = serial();
    let tmp = common::temp_file_in(None, &[7u8; 100]);
    let file = open(tmp.path(), "r");
    let mut buf = Guarded::new(100);
    let good = BatchEntry { file: &file, buf: buf.ptr().cast(), size: 100, file_offset: 0, opcode: BATCH_READ, reserved: 0, cookie: 1 };
    let mut batch: *mut Batch = std::ptr::null_mut();
    assert_eq!(unsafe { gdsroute_batch_create(8, &mut batch) }, Status::Ok);
    /// Makes an entry bad.
    type Spoil = fn(&mut BatchEntry);
    let cases: [(usize, Spoil, Status, &str); 4] = [
        (2, |e| e.file = std::ptr::null(), Status::NullArgument, "entries[2]: argument `file`"),
        (1, |e| e.buf = std::ptr::null_mut(), Status::NullArgument, "entries[1]: argument `buf`"),
        (3, |e| e.opcode = 7, Status::InvalidEnum, "entries[3]: invalid value 7 for opcode"),
        (4, |e| e.reserved = 1, Status::InvalidArgument, "entries[4]: `reserved` is 1"),
    ];
    for (index, spoil, status, name) in cases {
        let mut entries = [good; 5];
        spoil(&mut entries[index]);
        assert_eq!(unsafe { gdsroute_batch_submit(batch, entries.as_ptr(), entries.len()) }, status, "{name}");
        let message = last_error_message();
        assert!(message.contains(name), "{name}: {message}");
    }
    assert_eq!(file.stats().calls, 0, "nothing was submitted");
    assert!(buf.untouched_after(0));
    unsafe { gdsroute_batch_free(batch) };
}

#[test]
fn cancel_stops_the_entries_not_started_and_lets_the_running_ones_finish() {
    let _serial = serial();
    settings::set_task_size(4096).unwrap();
    let data = random_bytes(16 * MIB, 4);
    let tmp = common::temp_file_in(None, &data);
    let file = open(tmp.path(), "r");
    // One worker: the first entry (4,096 tasks) is running when the cancel comes.
    let pool = Pool::new(1, None).unwrap();
    file.set_pool(Some(&pool)).unwrap();
    let mut big = Guarded::new(data.len());
    let mut smalls: Vec<Guarded> = (0..50).map(|_| Guarded::new(4096)).collect();
    let mut ops = vec![BatchOp { file: &file, buf: big.ptr(), size: data.len(), offset: 0, direction: Direction::Read, cookie: 1000 }];
    ops.extend(smalls.iter_mut().enumerate().map(|(i, b)| BatchOp { file: &file, buf: b.ptr(), size: 4096, offset: 4096 * i as u64, direction: Direction::Read, cookie: i as u64 }));
    let batch = Batch::new(64).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    // Wait until the big entry has started (a task ran), then cancel.
    while file.stats().posix_tasks == 0 {
        std::thread::yield_now();
    }
    let cancelled = batch.cancel();
    let done = wait_all(&batch, ops.len());
    assert_eq!(*done[&1000].result.as_ref().expect("the started entry runs to its end"), data.len());
    assert!(big.body() == &data[..]);
    let n_cancelled = done.values().filter(|c| matches!(c.result, Err(Error::Canceled(_)))).count();
    assert_eq!(n_cancelled, cancelled);
    assert!(cancelled > 0, "the 50 entries queued behind 4,096 tasks on one worker were all done before the cancel");
    for (i, b) in smalls.iter().enumerate() {
        match &done[&(i as u64)].result {
            Ok(n) => assert!(*n == 4096 && b.body() == &data[4096 * i..4096 * (i + 1)]),
            Err(Error::Canceled(_)) => assert!(b.untouched_after(0), "cancelled entry {i} wrote its buffer"),
            Err(e) => panic!("entry {i}: {e}"),
        }
    }
    assert_eq!(batch.cancel(), 0, "nothing left to cancel");
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}

#[test]
fn dropping_a_batch_with_entries_in_flight_waits_for_the_running_ones() {
    let _serial = serial();
    settings::set_task_size(64 << 10).unwrap();
    let data = random_bytes(8 * MIB, 5);
    let tmp = common::temp_file_in(None, &data);
    let file = open(tmp.path(), "r");
    let mut bufs: Vec<Guarded> = (0..8).map(|_| Guarded::new(MIB)).collect();
    let ops: Vec<BatchOp> = bufs.iter_mut().enumerate().map(|(i, b)| BatchOp { file: &file, buf: b.ptr(), size: MIB, offset: (MIB * i) as u64, direction: Direction::Read, cookie: i as u64 }).collect();
    let batch = Batch::new(8).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    drop(batch);
    // Nothing touches the buffers once the drop returned: each is either whole or untouched.
    let snapshot: Vec<Vec<u8>> = bufs.iter().map(|b| b.0.clone()).collect();
    std::thread::sleep(Duration::from_millis(50));
    for (i, b) in bufs.iter().enumerate() {
        assert!(b.0 == snapshot[i], "buffer {i} changed after the batch was dropped");
        assert!(b.untouched_after(MIB));
    }
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}

/// Raises the soft limit on open files to the hard one (a test of 1,000 handles).
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim.rlim_cur = lim.rlim_max;
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    lim.rlim_cur
}

#[test]
fn a_batch_across_a_thousand_files() {
    let _serial = serial();
    let n = if raise_nofile() >= 1100 { 1000 } else { 400 };
    let dir = tempfile::tempdir().unwrap();
    let contents: Vec<Vec<u8>> = (0..n).map(|i| random_bytes((i * 37) % 20_000, 100 + i as u64)).collect();
    let paths: Vec<PathBuf> = (0..n).map(|i| dir.path().join(format!("f{i:04}.bin"))).collect();
    for (p, c) in paths.iter().zip(&contents) {
        std::fs::write(p, c).unwrap();
    }
    let files: Vec<File> = paths.iter().map(|p| open(p, "r")).collect();
    let mut bufs: Vec<Guarded> = contents.iter().map(|c| Guarded::new(c.len() + 10)).collect();
    let ops: Vec<BatchOp> = files.iter().zip(bufs.iter_mut()).enumerate().map(|(i, (f, b))| BatchOp { file: f, buf: b.ptr(), size: contents[i].len() + 10, offset: 0, direction: Direction::Read, cookie: i as u64 }).collect();
    let before = counters::process_counters();
    let batch = Batch::new(n).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    let done = wait_all(&batch, n);
    for i in 0..n {
        assert_eq!(*done[&(i as u64)].result.as_ref().unwrap(), contents[i].len(), "file {i}");
        assert!(bufs[i].body()[..contents[i].len()] == contents[i][..], "file {i}: bytes differ");
        assert!(bufs[i].untouched_after(contents[i].len()));
        assert_eq!(files[i].stats().calls, 1);
    }
    let after = counters::process_counters();
    assert_eq!(after.calls - before.calls, 1, "one submission, one call");
    assert_eq!(after.bytes_read - before.bytes_read, contents.iter().map(|c| c.len() as u64).sum::<u64>());
}

#[test]
fn eio_in_one_entry_under_the_fault_shim() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(shim) = common::build_fault_shim(tmp.path()) else { return };
    let env = [
        ("LD_PRELOAD", shim.into_os_string()),
        ("FAULT_EIO_AT", (MIB + 1).to_string().into()),
        ("FAULT_PATH_CONTAINS", "eio-target".into()),
        ("GDSROUTE_BATCH_TEST_DIR", tmp.path().into()),
    ];
    common::run_ignored_test("child_with_a_failing_entry", &env);
}

#[test]
#[ignore = "run by eio_in_one_entry_under_the_fault_shim with the fault shim preloaded"]
fn child_with_a_failing_entry() {
    let dir = PathBuf::from(std::env::var("GDSROUTE_BATCH_TEST_DIR").unwrap());
    let data = random_bytes(4 * MIB, 6);
    let (bad_path, good_path) = (dir.join("eio-target.bin"), dir.join("good.bin"));
    std::fs::write(&bad_path, &data).unwrap();
    std::fs::write(&good_path, &data).unwrap();
    settings::set_task_size(MIB as u64).unwrap();
    let (bad, good) = (open(&bad_path, "r"), open(&good_path, "r"));
    let mut bufs: Vec<Guarded> = (0..3).map(|_| Guarded::new(data.len())).collect();
    let ops = [
        BatchOp { file: &good, buf: bufs[0].ptr(), size: data.len(), offset: 0, direction: Direction::Read, cookie: 0 },
        BatchOp { file: &bad, buf: bufs[1].ptr(), size: data.len(), offset: 0, direction: Direction::Read, cookie: 1 },
        BatchOp { file: &good, buf: bufs[2].ptr(), size: data.len(), offset: 0, direction: Direction::Read, cookie: 2 },
    ];
    let batch = Batch::new(3).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    let done = wait_all(&batch, 3);
    let Err(e) = &done[&1].result else { panic!("the entry over the EIO offset succeeded") };
    assert_eq!(e.os_error(), Some(libc::EIO), "{e}");
    assert!(e.to_string().contains("eio-target"), "{e}");
    for i in [0, 2] {
        assert_eq!(*done[&i].result.as_ref().unwrap(), data.len());
        assert!(bufs[i as usize].body() == &data[..]);
    }
    assert!(bufs[1].0[..GUARD].iter().all(|&b| b == POISON) && bufs[1].0[GUARD + data.len()..].iter().all(|&b| b == POISON));
    assert_eq!((bad.stats().calls_failed, good.stats().calls_failed), (1, 0));
}

/// Runs `child_leaves_a_batch_in_flight` in a new process in `mode`, which must exit with status
/// 0 within 60 s (never a crash or a hang), having submitted its batch.
fn exit_with_a_batch_in_flight(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_leaves_a_batch_in_flight", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("GDSROUTE_BATCH_TEST_DIR", dir.path())
        .env("GDSROUTE_BATCH_EXIT_MODE", mode)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{mode}: the process did not exit within 60 s with a batch in flight");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{mode}: {status:?}\n{out}");
    assert!(out.contains("batch submitted"), "{mode}: the child did not get to its batch\n{out}");
}

#[test]
fn exit_with_a_batch_in_flight_is_clean() {
    exit_with_a_batch_in_flight("exit");
}

#[test]
fn returning_from_main_with_a_batch_leaked_in_flight_is_clean() {
    exit_with_a_batch_in_flight("leak");
}

#[test]
#[ignore = "run by the exit tests above in a process of its own"]
fn child_leaves_a_batch_in_flight() {
    let dir = PathBuf::from(std::env::var("GDSROUTE_BATCH_TEST_DIR").unwrap());
    let data = random_bytes(64 * MIB, 7);
    let path = dir.join("data.bin");
    std::fs::write(&path, &data).unwrap();
    let file = open(&path, "r");
    // 1,024 entries of 64 KiB on one worker: most are still queued at exit.
    let pool = Pool::new(1, None).unwrap();
    file.set_pool(Some(&pool)).unwrap();
    let buf: &'static mut [u8] = Box::leak(vec![0u8; data.len()].into_boxed_slice());
    let ops: Vec<BatchOp> = (0..1024).map(|i| BatchOp { file: &file, buf: buf[i * (64 << 10)..].as_mut_ptr(), size: 64 << 10, offset: (i * (64 << 10)) as u64, direction: Direction::Read, cookie: i as u64 }).collect();
    let batch = Batch::new(ops.len()).unwrap();
    unsafe { batch.submit(&ops) }.unwrap();
    println!("batch submitted");
    match std::env::var("GDSROUTE_BATCH_EXIT_MODE").unwrap().as_str() {
        "exit" => unsafe { libc::exit(0) },
        // The batch, its handle and the buffer are never freed: the process ends with the
        // entries still running on the pool.
        _ => {
            std::mem::forget(batch);
            std::mem::forget(file);
            std::mem::forget(pool);
        }
    }
}
