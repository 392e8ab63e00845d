//! `backend::cufile::batch::run` against the fake libcufile (tests/fake_cufile/fake_cufile.c),
//! compiled here: windows of the driver's `max_batch_io_size` (the fake refuses a larger submit
//! with 5040, as cuFile does), every byte of mixed reads and writes checked, one failing I/O
//! failing alone, and the failures that mean nothing ran. No GPU needed: the fake moves the
//! bytes with pread/pwrite into host memory. `nvidia_cufile_when_asked` runs the same against
//! NVIDIA's libcufile on a GPU machine, when asked.
//!
//! One job in one file, although over 450 lines: the batch backend's tests against a libcufile.

mod common;

use gdsroute::testing::cufile::CufileLibrary;
use gdsroute::testing::cufile_batch::{BatchIo, CufileHandle, available, run};
use gdsroute::testing::device::cuda::MemoryKind;
use gdsroute::{Direction, Error};
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// Every test holds this: they set the environment the fake reads and share its counters.
static LOCK: Mutex<()> = Mutex::new(());

const ENV_VARS: [&str; 8] = [
    "FAKE_CUFILE_MAX_BATCH",
    "FAKE_CUFILE_BATCH_SETUP_RESULT",
    "FAKE_CUFILE_BATCH_SUBMIT_RESULT",
    "FAKE_CUFILE_BATCH_STATUS_RESULT",
    "FAKE_CUFILE_BATCH_FAIL_COOKIE",
    "FAKE_CUFILE_BATCH_SHORT_COOKIE",
    "FAKE_CUFILE_BATCH_BAD_COOKIE",
    "FAKE_CUFILE_BATCH_LOST_COOKIE",
];

fn env() -> common::ScopedEnv {
    common::ScopedEnv::new(&LOCK, &ENV_VARS)
}

/// Compiles the fake (once per variant) and returns its path.
fn fake(define: Option<&str>) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let dir = DIR.get_or_init(|| tempfile::Builder::new().prefix("fake-cufile-batch-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap());
    let name = format!("libfake_cufile{}.so", define.unwrap_or("").to_lowercase().replace("-dfake_cufile", ""));
    let out = dir.path().join(&name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&name) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_cufile/fake_cufile.c");
        let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        cmd.args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"]).arg(&out).arg(&src);
        cmd.args(define);
        assert!(cmd.status().expect("run the C compiler").success(), "compiling {name} failed");
        built.push(name);
    }
    out
}

/// The fake's counters, through a second dlopen of the same file (the same loaded object).
struct Hooks(libloading::Library);

impl Hooks {
    fn int(&self, name: &str) -> c_int {
        // SAFETY: the fake's counter hooks are `int(void)`.
        unsafe { self.0.get::<unsafe extern "C" fn() -> c_int>(name.as_bytes()).unwrap()() }
    }
}

fn load(define: Option<&str>) -> (CufileLibrary, Hooks) {
    let path = fake(define);
    // SAFETY: the fake has no constructors; `fake_cufile_reset` is `void(void)`.
    let hooks = unsafe {
        let lib = libloading::Library::new(&path).unwrap();
        lib.get::<unsafe extern "C" fn()>(b"fake_cufile_reset").unwrap()();
        Hooks(lib)
    };
    (CufileLibrary::load_candidates(&[&path]).unwrap(), hooks)
}

fn file_with(data: &[u8]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(f.path(), data).unwrap();
    f
}

/// Runs `ios`, returning each I/O's result by index; every I/O must be answered exactly once.
fn run_all(library: &CufileLibrary, ios: &[BatchIo<'_>]) -> gdsroute::Result<Vec<gdsroute::Result<usize>>> {
    let mut results: Vec<Option<gdsroute::Result<usize>>> = (0..ios.len()).map(|_| None).collect();
    // SAFETY: every I/O's buffer is host memory that outlives the call and is not used elsewhere.
    unsafe {
        run(library, ios, |i, r| {
            assert!(results[i].is_none(), "I/O {i} answered twice");
            results[i] = Some(r);
        })
    }?;
    Ok(results.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|| panic!("I/O {i} never answered"))).collect())
}

const HOST: MemoryKind = MemoryKind::Host;

/// `n` reads of `len` bytes, the `i`th at file offset `i * len` into `buf[i * len..]`.
fn reads<'a>(handle: &'a CufileHandle<'a>, buf: &mut [u8], n: usize, len: usize) -> Vec<BatchIo<'a>> {
    assert!(buf.len() >= n * len);
    (0..n)
        .map(|i| BatchIo {
            direction: Direction::Read,
            handle,
            path: "source",
            kind: &HOST,
            base: buf.as_mut_ptr() as u64,
            base_offset: (i * len) as u64,
            size: len,
            file_offset: (i * len) as u64,
        })
        .collect()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

#[test]
fn three_hundred_mixed_ios_in_windows_of_128_move_every_byte() {
    let _env = env();
    let (lib, hooks) = load(None);
    assert!(available(&lib));
    const LEN: usize = (1 << 20) + 777;
    const STRIDE: usize = 70_000;
    const N: usize = 300;
    let data = pattern(LEN, 1);
    let src = file_with(&data);
    let dst = file_with(&[]);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let dst_file = std::fs::OpenOptions::new().read(true).write(true).open(dst.path()).unwrap();
    let src_handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let dst_handle = lib.register_handle(dst_file.as_raw_fd()).unwrap();
    let mut read_buf = vec![0xEEu8; N * STRIDE];
    let write_buf = pattern(N * STRIDE, 2);
    let mut rng = fastrand::Rng::with_seed(3);
    let sizes = [0usize, 1, 1000, 4096, 4097, 65_536];
    let mut ios = Vec::new();
    for i in 0..N {
        let size = if i % 7 == 6 { rng.usize(1..=65_536) } else { sizes[rng.usize(..sizes.len())] };
        let io = if i % 3 == 2 {
            BatchIo {
                direction: Direction::Write,
                handle: &dst_handle,
                path: "destination",
                kind: &HOST,
                base: write_buf.as_ptr() as u64,
                base_offset: (i * STRIDE) as u64,
                size,
                file_offset: (i * STRIDE) as u64,
            }
        } else {
            // Offsets up to 100 kB past the end: reads that straddle it and reads wholly past it.
            let file_offset = match i % 10 {
                0 => LEN as u64 + rng.u64(0..100_000),
                1 => LEN as u64 - rng.u64(1..4096),
                _ => rng.u64(0..LEN as u64),
            };
            BatchIo {
                direction: Direction::Read,
                handle: &src_handle,
                path: "source",
                kind: &HOST,
                base: read_buf.as_mut_ptr() as u64,
                base_offset: (i * STRIDE) as u64,
                size,
                file_offset,
            }
        };
        ios.push(io);
    }
    let results = run_all(&lib, &ios).unwrap();
    let mut written_end = 0;
    for (i, (io, result)) in ios.iter().zip(&results).enumerate() {
        let n = *result.as_ref().unwrap_or_else(|e| panic!("I/O {i}: {e}"));
        let slot = i * STRIDE;
        match io.direction {
            Direction::Read => {
                let expect = io.size.min(LEN.saturating_sub(io.file_offset as usize));
                assert_eq!(n, expect, "read {i} of {} at {}", io.size, io.file_offset);
                let at = io.file_offset as usize;
                assert!(n == 0 || read_buf[slot..slot + n] == data[at..at + n], "read {i}: wrong bytes");
                assert!(read_buf[slot + n..slot + STRIDE].iter().all(|&b| b == 0xEE), "read {i} wrote past its bytes");
            }
            Direction::Write => {
                assert_eq!(n, io.size, "write {i}");
                if n > 0 {
                    written_end = slot + n;
                }
            }
        }
    }
    let written = std::fs::read(dst.path()).unwrap();
    assert_eq!(written.len(), written_end);
    let mut expect = vec![0u8; written_end];
    for (i, io) in ios.iter().enumerate().filter(|(_, io)| io.direction == Direction::Write) {
        let slot = i * STRIDE;
        expect[slot..slot + io.size].copy_from_slice(&write_buf[slot..slot + io.size]);
    }
    assert!(written == expect, "the destination file differs");
    let submitted = ios.iter().filter(|io| io.size > 0).count();
    assert!(submitted > 2 * 128, "{submitted} I/Os should need three windows");
    assert_eq!(hooks.int("fake_cufile_batch_submits") as usize, submitted.div_ceil(128));
    assert_eq!(hooks.int("fake_cufile_batch_largest_submit"), 128, "windows of the driver's max_batch_io_size");
    assert_eq!((hooks.int("fake_cufile_batch_live"), hooks.int("fake_cufile_batch_cancels")), (1, 0), "the handle is kept for reuse");
    // The next batch reuses it: a destroy took 100 ms on the H200.
    let again = run_all(&lib, &ios[..10]).unwrap();
    assert!(again.iter().zip(&results).all(|(a, b)| a.as_ref().ok() == b.as_ref().ok()));
    assert_eq!((hooks.int("fake_cufile_batch_setups"), hooks.int("fake_cufile_batch_live")), (1, 1));
}

#[test]
fn a_smaller_driver_limit_gives_smaller_windows() {
    let env = env();
    env.set("FAKE_CUFILE_MAX_BATCH", "16");
    let (lib, hooks) = load(None);
    let data = pattern(40_000, 4);
    let src = file_with(&data);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 40_000];
    let ios = reads(&handle, &mut buf, 40, 1000);
    assert!(run_all(&lib, &ios).unwrap().iter().all(|r| matches!(r, Ok(1000))));
    assert!(buf == data);
    assert_eq!((hooks.int("fake_cufile_batch_submits"), hooks.int("fake_cufile_batch_largest_submit")), (3, 16));
}

#[test]
fn a_failing_io_fails_alone_with_its_file_offset_and_code() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_FAIL_COOKIE", "137");
    let (lib, hooks) = load(None);
    let data = pattern(300_000, 5);
    let src = file_with(&data);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 300_000];
    let ios = reads(&handle, &mut buf, 300, 1000);
    let results = run_all(&lib, &ios).unwrap();
    for (i, r) in results.iter().enumerate() {
        if i == 137 {
            let e = r.as_ref().unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, Error::Cufile(_)), "{e:?}");
            assert!(text.contains("\"source\"") && text.contains("offset 137000") && text.contains("returned -5"), "{text}");
            assert!(text.contains("errno") && text.contains("os error 5"), "-5 is no cuFile code: {text}");
        } else {
            assert!(matches!(r, Ok(1000)), "I/O {i}: {r:?}");
            assert!(buf[i * 1000..(i + 1) * 1000] == data[i * 1000..(i + 1) * 1000], "I/O {i}");
        }
    }
    assert_eq!((hooks.int("fake_cufile_batch_submits"), hooks.int("fake_cufile_batch_live")), (3, 1));
}

#[test]
fn a_read_cufile_ends_short_is_finished_and_a_short_write_fails() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_SHORT_COOKIE", "2");
    let (lib, _hooks) = load(None);
    let data = pattern(10_000, 6);
    let src = file_with(&data);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 10_000];
    let ios = reads(&handle, &mut buf, 10, 1000);
    assert!(run_all(&lib, &ios).unwrap().iter().all(|r| matches!(r, Ok(1000))), "the short read was finished with cuFileRead");
    assert!(buf == data);

    let dst = file_with(&[]);
    let dst_file = std::fs::OpenOptions::new().write(true).open(dst.path()).unwrap();
    let dst_handle = lib.register_handle(dst_file.as_raw_fd()).unwrap();
    let writes: Vec<_> = (0..4)
        .map(|i| BatchIo {
            direction: Direction::Write,
            handle: &dst_handle,
            path: "destination",
            kind: &HOST,
            base: data.as_ptr() as u64,
            base_offset: i * 1000,
            size: 1000,
            file_offset: i * 1000,
        })
        .collect();
    let results = run_all(&lib, &writes).unwrap();
    let text = results[2].as_ref().unwrap_err().to_string();
    assert!(text.contains("wrote 500 of 1000 bytes") && text.contains("offset 2000"), "{text}");
    assert!(results.iter().enumerate().all(|(i, r)| i == 2 || matches!(r, Ok(1000))));
}

#[test]
fn a_refused_set_up_means_nothing_ran() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_SETUP_RESULT", "5049");
    let (lib, hooks) = load(None);
    let src = file_with(&pattern(4000, 7));
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 4000];
    let mut ios = reads(&handle, &mut buf, 4, 1000);
    ios[0].size = 0; // answered without cuFile, yet not before something was submitted
    let mut called = 0;
    // SAFETY: host memory that outlives the call.
    let err = unsafe { run(&lib, &ios, |_, _| called += 1) }.unwrap_err();
    assert!(matches!(&err, Error::Cufile(t) if t.contains("cuFileBatchIOSetUp") && t.contains("5049")), "{err}");
    assert_eq!((called, hooks.int("fake_cufile_batch_submits")), (0, 0));

    let (old, _) = load(Some("-DFAKE_CUFILE_NO_BATCH"));
    assert!(!available(&old));
    assert!(old.missing_optional_symbols().contains(&"cuFileBatchIOGetStatus"));
    let handle = old.register_handle(src_file.as_raw_fd()).unwrap();
    let ios = reads(&handle, &mut buf, 4, 1000);
    // SAFETY: as above.
    let err = unsafe { run(&old, &ios, |_, _| called += 1) }.unwrap_err();
    assert!(matches!(err, Error::CufileUnavailable(_)), "{err}");
    assert_eq!(called, 0);
}

#[test]
fn a_refused_first_submit_means_nothing_ran_and_its_handle_is_destroyed() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_SUBMIT_RESULT", "5048");
    let (lib, hooks) = load(None);
    let data = pattern(4000, 16);
    let src = file_with(&data);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 4000];
    let ios = reads(&handle, &mut buf, 4, 1000);
    let mut called = 0;
    // SAFETY: host memory that outlives the call.
    let err = unsafe { run(&lib, &ios, |_, _| called += 1) }.unwrap_err();
    assert!(matches!(&err, Error::Cufile(t) if t.contains("5048")), "{err}");
    assert_eq!(called, 0);
    assert_eq!(
        [hooks.int("fake_cufile_batch_setups"), hooks.int("fake_cufile_batch_submits"), hooks.int("fake_cufile_batch_live")],
        [1, 0, 0],
        "a handle cuFile refused a submission on is destroyed, not kept for the next batch"
    );
    env.remove("FAKE_CUFILE_BATCH_SUBMIT_RESULT");
    assert!(run_all(&lib, &ios).unwrap().iter().all(|r| matches!(r, Ok(1000))));
    assert!(buf == data);
    assert_eq!((hooks.int("fake_cufile_batch_setups"), hooks.int("fake_cufile_batch_live")), (2, 1), "the next batch set up a handle of its own");
}

#[test]
fn a_failing_status_query_cancels_and_answers_every_io() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_STATUS_RESULT", "5041");
    let (lib, hooks) = load(None);
    let src = file_with(&pattern(200_000, 8));
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 200_000];
    let ios = reads(&handle, &mut buf, 200, 1000);
    let results = run_all(&lib, &ios).unwrap();
    for (i, r) in results.iter().enumerate() {
        let text = r.as_ref().unwrap_err().to_string();
        let expect = if i < 128 { "cuFileBatchIOGetStatus failed" } else { "was not submitted" };
        assert!(text.contains(expect) && text.contains("5041") && text.contains(&format!("offset {}", i * 1000)), "I/O {i}: {text}");
    }
    assert!(results[0].as_ref().unwrap_err().to_string().contains("the batch was cancelled"));
    assert_eq!(
        [hooks.int("fake_cufile_batch_submits"), hooks.int("fake_cufile_batch_cancels"), hooks.int("fake_cufile_batch_live")],
        [1, 1, 0],
        "a handle cuFile failed on is destroyed, not kept"
    );
}

#[test]
fn an_event_under_an_unknown_cookie_is_an_internal_error_for_its_io() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_BAD_COOKIE", "5");
    let (lib, hooks) = load(None);
    let data = pattern(10_000, 9);
    let src = file_with(&data);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 10_000];
    let ios = reads(&handle, &mut buf, 10, 1000);
    let results = run_all(&lib, &ios).unwrap();
    for (i, r) in results.iter().enumerate() {
        if i == 5 {
            assert!(matches!(r, Err(Error::Internal(t)) if t.contains("outside the window") && t.contains("offset 5000")), "{r:?}");
        } else {
            assert!(matches!(r, Ok(1000)), "I/O {i}: {r:?}");
        }
    }
    assert_eq!((hooks.int("fake_cufile_batch_cancels"), hooks.int("fake_cufile_batch_live")), (1, 0));
}

#[test]
fn an_io_cufile_never_reports_is_an_internal_error_not_a_hang() {
    let env = env();
    env.set("FAKE_CUFILE_BATCH_LOST_COOKIE", "4");
    let (lib, hooks) = load(None);
    let src = file_with(&pattern(10_000, 15));
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 10_000];
    let ios = reads(&handle, &mut buf, 10, 1000);
    let t0 = std::time::Instant::now();
    let results = run_all(&lib, &ios).unwrap();
    assert!(t0.elapsed() < std::time::Duration::from_secs(1), "{:?}", t0.elapsed());
    for (i, r) in results.iter().enumerate() {
        if i == 4 {
            assert!(matches!(r, Err(Error::Internal(t)) if t.contains("never reported it") && t.contains("offset 4000")), "{r:?}");
        } else {
            assert!(matches!(r, Ok(1000)), "I/O {i}: {r:?}");
        }
    }
    assert_eq!((hooks.int("fake_cufile_batch_cancels"), hooks.int("fake_cufile_batch_live")), (1, 0));
}

#[test]
fn a_panic_in_done_waits_for_the_window_and_stops_the_rest() {
    let _env = env();
    let (lib, hooks) = load(None);
    let src = file_with(&pattern(300_000, 10));
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 300_000];
    let ios = reads(&handle, &mut buf, 300, 1000);
    let mut calls = 0;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: host memory that outlives the call.
        unsafe {
            run(&lib, &ios, |_, _| {
                calls += 1;
                panic!("the caller's own bug");
            })
        }
    }));
    assert_eq!(*caught.unwrap_err().downcast::<&str>().unwrap(), "the caller's own bug");
    assert_eq!(calls, 1, "done is not called again after it panicked");
    assert_eq!((hooks.int("fake_cufile_batch_submits"), hooks.int("fake_cufile_batch_live")), (1, 1), "no window after the panic");
}

#[test]
fn a_window_whose_context_fails_fails_alone() {
    let env = env();
    env.set("FAKE_CUFILE_MAX_BATCH", "3");
    let (lib, hooks) = load(None);
    let data = pattern(7000, 11);
    let src = file_with(&data);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let handle = lib.register_handle(src_file.as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 7000];
    let device = MemoryKind::Device { ordinal: 0, context: None };
    let mut ios = reads(&handle, &mut buf, 7, 1000);
    ios[3].kind = &device;
    ios[4].kind = &device;
    // Windows [0 1 2] [3 4 5] [6]: host memory shares the device window.
    let results = run_all(&lib, &ios).unwrap();
    let cuda = common::cuda_works();
    for (i, r) in results.iter().enumerate() {
        match r {
            Ok(n) => assert!(*n == 1000 && (cuda || !(3..6).contains(&i)), "I/O {i}"),
            Err(e) => assert!(!cuda && (3..6).contains(&i) && matches!(e, Error::Cuda(_) | Error::CudaUnavailable(_)), "I/O {i}: {e:?}"),
        }
    }
    assert_eq!(hooks.int("fake_cufile_batch_submits"), if cuda { 3 } else { 2 });
}

/// Opt-in, on a GPU machine: with `GDSROUTE_TEST_REAL_CUFILE` set (to the libcufile to load, or
/// empty for the usual names), 300 mixed I/Os through NVIDIA's libcufile, reads into device
/// memory and writes from pinned host memory, every byte checked; then reads into pinned host
/// memory from a thread with no CUDA context current. The files go where cuFile can register
/// them (`GDSROUTE_TEST_DIR`, tests/common/gpu.rs). On the H200 (cuFile 1.15.1, 2026-12-03) the
/// reads were always right, but in about half the runs one write from pinned host memory failed
/// with -1 ("nvfs_bio ... Marked IO Done with Error" in cuFile's log), wrote wrong bytes, or
/// never completed: open. Two switches probe the suspects: `GDSROUTE_TEST_BATCH_WRITES_FROM=device`
/// writes from a device allocation holding the same bytes instead of pinned host memory, and
/// `GDSROUTE_TEST_BATCH_ZERO_OFFSET=1` passes every I/O's address as its base with a buffer
/// offset of 0 (the form that avoids cuFile's remembered sizes on the async API).
#[test]
fn nvidia_cufile_when_asked() {
    use cudarc::driver::sys;
    use gdsroute::testing::device::cuda::classify;
    let Some(path) = std::env::var_os("GDSROUTE_TEST_REAL_CUFILE") else {
        eprintln!("GDSROUTE_TEST_REAL_CUFILE not set; skipped");
        return;
    };
    let _env = env();
    let _context = common::gpu::on_device0();
    let lib = CufileLibrary::load((!path.is_empty()).then_some(Path::new(&path))).unwrap();
    lib.driver_open().unwrap();
    const LEN: usize = (8 << 20) + 777;
    const STRIDE: usize = 70_000;
    const N: usize = 300;
    let data = pattern(LEN, 12);
    let src = common::gpu::file_with(&data);
    let dst = common::gpu::file_with(&[]);
    let src_file = std::fs::File::open(src.path()).unwrap();
    let dst_file = std::fs::OpenOptions::new().read(true).write(true).open(dst.path()).unwrap();
    let src_handle = lib.register_handle(src_file.as_raw_fd()).expect("cuFile registers the file (udev record?)");
    let dst_handle = lib.register_handle(dst_file.as_raw_fd()).unwrap();
    let mut dev: sys::CUdeviceptr = 0;
    common::gpu::ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, N * STRIDE) });
    common::gpu::ok("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dev, 0xEE, N * STRIDE) });
    let mut pinned: *mut std::ffi::c_void = std::ptr::null_mut();
    common::gpu::ok("cuMemAllocHost", unsafe { sys::cuMemAllocHost_v2(&mut pinned, N * STRIDE) });
    // SAFETY: N * STRIDE bytes of pinned host memory, used only through this slice and the batch.
    let host = unsafe { std::slice::from_raw_parts_mut(pinned.cast::<u8>(), N * STRIDE) };
    host.copy_from_slice(&pattern(N * STRIDE, 13));
    let (dev_kind, host_kind) = (classify(dev as usize as *const _).unwrap(), classify(pinned).unwrap());
    assert!(dev_kind.is_device() && host_kind == MemoryKind::PinnedHost, "{dev_kind:?} {host_kind:?}");
    let writes_from_device = std::env::var("GDSROUTE_TEST_BATCH_WRITES_FROM").is_ok_and(|v| v == "device");
    let zero_offset = std::env::var("GDSROUTE_TEST_BATCH_ZERO_OFFSET").is_ok_and(|v| v == "1");
    let mut dev_src: sys::CUdeviceptr = 0;
    if writes_from_device {
        common::gpu::ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev_src, N * STRIDE) });
        common::gpu::ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(dev_src, host.as_ptr().cast(), N * STRIDE) });
    }
    eprintln!("writes from {}, {}", if writes_from_device { "device memory" } else { "pinned host memory" }, if zero_offset { "base = address, offset 0" } else { "base + offset" });
    let (write_base, write_kind) = if writes_from_device { (dev_src, &dev_kind) } else { (pinned as u64, &host_kind) };
    // The allocation's base and the I/O's offset into it, or the I/O's own address and 0.
    let place = |base: u64, slot: u64| if zero_offset { (base + slot, 0) } else { (base, slot) };
    let mut rng = fastrand::Rng::with_seed(14);
    let sizes = [1usize, 1000, 4096, 4097, 65_536];
    let ios: Vec<_> = (0..N)
        .map(|i| {
            let size = if i % 7 == 6 { rng.usize(1..=65_536) } else { sizes[rng.usize(..sizes.len())] };
            let slot = (i * STRIDE) as u64;
            if i % 3 == 2 {
                let (base, base_offset) = place(write_base, slot);
                BatchIo { direction: Direction::Write, handle: &dst_handle, path: "destination", kind: write_kind, base, base_offset, size, file_offset: slot }
            } else {
                let file_offset = match i % 10 {
                    0 => LEN as u64 + rng.u64(0..100_000),
                    1 => LEN as u64 - rng.u64(1..4096),
                    _ => rng.u64(0..LEN as u64),
                };
                let (base, base_offset) = place(dev, slot);
                BatchIo { direction: Direction::Read, handle: &src_handle, path: "source", kind: &dev_kind, base, base_offset, size, file_offset }
            }
        })
        .collect();
    for pass in 0..2 {
        let t0 = std::time::Instant::now();
        let results = run_all(&lib, &ios).unwrap();
        eprintln!("pass {pass}: {N} I/Os in {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
        let mut back = vec![0u8; N * STRIDE];
        common::gpu::ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, N * STRIDE) });
        for (i, (io, result)) in ios.iter().zip(&results).enumerate() {
            let n = *result.as_ref().unwrap_or_else(|e| panic!("I/O {i}: {e}"));
            let slot = i * STRIDE;
            if io.direction == Direction::Read {
                let expect = io.size.min(LEN.saturating_sub(io.file_offset as usize));
                assert_eq!(n, expect, "read {i} of {} at {}", io.size, io.file_offset);
                let at = io.file_offset as usize;
                assert!(n == 0 || back[slot..slot + n] == data[at..at + n], "read {i}: wrong bytes");
                assert!(back[slot + io.size..slot + STRIDE].iter().all(|&b| b == 0xEE), "read {i} wrote past its buffer");
                if let Some(k) = back[slot + n..slot + io.size].iter().position(|&b| b != 0xEE) {
                    eprintln!("read {i} ({} at {}, {n} read) changed its buffer past the bytes read, from {}", io.size, io.file_offset, n + k);
                }
            } else {
                assert_eq!(n, io.size, "write {i}");
            }
        }
        let written = std::fs::read(dst.path()).unwrap();
        for (i, io) in ios.iter().enumerate().filter(|(_, io)| io.direction == Direction::Write) {
            let slot = i * STRIDE;
            assert!(written[slot..slot + io.size] == host[slot..slot + io.size], "write {i}: wrong bytes in the file");
        }
    }
    // Pinned host memory from a thread on which no context is current.
    let pinned_at = pinned as u64;
    let fresh = std::thread::scope(|s| {
        s.spawn(|| {
            let ios: Vec<_> = (0..10u64)
                .map(|i| BatchIo { direction: Direction::Read, handle: &src_handle, path: "source", kind: &host_kind, base: pinned_at, base_offset: i * 1000, size: 1000, file_offset: i * 1000 })
                .collect();
            run_all(&lib, &ios).map(|r| r.into_iter().collect::<Result<Vec<_>, _>>())
        })
        .join()
        .unwrap()
    });
    eprintln!("pinned host memory, no context current: {fresh:?}");
    // SAFETY: the batch is done with it; nothing else holds it.
    let host = unsafe { std::slice::from_raw_parts(pinned.cast::<u8>(), 10_000) };
    assert!(host == &data[..10_000], "{fresh:?}");
    unsafe { sys::cuMemFreeHost(pinned) };
    unsafe { sys::cuMemFree_v2(dev) };
    if writes_from_device {
        unsafe { sys::cuMemFree_v2(dev_src) };
    }
    drop((src_handle, dst_handle));
    lib.driver_close().unwrap();
}
