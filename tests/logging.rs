//! The log (`GDSROUTE_LOG_LEVEL`, `GDSROUTE_LOG_FILE`): each scenario runs in a child process of
//! its own (the log reads its variables once per process), which reads a file, asks for the cuFile
//! verdict of a handle (on a machine without a GPU: the POSIX route and why) and closes it.

mod common;

use std::ffi::OsString;

/// What every child does: settings, a read, a verdict asked twice (logged once), a close.
#[test]
#[ignore = "a child of the tests below"]
fn child_reads_and_asks_for_the_verdict() {
    let data = common::random_bytes(10_000, 81);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_into(&mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
    let first = file.cufile_verdict();
    let second = file.cufile_verdict();
    assert_eq!(first.is_ok(), second.is_ok());
    file.close();
}

fn run(env: &[(&str, &str)]) -> String {
    let env: Vec<(&str, OsString)> = env.iter().map(|(k, v)| (*k, OsString::from(v))).collect();
    common::run_ignored_test_without("child_reads_and_asks_for_the_verdict", &env, &["GDSROUTE_LOG_LEVEL", "GDSROUTE_LOG_FILE"])
}

#[test]
fn off_by_default_and_no_file_appears_unless_a_line_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("log-%p.txt");
    let out = run(&[("GDSROUTE_LOG_FILE", file.to_str().unwrap())]);
    assert!(!out.contains("gdsroute["), "{out}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no file without a level");
}

#[test]
fn debug_to_a_file_per_process_holds_the_settings_and_the_fallback_once() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("log-%p.txt");
    let out = run(&[("GDSROUTE_LOG_LEVEL", "debug"), ("GDSROUTE_LOG_FILE", template.to_str().unwrap())]);
    assert!(!out.contains("gdsroute["), "lines go to the file, not stderr: {out}");
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    let pid: u32 = name.trim_start_matches("log-").trim_end_matches(".txt").parse().expect("%p became the process id");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.lines().all(|l| l.starts_with(&format!("gdsroute[{pid}] "))), "{text}");
    assert!(text.contains("debug setting KVIKIO_COMPAT_MODE = auto (default)"), "{text}");
    assert!(text.contains("debug setting KVIKIO_TASK_SIZE = 4194304 (default)"), "{text}");
    if !common::cuda_works() {
        let fallbacks = text.lines().filter(|l| l.contains("device transfers take the POSIX route")).count();
        assert_eq!(fallbacks, 1, "once per file: {text}");
    }
}

/// A child whose environment holds a bad setting: every call fails with it.
#[test]
#[ignore = "a child of the test below"]
fn child_with_a_bad_setting() {
    let tmp = common::temp_file_in(None, b"x");
    let e = gdsroute::File::open(tmp.path().as_os_str().as_encoded_bytes(), "r", 0, None).err().expect("the bad setting fails the open");
    assert_eq!(e.status(), gdsroute::Status::InvalidSetting);
}

#[test]
fn a_bad_setting_is_a_warning_and_a_bad_level_says_so_once_on_stderr() {
    let env = [("GDSROUTE_LOG_LEVEL", OsString::from("warn")), ("KVIKIO_AUTO_DIRECT_IO_READ", OsString::from("maybe"))];
    let out = common::run_ignored_test_without("child_with_a_bad_setting", &env, &["GDSROUTE_LOG_FILE"]);
    assert_eq!(out.lines().filter(|l| l.contains("warn setting KVIKIO_AUTO_DIRECT_IO_READ")).count(), 1, "{out}");
    assert!(!out.contains(" debug "), "warn holds no debug lines: {out}");

    let out = run(&[("GDSROUTE_LOG_LEVEL", "verbose")]);
    assert_eq!(out.matches("GDSROUTE_LOG_LEVEL=\"verbose\" is not one of").count(), 1, "{out}");
    assert!(!out.contains("gdsroute["), "the log stays off: {out}");
}
