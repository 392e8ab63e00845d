//! The registered page cache on a GPU (run with `--ignored` on the device machine): ranges read
//! twice over are registered in the background and later copied straight from the page cache;
//! every byte is checked inside poisoned margins, writes to the file are seen, truncation and
//! growth drop the windows, the pin limit holds, and closing the handle unpins. `File::truncate`
//! through one handle releases the windows of every handle of the file at the call, whatever the
//! new size, and reads follow the file, never the pages pinned before; also through a handle from
//! `File::open_fd`. Windows are only registered for files unchanged for a second, hence the waits
//! after writing.

mod common;

use common::gpu::{check_device_read, check_device_read_exact, device_write, file_with, on_device0, open, open_with_flags};
use common::random_bytes;
use gdsroute::testing::device::{PAGE_CACHE_WINDOW as WINDOW, PageCacheUsage, page_cache_usage};
use gdsroute::settings::CompatMode;
use gdsroute::{File, settings};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

/// Longer than the library's quiet period for files (1 s of unchanged change time).
const QUIET: Duration = Duration::from_millis(1100);

/// A test file that has been left alone long enough for its windows to be registered.
fn quiet_file_with(data: &[u8]) -> tempfile::NamedTempFile {
    let tmp = file_with(data);
    std::thread::sleep(QUIET);
    tmp
}

/// Waits until the process has made `n` more registration attempts than `before` (registered or
/// refused), then returns how many were registered.
fn wait_for_registrations(before: PageCacheUsage, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = page_cache_usage();
        let tried = (now.registrations + now.refusals) - (before.registrations + before.refusals);
        if tried >= n {
            return now.registrations - before.registrations;
        }
        assert!(Instant::now() < deadline, "only {tried} of {n} registrations after 10 s");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn whole_file_read(file: &File, data: &[u8]) {
    check_device_read(file, data, data.len(), 0, false);
}

#[test]
#[ignore = "needs a GPU"]
fn repeated_reads_are_copied_from_the_page_cache_byte_exact() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    settings::set_page_cache_pin_max(1 << 30);
    settings::set_num_threads(8).unwrap();
    // Three windows, the last one partial and not page-aligned.
    let data = random_bytes(2 * WINDOW as usize + (5 << 20) + 777, 31);
    let tmp = quiet_file_with(&data);
    let file = open(&tmp, CompatMode::On);
    let before = page_cache_usage();
    whole_file_read(&file, &data); // first read: counted
    assert_eq!(file.stats().posix_mapped_bytes, 0);
    whole_file_read(&file, &data); // second read: the three windows are queued
    assert_eq!(wait_for_registrations(before, 3), 3, "registrations refused: {:?}", page_cache_usage());
    let mapped_before = file.stats().posix_mapped_bytes;
    whole_file_read(&file, &data);
    let c = file.stats();
    assert_eq!(c.posix_mapped_bytes - mapped_before, data.len() as u64, "{}", c.to_json());
    // Odd sizes and offsets across window borders and past the end, unaligned destinations;
    // task sizes that straddle windows.
    for &(task, threads) in &[(4u64 << 20, 8usize), (3 << 20, 3), (65536 + 7, 16)] {
        settings::set_task_size(task).unwrap();
        settings::set_num_threads(threads).unwrap();
        for &size in &[1usize, 4095, 16384, 65537, (4 << 20) + 1, WINDOW as usize + 3, data.len()] {
            for &offset in &[0u64, 1, WINDOW - 2, 2 * WINDOW - 4097, data.len() as u64 - 5, data.len() as u64 + 1] {
                check_device_read(&file, &data, size, offset, false);
            }
        }
    }
    check_device_read(&file, &data, WINDOW as usize + 5, WINDOW - 7, true); // managed memory
    let c = gdsroute::counters::process_counters();
    assert!(c.page_cache_pinned_bytes >= 2 * WINDOW, "{}", c.to_json());
    eprintln!("{}", file.stats().to_json());
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn writes_are_seen_and_size_changes_drop_the_windows() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    settings::set_page_cache_pin_max(1 << 30);
    // Two windows, the second with more than the 1 MiB a window needs to be registered.
    let mut data = random_bytes(WINDOW as usize + (2 << 20) + 12345, 32);
    let tmp = quiet_file_with(&data);
    let file = open(&tmp, CompatMode::On);
    let writer = std::fs::OpenOptions::new().write(true).open(tmp.path()).unwrap();
    let before = page_cache_usage();
    whole_file_read(&file, &data);
    whole_file_read(&file, &data);
    assert_eq!(wait_for_registrations(before, 2), 2);

    // An in-place write: same size, new bytes. The next read must return them, whether the
    // window stays registered (shared mapping) or is dropped (the modification time changed).
    let patch = random_bytes((1 << 20) + 10_000, 33); // crosses the window border, ends before EOF
    let at = WINDOW as usize - (1 << 20) - 5;
    writer.write_all_at(&patch, at as u64).unwrap();
    data[at..at + patch.len()].copy_from_slice(&patch);
    whole_file_read(&file, &data);

    // Shrink: reads end at the new size.
    let short = WINDOW as usize - 100;
    writer.set_len(short as u64).unwrap();
    data.truncate(short);
    check_device_read(&file, &data, WINDOW as usize + 12345, 0, false);
    check_device_read(&file, &data, 8 << 20, short as u64 - (4 << 20), false);

    // Grow again with new bytes: seen in full, registered again after two more reads.
    let tail = random_bytes(2 << 20, 34);
    writer.write_all_at(&tail, short as u64).unwrap();
    data.extend_from_slice(&tail);
    std::thread::sleep(QUIET);
    let before = page_cache_usage();
    whole_file_read(&file, &data);
    whole_file_read(&file, &data);
    wait_for_registrations(before, 2);
    let mapped = file.stats().posix_mapped_bytes;
    whole_file_read(&file, &data);
    assert_eq!(file.stats().posix_mapped_bytes - mapped, data.len() as u64);
}

#[test]
#[ignore = "needs a GPU"]
fn the_pin_limit_holds_and_closing_unpins() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(3 * WINDOW as usize, 35);
    let tmp = quiet_file_with(&data);

    // Limit 0: nothing is registered, however often the file is read.
    settings::set_page_cache_pin_max(0);
    let file = open(&tmp, CompatMode::On);
    let before = page_cache_usage();
    for _ in 0..3 {
        whole_file_read(&file, &data);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(page_cache_usage().registrations, before.registrations);
    assert_eq!(file.stats().posix_mapped_bytes, 0);

    // Room for one more window than is pinned now: exactly one of the three is registered.
    let pinned = page_cache_usage().pinned_bytes;
    settings::set_page_cache_pin_max(pinned + WINDOW);
    let before = page_cache_usage();
    for _ in 0..3 {
        whole_file_read(&file, &data);
    }
    assert_eq!(wait_for_registrations(before, 1), 1);
    std::thread::sleep(Duration::from_millis(200));
    let now = page_cache_usage();
    assert_eq!(now.registrations, before.registrations + 1, "{now:?}");
    assert!(now.pinned_bytes <= pinned + WINDOW);
    let mapped = file.stats().posix_mapped_bytes;
    whole_file_read(&file, &data);
    assert_eq!(file.stats().posix_mapped_bytes - mapped, WINDOW);

    // Closing the handle releases its windows.
    file.close();
    drop(file);
    assert_eq!(page_cache_usage().pinned_bytes, pinned);
    settings::set_page_cache_pin_max(1 << 30);
}

#[test]
#[ignore = "needs a GPU"]
fn opening_a_file_prepares_the_device_route_in_the_background() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    // More workers than any other test of this binary uses, so this open has work to do.
    let workers = 24;
    settings::set_num_threads(workers).unwrap();
    let data = random_bytes((8 << 20) + 5, 36);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::On);
    // One bounce buffer per worker and one for this thread.
    let buffer = gdsroute::testing::device::current_bounce_buffer_bytes().unwrap();
    let want = (workers as u64 + 1) * buffer;
    let deadline = Instant::now() + Duration::from_secs(5);
    while gdsroute::counters::process_counters().pinned_bytes < want {
        assert!(Instant::now() < deadline, "pinned {} < {want} 5 s after open", gdsroute::counters::process_counters().pinned_bytes);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(file.stats().calls, 0, "prepared before any read");
    check_device_read(&file, &data, data.len(), 0, false);
    settings::set_num_threads(8).unwrap();
}

// ---------------------------------------------------------------------------------------------
// File::truncate with registered windows
// ---------------------------------------------------------------------------------------------

const MIB: usize = 1 << 20;

/// Waits out the quiet period, then reads the whole file (`model`) through each handle into
/// device memory until one read of it was copied entirely from registered windows
/// (`posix_mapped_bytes` grew by the file's size): every window of every handle is registered.
fn register_windows(handles: &[&File], model: &[u8]) {
    std::thread::sleep(QUIET);
    for (i, file) in handles.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mapped = file.stats().posix_mapped_bytes;
            check_device_read_exact(file, model, model.len(), 0);
            if file.stats().posix_mapped_bytes - mapped == model.len() as u64 {
                break;
            }
            assert!(Instant::now() < deadline, "handle {i}: not copied from registered windows after 10 s: {:?}, {}", page_cache_usage(), file.stats().to_json());
        }
    }
}

/// Truncates through `writer` to `size`. The call itself releases the registered windows of
/// every handle of the file, before any read could find the file changed: the page-cache pins
/// fall by at least `held` bytes, what those windows cover. Without the drops in
/// `OpenFile::set_len` the pins stay until each handle's next read.
fn truncate_releasing(writer: &File, size: usize, held: u64) {
    let pinned = page_cache_usage().pinned_bytes;
    writer.truncate(size as u64).unwrap();
    let now = page_cache_usage().pinned_bytes;
    assert!(now + held <= pinned, "to {size}: pinned {pinned} before the truncation, {now} after it; the handles' windows held {held}");
    assert_eq!(writer.size().unwrap(), size as u64);
}

/// Bytes the registered windows of `handles` cover once each registered the whole `model`.
fn held(handles: &[&File], model: &[u8]) -> u64 {
    (handles.len() * model.len()) as u64
}

/// Device reads through each handle across and past the end of the file (`model`): counts
/// short at the end, 0 at and after it, every byte the file's, nothing written past those read
/// (`check_device_read_exact`); `probe` bytes from offset 0 at least the file's size. None is
/// copied from a window: those registered before the change are gone, and these reads take less
/// than twice each window's bytes, so none is registered again meanwhile.
fn reads_follow_the_end(handles: &[&File], model: &[u8], probe: usize) {
    let end = model.len();
    for (i, file) in handles.iter().enumerate() {
        let mapped = file.stats().posix_mapped_bytes;
        assert_eq!(check_device_read_exact(file, model, probe, 0), end, "handle {i}: the whole file");
        for &(size, offset) in &[(4095, 1), (MIB + 7, end / 2), (1, end.saturating_sub(1)), (4096, end.saturating_sub(1)), (65537, end.saturating_sub(4097)), (2 * MIB + 3, end.saturating_sub(MIB + 1))] {
            check_device_read_exact(file, model, size, offset as u64);
        }
        for &(size, offset) in &[(1, end), (4096, end), (65536, end + 1), (8192, end + 5 * MIB + 3), (4 * MIB + 1, end + WINDOW as usize)] {
            assert_eq!(check_device_read_exact(file, model, size, offset as u64), 0, "handle {i}: {size} at {offset}, the end at {end}");
        }
        assert_eq!(file.stats().posix_mapped_bytes, mapped, "handle {i}: copied from a window after the file changed (end {end})");
    }
}

/// Truncations through `writer` (it can write; `reader` is another handle of the file, both in
/// compat mode on, so that device reads take the POSIX route and the registered page cache), each
/// with the windows of both handles registered first: a shrink to inside the first window, not on
/// a page border; growth back over the old range with new bytes from device and host memory
/// (the stale-window case: a window pinned before keeps the old pages); an extension above the
/// end (zeros); to 0 and up again (zeros, never the pages pinned before).
fn truncations_release_the_windows_and_reads_follow(tmp: &tempfile::NamedTempFile, writer: &File, reader: &File, mut model: Vec<u8>, seed: u64) {
    let handles = [writer, reader];
    let len = model.len();
    assert!(len > WINDOW as usize + MIB, "two windows, each registered");

    register_windows(&handles, &model);
    let cut = 20 * MIB + 123;
    truncate_releasing(writer, cut, held(&handles, &model));
    model.truncate(cut);
    reads_follow_the_end(&handles, &model, len + MIB);

    let fresh = random_bytes(len - cut, seed);
    let split = fresh.len() / 3 + 1;
    assert_eq!(device_write(writer, &fresh[..split], cut as u64), split);
    assert_eq!(writer.write_from(&fresh[split..], (cut + split) as u64).unwrap(), fresh.len() - split);
    model.extend_from_slice(&fresh);
    assert!(std::fs::read(tmp.path()).unwrap() == model, "the file after growing back");
    reads_follow_the_end(&handles, &model, len + MIB);
    register_windows(&handles, &model); // the new pages: read from windows, every byte new

    let above = len + 3 * MIB + 5;
    truncate_releasing(writer, above, held(&handles, &model));
    model.resize(above, 0);
    reads_follow_the_end(&handles, &model, above + MIB);

    let tail = random_bytes(above - len, seed + 1);
    assert_eq!(device_write(writer, &tail, len as u64), tail.len());
    model[len..].copy_from_slice(&tail);
    register_windows(&handles, &model);
    truncate_releasing(writer, 0, held(&handles, &model));
    model.clear();
    reads_follow_the_end(&handles, &model, above);
    truncate_releasing(writer, above, 0);
    model.resize(above, 0);
    reads_follow_the_end(&handles, &model, above + MIB);
    assert!(std::fs::read(tmp.path()).unwrap() == model, "zeros after growing from 0");

    for (i, file) in handles.iter().enumerate() {
        let c = file.stats();
        assert!(c.cufile_tasks == 0 && c.posix_tasks_auto_fallback == 0 && c.posix_tasks_host_memory == 0 && c.posix_tasks_compat_on > 0, "handle {i}: {}", c.to_json());
        assert_eq!(c.calls_failed, 0, "handle {i}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn truncating_through_one_handle_releases_the_windows_of_both_and_reads_follow_the_file() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    settings::set_page_cache_pin_max(1 << 30);
    settings::set_num_threads(8).unwrap();
    let data = random_bytes(WINDOW as usize + 5 * MIB + 777, 41);
    let tmp = quiet_file_with(&data);
    let writer = open_with_flags(&tmp, "r+", CompatMode::On);
    let reader = open(&tmp, CompatMode::On);
    truncations_release_the_windows_and_reads_follow(&tmp, &writer, &reader, data, 42);
    eprintln!("{}", writer.stats().to_json());
}

#[test]
#[ignore = "needs a GPU"]
fn a_handle_from_a_descriptor_reads_into_device_memory_and_its_truncations_release_the_windows() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    settings::set_page_cache_pin_max(1 << 30);
    settings::set_num_threads(8).unwrap();
    let data = random_bytes(WINDOW as usize + 5 * MIB + 777, 43);
    let tmp = quiet_file_with(&data);

    // Compat mode on: the POSIX route with the registered page cache. The caller's descriptor
    // is closed at once; the handle's duplicate keeps the file.
    let caller = std::fs::OpenOptions::new().read(true).write(true).open(tmp.path()).unwrap();
    let from_fd = File::open_fd(caller.as_fd(), Some(CompatMode::On)).unwrap();
    drop(caller);
    let reader = open(&tmp, CompatMode::On);
    truncations_release_the_windows_and_reads_follow(&tmp, &from_fd, &reader, data, 44);

    // AUTO, from a read-only descriptor: the route is the handle's cuFile verdict (cuFile where
    // it registered the duplicate, else the POSIX fallback), every byte right either way.
    let data = random_bytes((9 << 20) + 777, 45);
    let tmp = file_with(&data);
    let caller = std::fs::File::open(tmp.path()).unwrap();
    let from_fd = File::open_fd(caller.as_fd(), Some(CompatMode::Auto)).unwrap();
    for &size in &[1usize, 4095, 16384, 65537, (4 << 20) + 1, data.len() + 3] {
        for &offset in &[0u64, 1, 123_457, data.len() as u64 - 5, data.len() as u64 + 1] {
            check_device_read(&from_fd, &data, size, offset, false);
        }
    }
    let verdict = from_fd.cufile_verdict().unwrap();
    let c = from_fd.stats();
    assert!(c.posix_tasks_compat_on == 0 && c.posix_tasks_host_memory == 0 && c.posix_tasks_below_threshold > 0 && c.calls_failed == 0, "{}", c.to_json());
    match &verdict {
        Ok(()) => assert!(c.cufile_tasks > 0 && c.posix_tasks_auto_fallback == 0, "cuFile usable: {}", c.to_json()),
        Err(why) => assert!(c.cufile_tasks == 0 && c.posix_tasks_auto_fallback > 0, "cuFile unusable ({why:?}): {}", c.to_json()),
    }
    eprintln!("AUTO through a descriptor: verdict {verdict:?}, registered {:?}; {}", from_fd.cufile_descriptor(), c.to_json());
}
