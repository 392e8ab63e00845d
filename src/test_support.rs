//! Test helpers with no tie to the library, shared by its unit tests and (through
//! tests/common) its integration tests: reproducible random file contents (never zeros),
//! temporary files holding them, page-cache eviction and `RWF_NOWAIT` checks, the fault shim and
//! child test processes. Only std, libc and tempfile, so that both can include this one file.
#![allow(dead_code)] // each test binary uses a subset
// `pub`: tests/common/mod.rs includes this file, and there these are the helpers it hands on.
#![allow(unreachable_pub)]

use std::io::Write;

/// Guard margin bytes around destination buffers; they must survive every read untouched.
pub const POISON: u8 = 0xA5;

/// `len` pseudo-random bytes from `seed` (xorshift64), the same on every run.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A temporary file holding `data`, in `dir` (or the default temporary directory).
pub fn temp_file_in(dir: Option<&str>, data: &[u8]) -> tempfile::NamedTempFile {
    let mut tmp = match dir {
        Some(dir) => tempfile::NamedTempFile::new_in(dir).unwrap(),
        None => tempfile::NamedTempFile::new().unwrap(),
    };
    tmp.write_all(data).unwrap();
    tmp.flush().unwrap();
    tmp
}

/// Drops the file at `path` from the page cache, then reads back its first `cached_prefix` bytes
/// without readahead. True once exactly those pages are in the cache (checked with `mincore`,
/// retried: a page still in a CPU's LRU batch resists the first eviction) and the kernel has
/// `RWF_NOWAIT` for the file; false on file systems that keep their pages (tmpfs) or lack
/// `RWF_NOWAIT`: tests then check bytes only.
pub fn evict(path: &std::path::Path, cached_prefix: usize) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return false;
    }
    // Reading everything first waits for readahead still in flight from earlier reads, and lets
    // the RWF_NOWAIT probe below find its page cached (it starts no I/O then).
    let mut all = vec![0u8; len];
    f.read_exact_at(&mut all, 0).unwrap();
    if read_nowait(&f, &mut [0u8; 1], 0) < 0 {
        return false; // no RWF_NOWAIT here: the library cannot tell either
    }
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let prefix_pages = cached_prefix.div_ceil(page);
    let fd = f.as_raw_fd();
    for _ in 0..10 {
        assert_eq!(unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
        if cached_prefix > 0 {
            assert_eq!(unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) }, 0);
            f.read_exact_at(&mut all[..cached_prefix], 0).unwrap();
        }
        let resident = resident_pages(&f, len);
        if resident.iter().enumerate().all(|(i, &r)| r == (i < prefix_pages)) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// For each page of the first `len` bytes of `f`, whether it is in the page cache (`mincore` on
/// a mapping, which starts no I/O, unlike a probing read).
pub fn resident_pages(f: &std::fs::File, len: usize) -> Vec<bool> {
    use std::os::fd::AsRawFd;
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0 as libc::off_t) };
    assert_ne!(map, libc::MAP_FAILED);
    let mut vec = vec![0u8; pages];
    assert_eq!(unsafe { libc::mincore(map, len, vec.as_mut_ptr()) }, 0);
    assert_eq!(unsafe { libc::munmap(map, len) }, 0);
    vec.iter().map(|&v| v & 1 == 1).collect()
}

/// Checks the `got` bytes of a read that raced a truncation of the file (holding `want`) to
/// `cut` bytes: below the cut exact; above it each byte is the file's or 0, because Linux zeroes
/// the tail of the folio at the cut while a racing reader may be copying it (observed about 1
/// run in 40).
pub fn assert_bytes_across_cut(got: &[u8], want: &[u8], cut: usize, what: &str) {
    let below = got.len().min(cut);
    assert!(got[..below] == want[..below], "bytes below the cut are wrong ({what}, cut {cut}, {} read)", got.len());
    let above = got[below..].iter().zip(&want[below..got.len()]);
    assert!(above.clone().all(|(&g, &w)| g == w || g == 0), "bytes above the cut are neither the file's nor 0 ({what}, cut {cut}, {} read)", got.len());
}

/// How many times a read of evicted pages is tried, each followed by a control read.
pub const MISS_PAIRS: usize = 20;

/// Checks that a read of pages evicted from the page cache is flagged as not cached:
/// `read_flagged` reads `len` bytes at `offset` of the file at `path` (checking its own bytes)
/// and says whether the library flagged it. Each attempt first evicts the file but its first
/// `cached_prefix` bytes.
///
/// The kernel may start readahead inside a non-blocking read, and a device that finishes it
/// before the read looks again hands over every byte, so nothing is flagged (seen once in CI on a
/// 2-page read). So one flagged attempt of `MISS_PAIRS` suffices, and each unflagged attempt is
/// followed by a control: a plain `preadv2(RWF_NOWAIT)` of the same range, after the same
/// eviction. The test fails when the library was never flagged though the control missed in half
/// its reads or more (by chance: at most about 4e-5, whatever the kernel's odds of finishing
/// first). Where the eviction never takes (tmpfs, no RWF_NOWAIT), bytes only.
pub fn assert_misses_flagged(path: &std::path::Path, cached_prefix: usize, offset: u64, len: usize, what: &str, mut read_flagged: impl FnMut() -> bool) {
    let (mut evicted_any, mut control_misses) = (false, 0);
    for _ in 0..MISS_PAIRS {
        let evicted = evict(path, cached_prefix);
        if read_flagged() && evicted {
            return;
        }
        evicted_any |= evicted;
        if evict(path, cached_prefix) {
            control_misses += usize::from(plain_nowait_misses(path, offset, len));
        }
    }
    if !evicted_any {
        eprintln!("{} keeps evicted pages or has no RWF_NOWAIT: bytes checked, flag not ({what})", path.display());
        return;
    }
    assert!(control_misses < MISS_PAIRS / 2, "{what}: never flagged in {MISS_PAIRS} reads, though plain RWF_NOWAIT reads missed {control_misses} times of {MISS_PAIRS}");
    eprintln!("{what}: the kernel filled the cache inside the non-blocking read (plain RWF_NOWAIT missed {control_misses} of {MISS_PAIRS}): bytes checked, flag not");
}

/// Whether a plain `preadv2(RWF_NOWAIT)` of `len` bytes at `offset` of the file at `path`
/// (clipped to the file's end) comes up short.
fn plain_nowait_misses(path: &std::path::Path, offset: u64, len: usize) -> bool {
    let f = std::fs::File::open(path).unwrap();
    let len = len.min(f.metadata().unwrap().len().saturating_sub(offset) as usize);
    read_nowait(&f, &mut vec![0u8; len], offset) < len as isize
}

/// `preadv2(RWF_NOWAIT)` into `buf` at `offset` of `f`: the bytes the page cache gave, or -1.
fn read_nowait(f: &std::fs::File, buf: &mut [u8], offset: u64) -> isize {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: iov describes buf, alive and writable for the call.
    unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) }
}

/// Compiles tests/c/fault_shim.c (the LD_PRELOAD fault injector of the fault tests) into `dir`,
/// or None (with a note) when no C compiler is around.
pub fn build_fault_shim(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fault_shim.c");
    let out = dir.join("libfault_shim.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match std::process::Command::new(&cc).args(["-shared", "-fPIC", "-O2", "-o"]).arg(&out).arg(&src).arg("-ldl").status() {
        Ok(s) if s.success() => Some(out),
        other => {
            eprintln!("skipping: cannot build the fault shim with {cc}: {other:?}");
            None
        }
    }
}

/// The fault shim for tests on a machine that may have no C compiler (the GPU machine): the
/// library `GDSROUTE_TEST_FAULT_SHIM` names (tools/gpu/gpu-build.sh builds one into .device/), else
/// one compiled into `dir` (`build_fault_shim`), else None.
pub fn fault_shim(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    match std::env::var_os("GDSROUTE_TEST_FAULT_SHIM") {
        Some(path) if !path.is_empty() => {
            let path = std::path::PathBuf::from(path);
            assert!(path.is_file(), "GDSROUTE_TEST_FAULT_SHIM={} is not a file", path.display());
            Some(std::fs::canonicalize(path).unwrap())
        }
        _ => build_fault_shim(dir),
    }
}

/// Runs the ignored test `name` of the calling test binary in a new process with `env` set, and
/// returns its output; fails unless it ran (one test passed) and succeeded. The child scenarios
/// of the fault tests (a preloaded shim, a file-size limit) must not touch the parent process.
pub fn run_ignored_test(name: &str, env: &[(&str, std::ffi::OsString)]) -> String {
    run_ignored_test_without(name, env, &[])
}

/// `run_ignored_test`, with the variables `remove` taken out of the child's environment (a
/// variable cuFile reads when it loads, say, that the caller's shell may have set).
pub fn run_ignored_test_without(name: &str, env: &[(&str, std::ffi::OsString)], remove: &[&str]) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
    for k in remove {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(out.status.success(), "{name} failed: {:?}", out.status);
    assert!(text.contains("1 passed"), "the child test {name} did not run");
    text
}

/// Whether the file system of `file` takes `O_DIRECT` (the library then uses it for aligned
/// ranges): a second descriptor of it opened with the flag, as the library opens one.
pub fn has_direct_io(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(format!("/proc/self/fd/{}", file.as_raw_fd())).is_ok()
}
