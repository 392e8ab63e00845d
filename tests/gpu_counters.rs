//! gdsroute's cuFile write tasks beside cuFile's own count of writes, one write at a time (run
//! on the GPU machine with the udev record, `--ignored --nocapture`): an outside run of 288
//! device writes (2026-12-02) ended with `cufile_write_tasks=416` beside cuFile's
//! `n_total_writes=464`. Each case here is one `write` or `pwrite` under compat mode OFF, with the
//! counters reset before it; a case where the two differ is printed, and the bytes are checked.

mod common;

use common::gpu::{GUARD, file_with, ok, on_device0, poisoned_allocation};
use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::File;
use gdsroute::counters::{CufileStatsState, process_counters, reset_process_counters};
use gdsroute::settings::CompatMode;

#[test]
#[ignore = "needs a GPU and the udev record"]
fn cufile_write_tasks_beside_cufiles_own_write_count() {
    let _ctx = on_device0();
    let data = random_bytes((64 << 20) + 3 + 2, 111);
    let tmp = file_with(&vec![0u8; 80 << 20]);
    let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, Some(CompatMode::Off)).unwrap();
    let dev = poisoned_allocation(data.len() + 2 * GUARD, false);
    ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(dev + GUARD as u64, data.as_ptr().cast(), data.len()) });
    let (mut cases, mut differing, mut ours, mut theirs) = (0, 0, 0u64, 0u64);
    for size in [1usize, 4095, 16383, 16384, (4 << 20) + 5, (64 << 20) + 3] {
        for offset in [0u64, 1, 4099, 16 << 20] {
            for ptr_offset in [0usize, 1] {
                for parallel in [false, true] {
                    reset_process_counters();
                    let src = (dev as usize + GUARD + ptr_offset) as *const u8;
                    let n = if parallel { unsafe { file.pwrite_raw(src, size, offset) }.and_then(|op| op.wait()) } else { unsafe { file.write_raw(src, size, offset) } };
                    assert_eq!(n.unwrap(), size);
                    let c = process_counters();
                    assert_eq!(c.cufile_stats_state, CufileStatsState::Active as u64, "cuFile's statistics must be live");
                    cases += 1;
                    ours += c.cufile_write_tasks;
                    theirs += c.cufile_n_total_writes;
                    if c.cufile_write_tasks != c.cufile_n_total_writes {
                        differing += 1;
                        eprintln!(
                            "cufile_counts: size {size} offset {offset} ptr+{ptr_offset} {}: cufile_write_tasks {} posix_write_tasks {} cuFile n_total_writes {} n_posix_writes {} bytes {}",
                            if parallel { "pwrite" } else { "write" },
                            c.cufile_write_tasks, c.posix_write_tasks, c.cufile_n_total_writes, c.cufile_n_posix_writes, c.cufile_write_bytes_gpu
                        );
                    }
                    let mut back = vec![0u8; size];
                    assert_eq!(file.read_into(&mut back, offset).unwrap(), size);
                    assert!(back == data[ptr_offset..ptr_offset + size], "bytes of size {size} offset {offset} ptr+{ptr_offset}");
                }
            }
        }
    }
    unsafe { sys::cuMemFree_v2(dev) };
    eprintln!("cufile_counts: {cases} writes, {differing} where the counts differ; cufile_write_tasks {ours} beside cuFile's n_total_writes {theirs}");
}
