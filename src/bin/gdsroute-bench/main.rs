//! `gdsroute-bench --file PATH [options]`: reads a file into device (or host) memory through the
//! C API (`gdsroute_file_pread` + `gdsroute_op_wait`, called from Rust) and prints one
//! `RESULT impl=gdsroute ...` line per measurement (`impl=gdsroute-mapping` through a mapping
//! handle, `--mapping`), then a table. `--write` measures writes
//! (`gdsroute_file_pwrite` + `gdsroute_op_wait`) from device (or host) memory instead, and
//! `--ceiling`/`--ceiling-direct` what plain `pwrite` from pinned memory reaches on the same file
//! system (`RESULT impl=ceiling`); `--devices` reads into several GPUs at once. Method:
//! docs/performance.md. `tools/gpu/bench-kvikio.py` prints the same lines for KvikIO.
//!
//! The modules: `args` (the command line), `capi` (the library's C API: handles, settings,
//! counters), `cuda` (the driver, called directly), `buffers` (device, host and pinned memory,
//! filling and verifying it), `measure` (timing and repetitions), `report` (RESULT lines and the
//! table), and one per kind of run: `reads`, `writes` (with the plain-`pwrite` ceilings),
//! `devices` (reads into several GPUs).

mod args;
mod buffers;
mod capi;
mod cuda;
mod devices;
mod measure;
mod reads;
mod report;
mod writes;

fn run() -> Result<(), String> {
    let args = args::parse_args()?;
    if args.devices.is_some() {
        return devices::run(args);
    }
    if args.write {
        return writes::run(args);
    }
    reads::run(args)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("gdsroute-bench: {e}");
        if e.contains("required") || e.contains("argument") || e.contains("takes one value") {
            eprintln!("{}", args::USAGE);
        }
        std::process::exit(1);
    }
}
