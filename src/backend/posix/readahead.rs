//! Asking the kernel to read a file range ahead (`POSIX_FADV_WILLNEED`) in pieces it honours
//! whole. Linux reads ahead at most max(`read_ahead_kb`, `max_sectors_kb`) of the device per
//! advice and drops the rest of a longer range, so a 4 MiB task advised in one call is read ahead
//! completely on the H200 machine's disk (8192 KiB) but only 128 KiB to 1.25 MiB of it on a
//! default NVMe setup. The limit is looked up once per device in sysfs.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::Mutex;

/// The kernel's default `read_ahead_kb`: the piece used where the device's limit cannot be read
/// (file systems without a block device, such as NFS, tmpfs or overlayfs).
const FALLBACK_PIECE: usize = 128 << 10;

/// Limits found so far, by device number.
static PIECES: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// Advises `POSIX_FADV_WILLNEED` over `offset .. offset + len` of `fd`, one call per piece the
/// device's readahead limit allows, and never past the end of the file as it is now (regular
/// files and block devices; other files, such as pipes and character devices, have no
/// readahead and get no advice): the kernel reads nothing there, but every piece costs a system
/// call, and a task of a request far past the end would otherwise make billions of them. Advice
/// only: failures are ignored. Returns the number of advice calls made.
pub(super) fn advise_willneed(fd: RawFd, offset: u64, len: usize) -> usize {
    let Ok(st) = crate::sys::fs::stat(fd) else { return 0 };
    let Ok(Some(size)) = crate::sys::fs::readable_end_of(fd, &st) else { return 0 };
    let end = offset.saturating_add(len as u64).min(size);
    let piece = piece_for_device(st.st_dev) as u64;
    let mut at = offset;
    let mut calls = 0;
    while at < end {
        let n = (end - at).min(piece);
        // SAFETY: plain system call on the caller's descriptor; it reads no memory of ours.
        let _ = unsafe { libc::posix_fadvise(fd, at as libc::off_t, n as libc::off_t, libc::POSIX_FADV_WILLNEED) };
        at += n;
        calls += 1;
    }
    calls
}

/// The most one advice reads ahead on the device `dev`.
fn piece_for_device(dev: u64) -> usize {
    let mut pieces = PIECES.lock().unwrap_or_else(|p| p.into_inner());
    *pieces.get_or_insert_with(HashMap::new).entry(dev).or_insert_with(|| device_limit(dev).unwrap_or(FALLBACK_PIECE))
}

/// max(`read_ahead_kb`, `max_sectors_kb`) in bytes for the block device `dev` (its disk's queue
/// for a partition), or None where sysfs has no such device.
fn device_limit(dev: u64) -> Option<usize> {
    let base = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let queue = if std::path::Path::new(&base).join("partition").exists() { format!("{base}/../queue") } else { format!("{base}/queue") };
    let kib = |name: &str| std::fs::read_to_string(format!("{queue}/{name}")).ok()?.trim().parse::<usize>().ok();
    let limit = kib("read_ahead_kb").unwrap_or(0).max(kib("max_sectors_kb").unwrap_or(0));
    (limit > 0).then_some(limit << 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_piece_is_the_device_limit_or_the_fallback() {
        let f = tempfile::tempfile().unwrap();
        let dev = crate::sys::fs::stat(f.as_raw_fd()).unwrap().st_dev;
        let piece = piece_for_device(dev);
        assert!(piece >= 4096, "{piece}");
        // Cached: the same answer without sysfs.
        assert_eq!(piece_for_device(dev), piece);
        // A device that does not exist has no limit.
        assert_eq!(device_limit(libc::makedev(4095, 1_048_575)), None);
    }

    #[test]
    fn advice_covers_any_range_without_failing() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(1 << 20).unwrap();
        for (offset, len) in [(0u64, 0usize), (0, 1 << 20), (4095, 3 << 20), (u64::MAX - 10, 100)] {
            advise_willneed(f.as_raw_fd(), offset, len);
        }
        assert_eq!(advise_willneed(-1, 0, 4096), 0); // a bad descriptor is ignored
    }

    #[test]
    fn advice_stops_at_the_end_of_the_file() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(5000).unwrap();
        let fd = f.as_raw_fd();
        // The largest range a read can ask for: one piece (5000 bytes fit in any piece).
        assert_eq!(advise_willneed(fd, 0, isize::MAX as usize), 1);
        assert_eq!(advise_willneed(fd, 4999, 1 << 62), 1);
        assert_eq!(advise_willneed(fd, 5000, 1 << 62), 0);
        assert_eq!(advise_willneed(fd, 1 << 40, 1 << 20), 0);
        // A file with no size to go by (a character device) gets no advice.
        let null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(advise_willneed(null.as_raw_fd(), 0, 1 << 62), 0);
        // Up to the end, in pieces.
        f.set_len(3 << 20).unwrap();
        let piece = piece_for_device(crate::sys::fs::stat(fd).unwrap().st_dev);
        assert_eq!(advise_willneed(fd, 0, usize::MAX), (3usize << 20).div_ceil(piece));
    }
}
