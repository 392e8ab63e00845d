//! The library's log: lines a user asks for with `GDSROUTE_LOG_LEVEL` (`off`, the default, or
//! `error`, `warn`, `info`, `debug`), written to stderr or to the file `GDSROUTE_LOG_FILE` names
//! (`%p` becomes the process id, so the ranks of an MPI job, and a forked child, write a file
//! each; opened for appending at a process's first line, so that no file ever appears unless
//! asked for). What is
//! logged: every fallback to the POSIX route with its reason, once per file (info); cuFile's
//! driver open, its properties and the driver settings applied (info); the settings read from the
//! environment (debug) and their errors (warn); errors swallowed during clean-up (error).
//!
//! At the bottom of the layers, beside `trace`: it reads its two variables itself, once, at the
//! first line, and every layer may log. Hand-written rather than the `log` crate: that crate's
//! logger is global to the process, so a Rust program linking gdsroute (or another Rust library
//! in the same process) would have its logger replaced or refused; this log is the library's own.
//! A line: `gdsroute[<pid>] <level> <message>`, written with one `write(2)` so that lines of
//! several threads never interleave.

use once_cell::sync::OnceCell;
use std::io::Write;
use std::sync::Mutex;

/// How much is logged; each level includes those before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// Where lines go.
enum Sink {
    Stderr,
    /// The path as given (`%p` not replaced yet), and the file open for the process that wrote
    /// last, by pid: opened at a process's first line, so that a forked child writes a file of its
    /// own (`None` until then; a file that could not be opened sends lines to stderr).
    File(String, Mutex<Option<(u32, Option<std::fs::File>)>>),
}

struct Log {
    /// Lines of this level and below are written; `None`: off.
    level: Option<Level>,
    sink: Sink,
}

static LOG: OnceCell<Log> = OnceCell::new();

/// The level a `GDSROUTE_LOG_LEVEL` value names (case and surrounding whitespace ignored); `Err`
/// for any other text.
fn parse_level(text: &str) -> Result<Option<Level>, ()> {
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "off" | "0" | "none" => Ok(None),
        "error" => Ok(Some(Level::Error)),
        "warn" | "warning" => Ok(Some(Level::Warn)),
        "info" => Ok(Some(Level::Info)),
        "debug" => Ok(Some(Level::Debug)),
        _ => Err(()),
    }
}

/// `template` with every `%p` replaced by `pid`.
pub(crate) fn with_pid(template: &str, pid: u32) -> String {
    template.replace("%p", &pid.to_string())
}

fn from_env() -> Log {
    let raw = std::env::var("GDSROUTE_LOG_LEVEL").unwrap_or_default();
    let level = parse_level(&raw).unwrap_or_else(|()| {
        // The one line written without being asked: a level nobody can read otherwise.
        let _ = writeln!(std::io::stderr(), "gdsroute: GDSROUTE_LOG_LEVEL={raw:?} is not one of off, error, warn, info, debug; the log stays off");
        None
    });
    let sink = match std::env::var("GDSROUTE_LOG_FILE") {
        Ok(path) if !path.trim().is_empty() => Sink::File(path, Mutex::new(None)),
        _ => Sink::Stderr,
    };
    Log { level, sink }
}

fn log_config() -> &'static Log {
    LOG.get_or_init(from_env)
}

/// Whether lines of `level` are written (cheap after the first call: one load and a compare).
pub(crate) fn enabled(level: Level) -> bool {
    log_config().level.is_some_and(|max| level <= max)
}

/// Writes `message()` at `level` if that level is logged; `message` runs only then.
pub(crate) fn log(level: Level, message: impl FnOnce() -> String) {
    if !enabled(level) {
        return;
    }
    let pid = std::process::id();
    let line = format!("gdsroute[{pid}] {} {}\n", level.name(), message());
    write_line(&log_config().sink, line.as_bytes(), pid);
}

/// Writes `line` of process `pid` (the caller's) to `sink`.
fn write_line(sink: &Sink, line: &[u8], pid: u32) {
    match sink {
        Sink::Stderr => {
            let _ = std::io::stderr().write_all(line);
        }
        Sink::File(template, opened) => {
            let mut opened = opened.lock().unwrap_or_else(|p| p.into_inner());
            if opened.as_ref().is_none_or(|(by, _)| *by != pid) {
                use std::os::unix::fs::OpenOptionsExt;
                let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o644).custom_flags(libc::O_CLOEXEC).open(with_pid(template, pid)).ok();
                *opened = Some((pid, file));
            }
            match opened.as_mut().and_then(|(_, file)| file.as_mut()) {
                // O_APPEND and one write: whole lines, also beside other processes' lines.
                Some(f) => {
                    let _ = f.write_all(line);
                }
                None => {
                    let _ = std::io::stderr().write_all(line);
                }
            }
        }
    }
}

/// Logs an error that a clean-up step swallows (the step goes on): `what` failed with `error`.
pub(crate) fn cleanup_error(what: &str, error: &dyn std::fmt::Display) {
    log(Level::Error, || format!("{what}: {error} (ignored during clean-up)"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_strictly_and_order_by_detail() {
        assert_eq!(parse_level(""), Ok(None));
        assert_eq!(parse_level(" OFF "), Ok(None));
        assert_eq!(parse_level("Info"), Ok(Some(Level::Info)));
        assert_eq!(parse_level("warning"), Ok(Some(Level::Warn)));
        assert_eq!(parse_level("verbose"), Err(()));
        assert_eq!(parse_level("3"), Err(()));
        assert!(Level::Error < Level::Warn && Level::Info < Level::Debug);
    }

    #[test]
    fn a_file_sink_is_opened_at_the_first_line_and_appends_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log-%p.txt");
        let sink = Sink::File(path.to_str().unwrap().into(), Mutex::new(None));
        let expected = dir.path().join("log-42.txt");
        assert!(!expected.exists(), "nothing before the first line");
        write_line(&sink, b"one\n", 42);
        write_line(&sink, b"two\n", 42);
        assert_eq!(std::fs::read_to_string(&expected).unwrap(), "one\ntwo\n");
        // A forked child (another pid) writes a file of its own, not its parent's.
        write_line(&sink, b"child\n", 43);
        assert_eq!(std::fs::read_to_string(dir.path().join("log-43.txt")).unwrap(), "child\n");
        assert_eq!(std::fs::read_to_string(&expected).unwrap(), "one\ntwo\n");
    }
}
