//! Fault-injection tests of `gdsroute::cufile` against the fake libcufile in
//! tests/fake_cufile/fake_cufile.c, compiled here with the system C compiler in three variants
//! (full, no statistics symbols, no cuFileRead). No GPU needed: the fake reads into host memory.

mod common;

use std::ffi::c_int;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use gdsroute::testing::cufile::{
    DriverControl,
    CufileLibrary, LIBRARY_ENV_VAR, LoadError, IoFailure, StatsSupport, log_configuration,
};
use gdsroute::FallbackReason;
use gdsroute::testing::cufile::CufileFile;
use gdsroute::settings::{CufileFd, Descriptor};
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Every test that touches the environment or the fake's global state holds this.
static ENV_LOCK: Mutex<()> = Mutex::new(());

const ENV_VARS: [&str; 16] = [
    "FAKE_CUFILE_VERSION",
    "FAKE_CUFILE_OPEN_RESULT",
    "FAKE_CUFILE_REGISTER_RESULT",
    "FAKE_CUFILE_READ_MODE",
    "FAKE_CUFILE_READ_ERRNO",
    "FAKE_CUFILE_READ_CODE",
    "FAKE_CUFILE_ROUTE",
    "FAKE_CUFILE_NUM_GPUS",
    "FAKE_CUFILE_IO_GPU",
    "FAKE_CUFILE_NVFS_MAJOR",
    "FAKE_CUFILE_NVFS_MINOR",
    LIBRARY_ENV_VAR,
    "CUFILE_LOGFILE_PATH",
    "CUFILE_ENV_PATH_JSON",
    "CUFILE_LOGGING_LEVEL",
    "CUFILE_STATS_LEVEL",
];

fn env() -> common::ScopedEnv {
    common::ScopedEnv::new(&ENV_LOCK, &ENV_VARS)
}

#[derive(Clone, Copy)]
enum Variant {
    Full,
    NoStats,
    MissingRead,
    NoVersion,
}

fn build_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("fake-cufile-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir")
    })
    .path()
}

/// Compiles (once per process) and returns the path of a fake library variant.
fn fake(variant: Variant) -> PathBuf {
    static BUILT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let (name, define) = match variant {
        Variant::Full => ("libfake_cufile_full.so", None),
        Variant::NoStats => ("libfake_cufile_nostats.so", Some("-DFAKE_CUFILE_NO_STATS")),
        Variant::MissingRead => (
            "libfake_cufile_noread.so",
            Some("-DFAKE_CUFILE_MISSING_READ"),
        ),
        Variant::NoVersion => (
            "libfake_cufile_noversion.so",
            Some("-DFAKE_CUFILE_NO_VERSION"),
        ),
    };
    let out = build_dir().join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&name) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_cufile/fake_cufile.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let mut cmd = Command::new(cc);
        cmd.args([
            "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-o",
        ])
        .arg(&out)
        .arg(&src);
        if let Some(d) = define {
            cmd.arg(d);
        }
        let status = cmd.status().expect("run the C compiler");
        assert!(status.success(), "compiling {name} failed");
        built.push(name);
    }
    out
}

/// Test hooks exported by the fake, reached through a second dlopen of the same file (which
/// returns the same loaded object, so the state is shared with `CufileLibrary`).
struct Hooks {
    lib: libloading::Library,
}

impl Hooks {
    fn new(path: &Path) -> Hooks {
        // SAFETY: the fake library has no constructors.
        let lib = unsafe { libloading::Library::new(path) }.expect("load fake");
        let h = Hooks { lib };
        // SAFETY: `fake_cufile_reset` is `void(void)`.
        unsafe {
            h.lib
                .get::<unsafe extern "C" fn()>("fake_cufile_reset")
                .unwrap()()
        };
        h
    }

    fn int(&self, name: &str) -> c_int {
        // SAFETY: the counter hooks are `int(void)`.
        unsafe {
            self.lib
                .get::<unsafe extern "C" fn() -> c_int>(name)
                .unwrap()()
        }
    }

}

fn load(variant: Variant) -> (CufileLibrary, Hooks) {
    let path = fake(variant);
    let hooks = Hooks::new(&path);
    let lib = CufileLibrary::load_candidates(&[&path]).expect("fake loads");
    (lib, hooks)
}

fn data_file(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    // On the build's file system rather than /tmp, which may be a tmpfs without O_DIRECT.
    let mut f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    f.write_all(&data).unwrap();
    f.flush().unwrap();
    (f, data)
}

#[test]
fn version_is_reported_as_the_library_returns_it() {
    let env = env();
    env.set("FAKE_CUFILE_VERSION", "1150");
    let (lib, _h) = load(Variant::Full);
    assert_eq!(
        (lib.version(), lib.version_string().as_str()),
        (Some(1150), "1.15")
    );
    drop(lib);
    env.set("FAKE_CUFILE_VERSION", "1200");
    let (lib, _h) = load(Variant::Full);
    assert_eq!(
        (lib.version(), lib.version_string().as_str()),
        (Some(1200), "1.20")
    );
    assert!(
        lib.missing_optional_symbols().is_empty(),
        "{:?}",
        lib.missing_optional_symbols()
    );
}

#[test]
fn absent_version_symbol_is_unknown_and_disables_stats() {
    let _env = env();
    let (lib, _h) = load(Variant::NoVersion);
    assert_eq!(lib.version(), None);
    assert_eq!(lib.version_string(), "unknown");
    assert!(
        matches!(lib.stats_support(), StatsSupport::MissingApi(r) if r.contains("version unknown"))
    );
}

#[test]
fn missing_required_symbol_names_it() {
    let _env = env();
    let path = fake(Variant::MissingRead);
    let err = CufileLibrary::load_candidates(&[&path]).unwrap_err();
    assert!(
        matches!(
            &err,
            LoadError::MissingSymbol {
                symbol: "cuFileRead",
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("cuFileRead") && text.contains(&*path.to_string_lossy()),
        "{text}"
    );
}

#[test]
fn old_library_without_stats_loads_and_reports_missing_api() {
    let _env = env();
    let (lib, _h) = load(Variant::NoStats);
    assert!(lib.stats().is_none());
    match lib.stats_support() {
        StatsSupport::MissingApi(reason) => {
            assert!(reason.contains("cuFileSetStatsLevel"), "{reason}")
        }
        StatsSupport::Available => panic!("stats should be missing"),
    }
    assert!(lib.missing_optional_symbols().contains(&"cuFileGetStatsL3"));
    // Reads still work without stats.
    lib.driver_open().unwrap();
    let (file, data) = data_file(4096);
    let h = lib.register_handle(file.as_file().as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is host memory the fake writes into, 4096 bytes, alive for the call.
    let n = unsafe { lib.read(&h, buf.as_mut_ptr().cast(), 4096, 0, 0) }.unwrap();
    assert_eq!((n, &buf), (4096, &data));
}

#[test]
fn version_below_1150_disables_stats_even_with_symbols() {
    let env = env();
    env.set("FAKE_CUFILE_VERSION", "1140");
    let (lib, _h) = load(Variant::Full);
    assert!(matches!(lib.stats_support(), StatsSupport::MissingApi(r) if r.contains("older")));
}

#[test]
fn driver_open_close_and_properties() {
    let env = env();
    env.set("FAKE_CUFILE_OPEN_RESULT", "5001");
    let (lib, hooks) = load(Variant::Full);
    let err = lib.driver_open().unwrap_err();
    assert_eq!((err.code, err.context), (5001, "cuFileDriverOpen"));
    assert_eq!(lib.driver_opens(), 0);
    env.remove("FAKE_CUFILE_OPEN_RESULT");
    lib.driver_open().unwrap();
    assert_eq!(
        (lib.driver_opens(), hooks.int("fake_cufile_open_count")),
        (1, 1)
    );
    lib.driver_close().unwrap();
    assert_eq!(
        (lib.driver_opens(), hooks.int("fake_cufile_open_count")),
        (0, 0)
    );
    // Never closes an open it does not own.
    assert!(lib.driver_close().is_err());

    let p = lib.properties().unwrap();
    assert!(!p.is_gds_available() && p.compat_mode_allowed());
    assert_eq!(
        (
            p.max_direct_io_size,
            p.max_batch_io_size,
            p.max_batch_io_timeout_msecs
        ),
        (16384, 128, 5)
    );
    env.set("FAKE_CUFILE_NVFS_MAJOR", "2");
    env.set("FAKE_CUFILE_NVFS_MINOR", "17");
    let p = lib.properties().unwrap();
    assert!(p.is_gds_available());
    assert_eq!((p.nvfs_major, p.nvfs_minor), (2, 17));
}

#[test]
fn driver_settings_reach_cufile_with_their_values() {
    let _env = env();
    let (lib, hooks) = load(Variant::Full);
    assert_eq!(hooks.int("fake_cufile_open_count"), 0);
    for control in [
        DriverControl::PollMode { enabled: true, threshold_kb: 64 },
        DriverControl::MaxDirectIoKb(8192),
        DriverControl::MaxCacheKb(65536),
        DriverControl::MaxPinnedMemoryKb(1 << 20),
    ] {
        lib.set_driver_control(control).unwrap();
    }
    lib.driver_open().unwrap();
    let p = lib.properties().unwrap();
    assert_eq!(
        (p.poll_thresh_size, p.dcontrolflags & 1, p.max_direct_io_size, p.max_device_cache_size, p.max_device_pinned_mem_size),
        (64, 1, 8192, 65536, 1 << 20)
    );
    // The fake behaves as cuFile 1.15: after the open a setter succeeds and changes nothing.
    lib.set_driver_control(DriverControl::MaxDirectIoKb(4096)).unwrap();
    assert_eq!(lib.properties().unwrap().max_direct_io_size, 8192);
    lib.driver_close().unwrap();
}

#[test]
fn register_failure_reports_code_and_message() {
    let env = env();
    env.set("FAKE_CUFILE_REGISTER_RESULT", "5027");
    let (lib, hooks) = load(Variant::Full);
    let (file, _) = data_file(16);
    let err = lib.register_handle(file.as_file().as_raw_fd()).unwrap_err();
    assert_eq!((err.code, err.context), (5027, "cuFileHandleRegister"));
    assert!(err.message().contains("udev"));
    let text = err.to_string();
    assert!(
        text.contains("5027") && text.contains("cuFileHandleRegister"),
        "{text}"
    );
    assert_eq!(hooks.int("fake_cufile_deregister_count"), 0);
}

#[test]
fn handle_deregisters_on_drop_and_fd_reaches_the_library() {
    let _env = env();
    let (lib, hooks) = load(Variant::Full);
    let (file, _) = data_file(16);
    let fd = file.as_file().as_raw_fd();
    // A bad fd is rejected by the fake's fcntl check: proves the descriptor layout carries the fd.
    assert_eq!(lib.register_handle(-1).unwrap_err().code, 5022);
    let h = lib.register_handle(fd).unwrap();
    assert_eq!(h.fd(), fd);
    drop(h);
    assert_eq!(hooks.int("fake_cufile_deregister_count"), 1);
}

/// What the fake library was given by one `CufileFile::register`, as a handle does it: the
/// handle's own (buffered) descriptor passed in, `setting` deciding.
struct Registration {
    file: CufileFile,
    /// The handle's descriptor, as `OpenFile` holds it.
    buffered: Arc<OwnedFd>,
    hooks: Hooks,
    _tmp: tempfile::NamedTempFile,
    data: Vec<u8>,
}

/// Whether an O_DIRECT open works where the test files live (tmpfs before Linux 6.6 and some
/// overlay file systems refuse it with EINVAL); tests of the O_DIRECT descriptor skip otherwise.
fn direct_io_supported() -> bool {
    let (tmp, _) = data_file(4096);
    let path = CString::new(tmp.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated path; no O_CREAT, so no mode argument.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC) };
    if fd < 0 {
        eprintln!("note: O_DIRECT open refused in {:?} ({}); O_DIRECT cases skipped", tmp.path(), std::io::Error::last_os_error());
        return false;
    }
    // SAFETY: fd was just opened and is closed once.
    unsafe { libc::close(fd) };
    true
}

impl Registration {
    fn new(setting: CufileFd, write: bool) -> Result<Registration, gdsroute::Unusable> {
        let (lib, hooks) = load(Variant::Full);
        let (tmp, data) = data_file(8192);
        let handle_file = std::fs::OpenOptions::new().read(true).write(write).open(tmp.path()).unwrap();
        let buffered = Arc::new(OwnedFd::from(handle_file));
        let lib = lib.leak();
        let file = CufileFile::register(lib, setting, lib.properties().ok().map(|p| p.is_gds_available()), "test file", &buffered)?;
        Ok(Registration { file, buffered, hooks, _tmp: tmp, data })
    }

    /// Whether the registered descriptor is the handle's own one.
    fn own_fd(&self) -> bool {
        self.hooks.int("fake_cufile_registered_fd") == self.buffered.as_raw_fd()
    }

    /// The registered descriptor's status flags at registration.
    fn flags(&self) -> c_int {
        let flags = self.hooks.int("fake_cufile_registered_flags");
        assert!(flags >= 0, "nothing registered");
        flags
    }
}

#[test]
fn auto_registers_the_buffered_descriptor_without_nvidia_fs() {
    let _env = env(); // nvidia-fs 0.0
    let r = Registration::new(CufileFd::Auto, false).unwrap();
    assert_eq!(r.file.choice().descriptor, Descriptor::Buffered);
    assert!(r.own_fd(), "the handle's descriptor was not the one registered");
    assert_eq!(r.flags() & libc::O_DIRECT, 0);
    assert_eq!(
        r.file.choice().to_string(),
        "cuFile registered the buffered descriptor (no nvidia-fs: cuFile's compat path reads the page cache)"
    );
}

#[test]
fn auto_registers_an_o_direct_descriptor_with_nvidia_fs() {
    if !direct_io_supported() {
        return;
    }
    let env = env();
    env.set("FAKE_CUFILE_NVFS_MAJOR", "2");
    env.set("FAKE_CUFILE_NVFS_MINOR", "17");
    let r = Registration::new(CufileFd::Auto, false).unwrap();
    assert_eq!(r.file.choice().descriptor, Descriptor::Direct);
    assert!(!r.own_fd(), "a second descriptor should have been opened");
    assert_ne!(r.flags() & libc::O_DIRECT, 0);
    assert_eq!(r.flags() & libc::O_ACCMODE, libc::O_RDONLY);
    assert!(r.file.choice().to_string().contains("O_DIRECT descriptor (nvidia-fs is loaded"));
}

#[test]
fn forced_descriptors_ignore_nvidia_fs() {
    if !direct_io_supported() {
        return;
    }
    let env = env();
    // direct without nvidia-fs: KvikIO's behaviour; the access mode follows the handle's.
    let r = Registration::new(CufileFd::Direct, true).unwrap();
    assert_eq!(r.file.choice().descriptor, Descriptor::Direct);
    assert!(!r.own_fd());
    assert_ne!(r.flags() & libc::O_DIRECT, 0);
    assert_eq!(r.flags() & libc::O_ACCMODE, libc::O_RDWR);
    drop(r);
    env.set("FAKE_CUFILE_NVFS_MAJOR", "2");
    let r = Registration::new(CufileFd::Buffered, false).unwrap();
    assert_eq!(r.file.choice().descriptor, Descriptor::Buffered);
    assert!(r.own_fd());
    assert_eq!(r.flags() & libc::O_DIRECT, 0);
    assert!(r.file.choice().to_string().contains("GDSROUTE_CUFILE_FD=buffered"));
}

#[test]
fn a_registered_buffered_descriptor_stays_open_until_deregistration() {
    let _env = env();
    for setting in [CufileFd::Buffered, CufileFd::Direct] {
        if setting == CufileFd::Direct && !direct_io_supported() {
            continue;
        }
        let r = Registration::new(setting, false).unwrap();
        let Registration { file, buffered, hooks, _tmp, data } = r;
        // The handle's owner lets go of its descriptor first (its fields may drop in any order).
        drop(buffered);
        if setting == CufileFd::Buffered {
            let mut buf = vec![0u8; data.len()];
            // SAFETY: `buf` is host memory of the requested size, alive for the call.
            let n = unsafe { file.library().read(file.handle(), buf.as_mut_ptr().cast(), buf.len(), 0, 0) };
            assert_eq!((n, &buf), (Ok(data.len()), &data), "read through the registered descriptor");
        }
        drop(file);
        assert_eq!(hooks.int("fake_cufile_deregister_count"), 1, "{setting:?}");
        assert_eq!(hooks.int("fake_cufile_deregistered_closed_count"), 0, "{setting:?}: descriptor closed before deregistration");
    }
}

#[test]
fn failed_registration_of_the_buffered_descriptor_is_a_reason_and_keeps_no_share() {
    let env = env();
    env.set("FAKE_CUFILE_REGISTER_RESULT", "5027");
    let (lib, _hooks) = load(Variant::Full);
    let (tmp, _) = data_file(16);
    let buffered = Arc::new(OwnedFd::from(std::fs::File::open(tmp.path()).unwrap()));
    let why = CufileFile::register(lib.leak(), CufileFd::Auto, None, "f", &buffered).err().unwrap();
    assert_eq!(why.reason, FallbackReason::RegisterFailed);
    assert!(why.message.contains("5027"), "{}", why.message);
    assert_eq!(Arc::strong_count(&buffered), 1);
}

#[test]
fn read_decoding_for_each_mode() {
    let env = env();
    let (lib, _h) = load(Variant::Full);
    let (file, data) = data_file(20000);
    let h = lib.register_handle(file.as_file().as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 9000];
    let read = |buf: &mut Vec<u8>, size: usize, file_off: i64, buf_off: i64| {
        assert!(buf_off as usize + size <= buf.len());
        // SAFETY: the range lies inside `buf` (asserted), host memory that the fake writes.
        unsafe { lib.read(&h, buf.as_mut_ptr().cast(), size, file_off, buf_off) }
    };

    assert_eq!(read(&mut buf, 8192, 100, 16), Ok(8192));
    assert_eq!(&buf[16..16 + 8192], &data[100..100 + 8192]);
    assert_eq!(
        read(&mut buf, 8192, 19000, 0),
        Ok(1000),
        "short read at end of file"
    );

    env.set("FAKE_CUFILE_READ_MODE", "short");
    assert_eq!(read(&mut buf, 4096, 0, 0), Ok(2048));

    env.set("FAKE_CUFILE_READ_MODE", "errno");
    assert_eq!(
        read(&mut buf, 4096, 0, 0),
        Err(IoFailure::Errno(libc::EIO))
    );
    env.set("FAKE_CUFILE_READ_ERRNO", "5011");
    assert_eq!(
        read(&mut buf, 4096, 0, 0),
        Err(IoFailure::Cufile(5011)),
        "cuFile code carried in errno"
    );

    env.set("FAKE_CUFILE_READ_MODE", "negative");
    assert_eq!(read(&mut buf, 4096, 0, 0), Err(IoFailure::Cufile(5011)));
    env.set("FAKE_CUFILE_READ_CODE", "5027");
    let err = read(&mut buf, 4096, 0, 0).unwrap_err();
    assert_eq!(err, IoFailure::Cufile(5027));
    assert!(err.to_string().contains("cuFileRead"), "{err}");
}

/// Runs a fixed set of reads under stats level 3 and returns the totals.
fn stats_run(env: &common::ScopedEnv, version: &str, num_gpus: &str) -> gdsroute::testing::cufile::PerGpuTotals {
    env.set("FAKE_CUFILE_VERSION", version);
    env.set("FAKE_CUFILE_NUM_GPUS", num_gpus);
    let (lib, _h) = load(Variant::Full);
    assert_eq!(lib.stats_support(), StatsSupport::Available);
    let stats = lib.stats().unwrap();
    stats.set_level(3).unwrap();
    assert_eq!(stats.level().unwrap(), 3);
    assert_eq!(
        stats.start().unwrap_err().code,
        5001,
        "stats need an open driver"
    );
    assert_eq!(stats.read_per_gpu_totals().unwrap_err().code, 5001);
    lib.driver_open().unwrap();
    stats.start().unwrap();
    stats.reset().unwrap();
    let before = stats.read_per_gpu_totals().unwrap();

    let (file, _) = data_file(16384);
    let h = lib.register_handle(file.as_file().as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 16384];
    let ptr = buf.as_mut_ptr().cast();
    // SAFETY (all reads below): `buf` is 16 KiB of host memory; each range fits inside it.
    unsafe {
        assert_eq!(lib.read(&h, ptr, 4096, 0, 0), Ok(4096));
        assert_eq!(lib.read(&h, ptr, 4096, 4096, 4096), Ok(4096));
        assert_eq!(lib.read(&h, ptr, 1000, 10, 0), Ok(1000)); // unaligned
        env.set("FAKE_CUFILE_READ_MODE", "errno");
        assert!(lib.read(&h, ptr, 4096, 0, 0).is_err());
        env.remove("FAKE_CUFILE_READ_MODE");
    }
    let after = stats.read_per_gpu_totals().unwrap();
    stats.stop().unwrap();
    // The level gate: L3 needs level 3.
    stats.set_level(1).unwrap();
    assert_eq!(stats.read_per_gpu_totals().unwrap_err().code, 5022);
    after.delta_since(&before)
}

#[test]
fn stats_follow_the_1150_layout() {
    let env = env();
    let t = stats_run(&env, "1150", "1");
    assert_eq!(
        (
            t.n_total_reads,
            t.n_posix_reads,
            t.n_nvfs_reads,
            t.n_p2p_reads
        ),
        (4, 3, 0, 0)
    );
    assert_eq!(
        (t.n_unaligned_reads, t.n_reads_err, t.read_bytes),
        (1, 1, 4096 + 4096 + 1000)
    );
}

#[test]
fn stats_follow_the_1190_layout() {
    let env = env();
    env.set("FAKE_CUFILE_ROUTE", "nvfs");
    let t = stats_run(&env, "1190", "1");
    assert_eq!(
        (t.n_total_reads, t.n_nvfs_reads, t.n_posix_reads),
        (4, 3, 0)
    );
    assert_eq!(
        (t.n_unaligned_reads, t.n_reads_err, t.read_bytes),
        (1, 1, 9192)
    );
}

#[test]
fn stats_sum_gpus_and_clamp_the_count() {
    let env = env();
    let t = stats_run(&env, "1200", "3");
    assert_eq!((t.n_total_reads, t.read_bytes), (12, 3 * 9192));
    let t = stats_run(&env, "1150", "40");
    assert_eq!(t.n_total_reads, 16 * 4, "num_gpus clamped to 16");
}

/// The UUID the fake reports for its GPU entry `g` under `FAKE_CUFILE_IO_GPU`.
fn fake_uuid(g: u8) -> [u8; 16] {
    let mut uuid = [0u8; 16];
    uuid[..4].copy_from_slice(b"FAKE");
    uuid[15] = g + 1;
    uuid
}

#[test]
fn each_gpu_reports_its_own_counters_and_they_reach_their_device() {
    use gdsroute::testing::cufile::PerGpuSnapshot;
    let env = env();
    env.set("FAKE_CUFILE_VERSION", "1190");
    env.set("FAKE_CUFILE_NUM_GPUS", "3");
    env.set("FAKE_CUFILE_IO_GPU", "0");
    let (lib, _h) = load(Variant::Full);
    let stats = lib.stats().unwrap();
    stats.set_level(3).unwrap();
    lib.driver_open().unwrap();
    stats.start().unwrap();
    stats.reset().unwrap();
    let before = stats.read_per_gpu().unwrap();
    assert_eq!(before.0.iter().map(|g| g.uuid).collect::<Vec<_>>(), [fake_uuid(0), fake_uuid(1), fake_uuid(2)]);

    let (file, _) = data_file(16384);
    let h = lib.register_handle(file.as_file().as_raw_fd()).unwrap();
    let mut buf = vec![0u8; 16384];
    let ptr = buf.as_mut_ptr().cast();
    // SAFETY (all I/O below): `buf` is 16 KiB of host memory; each range fits inside it.
    unsafe {
        // GPU 0: two reads through cuFile's compatibility path.
        assert_eq!(lib.read(&h, ptr, 4096, 0, 0), Ok(4096));
        assert_eq!(lib.read(&h, ptr, 1000, 10, 0), Ok(1000));
        // GPU 2: one read through nvidia-fs, one failed read, two writes.
        env.set("FAKE_CUFILE_IO_GPU", "2");
        env.set("FAKE_CUFILE_ROUTE", "nvfs");
        assert_eq!(lib.read(&h, ptr, 8192, 4096, 0), Ok(8192));
        assert_eq!(lib.write(&h, ptr, 4096, 0, 0), Some(Ok(4096)));
        assert_eq!(lib.write(&h, ptr, 100, 8192, 0), Some(Ok(100)));
        env.set("FAKE_CUFILE_READ_MODE", "errno");
        assert!(lib.read(&h, ptr, 4096, 0, 0).is_err());
        assert!(lib.write(&h, ptr, 4096, 0, 0).unwrap().is_err());
        env.remove("FAKE_CUFILE_READ_MODE");
    }
    let after = stats.read_per_gpu().unwrap();
    let d = after.delta_since(&before);
    let gpu = |g: usize| d.0[g].totals;
    assert_eq!((gpu(0).n_total_reads, gpu(0).n_posix_reads, gpu(0).n_nvfs_reads, gpu(0).n_unaligned_reads, gpu(0).read_bytes), (2, 2, 0, 1, 5096));
    assert_eq!((gpu(0).n_total_writes, gpu(1).n_total_reads, gpu(1).n_total_writes), (0, 0, 0));
    assert_eq!((gpu(2).n_total_reads, gpu(2).n_nvfs_reads, gpu(2).n_reads_err, gpu(2).read_bytes), (2, 1, 1, 8192));
    assert_eq!((gpu(2).n_total_writes, gpu(2).n_nvfs_writes, gpu(2).n_posix_writes, gpu(2).n_writes_err, gpu(2).write_bytes), (3, 2, 0, 1, 4196));
    assert_eq!(d.total().n_total_reads, 4, "the totals stay the sum over GPUs");

    // To devices by UUID: cuFile's GPU 0 is device 1 of this process and its GPU 2 device 0
    // (CUDA_VISIBLE_DEVICES reorders them); its GPU 1 is no device of the process.
    let uuids = [(fake_uuid(0), 1), (fake_uuid(2), 0)].into_iter().collect();
    let by_device = gdsroute::testing::cufile::cufile_by_device(&d, &uuids);
    assert_eq!(by_device.keys().copied().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(by_device[&1], gpu(0));
    assert_eq!(by_device[&0], gpu(2));
    assert!(gdsroute::testing::cufile::cufile_by_device(&d, &Default::default()).is_empty());
    assert!(gdsroute::testing::cufile::cufile_by_device(&PerGpuSnapshot::default(), &uuids).is_empty());
    drop(h);
    stats.stop().unwrap();
}

#[test]
fn log_configuration_respects_the_user() {
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cufile.json");
    std::fs::write(&json, "{ \"logging\": {\n // \"dir\": \"/home/x\",\n \"level\": \"ERROR\" } }").unwrap();
    env.set("CUFILE_ENV_PATH_JSON", &json);
    env.remove("CUFILE_LOGFILE_PATH");
    assert_eq!(log_configuration(), None, "a commented-out dir is not a configuration");
    env.set("CUFILE_LOGFILE_PATH", "/tmp/mine.log");
    assert_eq!(log_configuration(), Some("CUFILE_LOGFILE_PATH is set"));
    env.remove("CUFILE_LOGFILE_PATH");
    std::fs::write(&json, "{ \"logging\": { \"dir\": \"/var/log/cufile\" } }").unwrap();
    assert_eq!(log_configuration(), Some("cufile.json sets logging.dir"));
}

#[test]
fn missing_library_lists_every_candidate_tried() {
    let env = env();
    env.set(LIBRARY_ENV_VAR, "/nonexistent/env/libcufile.so.0");
    let explicit = Path::new("/nonexistent/explicit/libcufile.so.0");
    let expected = [
        "/nonexistent/explicit/libcufile.so.0",
        "/nonexistent/env/libcufile.so.0",
        "libcufile.so.0",
        "libcufile.so",
    ];
    match CufileLibrary::load(Some(explicit)) {
        Err(LoadError::NotFound { attempts }) => {
            let tried: Vec<_> = attempts.iter().map(|a| a.candidate.as_str()).collect();
            assert_eq!(tried, expected);
            assert!(attempts.iter().all(|a| !a.error.is_empty()));
        }
        // A machine with a real libcufile: the two bogus paths still come first.
        Ok(lib) => {
            let tried: Vec<_> = lib
                .failed_attempts()
                .iter()
                .map(|a| a.candidate.as_str())
                .collect();
            assert_eq!(tried[..2], expected[..2]);
        }
        Err(e) => panic!("unexpected: {e}"),
    }
}

#[test]
fn env_var_selects_the_library() {
    let env = env();
    let path = fake(Variant::Full);
    env.set(LIBRARY_ENV_VAR, &path);
    let lib = CufileLibrary::load(None).unwrap();
    assert_eq!(lib.path(), path.display().to_string());
    assert!(lib.failed_attempts().is_empty());
}

/// Opt-in smoke test against a real libcufile (set `GDSROUTE_TEST_REAL_CUFILE` to its path). It
/// never opens the driver, so it is safe without a GPU or libcuda (cuFile 1.16+ would spin).
#[test]
fn real_library_smoke_without_driver_open() {
    let Some(path) = std::env::var_os("GDSROUTE_TEST_REAL_CUFILE") else {
        eprintln!("GDSROUTE_TEST_REAL_CUFILE not set; skipped");
        return;
    };
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    env.set("CUFILE_ENV_PATH_JSON", dir.path().join("absent.json"));
    let lib = CufileLibrary::load_candidates(&[PathBuf::from(path)]).expect("real libcufile loads");
    let v = lib.version().expect("cuFileGetVersion answers before open");
    assert!(v >= 1000, "{v}");
    if v >= 1150 {
        assert_eq!(lib.stats_support(), StatsSupport::Available);
        let stats = lib.stats().unwrap();
        stats.set_level(3).unwrap();
        assert_eq!(stats.level().unwrap(), 3);
        assert_eq!(stats.set_level(4).unwrap_err().code, 5022);
        assert_eq!(
            stats.start().unwrap_err().code,
            5001,
            "stats need an open driver"
        );
    }
    // 1.15 without libcuda answers 5011 (CUresult 3, not initialised); 1.20 answers defaults.
    let p = lib.properties();
    eprintln!(
        "real libcufile {} at {}: {p:?}",
        lib.version_string(),
        lib.path()
    );
}

/// With a loadable libcufile (the fake) but no CUDA, every mode that considers cuFile reports
/// CUDA, the most fundamental missing piece, not the library or `/run/udev` (issue 15: AUTO said
/// NO_UDEV and advised `KVIKIO_COMPAT_MODE=off`, which cannot work without CUDA).
#[test]
fn without_cuda_the_verdict_is_cuda_even_with_a_library() {
    if common::cuda_works() {
        return; // about machines without CUDA
    }
    let env = env();
    env.set(LIBRARY_ENV_VAR, fake(Variant::Full));
    let (tmp, _) = data_file(4096);
    for mode in [gdsroute::settings::CompatMode::Auto, gdsroute::settings::CompatMode::Off] {
        let file = gdsroute::File::open(tmp.path().as_os_str().as_encoded_bytes(), "r", 0, Some(mode)).unwrap();
        let verdict = file.cufile_verdict().unwrap().unwrap_err();
        assert_eq!(verdict.reason, FallbackReason::CudaUnavailable, "{mode:?}: {verdict:?}");
        assert!(!verdict.message.contains("COMPAT_MODE"), "{mode:?}: advice that cannot work: {}", verdict.message);
    }
}
