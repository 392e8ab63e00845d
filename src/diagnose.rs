//! The report a user runs first when reads are slow: which cuFile library loaded (and which
//! paths failed), whether CUDA works, whether real GDS (nvidia-fs) is there, whether the udev
//! database exists, the compat mode and where it came from, and, for a file, the verdict and its
//! reason. Used by the C API and the `gdsroute-diagnose` CLI.

use crate::cufile::{CufileLibrary, StatsSupport};
use crate::file::File;
use crate::gds;
use crate::settings;
use std::fmt::Write;

/// Builds the report; `path` adds the per-file verdict. Probing may open the cuFile driver.
pub fn report(path: Option<&[u8]>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gdsroute {}", env!("CARGO_PKG_VERSION"));
    match settings::global() {
        Ok(s) => {
            let _ = writeln!(out, "compat mode: {} (from {})", s.compat_mode().name(), s.compat_mode_source().name());
            let snap = s.snapshot();
            let _ = writeln!(
                out,
                "threads: {}  task size: {}  GDS threshold: {}  bounce buffer: {}",
                s.num_threads(),
                snap.task_size,
                snap.gds_threshold,
                snap.bounce_buffer_size
            );
            let _ = writeln!(out, "cuFile statistics collection: {}", if s.cufile_stats() { "on" } else { "off (GDSROUTE_CUFILE_STATS)" });
            let _ = writeln!(out, "cuFile descriptor (GDSROUTE_CUFILE_FD): {}", s.cufile_fd().name());
            let _ = writeln!(
                out,
                "direct I/O for POSIX reads (KVIKIO_AUTO_DIRECT_IO_READ): {}",
                if snap.direct_io_read { "on (page-aligned ranges bypass the page cache)" } else { "off" }
            );
            let usage = crate::page_cache::usage();
            let _ = writeln!(
                out,
                "registered page cache (GDSROUTE_PAGE_CACHE_PIN_MAX): limit {} bytes{}, {} pinned now, {} windows registered, {} refused",
                snap.page_cache_pin_max,
                if snap.page_cache_pin_max == 0 { " (off)" } else { "" },
                usage.pinned_bytes,
                usage.registrations,
                usage.refusals
            );
        }
        Err(e) => {
            let _ = writeln!(out, "settings: ERROR {e}");
        }
    }
    let _ = writeln!(out, "CUDA driver: {}", crate::cuda::describe());
    match CufileLibrary::load(None) {
        Ok(lib) => {
            let _ = writeln!(out, "libcufile: {} (version {})", lib.path(), lib.version_string());
            for attempt in lib.failed_attempts() {
                let _ = writeln!(out, "  tried first: {} ({})", attempt.candidate, attempt.error);
            }
            match lib.stats_support() {
                StatsSupport::Available => {
                    let _ = writeln!(out, "cuFile statistics API: available");
                }
                StatsSupport::MissingApi(why) => {
                    let _ = writeln!(out, "cuFile statistics API: missing ({why})");
                }
            }
        }
        Err(e) => {
            let _ = writeln!(out, "libcufile: not loadable: {e}");
        }
    }
    let udev = std::path::Path::new("/run/udev").is_dir();
    let _ = writeln!(out, "/run/udev: {}", if udev { "present" } else { "missing (cuFileHandleRegister fails with 5027 without it)" });
    match gds::process() {
        Ok(g) => {
            let props = g.library.properties();
            match props {
                Ok(p) => {
                    let _ = writeln!(
                        out,
                        "cuFile driver: open; nvidia-fs {}.{} -> real GDS (nvfs route) {}; cuFile compat mode {}",
                        p.nvfs_major,
                        p.nvfs_minor,
                        if p.is_gds_available() { "available" } else { "NOT available (cuFile serves reads through its POSIX path)" },
                        if p.compat_mode_allowed() { "allowed" } else { "disallowed" }
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "cuFile driver: open; properties unavailable: {e}");
                }
            }
        }
        Err(u) => {
            let _ = writeln!(out, "cuFile driver: not used: {}", u.message);
        }
    }
    if let Some(path) = path {
        let shown = String::from_utf8_lossy(path);
        let file = File::open(path, "r", 0, None);
        let direct_io_wanted = settings::global().is_ok_and(|s| s.auto_direct_io_read());
        if let (true, Ok(Ok(verdict))) = (direct_io_wanted, file.as_ref().map(File::direct_io_verdict)) {
            match verdict {
                Ok(()) => {
                    let _ = writeln!(out, "file {shown:?}: POSIX reads take page-aligned ranges with direct I/O");
                }
                Err(why) => {
                    let _ = writeln!(out, "file {shown:?}: POSIX reads go through the page cache ({why})");
                }
            }
        }
        match file.and_then(|f| f.cufile_verdict().map(|v| (f.compat_mode(), v, f.cufile_descriptor()))) {
            Ok((mode, Ok(()), choice)) => {
                let _ = writeln!(out, "file {shown:?}: device reads >= threshold use cuFile (compat mode {})", mode.name());
                if let Some(choice) = choice {
                    let _ = writeln!(out, "  {choice}");
                }
            }
            Ok((mode, Err(u), _)) => {
                let verb = if mode == settings::CompatMode::Off { "fail" } else { "use the POSIX backend" };
                let _ = writeln!(out, "file {shown:?}: device reads {verb} (reason {:?}: {})", u.reason, u.message);
            }
            Err(e) => {
                let _ = writeln!(out, "file {shown:?}: cannot open: {e}");
            }
        }
    }
    out
}
