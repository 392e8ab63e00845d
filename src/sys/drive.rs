//! Which physical drive holds a file, for the pools per drive (KvikIO's
//! `KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE`): the block device of the file's file system (`st_dev`),
//! looked up in sysfs (`/sys/dev/block/MAJOR:MINOR`) and taken up to the whole drive, a partition
//! to its disk and an NVMe namespace to its controller, so that the files of one drive share a
//! pool and a slow drive does not hold the tasks of another. A file whose file system has no
//! block device (tmpfs, network and FUSE file systems, overlayfs) is named by the kind of its
//! file system instead. Bindings only: the pools are `io::thread_pool`'s.

use super::fs::{file_system_magic, magic};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// Where a file's bytes are, as the pools tell files apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Drive {
    /// A block device, by its kernel name (`nvme0`, `sda`, `vda`, `dm-0`).
    Block(String),
    /// No block device: the kind of file system (`memory` for tmpfs and ramfs, `network` for
    /// NFS, SMB, Lustre and GPFS, `fuse`, `overlay`, or `other`), with the reason in words when
    /// the lookup itself failed.
    NoBlockDevice(&'static str),
}

impl Drive {
    /// The name reports give the drive's pool (`drive nvme0`, `no block device: memory`).
    pub(crate) fn describe(&self) -> String {
        match self {
            Drive::Block(name) => format!("drive {name}"),
            Drive::NoBlockDevice(kind) => format!("no block device: {kind}"),
        }
    }
}

/// The drive that holds the open file `fd`.
pub(crate) fn drive_of(fd: RawFd) -> Drive {
    let Ok(st) = super::fs::stat(fd) else { return Drive::NoBlockDevice("other") };
    // A block device node is its own drive; any other file lives on its file system's device.
    let dev = if st.st_mode & libc::S_IFMT == libc::S_IFBLK { st.st_rdev } else { st.st_dev };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major != 0
        && let Some(name) = whole_drive(Path::new(&format!("/sys/dev/block/{major}:{minor}")))
    {
        return Drive::Block(name);
    }
    Drive::NoBlockDevice(match file_system_magic(fd) {
        Some(magic::TMPFS | magic::RAMFS) => "memory",
        Some(magic::NFS | magic::CIFS | magic::SMB2 | magic::LUSTRE | magic::GPFS) => "network",
        Some(magic::FUSE) => "fuse",
        Some(magic::OVERLAYFS) => "overlay",
        _ => "other",
    })
}

/// The whole drive of the block device whose sysfs link is `link`: the device itself, its disk
/// for a partition (a directory with a `partition` file), and the controller for an NVMe
/// namespace (`nvme0n1` under `nvme0`).
fn whole_drive(link: &Path) -> Option<String> {
    let mut dir: PathBuf = std::fs::canonicalize(link).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let name = dir.file_name()?.to_str()?.to_string();
    let parent = dir.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    Some(match nvme_controller(&name) {
        Some(controller) if parent == controller || parent.starts_with("nvme") => controller.to_string(),
        _ => name,
    })
}

/// `nvme0` for a namespace named `nvme0n1` (also `nvme0c0n1`, a multipath path), else `None`.
fn nvme_controller(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("nvme")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    (digits > 0 && rest[digits..].starts_with(['n', 'c'])).then(|| &name[..4 + digits])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn nvme_namespaces_belong_to_their_controller() {
        assert_eq!(nvme_controller("nvme0n1"), Some("nvme0"));
        assert_eq!(nvme_controller("nvme12n3"), Some("nvme12"));
        assert_eq!(nvme_controller("nvme1c1n1"), Some("nvme1"));
        assert_eq!(nvme_controller("nvme0"), None);
        assert_eq!(nvme_controller("sda"), None);
        assert_eq!(nvme_controller("nvmen1"), None);
    }

    #[test]
    fn a_file_in_memory_has_no_block_device_and_a_disk_file_has_one_when_the_machine_says() {
        if let Ok(f) = std::fs::File::open("/dev/shm")
            && file_system_magic(f.as_raw_fd()) == Some(magic::TMPFS)
        {
            assert_eq!(drive_of(f.as_raw_fd()), Drive::NoBlockDevice("memory"));
        }
        let f = tempfile::NamedTempFile::new_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let st = crate::sys::fs::stat(f.as_file().as_raw_fd()).unwrap();
        let sysfs = format!("/sys/dev/block/{}:{}", libc::major(st.st_dev), libc::minor(st.st_dev));
        match drive_of(f.as_file().as_raw_fd()) {
            Drive::Block(name) => {
                assert!(Path::new(&sysfs).exists(), "{sysfs}");
                assert!(Path::new("/sys/block").join(&name).exists() || name.starts_with("nvme"), "{name} is a whole drive");
            }
            Drive::NoBlockDevice(kind) => assert!(libc::major(st.st_dev) == 0 || !Path::new(&sysfs).exists(), "{kind}"),
        }
        // A closed descriptor is "other", not a panic.
        assert_eq!(drive_of(-1), Drive::NoBlockDevice("other"));
    }
}
