//! The rank-aware default thread count (docs/routing.md, "The thread count" and "MPI ranks"): each
//! scenario runs in a child process of its own, with a launcher's variable set as mpirun sets it
//! (the default is made once per process), and reads the count through the Rust API and the C ABI,
//! reads a file on a pool of that size, and prints the diagnostics' settings lines.

mod common;

use gdsroute::Status;
use std::ffi::OsString;

unsafe extern "C" {
    fn gdsroute_settings_get_num_threads(threads: *mut usize) -> Status;
}

/// Every launcher variable the default reads, and the thread settings: none may leak in from the
/// shell that runs the tests (an MPI or Slurm job, say).
const REMOVED: [&str; 12] = [
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_LOCAL_SIZE",
    "PALS_LOCAL_SIZE",
    "JSM_NAMESPACE_LOCAL_SIZE",
    "SLURM_STEP_ID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODEID",
    "KVIKIO_NTHREADS",
    "KVIKIO_NUM_THREADS",
];

/// What every child does: the count both ways (they must agree), a read of random bytes on the
/// pool, every byte checked, and the report's lines about threads and ranks.
#[test]
#[ignore = "a child of the tests below"]
fn child_reports_its_thread_count() {
    let rust = gdsroute::settings::num_threads().unwrap();
    let mut c = 0usize;
    assert_eq!(unsafe { gdsroute_settings_get_num_threads(&mut c) }, Status::Ok);
    assert_eq!(rust, c, "the Rust API and the C ABI disagree");
    let data = common::random_bytes(3 << 20, 17);
    let tmp = common::temp_file_in(None, &data);
    let file = common::open(tmp.path(), None);
    let mut back = vec![0xA5u8; data.len()];
    let done = file.read_into(&mut back, 0).unwrap(); // a parallel read on the pool
    assert_eq!(done, data.len());
    assert!(back == data, "a byte differs");
    file.close();
    println!("THREADS {rust}");
    for line in gdsroute::diagnose::report(None).lines() {
        if line.contains("KVIKIO_NTHREADS") || line.starts_with("local MPI ranks") {
            println!("REPORT {line}");
        }
    }
}

/// The child's thread count and its report lines, under `env`.
fn child(env: &[(&str, &str)]) -> (usize, String) {
    let env: Vec<(&str, OsString)> = env.iter().map(|(k, v)| (*k, OsString::from(v))).collect();
    let out = common::run_ignored_test_without("child_reports_its_thread_count", &env, &REMOVED);
    // The harness's "test NAME ... " may begin the line a child's line is printed on.
    let after = |l: &'static str| move |line: &str| line.split_once(l).map(|(_, rest)| rest.to_string());
    let threads = out.lines().find_map(after("THREADS ")).expect("the child printed its count").trim().parse().unwrap();
    let report: Vec<String> = out.lines().filter_map(after("REPORT ")).collect();
    assert_eq!(report.len(), 2, "the thread setting's line and the ranks line: {out}");
    (threads, report.join("\n"))
}

/// The old default, one thread per usable core clamped to 4..16: a process alone keeps it.
fn alone() -> usize {
    std::thread::available_parallelism().unwrap().get().clamp(4, 16)
}

/// CPUs in this process's affinity mask (the child inherits it).
fn mask() -> usize {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }, 0);
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).count()
}

#[test]
fn a_process_alone_keeps_one_thread_per_core() {
    let (threads, report) = child(&[]);
    assert_eq!(threads, alone(), "{report}");
    assert!(report.contains("(from default, one per usable CPU"), "{report}");
    assert!(report.contains("local MPI ranks on this node: none detected"), "{report}");
}

#[test]
fn many_ranks_on_the_node_get_the_floor_of_two() {
    // 4096 ranks share any node of fewer than 8192 CPUs: each gets the floor.
    let (threads, report) = child(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "4096")]);
    assert_eq!(threads, 2, "{report}");
    assert!(report.contains("(from default, rank-aware: "), "{report}");
    assert!(report.contains("local MPI ranks on this node: 4096 (OMPI_COMM_WORLD_LOCAL_SIZE=\"4096\"); default thread count 2"), "{report}");
}

#[test]
fn two_ranks_share_what_the_report_names() {
    let (threads, report) = child(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "2")]);
    let usable = std::thread::available_parallelism().unwrap().get();
    // The report says which share it took; the count must be that share, capped and clamped.
    let share = if let Some(rest) = report.split("rank-aware: ").nth(1).filter(|r| r.contains(" CPUs of the node / 2 local ranks")) {
        let node: usize = rest.split(' ').next().unwrap().parse().unwrap();
        (node / 2).min(mask())
    } else {
        assert!(report.contains("rank-aware: 2 local ranks, this one bound to "), "{report}");
        mask()
    };
    assert_eq!(threads, share.min(usable).clamp(2, 16), "{report}");
    assert!(threads <= alone(), "a rank never gets more than a process alone: {report}");
}

#[test]
fn the_environment_still_wins() {
    let (threads, report) = child(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "4096"), ("KVIKIO_NTHREADS", "7")]);
    assert_eq!(threads, 7, "{report}");
    assert!(report.contains(": 7 (from environment)"), "{report}");
    assert!(report.contains("local MPI ranks on this node: 4096 (OMPI_COMM_WORLD_LOCAL_SIZE=\"4096\"); default thread count 2"), "{report}");
}

#[test]
fn a_malformed_launcher_value_is_ignored_and_said() {
    let (threads, report) = child(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "four"), ("SLURM_TASKS_PER_NODE", "4(x2)")]);
    assert_eq!(threads, alone(), "{report}");
    assert!(report.contains("OMPI_COMM_WORLD_LOCAL_SIZE=\"four\" ignored: expected a positive integer"), "{report}");
    assert!(report.contains("SLURM_TASKS_PER_NODE=\"4(x2)\" ignored: not in a job step"), "{report}");
}

#[test]
fn a_slurm_step_counts_its_tasks_on_this_node() {
    let (threads, report) = child(&[("SLURM_STEP_ID", "0"), ("SLURM_TASKS_PER_NODE", "1,4096(x2)"), ("SLURM_NODEID", "2")]);
    assert_eq!(threads, 2, "{report}");
    assert!(report.contains("local MPI ranks on this node: 4096 (SLURM_TASKS_PER_NODE=\"1,4096(x2)\")"), "{report}");
}
