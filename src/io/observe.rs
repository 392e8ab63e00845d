//! What monitors (`stats::monitor`) and profilers (`nvtx`) see of the engine's work, built where
//! the engine knows its parts: a call's (`CallWatch`: started with the call, given its file and
//! route once planned, ended with its result; a watch dropped unended is a call that failed
//! before it was routed; its NVTX range spans the same) and a task's (`observe_task`, around each
//! task in `dispatch`). Nothing is built while no monitor watches and no tool takes NVTX ranges.

use super::dispatch::Call;
use super::request::{Request, Target};
use crate::abi::{Observation, ObservationKind, ObservedMemory, ObservedPosixReason, ObservedRoute};
use crate::error::Result;
use crate::stats::monitor;
use crate::stats::{PosixReason, Route};
use crate::sys::cuda::MemoryKind;
use super::open_file::OpenFile;
use std::sync::Arc;

fn blank(kind: ObservationKind, direction: crate::direction::Direction, file_offset: u64, size: u64) -> Observation {
    Observation {
        struct_size: std::mem::size_of::<Observation>() as u64,
        kind: kind as u32,
        direction: direction as u32,
        path: std::ptr::null(),
        file_offset,
        size,
        bytes: 0,
        buffer_offset: 0,
        start_ns: monitor::now_ns(),
        end_ns: 0,
        memory: ObservedMemory::Unknown as u32,
        route: ObservedRoute::None as u32,
        posix_reason: ObservedPosixReason::None as u32,
        ok: 0,
        stream_ordered: 0,
        reserved: 0,
    }
}

fn route_fields(observation: &mut Observation, route: Route, target: &Target) {
    observation.memory = match target {
        Target::Host(_) => ObservedMemory::Host,
        Target::Device { kind: MemoryKind::Managed { .. }, .. } => ObservedMemory::Managed,
        Target::Device { .. } => ObservedMemory::Device,
    } as u32;
    let (route, reason) = match route {
        Route::Cufile => (ObservedRoute::Cufile, ObservedPosixReason::None),
        Route::Posix(reason) => (
            ObservedRoute::Posix,
            match reason {
                PosixReason::HostMemory => ObservedPosixReason::HostMemory,
                PosixReason::BelowThreshold => ObservedPosixReason::BelowThreshold,
                PosixReason::CompatOn => ObservedPosixReason::CompatOn,
                PosixReason::AutoFallback => ObservedPosixReason::AutoFallback,
            },
        ),
    };
    observation.route = route as u32;
    observation.posix_reason = reason as u32;
}

/// A call being watched for the monitors and profilers.
pub(crate) struct CallWatch {
    observation: Observation,
    /// Its NVTX range, ended with the call.
    range: Option<crate::nvtx::CallRange>,
    /// Whether a monitor watches: the observation is delivered.
    deliver: bool,
    /// The call's file, which holds the path the observation points to.
    file: Option<Arc<OpenFile>>,
    ended: bool,
}

// SAFETY: `observation.path` is set only while delivering, from `file`, which the watch owns.
unsafe impl Send for CallWatch {}

impl CallWatch {
    /// Starts watching a call of `request`, if a monitor watches calls or a tool takes NVTX
    /// ranges.
    pub(crate) fn start(request: &Request, stream_ordered: bool) -> Option<CallWatch> {
        let deliver = monitor::watching_calls();
        let name = match request.direction {
            crate::direction::Direction::Read => c"gdsroute read",
            crate::direction::Direction::Write => c"gdsroute write",
        };
        let range = crate::nvtx::CallRange::start(name, request.size as u64);
        if !deliver && range.is_none() {
            return None;
        }
        let mut observation = blank(ObservationKind::Call, request.direction, request.offset, request.size as u64);
        observation.stream_ordered = u32::from(stream_ordered);
        Some(CallWatch { observation, range, deliver, file: None, ended: false })
    }

    /// The call's file is known.
    pub(crate) fn file(&mut self, file: &Arc<OpenFile>) {
        self.file = Some(Arc::clone(file));
    }

    /// The call was planned: its memory and route.
    pub(super) fn routed(&mut self, call: &Call) {
        route_fields(&mut self.observation, call.plan.route, &call.target);
    }

    /// The call ended with `result` (its bytes, or an error): delivered.
    pub(crate) fn end(mut self, result: &Result<usize>) {
        self.finish(result.as_ref().ok().copied());
    }

    /// The call is not this one after all (another way takes it, observed there): nothing is
    /// delivered.
    pub(crate) fn dismiss(mut self) {
        self.ended = true;
        self.range = None;
    }

    fn finish(&mut self, bytes: Option<usize>) {
        self.ended = true;
        self.range = None; // the NVTX range ends with the call
        if !self.deliver {
            return;
        }
        self.observation.bytes = bytes.unwrap_or(0) as u64;
        self.observation.ok = u32::from(bytes.is_some());
        self.observation.end_ns = monitor::now_ns();
        self.observation.path = self.file.as_ref().map_or(std::ptr::null(), |f| f.c_path().as_ptr());
        monitor::deliver(&self.observation);
    }
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        if !self.ended {
            self.finish(None);
        }
    }
}

/// Runs `task` (a task of `call` on `file`, `len` bytes at `file_offset`, `buffer_offset` into the
/// call's buffer) and, if a monitor watches tasks, delivers its observation.
pub(super) fn observe_task(call: &Call, file: &OpenFile, file_offset: u64, len: usize, buffer_offset: usize, task: impl FnOnce() -> Result<usize>) -> Result<usize> {
    let name = match (call.plan.route, call.direction) {
        (Route::Posix(_), crate::direction::Direction::Read) => c"gdsroute task posix read",
        (Route::Posix(_), crate::direction::Direction::Write) => c"gdsroute task posix write",
        (Route::Cufile, crate::direction::Direction::Read) => c"gdsroute task cufile read",
        (Route::Cufile, crate::direction::Direction::Write) => c"gdsroute task cufile write",
    };
    let _range = crate::nvtx::TaskRange::push(name, len as u64);
    if !call.observed || !monitor::watching_tasks() {
        return task();
    }
    let mut observation = blank(ObservationKind::Task, call.direction, file_offset, len as u64);
    let result = task();
    observation.path = file.c_path().as_ptr();
    observation.buffer_offset = buffer_offset as u64;
    route_fields(&mut observation, call.plan.route, &call.target);
    observation.bytes = *result.as_ref().unwrap_or(&0) as u64;
    observation.ok = u32::from(result.is_ok());
    observation.end_ns = monitor::now_ns();
    monitor::deliver(&observation);
    result
}
