//! The mapping handle (`MappedFile`, KvikIO's `MmapHandle`) into host memory: every byte of
//! random contents at mapped ranges and reads around page and task boundaries and the ends of the
//! range, `read` and `pread` with many task sizes and thread counts, poisoned guard bytes around
//! every destination that must stay untouched; the range errors, an empty file, a closed handle,
//! a file truncated under the mapping (an error, and the process goes on) and a destination with
//! a page that cannot be written.

mod common;

use common::{POISON, random_bytes};
use gdsroute::{Error, MappedFile, Status, settings};
use std::sync::Mutex;

/// Settings are process-wide; tests that change them run one at a time.
static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

const GUARD: usize = 64;
const PAGE: usize = 4096;

fn bytes_of(path: &std::path::Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}

/// Reads `size` bytes at `offset` through `map` (`pread` with `task_size` where given, else
/// `read`) into a guarded buffer and checks every byte against `data`, the whole file.
fn check_read(map: &MappedFile, data: &[u8], size: usize, offset: u64, task_size: Option<Option<u64>>) {
    let mut buf = vec![POISON; size + 2 * GUARD];
    let dst = buf[GUARD..GUARD + size].as_mut_ptr();
    let what = format!("size {size} offset {offset} task size {task_size:?} in [{}, +{})", map.map_offset(), map.map_size());
    let n = match task_size {
        None => unsafe { map.read_raw(dst, size, offset) }.expect(&what),
        Some(task_size) => unsafe { map.pread_raw(dst, size, offset, task_size) }.expect(&what).wait().expect(&what),
    };
    assert_eq!(n, size, "{what}");
    let start = offset as usize;
    assert!(buf[GUARD..GUARD + size] == data[start..start + size], "bytes differ: {what}");
    assert!(buf[..GUARD].iter().all(|&b| b == POISON), "front guard overwritten: {what}");
    assert!(buf[GUARD + size..].iter().all(|&b| b == POISON), "back guard overwritten: {what}");
}

/// Reads inside the mapped range: at its start, unaligned, at its end, and the whole of it.
fn reads_of(map: &MappedFile) -> Vec<(usize, u64)> {
    let (start, len) = (map.map_offset(), map.map_size());
    let end = start + len as u64;
    let mut reads = vec![(0, start), (0, end), (len, start), (1, start), (1, end - 1)];
    for size in [4095usize, 4096, 4097, 65537, (1 << 20) + 3] {
        if size <= len {
            reads.extend([(size, start), (size, end - size as u64)]);
        }
        if size + 4099 <= len {
            reads.push((size, start + 4099));
        }
    }
    reads
}

#[test]
fn every_byte_of_every_range_read_and_pread_with_many_task_sizes_and_threads() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let data = random_bytes((3 << 20) + 12345, 26);
    let tmp = common::temp_file_in(None, &data);
    let len = data.len() as u64;
    // (map offset, map size; 0 to the end)
    let ranges = [(0u64, 0usize), (1, 0), (4095, 100_000), (3 * PAGE as u64 + 7, 2 << 20), (len - 1, 0), (len - 5000, 5000), (0, 1)];
    for (offset, size) in ranges {
        let map = MappedFile::open(bytes_of(tmp.path()), offset, size).unwrap();
        assert_eq!(map.map_offset(), offset);
        assert_eq!(map.map_size(), if size == 0 { (len - offset) as usize } else { size });
        assert_eq!(map.file_size().unwrap(), len);
        for (size, offset) in reads_of(&map) {
            check_read(&map, &data, size, offset, None);
            check_read(&map, &data, size, offset, Some(None));
        }
    }
    let map = MappedFile::open(bytes_of(tmp.path()), 0, 0).unwrap();
    for threads in [1usize, 2, 4, 8] {
        settings::set_num_threads(threads).unwrap();
        for task in [1u64, 4096, 4097, 65536, 1 << 20, 64 << 20] {
            for (size, offset) in [(0, 0), (1, 5), (4097, 4095), (300_001, 12_345), ((3 << 20) + 12345, 0), ((2 << 20) + 1, len - (2 << 20) - 1)] {
                if task == 1 && size > 5000 {
                    continue; // a task per byte: the 1-byte tasks are tested on small reads
                }
                check_read(&map, &data, size, offset, Some(Some(task)));
            }
        }
    }
    settings::set_num_threads(settings::default_num_threads()).unwrap();
    // No route of the counters serves the handle (and no test here opens a `File`).
    let c = gdsroute::counters::process_counters();
    assert_eq!((c.calls, c.tasks, c.bytes_read), (0, 0, 0));
}

#[test]
fn a_range_outside_the_file_or_the_mapping_is_an_error_naming_it() {
    let data = random_bytes(10_000, 3);
    let tmp = common::temp_file_in(None, &data);
    let path = bytes_of(tmp.path());
    for (offset, size) in [(10_000u64, 0usize), (10_000, 1), (9_999, 2), (0, 10_001), (1 << 40, 0)] {
        let err = MappedFile::open(path, offset, size).err().unwrap();
        assert_eq!(err.status(), Status::InvalidArgument, "{offset} {size}: {err}");
        assert!(err.to_string().contains(&offset.to_string()) && err.to_string().contains("10000 bytes"), "{err}");
    }
    assert!(matches!(MappedFile::open(path, u64::MAX, 1), Err(Error::Overflow(_))));
    assert!(matches!(MappedFile::open(path, 0, usize::MAX), Err(Error::Overflow(_))));
    assert!(matches!(MappedFile::open(b"", 0, 0), Err(Error::InvalidPath(_))));
    assert!(matches!(MappedFile::open(b"a\0b", 0, 0), Err(Error::InvalidPath(_))));
    let missing = MappedFile::open(b"/nonexistent/gdsroute-mapping", 0, 0).err().unwrap();
    assert_eq!((missing.status(), missing.os_error()), (Status::OpenFailed, Some(libc::ENOENT)));
    let dir = MappedFile::open(b"/", 0, 0).err().unwrap();
    assert!(matches!(dir.status(), Status::IoError | Status::InvalidArgument), "{dir}");

    let map = MappedFile::open(path, 1000, 5000).unwrap();
    let mut buf = vec![POISON; 20_000];
    for (size, offset) in [(1usize, 999u64), (2, 5999), (5001, 1000), (1, 6000), (0, 999), (0, 6001), (10, 1 << 50)] {
        let read = unsafe { map.read_raw(buf.as_mut_ptr(), size, offset) }.err().unwrap();
        let pread = unsafe { map.pread_raw(buf.as_mut_ptr(), size, offset, None) }.err().unwrap();
        for err in [read, pread] {
            assert_eq!(err.status(), Status::InvalidArgument, "{size} {offset}: {err}");
            let text = err.to_string();
            assert!(text.contains(&format!("[{offset}, {})", offset + size as u64)) && text.contains("[1000, 6000)"), "{text}");
        }
    }
    assert!(matches!(unsafe { map.read_raw(buf.as_mut_ptr(), usize::MAX, 1000) }, Err(Error::Overflow(_))));
    assert!(matches!(unsafe { map.pread_raw(buf.as_mut_ptr(), 1, u64::MAX, None) }, Err(Error::Overflow(_))));
    assert!(matches!(unsafe { map.pread_raw(buf.as_mut_ptr(), 1, 1000, Some(0)) }, Err(Error::InvalidArgument(_))));
    assert!(buf.iter().all(|&b| b == POISON), "a refused read wrote");
    // Zero bytes anywhere in the range, its end included, are fine.
    for offset in [1000u64, 3000, 6000] {
        assert_eq!(unsafe { map.read_raw(buf.as_mut_ptr(), 0, offset) }.unwrap(), 0);
        assert_eq!(unsafe { map.pread_raw(buf.as_mut_ptr(), 0, offset, None) }.unwrap().wait().unwrap(), 0);
    }
}

#[test]
fn an_empty_file_maps_nothing_and_reads_zero_bytes() {
    let tmp = common::temp_file_in(None, &[]);
    let map = MappedFile::open(bytes_of(tmp.path()), 0, 0).unwrap();
    assert_eq!((map.map_offset(), map.map_size(), map.file_size().unwrap()), (0, 0, 0));
    let mut byte = [POISON];
    assert_eq!(unsafe { map.read_raw(byte.as_mut_ptr(), 0, 0) }.unwrap(), 0);
    assert_eq!(unsafe { map.pread_raw(byte.as_mut_ptr(), 0, 0, None) }.unwrap().wait().unwrap(), 0);
    assert_eq!(unsafe { map.read_raw(byte.as_mut_ptr(), 1, 0) }.unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(byte, [POISON]);
    for (offset, size) in [(0u64, 1usize), (1, 0)] {
        assert_eq!(MappedFile::open(bytes_of(tmp.path()), offset, size).err().unwrap().status(), Status::InvalidArgument);
    }
}

#[test]
fn a_closed_handle_refuses_reads_and_its_reads_in_flight_finish() {
    let data = random_bytes(8 << 20, 5);
    let tmp = common::temp_file_in(None, &data);
    let map = MappedFile::open(bytes_of(tmp.path()), 0, 0).unwrap();
    let mut buf = vec![POISON; data.len()];
    let op = unsafe { map.pread_raw(buf.as_mut_ptr(), data.len(), 0, Some(64 << 10)) }.unwrap();
    map.close();
    assert_eq!(op.wait().unwrap(), data.len());
    assert!(buf == data);
    assert!(map.is_closed());
    map.close();
    assert!(map.is_closed());
    assert_eq!((map.map_offset(), map.map_size()), (0, data.len()));
    assert_eq!(unsafe { map.read_raw(buf.as_mut_ptr(), 1, 0) }.unwrap_err().status(), Status::ClosedHandle);
    assert_eq!(unsafe { map.pread_raw(buf.as_mut_ptr(), 1, 0, None) }.err().unwrap().status(), Status::ClosedHandle);
    assert_eq!(map.file_size().unwrap_err().status(), Status::ClosedHandle);
}

/// The file truncated under the mapping: reads of the lost pages fail with `MappedFileShrank`
/// (I/O error, `EFAULT`, the new size and the first lost offset in the message), the bytes before
/// them are delivered, nothing after them is written, reads of what is left still work, and the
/// process goes on (a load from the mapping would raise `SIGBUS`).
#[test]
fn a_file_truncated_under_the_mapping_is_an_error_and_the_process_lives() {
    let data = random_bytes(1 << 20, 9);
    let tmp = common::temp_file_in(None, &data);
    let map = MappedFile::open(bytes_of(tmp.path()), 100, 0).unwrap();
    let new_len = 300_000usize;
    tmp.as_file().set_len(new_len as u64).unwrap();
    assert_eq!(map.file_size().unwrap(), new_len as u64);
    // The first byte lost is the file's new end: the page that holds it stays mapped (zeros past
    // the end), but no read delivers those zeros as the file's bytes.
    let lost = new_len;
    let size = data.len() - 100;
    for task_size in [None, Some(Some(1 << 20)), Some(Some(64 << 10)), Some(Some(4096))] {
        let mut buf = vec![POISON; size + 2 * GUARD];
        let dst = buf[GUARD..].as_mut_ptr();
        let err = match task_size {
            None => unsafe { map.read_raw(dst, size, 100) }.unwrap_err(),
            Some(t) => unsafe { map.pread_raw(dst, size, 100, t) }.unwrap().wait().unwrap_err(),
        };
        assert!(matches!(err, Error::MappedFileShrank { offset, size: 300_000, .. } if offset == lost as u64), "{err:?}");
        assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EFAULT)));
        let text = err.to_string();
        assert!(text.contains("shrank to 300000 bytes under its mapping") && text.contains(&lost.to_string()), "{text}");
        let got = &buf[GUARD..GUARD + size];
        assert!(got[..new_len - 100] == data[100..new_len], "bytes before the end ({task_size:?})");
        assert!(buf[..GUARD].iter().all(|&b| b == POISON));
        if task_size.is_none() {
            // One copy: nothing at or after the file's end.
            assert!(buf[GUARD + lost - 100..].iter().all(|&b| b == POISON), "written past the file's end");
        }
    }
    let mut buf = vec![POISON; 5000];
    assert_eq!(unsafe { map.read_raw(buf.as_mut_ptr(), 5000, new_len as u64 - 5000) }.unwrap(), 5000);
    assert!(buf[..] == data[new_len - 5000..new_len]);
    // A read inside the page that holds the new end, past it: an error too, nothing written
    // past the end (the kernel copies that page's zeros without a fault).
    let mut buf = vec![POISON; 6000];
    let err = unsafe { map.read_raw(buf.as_mut_ptr(), 6000, new_len as u64 - 1000) }.unwrap_err();
    assert!(matches!(err, Error::MappedFileShrank { offset, size: 300_000, .. } if offset == new_len as u64), "{err:?}");
    assert!(buf[..1000] == data[new_len - 1000..new_len] && buf[1000..].iter().all(|&b| b == POISON));
    let within_page = new_len.div_ceil(PAGE) * PAGE - new_len;
    let err = unsafe { map.read_raw(buf.as_mut_ptr(), within_page.min(100), new_len as u64 + 1) }.unwrap_err();
    assert!(matches!(err, Error::MappedFileShrank { offset, .. } if offset == new_len as u64 + 1), "{err:?}");
}

/// Anonymous memory of `pages` pages, page `bad` read-only.
struct BadBuffer {
    base: *mut u8,
    pages: usize,
}

impl BadBuffer {
    fn new(pages: usize, bad: usize) -> BadBuffer {
        let base = unsafe { libc::mmap(std::ptr::null_mut(), pages * PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        unsafe { std::ptr::write_bytes(base, POISON, pages * PAGE) };
        assert_eq!(unsafe { libc::mprotect(base.add(bad * PAGE).cast(), PAGE, libc::PROT_READ) }, 0);
        BadBuffer { base, pages }
    }

    fn bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.base, self.pages * PAGE) }
    }
}

impl Drop for BadBuffer {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base.cast(), self.pages * PAGE) };
    }
}

/// A destination page that cannot be written: an `EFAULT` I/O error at the file offset that
/// would have gone there, saying it was the buffer, and no crash; every byte before it copied.
#[test]
fn a_destination_page_that_cannot_be_written_is_an_efault_error() {
    let data = random_bytes(64 << 10, 11);
    let tmp = common::temp_file_in(None, &data);
    let map = MappedFile::open(bytes_of(tmp.path()), 0, 0).unwrap();
    for bad in [0usize, 3, 7] {
        let buf = BadBuffer::new(8, bad);
        let (start, offset) = (10usize, 1234u64);
        let size = 8 * PAGE - start - 1;
        for pread in [false, true] {
            let dst = unsafe { buf.base.add(start) };
            let err = if pread {
                unsafe { map.pread_raw(dst, size, offset, Some(4096)) }.unwrap().wait().unwrap_err()
            } else {
                unsafe { map.read_raw(dst, size, offset) }.unwrap_err()
            };
            let fault = (bad * PAGE).saturating_sub(start);
            let what = format!("bad page {bad}, pread {pread}: {err}");
            assert_eq!((err.status(), err.os_error()), (Status::IoError, Some(libc::EFAULT)), "{what}");
            assert!(err.to_string().contains("into the buffer"), "{what}");
            if !pread {
                assert!(err.to_string().contains(&format!("offset {}", offset + fault as u64)), "{what}");
                let got = buf.bytes();
                assert!(got[start..start + fault] == data[offset as usize..offset as usize + fault], "{what}");
            }
        }
    }
}

/// A block device's size is its ioctl's, not its `st_size` (0): the mapping handle maps all of it
/// and reads its bytes, and a file handle's size is the same. Needs a loop device (root and
/// `losetup`); skipped, saying so, where none can be attached.
#[test]
fn a_block_device_maps_and_reports_its_whole_size() {
    let data = random_bytes(1 << 20, 12);
    let tmp = common::temp_file_in(None, &data);
    let attach = std::process::Command::new("losetup").args(["--find", "--show"]).arg(tmp.path()).output();
    let device = match attach {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap().trim().to_string(),
        other => {
            eprintln!("no loop device could be attached ({other:?}): skipped");
            return;
        }
    };
    let result = std::panic::catch_unwind(|| {
        let map = MappedFile::open(device.as_bytes(), 0, 0).unwrap();
        assert_eq!((map.map_size(), map.file_size().unwrap()), (data.len(), data.len() as u64));
        check_read(&map, &data, data.len() - 4096 - 5, 4096 + 5, None);
        check_read(&map, &data, 1 << 19, 1 << 18, Some(Some(64 << 10)));
        let file = gdsroute::File::open(device.as_bytes(), "r", 0, None).unwrap();
        assert_eq!(file.size().unwrap(), data.len() as u64);
    });
    let _ = std::process::Command::new("losetup").args(["--detach", &device]).status();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
