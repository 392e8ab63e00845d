//! Faults from below on the GPU route: the fake libcufile (tests/fake_cufile) stands in for cuFile
//! on a real GPU and fails on purpose: registration refused, EIO in the middle of a file, a
//! negative cuFile code, short reads, an old library without statistics; and which descriptor the
//! whole path registers (GDSROUTE_CUFILE_FD, nvidia-fs version). Each scenario runs in a
//! fresh process (cuFile is probed once per process). Needs a GPU, run with `--ignored`;
//! GDSROUTE_TEST_FAKE_CUFILE_DIR names the folder with the fake libraries (tools/gpu/gpu-build.sh).

mod common;

use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::FallbackReason;
use gdsroute::settings::CompatMode;
use gdsroute::counters::CufileStatsState;
use gdsroute::{Error, File};
use std::process::Command;

const SCENARIO: &str = "GDSROUTE_GPU_FAULT_SCENARIO";
const SIZE: usize = (9 << 20) + 4099;
const GUARD: usize = 4096;
const POISON: u8 = 0x5A;

fn ok(call: &str, r: sys::CUresult) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{call}");
}

/// A poisoned device allocation with the destination `GUARD` bytes in.
struct Dest(sys::CUdeviceptr);

impl Dest {
    fn new() -> Dest {
        let mut dev = 0;
        ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, SIZE + 2 * GUARD) });
        ok("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dev, POISON, SIZE + 2 * GUARD) });
        ok("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() });
        Dest(dev)
    }
    fn ptr(&self) -> *mut u8 {
        (self.0 as usize + GUARD) as *mut u8
    }
    fn back(&self) -> Vec<u8> {
        let mut v = vec![0u8; SIZE + 2 * GUARD];
        ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), self.0, v.len()) });
        v
    }
    /// Checks `[0, n)` against the file and that nothing outside `[0, size)` was written.
    fn check(&self, data: &[u8], n: usize, size: usize) {
        let back = self.back();
        assert!(back[GUARD..GUARD + n] == data[..n], "bytes differ");
        assert!(back[..GUARD].iter().all(|&b| b == POISON), "front margin written");
        assert!(back[GUARD + size..].iter().all(|&b| b == POISON), "back margin written");
    }
}

fn read(file: &File, dest: &Dest, size: usize) -> gdsroute::Result<usize> {
    unsafe { file.pread_raw(dest.ptr(), size, 0) }?.wait()
}

fn run_scenario(name: &str) {
    gdsroute::testing::device::cuda::cuda().expect("a GPU");
    let _ctx = gdsroute::testing::device::cuda::ScopedContext::push(gdsroute::testing::device::cuda::primary_context(0).unwrap()).unwrap();
    std::fs::create_dir_all("/run/udev").ok(); // AUTO's environment check; the fake needs no udev
    let data = random_bytes(SIZE, 21);
    let tmp = common::temp_file_in(Some("/var/tmp"), &data);
    let open = |mode| common::open(tmp.path(), Some(mode));
    let dest = Dest::new();
    match name {
        "register_refused_auto" => {
            let file = open(CompatMode::Auto);
            let why = file.cufile_verdict().unwrap().unwrap_err();
            assert_eq!(why.reason, FallbackReason::RegisterFailed, "{}", why.message);
            assert!(why.message.contains("5027"), "{}", why.message);
            assert_eq!(read(&file, &dest, SIZE).unwrap(), SIZE);
            dest.check(&data, SIZE, SIZE);
            let c = file.stats();
            assert_eq!((c.cufile_tasks, c.posix_tasks_auto_fallback), (0, 3));
        }
        "register_refused_off" => {
            let err = read(&open(CompatMode::Off), &dest, SIZE).unwrap_err();
            assert!(matches!(err, Error::CufileUnavailable(ref m) if m.contains("5027")), "{err}");
            dest.check(&data, 0, 0);
        }
        "eio_mid_file" => {
            let file = open(CompatMode::Off);
            let err = read(&file, &dest, SIZE).unwrap_err();
            assert_eq!(err.os_error(), Some(libc::EIO), "{err}");
            assert_eq!(err.status(), gdsroute::Status::IoError);
            dest.check(&data, 0, SIZE); // nothing outside the requested range
            // The failing task is the one covering FAKE_CUFILE_FAIL_AT (5 MiB + 123); the library
            // keeps working: the first 4 MiB read through cuFile, the whole file through POSIX.
            let fresh = Dest::new();
            assert_eq!(read(&file, &fresh, 4 << 20).unwrap(), 4 << 20);
            fresh.check(&data, 4 << 20, 4 << 20);
            let fresh = Dest::new();
            assert_eq!(read(&open(CompatMode::On), &fresh, SIZE).unwrap(), SIZE);
            fresh.check(&data, SIZE, SIZE);
            assert_eq!(file.stats().calls_failed, 1);
        }
        "negative_code" => {
            let err = read(&open(CompatMode::Off), &dest, SIZE).unwrap_err();
            assert!(matches!(err, Error::Cufile(ref m) if m.contains("5011")), "{err}");
            dest.check(&data, 0, SIZE);
        }
        "short_reads" => {
            let file = open(CompatMode::Auto);
            assert_eq!(read(&file, &dest, SIZE).unwrap(), SIZE);
            dest.check(&data, SIZE, SIZE);
            assert_eq!(file.stats().cufile_tasks, 3);
        }
        "nvfs_counters" => {
            gdsroute::counters::reset_process_counters();
            let file = open(CompatMode::Auto);
            assert_eq!(read(&file, &dest, SIZE).unwrap(), SIZE);
            dest.check(&data, SIZE, SIZE);
            let c = gdsroute::counters::process_counters();
            assert_eq!(c.cufile_stats_state, CufileStatsState::Active as u64);
            assert_eq!((c.cufile_n_total_reads, c.cufile_n_nvfs_reads, c.cufile_n_posix_reads), (3, 3, 0));
            println!("fake cuFile, route nvfs: n={} nvfs={} posix={}", c.cufile_n_total_reads, c.cufile_n_nvfs_reads, c.cufile_n_posix_reads);
        }
        "old_library" => {
            let file = open(CompatMode::Auto);
            assert_eq!(read(&file, &dest, SIZE).unwrap(), SIZE);
            dest.check(&data, SIZE, SIZE);
            let c = gdsroute::counters::process_counters();
            assert_eq!((c.cufile_tasks, c.cufile_stats_state), (3, CufileStatsState::ApiMissing as u64));
        }
        "zero_size_needs_no_cufile" => {
            // OFF with registration refused: a zero-byte read is still OK, 0 bytes, no probe.
            let file = open(CompatMode::Off);
            assert_eq!(read(&file, &dest, 0).unwrap(), 0);
            assert_eq!(unsafe { file.read_raw(dest.ptr(), 0, 0) }.unwrap(), 0);
            dest.check(&data, 0, 0);
        }
        "shutdown_then_fallback" => {
            let auto = open(CompatMode::Auto);
            assert_eq!(read(&auto, &dest, SIZE).unwrap(), SIZE);
            assert_eq!(auto.stats().cufile_tasks, 3);
            assert!(gdsroute::shutdown(), "the driver closes when no cuFile call runs");
            let why = auto.cufile_verdict().unwrap().unwrap_err();
            assert_eq!(why.reason, FallbackReason::DriverOpenFailed, "{}", why.message);
            let fresh = Dest::new();
            assert_eq!(read(&auto, &fresh, SIZE).unwrap(), SIZE);
            fresh.check(&data, SIZE, SIZE);
            assert_eq!(auto.stats().posix_tasks_auto_fallback, 3);
            let err = read(&open(CompatMode::Off), &fresh, SIZE).unwrap_err();
            assert!(matches!(err, Error::CufileUnavailable(_)), "{err}");
            drop(auto); // the handle is not deregistered against a closed driver
        }
        "descriptor" => {
            // The descriptor the whole path registers (settings, driver properties, register).
            let expected = std::env::var("GDSROUTE_TEST_EXPECT_FD").unwrap();
            let file = open(CompatMode::Auto);
            assert_eq!(read(&file, &dest, SIZE).unwrap(), SIZE);
            dest.check(&data, SIZE, SIZE);
            assert_eq!(file.stats().cufile_tasks, 3);
            let choice = file.cufile_descriptor().expect("registered");
            assert_eq!(format!("{:?}", choice.descriptor), expected, "{choice}");
            println!("{choice}");
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
#[ignore = "needs a GPU; runs one scenario per child process"]
fn fault_scenario_child() {
    if let Ok(name) = std::env::var(SCENARIO) {
        run_scenario(&name);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn fake_cufile_faults_on_the_gpu() {
    let dir = std::env::var("GDSROUTE_TEST_FAKE_CUFILE_DIR").expect("GDSROUTE_TEST_FAKE_CUFILE_DIR");
    let full = format!("{dir}/libfake_cufile_full.so");
    let old = format!("{dir}/libfake_cufile_nostats.so");
    let fail_at = ((5 << 20) + 123).to_string();
    type Scenario<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let scenarios: [Scenario; 12] = [
        ("register_refused_auto", &full, &[("FAKE_CUFILE_REGISTER_RESULT", "5027")]),
        ("register_refused_off", &full, &[("FAKE_CUFILE_REGISTER_RESULT", "5027")]),
        ("eio_mid_file", &full, &[("FAKE_CUFILE_READ_MODE", "errno"), ("FAKE_CUFILE_FAIL_AT", &fail_at)]),
        ("negative_code", &full, &[("FAKE_CUFILE_READ_MODE", "negative")]),
        ("short_reads", &full, &[("FAKE_CUFILE_READ_MODE", "short")]),
        ("nvfs_counters", &full, &[("FAKE_CUFILE_ROUTE", "nvfs")]),
        ("old_library", &old, &[]),
        ("zero_size_needs_no_cufile", &full, &[("FAKE_CUFILE_REGISTER_RESULT", "5027")]),
        ("shutdown_then_fallback", &full, &[]),
        ("descriptor", &full, &[("GDSROUTE_TEST_EXPECT_FD", "Buffered")]),
        ("descriptor", &full, &[("FAKE_CUFILE_NVFS_MAJOR", "2"), ("GDSROUTE_TEST_EXPECT_FD", "Direct")]),
        ("descriptor", &full, &[("FAKE_CUFILE_NVFS_MAJOR", "2"), ("GDSROUTE_CUFILE_FD", "buffered"), ("GDSROUTE_TEST_EXPECT_FD", "Buffered")]),
    ];
    // The scenarios create /run/udev (AUTO's environment check). Leaving it behind changed what
    // later processes on the machine did: AUTO then opened cuFile's driver at a first read
    // (about 0.4 s) before falling back (measured on the H200 machine, 2026-11-30). An empty directory this
    // test created is removed when it ends, whatever the outcome.
    let _udev = RemoveIfCreated::new("/run/udev");
    for (name, library, env) in scenarios {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "fault_scenario_child", "--nocapture"])
            .env(SCENARIO, name)
            .env("GDSROUTE_CUFILE_LIBRARY", library)
            .env("FAKE_CUFILE_DEVICE", "1")
            .env_remove("GDSROUTE_CUFILE_FD")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("1 passed"), "scenario {name} failed:\n{text}");
        println!("scenario {name}: ok");
    }
}

/// Removes a directory on drop if it did not exist when this was made and is empty by then.
struct RemoveIfCreated(Option<&'static str>);

impl RemoveIfCreated {
    fn new(dir: &'static str) -> Self {
        RemoveIfCreated((!std::path::Path::new(dir).exists()).then_some(dir))
    }
}

impl Drop for RemoveIfCreated {
    fn drop(&mut self) {
        if let Some(dir) = self.0 {
            let _ = std::fs::remove_dir(dir); // fails, harmlessly, if something was put in it
        }
    }
}

