//! Bindings without policy: the CUDA driver (`cuda`), cuFile loaded at run time with its codes
//! and statistics (`cufile`), file-system calls (`fs`), NUMA placement (`numa`: a PCI device's
//! node, a memory range's preferred node) and what the process is at load time (`startup`: fork
//! detection, cuFile's log directory). Nothing here decides a route.

pub(crate) mod cuda;
pub(crate) mod cufile;
pub(crate) mod fs;
pub(crate) mod numa;
pub(crate) mod startup;
