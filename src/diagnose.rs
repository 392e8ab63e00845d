//! The report a user runs first when reads are slow: which cuFile library loaded (and which
//! paths failed), whether CUDA works, whether real GDS (nvidia-fs) is there, whether the udev
//! database exists, the compat mode and where it came from, and, for a file, the verdict and its
//! reason; it ends with a one-line conclusion (where device reads will go, and why). Used by the
//! C API (`gdsroute_diagnose`) and the `gdsroute-diagnose` CLI, which also takes its exit code
//! and JSON form from here. One job in one file, although over 450 lines: the report's facts
//! and their two renderings (text, JSON) change together, fact by fact.

use crate::sys::cufile::{CufileLibrary, DriverProperties, StatsSupport};
use crate::api::file::File;
use crate::backend::cufile::gds::{self, FallbackReason, Unusable};
use crate::settings::{self, CompatMode, Settings};
use std::os::unix::ffi::OsStrExt;

/// Exit codes of `gdsroute-diagnose` (their numbers in `code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// The report was made.
    Ok,
    /// The command line was wrong (unknown option, more than one FILE).
    Usage,
    /// A `KVIKIO_*`/`GDSROUTE_*` setting is invalid: every read would fail with `INVALID_SETTING`.
    InvalidSettings,
    /// FILE could not be opened for reading.
    FileNotOpenable,
}

impl ExitCode {
    /// The process exit status (the numbers `gdsroute-diagnose --help` lists).
    pub fn code(self) -> i32 {
        match self {
            ExitCode::Ok => 0,
            ExitCode::Usage => 2,
            ExitCode::InvalidSettings => 3,
            ExitCode::FileNotOpenable => 4,
        }
    }
}

/// The C name of a fallback reason, as `include/gdsroute.h` spells it.
pub fn reason_c_name(reason: FallbackReason) -> &'static str {
    reason.c_name()
}

/// Where device reads at or above the GDS threshold go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRoute {
    /// `cuFileRead`.
    Cufile,
    /// Our POSIX backend through pinned bounce buffers (AUTO fallback or compat mode ON).
    PosixBounce,
    /// They fail with `GDSROUTE_STATUS_CUFILE_UNAVAILABLE` (compat mode OFF, cuFile unusable).
    Fail,
}

impl DeviceRoute {
    /// Short name for JSON.
    pub fn name(self) -> &'static str {
        match self {
            DeviceRoute::Cufile => "cufile",
            DeviceRoute::PosixBounce => "posix",
            DeviceRoute::Fail => "fail",
        }
    }
}

/// The verdict for device reads of a file, or of any file on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub route: DeviceRoute,
    /// Why cuFile is not used (`None` on the cuFile route).
    pub reason: Option<FallbackReason>,
    /// The reason's message, or on the cuFile route which path cuFile takes.
    pub detail: String,
}

impl Verdict {
    fn from_probe(mode: CompatMode, probe: Result<String, Unusable>) -> Verdict {
        match probe {
            Ok(detail) => Verdict { route: DeviceRoute::Cufile, reason: None, detail },
            Err(u) => Verdict {
                route: if mode == CompatMode::Off { DeviceRoute::Fail } else { DeviceRoute::PosixBounce },
                reason: Some(u.reason),
                detail: u.message,
            },
        }
    }

    /// "cuFile (...)", "POSIX bounce buffers, because GDSROUTE_FALLBACK_REASON_...: ..." or
    /// "nothing: they fail with GDSROUTE_STATUS_CUFILE_UNAVAILABLE (compat mode OFF), because ...".
    fn describe(&self) -> String {
        let because = self.reason.map(|r| format!("because {}: {}", reason_c_name(r), self.detail)).unwrap_or_default();
        match self.route {
            DeviceRoute::Cufile => format!("cuFile ({})", self.detail),
            DeviceRoute::PosixBounce => format!("POSIX bounce buffers, {because}"),
            DeviceRoute::Fail => {
                format!("nothing: they fail with GDSROUTE_STATUS_CUFILE_UNAVAILABLE (compat mode OFF), {because}")
            }
        }
    }
}

/// Everything the diagnostic found.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    /// The report, line by line (without the conclusion).
    pub lines: Vec<String>,
    /// The settings error, if the environment holds an invalid value.
    pub settings_error: Option<String>,
    /// FILE as given (lossy UTF-8).
    pub file: Option<String>,
    /// Why FILE could not be opened.
    pub file_error: Option<String>,
    /// For FILE if given and opened, else for the machine (with valid settings).
    pub verdict: Option<Verdict>,
}

impl Diagnosis {
    /// One line: where device reads will go and why, or what prevents any read.
    pub fn conclusion(&self) -> String {
        let subject = if self.file.is_some() { "device reads of this file" } else { "device reads on this machine" };
        if let Some(e) = &self.settings_error {
            return format!("{subject}: none, the settings are invalid (every call returns GDSROUTE_STATUS_INVALID_SETTING): {e}");
        }
        if let Some(e) = &self.file_error {
            return format!("{subject}: none, the file cannot be opened: {e}");
        }
        match &self.verdict {
            // Without CUDA there is no device memory to read into: say so rather than name a route.
            Some(v) if v.reason == Some(FallbackReason::CudaUnavailable) => format!(
                "{subject}: none, CUDA is not usable here (GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE: {}); reads into host memory use the POSIX backend",
                v.detail
            ),
            Some(v) => format!("{subject} (requests of at least the GDS threshold) will use: {}", v.describe()),
            None => format!("{subject}: unknown"),
        }
    }

    /// `Ok`, `InvalidSettings` (first) or `FileNotOpenable`.
    pub fn exit_code(&self) -> ExitCode {
        if self.settings_error.is_some() {
            ExitCode::InvalidSettings
        } else if self.file_error.is_some() {
            ExitCode::FileNotOpenable
        } else {
            ExitCode::Ok
        }
    }

    /// The report, then the conclusion, one per line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for line in self.lines.iter().chain(std::iter::once(&self.conclusion())) {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    /// One JSON object: the verdict's fields, the conclusion, the exit code and the report lines.
    pub fn to_json(&self) -> String {
        let opt = |s: Option<&str>| s.map_or("null".to_string(), json_string);
        let verdict = self.verdict.as_ref();
        let fields = [
            ("version", json_string(env!("CARGO_PKG_VERSION"))),
            ("file", opt(self.file.as_deref())),
            ("settings_error", opt(self.settings_error.as_deref())),
            ("file_error", opt(self.file_error.as_deref())),
            ("device_route", opt(verdict.map(|v| v.route.name()))),
            ("fallback_reason", opt(verdict.and_then(|v| v.reason).map(reason_c_name))),
            ("detail", opt(verdict.map(|v| v.detail.as_str()))),
            ("conclusion", json_string(&self.conclusion())),
            ("exit_code", self.exit_code().code().to_string()),
            ("report", format!("[{}]", self.lines.iter().map(|l| json_string(l)).collect::<Vec<_>>().join(","))),
        ];
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Builds the report; `path` adds the per-file verdict. Probing may open the cuFile driver.
pub fn report(path: Option<&[u8]>) -> String {
    diagnose(path).to_text()
}

/// Runs every probe: settings, CUDA, libcufile, udev, the cuFile driver, and FILE if given.
pub fn diagnose(path: Option<&[u8]>) -> Diagnosis {
    let mut d = Diagnosis { lines: vec![format!("gdsroute {}", env!("CARGO_PKG_VERSION"))], ..Diagnosis::default() };
    let settings = settings::global();
    match settings {
        Ok(s) => settings_lines(&mut d.lines, s),
        Err(ref e) => {
            d.lines.push(format!("settings: ERROR {e}"));
            d.settings_error = Some(e.to_string());
        }
    }
    d.lines.push(format!("CUDA driver: {}", crate::sys::cuda::describe()));
    d.lines.push(format!("stream-ordered calls: {}", crate::sys::cuda::describe_stream_wait()));
    library_lines(&mut d.lines);
    let udev = std::path::Path::new("/run/udev").is_dir();
    d.lines.push(format!("/run/udev: {}", if udev { "present" } else { "missing (cuFileHandleRegister fails with 5027 without it)" }));
    let props = driver_lines(&mut d.lines);
    match path {
        Some(path) => file_lines(&mut d, path, props.as_ref()),
        None => {
            if let Ok(s) = settings {
                d.verdict = Some(machine_verdict(s.compat_mode(), props.as_ref()));
            }
        }
    }
    d
}

/// The settings in effect: the compat mode and where it came from first (it decides the route),
/// then every setting of `settings::TABLE` as `doc (NAME, alias ALIAS): value (from SOURCE)`,
/// then the local MPI ranks the default thread count was made for, then what the registered page
/// cache holds now.
fn settings_lines(lines: &mut Vec<String>, s: &Settings) {
    lines.push(format!("compat mode: {} (from {})", s.compat_mode().name(), s.compat_mode_source().name()));
    for setting in &settings::TABLE {
        let aliases: String = setting.aliases.iter().map(|a| format!(", alias {a}")).collect();
        let (value, source) = (s.shown(setting), s.source_shown(setting));
        lines.push(format!("{} ({}{aliases}): {value} (from {source})", setting.doc, setting.name));
    }
    // The ranks the default thread count was shared among, whatever set the count in the end.
    let chosen = settings::thread_default();
    lines.push(format!(
        "local MPI ranks on this node: {}; default thread count {}",
        chosen.describe_ranks(),
        chosen.threads
    ));
    let usage = crate::page_cache::usage();
    let limit = s.page_cache_pin_max();
    lines.push(format!(
        "registered page cache (GDSROUTE_PAGE_CACHE_PIN_MAX): limit {} bytes{}, {} pinned now, {} windows registered, {} refused",
        limit,
        if limit == 0 { " (off)" } else { "" },
        usage.pinned_bytes,
        usage.registrations,
        usage.refusals
    ));
}

/// Which libcufile loads (and the candidates that failed first), and its statistics API.
fn library_lines(lines: &mut Vec<String>) {
    match CufileLibrary::load(None) {
        Ok(lib) => {
            lines.push(format!("libcufile: {} (version {})", lib.path(), lib.version_string()));
            for attempt in lib.failed_attempts() {
                lines.push(format!("  tried first: {} ({})", attempt.candidate, attempt.error));
            }
            lines.push(match lib.stats_support() {
                StatsSupport::Available => "cuFile statistics API: available".to_string(),
                StatsSupport::MissingApi(why) => format!("cuFile statistics API: missing ({why})"),
            });
        }
        Err(e) => lines.push(format!("libcufile: not loadable: {e}")),
    }
}

/// Whether gdsroute opened cuFile's driver, and what it reports of nvidia-fs.
fn driver_lines(lines: &mut Vec<String>) -> Option<DriverProperties> {
    // Every cuFile call holds the gate, so that none runs while shutdown closes the driver.
    let properties = |g: &gds::Gds| match gds::CufileCall::enter() {
        Some(_call) => g.library.properties().map_err(|e| e.to_string()),
        None => Err("cuFile was shut down".to_string()),
    };
    match gds::process() {
        Ok(g) => match properties(g) {
            Ok(p) => {
                lines.push(format!(
                    "cuFile driver: open; nvidia-fs {}.{} -> real GDS (nvfs route) {}; cuFile compat mode {}",
                    p.nvfs_major,
                    p.nvfs_minor,
                    if p.is_gds_available() { "available" } else { "NOT available (cuFile serves reads through its POSIX path)" },
                    if p.compat_mode_allowed() { "allowed" } else { "disallowed" }
                ));
                lines.push(format!(
                    "cuFile driver properties: poll mode {} (threshold {} KiB), max direct I/O {} KiB, device cache {} KiB in buffers of {} KiB, \
                     max pinned {} KiB, batch {} (timeout {} ms), flags status {:#x} control {:#x} features {:#x}",
                    if p.dcontrolflags & 1 != 0 { "on" } else { "off" },
                    p.poll_thresh_size,
                    p.max_direct_io_size,
                    p.max_device_cache_size,
                    p.per_buffer_cache_size,
                    p.max_device_pinned_mem_size,
                    p.max_batch_io_size,
                    p.max_batch_io_timeout_msecs,
                    p.dstatusflags,
                    p.dcontrolflags,
                    p.fflags
                ));
                lines.extend(crate::api::driver::applied_settings().into_iter().map(|s| format!("cuFile driver setting: {s}")));
                Some(p)
            }
            Err(e) => {
                lines.push(format!("cuFile driver: open; properties unavailable: {e}"));
                None
            }
        },
        Err(u) => {
            lines.push(format!("cuFile driver: not used: {}", u.message));
            None
        }
    }
}

/// Which path cuFile itself takes, from its driver's view of nvidia-fs.
fn cufile_path(props: Option<&DriverProperties>) -> &'static str {
    match props {
        Some(p) if p.is_gds_available() => "real GDS through nvidia-fs",
        Some(_) => "no nvidia-fs: cuFile's own POSIX path",
        None => "nvidia-fs state unknown",
    }
}

/// The verdict for device reads of any file on this machine: the process-level half of the
/// probe (compat mode, KvikIO's AUTO environment checks, CUDA, libcufile, the driver).
fn machine_verdict(mode: CompatMode, props: Option<&DriverProperties>) -> Verdict {
    let probe = if mode == CompatMode::On {
        Err(Unusable::compat_on())
    } else {
        let environment = if mode == CompatMode::Auto { gds::auto_environment_check() } else { Ok(()) };
        environment.and_then(|()| gds::process().map(|_| ())).map(|()| {
            format!("{}; each file must also pass cuFileHandleRegister: name it to check", cufile_path(props))
        })
    };
    Verdict::from_probe(mode, probe)
}

/// FILE: whether POSIX reads take direct I/O (when asked for) and the cuFile verdict.
fn file_lines(d: &mut Diagnosis, path: &[u8], props: Option<&DriverProperties>) {
    let shown = String::from_utf8_lossy(path).into_owned();
    d.file = Some(shown.clone());
    if d.settings_error.is_some() {
        d.lines.push(format!("file {shown:?}: not opened (the settings are invalid)"));
        return;
    }
    // Only what a handle reads: a directory has no bytes, and opening a FIFO would wait for a
    // writer.
    if let Ok(meta) = std::fs::metadata(std::ffi::OsStr::from_bytes(path)) {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        if !kind.is_file() && !kind.is_block_device() {
            let what = if kind.is_dir() { "a directory" } else if kind.is_fifo() { "a FIFO" } else { "not a regular file or block device" };
            d.lines.push(format!("file {shown:?}: not read: {what}"));
            d.file_error = Some(format!("{what}, not a regular file or block device"));
            return;
        }
    }
    let file = match File::open(path, "r", 0, None) {
        Ok(f) => f,
        Err(e) => {
            d.lines.push(format!("file {shown:?}: cannot open: {e}"));
            d.file_error = Some(e.to_string());
            return;
        }
    };
    // The O_DIRECT verdict is the file system's, the same for reads and writes.
    let directions = settings::global().map_or((false, false), |s| (s.auto_direct_io_read(), s.auto_direct_io_write()));
    let which = match directions {
        (true, true) => Some("reads and writes"),
        (true, false) => Some("reads"),
        (false, true) => Some("writes"),
        (false, false) => None,
    };
    if let Some(which) = which {
        match file.direct_io_verdict() {
            Ok(Ok(())) => d.lines.push(format!("file {shown:?}: POSIX {which} take page-aligned ranges with direct I/O")),
            Ok(Err(why)) => d.lines.push(format!("file {shown:?}: POSIX {which} go through the page cache ({why})")),
            Err(_) => {}
        }
    }
    let mode = file.compat_mode();
    match file.cufile_verdict() {
        Ok(probe) => {
            let probe = probe.map(|()| {
                let descriptor = file.cufile_descriptor().map(|c| format!("; {c}")).unwrap_or_default();
                format!("{}{descriptor}", cufile_path(props))
            });
            let verdict = Verdict::from_probe(mode, probe);
            d.lines.push(match (&verdict.route, verdict.reason) {
                (DeviceRoute::Cufile, _) => format!("file {shown:?}: device reads >= threshold use cuFile (compat mode {})", mode.name()),
                (route, Some(reason)) => format!(
                    "file {shown:?}: device reads {} (reason {}: {})",
                    if *route == DeviceRoute::Fail { "fail" } else { "use the POSIX backend" },
                    reason_c_name(reason),
                    verdict.detail
                ),
                (_, None) => unreachable!("a fallback always has a reason"),
            });
            if let Some(choice) = file.cufile_descriptor() {
                d.lines.push(format!("  {choice}"));
            }
            d.verdict = Some(verdict);
        }
        Err(e) => {
            d.lines.push(format!("file {shown:?}: cannot open: {e}"));
            d.file_error = Some(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_are_the_headers() {
        let header = include_str!("../include/gdsroute.h");
        for (reason, value) in [
            (FallbackReason::None, 0),
            (FallbackReason::CompatOn, 1),
            (FallbackReason::CudaUnavailable, 2),
            (FallbackReason::LibraryUnavailable, 3),
            (FallbackReason::NoUdev, 4),
            (FallbackReason::Wsl, 5),
            (FallbackReason::DriverOpenFailed, 6),
            (FallbackReason::DirectOpenFailed, 7),
            (FallbackReason::RegisterFailed, 8),
        ] {
            assert_eq!(reason as u32, value);
            let line = format!("  {} = {value},", reason_c_name(reason));
            assert!(header.contains(&line), "the header lacks {line:?}");
        }
    }

    #[test]
    fn conclusions_and_exit_codes() {
        let posix = Verdict { route: DeviceRoute::PosixBounce, reason: Some(FallbackReason::NoUdev), detail: "/run/udev is not a directory".into() };
        let mut d = Diagnosis { file: Some("f".into()), verdict: Some(posix), ..Diagnosis::default() };
        assert_eq!(
            d.conclusion(),
            "device reads of this file (requests of at least the GDS threshold) will use: POSIX bounce buffers, \
             because GDSROUTE_FALLBACK_REASON_NO_UDEV: /run/udev is not a directory"
        );
        assert_eq!(d.exit_code(), ExitCode::Ok);
        d.verdict = Some(Verdict { route: DeviceRoute::Cufile, reason: None, detail: "real GDS through nvidia-fs".into() });
        assert!(d.conclusion().ends_with("will use: cuFile (real GDS through nvidia-fs)"), "{}", d.conclusion());
        d.verdict = Some(Verdict { route: DeviceRoute::Fail, reason: Some(FallbackReason::LibraryUnavailable), detail: "no libcufile".into() });
        assert!(d.conclusion().contains("fail with GDSROUTE_STATUS_CUFILE_UNAVAILABLE (compat mode OFF), because GDSROUTE_FALLBACK_REASON_LIBRARY_UNAVAILABLE: no libcufile"));
        d.verdict = Some(Verdict { route: DeviceRoute::PosixBounce, reason: Some(FallbackReason::CudaUnavailable), detail: "no libcuda".into() });
        assert_eq!(
            d.conclusion(),
            "device reads of this file: none, CUDA is not usable here (GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE: no libcuda); \
             reads into host memory use the POSIX backend"
        );
        d.file_error = Some("No such file".into());
        assert_eq!(d.exit_code(), ExitCode::FileNotOpenable);
        assert_eq!(d.conclusion(), "device reads of this file: none, the file cannot be opened: No such file");
        d.settings_error = Some("KVIKIO_TASK_SIZE".into());
        assert_eq!(d.exit_code(), ExitCode::InvalidSettings);
        assert!(d.to_text().ends_with("(every call returns GDSROUTE_STATUS_INVALID_SETTING): KVIKIO_TASK_SIZE\n"));
        let json = d.to_json();
        assert!(json.contains("\"exit_code\":3,") && json.contains("\"fallback_reason\":\"GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE\""), "{json}");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
