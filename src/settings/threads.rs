//! The default worker count (`KVIKIO_NTHREADS` unset), rank-aware: the ranks an MPI launcher
//! started on this node share its CPUs, so each rank's pool gets its share, not one thread per
//! core. `choose` is the rule, a pure function of the CPU counts and the launcher's variables;
//! `process` applies it once to this process. docs/routing.md, "The thread count" and "MPI ranks",
//! gives the reasons for the floors and the ceiling.

use super::env::{EnvSource, parse_unsigned, significant};
use once_cell::sync::OnceCell;

/// A process alone on its CPUs gets at least this many workers: reads block in the kernel, so even
/// a 2-core machine gains from overlapping four of them.
pub(crate) const FLOOR_ALONE: usize = 4;
/// A rank sharing the node with other ranks gets at least this many: the node as a whole keeps at
/// least the lone process's four reads in flight from two ranks on, and a pool of two still lets
/// the waiting thread work beside it (a pool of one only waits, docs/routing.md).
pub(crate) const FLOOR_RANK: usize = 2;
/// At most this many per process: the measured plateau of page-cache reads on the 16-core H200
/// machine (a process with more gains nothing; ranks with more only compete for the same memory
/// bandwidth).
pub(crate) const CEILING: usize = 16;

/// The CPU counts the default is made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cpus {
    /// CPUs of the node this process's job may use: its cpuset cgroup's, else those online.
    pub node: usize,
    /// CPUs in this process's affinity mask (what a launcher's binding left it).
    pub mask: usize,
    /// The mask, less a cgroup CPU quota.
    pub usable: usize,
}

impl Cpus {
    /// This process's counts now; a count that cannot be read is taken from the others.
    pub(crate) fn of_process() -> Cpus {
        // The calling thread's mask, less a cgroup CPU quota: the quota's bound where it is below
        // that mask (the thread itself may be bound to fewer CPUs than the process has).
        let parallelism = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(FLOOR_ALONE);
        let quota = crate::sys::cpus::thread_cpus_count().filter(|&own| parallelism < own).map(|_| parallelism);
        let mask = crate::sys::cpus::allowed_count().unwrap_or(parallelism);
        let usable = quota.unwrap_or(mask);
        let node = crate::sys::cpus::cpuset_count().or_else(crate::sys::cpus::online_count).unwrap_or(mask);
        Cpus { node: node.max(mask), mask, usable: usable.min(mask) }
    }
}

/// The ranks on this node, as a launcher's variable gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalRanks {
    pub count: usize,
    /// The variable read, and its value as set.
    pub variable: &'static str,
    pub raw: String,
}

/// A launcher variable that was set but could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ignored {
    pub variable: &'static str,
    pub raw: String,
    pub why: String,
}

/// How the CPUs were shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// No other rank on the node: the process's usable CPUs (the rule before ranks counted).
    Alone,
    /// The launcher bound this rank to CPUs of its own (mask x ranks fits in the node): the mask is
    /// the rank's share, not divided again.
    Bound,
    /// The ranks share the node's CPUs (no binding, or masks that must overlap): node / ranks.
    Divided,
}

/// The default and what it was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadDefault {
    pub threads: usize,
    pub cpus: Cpus,
    pub ranks: Option<LocalRanks>,
    pub share: Share,
    /// Launcher variables set but not used (malformed, or Slurm's outside a job step).
    pub ignored: Vec<Ignored>,
}

/// The launchers' counts of ranks on this node, in the order they are asked: an MPI launcher's
/// own count first (mpirun inside a Slurm allocation knows its layout better than the allocation).
const LOCAL_SIZE_VARIABLES: [&str; 5] = [
    "OMPI_COMM_WORLD_LOCAL_SIZE", // Open MPI's mpirun (and PRRTE)
    "MPI_LOCALNRANKS",            // MPICH's Hydra, Intel MPI
    "MV2_COMM_WORLD_LOCAL_SIZE",  // MVAPICH2's mpirun_rsh
    "PALS_LOCAL_SIZE",            // HPE Cray PALS (mpiexec on PBS)
    "JSM_NAMESPACE_LOCAL_SIZE",   // IBM Spectrum LSF's jsrun
];
/// Slurm's tasks per node, read only inside a job step (srun: `SLURM_STEP_ID` set), since the
/// batch script itself, one process, sees the allocation's counts too. Each is a list in node
/// order, "4" or "2(x3),1"; this node's entry is the one at `SLURM_NODEID`.
const SLURM_VARIABLES: [&str; 3] = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"];

/// The value of `name` as set (`None` when unset), or why it cannot be read.
fn raw(env: &dyn EnvSource, name: &str) -> Option<Result<String, (String, String)>> {
    env.get(name).map(|v| v.map_err(|lossy| (lossy, "not valid UTF-8".to_string())))
}

/// A positive count in the project's one spelling of numbers (`env::parse_unsigned`).
fn positive(text: &str) -> Result<usize, String> {
    match parse_unsigned(significant(text)) {
        Ok(0) => Err("must be a positive integer".into()),
        Ok(n) => usize::try_from(n).map_err(|_| "out of range".into()),
        Err(_) => Err("expected a positive integer in plain decimal digits".into()),
    }
}

/// This node's entry of a Slurm tasks-per-node list ("2(x3),1"): the entry at `node`, or, without
/// a node index, the count all nodes share.
pub(crate) fn slurm_tasks_on_node(text: &str, node: Option<usize>) -> Result<usize, String> {
    let mut counts: Vec<(usize, usize)> = Vec::new(); // (tasks, repeated)
    for entry in significant(text).split(',') {
        let (tasks, repeat) = match entry.split_once("(x") {
            None => (positive(entry)?, 1),
            Some((tasks, rest)) => {
                let times = rest.strip_suffix(')').ok_or_else(|| format!("{entry:?}: expected N or N(xM)"))?;
                (positive(tasks)?, positive(times)?)
            }
        };
        counts.push((tasks, repeat));
    }
    match node {
        Some(index) => {
            let mut before = 0usize;
            for &(tasks, repeat) in &counts {
                before = before.saturating_add(repeat);
                if index < before {
                    return Ok(tasks);
                }
            }
            Err(format!("lists {before} nodes, SLURM_NODEID is {index}"))
        }
        None if counts.iter().all(|&(tasks, _)| tasks == counts[0].0) => Ok(counts[0].0),
        None => Err("differs between nodes and SLURM_NODEID is not set".into()),
    }
}

/// The ranks on this node from the launchers' variables (the first usable one), with every set
/// variable that could not be used before it. A malformed value is ignored, never an error: the
/// default then falls back to the next variable, or to a process alone.
pub(crate) fn local_ranks(env: &dyn EnvSource) -> (Option<LocalRanks>, Vec<Ignored>) {
    let mut ignored = Vec::new();
    for variable in LOCAL_SIZE_VARIABLES {
        match raw(env, variable) {
            None => {}
            Some(Ok(text)) => match positive(&text) {
                Ok(count) => return (Some(LocalRanks { count, variable, raw: text }), ignored),
                Err(why) => ignored.push(Ignored { variable, raw: text, why }),
            },
            Some(Err((raw, why))) => ignored.push(Ignored { variable, raw, why }),
        }
    }
    let in_step = env.get("SLURM_STEP_ID").is_some();
    let node = match raw(env, "SLURM_NODEID") {
        Some(Ok(text)) => parse_unsigned(significant(&text)).ok().and_then(|n| usize::try_from(n).ok()),
        _ => None,
    };
    for variable in SLURM_VARIABLES {
        let text = match raw(env, variable) {
            None => continue,
            Some(Err((raw, why))) => {
                ignored.push(Ignored { variable, raw, why });
                continue;
            }
            Some(Ok(text)) => text,
        };
        if !in_step {
            ignored.push(Ignored { variable, raw: text, why: "not in a job step (SLURM_STEP_ID unset: the batch script, one process)".into() });
            continue;
        }
        match slurm_tasks_on_node(&text, node) {
            Ok(count) => return (Some(LocalRanks { count, variable, raw: text }), ignored),
            Err(why) => ignored.push(Ignored { variable, raw: text, why }),
        }
    }
    (None, ignored)
}

/// The rule: a process alone gets its usable CPUs, 4 to 16 (as before ranks counted). With R > 1
/// ranks on the node, a rank bound to CPUs of its own (its mask smaller than the node's CPUs and
/// R masks of its size fitting in them) keeps its mask; otherwise the ranks divide the node's CPUs,
/// node / R. Either share is capped by what the process can use (a CPU quota) and clamped to 2..16.
pub(crate) fn choose(cpus: Cpus, env: &dyn EnvSource) -> ThreadDefault {
    let (ranks, ignored) = local_ranks(env);
    let (share, cores, floor) = match ranks.as_ref().map(|r| r.count) {
        None | Some(1) => (Share::Alone, cpus.usable, FLOOR_ALONE),
        Some(r) => {
            let own_cpus = cpus.mask < cpus.node && cpus.mask.saturating_mul(r) <= cpus.node;
            let (share, cores) = if own_cpus { (Share::Bound, cpus.mask) } else { (Share::Divided, (cpus.node / r).min(cpus.mask)) };
            (share, cores.min(cpus.usable), FLOOR_RANK)
        }
    };
    ThreadDefault { threads: cores.clamp(floor, CEILING), cpus, ranks, share, ignored }
}

/// This process's default, made once (at the first call that needs settings), as every other
/// setting reads the environment once.
pub(crate) fn process() -> &'static ThreadDefault {
    static DEFAULT: OnceCell<ThreadDefault> = OnceCell::new();
    DEFAULT.get_or_init(|| {
        let chosen = choose(Cpus::of_process(), &super::env::ProcessEnv);
        for i in &chosen.ignored {
            crate::log::log(crate::log::Level::Warn, || format!("thread default: {}={:?} ignored: {}", i.variable, i.raw, i.why));
        }
        chosen
    })
}

impl ThreadDefault {
    /// The local ranks as the diagnostics show them: "4 (OMPI_COMM_WORLD_LOCAL_SIZE=\"4\")" or
    /// "none detected", then any variable ignored.
    pub(crate) fn describe_ranks(&self) -> String {
        let mut text = match &self.ranks {
            Some(r) => format!("{} ({}={:?})", r.count, r.variable, r.raw),
            None => "none detected (no launcher variable set)".to_string(),
        };
        for i in &self.ignored {
            text.push_str(&format!("; {}={:?} ignored: {}", i.variable, i.raw, i.why));
        }
        text
    }

    /// How the default was made, for the source of the thread count: "rank-aware: 16 CPUs of the
    /// node / 4 local ranks = 4" and the like.
    pub(crate) fn describe(&self) -> String {
        let Cpus { node, mask, usable } = self.cpus;
        let ranks = self.ranks.as_ref().map_or(1, |r| r.count);
        let base = match self.share {
            Share::Alone => format!("one per usable CPU ({usable}; {mask} in the mask, {node} on the node)"),
            Share::Bound => format!("rank-aware: {ranks} local ranks, this one bound to {mask} of the node's {node} CPUs (its share)"),
            Share::Divided => format!("rank-aware: {node} CPUs of the node / {ranks} local ranks ({mask} in this rank's mask)"),
        };
        let floor = if self.share == Share::Alone { FLOOR_ALONE } else { FLOOR_RANK };
        format!("{base}, clamped to {floor}..{CEILING}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::env::tests::MapEnv;
    use super::*;

    /// The counts do not depend on the calling thread's own binding (an OpenMP runtime's): from a
    /// thread bound to one CPU they are the process's, as from an unbound one.
    #[test]
    fn the_counts_are_the_process_s_from_a_thread_bound_to_one_cpu() {
        let free = Cpus::of_process();
        let first = crate::sys::cpus::members(&crate::sys::cpus::allowed().unwrap())[0];
        let bound = std::thread::spawn(move || {
            crate::sys::cpus::pin_to(&[first]).unwrap();
            Cpus::of_process()
        })
        .join()
        .unwrap();
        assert_eq!((bound.node, bound.mask), (free.node, free.mask));
        // A CPU quota is seen only from a thread whose own mask is above it.
        if free.usable == free.mask {
            assert_eq!(bound.usable, free.usable);
        }
    }

    fn cpus(node: usize, mask: usize) -> Cpus {
        Cpus { node, mask, usable: mask }
    }

    fn threads(c: Cpus, env: &[(&str, &str)]) -> usize {
        choose(c, &MapEnv::of(env)).threads
    }

    #[test]
    fn a_process_alone_keeps_the_old_rule() {
        for (cores, want) in [(1, 4), (2, 4), (8, 8), (16, 16), (64, 16)] {
            let chosen = choose(cpus(cores, cores), &MapEnv::of(&[]));
            assert_eq!((chosen.threads, chosen.share, chosen.ranks.clone()), (want, Share::Alone, None), "{cores} cores");
        }
        // One local rank is a process alone; a mask smaller than the node is still its CPUs.
        assert_eq!(threads(cpus(16, 16), &[("OMPI_COMM_WORLD_LOCAL_SIZE", "1")]), 16);
        assert_eq!(threads(cpus(64, 8), &[]), 8);
    }

    #[test]
    fn unbound_ranks_divide_the_node() {
        let env = [("OMPI_COMM_WORLD_LOCAL_SIZE", "4")];
        let chosen = choose(cpus(16, 16), &MapEnv::of(&env));
        assert_eq!((chosen.threads, chosen.share), (4, Share::Divided));
        assert!(chosen.describe().starts_with("rank-aware: 16 CPUs of the node / 4 local ranks"), "{}", chosen.describe());
        assert_eq!(threads(cpus(128, 128), &env), 16, "the ceiling");
        assert_eq!(threads(cpus(16, 16), &[("MPI_LOCALNRANKS", "8")]), 2);
        assert_eq!(threads(cpus(16, 16), &[("MPI_LOCALNRANKS", "16")]), 2, "the floor of a rank");
        assert_eq!(threads(cpus(2, 2), &[("PALS_LOCAL_SIZE", "1000000")]), 2);
        assert_eq!(threads(cpus(16, 16), &[("MV2_COMM_WORLD_LOCAL_SIZE", "3")]), 5);
        assert_eq!(threads(cpus(42, 42), &[("JSM_NAMESPACE_LOCAL_SIZE", "6")]), 7);
    }

    #[test]
    fn a_bound_rank_keeps_its_mask() {
        // mpirun --bind-to core: 4 ranks of 4 CPUs each on 16: the mask is the share.
        let env = [("OMPI_COMM_WORLD_LOCAL_SIZE", "4")];
        let chosen = choose(cpus(16, 4), &MapEnv::of(&env));
        assert_eq!((chosen.threads, chosen.share), (4, Share::Bound));
        assert_eq!(threads(cpus(64, 12), &env), 12);
        assert_eq!(threads(cpus(16, 1), &env), 2, "one core each: the floor");
        // Masks that must overlap (2 ranks per 8-CPU socket, 4 ranks on 16): the node divided.
        let chosen = choose(cpus(16, 8), &MapEnv::of(&env));
        assert_eq!((chosen.threads, chosen.share), (4, Share::Divided));
    }

    #[test]
    fn a_cpu_quota_caps_the_share() {
        let c = Cpus { node: 64, mask: 64, usable: 3 };
        assert_eq!(threads(c, &[("OMPI_COMM_WORLD_LOCAL_SIZE", "2")]), 3);
        assert_eq!(threads(c, &[]), 4, "alone: the old floor");
    }

    #[test]
    fn the_mpi_launchers_come_first_in_order() {
        let env = [("MPI_LOCALNRANKS", "2"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "8"), ("SLURM_STEP_ID", "0"), ("SLURM_TASKS_PER_NODE", "4")];
        let (ranks, ignored) = local_ranks(&MapEnv::of(&env));
        assert_eq!(ranks.unwrap().variable, "OMPI_COMM_WORLD_LOCAL_SIZE");
        assert!(ignored.is_empty());
        let without_open_mpi = [env[0], env[2], env[3]];
        let (ranks, _) = local_ranks(&MapEnv::of(&without_open_mpi));
        assert_eq!((ranks.as_ref().unwrap().variable, ranks.unwrap().count), ("MPI_LOCALNRANKS", 2));
    }

    /// An environment whose one variable is not UTF-8.
    struct NotUtf8(&'static str);

    impl EnvSource for NotUtf8 {
        fn get(&self, name: &str) -> Option<std::result::Result<String, String>> {
            (name == self.0).then(|| Err("4\u{fffd}".to_string()))
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_is_ignored() {
        let chosen = choose(cpus(16, 16), &NotUtf8("OMPI_COMM_WORLD_LOCAL_SIZE"));
        assert_eq!((chosen.threads, chosen.share), (16, Share::Alone));
        assert_eq!(chosen.ignored[0].why, "not valid UTF-8");
    }

    #[test]
    fn malformed_values_are_ignored_and_said() {
        for bad in ["", "four", "0", "-4", "4.0", "4 ranks", "0x4", "99999999999999999999999"] {
            let env = [("OMPI_COMM_WORLD_LOCAL_SIZE", bad)];
            let chosen = choose(cpus(16, 16), &MapEnv::of(&env));
            assert_eq!((chosen.threads, chosen.share), (16, Share::Alone), "{bad:?}");
            assert_eq!(chosen.ignored.len(), 1, "{bad:?}");
            assert!(chosen.describe_ranks().contains(&format!("OMPI_COMM_WORLD_LOCAL_SIZE={bad:?} ignored: ")), "{}", chosen.describe_ranks());
        }
        // A bad value falls through to the next variable; surrounding whitespace is fine.
        let env = [("OMPI_COMM_WORLD_LOCAL_SIZE", "x"), ("MPI_LOCALNRANKS", " 4\n")];
        let chosen = choose(cpus(16, 16), &MapEnv::of(&env));
        assert_eq!((chosen.threads, chosen.ranks.unwrap().variable, chosen.ignored.len()), (4, "MPI_LOCALNRANKS", 1));
    }

    #[test]
    fn slurm_lists() {
        assert_eq!(slurm_tasks_on_node("4", None), Ok(4));
        assert_eq!(slurm_tasks_on_node("4(x2)", None), Ok(4));
        assert_eq!(slurm_tasks_on_node("2(x3),1", Some(2)), Ok(2));
        assert_eq!(slurm_tasks_on_node("2(x3),1", Some(3)), Ok(1));
        assert!(slurm_tasks_on_node("2(x3),1", None).unwrap_err().contains("differs between nodes"));
        assert!(slurm_tasks_on_node("2(x3),1", Some(4)).unwrap_err().contains("lists 4 nodes"));
        for bad in ["", "4(x", "4(x2", "4(2)", "(x2)", "0", "4(x0)", "a,b", "4,,4", "4(x2)x"] {
            assert!(slurm_tasks_on_node(bad, Some(0)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slurm_counts_only_inside_a_job_step() {
        let batch = [("SLURM_TASKS_PER_NODE", "4(x2)"), ("SLURM_NODEID", "1")];
        let chosen = choose(cpus(16, 16), &MapEnv::of(&batch));
        assert_eq!((chosen.threads, chosen.share), (16, Share::Alone));
        assert!(chosen.ignored[0].why.starts_with("not in a job step"), "{:?}", chosen.ignored);
        let step = [("SLURM_STEP_ID", "0"), ("SLURM_TASKS_PER_NODE", "4(x2)"), ("SLURM_NODEID", "1")];
        assert_eq!(threads(cpus(16, 16), &step), 4);
        // The step's own layout first; an unusable entry falls through to the next variable.
        let env = [("SLURM_STEP_ID", "3"), ("SLURM_STEP_TASKS_PER_NODE", "8,2"), ("SLURM_NTASKS_PER_NODE", "4"), ("SLURM_NODEID", "1")];
        let (ranks, _) = local_ranks(&MapEnv::of(&env));
        assert_eq!((ranks.as_ref().unwrap().variable, ranks.unwrap().count), ("SLURM_STEP_TASKS_PER_NODE", 2));
        let env = [("SLURM_STEP_ID", "3"), ("SLURM_STEP_TASKS_PER_NODE", "8,2"), ("SLURM_NTASKS_PER_NODE", "4")];
        let (ranks, ignored) = local_ranks(&MapEnv::of(&env));
        assert_eq!((ranks.unwrap().count, ignored[0].variable), (4, "SLURM_STEP_TASKS_PER_NODE"));
    }

    #[test]
    fn this_process_has_a_default_in_range() {
        let chosen = process();
        assert!((FLOOR_RANK..=CEILING).contains(&chosen.threads), "{chosen:?}");
        assert!(chosen.cpus.usable <= chosen.cpus.mask && chosen.cpus.mask <= chosen.cpus.node, "{chosen:?}");
    }
}
