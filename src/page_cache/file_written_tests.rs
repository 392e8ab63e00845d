//! A write drops the registered windows of every cache of the written file, and only of that
//! file (moved here from tests/posix_writes.rs, which tests writes through the handle); so does a
//! truncation through a handle (`OpenFile::set_len`), whatever the size it leaves.

use super::budget::Reservation;
use super::{Mapping, PageCache, WindowState};
use crate::io::open_file::{OpenFile, OpenFlags, Opened};
use crate::sys::cuda::RegisteredMapping;
use crate::test_support::{random_bytes, temp_file_in};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

const MIB: usize = 1 << 20;

#[test]
fn a_write_drops_the_registered_windows_of_every_handle_of_the_file() {
    // Host reads use no windows; device reads do. The page cache's own API shows the effect: two
    // caches of one file (as two handles have) each track windows after reads, and a write
    // through one drops both.
    let tmp = temp_file_in(None, &random_bytes(2 * MIB, 5));
    let a = std::fs::File::open(tmp.path()).unwrap();
    let b = std::fs::File::open(tmp.path()).unwrap();
    let other = temp_file_in(None, &random_bytes(MIB, 6));
    let c = std::fs::File::open(other.path()).unwrap();
    let (cache_a, cache_b, cache_c) =
        (PageCache::for_descriptor(a.as_raw_fd()), PageCache::for_descriptor(b.as_raw_fd()), PageCache::for_descriptor(c.as_raw_fd()));
    for (cache, fd) in [(&cache_a, a.as_raw_fd()), (&cache_b, b.as_raw_fd()), (&cache_c, c.as_raw_fd())] {
        drop(cache.plan(fd, 0, 4096, 0, 0));
        assert_eq!(cache.window_count(), 1);
    }
    cache_a.file_written();
    assert_eq!((cache_a.window_count(), cache_b.window_count()), (0, 0), "both handles of the written file");
    assert_eq!(cache_c.window_count(), 1, "another file keeps its windows");
}

/// Installs a registered window `index` of `len` bytes into `cache` (anonymous memory standing in
/// for the pinned file pages) and returns it: the test holds it, so that the cache letting go
/// never runs its `Drop` (which would unregister with CUDA); `release` frees it.
fn fake_registered_window(cache: &PageCache, index: u64, len: usize) -> Arc<Mapping> {
    let mapping = Arc::new(Mapping::new(RegisteredMapping::unregistered_for_tests(len), index * super::WINDOW, Reservation::none()));
    cache.lock().windows.insert(index, WindowState::Registered(Arc::clone(&mapping)));
    mapping
}

/// Frees a window of `fake_registered_window` once nothing else holds it.
fn release(mapping: Arc<Mapping>) {
    Mapping::release_for_tests(mapping);
}

#[test]
fn a_truncation_drops_the_registered_windows_of_every_handle_of_the_file() {
    // The danger: a window pinned before a shrink keeps the old pages, detached from the file, so
    // a device read copying from it would see bytes the file no longer has; dropped at the call,
    // the windows no longer depend on the identity check seeing the change.
    let len = 3 * (1 << 20);
    let tmp = temp_file_in(None, &random_bytes(len, 7));
    let open = |flags| OpenFile::new(OwnedFd::from(tmp.reopen().unwrap()), "truncated".into(), Opened::Path(flags)).unwrap();
    let (writer, reader) = (open(OpenFlags::ReadWrite), open(OpenFlags::Read));
    for size in [len as u64 / 2, len as u64, 0] {
        for cache in [&writer.page_cache, &reader.page_cache] {
            drop(cache.plan(writer.fd.as_raw_fd(), 0, 4096, 0, 0)); // records the identity
            assert_eq!(cache.window_count(), 1);
        }
        let held = [fake_registered_window(&writer.page_cache, 0, len), fake_registered_window(&reader.page_cache, 0, len)];
        reader.page_cache.lock().windows.insert(1, WindowState::Pending);
        let generation = reader.page_cache.lock().generation;

        writer.set_len(size).unwrap();
        assert_eq!(crate::sys::fs::file_size(writer.fd.as_raw_fd()).unwrap(), size);
        assert_eq!((writer.page_cache.window_count(), reader.page_cache.window_count()), (0, 0), "to {size}: windows kept");
        assert!(!reader.page_cache.still_pending(1, generation), "to {size}: a registration queued before would still be installed");
        // The next task of either handle plans the file as it is now: no registered bytes.
        for cache in [&writer.page_cache, &reader.page_cache] {
            let segments = cache.plan(writer.fd.as_raw_fd(), 0, len, 0, 0);
            assert!(segments.iter().all(|s| matches!(s, super::Segment::Bounce { .. })), "to {size}");
            assert_eq!(segments.iter().map(super::Segment::len).sum::<usize>(), len);
        }
        held.into_iter().for_each(release);
    }
    // A handle that cannot write refuses before anything changes, its windows included.
    let held = fake_registered_window(&reader.page_cache, 0, len);
    let err = reader.set_len(1).unwrap_err();
    assert_eq!(err.os_error(), Some(libc::EBADF), "{err}");
    assert_eq!(reader.page_cache.window_count(), 1);
    assert_eq!(crate::sys::fs::file_size(reader.fd.as_raw_fd()).unwrap(), 0, "the size of the last truncation");
    reader.page_cache.lock().windows.clear();
    release(held);
}

#[test]
fn windows_planned_at_a_change_count_hold_until_the_file_is_written_or_changes() {
    // A stream-ordered read plans its registered runs at the call and copies them later: it asks
    // `unchanged_since` once the stream got there.
    let tmp = temp_file_in(None, &random_bytes(MIB, 8));
    let (a, b) = (std::fs::File::open(tmp.path()).unwrap(), std::fs::File::open(tmp.path()).unwrap());
    let (cache_a, cache_b) = (PageCache::for_descriptor(a.as_raw_fd()), PageCache::for_descriptor(b.as_raw_fd()));
    let changes = cache_a.plan_noting_changes(a.as_raw_fd(), 0, 4096, 0, 0).1.unwrap();
    assert!(cache_a.unchanged_since(a.as_raw_fd(), changes));
    assert!(!cache_a.unchanged_since(a.as_raw_fd(), changes + 1), "planned at another count");
    // Dropping the windows to unpin them (`drop_file_page_cache`) is no change of the file.
    super::drop_windows_of(cache_a.file);
    assert_eq!(cache_a.window_count(), 0);
    assert!(cache_a.unchanged_since(a.as_raw_fd(), changes), "windows dropped without a write");
    cache_b.file_written();
    assert!(!cache_a.unchanged_since(a.as_raw_fd(), changes), "a write through another handle of the file");
    let changes = cache_a.plan_noting_changes(a.as_raw_fd(), 0, 4096, 0, 0).1.unwrap();
    assert!(cache_a.unchanged_since(a.as_raw_fd(), changes));
    std::fs::OpenOptions::new().append(true).open(tmp.path()).and_then(|mut f| std::io::Write::write_all(&mut f, b"more")).unwrap();
    assert!(!cache_a.unchanged_since(a.as_raw_fd(), changes), "a change from outside (its size)");
    let after = cache_a.plan_noting_changes(a.as_raw_fd(), 0, 4096, 0, 0).1.unwrap();
    assert_eq!(after, changes + 1, "the next plan counts the change it found");
}

#[test]
fn a_queued_write_is_seen_through_every_handle_of_its_file_until_it_starts() {
    let tmp = temp_file_in(None, &random_bytes(MIB, 9));
    let other = temp_file_in(None, &random_bytes(MIB, 10));
    let (a, b, c) = (std::fs::File::open(tmp.path()).unwrap(), std::fs::File::open(tmp.path()).unwrap(), std::fs::File::open(other.path()).unwrap());
    let (cache_a, cache_b, cache_c) =
        (PageCache::for_descriptor(a.as_raw_fd()), PageCache::for_descriptor(b.as_raw_fd()), PageCache::for_descriptor(c.as_raw_fd()));
    assert!(!cache_b.queued_write_pending());
    let first = cache_a.write_queued();
    let second = cache_b.write_queued();
    assert!(cache_a.queued_write_pending() && cache_b.queued_write_pending(), "both handles of the file");
    assert!(!cache_c.queued_write_pending(), "not another file");
    drop(first);
    assert!(cache_b.queued_write_pending(), "one write is still queued");
    drop(second);
    assert!(!cache_a.queued_write_pending() && !cache_b.queued_write_pending());
    // A cache of no known file counts its own writes alone.
    let (lone, other_lone) = (PageCache::new(), PageCache::new());
    let queued = lone.write_queued();
    assert!(lone.queued_write_pending() && !other_lone.queued_write_pending());
    drop(queued);
    assert!(!lone.queued_write_pending());
}
