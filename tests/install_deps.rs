//! scripts/install-deps.sh, and that scripts/demo.sh and scripts/test.sh go through it: each case
//! runs the script with a PATH of stubs (apt-get, sudo and id record what they were asked to do;
//! the tools present are empty scripts), so nothing is installed for real.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TOOLS: &[&str] = &["cmake", "pkg-config", "make", "cc", "c++", "nm", "objcopy", "ld", "valgrind", "h5cc", "h5dump", "mpicc", "mpirun"];

fn real(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH is set");
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} not found in PATH"))
}

fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// A bin/ with the shell utilities the scripts use, stubs for apt-get, sudo (if `sudo`) and id,
    /// and the build tools except `missing`.
    fn new(missing: &[&str], sudo: bool) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        for tool in ["bash", "env", "sort", "sed", "dirname", "nproc", "grep", "head", "stat"] {
            std::os::unix::fs::symlink(real(tool), bin.join(tool)).unwrap();
        }
        let log = dir.path().join("log");
        script(&bin.join("apt-get"), &format!("echo \"apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND uid=$(id -u)\" >>'{}'", log.display()));
        script(&bin.join("id"), "echo \"${FAKE_UID:-0}\"");
        if sudo {
            script(&bin.join("sudo"), &format!("echo \"sudo $*\" >>'{}'\nFAKE_UID=0 exec \"$@\"", log.display()));
        }
        for tool in TOOLS.iter().filter(|t| !missing.contains(t)) {
            script(&bin.join(tool), "exit 0");
        }
        Sandbox { dir }
    }

    fn run(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut cmd = Command::new(real("bash"));
        cmd.arg(root.join(script)).args(args).env_clear();
        cmd.env("PATH", self.dir.path().join("bin")).env("HOME", self.dir.path());
        cmd.env("BUILD_DIR", self.dir.path().join("build"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn nothing_missing_installs_nothing() {
    let sb = Sandbox::new(&[], true);
    let out = sb.run("scripts/install-deps.sh", &["--test"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(text(&out), "");
    assert_eq!(sb.log(), "", "apt-get or sudo ran with nothing missing");
}

#[test]
fn as_root_installs_with_apt_get_without_sudo() {
    let sb = Sandbox::new(&["cmake", "pkg-config", "valgrind"], false);
    let out = sb.run("scripts/install-deps.sh", &["--test"], &[("FAKE_UID", "0")]);
    assert!(out.status.success(), "{}", text(&out));
    let log = sb.log();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].starts_with("apt-get update"), "{log}");
    assert!(lines[1].starts_with("apt-get install -y"), "{log}");
    for pkg in ["cmake", "pkg-config", "valgrind"] {
        assert!(lines[1].contains(&format!(" {pkg} ")), "{pkg} not installed: {log}");
    }
    assert!(lines.iter().all(|l| l.contains("DEBIAN_FRONTEND=noninteractive")), "{log}");
}

#[test]
fn as_user_installs_through_sudo() {
    let sb = Sandbox::new(&["cmake"], true);
    let out = sb.run("scripts/install-deps.sh", &[], &[("FAKE_UID", "1000")]);
    assert!(out.status.success(), "{}", text(&out));
    let log = sb.log();
    assert!(log.contains("sudo env DEBIAN_FRONTEND=noninteractive apt-get update"), "{log}");
    assert!(log.contains("sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cmake\n"), "{log}");
    assert!(log.contains("apt-get install -y -q --no-install-recommends cmake DEBIAN_FRONTEND=noninteractive uid=0"), "{log}");
    // valgrind is asked for by --test only.
    assert!(!log.contains("valgrind"), "{log}");
}

#[test]
fn as_user_without_sudo_names_what_is_missing() {
    let sb = Sandbox::new(&["cmake", "c++"], false);
    let out = sb.run("scripts/install-deps.sh", &[], &[("FAKE_UID", "1000")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("missing: cmake g++ (not root and no sudo)"), "{}", text(&out));
    assert_eq!(sb.log(), "");
}

#[test]
fn optional_valgrind_missing_and_not_installable_is_not_an_error() {
    let sb = Sandbox::new(&["valgrind"], false);
    let out = sb.run("scripts/install-deps.sh", &["--test"], &[("GDSROUTE_NO_INSTALL", "1")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("optional and missing: valgrind"), "{}", text(&out));
}

#[test]
fn unknown_argument_is_a_usage_error() {
    let sb = Sandbox::new(&[], false);
    let out = sb.run("scripts/install-deps.sh", &["--yes"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("usage: install-deps.sh [--test]"));
}

/// The README's two commands on a machine without cmake: they install it (here: ask to) before
/// the first cmake call, instead of failing with "cmake: command not found".
#[test]
fn demo_and_test_scripts_install_cmake_first() {
    for (script, expect) in [("scripts/demo.sh", "missing: cmake"), ("scripts/test.sh", "missing: cmake valgrind")] {
        let sb = Sandbox::new(&["cmake", "valgrind"], false);
        let out = sb.run(script, &[], &[("GDSROUTE_NO_INSTALL", "1")]);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(1), "{script}: {all}");
        assert!(all.contains(expect), "{script}: {all}");
        assert!(!all.contains("command not found"), "{script}: {all}");
    }
}
