#!/usr/bin/env python3
"""Probe (GPU machine): which part of the device route's preparation stalls copies, and can the
workers share a few streams instead of creating one each?

Target 4 of issue 4 (first read >= 0.7 of the steady state) is missed when the first read starts
while the pool prepares (about 10 ms: 16 streams, 32 events, 17 registrations of 4 MiB), because
the driver serialises that work and copies wait for it. This probe, in a fresh process per MODE,
runs COPIERS threads that copy 2 MiB from pinned memory in a loop (each on its own stream, as the
bounce route does) and then, on PREP threads, one kind of preparation work; it prints the
preparation's wall time and the copy rate before and during it.

MODEs: streams (cuStreamCreate + 2 cuEventCreate per thread, as the library), streams-only,
events-only, streams-serial (the same under one lock of ours), register (mmap, MADV_HUGEPAGE, touch, cuMemHostRegister PORTABLE of 4 MiB per
thread), register-serial (the same under one lock of ours), register-2m, register-one (one thread registers 17 x 4 MiB one after another),
register-big (one registration of 68 MiB), streams-one (one thread makes 16 streams and 32
events), touch-one (one thread maps and touches 17 huge-page buffers, no driver call), whole
preparations: prep-parallel (each thread a stream, events and a buffer, as the library),
prep-one (one thread does all of it), prep-hybrid (threads touch their buffers in parallel, then
one thread makes the streams and registers), thread-init (each thread's first driver call
against its second), init-register-serial (register-serial on threads that made a driver call
before), and shared: no preparation; 16 threads copy 2 MiB
pieces with an event each on 1, 2 or 16 streams (is one stream enough for the copy rate?).

    python3 tools/probes/probe-prep-stall.py MODE [PREP_THREADS]
"""
import ctypes, sys, threading, time
from cuda_ctypes import check, cu, libc, ms, primary_context

MiB = 1 << 20
PIECE = 2 * MiB
PROT_RW, MAP_PRIVATE, MAP_ANON, MADV_HUGEPAGE = 3, 2, 0x20, 14
CU_MEMHOSTREGISTER_PORTABLE, CU_EVENT_DISABLE_TIMING = 1, 2
MAP_FAILED = ctypes.c_void_p(-1).value
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
cu.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
cu.cuEventSynchronize.argtypes = [ctypes.c_void_p]

mode = sys.argv[1]
prep_threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
ctx = primary_context()


def new_stream():
    s = ctypes.c_void_p()
    check(cu.cuStreamCreate(ctypes.byref(s), 0), "cuStreamCreate")
    return s


def new_event():
    e = ctypes.c_void_p()
    check(cu.cuEventCreate(ctypes.byref(e), CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    return e


def huge_buffer(n):
    raw = libc.mmap(None, n + 2 * MiB, PROT_RW, MAP_PRIVATE | MAP_ANON, -1, 0)
    if raw in (None, MAP_FAILED):
        raise SystemExit(f"mmap failed: errno {ctypes.get_errno()}")
    base = (raw + 2 * MiB - 1) & ~(2 * MiB - 1)
    libc.madvise(base, n, MADV_HUGEPAGE)
    ctypes.memset(base, 0x5A, n)
    return base


def register(base, n):
    check(cu.cuMemHostRegister_v2(base, n, CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister")


def pinned(n):
    p = ctypes.c_void_p()
    check(cu.cuMemAllocHost_v2(ctypes.byref(p), n), "cuMemAllocHost")
    return p.value


def device(n):
    d = ctypes.c_uint64()
    check(cu.cuMemAlloc_v2(ctypes.byref(d), n), "cuMemAlloc")
    return d.value


def copy_loop(stream, event, src, dst, stop, moved, i):
    """Copies PIECE bytes, records the event, waits for it; counts bytes in moved[i]."""
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    while not stop.is_set():
        check(cu.cuMemcpyHtoDAsync_v2(dst, src, PIECE, stream), "copy")
        check(cu.cuEventRecord(event, stream), "record")
        check(cu.cuEventSynchronize(event), "event sync")
        moved[i] += PIECE


def measure_rate(moved, seconds):
    b0, t0 = sum(moved), time.perf_counter()
    time.sleep(seconds)
    return (sum(moved) - b0) / (time.perf_counter() - t0) / 1e9


if mode == "shared":
    # 16 copy threads, pinned 2 MiB sources, per-thread events, on S streams.
    for streams in (16, 2, 1):
        pool = [new_stream() for _ in range(streams)]
        stop, moved = threading.Event(), [0] * 16
        dst = device(16 * PIECE)
        ts = [threading.Thread(target=copy_loop, args=(pool[i % streams], new_event(), pinned(PIECE), dst + i * PIECE, stop, moved, i))
              for i in range(16)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        rates = [measure_rate(moved, 0.3) for _ in range(3)]
        stop.set()
        for t in ts:
            t.join()
        print(f"SHARED streams={streams} copy threads=16 piece=2MiB: {' '.join(f'{r:.1f}' for r in rates)} GB/s", flush=True)
    sys.exit(0)

# Copiers: 4 threads with their own stream, event and pinned source, started before the prep.
COPIERS = 4
stop, moved = threading.Event(), [0] * COPIERS
dst = device(COPIERS * PIECE)
copiers = [threading.Thread(target=copy_loop, args=(new_stream(), new_event(), pinned(PIECE), dst + i * PIECE, stop, moved, i))
           for i in range(COPIERS)]
for t in copiers:
    t.start()
time.sleep(0.3)
before = measure_rate(moved, 0.2)

buffers = {}
if (mode.startswith("register") and mode != "register-big") or mode == "init-register-serial":
    # Touch the buffers first, so that the timed part is the driver's work (the library's
    # workers touch in parallel; the kernel's page faults do not take the driver's lock).
    size = 2 * MiB if mode == "register-2m" else 4 * MiB
    count = prep_threads + 1
    buffers = [huge_buffer(size) for _ in range(count)]


first_call, second_call = [0.0] * prep_threads, [0.0] * prep_threads
serial = threading.Lock()  # the *-serial modes: one thread in the driver at a time


def prep_body(i):
    if mode == "streams":
        new_stream(); new_event(); new_event()
    elif mode == "streams-only":
        new_stream()
    elif mode == "events-only":
        new_event(); new_event()
    elif mode == "streams-serial":
        with serial:
            new_stream(); new_event(); new_event()
    elif mode == "register-serial":
        with serial:
            register(buffers[i], 4 * MiB)
        if i == 0:
            with serial:
                register(buffers[-1], 4 * MiB)
    elif mode == "thread-init":
        # The first driver call a thread makes, then a second of the same kind.
        t = time.perf_counter(); new_event(); first_call[i] = ms(t)
        t = time.perf_counter(); new_event(); second_call[i] = ms(t)
    elif mode == "init-register-serial":
        new_event()
        with serial:
            register(buffers[i], 4 * MiB)
        if i == 0:
            with serial:
                register(buffers[-1], 4 * MiB)
    elif mode in ("register", "register-2m"):
        register(buffers[i], 2 * MiB if mode == "register-2m" else 4 * MiB)
        if i == 0:
            register(buffers[-1], 2 * MiB if mode == "register-2m" else 4 * MiB)


each = [0.0] * prep_threads


def streams_and_events(n):
    for _ in range(n):
        new_stream(); new_event(); new_event()


def on_prep_threads(body):
    """Runs body(i) on prep_threads threads released together; returns (wall ms, bytes copied
    meanwhile). Threads are started before the clock, so Python's thread start is not timed."""
    gate = threading.Barrier(prep_threads + 1)

    def run(i):
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        gate.wait()
        t = time.perf_counter()
        body(i)
        each[i] = ms(t)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(prep_threads)]
    for t in ts:
        t.start()
    gate.wait()
    t0, b0 = time.perf_counter(), sum(moved)
    for t in ts:
        t.join()
    return ms(t0), sum(moved) - b0


def one_thread(body):
    t0, b0 = time.perf_counter(), sum(moved)
    body()
    return ms(t0), sum(moved) - b0


def prep_parallel(i):
    # As the library's workers: stream and events, then one touched huge-page buffer registered
    # (thread 0 also pins the opening thread's).
    streams_and_events(1)
    for _ in range(2 if i == 0 else 1):
        register(huge_buffer(4 * MiB), 4 * MiB)


def prep_one():
    streams_and_events(prep_threads)
    for _ in range(prep_threads + 1):
        register(huge_buffer(4 * MiB), 4 * MiB)


def prep_hybrid():
    # Workers touch their buffers in parallel; one thread then makes every stream and event and
    # registers every buffer.
    touched = [None] * (prep_threads + 1)

    def touch(i):
        touched[i] = huge_buffer(4 * MiB)
        if i == 0:
            touched[-1] = huge_buffer(4 * MiB)
    w, _ = on_prep_threads(touch)
    streams_and_events(prep_threads)
    for b in touched:
        register(b, 4 * MiB)


if mode == "register-one":
    wall, moved_bytes = one_thread(lambda: [register(b, 4 * MiB) for b in buffers])
elif mode == "register-big":
    big = huge_buffer((prep_threads + 1) * 4 * MiB)
    wall, moved_bytes = one_thread(lambda: register(big, (prep_threads + 1) * 4 * MiB))
elif mode == "streams-one":
    wall, moved_bytes = one_thread(lambda: streams_and_events(prep_threads))
elif mode == "touch-one":
    wall, moved_bytes = one_thread(lambda: [huge_buffer(4 * MiB) for _ in range(prep_threads + 1)])
elif mode == "prep-one":
    wall, moved_bytes = one_thread(prep_one)
elif mode == "prep-hybrid":
    wall, moved_bytes = one_thread(prep_hybrid)
elif mode == "prep-parallel":
    wall, moved_bytes = on_prep_threads(prep_parallel)
else:
    wall, moved_bytes = on_prep_threads(prep_body)
b0, b1 = 0, moved_bytes
during = (b1 - b0) / (wall / 1e3) / 1e9
after = measure_rate(moved, 0.2)
stop.set()
for t in copiers:
    t.join()
if mode == "thread-init":
    print(f"INIT first event per thread (ms, sorted): {' '.join(f'{v:.2f}' for v in sorted(first_call))}; "
          f"second: {' '.join(f'{v:.2f}' for v in sorted(second_call))}", flush=True)
print(f"PREP mode={mode} threads={prep_threads} wall_ms={wall:.2f} per_thread_ms_max={max(each):.2f} "
      f"copies_before={before:.1f} copies_during={during:.1f} copies_after={after:.1f} GB/s", flush=True)
