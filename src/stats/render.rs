//! Rendering of `gdsroute_stats` for `gdsroute_stats_render`: text for people (a summary in
//! words, then the counters that are not 0) and JSON (every field), each stopping at the
//! caller's `struct_size`; and the pieces the device rendering (`device`) shares with it.

use super::{Counters, CufileStatsState, NumaPlacement};

/// Fields (from the start of the layout) the summary line reads: up to `cufile_stats_state`.
const SUMMARY_FIELDS: usize = 18;
/// Fields up to `cufile_n_reads_err`, which the per-GPU line reads.
const CUFILE_FIELDS: usize = 24;

pub(super) fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Bytes in binary units: "512 bytes", "4 KiB", "1.5 MiB", "128 MiB".
pub(super) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return plural(n, "byte");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 || value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `name_of(value)` of each enumeration a counters field holds as a `u64`: the variant's meaning
/// in a few words, "unknown" for a value of no variant (a C caller's struct may hold anything).
macro_rules! words_of_values {
    ($($T:ident { $($variant:ident => $words:literal,)* })*) => {$(
        impl $T {
            /// The meaning in a few words of a value of this enumeration.
            pub fn name_of(value: u64) -> &'static str {
                $(if value == Self::$variant as u64 {
                    return $words;
                })*
                "unknown"
            }
        }
    )*};
}

words_of_values! {
    CufileStatsState {
        NotLoaded => "cuFile not loaded",
        ApiMissing => "no cuFile statistics API",
        Active => "live",
        ProcessWideOnly => "process-wide only",
        Disabled => "collection disabled",
    }
    NumaPlacement {
        NoBuffers => "no bounce buffers yet",
        Placed => "placed",
        NodeUnknown => "not placed: the machine does not say the device's NUMA node",
        Refused => "not placed: the kernel refused the placement",
    }
}

/// The meaning in words of a field that holds a state (`cufile_stats_state`,
/// `bounce_numa_placement`), for the text renderings.
fn meaning(name: &str, value: u64) -> Option<&'static str> {
    match name {
        "cufile_stats_state" => Some(CufileStatsState::name_of(value)),
        "bounce_numa_placement" => Some(NumaPlacement::name_of(value)),
        _ => None,
    }
}

/// `{indent}name value` for each of `counters` that is not 0 (a state with its meaning), then a
/// line saying how many are 0.
pub(super) fn counter_lines(out: &mut String, counters: &[(&str, u64)], indent: &str) {
    for &(name, value) in counters.iter().filter(|(_, v)| *v != 0) {
        match meaning(name, value) {
            Some(meaning) => out.push_str(&format!("{indent}{name:<28} {value} ({meaning})\n")),
            None => out.push_str(&format!("{indent}{name:<28} {value}\n")),
        }
    }
    let zeros = counters.iter().filter(|(_, v)| *v == 0).count();
    if zeros > 0 {
        out.push_str(&format!("{indent}({zeros} other counters are 0; the JSON format lists every field)\n"));
    }
}

/// One JSON object of the fields given.
pub(super) fn json_object(fields: impl Iterator<Item = (&'static str, u64)>) -> String {
    let body: Vec<String> = fields.map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", body.join(","))
}

impl Counters {
    /// Text for people: a summary in words (`summary`), then `name value` for each counter that
    /// is not 0, then how many are 0, and cuFile's per-GPU counters on one line when they are
    /// live. Only the fields a struct of `struct_size` bytes holds are shown; `struct_size` itself
    /// is not (JSON has every field).
    pub fn text_within(&self, struct_size: u64) -> String {
        let held: Vec<(&str, u64)> = self.entries_held(struct_size).collect();
        let mut out = String::new();
        if held.len() >= SUMMARY_FIELDS {
            out.push_str(&self.summary());
            out.push('\n');
        }
        let counters: Vec<(&str, u64)> = held.iter().copied().filter(|(name, _)| *name != "struct_size").collect();
        counter_lines(&mut out, &counters, "");
        if held.len() >= CUFILE_FIELDS && self.cufile_stats_state == CufileStatsState::Active as u64 {
            out.push_str(&format!(
                "cufile per-GPU: n={} nvfs={} posix={} p2p={} unaligned={} err={}\n",
                self.cufile_n_total_reads,
                self.cufile_n_nvfs_reads,
                self.cufile_n_posix_reads,
                self.cufile_n_p2p_reads,
                self.cufile_n_unaligned_reads,
                self.cufile_n_reads_err
            ));
        }
        out
    }

    /// One line in words: reads, bytes, tasks, which route(s) the tasks took and why, and whether
    /// cuFile was considered, e.g. "2 reads, 128 MiB, 17 tasks, all through the POSIX backend:
    /// host memory; cuFile not considered".
    pub fn summary(&self) -> String {
        let reads = self.read_summary();
        let streams = self.stream_summary();
        if self.write_calls == 0 && self.write_tasks == 0 {
            return format!("{reads}{streams}");
        }
        let mut writes = format!("{}, {}, {}", plural(self.write_calls, "write"), human_bytes(self.bytes_written), plural(self.write_tasks, "write task"));
        if self.write_calls_failed > 0 {
            writes.push_str(&format!(", {} failed", self.write_calls_failed));
        }
        match (self.posix_write_tasks, self.cufile_write_tasks) {
            (0, 0) => {}
            (_, 0) => writes.push_str(", all through the POSIX backend"),
            (0, _) => writes.push_str(", all through cuFile"),
            (p, c) => writes.push_str(&format!(", {c} through cuFile and {p} through the POSIX backend")),
        }
        format!("{reads}; {writes}{streams}")
    }

    /// How the stream-ordered calls ran, as "; N stream-ordered calls: ..." (empty without any).
    fn stream_summary(&self) -> String {
        let blocking = self.stream_calls_blocking_no_stream_wait + self.stream_calls_blocking_setting + self.stream_calls_blocking_legacy_waits;
        let total = self.stream_calls_ordered + self.stream_calls_relayed + self.stream_calls_cufile_async + blocking;
        if total == 0 {
            return String::new();
        }
        let mut out = format!("; {}: {} queued on their streams", plural(total, "stream-ordered call"), self.stream_calls_ordered + self.stream_calls_relayed);
        if self.stream_calls_relayed > 0 {
            out.push_str(&format!(" ({} relayed: their bytes moved by the stream itself)", self.stream_calls_relayed));
        }
        if self.stream_calls_cufile_async > 0 {
            out.push_str(&format!(", {} through cuFileReadAsync/WriteAsync", self.stream_calls_cufile_async));
        }
        if blocking > 0 {
            let why: Vec<String> = [
                (self.stream_calls_blocking_no_stream_wait, "no stream wait"),
                (self.stream_calls_blocking_setting, "setting off"),
                (self.stream_calls_blocking_legacy_waits, "a stream the legacy stream waits for"),
            ]
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
            out.push_str(&format!(", {blocking} blocking ({})", why.join(", ")));
        }
        out
    }

    /// The reads' part of `summary`.
    fn read_summary(&self) -> String {
        if self.calls == 0 && self.tasks == 0 {
            return "no reads".to_string();
        }
        let mut out = format!("{}, {}, {}", plural(self.calls, "read"), human_bytes(self.bytes_read), plural(self.tasks, "task"));
        if self.calls_failed > 0 {
            out.push_str(&format!(", {} failed", self.calls_failed));
        }
        if self.calls_short > 0 {
            out.push_str(&format!(", {} short (end of file)", self.calls_short));
        }
        let reasons: Vec<(u64, &str)> = [
            (self.posix_tasks_host_memory, "host memory"),
            (self.posix_tasks_below_threshold, "device requests below the GDS threshold"),
            (self.posix_tasks_compat_on, "compat mode ON"),
            (self.posix_tasks_auto_fallback, "cuFile cannot serve the file (AUTO fallback)"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .collect();
        let why = match reasons.as_slice() {
            [(_, only)] => only.to_string(),
            several => several.iter().map(|(n, what)| format!("{what} {n}")).collect::<Vec<_>>().join(", "),
        };
        let cufile_route = if self.cufile_stats_state == CufileStatsState::Active as u64 && self.cufile_n_total_reads > 0 {
            format!(" (cuFile's own route: nvfs {}, posix {}, of {} reads)", self.cufile_n_nvfs_reads, self.cufile_n_posix_reads, self.cufile_n_total_reads)
        } else {
            String::new()
        };
        match (self.posix_tasks, self.cufile_tasks) {
            (0, 0) => {}
            (_, 0) => out.push_str(&format!(", all through the POSIX backend: {why}")),
            (0, _) => out.push_str(&format!(", all through cuFile{cufile_route}")),
            (p, c) => out.push_str(&format!(", {c} through cuFile{cufile_route} and {p} through the POSIX backend: {why}")),
        }
        if self.cufile_tasks == 0 && self.posix_tasks > 0 {
            out.push_str(if self.posix_tasks_auto_fallback > 0 {
                "; cuFile was tried and cannot serve the file (gdsroute_file_cufile_verdict says why)"
            } else {
                "; cuFile not considered"
            });
        }
        out
    }

    /// `text_within` of the whole struct.
    pub fn to_text(&self) -> String {
        self.text_within(Self::SIZE)
    }

    /// `json_within` of the whole struct: one JSON object with every field.
    pub fn to_json(&self) -> String {
        self.json_within(Self::SIZE)
    }

    /// One JSON object with every field a struct of `struct_size` bytes holds.
    pub fn json_within(&self, struct_size: u64) -> String {
        json_object(self.entries_held(struct_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Direction, PosixReason, Route, TaskOutcome};

    fn host_reads() -> Counters {
        let mut c = Counters { struct_size: Counters::SIZE, ..Counters::default() };
        for _ in 0..17 {
            c.add_task(Direction::Read, Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 8 << 20, ..TaskOutcome::default() }, false);
        }
        c.add_call(Direction::Read, 64 << 20, 64 << 20, false);
        c.add_call(Direction::Read, 72 << 20, 72 << 20, false);
        c
    }

    #[test]
    fn summary_says_route_and_why_in_words() {
        assert_eq!(
            host_reads().summary(),
            "2 reads, 136 MiB, 17 tasks, all through the POSIX backend: host memory; cuFile not considered"
        );
        assert_eq!(Counters::default().summary(), "no reads");
        let mut c = Counters::default();
        c.add_task(Direction::Read, Route::Posix(PosixReason::AutoFallback), &TaskOutcome { bytes: 4096, ..TaskOutcome::default() }, false);
        c.add_task(Direction::Read, Route::Posix(PosixReason::BelowThreshold), &TaskOutcome { bytes: 100, ..TaskOutcome::default() }, false);
        c.add_call(Direction::Read, 8192, 4196, false);
        assert_eq!(
            c.summary(),
            "1 read, 4.1 KiB, 2 tasks, 1 short (end of file), all through the POSIX backend: device requests below the \
             GDS threshold 1, cuFile cannot serve the file (AUTO fallback) 1; cuFile was tried and cannot serve the file \
             (gdsroute_file_cufile_verdict says why)"
        );
        let mut c = Counters { cufile_stats_state: CufileStatsState::Active as u64, cufile_n_total_reads: 3, cufile_n_nvfs_reads: 3, ..Counters::default() };
        for _ in 0..3 {
            c.add_task(Direction::Read, Route::Cufile, &TaskOutcome { bytes: 1 << 30, ..TaskOutcome::default() }, false);
        }
        c.add_task(Direction::Read, Route::Posix(PosixReason::BelowThreshold), &TaskOutcome::default(), true);
        c.add_call(Direction::Read, 3 << 30, 3 << 30, false);
        c.add_call(Direction::Read, 10, 0, true);
        assert_eq!(
            c.summary(),
            "2 reads, 3 GiB, 4 tasks, 1 failed, 3 through cuFile (cuFile's own route: nvfs 3, posix 0, of 3 reads) and 1 \
             through the POSIX backend: device requests below the GDS threshold"
        );
    }

    #[test]
    fn text_leads_with_the_summary_and_lists_only_counters_not_zero() {
        let text = host_reads().to_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], host_reads().summary());
        let nonzero = host_reads().entries().iter().filter(|(n, v)| *v != 0 && *n != "struct_size").count();
        assert_eq!(lines.len(), 1 + nonzero + 1, "{text}");
        assert!(lines[1..=nonzero].iter().all(|l| !l.ends_with(" 0")), "{text}");
        assert!(lines[1].starts_with("calls ") && text.contains("posix_tasks_host_memory      17\n"), "{text}");
        let zeros = Counters::default().entries().len() - 1 - nonzero;
        assert_eq!(lines[nonzero + 1], format!("({zeros} other counters are 0; the JSON format lists every field)"));
        // JSON keeps every field, zeros too.
        assert_eq!(host_reads().to_json().matches(':').count(), Counters::default().entries().len());
        let live = Counters { cufile_stats_state: CufileStatsState::Active as u64, ..host_reads() };
        assert!(live.to_text().contains("\ncufile_stats_state           2 (live)\n"), "{}", live.to_text());
        assert!(live.to_text().ends_with("cufile per-GPU: n=0 nvfs=0 posix=0 p2p=0 unaligned=0 err=0\n"));
    }

    #[test]
    fn rendering_stops_at_the_callers_struct_size() {
        let c = host_reads();
        assert_eq!(c.json_within(24), format!("{{\"struct_size\":{},\"calls\":2,\"calls_failed\":0}}", Counters::SIZE));
        // A field cut by struct_size is not rendered; a size beyond the layout renders the layout.
        assert_eq!(c.entries_held(31).count(), 3);
        assert_eq!(c.entries_held(Counters::SIZE + 64).count(), c.entries().len());
        // Too small for the summary: only the counters held, not the zeros the caller lacks.
        assert_eq!(c.text_within(24), "calls                        2\n(1 other counters are 0; the JSON format lists every field)\n");
        assert!(!c.text_within(40).contains("tasks"), "{}", c.text_within(40));
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1), "1 byte");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes((1 << 30) + (1 << 29)), "1.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16 EiB");
    }
}
