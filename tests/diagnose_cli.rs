//! The `gdsroute-diagnose` command line: usage, options, exit codes, the conclusion line and the
//! C names of fallback reasons. Runs the built binary.

use std::process::{Command, Output};

fn diagnose(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gdsroute-diagnose"));
    cmd.args(args);
    // The caller's settings must not change the outcome; only those given here apply.
    for (key, _) in std::env::vars() {
        if key.starts_with("KVIKIO_") || (key.starts_with("GDSROUTE_") && !key.starts_with("GDSROUTE_TEST_")) {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("gdsroute-diagnose runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn sample() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), vec![7u8; 1 << 20]).unwrap();
    file
}

#[test]
fn help_is_usage_not_a_file_name() {
    for flag in ["--help", "-h"] {
        let out = diagnose(&[flag], &[]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.starts_with("usage: gdsroute-diagnose [--json] [--] [FILE]\n"), "{flag}: {text}");
        assert!(text.contains("exit codes:") && text.contains("  4  FILE cannot be opened"), "{text}");
        assert!(!text.contains("cannot open"), "{flag} was taken as a file: {text}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let file = sample();
    let path = file.path().to_str().unwrap();
    for args in [vec!["--bogus"], vec!["-x", path], vec![path, path], vec!["--json", path, "extra"]] {
        let out = diagnose(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains("usage: gdsroute-diagnose"), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{args:?}: no report on a usage error");
    }
}

#[test]
fn a_file_ends_with_the_conclusion_and_c_reason_names() {
    let file = sample();
    let out = diagnose(&[file.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let last = text.lines().last().unwrap();
    // With CUDA a route is named; without it (CI machines) the conclusion says no device read can happen.
    let route = last.starts_with("device reads of this file (requests of at least the GDS threshold) will use: ")
        && (last.contains(": cuFile (") || last.contains(": POSIX bounce buffers, because GDSROUTE_FALLBACK_REASON_"));
    let no_cuda = last.starts_with("device reads of this file: none, CUDA is not usable here (GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE: ");
    assert!(route || no_cuda, "{text}");
    // No Rust enum names (NoUdev, CudaUnavailable, ...) for reasons.
    for rust in ["NoUdev", "CudaUnavailable", "LibraryUnavailable", "DriverOpenFailed", "RegisterFailed", "DirectOpenFailed"] {
        assert!(!text.contains(rust), "{rust} in: {text}");
    }
}

#[test]
fn compat_on_is_posix_on_the_machine_and_for_the_file() {
    let file = sample();
    let path = file.path().to_str().unwrap();
    for args in [vec![], vec![path]] {
        let out = diagnose(&args, &[("KVIKIO_COMPAT_MODE", "on")]);
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        let last = text.lines().last().unwrap();
        let subject = if args.is_empty() { "on this machine" } else { "of this file" };
        assert_eq!(
            last,
            format!(
                "device reads {subject} (requests of at least the GDS threshold) will use: POSIX bounce buffers, \
                 because GDSROUTE_FALLBACK_REASON_COMPAT_ON: compat mode is ON: cuFile is never called"
            ),
            "{text}"
        );
    }
}

#[test]
fn invalid_settings_exit_3() {
    let file = sample();
    let out = diagnose(&[file.path().to_str().unwrap()], &[("KVIKIO_TASK_SIZE", "4MiB")]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    let last = stdout(&out).lines().last().unwrap().to_string();
    assert!(last.contains("the settings are invalid") && last.contains("KVIKIO_TASK_SIZE"), "{last}");
}

#[test]
fn a_file_that_cannot_be_opened_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = diagnose(&[missing.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    assert!(stdout(&out).lines().last().unwrap().contains("the file cannot be opened"), "{}", stdout(&out));
    // "--" ends the options: a file named like an option is a file.
    let out = diagnose(&["--", "--json"], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    // A directory has no bytes to read, and a FIFO is not opened (that would wait for a writer).
    let out = diagnose(&[dir.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    assert!(stdout(&out).contains("a directory"), "{}", stdout(&out));
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = diagnose(&[fifo.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    assert!(stdout(&out).contains("a FIFO"), "{}", stdout(&out));
}

/// Probing a FILE does not write the application's exit report (`GDSROUTE_REPORT` is the
/// application's; the command leaves it alone).
#[test]
fn the_command_writes_no_exit_report() {
    let file = sample();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("app-report.json");
    std::fs::write(&report, "the application's").unwrap();
    let out = diagnose(&[file.path().to_str().unwrap()], &[("GDSROUTE_REPORT", report.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "the application's");
}

#[test]
fn json_is_one_object_with_the_verdict() {
    let file = sample();
    let out = diagnose(&["--json", file.path().to_str().unwrap()], &[("KVIKIO_COMPAT_MODE", "on")]);
    assert_eq!(out.status.code(), Some(0));
    let json = stdout(&out);
    assert!(json.starts_with('{') && json.ends_with("}\n") && json.lines().count() == 1, "{json}");
    for field in [
        "\"device_route\":\"posix\"",
        "\"fallback_reason\":\"GDSROUTE_FALLBACK_REASON_COMPAT_ON\"",
        "\"exit_code\":0",
        "\"settings_error\":null",
        "\"report\":[\"gdsroute ",
    ] {
        assert!(json.contains(field), "{field} missing: {json}");
    }
    let out = diagnose(&["--json", "/nonexistent/x"], &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(stdout(&out).contains("\"exit_code\":4") && stdout(&out).contains("\"device_route\":null"));
}

#[test]
fn every_setting_of_the_table_is_in_the_report() {
    // A new setting is one entry of `settings::TABLE`; the report shows it without more work.
    let out = diagnose(&[], &[("KVIKIO_NUM_THREADS", "3"), ("KVIKIO_AUTO_DIRECT_IO_WRITE", "on")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for setting in &gdsroute::settings::TABLE {
        let line = text.lines().find(|l| l.starts_with(&format!("{} ({}", setting.doc, setting.name)));
        let line = line.unwrap_or_else(|| panic!("{} missing from:\n{text}", setting.name));
        for alias in setting.aliases {
            assert!(line.contains(&format!("alias {alias}")), "{line}");
        }
        assert!(line.ends_with(")"), "value and source: {line}");
    }
    assert!(text.contains("(KVIKIO_NTHREADS, alias KVIKIO_NUM_THREADS): 3 (from environment)"), "{text}");
    assert!(text.contains("(KVIKIO_AUTO_DIRECT_IO_WRITE): on (from environment)"), "{text}");
    assert!(text.contains("(KVIKIO_TASK_SIZE): 4194304 (from default)"), "{text}");
}
