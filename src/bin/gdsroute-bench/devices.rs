//! Reads into several GPUs (`--devices`): through one shared handle, big warm reads of the whole
//! file into each listed GPU alone, then into all of them at once (one caller thread per GPU,
//! released together); every byte verified after each repetition.

use std::sync::Barrier;
use std::time::Instant;

use cudarc::driver::sys;
use gdsroute::Counters;

use crate::args::{Args, Mem};
use crate::buffers::{Buffer, Reference, verify_big};
use crate::capi::{self, Handle, Settings};
use crate::cuda::{self, set_current};
use crate::measure::{self, median};
use crate::report::{self, Outcome};

/// A destination on one GPU: its primary context and a buffer of the file's size.
struct Target {
    device: i32,
    ctx: sys::CUcontext,
    buffer: Buffer,
}

// SAFETY: the context is a retained primary context (usable from any thread once made current
// there) and the buffer a device allocation that only the reading thread touches during a read.
unsafe impl Send for Target {}
// SAFETY: as above; shared references only read the address and the context.
unsafe impl Sync for Target {}

/// `--devices`: refused unless every listed GPU exists; a buffer on each, then the measurements
/// for every setting combination, then the table.
pub fn run(args: Args) -> Result<(), String> {
    let devices = args.devices.clone().unwrap_or_default();
    cuda::available().map_err(|e| format!("--devices needs CUDA: {e}"))?;
    let count = cuda::device_count()?;
    if let Some(missing) = devices.iter().find(|d| **d >= count) {
        return Err(format!(
            "--devices: GPU {missing} does not exist: cuDeviceGetCount reports {count} GPU(s){}",
            if count > 0 { format!(", numbered 0 to {}", count - 1) } else { String::new() }
        ));
    }
    let file_size = capi::read_file_size(&args.file)?;
    let mut targets = Vec::new();
    for &device in &devices {
        let ctx = cuda::context_of(device)?;
        targets.push(Target { device, ctx, buffer: Buffer::new(Mem::Device, file_size as usize)? });
    }
    let mut reference = Reference::new(&args.file);
    reference.get()?;
    let names = devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    println!(
        "# gdsroute-bench {} devices={names} file={} bytes={file_size} reps={} default_settings={} gpus_present={count}",
        env!("CARGO_PKG_VERSION"),
        args.file,
        args.reps,
        args.default_settings,
    );
    let mut results = Vec::new();
    for settings in Settings::matrix(&args) {
        measure_devices(&args, &settings, &mut targets, reference.get()?, &mut results)?;
    }
    if targets.len() == 1 {
        println!("NOTE devices: one GPU listed, so no reads at once (list two or more, e.g. --devices 0,1)");
    }
    if args.table {
        report::print_table(&results);
    }
    Ok(())
}

/// One read of the whole file into a target, from the calling thread (its context made current).
fn read_into(handle: &Handle, target: &Target, size: usize) -> Result<(), String> {
    set_current(target.ctx)?;
    let got = handle.pread(target.buffer.addr(), size, 0)?;
    if got != size {
        return Err(format!("short read into GPU {}: {got} of {size} bytes", target.device));
    }
    Ok(())
}

/// All targets read the whole file at once, one thread each, released together: per target the
/// seconds from its own start to its end, and the wall seconds from the first start to the last
/// end, with the process's CPU seconds over the same span.
fn read_together(handle: &Handle, targets: &[Target], size: usize) -> Result<(Vec<f64>, f64, f64), String> {
    let start = Barrier::new(targets.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = targets
            .iter()
            .map(|target| {
                let start = &start;
                s.spawn(move || -> Result<(Instant, Instant), String> {
                    set_current(target.ctx)?;
                    start.wait();
                    let t0 = Instant::now();
                    read_into(handle, target, size)?;
                    Ok((t0, Instant::now()))
                })
            })
            .collect();
        let cpu0 = measure::cpu_seconds();
        start.wait();
        let spans: Vec<Result<(Instant, Instant), String>> = workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "reader thread panicked".to_string())?)
            .collect();
        let cpu_s = measure::cpu_seconds() - cpu0;
        let spans = spans.into_iter().collect::<Result<Vec<_>, String>>()?;
        let first = spans.iter().map(|s| s.0).min().ok_or("no reader")?;
        let last = spans.iter().map(|s| s.1).max().ok_or("no reader")?;
        let each = spans.iter().map(|(a, b)| b.duration_since(*a).as_secs_f64()).collect();
        Ok((each, last.duration_since(first).as_secs_f64(), cpu_s))
    })
}

/// One setting combination: an untimed read into each GPU (and one at once), then `--reps`
/// timed reads into each GPU alone (a line each), then with two or more GPUs `--reps` timed
/// reads into all at once (a line per GPU and one for all of them together).
fn measure_devices(args: &Args, settings: &Settings, targets: &mut [Target], reference: &[u8], results: &mut Vec<Outcome>) -> Result<(), String> {
    settings.apply()?;
    let size = reference.len();
    set_current(targets[0].ctx)?;
    let handle = Handle::open(&args.file, "r", settings.mode.as_deref())?;
    let (def_mode, threads, task) = capi::current_settings();
    let mode = settings.mode_or(def_mode);
    let all = targets.iter().map(|t| t.device.to_string()).collect::<Vec<_>>().join(",");
    // Steady state: one untimed read into each GPU, then (with several) one at once.
    for target in targets.iter() {
        read_into(&handle, target, size)?;
    }
    if targets.len() > 1 {
        read_together(&handle, targets, size)?;
    }
    let gb = size as f64 / 1e9;
    let mut emit = |devices: &str, device: &str, callers: usize, gbps: &[f64], cpu: f64, route: &str, after: &Counters| {
        let pinned = report::counter_fields(after, |name| name.contains("pinned"));
        let line = format!(
            "RESULT impl=gdsroute mem=device mode={mode} threads={threads} task={task} cache=warm kind=big phase=steady settings={} callers={callers} devices={devices} device={device} {} reads={callers} route={route}{pinned}",
            args.settings_label(),
            report::figures(gbps, "-", cpu),
        );
        report::emit(results, line, gbps, 2, f64::NAN);
    };
    for target in targets.iter_mut() {
        let before = capi::stats();
        let (mut gbps, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..args.reps {
            set_current(target.ctx)?;
            target.buffer.poison()?;
            let ((), secs, cpu_s) = measure::timed(|| read_into(&handle, target, size))?;
            cpu.push(cpu_s / gb);
            set_current(target.ctx)?;
            verify_big(reference, &target.buffer)?;
            gbps.push(gb / secs);
        }
        let after = capi::stats();
        let d = target.device.to_string();
        emit(&d, &d, 1, &gbps, median(&cpu), capi::read_route(&before, &after), &after);
    }
    if targets.len() > 1 {
        let before = capi::stats();
        let mut each: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
        let (mut aggregate, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..args.reps {
            for target in targets.iter_mut() {
                set_current(target.ctx)?;
                target.buffer.poison()?;
            }
            let (secs, wall, cpu_s) = read_together(&handle, targets, size)?;
            for (i, target) in targets.iter().enumerate() {
                set_current(target.ctx)?;
                verify_big(reference, &target.buffer)?;
                each[i].push(gb / secs[i]);
            }
            aggregate.push(gb * targets.len() as f64 / wall);
            cpu.push(cpu_s / (gb * targets.len() as f64));
        }
        let after = capi::stats();
        let route = capi::read_route(&before, &after);
        for (i, target) in targets.iter().enumerate() {
            emit(&all, &target.device.to_string(), targets.len(), &each[i], median(&cpu), route, &after);
        }
        emit(&all, "all", targets.len(), &aggregate, median(&cpu), route, &after);
    }
    set_current(targets[0].ctx)?;
    Ok(())
}
