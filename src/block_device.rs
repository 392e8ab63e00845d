//! What the kernel says about the block device under an open file (sysfs), looked up once per
//! device: how far one readahead advice reaches, and whether the device is rotational. A
//! partition answers with its disk's queue. Files without a block device (NFS, tmpfs, overlayfs)
//! get `None` and `false`.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::Mutex;

/// The facts about one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// max(`read_ahead_kb`, `max_sectors_kb`) in bytes: the most one `POSIX_FADV_WILLNEED` reads
    /// ahead (Linux drops the rest of a longer range).
    pub readahead_limit: Option<usize>,
    /// `queue/rotational`: the device prefers one sequential stream.
    pub rotational: bool,
}

/// Facts found so far, by device number.
static FACTS: Mutex<Option<HashMap<u64, Facts>>> = Mutex::new(None);

/// The facts for the device holding `fd`'s file (defaults when `fstat` fails).
pub fn of(fd: RawFd) -> Facts {
    let Ok(st) = crate::posix::stat(fd) else { return Facts::default() };
    let dev = st.st_dev;
    let mut facts = FACTS.lock().unwrap_or_else(|p| p.into_inner());
    *facts.get_or_insert_with(HashMap::new).entry(dev).or_insert_with(|| read_facts(dev))
}

/// Reads the queue attributes of the block device `dev` (all unknown where sysfs has none).
fn read_facts(dev: u64) -> Facts {
    let base = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let queue = if std::path::Path::new(&base).join("partition").exists() { format!("{base}/../queue") } else { format!("{base}/queue") };
    let number = |name: &str| std::fs::read_to_string(format!("{queue}/{name}")).ok()?.trim().parse::<usize>().ok();
    let limit_kib = number("read_ahead_kb").unwrap_or(0).max(number("max_sectors_kb").unwrap_or(0));
    Facts { readahead_limit: (limit_kib > 0).then_some(limit_kib << 10), rotational: number("rotational") == Some(1) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn facts_agree_with_sysfs_and_unknown_devices_have_none() {
        let f = tempfile::tempfile().unwrap();
        let facts = of(f.as_raw_fd());
        assert_eq!(of(f.as_raw_fd()), facts, "cached: the same answer");
        if let Some(limit) = facts.readahead_limit {
            assert!(limit >= 4096, "{limit}");
        }
        assert_eq!(of(-1), Facts::default());
        assert_eq!(read_facts(libc::makedev(4095, 1_048_575)), Facts::default());
    }
}
