//! Where a read goes. This is the one place that decides between our POSIX backend and cuFile,
//! following KvikIO's rules (kvikio-behaviour.md §2.3): host memory always uses POSIX tasks;
//! device requests below the GDS threshold use POSIX inline; larger device requests use cuFile
//! per task unless compat mode (or an AUTO fallback) says otherwise.

use crate::stats::{PosixReason, Route};

/// What kind of memory the caller's buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Pageable or pinned host memory.
    Host,
}

/// The decision for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The route every task of the call takes.
    pub route: Route,
}

/// Decides the route of a call.
pub fn plan(destination: Destination) -> Plan {
    match destination {
        Destination::Host => Plan { route: Route::Posix(PosixReason::HostMemory) },
    }
}
