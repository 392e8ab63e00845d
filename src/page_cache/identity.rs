//! File identity: when the windows of a file stop being valid. A file's identity (device, inode,
//! size, modification and change times, by `fstat`) is checked before every task (`plan`), and a
//! write through any handle of the same file drops the windows of all its caches
//! (`file_written`); either way the windows go and the generation moves on, so that no copy
//! reads bytes registered before the change. Planning the windows is `plan`'s job.

use super::{PageCache, State, WindowState};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a file must have been unchanged before its windows are registered. Unit tests read
/// files they have just written, and test `is_quiet_for` on its own.
#[cfg(not(test))]
const QUIET: Duration = Duration::from_secs(1);
#[cfg(test)]
const QUIET: Duration = Duration::ZERO;

/// What a file looked like when its windows were registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Identity {
    dev: u64,
    ino: u64,
    pub(super) size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    /// True when the file has not changed for `QUIET` (by its change time).
    pub(super) fn is_quiet(&self) -> bool {
        self.is_quiet_for(QUIET)
    }

    /// True when the change time lies at least `quiet` in the past (not in the future).
    fn is_quiet_for(&self, quiet: Duration) -> bool {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else { return false };
        let (secs, nanos) = self.ctime;
        let changed = Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
        now.checked_sub(changed).is_some_and(|age| age >= quiet)
    }
}

/// The identity of the file open on `fd` now.
pub(super) fn identity_of(fd: RawFd) -> std::io::Result<Identity> {
    let st = crate::sys::fs::stat(fd)?;
    Ok(Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

impl State {
    /// Takes the windows of the file as it was and records `identity` (`None`: unknown until the
    /// next task) under a new generation, so that a registration still queued is discarded
    /// when it finishes. The windows returned are to be dropped after the lock (that
    /// unregisters them).
    pub(super) fn forget_windows(&mut self, identity: Option<Identity>) -> HashMap<u64, WindowState> {
        self.identity = identity;
        self.generation += 1;
        std::mem::take(&mut self.windows)
    }

    /// `forget_windows` if the file is no longer the one on record (`now` differs), a change;
    /// else nothing.
    pub(super) fn forget_windows_if_changed(&mut self, now: Identity) -> HashMap<u64, WindowState> {
        if self.identity == Some(now) {
            return HashMap::new();
        }
        if self.identity.is_some() {
            self.changes += 1;
        }
        self.forget_windows(Some(now))
    }
}

/// A stream-ordered write of a file, counted from its call until it starts (when it drops the
/// file's windows) or is given up (`PageCache::write_queued`).
pub(crate) struct QueuedWrite((u64, u64));

impl Drop for QueuedWrite {
    fn drop(&mut self) {
        let mut files = open_files();
        if let Some(n) = files.queued_writes.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                files.queued_writes.remove(&self.0);
            }
        }
    }
}

impl PageCache {
    /// The key of this cache's file among `OpenFiles`' queued writes: its (device, inode), or this
    /// cache alone where those are unknown.
    fn queue_key(&self) -> (u64, u64) {
        self.file.unwrap_or((u64::MAX, self as *const PageCache as u64))
    }

    /// Counts a stream-ordered write of this file as queued until the guard drops. While one is,
    /// a read whose copies are made later (`queued_write_pending`) takes no registered window:
    /// the write drops them before those copies run, and the read would fail
    /// (`unchanged_since`).
    pub(crate) fn write_queued(&self) -> QueuedWrite {
        let key = self.queue_key();
        *open_files().queued_writes.entry(key).or_default() += 1;
        QueuedWrite(key)
    }

    /// True while a stream-ordered write of this file, through any handle, is queued.
    pub(crate) fn queued_write_pending(&self) -> bool {
        open_files().queued_writes.contains_key(&self.queue_key())
    }

    /// True when windows planned at `changes` (`plan_noting_changes`) still hold the file's
    /// bytes: no write through any handle of the file in this process since, and the file open on
    /// `fd` unchanged by `fstat`. For a copy planned earlier and made later (a stream-ordered
    /// read's queued copies), asked once the stream got there; the copy holds its windows
    /// registered itself, so a drop of the windows that is no change does not count.
    pub(crate) fn unchanged_since(&self, fd: RawFd, changes: u64) -> bool {
        let Ok(now) = identity_of(fd) else { return false };
        let state = self.lock();
        state.changes == changes && state.identity == Some(now)
    }
}

/// The caches of each open file (by device and inode), so that a write through one handle drops
/// the windows of every handle of the same file.
#[derive(Default)]
struct OpenFiles {
    caches: HashMap<(u64, u64), Vec<std::sync::Weak<PageCache>>>,
    /// The number of files at which the next sweep of every file's dead entries runs: twice the
    /// files left by the last one, so that sweeping costs O(1) per added cache. Sweeping every
    /// file at every open made opening n handles at once O(n²): 7 µs of a 4,096th open's 10 on
    /// the H200 machine (2026-12-04).
    sweep_at: usize,
    /// Stream-ordered writes queued and not yet started, by file (`PageCache::write_queued`).
    queued_writes: HashMap<(u64, u64), usize>,
}

impl OpenFiles {
    fn add(&mut self, file: (u64, u64), cache: &Arc<PageCache>) {
        let alive = |c: &std::sync::Weak<PageCache>| c.strong_count() > 0;
        let same_file = self.caches.entry(file).or_default();
        same_file.retain(alive);
        same_file.push(Arc::downgrade(cache));
        if self.caches.len() >= self.sweep_at {
            self.caches.retain(|_, caches| {
                caches.retain(alive);
                !caches.is_empty()
            });
            self.sweep_at = (2 * self.caches.len()).max(64);
        }
    }

    fn get(&self, file: &(u64, u64)) -> Option<&Vec<std::sync::Weak<PageCache>>> {
        self.caches.get(file)
    }
}

static OPEN_FILES: once_cell::sync::Lazy<Mutex<OpenFiles>> = once_cell::sync::Lazy::new(Default::default);

fn open_files() -> MutexGuard<'static, OpenFiles> {
    OPEN_FILES.lock().unwrap_or_else(|p| p.into_inner())
}

impl PageCache {
    /// An empty cache for the file open on `fd`, known by its (device, inode) to the other
    /// caches of the same file, whose windows a write through this one drops (`file_written`).
    /// A descriptor that cannot be `fstat`ed gives a cache of its own (`new`).
    pub(crate) fn for_descriptor(fd: RawFd) -> Arc<PageCache> {
        let Ok(st) = crate::sys::fs::stat(fd) else { return PageCache::of_file(None) };
        let file = (st.st_dev, st.st_ino);
        let cache = PageCache::of_file(Some(file));
        open_files().add(file, &cache);
        cache
    }

    /// Drops every window of this file, in every cache of it in the process (all handles of the
    /// same device and inode): called before and after each write task, so that no device read
    /// copies bytes registered before the write (the identity check of `plan` sees most writes
    /// too, but not one that keeps the size within the time stamps' tick). Registrations still
    /// queued are discarded when they finish (the generation moved on).
    pub(crate) fn file_written(&self) {
        let caches: Vec<Arc<PageCache>> = match self.file {
            Some(file) => open_files().get(&file).map(|c| c.iter().filter_map(std::sync::Weak::upgrade).collect()).unwrap_or_default(),
            None => Vec::new(),
        };
        if caches.is_empty() {
            self.drop_windows(true);
        }
        for cache in caches {
            cache.drop_windows(true);
        }
    }

    /// Forgets this cache's windows, and its identity where the file was `written` (a change);
    /// the mappings are unregistered after the lock.
    fn drop_windows(&self, written: bool) {
        let stale = {
            let mut state = self.lock();
            if written {
                state.changes += 1;
                state.forget_windows(None)
            } else {
                let identity = state.identity;
                state.forget_windows(identity)
            }
        };
        release_windows(stale);
    }
}

/// Drops every registered window of the file with this (device, inode), in every cache of it
/// (`None`: of every file), so that its pages are no longer pinned and the kernel may evict them
/// (`api::page_cache_tools`' drops).
pub(crate) fn drop_windows_of(file: Option<(u64, u64)>) {
    let caches: Vec<Arc<PageCache>> = {
        let files = open_files();
        let chosen: Vec<&Vec<std::sync::Weak<PageCache>>> = match file {
            Some(file) => files.get(&file).into_iter().collect(),
            None => files.caches.values().collect(),
        };
        chosen.into_iter().flatten().filter_map(std::sync::Weak::upgrade).collect()
    };
    for cache in caches {
        cache.drop_windows(false);
    }
}

/// Drops forgotten windows, after the lock: a window whose last holder this is unregisters
/// (on a thread of its own where streams may wait for this one: `Mapping`'s `Drop`). Forgotten,
/// the windows serve no read any more either way.
pub(super) fn release_windows(stale: HashMap<u64, WindowState>) {
    drop(stale);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_unchanged_for_a_while_are_quiet() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let at = |ago: Duration| {
            let t = now - ago;
            Identity { dev: 1, ino: 2, size: 3, mtime: (0, 0), ctime: (t.as_secs() as i64, t.subsec_nanos() as i64) }
        };
        assert!(at(Duration::from_secs(5)).is_quiet_for(Duration::from_secs(1)));
        assert!(!at(Duration::from_millis(10)).is_quiet_for(Duration::from_secs(1)));
        // A change time in the future (clock steps) is not quiet.
        let future = now + Duration::from_secs(60);
        let id = Identity { ctime: (future.as_secs() as i64, 0), ..at(Duration::ZERO) };
        assert!(!id.is_quiet_for(Duration::from_secs(1)));
    }
}
