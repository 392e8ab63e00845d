//! The relay kernels' copy (`src/sys/cuda/relay/relay.cu`, `copy_share`), compiled for the host
//! and run there thread by thread (`tests/relay/copy_share_on_host.cpp`): every byte for each
//! alignment and length, nothing around the range. The GPU runs the same source from its PTX;
//! what only the GPU can show (the loads of mapped host memory, the protocol with the host) is in
//! `tests/gpu_stream.rs`, and the host's part of the protocol in `io::relay`'s unit tests.

use std::path::Path;
use std::process::Command;

#[test]
fn the_relay_copy_moves_every_byte_for_every_alignment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = tempfile::tempdir().unwrap();
    let exe = out.path().join("copy_share_on_host");
    let built = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(root.join("tests/relay/copy_share_on_host.cpp"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cxx}: {e}"));
    assert!(built.status.success(), "{cxx} failed:\n{}", String::from_utf8_lossy(&built.stderr));
    let ran = Command::new(&exe).output().unwrap();
    print!("{}", String::from_utf8_lossy(&ran.stdout));
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
}
