//! NUMA placement without policy: which node a PCI device sits on (sysfs
//! `/sys/bus/pci/devices/<bus id>/numa_node`) and a preference for that node on a range of
//! fresh anonymous memory (`mbind(MPOL_PREFERRED)`, the raw system call: glibc has no wrapper,
//! libnuma is not a dependency). The pinned pool places its bounce buffers with these.

use std::io;
use std::path::Path;

/// What the machine says about the NUMA node of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeLookup {
    /// The device's memory accesses are local to this node.
    Node(u32),
    /// The machine does not say: why, in words (`numa_node` is -1, the file is missing, the bus
    /// id is malformed, ...). Nothing is placed then.
    Unknown(String),
}

/// The sysfs name of the PCI function a bus id names: `domain:bus:device.function` in lower-case
/// hex with 4, 2 and 2 digits (`0000:3b:00.0`), from the forms CUDA and nvidia-smi print
/// (`0000:3B:00.0`, `00000000:3B:00.0`). `None` for anything else.
pub(crate) fn pci_sysfs_name(bus_id: &str) -> Option<String> {
    let hex = |s: &str, max: usize| (!s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| u32::from_str_radix(s, 16).ok()).flatten();
    let (domain, rest) = bus_id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let (domain, bus, device, function) = (hex(domain, 8)?, hex(bus, 2)?, hex(device, 2)?, hex(function, 1)?);
    (domain <= 0xffff && device < 32 && function < 8).then(|| format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// The NUMA node of the PCI device `bus_id` as `sysfs` (normally `/sys`) reports it in
/// `bus/pci/devices/<name>/numa_node`.
pub(crate) fn node_of_pci_device(sysfs: &Path, bus_id: &str) -> NodeLookup {
    let Some(name) = pci_sysfs_name(bus_id) else {
        return NodeLookup::Unknown(format!("PCI bus id {bus_id:?} is not of the form domain:bus:device.function"));
    };
    let path = sysfs.join("bus/pci/devices").join(&name).join("numa_node");
    match std::fs::read_to_string(&path) {
        Err(e) => NodeLookup::Unknown(format!("{} cannot be read: {e}", path.display())),
        Ok(text) => match text.trim().parse::<i64>() {
            Ok(node @ 0..=0xffff) => NodeLookup::Node(node as u32),
            Ok(-1) => NodeLookup::Unknown(format!("{} says -1 (the machine does not tell)", path.display())),
            _ => NodeLookup::Unknown(format!("{} holds {:?}, not a node number", path.display(), text.trim())),
        },
    }
}

/// The node mask of one node for the memory-policy calls: whole `u64` words, and the `maxnode`
/// argument that makes the kernel read all of them (it reads `maxnode - 1` bits).
fn mask_of(node: u32) -> (Vec<u64>, u64) {
    let mut mask = vec![0u64; node as usize / 64 + 1];
    mask[node as usize / 64] |= 1 << (node % 64);
    let bits = mask.len() as u64 * 64;
    (mask, bits + 1)
}

/// Asks the kernel to take the pages of `ptr .. ptr + len` from `node` when they are first
/// touched, falling back to other nodes when it has no free memory (`MPOL_PREFERRED`, no move of
/// pages already there).
///
/// Errors: the errno of `mbind` (`EINVAL` for a node that does not exist, `ENOSYS` on a kernel
/// without NUMA, `EPERM` under a seccomp filter that refuses it).
///
/// # Safety
/// `ptr .. ptr + len` is a page-aligned mapping of the caller's, not shared with code that relies
/// on its memory policy.
pub(crate) unsafe fn prefer_node(ptr: *mut u8, len: usize, node: u32) -> io::Result<()> {
    let (mask, maxnode) = mask_of(node);
    // SAFETY: mbind reads `mask` (maxnode - 1 bits, all inside it) and changes only the policy of
    // the caller's range.
    let rc = unsafe { libc::syscall(libc::SYS_mbind, ptr, len, libc::MPOL_PREFERRED, mask.as_ptr(), maxnode, 0u32) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The node that holds the page at address `addr` (touched, so that it exists), from
/// `get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`; the address is only looked up, never read.
///
/// Errors: the errno of `get_mempolicy` (`EFAULT` for an address nothing is mapped at).
pub fn node_of_page(addr: usize) -> io::Result<u32> {
    const MPOL_F_NODE: u64 = 1;
    const MPOL_F_ADDR: u64 = 2;
    let mut node: libc::c_int = -1;
    // SAFETY: writes one int; the address is only looked up.
    let rc = unsafe {
        libc::syscall(libc::SYS_get_mempolicy, &mut node as *mut libc::c_int, std::ptr::null_mut::<u64>(), 0u64, addr, MPOL_F_NODE | MPOL_F_ADDR)
    };
    if rc == 0 { Ok(node as u32) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_in_every_printed_form_name_the_sysfs_entry() {
        assert_eq!(pci_sysfs_name("0000:3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(pci_sysfs_name("00000000:3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(pci_sysfs_name(" 0001:c1:1f.7\n").as_deref(), Some("0001:c1:1f.7"));
        for bad in ["", "3B:00.0", "0000:3B:00", "0000:3G:00.0", "0000:3B:20.0", "0000:3B:00.8", "100000:3B:00.0", "0000:3B:00.0.1", "-000:3B:00.0"] {
            assert_eq!(pci_sysfs_name(bad), None, "{bad:?}");
        }
    }

    fn sysfs_with(entries: &[(&str, Option<&str>)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (name, node) in entries {
            let dir = root.path().join("bus/pci/devices").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            if let Some(node) = node {
                std::fs::write(dir.join("numa_node"), node).unwrap();
            }
        }
        root
    }

    #[test]
    fn the_node_comes_from_sysfs_and_minus_one_or_missing_is_unknown() {
        let root = sysfs_with(&[("0000:3b:00.0", Some("1\n")), ("0000:3c:00.0", Some("-1\n")), ("0000:3d:00.0", None), ("0000:3e:00.0", Some("x\n"))]);
        let sysfs = root.path();
        assert_eq!(node_of_pci_device(sysfs, "0000:3B:00.0"), NodeLookup::Node(1));
        assert_eq!(node_of_pci_device(sysfs, "00000000:3B:00.0"), NodeLookup::Node(1));
        let unknown = |bus: &str, needle: &str| match node_of_pci_device(sysfs, bus) {
            NodeLookup::Unknown(why) => assert!(why.contains(needle), "{bus}: {why}"),
            other => panic!("{bus}: {other:?}"),
        };
        unknown("0000:3C:00.0", "says -1");
        unknown("0000:3D:00.0", "cannot be read");
        unknown("0000:3E:00.0", "not a node number");
        unknown("0000:3F:00.0", "cannot be read");
        unknown("garbage", "not of the form");
    }

    #[test]
    fn masks_cover_the_node_and_tell_the_kernel_every_bit() {
        assert_eq!(mask_of(0), (vec![1], 65));
        assert_eq!(mask_of(63), (vec![1 << 63], 65));
        assert_eq!(mask_of(64), (vec![0, 1], 129));
    }

    #[test]
    fn memory_preferring_node_zero_is_taken_from_node_zero() {
        // Node 0 exists on every Linux machine with NUMA support (one node on most).
        let len = 4 << 20;
        // SAFETY: a fresh private anonymous mapping.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(ptr, libc::MAP_FAILED);
        let ptr = ptr.cast::<u8>();
        // SAFETY: the mapping is ours and page-aligned.
        unsafe { prefer_node(ptr, len, 0) }.expect("mbind(MPOL_PREFERRED, node 0)");
        // SAFETY: the mapping is len bytes, writable.
        unsafe { std::ptr::write_bytes(ptr, 1, len) };
        for at in [0, len / 2, len - 1] {
            assert_eq!(node_of_page(ptr as usize + at).unwrap(), 0, "page at {at}");
        }
        // A node that cannot exist is refused, and the mapping stays usable.
        // SAFETY: as above.
        let err = unsafe { prefer_node(ptr, len, 60_000) }.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        // SAFETY: mapped above with this length.
        unsafe { libc::munmap(ptr.cast(), len) };
    }
}
