//! CUDA events for the pipelined bounce-buffer copy: a pair per (thread, context), created on
//! first use and cached for the thread's life like the streams in `copy`, so a task never pays
//! for creating them.

use std::cell::RefCell;
use std::collections::HashMap;

use cudarc::driver::sys::{self, CUevent};

use super::context::current_context;
use super::copy::Stream;
use super::driver::cuda;
use super::error::{CudaFailure, check};
use super::stock::Stock;

/// A CUDA event (`CUevent`), held as an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event(usize);

impl Event {
    fn raw(self) -> CUevent {
        self.0 as CUevent
    }

    /// Records the event on `stream` (it completes when the work queued before it does).
    pub(crate) fn record(self, stream: Stream) -> Result<(), CudaFailure> {
        // SAFETY: the event was created by `thread_events` in the context current on this
        // thread; the stream belongs to it.
        check("cuEventRecord", unsafe { sys::cuEventRecord(self.raw(), stream.as_raw()) })
    }

    /// Waits until the work recorded before the event has finished.
    pub(crate) fn synchronize(self) -> Result<(), CudaFailure> {
        // SAFETY: a live event created by `thread_events`.
        check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(self.raw()) })
    }
}

thread_local! {
    /// This thread's event pairs, by context address. Never destroyed (as the streams).
    static EVENTS: RefCell<HashMap<usize, [Event; 2]>> = RefCell::new(HashMap::new());
}

/// Two events of the calling thread for its current context, created (without timing) on first
/// use.
///
/// Errors: `Unavailable`/`Forked`; `NoContext`; the CUresult of `cuEventCreate`.
pub(crate) fn thread_events() -> Result<[Event; 2], CudaFailure> {
    cuda()?;
    let ctx = current_context()?.ok_or(CudaFailure::NoContext("thread_events"))?;
    let key = ctx.as_raw() as usize;
    let known = EVENTS.try_with(|m| m.borrow().get(&key).copied()).map_err(|_| CudaFailure::ThreadExiting("thread_events"))?;
    if let Some(pair) = known {
        return Ok(pair);
    }
    // A stream-ordered task takes a pair made ahead at the call (`stock`): creating one here
    // could wait for the transfer this task is part of.
    let stocked = if super::copy::in_stream_ordered_task() { STOCK.take(key) } else { None };
    let pair = match stocked {
        Some(pair) => pair,
        None => create_pair()?,
    };
    let _ = EVENTS.try_with(|m| m.borrow_mut().insert(key, pair));
    Ok(pair)
}

fn create_pair() -> Result<[Event; 2], CudaFailure> {
    let mut pair = [Event(0); 2];
    for slot in &mut pair {
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: cuda() succeeded (callers), a context is current, valid out-pointer.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        *slot = Event(raw as usize);
    }
    Ok(pair)
}

/// Event pairs made ahead for the tasks of stream-ordered calls (`stock`).
static STOCK: Stock<[Event; 2]> = Stock::new();

/// Makes event pairs for context `ctx` (current on this thread) until `count` were made
/// (`copy::stock_for_stream_ordered_tasks`).
pub(super) fn stock_event_pairs(ctx: usize, count: usize) -> Result<(), CudaFailure> {
    STOCK.fill(ctx, count, create_pair)
}
