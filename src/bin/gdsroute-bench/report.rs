//! What the bench prints: the `RESULT` lines (and their shared fields) as each measurement ends,
//! and the table of all of them at the end.

use std::io::Write;

use gdsroute::Counters;

use crate::measure::{median, spread};

/// One measurement's line and the figures the table shows of it.
pub struct Outcome {
    line: String,
    gbps: f64,
    rps: f64,
}

/// Ends a `RESULT` line with the fields every line ends with (the calling script's labels, each
/// repetition's GB/s with `decimals` digits after the point), prints it at once (flushed, so that
/// a later failure or a killed run keeps it) and keeps it for the table with its median GB/s and
/// reads per second (NaN where it has none).
pub fn emit(results: &mut Vec<Outcome>, mut line: String, gbps: &[f64], decimals: usize, rps: f64) {
    line.push_str(&labels());
    line.push_str(&gbps_reps(gbps, decimals));
    println!("{line}");
    let _ = std::io::stdout().flush();
    results.push(Outcome { line, gbps: median(gbps), rps });
}

/// `gbps=… rps=… cpu_s_per_gb=… reps=… gbps_min=… gbps_max=…`: the figures of every RESULT
/// line, in that order, from each repetition's GB/s, the reads per second (`-` for none) and the
/// CPU seconds per GB.
pub fn figures(gbps: &[f64], rps: &str, cpu_s_per_gb: f64) -> String {
    let (gmin, gmax) = spread(gbps);
    format!(
        "gbps={:.3} rps={rps} cpu_s_per_gb={cpu_s_per_gb:.4} reps={} gbps_min={gmin:.3} gbps_max={gmax:.3}",
        median(gbps),
        gbps.len()
    )
}

/// ` name=value` for every counter whose name `pick` takes, as they stand in `counters`.
pub fn counter_fields(counters: &Counters, pick: impl Fn(&str) -> bool) -> String {
    counters
        .entries()
        .iter()
        .filter(|(name, _)| pick(name))
        .map(|(name, v)| format!(" {name}={v}"))
        .collect()
}

/// ` tag=... variant=...`: the labels from the calling script (BENCH_TAG, a setup both libraries
/// share; BENCH_VARIANT, a gdsroute setting compared with the same KvikIO lines).
fn labels() -> String {
    let mut out = String::new();
    for (var, field) in [("BENCH_TAG", "tag"), ("BENCH_VARIANT", "variant")] {
        let value = std::env::var(var).map(|v| v.split_whitespace().collect::<Vec<_>>().join("_"));
        if let Some(v) = value.ok().filter(|v| !v.is_empty()) {
            out.push_str(&format!(" {field}={v}"));
        }
    }
    out
}

/// ` gbps_reps=a,b,c`: each repetition's rate, with `decimals` digits after the point (1 on the
/// read lines, 2 on the write and several-GPU lines).
fn gbps_reps(gbps: &[f64], decimals: usize) -> String {
    let each: Vec<String> = gbps.iter().map(|g| format!("{g:.decimals$}")).collect();
    format!(" gbps_reps={}", each.join(","))
}

/// The table at the end: the main columns of every RESULT line (writes show fs/open where reads
/// show the cache).
pub fn print_table(results: &[Outcome]) {
    if results.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<7} {:<5} {:>7} {:>9} {:<8} {:<8} {:<6} {:>9} {:>10} {:>12} {:<6}",
        "mem",
        "mode",
        "threads",
        "task",
        "cache",
        "kind",
        "phase",
        "GB/s",
        "reads/s",
        "cpu s/GB",
        "route"
    );
    for o in results {
        let field = |k: &str| {
            o.line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                .unwrap_or("")
                .to_string()
        };
        // Writes have no cache field: their file system and open mode take its column; reads
        // into several GPUs show the GPUs read at once and the GPU of the line in the kind's.
        let cache = match field("dir").as_str() {
            "write" => format!("{}/{}", field("fs"), field("open")),
            _ => field("cache"),
        };
        let kind = match field("devices").as_str() {
            "" => field("kind"),
            devices => format!("{devices}:{}", field("device")),
        };
        let rps = if field("rps") == "-" {
            "-".to_string()
        } else {
            format!("{:.0}", o.rps)
        };
        println!(
            "{:<7} {:<5} {:>7} {:>9} {:<8} {:<8} {:<6} {:>9.2} {:>10} {:>12} {:<6}",
            field("mem"),
            field("mode"),
            field("threads"),
            field("task"),
            cache,
            kind,
            field("phase"),
            o.gbps,
            rps,
            field("cpu_s_per_gb"),
            field("route")
        );
    }
}
