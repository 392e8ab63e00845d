//! The command line: the usage text, what each flag holds and which combinations are refused.

pub const USAGE: &str = "\
usage: gdsroute-bench --file PATH [options]
  --threads LIST        pool threads, e.g. 1,4,8,16 (default 1,4,8,16)
  --task-sizes LIST     task sizes in bytes (default 4194304)
  --modes LIST          per-handle compat mode: on,auto,off (default on,auto)
  --mem LIST            device,host (default device,host; device needs CUDA)
  --kinds LIST          big,rand4k,rand64k (default big)
  --cache LIST          warm,cold (default warm; cold needs root to drop caches)
  --reps N              timed repetitions per measurement, median reported (default 5)
  --rand-reads N        reads per random-read repetition (default 8192)
  --callers N           caller threads issuing the random reads (default 4)
  --first-only          one timed read in this (fresh) process, then exit; one value per list
  --default-settings    touch no setting (threads, task size, compat mode: the library's defaults)
  --prime-gpu           before the timed reads, copy 256 MiB host->device without the library
                        (separates the GPU's and the link's own warm-up from the library's)
  --no-table            skip the table at the end
  --mapping             read through a mapping handle of the whole file (gdsroute_mapping_pread,
                        the task size setting) instead of gdsroute_file_pread (RESULT
                        impl=gdsroute-mapping route=mapping; the mode only opens the file handle)
writes (--write): --file names the file written; it is created, rewritten and removed at the end,
and must not exist unless --overwrite is given
  --write               measure writes from device (or host) memory instead of reads: one
                        gdsroute_file_pwrite of --size bytes at offset 0 per repetition
  --size BYTES          bytes written (default 1073741824)
  --open LIST           w: a new file per repetition (removed before it); r+: rewrite the file,
                        written once before (default w,r+)
  --sync                after each timed write, gdsroute_file_sync, timed apart (sync_s)
  --fs NAME             file-system label of the lines (default: shm on tmpfs, else disk)
  --ceiling LIST        instead of the library: plain pwrite from pinned memory (cuMemHostAlloc;
                        pageable without CUDA), each of LIST threads writing its contiguous share
                        in 4 MiB pieces (RESULT impl=ceiling)
  --ceiling-direct LIST the same through an O_DIRECT descriptor
  --overwrite           allow --file to exist already (it is truncated, then removed)
  direct-I/O writes are a library setting (KVIKIO_AUTO_DIRECT_IO_WRITE); the lines report the
  variable as direct_write (0, 1, or default when it is unset)
reads into several GPUs:
  --devices LIST        e.g. 0,1: big warm reads into a buffer on each listed GPU at once, one
                        caller thread per GPU and one shared handle, then into each GPU alone;
                        refused if a listed GPU does not exist
environment (first-read experiments, milliseconds or bytes):
  BENCH_OPEN_SLEEP_MS   wait after opening the file, before allocating the destination
  BENCH_ALLOC_SLEEP_MS  wait after allocating the destination
  BENCH_PRIME_BYTES     bytes --prime-gpu copies (default 256 MiB)
  BENCH_PRIME_SLEEP_MS  wait after --prime-gpu's copy";

/// Where the data is read into or written from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mem {
    Device,
    Host,
}

impl Mem {
    /// The `mem=` value of the lines.
    pub fn name(self) -> &'static str {
        match self {
            Mem::Device => "device",
            Mem::Host => "host",
        }
    }
}

/// A read workload: the whole file in one read, or random reads of one size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Big,
    Rand(usize),
}

impl Kind {
    /// The `kind=` value of the lines.
    pub fn name(self) -> String {
        match self {
            Kind::Big => "big".into(),
            Kind::Rand(size) => format!("rand{}k", size >> 10),
        }
    }
}

/// How a write measurement opens its file: `w` (a new file for every repetition) or `r+` (the
/// same file, its pages in the page cache, rewritten).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Open {
    New,
    Rewrite,
}

impl Open {
    /// The flags given to `gdsroute_file_open`, and the `open=` value of the lines.
    pub fn flag(self) -> &'static str {
        match self {
            Open::New => "w",
            Open::Rewrite => "r+",
        }
    }
}

pub struct Args {
    pub file: String,
    pub threads: Vec<usize>,
    pub task_sizes: Vec<usize>,
    pub modes: Vec<String>,
    pub mems: Vec<Mem>,
    pub kinds: Vec<Kind>,
    pub caches: Vec<String>,
    pub reps: usize,
    pub rand_reads: usize,
    pub callers: usize,
    pub first_only: bool,
    pub default_settings: bool,
    pub prime_gpu: bool,
    pub mapping: bool,
    pub table: bool,
    pub write: bool,
    pub size: usize,
    pub opens: Vec<Open>,
    pub sync: bool,
    pub fs: Option<String>,
    pub ceiling: Option<Vec<usize>>,
    pub ceiling_direct: Option<Vec<usize>>,
    pub overwrite: bool,
    pub devices: Option<Vec<i32>>,
}

impl Args {
    /// `--ceiling` or `--ceiling-direct`: plain-`pwrite` ceilings instead of the library's writes.
    pub fn ceiling(&self) -> bool {
        self.ceiling.is_some() || self.ceiling_direct.is_some()
    }

    /// The `settings=` value of the library's lines: `default` (`--default-settings`) or `set`.
    pub fn settings_label(&self) -> &'static str {
        if self.default_settings { "default" } else { "set" }
    }
}

fn list<T>(value: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let items: Result<Vec<T>, String> = value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| parse(s.trim()))
        .collect();
    let items = items?;
    if items.is_empty() {
        return Err(format!("empty list {value:?}"));
    }
    Ok(items)
}

fn number(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .map_err(|_| format!("not a number: {s:?}"))
}

/// A parser of one of `choices` (name, value); anything else is refused as `WHAT "x": a, b or c`.
fn one_of<T: Copy>(what: &str, choices: &[(&str, T)]) -> impl Fn(&str) -> Result<T, String> {
    move |s| {
        if let Some((_, v)) = choices.iter().find(|(name, _)| *name == s) {
            return Ok(*v);
        }
        let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
        let listed = match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.concat(),
        };
        Err(format!("{what} {s:?}: {listed}"))
    }
}

/// The process's arguments; `--help` prints the usage and exits.
pub fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        file: String::new(),
        threads: vec![1, 4, 8, 16],
        task_sizes: vec![4 << 20],
        modes: vec!["on".into(), "auto".into()],
        mems: vec![Mem::Device, Mem::Host],
        kinds: vec![Kind::Big],
        caches: vec!["warm".into()],
        reps: 5,
        rand_reads: 8192,
        callers: 4,
        first_only: false,
        default_settings: false,
        prime_gpu: false,
        mapping: false,
        table: true,
        write: false,
        size: 1 << 30,
        opens: vec![Open::New, Open::Rewrite],
        sync: false,
        fs: None,
        ceiling: None,
        ceiling_direct: None,
        overwrite: false,
        devices: None,
    };
    let mut read_only_flags = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--file" => a.file = value()?,
            "--threads" => a.threads = list(&value()?, number)?,
            "--task-sizes" => a.task_sizes = list(&value()?, number)?,
            "--modes" => {
                let mode = one_of("mode", &[("on", "on"), ("auto", "auto"), ("off", "off")]);
                a.modes = list(&value()?, |s| mode(s).map(String::from))?
            }
            "--mem" => {
                a.mems = list(&value()?, one_of("mem", &[("device", Mem::Device), ("host", Mem::Host)]))?
            }
            "--kinds" => {
                read_only_flags.push("--kinds");
                let kinds = [("big", Kind::Big), ("rand4k", Kind::Rand(4 << 10)), ("rand64k", Kind::Rand(64 << 10))];
                a.kinds = list(&value()?, one_of("kind", &kinds))?
            }
            "--cache" => {
                read_only_flags.push("--cache");
                let cache = one_of("cache", &[("warm", "warm"), ("cold", "cold")]);
                a.caches = list(&value()?, |s| cache(s).map(String::from))?
            }
            "--reps" => a.reps = number(&value()?)?.max(1),
            "--rand-reads" => a.rand_reads = number(&value()?)?.max(1),
            "--callers" => a.callers = number(&value()?)?.max(1),
            "--first-only" => a.first_only = true,
            "--default-settings" => a.default_settings = true,
            "--prime-gpu" => a.prime_gpu = true,
            "--mapping" => {
                read_only_flags.push("--mapping");
                a.mapping = true
            }
            "--no-table" => a.table = false,
            "--write" => a.write = true,
            "--size" => a.size = number(&value()?)?,
            "--open" => {
                a.opens = list(&value()?, one_of("open", &[("w", Open::New), ("r+", Open::Rewrite)]))?
            }
            "--sync" => a.sync = true,
            "--fs" => {
                let v = value()?;
                if v.is_empty() || v.contains(char::is_whitespace) {
                    return Err(format!("--fs {v:?}: one word"));
                }
                a.fs = Some(v)
            }
            "--ceiling" => a.ceiling = Some(list(&value()?, number)?),
            "--ceiling-direct" => a.ceiling_direct = Some(list(&value()?, number)?),
            "--overwrite" => a.overwrite = true,
            "--devices" => {
                a.devices = Some(list(&value()?, |s| {
                    s.parse::<i32>()
                        .ok()
                        .filter(|d| *d >= 0)
                        .ok_or_else(|| format!("device {s:?}: a GPU number (0, 1, ...)"))
                })?)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    if a.file.is_empty() {
        return Err("--file PATH is required".into());
    }
    if a.ceiling() {
        a.write = true;
    }
    let ceiling_threads = a.ceiling.iter().chain(&a.ceiling_direct).flatten();
    if ceiling_threads.clone().any(|&t| t == 0 || t > 1024) {
        return Err("--ceiling threads: 1 to 1024".into());
    }
    if a.write {
        let refuse = |what: &str| Err(format!("{what} is for reads; --write measures big writes of --size bytes"));
        if let Some(flag) = read_only_flags.first() {
            return refuse(flag);
        }
        if a.first_only {
            return refuse("--first-only");
        }
        if a.prime_gpu {
            return refuse("--prime-gpu");
        }
        if a.devices.is_some() {
            return refuse("--devices");
        }
        if a.size == 0 {
            return Err("--size: at least 1 byte".into());
        }
        if a.ceiling_direct.is_some() && !a.size.is_multiple_of(4096) {
            return Err("--ceiling-direct: --size must be a multiple of 4096 (O_DIRECT)".into());
        }
    } else if a.sync || a.fs.is_some() || a.overwrite {
        return Err("--sync, --fs and --overwrite go with --write".into());
    }
    if let Some(devices) = &a.devices {
        if a.first_only || a.prime_gpu || !read_only_flags.is_empty() {
            return Err("--devices measures big warm reads: no --first-only, --prime-gpu, --kinds, --cache or --mapping".into());
        }
        let mut seen = devices.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != devices.len() {
            return Err(format!("--devices {devices:?}: a GPU listed twice"));
        }
    }
    if a.first_only {
        let many = |n: usize, what: &str| {
            if n > 1 {
                Err(format!("--first-only takes one value for {what}"))
            } else {
                Ok(())
            }
        };
        if !a.default_settings {
            many(a.threads.len(), "--threads")?;
            many(a.task_sizes.len(), "--task-sizes")?;
            many(a.modes.len(), "--modes")?;
        }
        many(a.mems.len(), "--mem")?;
        many(a.kinds.len(), "--kinds")?;
        many(a.caches.len(), "--cache")?;
        a.reps = 1;
    }
    Ok(a)
}
