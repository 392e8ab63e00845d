//! The exit report (`GDSROUTE_REPORT`): each scenario is a child process (the report is written at
//! its exit) that reads and writes a file; the parent reads what it wrote, to stderr or a file.

mod common;

use std::ffi::OsString;

fn reads_and_writes() {
    let data = common::random_bytes(3 << 20, 91);
    let tmp = common::temp_file_in(None, &data);
    let file = gdsroute::File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, None).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(unsafe { file.pread_raw(back.as_mut_ptr(), back.len(), 0) }.unwrap().wait().unwrap(), data.len());
    assert_eq!(back, data);
    assert_eq!(file.write_from(&data[..4096], 0).unwrap(), 4096);
    gdsroute::report::add_counter("test-driver", "files", 1);
}

#[test]
#[ignore = "a child of the tests below"]
fn child_does_io() {
    reads_and_writes();
}

#[test]
#[ignore = "a child of the tests below"]
fn child_does_io_then_forks_a_child_without_io() {
    reads_and_writes();
    // SAFETY: the child only calls exit, which runs the exit handlers (the report's among them).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        unsafe { libc::exit(0) };
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
}

#[test]
#[ignore = "a child of the tests below"]
fn child_does_io_and_shuts_down() {
    reads_and_writes();
    gdsroute::shutdown();
    eprintln!("after shutdown");
}

fn run(name: &str, report: &str) -> String {
    // KvikIO's split (no small read spread over the pool), so that the 3 MiB read is one task.
    let env = [("GDSROUTE_REPORT", OsString::from(report)), ("GDSROUTE_MIN_TASK_SIZE", OsString::from("0"))];
    common::run_ignored_test_without(name, &env, &["GDSROUTE_LOG_LEVEL"])
}

#[test]
fn to_stderr_at_exit_with_both_directions_and_the_drivers_section() {
    let out = run("child_does_io", "stderr");
    assert_eq!(out.matches("gdsroute report, process ").count(), 1, "{out}");
    assert!(out.contains("  reads: 1 calls (0 failed), 3.00 MiB in "), "{out}");
    assert!(out.contains("  writes: 1 calls (0 failed), 4.00 KiB in "), "{out}");
    assert!(out.contains("; posix 1 tasks 3.00 MiB (") && out.contains("; posix 1 tasks 4.00 KiB ("), "one task each, both POSIX: {out}");
    assert!(out.contains("cufile 0 tasks 0 B"), "{out}");
    assert!(out.contains("  POSIX read tasks by reason: host_memory "), "{out}");
    assert!(out.contains("  test-driver: files=1"), "{out}");
}

#[test]
fn to_a_json_file_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("report-%p.json");
    run("child_does_io", template.to_str().unwrap());
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    let pid: u32 = name.trim_start_matches("report-").trim_end_matches(".json").parse().expect("%p became the pid");
    let json = std::fs::read_to_string(&files[0]).unwrap();
    assert!(json.starts_with(&format!("{{\"pid\":{pid},\"reads\":{{\"calls\":1,\"failed\":0,\"bytes\":{}", 3 << 20)), "{json}");
    assert!(json.contains("\"writes\":{\"calls\":1,\"failed\":0,\"bytes\":4096"), "{json}");
    assert!(json.contains("\"sections\":{\"test-driver\":{\"files\":1}}"), "{json}");
    assert_eq!(json.matches('{').count(), json.matches('}').count(), "balanced: {json}");
}

#[test]
fn a_forked_child_without_io_prints_nothing() {
    let out = run("child_does_io_then_forks_a_child_without_io", "stderr");
    assert_eq!(out.matches("gdsroute report, process ").count(), 1, "only the parent's: {out}");
}

#[test]
fn at_shutdown_once_and_not_again_at_exit() {
    let out = run("child_does_io_and_shuts_down", "stderr");
    assert_eq!(out.matches("gdsroute report, process ").count(), 1, "{out}");
    let report_at = out.find("gdsroute report").unwrap();
    assert!(report_at < out.find("after shutdown").unwrap(), "written at shutdown: {out}");
}

#[test]
fn nothing_unless_asked() {
    let out = common::run_ignored_test_without("child_does_io", &[], &["GDSROUTE_REPORT"]);
    assert!(!out.contains("gdsroute report"), "{out}");
}
