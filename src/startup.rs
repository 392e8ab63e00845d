//! What the library does when it is loaded: keep cuFile from writing `cufile.log` into the host
//! program's working directory. cuFile reads `CUFILE_LOGFILE_PATH` when its driver opens and has
//! no working API for the log path (see `cufile::log_configuration`), so unless the user
//! configured logging, the variable is set to /dev/null here, at load time, and only if the
//! process is still single-threaded (a program linked against the library, before `main`):
//! `setenv` is not safe while other threads may read the environment. A library loaded later
//! into a threaded process (dlopen from Python, say) leaves the environment alone; the README
//! says how to set the variable yourself.

use crate::cufile::log_configuration;

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
    let _ = std::panic::catch_unwind(quiet_cufile_log);
}

/// Run by the dynamic loader (or the C runtime, for static links) before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;
