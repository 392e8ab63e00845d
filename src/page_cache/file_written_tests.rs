//! A write drops the registered windows of every cache of the written file, and only of that
//! file (moved here from tests/posix_writes.rs, which tests writes through the handle).

use super::PageCache;
use crate::test_support::{random_bytes, temp_file_in};
use std::os::fd::AsRawFd;

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
