//! A second Rust static library for tests/c/packaging.cmake (two_rust_static_libraries): a C
//! program links it next to libgdsroute.a. Built by rustc, preferably of another toolchain than
//! the library's, whose std then defines the same unmangled symbols (rust_eh_personality, ...).

/// Uses std (allocation, formatting, unwinding) so that its std objects are linked.
#[unsafe(no_mangle)]
pub extern "C" fn second_rust_lib_answer() -> usize {
    let args: Vec<String> = std::env::args().collect();
    std::panic::catch_unwind(|| format!("{}", args.len()).len()).unwrap_or(0) + 41
}
