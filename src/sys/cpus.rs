//! The CPUs a thread runs on: the set this process may use (`sched_getaffinity`), a check that a
//! list of CPUs lies in it, and pinning the calling thread to a list (`sched_setaffinity`). The
//! pools a caller makes (`io::thread_pool`) place their workers with these.

use crate::error::{Error, Result};

/// The CPUs this process may run on (`sched_getaffinity`).
pub(crate) fn allowed() -> std::io::Result<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is an empty set; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(set)
}

/// The CPUs of `set`, in order (the tests' view of a placement).
#[cfg(test)]
pub(crate) fn members(set: &libc::cpu_set_t) -> Vec<usize> {
    // SAFETY: CPU_ISSET reads the set in range (below CPU_SETSIZE).
    (0..8 * std::mem::size_of::<libc::cpu_set_t>()).filter(|&c| unsafe { libc::CPU_ISSET(c, set) }).collect()
}

/// Checks that `cpus` is a non-empty list of CPUs this process may run on.
///
/// Errors: `InvalidArgument` for an empty list or a CPU outside the process's set; `Internal`
/// when the set cannot be read.
pub(crate) fn check(cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Err(Error::InvalidArgument("a pool's CPU list is empty (pass none to run anywhere)".into()));
    }
    let allowed = allowed().map_err(|e| Error::Internal(format!("sched_getaffinity: {e}")))?;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        // SAFETY: CPU_ISSET reads the set in range (cpu < max checked first).
        if cpu >= max || !unsafe { libc::CPU_ISSET(cpu, &allowed) } {
            return Err(Error::InvalidArgument(format!("CPU {cpu} is not one this process may run on")));
        }
    }
    Ok(())
}

/// Runs the calling thread on `cpus` only (a list `check` accepted).
pub(crate) fn pin_to(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET writes in range (checked by `check`).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: a valid set of the size given, for the calling thread (0).
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
