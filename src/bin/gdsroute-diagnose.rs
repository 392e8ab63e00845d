//! `gdsroute-diagnose [--json] [FILE]`: prints how gdsroute would route reads on this machine (and
//! for FILE): cuFile library and version, CUDA, GDS availability, udev, compat mode, the file's
//! verdict and its reason, and a one-line conclusion. Exit codes in `USAGE`.

use gdsroute::diagnose::{self, ExitCode};
use std::ffi::OsString;
use std::io::Write;

const USAGE: &str = "\
usage: gdsroute-diagnose [--json] [--] [FILE]

Explains how gdsroute routes reads on this machine: the settings (KVIKIO_*, GDSROUTE_*), CUDA,
libcufile, the udev database, cuFile's driver and nvidia-fs, and, for FILE, whether device reads
of it go through cuFile or gdsroute's POSIX backend, and why. The last line is the conclusion:
where device reads (of FILE, or of any file) will go. Probing may load libcuda and libcufile and
open cuFile's driver.

options:
  --json       one JSON object instead of text (the conclusion, the verdict's route, reason and
               detail, the exit code, and the report's lines)
  -h, --help   this help
  --           ends the options (for a FILE starting with '-')

exit codes:
  0  the report was made
  2  usage error (unknown option, more than one FILE)
  3  a setting is invalid (every read would fail with GDSROUTE_STATUS_INVALID_SETTING)
  4  FILE cannot be opened for reading
";

#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Diagnose { json: bool, file: Option<OsString> },
}

fn parse(args: impl Iterator<Item = OsString>) -> Result<Command, String> {
    let mut json = false;
    let mut file: Option<OsString> = None;
    let mut options_done = false;
    for arg in args {
        let is_option = !options_done && arg.len() > 1 && arg.as_encoded_bytes().starts_with(b"-");
        if is_option {
            match arg.to_str() {
                Some("--") => options_done = true,
                Some("-h" | "--help") => return Ok(Command::Help),
                Some("--json") => json = true,
                _ => return Err(format!("unknown option {arg:?}")),
            }
        } else if let Some(first) = &file {
            return Err(format!("one FILE at most: {first:?} and {arg:?} given"));
        } else {
            file = Some(arg);
        }
    }
    Ok(Command::Diagnose { json, file })
}

fn main() {
    // SAFETY: first thing in main, before any thread of ours or the library's starts. Probing a
    // FILE opens a handle, which would arm the application's exit report and overwrite it.
    unsafe { std::env::remove_var("GDSROUTE_REPORT") };
    let code = match parse(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print!("{USAGE}");
            ExitCode::Ok
        }
        Ok(Command::Diagnose { json, file }) => {
            let path = file.map(OsString::into_encoded_bytes);
            let d = diagnose::diagnose(path.as_deref());
            let text = if json { format!("{}\n", d.to_json()) } else { d.to_text() };
            // A reader that went away (`| head`) is no error of ours: no panic, the same code.
            let _ = std::io::stdout().write_all(text.as_bytes());
            d.exit_code()
        }
        Err(message) => {
            eprintln!("gdsroute-diagnose: {message}\n{}", USAGE.lines().next().unwrap_or_default());
            eprintln!("(gdsroute-diagnose --help for more)");
            ExitCode::Usage
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code.code());
}
