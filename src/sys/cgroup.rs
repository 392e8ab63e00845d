//! The process's control groups: where its group of a hierarchy lives under `/sys/fs/cgroup`
//! (from `/proc/self/cgroup`), and that group's directory with its ancestors', whose files hold
//! the limits. Read by the page cache's pin limit (memory) and the default thread count (cpuset).
//! Without a private cgroup namespace (Slurm, systemd units) a limit is not on the root itself.

use std::path::{Path, PathBuf};

/// A cgroup hierarchy: the unified one (v2), or the v1 hierarchy of one controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hierarchy {
    V2,
    V1(&'static str),
}

impl Hierarchy {
    fn root(self) -> PathBuf {
        match self {
            Hierarchy::V2 => PathBuf::from("/sys/fs/cgroup"),
            Hierarchy::V1(controller) => Path::new("/sys/fs/cgroup").join(controller),
        }
    }
}

/// The process's group in `hierarchy` from the text of `/proc/self/cgroup`: the path of the `0::`
/// line (v2), or of the line whose controllers include the controller (v1).
fn group_in(text: &str, hierarchy: Hierarchy) -> Option<&str> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else { return None };
        let matches = match hierarchy {
            Hierarchy::V2 => id == "0" && controllers.is_empty(),
            Hierarchy::V1(controller) => controllers.split(',').any(|c| c == controller),
        };
        matches.then_some(path)
    })
}

/// The directories of the process's group in `hierarchy`, its own first, then each ancestor up to
/// the hierarchy's root (included); empty where the process is in no such group.
pub(crate) fn group_and_ancestors(hierarchy: Hierarchy) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(group) = group_in(&text, hierarchy) else { return Vec::new() };
    ancestors_of(&hierarchy.root(), group)
}

/// The directory of `group` under `root`, then each ancestor up to `root` (included). In a
/// container without a cgroup namespace the group's path (`/docker/<id>`) names no directory
/// there: the container's own group is mounted at the root, the first of these that exists.
pub(crate) fn ancestors_of(root: &Path, group: &str) -> Vec<PathBuf> {
    let root = root.to_path_buf();
    let mut dir = root.join(group.trim_start_matches('/'));
    let mut dirs = Vec::new();
    loop {
        dirs.push(dir.clone());
        if dir == root || !dir.pop() || !dir.starts_with(&root) {
            return dirs;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_v1_v2_and_hybrid() {
        assert_eq!(group_in("0::/user.slice/job_7/step_0\n", Hierarchy::V2), Some("/user.slice/job_7/step_0"));
        assert_eq!(group_in("0::/user.slice/job_7/step_0\n", Hierarchy::V1("cpuset")), None);
        let hybrid = "9:name=systemd:/\n3:cpuset:/docker/abc\n2:cpu,cpuacct:/\n0::/\n";
        assert_eq!(group_in(hybrid, Hierarchy::V2), Some("/"));
        assert_eq!(group_in(hybrid, Hierarchy::V1("cpuset")), Some("/docker/abc"));
        assert_eq!(group_in(hybrid, Hierarchy::V1("memory")), None);
        assert_eq!(group_in("4:cpuacct,cpuset:/slurm/uid_1/job_2\n", Hierarchy::V1("cpuset")), Some("/slurm/uid_1/job_2"));
        assert_eq!(group_in("5:memory:/a\n", Hierarchy::V1("memory")), Some("/a"));
        assert_eq!(group_in("garbage\n", Hierarchy::V2), None);
    }

    #[test]
    fn this_process_walks_up_to_the_root() {
        let dirs = group_and_ancestors(Hierarchy::V2);
        if let Some(last) = dirs.last() {
            assert_eq!(last, Path::new("/sys/fs/cgroup"));
            assert!(dirs.windows(2).all(|pair| pair[0].parent() == Some(pair[1].as_path())), "{dirs:?}");
        }
    }
}
