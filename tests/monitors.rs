//! Monitors: one observation per call (synchronous, parallel, at end of file, failed before it
//! was routed) and, when asked, one per task, with the call's file, range, bytes, route, reason
//! and times; removal from inside a callback and while another thread's callback runs; and the
//! cost per call with a monitor and without (a figure, `--ignored`). Monitors are process-wide,
//! so the tests hold `LOCK`.

mod common;

use gdsroute::monitor::{self, Observation, ObservationKind, ObservedMemory, ObservedPosixReason, ObservedRoute};
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

static LOCK: Mutex<()> = Mutex::new(());

/// What a test keeps of an observation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    kind: u32,
    direction: u32,
    path: Option<String>,
    file_offset: u64,
    size: u64,
    bytes: u64,
    buffer_offset: u64,
    memory: u32,
    route: u32,
    reason: u32,
    ok: u32,
    ordered_times: bool,
}

fn keep(o: &Observation) -> Seen {
    Seen {
        kind: o.kind,
        direction: o.direction,
        path: (!o.path.is_null()).then(|| unsafe { CStr::from_ptr(o.path) }.to_string_lossy().into_owned()),
        file_offset: o.file_offset,
        size: o.size,
        bytes: o.bytes,
        buffer_offset: o.buffer_offset,
        memory: o.memory,
        route: o.route,
        reason: o.posix_reason,
        ok: o.ok,
        ordered_times: o.start_ns <= o.end_ns && o.start_ns > 0 && o.struct_size as usize == std::mem::size_of::<Observation>(),
    }
}

fn watch(tasks: bool) -> (u64, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let id = monitor::add(move |o| sink.lock().unwrap().push(keep(o)), tasks);
    (id, seen)
}

#[test]
fn every_call_is_observed_once_with_its_route_and_bytes() {
    let _lock = LOCK.lock().unwrap();
    let data = common::random_bytes((9 << 20) + 5, 101);
    let tmp = common::temp_file_in(None, &data);
    let path = tmp.path().to_str().unwrap().to_string();
    let file = gdsroute::File::open(path.as_bytes(), "r+", 0, None).unwrap();
    let (id, seen) = watch(false);
    let mut buf = vec![0u8; data.len()];
    assert_eq!(file.read_into(&mut buf[..1000], 7).unwrap(), 1000);
    assert_eq!(unsafe { file.pread_raw(buf.as_mut_ptr(), data.len(), 0) }.unwrap().wait().unwrap(), data.len());
    assert_eq!(unsafe { file.pread_raw(buf.as_mut_ptr(), 100, data.len() as u64 + 1) }.unwrap().wait().unwrap(), 0, "past the end");
    assert_eq!(file.write_from(&data[..4096], 3).unwrap(), 4096);
    let closed = gdsroute::File::open(path.as_bytes(), "r", 0, None).unwrap();
    closed.close();
    assert!(closed.read_into(&mut buf[..10], 0).is_err());
    assert!(monitor::remove(id));
    assert!(!monitor::remove(id), "removed once");
    file.read_into(&mut buf[..10], 0).unwrap();

    let seen = seen.lock().unwrap().clone();
    let (call, read, write) = (ObservationKind::Call as u32, 0, 1);
    let (host, posix, none) = (ObservedMemory::Host as u32, ObservedRoute::Posix as u32, ObservedRoute::None as u32);
    let host_reason = ObservedPosixReason::HostMemory as u32;
    let p = Some(path.clone());
    let expect = |direction, file_offset, size, bytes, memory, route, reason, ok, path: Option<String>| Seen {
        kind: call, direction, path, file_offset, size, bytes, buffer_offset: 0, memory, route, reason, ok, ordered_times: true,
    };
    assert_eq!(
        seen,
        vec![
            expect(read, 7, 1000, 1000, host, posix, host_reason, 1, p.clone()),
            expect(read, 0, data.len() as u64, data.len() as u64, host, posix, host_reason, 1, p.clone()),
            expect(read, data.len() as u64 + 1, 100, 0, ObservedMemory::Unknown as u32, none, 0, 1, p.clone()),
            expect(write, 3, 4096, 4096, host, posix, host_reason, 1, p.clone()),
            expect(read, 0, 10, 0, ObservedMemory::Unknown as u32, none, 0, 0, None),
        ],
        "in call order, the closed handle's read failed before it was routed; nothing after removal"
    );
}

#[test]
fn with_tasks_each_task_is_observed_beside_its_call() {
    let _lock = LOCK.lock().unwrap();
    let data = common::random_bytes((5 << 20) + 3, 102);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    gdsroute::settings::set_task_size(1 << 20).unwrap();
    let (id, seen) = watch(true);
    let mut buf = vec![0u8; data.len()];
    assert_eq!(unsafe { file.pread_raw(buf.as_mut_ptr(), data.len(), 0) }.unwrap().wait().unwrap(), data.len());
    monitor::remove(id);
    gdsroute::settings::set_task_size(gdsroute::settings::DEFAULT_TASK_SIZE).unwrap();
    assert_eq!(buf, data);
    let seen = seen.lock().unwrap().clone();
    let mut tasks: Vec<&Seen> = seen.iter().filter(|s| s.kind == ObservationKind::Task as u32).collect();
    tasks.sort_by_key(|s| s.file_offset);
    assert_eq!(tasks.len(), 6, "{seen:?}");
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!((t.file_offset, t.buffer_offset), ((i as u64) << 20, (i as u64) << 20));
        assert_eq!(t.bytes, t.size);
        assert!(t.ok == 1 && t.ordered_times && t.route == ObservedRoute::Posix as u32);
    }
    assert_eq!(tasks.iter().map(|t| t.bytes).sum::<u64>(), data.len() as u64);
    let calls: Vec<&Seen> = seen.iter().filter(|s| s.kind == ObservationKind::Call as u32).collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(seen.last().unwrap().kind, ObservationKind::Call as u32, "the call ends after its tasks");
}

#[test]
fn a_callback_can_remove_its_own_monitor_and_make_calls() {
    let _lock = LOCK.lock().unwrap();
    let data = common::random_bytes(4096, 103);
    let tmp = common::temp_file_in(None, &data);
    let file = Arc::new(common::open(tmp.path(), None));
    let id = Arc::new(Mutex::new(0u64));
    let (inner_id, inner_file) = (Arc::clone(&id), Arc::clone(&file));
    let calls = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&calls);
    let registered = monitor::add(
        move |_| {
            *counted.lock().unwrap() += 1;
            // A call from inside the callback, then the monitor's own removal: neither waits.
            let mut small = [0u8; 16];
            inner_file.read_into(&mut small, 0).unwrap();
            monitor::remove(*inner_id.lock().unwrap());
        },
        false,
    );
    *id.lock().unwrap() = registered;
    let mut buf = [0u8; 100];
    file.read_into(&mut buf, 0).unwrap();
    file.read_into(&mut buf, 0).unwrap();
    assert_eq!(*calls.lock().unwrap(), 1, "removed by its own first callback; the read it made was not observed");
}

/// The tasks of a parallel read a callback makes run on the pool's workers, and are not observed
/// there either: only the outer call's task and the outer call are.
#[test]
fn the_tasks_of_a_callbacks_own_parallel_read_are_not_observed() {
    let _lock = LOCK.lock().unwrap();
    let data = common::random_bytes(8 << 20, 105);
    let tmp = common::temp_file_in(None, &data);
    let file = Arc::new(common::open(tmp.path(), None));
    gdsroute::settings::set_task_size(1 << 20).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (sink, inner_file) = (Arc::clone(&seen), Arc::clone(&file));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let inner_done = Arc::clone(&done);
    let read = Arc::new(Mutex::new((0usize, false)));
    let inner_read = Arc::clone(&read);
    let id = monitor::add(
        move |o| {
            sink.lock().unwrap().push(o.kind);
            if o.kind == ObservationKind::Call as u32 && !inner_done.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let mut buf = vec![0u8; 8 << 20];
                let n = unsafe { inner_file.pread_raw(buf.as_mut_ptr(), buf.len(), 0) }.unwrap().wait().unwrap();
                // Checked outside: a panic here is caught by the monitor.
                *inner_read.lock().unwrap() = (n, buf == std::fs::read(inner_file.path().unwrap()).unwrap());
            }
        },
        true,
    );
    let mut small = [0u8; 16];
    file.read_into(&mut small, 0).unwrap();
    monitor::remove(id);
    gdsroute::settings::set_task_size(gdsroute::settings::DEFAULT_TASK_SIZE).unwrap();
    let kinds = seen.lock().unwrap().clone();
    assert_eq!(kinds, [ObservationKind::Task as u32, ObservationKind::Call as u32], "only the outer call and its task");
    assert_eq!(*read.lock().unwrap(), (8 << 20, true), "the callback's read moved every byte");
}

/// The cost of a monitor per logical call: calls that move nothing (a read of 0 bytes: the call's
/// own path, no task) and 4 KiB synchronous reads of a warm file, without a monitor, with one that
/// counts, and with one that counts tasks too; the median of 5 alternating rounds of each. A
/// figure, not a check: `monitors --ignored --nocapture monitor_cost`.
#[test]
#[ignore = "a figure for docs/observing.md"]
fn monitor_cost_per_call() {
    let _lock = LOCK.lock().unwrap();
    let data = common::random_bytes(1 << 20, 104);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    let mut buf = vec![0u8; 4096];
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut per_call = |size: usize, rounds: usize| {
        let t = std::time::Instant::now();
        for i in 0..rounds {
            file.read_into(&mut buf[..size], ((i % 256) * 4096) as u64).unwrap();
        }
        t.elapsed().as_nanos() as f64 / rounds as f64
    };
    for (size, rounds) in [(0usize, 1_000_000usize), (4096, 100_000)] {
        let mut results: [Vec<f64>; 3] = Default::default();
        per_call(size, rounds); // warm-up
        for _ in 0..5 {
            results[0].push(per_call(size, rounds));
            for (slot, tasks) in [(1, false), (2, true)] {
                let c = Arc::clone(&count);
                let id = monitor::add(move |_| { c.fetch_add(1, std::sync::atomic::Ordering::Relaxed); }, tasks);
                results[slot].push(per_call(size, rounds));
                monitor::remove(id);
            }
        }
        let median = |v: &mut Vec<f64>| { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] };
        let [mut none, mut one, mut tasks] = results;
        let (none, one, tasks) = (median(&mut none), median(&mut one), median(&mut tasks));
        eprintln!("monitor_cost: {size}-byte reads: {none:.0} ns per call without a monitor, {one:.0} with one (+{:.0}), {tasks:.0} with one watching tasks (+{:.0})", one - none, tasks - none);
    }
}
