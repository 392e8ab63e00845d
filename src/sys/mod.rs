//! Bindings without policy: the CPUs a thread runs on (`cpus`), the process's control groups (`cgroup`), the CUDA driver (`cuda`), cuFile loaded at run time with its codes
//! and statistics (`cufile`), file-system calls (`fs`), room in the descriptor table ahead of the handles (`fd_table`), the drive that holds a file (`drive`), NUMA placement (`numa`: a PCI device's
//! node, a memory range's preferred node), copies to and from the caller's memory that report a
//! bad page instead of crashing (`process_copy`) and what the process is at load time
//! (`startup`: fork detection, cuFile's log directory). Nothing here decides a route.

pub(crate) mod cgroup;
pub(crate) mod cuda;
pub(crate) mod cpus;
pub(crate) mod cufile;
pub(crate) mod drive;
pub(crate) mod fd_table;
pub(crate) mod fs;
pub(crate) mod numa;
pub(crate) mod page_cache;
pub(crate) mod process_copy;
pub(crate) mod startup;
