//! The POSIX backend's system calls: `pread` until the range is full or the file ends. `EINTR`
//! is retried and short reads are looped; reaching end of file is not an error (the caller gets
//! the bytes read), which is the rule on every route.

use std::io;
use std::os::fd::RawFd;

/// Reads `len` bytes at `offset` into `dst`, looping over short reads. Returns the bytes read,
/// fewer than `len` only at end of file.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes for the duration of the call.
pub unsafe fn read_full_at(fd: RawFd, dst: *mut u8, len: usize, offset: u64) -> io::Result<usize> {
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let want = (len - done).min(MAX_SYSCALL_BYTES);
        // SAFETY: dst + done .. dst + done + want lies inside the caller's range (done < len,
        // want <= len - done); callers validated that offset + len fits in off_t.
        let n = unsafe { libc::pread(fd, dst.add(done).cast(), want, pos as libc::off_t) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// Linux transfers at most 0x7ffff000 bytes per read call; asking for less keeps the loop honest
/// on other kernels too.
const MAX_SYSCALL_BYTES: usize = 0x7fff_f000;

/// The size of an open file, from `fstat`.
pub fn file_size(fd: RawFd) -> io::Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full `struct stat` on success; we read it only then.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: rc == 0, so the struct was filled.
    Ok(unsafe { st.assume_init() }.st_size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_whole_range_and_stops_at_eof() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let mut buf = vec![0xAAu8; 12_000];
        let n = unsafe { read_full_at(f.as_raw_fd(), buf.as_mut_ptr(), 12_000, 0) }.unwrap();
        assert_eq!(n, 10_000);
        assert_eq!(&buf[..n], &data[..]);
        assert!(buf[n..].iter().all(|&b| b == 0xAA));
        let n = unsafe { read_full_at(f.as_raw_fd(), buf.as_mut_ptr(), 100, 20_000) }.unwrap();
        assert_eq!(n, 0);
        assert_eq!(file_size(f.as_raw_fd()).unwrap(), 10_000);
    }

    #[test]
    fn bad_descriptor_is_an_error() {
        let mut buf = [0u8; 4];
        let err = unsafe { read_full_at(-1, buf.as_mut_ptr(), 4, 0) }.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }
}
