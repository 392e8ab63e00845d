//! The library through its C API, called from Rust as a C program would call it: file handles
//! (open, pread/pwrite + wait, sync), the settings a measurement sets and reads back, the counters
//! and the route they show.

use std::ffi::{CString, c_char, c_void};

use gdsroute::{Counters, File, MappedFile, Operation, Status};

use crate::args::Args;

// The C API as include/gdsroute.h declares it (`safe` where the C function takes no pointer) (the library's exports, linked from the crate);
// `File`, `MappedFile`, `Operation` and `Counters` are the Rust types of the same layout.
// `File`, `MappedFile` and `Operation` cross only as pointers, opaque as in C, never dereferenced here.
#[allow(improper_ctypes)]
unsafe extern "C" {
    fn gdsroute_file_open(path: *const c_char, flags: *const c_char, mode: u32, file: *mut *mut File) -> Status;
    fn gdsroute_file_open_with_compat_mode(path: *const c_char, flags: *const c_char, mode: u32, compat_mode: u32, file: *mut *mut File) -> Status;
    fn gdsroute_file_pread(file: *const File, buf: *mut c_void, size: usize, file_offset: u64, op: *mut *mut Operation) -> Status;
    fn gdsroute_file_pwrite(file: *const File, buf: *const c_void, size: usize, file_offset: u64, op: *mut *mut Operation) -> Status;
    fn gdsroute_file_size(file: *const File, size: *mut u64) -> Status;
    fn gdsroute_file_sync(file: *const File) -> Status;
    fn gdsroute_file_free(file: *mut File);
    fn gdsroute_mapping_open(path: *const c_char, file_offset: u64, size: usize, mapping: *mut *mut MappedFile) -> Status;
    fn gdsroute_mapping_pread(mapping: *const MappedFile, buf: *mut c_void, size: usize, file_offset: u64, task_size: usize, op: *mut *mut Operation) -> Status;
    fn gdsroute_mapping_free(mapping: *mut MappedFile);
    fn gdsroute_op_wait(op: *const Operation, bytes_read: *mut usize) -> Status;
    fn gdsroute_op_free(op: *mut Operation);
    fn gdsroute_settings_get_compat_mode(mode: *mut u32) -> Status;
    fn gdsroute_settings_get_num_threads(threads: *mut usize) -> Status;
    safe fn gdsroute_settings_set_num_threads(threads: usize) -> Status;
    fn gdsroute_settings_get_task_size(bytes: *mut usize) -> Status;
    safe fn gdsroute_settings_set_task_size(bytes: usize) -> Status;
    fn gdsroute_settings_get_page_cache_pin_max(bytes: *mut u64) -> Status;
    fn gdsroute_stats_get(stats: *mut Counters) -> Status;
    safe fn gdsroute_status_str(code: u32) -> *const c_char;
    fn gdsroute_last_error_message(buf: *mut c_char, buf_len: usize) -> usize;
}

fn last_error() -> String {
    let mut buf = vec![0u8; 1024];
    // SAFETY: buf is writable for its length.
    let n = unsafe { gdsroute_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.min(buf.len().saturating_sub(1)));
    String::from_utf8_lossy(&buf).into_owned()
}

/// A status as a Result: the call, the status code and text, and the library's last message.
pub fn check(status: Status, what: &str) -> Result<(), String> {
    if status == Status::Ok {
        return Ok(());
    }
    let code = status as u32;
    // SAFETY: gdsroute_status_str returns a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(gdsroute_status_str(code)) }.to_string_lossy();
    Err(format!("{what}: status {code} ({text}): {}", last_error()))
}

/// A file handle, and (`--mapping`) a mapping handle of the whole file that its reads go through.
pub struct Handle(*mut File, *mut MappedFile);

impl Handle {
    /// `flags` as `gdsroute_file_open`'s ("r", "w", "r+"); `mode` None: `gdsroute_file_open`
    /// (the process default compat mode).
    pub fn open(path: &str, flags: &str, mode: Option<&str>) -> Result<Handle, String> {
        let c_flags = CString::new(flags).map_err(|_| "flags have a NUL byte".to_string())?;
        let c_path = CString::new(path).map_err(|_| "path has a NUL byte".to_string())?;
        let mut file: *mut File = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and a writable out-pointer.
        let status = unsafe {
            match mode {
                None => gdsroute_file_open(c_path.as_ptr(), c_flags.as_ptr(), 0o644, &mut file),
                Some(m) => {
                    let raw = match m {
                        "off" => 0,
                        "on" => 1,
                        _ => 2,
                    };
                    gdsroute_file_open_with_compat_mode(
                        c_path.as_ptr(),
                        c_flags.as_ptr(),
                        0o644,
                        raw,
                        &mut file,
                    )
                }
            }
        };
        check(status, &format!("gdsroute_file_open {path} {flags:?}"))?;
        Ok(Handle(file, std::ptr::null_mut()))
    }

    /// The same handle, its reads through a mapping handle of the whole file at `path`
    /// (`gdsroute_mapping_open` with offset and size 0).
    pub fn with_mapping(mut self, path: &str) -> Result<Handle, String> {
        let c_path = CString::new(path).map_err(|_| "path has a NUL byte".to_string())?;
        // SAFETY: a NUL-terminated string and a writable out-pointer.
        check(unsafe { gdsroute_mapping_open(c_path.as_ptr(), 0, 0, &mut self.1) }, &format!("gdsroute_mapping_open {path}"))?;
        Ok(self)
    }

    pub fn size(&self) -> Result<u64, String> {
        let mut size = 0u64;
        // SAFETY: live handle, writable out-pointer.
        check(
            unsafe { gdsroute_file_size(self.0, &mut size) },
            "gdsroute_file_size",
        )?;
        Ok(size)
    }

    /// One `gdsroute_file_pread` (`gdsroute_mapping_pread` with the task size setting, for a
    /// handle `with_mapping`) + `gdsroute_op_wait`; returns the bytes read.
    pub fn pread(&self, dst: usize, size: usize, offset: u64) -> Result<usize, String> {
        if !self.1.is_null() {
            // SAFETY: as below; the mapping handle is live until Drop.
            return run_op("gdsroute_mapping_pread", |op| unsafe {
                gdsroute_mapping_pread(self.1, dst as *mut c_void, size, offset, 0, op)
            });
        }
        // SAFETY: dst is valid for size bytes (device or host) until the wait returns.
        run_op("gdsroute_file_pread", |op| unsafe {
            gdsroute_file_pread(self.0, dst as *mut c_void, size, offset, op)
        })
    }

    /// One `gdsroute_file_pwrite` + `gdsroute_op_wait`; returns the bytes written.
    pub fn pwrite(&self, src: usize, size: usize, offset: u64) -> Result<usize, String> {
        // SAFETY: src is valid for size bytes (device or host) and unchanged until the wait returns.
        run_op("gdsroute_file_pwrite", |op| unsafe {
            gdsroute_file_pwrite(self.0, src as *const c_void, size, offset, op)
        })
    }

    /// `gdsroute_file_sync` (fsync).
    pub fn sync(&self) -> Result<(), String> {
        // SAFETY: live handle.
        check(unsafe { gdsroute_file_sync(self.0) }, "gdsroute_file_sync")
    }
}

/// Starts an operation (`start` gets the out-pointer for it; `what` names the call), waits for it
/// with `gdsroute_op_wait` and frees it; returns the bytes it moved.
fn run_op(what: &str, start: impl FnOnce(*mut *mut Operation) -> Status) -> Result<usize, String> {
    let mut op: *mut Operation = std::ptr::null_mut();
    check(start(&mut op), what)?;
    let mut done = 0usize;
    // SAFETY: op is the live operation just started.
    let status = unsafe { gdsroute_op_wait(op, &mut done) };
    // SAFETY: freed once, after the wait.
    unsafe { gdsroute_op_free(op) };
    check(status, "gdsroute_op_wait")?;
    Ok(done)
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handles came from gdsroute_file_open and gdsroute_mapping_open (or are
        // NULL, which the free functions accept) and are freed once.
        unsafe {
            gdsroute_mapping_free(self.1);
            gdsroute_file_free(self.0);
        }
    }
}

// SAFETY: every C API function is thread-safe; the handle is only freed by Drop.
unsafe impl Sync for Handle {}

/// The size of the file read (opened with the process defaults for the question); an empty file
/// is refused.
pub fn read_file_size(path: &str) -> Result<u64, String> {
    let file_size = Handle::open(path, "r", None)?.size()?;
    if file_size == 0 {
        return Err(format!("{path} is empty"));
    }
    Ok(file_size)
}

/// The settings one measurement gives the library: the compat mode of its handle, the pool's
/// threads and the task size; None leaves the library's own (`--default-settings`).
pub struct Settings {
    pub mode: Option<String>,
    pub threads: Option<usize>,
    pub task: Option<usize>,
}

impl Settings {
    /// Every combination of `--modes`, `--threads` and `--task-sizes`, in that nesting order, or
    /// with `--default-settings` the one that sets nothing.
    pub fn matrix(args: &Args) -> Vec<Settings> {
        if args.default_settings {
            return vec![Settings { mode: None, threads: None, task: None }];
        }
        let mut all = Vec::new();
        for mode in &args.modes {
            for &threads in &args.threads {
                for &task in &args.task_sizes {
                    all.push(Settings { mode: Some(mode.clone()), threads: Some(threads), task: Some(task) });
                }
            }
        }
        all
    }

    /// Sets the thread count and task size, if given (the mode goes with each handle).
    pub fn apply(&self) -> Result<(), String> {
        if let Some(t) = self.threads {
            check(
                gdsroute_settings_set_num_threads(t),
                "gdsroute_settings_set_num_threads",
            )?;
        }
        if let Some(t) = self.task {
            check(
                gdsroute_settings_set_task_size(t),
                "gdsroute_settings_set_task_size",
            )?;
        }
        Ok(())
    }

    /// The mode the lines report: the one given, else the process default read back.
    pub fn mode_or(&self, default: String) -> String {
        self.mode.clone().unwrap_or(default)
    }
}

/// The settings in force: the process default compat mode, pool threads and task size.
pub fn current_settings() -> (String, usize, usize) {
    let (mut mode, mut threads, mut task) = (u32::MAX, 0usize, 0usize);
    // SAFETY: writable out-pointers.
    unsafe {
        let _ = gdsroute_settings_get_compat_mode(&mut mode);
        let _ = gdsroute_settings_get_num_threads(&mut threads);
        let _ = gdsroute_settings_get_task_size(&mut task);
    }
    let mode = match mode {
        0 => "off",
        1 => "on",
        2 => "auto",
        _ => "unknown",
    };
    (mode.to_string(), threads, task)
}

/// The page-cache pinning limit in force (`gdsroute_settings_get_page_cache_pin_max`).
pub fn page_cache_pin_max() -> u64 {
    let mut pin_max = 0u64;
    // SAFETY: valid out-pointer.
    let _ = unsafe { gdsroute_settings_get_page_cache_pin_max(&mut pin_max) };
    pin_max
}

/// The process's counters now.
pub fn stats() -> Counters {
    let mut s = Counters {
        struct_size: Counters::SIZE,
        ..Counters::default()
    };
    // SAFETY: s is a full-size struct with struct_size set.
    let _ = unsafe { gdsroute_stats_get(&mut s) };
    s
}

/// Which route the read tasks between two snapshots of the counters took.
pub fn read_route(before: &Counters, after: &Counters) -> &'static str {
    route(after.posix_tasks - before.posix_tasks, after.cufile_tasks - before.cufile_tasks)
}

/// Which route the write tasks between two snapshots of the counters took.
pub fn write_route(before: &Counters, after: &Counters) -> &'static str {
    route(
        after.posix_write_tasks - before.posix_write_tasks,
        after.cufile_write_tasks - before.cufile_write_tasks,
    )
}

/// `posix`, `cufile`, `mixed` or `none`, from the tasks each route took.
fn route(posix: u64, cufile: u64) -> &'static str {
    match (posix > 0, cufile > 0) {
        (true, false) => "posix",
        (false, true) => "cufile",
        (true, true) => "mixed",
        _ => "none",
    }
}
