//! The CPUs a thread runs on: the set this process may use (the union of its threads'
//! `sched_getaffinity`), a check that a list of CPUs lies in it, and pinning the calling thread to
//! a list, or to the whole set (`sched_setaffinity`). The pools (`io::thread_pool`)
//! place their workers with these. Also the counts the
//! default thread count is made from (`settings::threads`): CPUs in this process's mask, CPUs
//! online, and CPUs of the process's cpuset cgroup (the node's CPUs a job or container may use).

use crate::error::{Error, Result};

/// The CPUs this process may run on: those of any of its threads (the union of their affinity
/// masks, now). A thread an OpenMP runtime bound to one CPU does not narrow it; a process narrowed
/// as a whole (`taskset -a -p`, a forked child's own `sched_setaffinity`) does.
pub(crate) fn allowed() -> std::io::Result<libc::cpu_set_t> {
    let mut union = thread_cpus()?;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Ok(union) };
    for tid in tasks.flatten().filter_map(|task| task.file_name().to_str()?.parse::<libc::pid_t>().ok()) {
        // A thread that ended since the listing is skipped.
        if let Ok(set) = cpus_of(tid) {
            for cpu in cpus_in(&set).collect::<Vec<_>>() {
                // SAFETY: CPU_SET writes in range (a CPU `cpus_in` found in a set of this size).
                unsafe { libc::CPU_SET(cpu, &mut union) };
            }
        }
    }
    Ok(union)
}

/// The CPUs the calling thread may run on (`sched_getaffinity`).
pub(crate) fn thread_cpus() -> std::io::Result<libc::cpu_set_t> {
    cpus_of(0)
}

/// The CPUs thread `tid` may run on (0: the calling thread).
fn cpus_of(tid: libc::pid_t) -> std::io::Result<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is an empty set; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer of the size given.
    if unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(set)
}

/// The CPUs of `set`, in order.
fn cpus_in(set: &libc::cpu_set_t) -> impl Iterator<Item = usize> + '_ {
    // SAFETY: CPU_ISSET reads the set in range (below CPU_SETSIZE).
    (0..8 * std::mem::size_of::<libc::cpu_set_t>()).filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
}

/// How many CPUs this process may run on (`allowed`); `None` when the mask cannot be read (more
/// CPUs than a `cpu_set_t` holds, say).
pub(crate) fn allowed_count() -> Option<usize> {
    allowed().ok().map(|set| cpus_in(&set).count()).filter(|&n| n > 0)
}

/// How many CPUs the calling thread may run on.
pub(crate) fn thread_cpus_count() -> Option<usize> {
    thread_cpus().ok().map(|set| cpus_in(&set).count()).filter(|&n| n > 0)
}

/// How many CPUs are online (`sysconf(_SC_NPROCESSORS_ONLN)`), whatever this process's mask.
pub(crate) fn online_count() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// How many CPUs the process's cpuset cgroup holds: the CPUs of the node a Slurm job step or a
/// container may use, of which a launcher's binding gives each rank a part. cgroup v2
/// (`cpuset.cpus.effective` of the process's group, or of the nearest parent that has one) or v1
/// (`cpuset.effective_cpus` of the cpuset hierarchy, likewise: in a container without a cgroup
/// namespace the group's own path is not there, and its cpuset is the hierarchy's root); `None`
/// when neither can be read.
pub(crate) fn cpuset_count() -> Option<usize> {
    use super::cgroup::{Hierarchy, group_and_ancestors};
    cpuset_count_in(|| group_and_ancestors(Hierarchy::V2), || group_and_ancestors(Hierarchy::V1("cpuset")))
}

/// `cpuset_count` over the directories of the v2 group and its ancestors, else of the v1 one's.
fn cpuset_count_in(v2: impl FnOnce() -> Vec<std::path::PathBuf>, v1: impl FnOnce() -> Vec<std::path::PathBuf>) -> Option<usize> {
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok().and_then(|text| list_count(&text));
    let nearest = |dirs: Vec<std::path::PathBuf>, file: &str| dirs.into_iter().find_map(|dir| read(dir.join(file)));
    nearest(v2(), "cpuset.cpus.effective").or_else(|| nearest(v1(), "cpuset.effective_cpus"))
}

/// How many CPUs a kernel CPU list ("0-3,8,10-11\n") names; `None` for an empty or malformed one.
fn list_count(text: &str) -> Option<usize> {
    let mut total = 0usize;
    for part in text.trim().split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
        total = total.checked_add(last.checked_sub(first)? + 1)?;
    }
    (total > 0).then_some(total)
}

/// The CPUs of `set`, in order (the tests' view of a placement).
#[cfg(test)]
pub(crate) fn members(set: &libc::cpu_set_t) -> Vec<usize> {
    cpus_in(set).collect()
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
    set_thread_cpus(&set)
}

/// Runs the calling thread on every CPU of the process (`allowed`), where it runs on fewer: a
/// pool's worker inherits the CPUs of the thread that started it, which may be pinned to one.
pub(crate) fn spread_over_process() -> std::io::Result<()> {
    let process = allowed()?;
    if cpus_in(&thread_cpus()?).eq(cpus_in(&process)) {
        return Ok(());
    }
    set_thread_cpus(&process)
}

fn set_thread_cpus(set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: a valid set of the size given, for the calling thread (0).
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(list_count("0-1\n"), Some(2));
        assert_eq!(list_count("0-3,8,10-11"), Some(7));
        assert_eq!(list_count("5"), Some(1));
        for bad in ["", "\n", "a-b", "3-1", "0-", ",", "0,,1"] {
            assert_eq!(list_count(bad), None, "{bad:?}");
        }
    }

    /// A container on cgroup v1 without a cgroup namespace: `/proc/self/cgroup` names
    /// `cpuset:/docker/<id>`, which is no directory under the mount; the container's cpuset is
    /// the mount's root, and counts (it counted nothing, and ranks saw the host's CPUs).
    #[test]
    fn a_v1_containers_cpuset_is_the_hierarchys_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cpuset.effective_cpus"), "0-7\n").unwrap();
        let dirs = || super::super::cgroup::ancestors_of(root.path(), "/docker/abc");
        assert_eq!(cpuset_count_in(Vec::new, dirs), Some(8));
        // Where the group's own directory exists (a Slurm step), its own cpuset counts.
        let step = root.path().join("slurm/job_1");
        std::fs::create_dir_all(&step).unwrap();
        std::fs::write(step.join("cpuset.effective_cpus"), "2-3\n").unwrap();
        assert_eq!(cpuset_count_in(Vec::new, || super::super::cgroup::ancestors_of(root.path(), "/slurm/job_1")), Some(2));
    }

    /// The process's CPUs are its threads' together: a thread bound to one CPU does not narrow
    /// them, every thread narrowed (`taskset -a -p`) does.
    #[test]
    fn the_process_cpus_are_its_threads_cpus_together() {
        let text = crate::test_support::run_ignored_test("sys::cpus::tests::narrowed_child", &[]);
        assert!(text.contains("narrowed: ok"), "{text}");
    }

    /// The child of `the_process_cpus_are_its_threads_cpus_together`.
    #[test]
    #[ignore = "a child process of the_process_cpus_are_its_threads_cpus_together"]
    fn narrowed_child() {
        let process = members(&allowed().unwrap());
        if process.len() < 2 {
            println!("narrowed: ok (one CPU: not checked)");
            return;
        }
        let (first, second) = (process[0], process[1]);
        let one_thread = std::thread::spawn(move || {
            pin_to(&[first]).unwrap();
            (members(&allowed().unwrap()), check(&[second]).is_ok())
        })
        .join()
        .unwrap();
        assert_eq!(one_thread, (process.clone(), true), "one thread bound narrows nothing");
        // Every thread of the process on `first` alone.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(first, &mut set) };
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let tid: libc::pid_t = task.file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: a valid set of the size given, for a thread of this process.
            unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        }
        assert_eq!(members(&allowed().unwrap()), [first]);
        assert!(check(&[second]).is_err(), "a CPU the process no longer has is refused");
        println!("narrowed: ok");
    }

    #[test]
    fn this_process_counts_agree() {
        let mask = allowed_count().expect("the mask of a test process is readable");
        assert_eq!(mask, members(&allowed().unwrap()).len());
        assert!(online_count().unwrap() >= 1);
        if let Some(cpuset) = cpuset_count() {
            assert!(cpuset >= mask, "the mask lies within the cpuset: {mask} of {cpuset}");
        }
    }
}
