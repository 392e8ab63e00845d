//! Helpers shared by the integration tests: those of src/test_support.rs (random contents,
//! temporary files, eviction, the fault shim, child tests), included from there, and the ones
//! that go through the library's public API.
#![allow(dead_code)] // each test binary uses a subset

pub mod capi;
pub mod gpu;

#[path = "../../src/test_support.rs"]
mod support;
pub use support::*;

/// Opens `path` read-only through the library, with the given compat mode (or the default).
pub fn open(path: &std::path::Path, compat: Option<gdsroute::settings::CompatMode>) -> gdsroute::File {
    gdsroute::File::open(path.as_os_str().as_encoded_bytes(), "r", 0, compat).unwrap()
}

/// Reads `len` bytes at `offset` of the evicted file at `path` through `file` (`read` checks its
/// own bytes; `assert_misses_flagged` repeats it): some of the read's POSIX tasks must be counted
/// as not cached, and never more than ran.
pub fn check_read_of_evicted(path: &std::path::Path, file: &gdsroute::File, offset: u64, len: usize, what: &str, mut read: impl FnMut()) {
    assert_misses_flagged(path, 0, offset, len, what, || {
        let before = file.stats();
        read();
        let after = file.stats();
        let not_cached = after.posix_tasks_not_cached - before.posix_tasks_not_cached;
        assert!(not_cached <= after.posix_tasks - before.posix_tasks, "{what}: more tasks counted than ran");
        not_cached > 0
    });
}

/// Whether this process can use CUDA: libcuda loads, initialises and has a device (asked of the
/// driver directly, as an application would, without starting the library's own CUDA state).
pub fn cuda_works() -> bool {
    use cudarc::driver::sys;
    // SAFETY: is_culib_present only tries to dlopen the driver library; the calls after it run
    // only once it loaded, and take plain out-pointers.
    unsafe {
        let mut count = 0;
        sys::is_culib_present() && sys::cuInit(0) == sys::CUresult::CUDA_SUCCESS && sys::cuDeviceGetCount(&mut count) == sys::CUresult::CUDA_SUCCESS && count > 0
    }
}

/// A test's hold on the process environment: `lock` held (every test of the binary that touches
/// the environment, or state the library reads from it, takes the same one) and `vars` removed
/// on entry and again on drop, so that no test sees another's settings.
pub struct ScopedEnv {
    vars: &'static [&'static str],
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl ScopedEnv {
    pub fn new(lock: &'static std::sync::Mutex<()>, vars: &'static [&'static str]) -> ScopedEnv {
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let env = ScopedEnv { vars, _guard: guard };
        env.clear();
        env
    }

    pub fn set(&self, key: &str, value: impl AsRef<std::ffi::OsStr>) {
        // SAFETY: every test that reads or writes the environment holds the lock, and the library
        // under test reads it only from the thread running the test.
        unsafe { std::env::set_var(key, value) }
    }

    pub fn remove(&self, key: &str) {
        // SAFETY: as in `set`.
        unsafe { std::env::remove_var(key) }
    }

    fn clear(&self) {
        for k in self.vars {
            self.remove(k);
        }
    }
}

impl Drop for ScopedEnv {
    fn drop(&mut self) {
        self.clear();
    }
}
