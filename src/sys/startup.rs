//! What the library does when it is loaded: keep cuFile from writing `cufile.log` into the host
//! program's working directory. cuFile reads `CUFILE_LOGFILE_PATH` when its driver opens and has
//! no working API for the log path (see `cufile::log_configuration`), so unless the user
//! configured logging, the variable is set to /dev/null here, at load time, and only if the
//! process is still single-threaded (a program linked against the library, before `main`):
//! `setenv` is not safe while other threads may read the environment. A library loaded later
//! into a threaded process (dlopen from Python, say) leaves the environment alone; the README
//! says how to set the variable yourself.

use crate::sys::cufile::log_configuration;
use std::sync::atomic::{AtomicU32, Ordering};

/// The process that loaded the library (0 until known).
static LOAD_PID: AtomicU32 = AtomicU32::new(0);

/// True in a child created by `fork()` after the library was loaded (or, where the load hook did
/// not run, after this was first asked). CUDA state inherited from a parent is unusable there.
pub(crate) fn forked_since_load() -> bool {
    let now = std::process::id();
    match LOAD_PID.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => false,
        Err(loaded) => loaded != now,
    }
}

/// The value used when the user configured nothing.
pub const DEFAULT_CUFILE_LOG: &str = "/dev/null";

fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").map(|tasks| tasks.count() == 1).unwrap_or(false)
}

/// Sets `CUFILE_LOGFILE_PATH` to /dev/null if the user configured no cuFile log and the process
/// is single-threaded. Returns whether it did.
pub fn quiet_cufile_log() -> bool {
    if log_configuration().is_some() || !single_threaded() {
        return false;
    }
    // SAFETY: the process has one thread (checked just above, and nothing in this load-time
    // path starts one), so no other thread can read the environment concurrently.
    unsafe { std::env::set_var("CUFILE_LOGFILE_PATH", DEFAULT_CUFILE_LOG) };
    true
}

extern "C" fn on_load() {
    LOAD_PID.store(std::process::id(), Ordering::Release);
    let _ = std::panic::catch_unwind(quiet_cufile_log);
}

/// Run by the dynamic loader (or the C runtime, for static links) before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_knows_it_was_forked() {
        assert!(!forked_since_load());
        // SAFETY: the child only calls getpid-based checks and _exit (async-signal-safe).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if forked_since_load() { 0 } else { 1 };
            // SAFETY: leaves the child at once, running no destructors or handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just created.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child did not see the fork: {status}");
        assert!(!forked_since_load());
    }
}
