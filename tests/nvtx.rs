//! NVTX ranges through a tool of the tests' own (tests/nvtx/counting_injection.c, compiled here
//! with the system C compiler and loaded through `NVTX_INJECTION64_PATH`, as a profiler's is): a
//! child process makes a parallel read of 5 tasks and a synchronous write; the tool must have seen
//! the `gdsroute` domain, one process range per call with the bytes asked for, one thread range per
//! task with its bytes, each range ended, and every attribute in NVTX's layout.

mod common;

use std::path::PathBuf;

fn injection() -> PathBuf {
    // Built ahead where the test runs without a compiler (tools/gpu/gpu-build.sh).
    if let Some(built) = std::env::var_os("GDSROUTE_TEST_NVTX_INJECTION") {
        return PathBuf::from(built);
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libcounting_nvtx_injection.so");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/nvtx/counting_injection.c");
    let status = std::process::Command::new(std::env::var("CC").unwrap_or("cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("a C compiler");
    assert!(status.success(), "compiling {}", src.display());
    out
}

#[test]
#[ignore = "a child of the test below"]
fn child_reads_and_writes() {
    let data = common::random_bytes((4 << 20) * 4 + 100, 121);
    let tmp = common::temp_file_in(None, &data);
    let file = gdsroute::File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, None).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(unsafe { file.pread_raw(back.as_mut_ptr(), back.len(), 0) }.unwrap().wait().unwrap(), data.len());
    assert_eq!(back, data);
    assert_eq!(file.write_from(&data[..1000], 0).unwrap(), 1000);
}

#[test]
fn a_tool_sees_a_range_per_call_and_per_task() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nvtx.txt");
    let env = [("NVTX_INJECTION64_PATH", injection().into_os_string()), ("NVTX_TEST_OUT", out.clone().into_os_string())];
    common::run_ignored_test_without("child_reads_and_writes", &env, &["GDSROUTE_LOG_LEVEL"]);
    let seen = std::fs::read_to_string(&out).expect("the tool wrote what it saw");
    let field = |name: &str| seen.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("{name} in {seen}")).to_string();
    assert_eq!(field("domain"), "gdsroute", "{seen}");
    assert_eq!((field("starts"), field("ends")), ("2".into(), "2".into()), "a range per call, each ended: {seen}");
    let bytes = ((4u64 << 20) * 4 + 100 + 1000).to_string();
    assert_eq!(field("call_bytes"), bytes, "{seen}");
    assert_eq!((field("pushes"), field("pops")), ("6".into(), "6".into()), "5 read tasks and 1 write task: {seen}");
    assert_eq!(field("task_bytes"), bytes, "{seen}");
    assert_eq!((field("bad"), field("unbalanced"), field("version")), ("0".into(), "0".into(), "3".into()), "{seen}");
    assert!(seen.contains("last_call=gdsroute write") && seen.contains("last_task=gdsroute task posix write"), "{seen}");
}

#[test]
fn a_missing_tool_leaves_the_ranges_off_and_the_calls_working() {
    let env = [("NVTX_INJECTION64_PATH", std::ffi::OsString::from("/nonexistent/libtool.so"))];
    common::run_ignored_test_without("child_reads_and_writes", &env, &["GDSROUTE_LOG_LEVEL"]);
}
