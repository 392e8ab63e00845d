//! The exit report (`GDSROUTE_REPORT=stderr`, or a path; JSON when the path ends in `.json`;
//! `%p` in the path becomes the process id, so the ranks of an MPI job write a file each): at
//! process exit, or at `gdsroute_shutdown`, once, the process's routes in a few lines. Calls,
//! bytes and GB/s by direction and route, the rate over the time calls of that direction were in
//! flight (`stats::activity`: wall time with at least one call running); the POSIX tasks by
//! reason and the files that fell back by reason; cuFile's own `n= nvfs= posix=`; and the counters
//! that libraries built on gdsroute add under their own section (`add_counter`: the HDF5 driver's,
//! say). A forked child that made no call of its own prints nothing.
//!
//! When it is written: armed by the first handle (or the device set-up, or shutdown), it registers
//! an exit handler then; and cuFile's own exit step (`gds::shutdown`, which closes the driver)
//! asks for the report first, through a hook, so that cuFile's counters are read while its driver
//! is open, whichever of the two handlers runs first. Nothing here waits or takes a lock another
//! thread could hold for long: the counters' locks only.

use crate::abi::CufileStatsState;
use crate::direction::Direction;
use crate::stats::{Counters, activity};
use once_cell::sync::OnceCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

/// Where the report goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Stderr,
    /// A path (`%p` not yet replaced: a forked child writes its own), JSON when it ends `.json`.
    File { template: String, json: bool },
}

impl Target {
    /// The target `GDSROUTE_REPORT`'s value names (`None`: no report): the settings' words for
    /// off and on in any case (`0`/`false`/`off`/`no`, `none`; `1`/`true`/`on`/`yes`, `stderr`),
    /// any other value a path.
    fn parse(value: &str) -> Option<Target> {
        let value = value.trim();
        match (value.to_ascii_lowercase().as_str(), crate::settings::env::boolean(value)) {
            ("", _) | ("none", _) | (_, Some(false)) => None,
            ("stderr", _) | (_, Some(true)) => Some(Target::Stderr),
            _ => Some(Target::File { template: value.to_string(), json: value.ends_with(".json") }),
        }
    }
}

static TARGET: OnceCell<Option<Target>> = OnceCell::new();
static WRITTEN: AtomicBool = AtomicBool::new(false);

/// The driver counters (`add_counter`), by section and name.
static SECTIONS: Mutex<BTreeMap<String, BTreeMap<String, u64>>> = Mutex::new(BTreeMap::new());

fn target() -> Option<&'static Target> {
    TARGET.get_or_init(|| std::env::var("GDSROUTE_REPORT").ok().and_then(|v| Target::parse(&v))).as_ref()
}

/// Reads `GDSROUTE_REPORT` (once) and, if it asks for a report, registers the exit handler and
/// cuFile's hook (once). Cheap after the first call.
pub(crate) fn arm() {
    static ARMED: Once = Once::new();
    ARMED.call_once(|| {
        if target().is_some() {
            crate::backend::cufile::gds::before_driver_close(write_once);
            // SAFETY: registering plain extern "C" functions with no captured state.
            unsafe {
                libc::atexit(write_at_exit);
                libc::pthread_atfork(None, None, Some(unwritten_in_child));
            }
        }
    });
}

/// A forked child writes a report of its own (if it makes calls), also after its parent wrote
/// one before the fork.
extern "C" fn unwritten_in_child() {
    WRITTEN.store(false, Ordering::SeqCst);
}

extern "C" fn write_at_exit() {
    let _ = std::panic::catch_unwind(write_once);
}

/// Writes the report where `GDSROUTE_REPORT` says, the first time only; nothing in a forked
/// child that made no call.
pub(crate) fn write_once() {
    let Some(target) = target() else { return };
    if crate::sys::startup::forked_since_load() && !activity::this_process_made_calls() {
        return;
    }
    if WRITTEN.swap(true, Ordering::SeqCst) {
        return;
    }
    use std::io::Write;
    match target {
        Target::Stderr => {
            let _ = std::io::stderr().write_all(render(false).as_bytes());
        }
        Target::File { template, json } => {
            let path = crate::log::with_pid(template, std::process::id());
            let written = std::fs::write(&path, render(*json));
            if let Err(e) = written {
                let _ = writeln!(std::io::stderr(), "gdsroute: the report could not be written to {path}: {e}");
            }
        }
    }
}

/// Adds `delta` to the counter `name` of `section` in the report (a library built on gdsroute
/// reports its own counters beside the routes: `hdf5-vfd`, `reads_forwarded`, say).
pub fn add_counter(section: &str, name: &str, delta: u64) {
    let mut sections = SECTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let value = sections.entry(section.to_string()).or_default().entry(name.to_string()).or_insert(0);
    *value = value.saturating_add(delta);
}

/// One direction's figures.
struct DirectionLine {
    name: &'static str,
    calls: u64,
    failed: u64,
    bytes: u64,
    seconds: f64,
    /// (route, tasks, bytes).
    routes: [(&'static str, u64, u64); 2],
}

impl DirectionLine {
    fn of(c: &Counters, direction: Direction) -> DirectionLine {
        let seconds = activity::busy(direction).as_secs_f64();
        match direction {
            Direction::Read => DirectionLine {
                name: "reads",
                calls: c.calls,
                failed: c.calls_failed,
                bytes: c.bytes_read,
                seconds,
                routes: [("posix", c.posix_tasks, c.posix_bytes), ("cufile", c.cufile_tasks, c.cufile_bytes)],
            },
            Direction::Write => DirectionLine {
                name: "writes",
                calls: c.write_calls,
                failed: c.write_calls_failed,
                bytes: c.bytes_written,
                seconds,
                routes: [("posix", c.posix_write_tasks, c.posix_write_bytes), ("cufile", c.cufile_write_tasks, c.cufile_write_bytes)],
            },
        }
    }

    fn rate(&self, bytes: u64) -> f64 {
        if self.seconds > 0.0 { bytes as f64 / self.seconds / 1e9 } else { 0.0 }
    }

    fn text(&self) -> String {
        let routes: Vec<String> =
            self.routes.iter().map(|(route, tasks, bytes)| format!("{route} {tasks} tasks {} ({:.2} GB/s)", human(*bytes), self.rate(*bytes))).collect();
        format!(
            "  {}: {} calls ({} failed), {} in {:.3} s in flight, {:.2} GB/s; {}\n",
            self.name,
            self.calls,
            self.failed,
            human(self.bytes),
            self.seconds,
            self.rate(self.bytes),
            routes.join(", ")
        )
    }

    fn json(&self) -> String {
        let routes: Vec<String> = self
            .routes
            .iter()
            .map(|(route, tasks, bytes)| format!("\"{route}\":{{\"tasks\":{tasks},\"bytes\":{bytes},\"gb_per_s\":{:.3}}}", self.rate(*bytes)))
            .collect();
        format!(
            "\"{}\":{{\"calls\":{},\"failed\":{},\"bytes\":{},\"seconds_in_flight\":{:.6},\"gb_per_s\":{:.3},{}}}",
            self.name,
            self.calls,
            self.failed,
            self.bytes,
            self.seconds,
            self.rate(self.bytes),
            routes.join(",")
        )
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}

/// The report now, as text for people or as one JSON object.
pub fn render(json: bool) -> String {
    let c = super::process::process_counters();
    let directions = [DirectionLine::of(&c, Direction::Read), DirectionLine::of(&c, Direction::Write)];
    let reasons = [
        ("host_memory", c.posix_tasks_host_memory),
        ("below_gds_threshold", c.posix_tasks_below_threshold),
        ("compat_on", c.posix_tasks_compat_on),
        ("auto_fallback", c.posix_tasks_auto_fallback),
    ];
    let fallbacks = activity::fallbacks();
    let cufile_live = c.cufile_stats_state == CufileStatsState::Active as u64;
    let sections = SECTIONS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if json {
        let mut parts = vec![format!("\"pid\":{}", std::process::id())];
        parts.extend(directions.iter().map(DirectionLine::json));
        parts.push(format!("\"posix_tasks_by_reason\":{{{}}}", reasons.iter().map(|(n, v)| format!("\"{n}\":{v}")).collect::<Vec<_>>().join(",")));
        parts.push(format!("\"files_fallen_back\":{{{}}}", fallbacks.iter().map(|(r, n)| format!("\"{}\":{n}", r.c_name())).collect::<Vec<_>>().join(",")));
        if cufile_live {
            parts.push(format!(
                "\"cufile\":{{\"n_total_reads\":{},\"n_nvfs_reads\":{},\"n_posix_reads\":{},\"n_total_writes\":{},\"n_nvfs_writes\":{},\"n_posix_writes\":{}}}",
                c.cufile_n_total_reads, c.cufile_n_nvfs_reads, c.cufile_n_posix_reads, c.cufile_n_total_writes, c.cufile_n_nvfs_writes, c.cufile_n_posix_writes
            ));
        }
        let sections: Vec<String> = sections
            .iter()
            .map(|(s, counters)| format!("{}:{{{}}}", quote(s), counters.iter().map(|(n, v)| format!("{}:{v}", quote(n))).collect::<Vec<_>>().join(",")))
            .collect();
        parts.push(format!("\"sections\":{{{}}}", sections.join(",")));
        return format!("{{{}}}\n", parts.join(","));
    }
    let mut out = format!("gdsroute report, process {}: {}\n", std::process::id(), c.summary());
    for d in &directions {
        out.push_str(&d.text());
    }
    out.push_str(&format!("  POSIX read tasks by reason: {}\n", reasons.iter().map(|(n, v)| format!("{n} {v}")).collect::<Vec<_>>().join(", ")));
    if !fallbacks.is_empty() {
        out.push_str(&format!("  files whose device transfers fell back: {}\n", fallbacks.iter().map(|(r, n)| format!("{} {n}", r.c_name())).collect::<Vec<_>>().join(", ")));
    }
    if cufile_live {
        out.push_str(&format!(
            "  cuFile's own counters: reads n={} nvfs={} posix={}; writes n={} nvfs={} posix={}\n",
            c.cufile_n_total_reads, c.cufile_n_nvfs_reads, c.cufile_n_posix_reads, c.cufile_n_total_writes, c.cufile_n_nvfs_writes, c.cufile_n_posix_writes
        ));
    }
    for (section, counters) in &sections {
        out.push_str(&format!("  {section}: {}\n", counters.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(" ")));
    }
    out
}

/// `text` as a JSON string.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_a_target() {
        assert_eq!(Target::parse(""), None);
        assert_eq!(Target::parse("off"), None);
        assert_eq!(Target::parse("stderr"), Some(Target::Stderr));
        // The settings' words, in any case, are no file names.
        for off in ["OFF", "false", "No", "0", "None"] {
            assert_eq!(Target::parse(off), None, "{off}");
        }
        for on in ["ON", "true", "Yes", "1", "STDERR"] {
            assert_eq!(Target::parse(on), Some(Target::Stderr), "{on}");
        }
        assert_eq!(Target::parse("/tmp/r-%p.json"), Some(Target::File { template: "/tmp/r-%p.json".into(), json: true }));
        assert_eq!(Target::parse("report.txt"), Some(Target::File { template: "report.txt".into(), json: false }));
    }

    #[test]
    fn sizes_in_words_and_strings_in_json() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 20), "3.00 MiB");
        assert_eq!(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }

    #[test]
    fn the_report_holds_both_directions_and_the_sections() {
        add_counter("test-driver", "opens", 2);
        add_counter("test-driver", "opens", 3);
        let text = render(false);
        assert!(text.starts_with("gdsroute report, process "), "{text}");
        assert!(text.contains("  reads: ") && text.contains("  writes: ") && text.contains("in flight"), "{text}");
        assert!(text.contains("  test-driver: opens=5"), "{text}");
        let json = render(true);
        assert!(json.starts_with("{\"pid\":") && json.contains("\"reads\":{\"calls\":") && json.contains("\"test-driver\":{\"opens\":5}"), "{json}");
    }
}
