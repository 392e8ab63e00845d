//! Worker pools: a caller's (its size and CPUs) and which pool a handle runs on (the Rust side
//! is `api::pool` and `File::set_pool`).

use super::{TextOut, arg, guard, out, write_out};
use crate::abi::Status;
use crate::api::file::File;
use crate::api::pool::Pool;
use std::ffi::c_char;

/// Makes a pool of `threads` worker threads (1 to `GDSROUTE_MAX_THREADS`) for handles given it
/// with `gdsroute_file_set_pool`; with `ncpus` CPUs at `cpus`, every worker runs on those CPUs
/// only (`sched_setaffinity`; for example the CPUs of the NUMA node near a drive or a GPU), with
/// `cpus` NULL and `ncpus` 0 wherever the process may run. Free it with `gdsroute_pool_free`: its
/// workers leave once it is freed and no handle holds it, after the calls queued on it ran.
/// Errors: `NULL_ARGUMENT` (`pool`, or `cpus` with `ncpus` > 0), `INVALID_ARGUMENT` (a thread
/// count out of range, `cpus` with `ncpus` 0, a CPU this process may not run on), `INTERNAL` (no
/// thread could be started).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_pool_create(threads: usize, cpus: *const usize, ncpus: usize, pool: *mut *mut Pool) -> Status {
    guard(|| {
        let pool = out(pool, "pool")?;
        let cpus = match (cpus.is_null(), ncpus) {
            (true, 0) => None,
            (true, _) => return Err(crate::Error::NullArgument("cpus")),
            // An empty list is refused by `Pool::new`, as a list with nothing in it.
            (false, 0) => Some(&[][..]),
            // SAFETY: the caller passes `ncpus` readable values at `cpus`.
            (false, n) => Some(unsafe { std::slice::from_raw_parts(cpus, n) }),
        };
        let made = Box::new(Pool::new(threads, cpus)?);
        // SAFETY: checked by `out`.
        unsafe { write_out(pool, Box::into_raw(made)) };
        Ok(())
    })
}

/// Lets go of a pool made by `gdsroute_pool_create`; handles given it keep running their calls
/// on it until they are given another or freed. NULL is a no-op; freeing twice is undefined
/// behaviour.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_pool_free(pool: *mut Pool) {
    let _ = guard(|| {
        if !pool.is_null() {
            // SAFETY: the pointer came from Box::into_raw in gdsroute_pool_create, freed once.
            drop(unsafe { Box::from_raw(pool) });
        }
        Ok(())
    });
}

/// Runs the handle's parallel calls (`gdsroute_file_pread`, `_pwrite` and the stream-ordered
/// ones) from now on on `pool`, or with `pool` NULL on the pool a handle opened now would get
/// (the shared pool; its drive's under `KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE`). Calls in flight
/// finish where they run. Errors: `NULL_ARGUMENT` (`file`), `CLOSED_HANDLE`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_set_pool(file: *const File, pool: *const Pool) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL, and a live pool or NULL.
        let file = unsafe { arg(file, "file")? };
        let pool = unsafe { pool.as_ref() };
        file.set_pool(pool)
    })
}

/// Writes which pool runs the handle's parallel calls into `buf` (snprintf semantics; full length
/// in `*length`; `buf` may be NULL when `buf_len` is 0): `shared`, `drive NAME` (the pool of
/// that drive, e.g. `drive nvme0`), `no block device: KIND` (`memory` for tmpfs, `network`,
/// `fuse`, `overlay`, `other`) or `caller` (a pool given with `gdsroute_file_set_pool`). Errors:
/// `NULL_ARGUMENT`, `CLOSED_HANDLE`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_pool_name(file: *const File, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let file = unsafe { arg(file, "file")? };
        let text_out = TextOut::new(buf, buf_len, length)?;
        let name = file.pool_name()?;
        // SAFETY: the caller's buffer and length pointer (checked by `TextOut::new`).
        unsafe { text_out.write(&name) };
        Ok(())
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_pool_create, gdsroute_pool_free, gdsroute_file_set_pool, gdsroute_file_pool_name);
