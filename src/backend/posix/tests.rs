//! The POSIX read with read-ahead at its lowest level (`read_full_at_ahead`): a range whose
//! start is cached and whose rest is not, read whole and flagged (moved here from
//! tests/posix_reads.rs, which tests reads through the handle).

use super::read_full_at_ahead;
use crate::test_support::{POISON, assert_misses_flagged, random_bytes, temp_file_in};

/// Guard bytes on either side of each destination.
const GUARD: usize = 64;

#[test]
fn a_read_that_finds_only_a_prefix_cached_reads_the_rest_ahead() {
    // The first 64 KiB cached, the rest evicted: the non-blocking read stops where the cache
    // ends, the rest is advised and read. Unaligned ranges, guard bytes around them; the advised
    // range may be longer than the read (a bounce task's first piece advises the whole task).
    let data = random_bytes(8 << 20, 22);
    let tmp = temp_file_in(None, &data);
    let f = std::fs::File::open(tmp.path()).unwrap();
    use std::os::fd::AsRawFd;
    for &(offset, len, ahead) in &[(1000u64, (8 << 20) - 1017, (8 << 20) - 1017), (0, 1 << 20, 6 << 20), (5 << 20, 4097, 4097)] {
        assert_misses_flagged(tmp.path(), 64 << 10, offset, len, &format!("offset {offset}"), || {
            let mut buf = vec![POISON; len + 2 * GUARD];
            let got = unsafe { read_full_at_ahead(f.as_raw_fd(), buf[GUARD..].as_mut_ptr(), len, offset, ahead) }.unwrap();
            let at = offset as usize;
            assert_eq!(got.bytes, len);
            assert!(buf[GUARD..GUARD + len] == data[at..at + len], "bytes differ at offset {offset}");
            assert!(buf[..GUARD].iter().chain(&buf[GUARD + len..]).all(|&b| b == POISON), "guard bytes overwritten");
            got.not_cached
        });
    }
}
