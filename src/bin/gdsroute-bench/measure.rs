//! Timing: wall and CPU seconds of a timed region, the repetitions' rates and their median and
//! spread, dropping the page cache, the waits of the first-read experiments, and which memory
//! kinds can be measured at all.

use std::time::Instant;

use crate::args::Mem;

/// The process's user + system CPU seconds so far (`getrusage`).
pub fn cpu_seconds() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-buffer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs `work` as a timed region: its result, the wall seconds and the process's CPU seconds
/// (CPU read before the clock starts and after it stops).
pub fn timed<T>(work: impl FnOnce() -> Result<T, String>) -> Result<(T, f64, f64), String> {
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let out = work()?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds() - cpu0;
    Ok((out, secs, cpu_s))
}

/// Per timed repetition: GB/s and CPU seconds per GB.
#[derive(Default)]
pub struct Reps {
    pub gbps: Vec<f64>,
    pub cpu: Vec<f64>,
}

impl Reps {
    /// One repetition that moved `bytes` in `secs` wall and `cpu_s` CPU seconds.
    pub fn record(&mut self, bytes: f64, secs: f64, cpu_s: f64) {
        self.gbps.push(bytes / secs / 1e9);
        self.cpu.push(cpu_s / (bytes / 1e9));
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The slowest and the fastest repetition (infinity and 0 for none).
pub fn spread(gbps: &[f64]) -> (f64, f64) {
    (gbps.iter().cloned().fold(f64::INFINITY, f64::min), gbps.iter().cloned().fold(0.0, f64::max))
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`. Err with the reason when not possible.
pub fn drop_caches() -> Result<(), String> {
    // SAFETY: plain system calls.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("/proc/sys/vm/drop_caches: {e}"))
}

/// Sleeps for the milliseconds the variable names, if set (first-read experiments: which wait
/// before the timed read makes it faster).
pub fn sleep_ms_from_env(var: &str) {
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The memory kinds asked for, less device memory when there is no GPU (`gpu`: why not), said
/// in a NOTE line; host memory then stands in if nothing else is left.
pub fn measurable(mems: &[Mem], gpu: &Result<(), String>) -> Vec<Mem> {
    let mut mems = mems.to_vec();
    if let Err(why) = gpu
        && mems.contains(&Mem::Device)
    {
        println!("NOTE no GPU: device memory skipped, host memory only ({why})");
        mems.retain(|m| *m == Mem::Host);
        if mems.is_empty() {
            mems.push(Mem::Host);
        }
    }
    mems
}
