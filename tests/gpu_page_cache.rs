//! The registered page cache on a GPU (run with `--ignored` on the device machine): ranges read
//! twice over are registered in the background and later copied straight from the page cache;
//! every byte is checked inside poisoned margins, writes to the file are seen, truncation and
//! growth drop the windows, the pin limit holds, and closing the handle unpins. Windows are only
//! registered for files unchanged for a second, hence the waits after writing.

mod common;

use common::gpu::{check_device_read, file_with, on_device0, open};
use common::random_bytes;
use gdsroute::testing::device::{PAGE_CACHE_WINDOW as WINDOW, PageCacheUsage, page_cache_usage};
use gdsroute::settings::CompatMode;
use gdsroute::{File, settings};
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
