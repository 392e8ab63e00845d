//! fork(): a child that uses the library after the parent started its pool gets a working fresh
//! pool, never a hang, also through a handle the parent gave a pool of its own. Alone in their
//! test binary, one at a time (`FORKS`), so that no other test thread holds a library lock at
//! the moment of a fork.

mod common;

use common::random_bytes;
use gdsroute::{File, Pool};

static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, File) {
    let tmp = common::temp_file_in(None, data);
    let file = common::open(tmp.path(), None);
    (tmp, file)
}

#[test]
fn a_forked_child_reads_with_a_fresh_pool() {
    let _one = FORKS.lock().unwrap_or_else(|p| p.into_inner());
    let data = random_bytes(3 << 20, 9);
    let (_tmp, file) = file_with(&data);
    read_in_a_forked_child(&file, &data);
}

/// A handle on a caller's pool of one worker: the child has none of that pool's workers, and a
/// waiter on a one-thread pool does not run its tasks itself, so the child's read takes the
/// child's shared pool (it waited forever for the parent's worker).
#[test]
fn a_forked_child_reads_through_a_handle_on_a_callers_pool() {
    let _one = FORKS.lock().unwrap_or_else(|p| p.into_inner());
    let data = random_bytes(3 << 20, 10);
    let (_tmp, file) = file_with(&data);
    let pool = Pool::new(1, None).unwrap();
    file.set_pool(Some(&pool)).unwrap();
    read_in_a_forked_child(&file, &data);
}

/// Reads `file` (all of `data`) in the parent, whose pool then runs, then in a forked child,
/// which must get every byte within 30 s.
fn read_in_a_forked_child(file: &File, data: &[u8]) {
    let mut buf = vec![0u8; data.len()];
    assert_eq!(file.read_into(&mut buf, 0).unwrap(), data.len()); // the parent's pool is running
    // SAFETY: the child only reads through the library and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut buf = vec![0u8; data.len()];
        let ok = matches!(file.read_into(&mut buf, 0), Ok(n) if n == data.len()) && buf == data;
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if std::time::Instant::now() > deadline {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child failed: {status}");
}
