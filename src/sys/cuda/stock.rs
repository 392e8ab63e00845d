//! CUDA objects made ahead for the tasks of stream-ordered calls, which must not make them.
//!
//! While any thread of the process is inside a synchronous CUDA call that waits for a stream held
//! back by a stream-ordered call (`cuStreamSynchronize` on that stream, `cuMemcpyDtoH` on the
//! legacy stream behind it), the driver holds a lock that `cuStreamCreate` (and so, presumably,
//! every call that creates an object) waits for: a task creating its stream then waits for the
//! transfer it is part of. Stacks taken on the H200 machine, 2026-12-02 (docs/routing.md,
//! "Stream-ordered calls"). So the calling thread, at the call, makes the streams and events the
//! pool's workers will need in that context (`fill`), and a task's thread takes one the first
//! time it needs it there (`take`); only a thread that finds the stock empty makes its own.

use std::collections::HashMap;
use std::sync::Mutex;

use super::error::CudaFailure;

/// Of one context: how many objects were made in all, and those not yet taken.
type Made<T> = (usize, Vec<T>);

/// Objects of one kind, by context address.
pub(crate) struct Stock<T> {
    by_context: Mutex<Option<HashMap<usize, Made<T>>>>,
}

impl<T> Stock<T> {
    pub(crate) const fn new() -> Stock<T> {
        Stock { by_context: Mutex::new(None) }
    }

    /// Makes objects for context `ctx` with `make` (in that context, current on this thread)
    /// until `count` were made for it in all, those taken included. The objects are made outside
    /// the stock's lock: a `make` that waits for the driver's lock must not hold back a task's
    /// `take`.
    pub(crate) fn fill(&self, ctx: usize, count: usize, mut make: impl FnMut() -> Result<T, CudaFailure>) -> Result<(), CudaFailure> {
        let missing = {
            let mut map = self.by_context.lock().unwrap_or_else(|p| p.into_inner());
            let entry = map.get_or_insert_with(HashMap::new).entry(ctx).or_insert((0, Vec::new()));
            let missing = count.saturating_sub(entry.0);
            entry.0 += missing; // reserved, so that two filling threads do not both make them
            missing
        };
        for made in 0..missing {
            match make() {
                Ok(object) => self.put(ctx, object),
                Err(e) => {
                    // What was not made is not reserved: a later call tries again.
                    let mut map = self.by_context.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(entry) = map.as_mut().and_then(|m| m.get_mut(&ctx)) {
                        entry.0 -= missing - made;
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn put(&self, ctx: usize, object: T) {
        let mut map = self.by_context.lock().unwrap_or_else(|p| p.into_inner());
        map.get_or_insert_with(HashMap::new).entry(ctx).or_insert((0, Vec::new())).1.push(object);
    }

    /// One object made ahead for context `ctx`, if any is left.
    pub(crate) fn take(&self, ctx: usize) -> Option<T> {
        let mut map = self.by_context.lock().unwrap_or_else(|p| p.into_inner());
        map.as_mut()?.get_mut(&ctx)?.1.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_to_the_count_made_in_all_and_hands_each_object_out_once() {
        let stock: Stock<u32> = Stock::new();
        let mut next = 0;
        stock.fill(1, 3, || { next += 1; Ok(next) }).unwrap();
        assert_eq!(next, 3);
        let taken = stock.take(1).unwrap();
        // Three were made for context 1: filling to three again makes none, even with one taken.
        stock.fill(1, 3, || { next += 1; Ok(next) }).unwrap();
        assert_eq!(next, 3);
        stock.fill(1, 4, || { next += 1; Ok(next) }).unwrap();
        assert_eq!(next, 4);
        let mut rest = vec![stock.take(1).unwrap(), stock.take(1).unwrap(), stock.take(1).unwrap()];
        rest.push(taken);
        rest.sort();
        assert_eq!(rest, vec![1, 2, 3, 4]);
        assert_eq!(stock.take(1), None);
        assert_eq!(stock.take(2), None, "another context has its own objects");
    }

    #[test]
    fn a_failed_make_leaves_the_rest_unreserved() {
        let stock: Stock<u32> = Stock::new();
        let mut calls = 0;
        let r = stock.fill(7, 3, || {
            calls += 1;
            if calls == 2 { Err(CudaFailure::NoContext("test")) } else { Ok(calls) }
        });
        assert!(r.is_err());
        assert_eq!(stock.take(7), Some(1));
        // One was made; the next fill makes the two still missing.
        let mut made = 0;
        stock.fill(7, 3, || { made += 1; Ok(10 + made) }).unwrap();
        assert_eq!(made, 2);
    }
}
