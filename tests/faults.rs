//! Faults and hostile files through the Rust API (POSIX backend).
//!
//! With the read shim (tests/c/fault_shim.c, for pread and preadv2; compiled here with `cc` and
//! preloaded into a child run of this test binary): EINTR and short reads must leave every byte right; EIO in the
//! middle of a multi-task read gives `IoError` with EIO, the path and the failing read's offset, nothing
//! written outside the buffer, and the library keeps working. Without it: a directory, a FIFO
//! (writer present), /dev/zero, /dev/null, a file that grows after open and one truncated by
//! another thread during a read.

mod common;

use common::{POISON, random_bytes};
use gdsroute::{File, Status, settings};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Task size and thread count are process-wide; tests that change them run one at a time.
static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

const GUARD: usize = 64;
const MIB: usize = 1 << 20;
const CHILD_ENV: &str = "GDSROUTE_FAULTS_CHILD";


fn open(path: &Path) -> File {
    File::open(path.as_os_str().as_encoded_bytes(), "r", 0, None).unwrap()
}

fn guards_intact(buf: &[u8], from: usize) -> bool {
    buf[..GUARD].iter().all(|&b| b == POISON) && buf[GUARD + from..].iter().all(|&b| b == POISON)
}

/// Reads through each entry point and checks count, bytes and guards.
fn read_and_check(file: &File, data: &[u8], size: usize, offset: u64, how: u32) {
    let mut buf = vec![POISON; size + 2 * GUARD];
    let n = read_way(file, &mut buf, size, offset, how).unwrap_or_else(|e| panic!("size {size} offset {offset}: {e}"));
    let start = (offset as usize).min(data.len());
    let expect = (data.len() - start).min(size);
    assert_eq!(n, expect, "size {size} offset {offset}");
    assert!(buf[GUARD..GUARD + n] == data[start..start + n], "bytes differ: size {size} offset {offset}");
    assert!(guards_intact(&buf, n), "written outside the read: size {size} offset {offset}");
}

/// Reads `size` bytes at `offset` into `buf` after its front guard, one of three ways by `how`:
/// `read_into`, `pread_raw` and wait, `read_raw`.
fn read_way(file: &File, buf: &mut [u8], size: usize, offset: u64, how: u32) -> gdsroute::Result<usize> {
    match how % 3 {
        0 => file.read_into(&mut buf[GUARD..GUARD + size], offset),
        1 => unsafe { file.pread_raw(buf[GUARD..].as_mut_ptr(), size, offset) }.and_then(|op| op.wait()),
        _ => unsafe { file.read_raw(buf[GUARD..].as_mut_ptr(), size, offset) },
    }
}

/// Totals from the preloaded shim: [EINTR, short, EIO, intercepted calls].
fn shim_counts() -> Option<[u64; 4]> {
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fault_shim_counts".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    let f: extern "C" fn(*mut u64) = unsafe { std::mem::transmute(sym) };
    let mut out = [0u64; 4];
    f(out.as_mut_ptr());
    Some(out)
}


/// Runs `child_under_shim` in a new process with the shim preloaded and `env` set.
fn run_child(scenario: &str, env: &[(&str, String)]) {
    let tmp = tempfile::tempdir().unwrap();
    let Some(shim) = common::build_fault_shim(tmp.path()) else { return };
    let mut all: Vec<(&str, std::ffi::OsString)> =
        vec![("LD_PRELOAD", shim.into()), (CHILD_ENV, scenario.into()), ("GDSROUTE_FAULTS_DIR", tmp.path().into())];
    all.extend(env.iter().map(|(k, v)| (*k, v.into())));
    common::run_ignored_test("child_under_shim", &all);
}

#[test]
fn eintr_and_short_reads_are_retried_under_the_shim() {
    run_child("retry", &[("FAULT_EINTR_EVERY", "3".into()), ("FAULT_SHORT_EVERY", "2".into())]);
}

#[test]
fn eio_mid_read_under_the_shim() {
    run_child(
        "eio",
        &[("FAULT_EIO_AT", (5 * MIB + 1).to_string()), ("FAULT_PATH_CONTAINS", "eio-target".into())],
    );
}

/// A bad block as a disk has it: reads before it succeed, short, and the read that starts at it
/// fails. The error names that read's offset, the bad block's, on every way of reading (as a
/// write names its failing `pwrite`), and every byte before it arrived.
#[test]
fn eio_at_a_bad_block_names_the_failing_reads_offset() {
    run_child(
        "eio-partial",
        &[("FAULT_EIO_AT", (5 * MIB + 1).to_string()), ("FAULT_EIO_PARTIAL", "1".into()), ("FAULT_PATH_CONTAINS", "eio-target".into())],
    );
}

/// The same bad block, page-aligned, inside a direct read (`KVIKIO_AUTO_DIRECT_IO_READ`) into an
/// aligned buffer and, through the scratch buffer, into a misaligned one.
#[test]
fn eio_at_a_bad_block_inside_a_direct_read_names_its_offset() {
    run_child(
        "eio-partial-direct",
        &[("FAULT_EIO_AT", (5 * MIB + 8192).to_string()), ("FAULT_EIO_PARTIAL", "1".into()), ("FAULT_PATH_CONTAINS", "eio-target".into())],
    );
}

/// The body of the shim scenarios; does nothing unless started by `run_child`.
#[test]
#[ignore = "run by the *_under_the_shim tests in a child process with LD_PRELOAD"]
fn child_under_shim() {
    let Ok(scenario) = std::env::var(CHILD_ENV) else { return };
    let counts = shim_counts().expect("fault shim not preloaded");
    assert_eq!(counts, [0, 0, 0, 0]);
    let dir = PathBuf::from(std::env::var("GDSROUTE_FAULTS_DIR").unwrap());
    let data = random_bytes(10 * MIB + 4321, 7);
    settings::set_task_size(MIB as u64).unwrap();
    settings::set_num_threads(4).unwrap();
    match scenario.as_str() {
        "retry" => {
            let path = dir.join("data.bin");
            std::fs::write(&path, &data).unwrap();
            let file = open(&path);
            let mut rng = 0x1234_5678_9ABC_DEF0u64;
            for i in 0..40u32 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let size = (rng % (4 * MIB as u64)) as usize + 1;
                let offset = (rng >> 20) % (data.len() as u64 + 1000);
                read_and_check(&file, &data, size, offset, i);
            }
            for how in 0..3 {
                read_and_check(&file, &data, data.len(), 0, how);
            }
            assert_eq!(file.stats().calls_failed, 0);
            let c = shim_counts().unwrap();
            assert!(c[0] > 0 && c[1] > 0, "no faults injected: {c:?}");
            eprintln!("faults injected: eintr {} short {} over {} preads", c[0], c[1], c[3]);
        }
        "eio" => {
            let path = dir.join("eio-target.bin");
            std::fs::write(&path, &data).unwrap();
            let clean = dir.join("clean.bin");
            std::fs::write(&clean, &data).unwrap();
            let file = open(&path);
            let mut fails = 0;
            for how in 0..3u32 {
                let size = data.len();
                let mut buf = vec![POISON; size + 2 * GUARD];
                let err = read_way(&file, &mut buf, size, 0, how).expect_err("EIO must fail the read");
                fails += 1;
                assert_eq!(err.status(), Status::IoError, "{err}");
                assert_eq!(err.os_error(), Some(libc::EIO), "{err}");
                let text = err.to_string();
                assert!(text.contains("eio-target.bin"), "{text}");
                // pread splits into 1 MiB tasks: the failing task starts at 5 MiB; read_raw is one task from 0.
                let offset = if how == 2 { 0 } else { 5 * MIB };
                assert!(text.contains(&format!("offset {offset}")), "{text}");
                assert!(buf[..GUARD].iter().all(|&b| b == POISON) && buf[GUARD + size..].iter().all(|&b| b == POISON));
            }
            // Ranges that avoid the offset still read, and so do other files.
            read_and_check(&file, &data, 5 * MIB, 0, 0);
            read_and_check(&file, &data, data.len() - 5 * MIB - 2, 5 * MIB as u64 + 2, 1);
            let other = open(&clean);
            for how in 0..3 {
                read_and_check(&other, &data, data.len(), 0, how);
            }
            assert_eq!(file.stats().calls_failed, fails);
            // Two EIOs per failed call: the task's non-blocking first read only gives up
            // (posix::read_full_at_ahead), the waiting read after it reports.
            assert_eq!(shim_counts().unwrap()[2], 2 * fails, "two EIOs per failed call");
        }
        "eio-partial" => {
            let path = dir.join("eio-target.bin");
            std::fs::write(&path, &data).unwrap();
            let file = open(&path);
            let bad = 5 * MIB + 1;
            for how in 0..3u32 {
                let size = data.len();
                let mut buf = vec![POISON; size + 2 * GUARD];
                let err = read_way(&file, &mut buf, size, 0, how).expect_err("EIO must fail the read");
                assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EIO)), "{err}");
                let text = err.to_string();
                assert!(text.contains(&format!("offset {bad}:")), "how {how}: {text}");
                assert!(buf[GUARD..GUARD + bad] == data[..bad], "how {how}: the bytes before the bad block");
                assert!(buf[..GUARD].iter().all(|&b| b == POISON) && buf[GUARD + size..].iter().all(|&b| b == POISON));
            }
        }
        "eio-partial-direct" => {
            settings::set_auto_direct_io_read(true);
            let path = dir.join("eio-target.bin");
            std::fs::write(&path, &data).unwrap();
            let file = open(&path);
            let bad = 5 * MIB + 8192;
            for misalign in [0usize, 1] {
                for how in 0..3u32 {
                    let size = data.len();
                    let mut storage = vec![POISON; size + 2 * GUARD + 8192];
                    let base = storage.as_ptr() as usize;
                    // The read's first byte (GUARD past `start`) on a page, or one past it.
                    let start = (base + GUARD).next_multiple_of(4096) + misalign - base - GUARD;
                    let buf = &mut storage[start..start + size + 2 * GUARD];
                    let err = read_way(&file, buf, size, 0, how).expect_err("EIO must fail the read");
                    assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EIO)), "{err}");
                    let text = err.to_string();
                    assert!(text.contains(&format!("offset {bad}:")), "misalign {misalign} how {how}: {text}");
                    assert!(buf[GUARD..GUARD + bad] == data[..bad], "misalign {misalign} how {how}: the bytes before the bad block");
                    assert!(buf[..GUARD].iter().all(|&b| b == POISON) && buf[GUARD + size..].iter().all(|&b| b == POISON));
                }
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn directory_opens_and_reads_fail_with_eisdir() {
    let dir = tempfile::tempdir().unwrap();
    let file = open(dir.path());
    let mut buf = vec![POISON; 4 * MIB];
    let err = file.read_into(&mut buf, 0).unwrap_err();
    assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EISDIR)), "{err}");
    let err = unsafe { file.read_raw(buf.as_mut_ptr(), 100, 0) }.unwrap_err();
    assert_eq!(err.os_error(), Some(libc::EISDIR));
    assert!(buf.iter().all(|&b| b == POISON));
    for flags in ["w", "r+", "w+"] {
        let err = File::open(dir.path().as_os_str().as_encoded_bytes(), flags, 0o644, None).err().unwrap();
        assert_eq!((err.status(), err.os_error()), (Status::OpenFailed, Some(libc::EISDIR)));
    }
}

#[test]
fn fifo_with_a_writer_fails_with_espipe() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // open(2) of a FIFO for reading blocks until a writer opens it.
    let writer_path = path.clone();
    let writer = std::thread::spawn(move || {
        let mut w = std::fs::OpenOptions::new().write(true).open(writer_path).unwrap();
        w.write_all(&[7u8; 100]).unwrap();
    });
    let file = open(&path);
    writer.join().unwrap();
    let mut buf = vec![POISON; 64 << 10];
    for how in 0..2 {
        let err = if how == 0 {
            file.read_into(&mut buf, 0).unwrap_err()
        } else {
            unsafe { file.read_raw(buf.as_mut_ptr(), buf.len(), 0) }.unwrap_err()
        };
        assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::ESPIPE)), "{err}");
    }
    assert!(buf.iter().all(|&b| b == POISON));
}

#[test]
fn dev_zero_and_dev_null() {
    let zero = File::open(b"/dev/zero", "r", 0, None).unwrap();
    let mut buf = vec![POISON; 9 * MIB + 3 + 2 * GUARD];
    let n = zero.read_into(&mut buf[GUARD..GUARD + 9 * MIB + 3], 4095).unwrap();
    assert_eq!(n, 9 * MIB + 3);
    assert!(buf[GUARD..GUARD + n].iter().all(|&b| b == 0));
    assert!(guards_intact(&buf, n));
    let null = File::open(b"/dev/null", "r", 0, None).unwrap();
    buf.fill(POISON);
    assert_eq!(null.read_into(&mut buf[GUARD..GUARD + MIB], 0).unwrap(), 0);
    assert!(buf.iter().all(|&b| b == POISON));
}

#[test]
fn file_grown_after_open_shows_new_bytes() {
    let data = random_bytes(3 * MIB, 3);
    let mut tmp = tempfile::NamedTempFile::new().unwrap();
    tmp.write_all(&data[..MIB]).unwrap();
    tmp.flush().unwrap();
    let file = open(tmp.path());
    let mut buf = vec![0u8; 3 * MIB];
    assert_eq!(file.read_into(&mut buf, 0).unwrap(), MIB);
    tmp.write_all(&data[MIB..]).unwrap();
    tmp.flush().unwrap();
    assert_eq!(file.size().unwrap(), 3 * MIB as u64);
    assert_eq!(file.read_into(&mut buf, 0).unwrap(), 3 * MIB);
    assert!(buf == data);
}

#[test]
fn truncated_during_a_read_gives_a_short_correct_count_or_an_error() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let data = random_bytes(32 * MIB, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    settings::set_task_size(64 << 10).unwrap();
    settings::set_num_threads(2).unwrap();
    let (mut short, mut errors) = (0, 0);
    for (i, cut) in [0u64, 1, 4096, 3 * MIB as u64 + 5, 20 * MIB as u64].into_iter().enumerate() {
        std::fs::write(&path, &data).unwrap();
        let file = open(&path);
        let mut buf = vec![POISON; data.len() + 2 * GUARD];
        let op = unsafe { file.pread_raw(buf[GUARD..].as_mut_ptr(), data.len(), 0) }.unwrap();
        std::thread::sleep(Duration::from_micros(200 * i as u64));
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(cut).unwrap();
        match op.wait() {
            Ok(n) => {
                common::assert_bytes_across_cut(&buf[GUARD..GUARD + n], &data, cut as usize, "pread");
                short += usize::from(n < data.len());
            }
            Err(e) => {
                assert_eq!(e.status(), Status::IoError, "{e}");
                errors += 1;
            }
        }
        drop(op);
        assert!(buf[..GUARD].iter().all(|&b| b == POISON) && buf[GUARD + data.len()..].iter().all(|&b| b == POISON));
        assert_eq!(file.size().unwrap(), cut);
    }
    eprintln!("truncation during read: {short} short, {errors} errors out of 5");
    settings::set_task_size(4 << 20).unwrap();
}
