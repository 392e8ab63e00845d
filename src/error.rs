//! The library's error type. Each variant knows its C status code; the Display text becomes the
//! thread-local "last error" message at the C boundary, so it carries the context a user needs
//! (path, errno, offending value).


/// Every failure the core can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required pointer was NULL (the name is the C parameter).
    #[error("argument `{0}` must not be NULL")]
    NullArgument(&'static str),
    /// A value outside what the call accepts.
    #[error("{0}")]
    InvalidArgument(String),
    /// Open flags that are not "r", "r+", "w", "w+", "x" or "x+".
    #[error("invalid open flags {0:?}: expected \"r\", \"r+\", \"w\", \"w+\", \"x\" or \"x+\"")]
    InvalidFlags(String),
    /// An enumeration value from C out of range.
    #[error("invalid value {value} for {what}")]
    InvalidEnum {
        /// Which enumeration.
        what: &'static str,
        /// The raw value received.
        value: u32,
    },
    /// Size/offset arithmetic would overflow.
    #[error("{0}")]
    Overflow(String),
    /// The handle was closed before the call.
    #[error("the file handle of {path:?} is closed")]
    ClosedHandle {
        /// The path the handle was opened with.
        path: String,
    },
    /// The path is empty or has an interior NUL.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// open(2) failed.
    #[error("cannot open {path:?} with flags {flags:?}: {source}")]
    Open {
        /// The path as given (lossily shown when not UTF-8).
        path: String,
        /// The flags as given.
        flags: String,
        /// The OS error (errno).
        source: std::io::Error,
    },
    /// A system call during I/O failed.
    #[error("{op} failed on {path:?} at offset {offset}: {source}")]
    Io {
        /// The operation (`pread`, `fstat`, ...).
        op: &'static str,
        /// The file's path.
        path: String,
        /// The file offset involved.
        offset: u64,
        /// The OS error (errno).
        source: std::io::Error,
    },
    /// A read of a mapping handle (`MappedFile`) reached a page past the end of its file, which
    /// was truncated under the mapping: the kernel's copy out of the mapping failed (`EFAULT`)
    /// where a load would have raised `SIGBUS`.
    #[error("{path:?} shrank to {size} bytes under its mapping: the mapped bytes from offset {offset} are gone ({source})")]
    MappedFileShrank {
        /// The file's path.
        path: String,
        /// The file offset of the first mapped byte the copy could not read.
        offset: u64,
        /// The file's size after the failed copy (`fstat`; 0 if that failed too).
        size: u64,
        /// The error of the copy (`EFAULT`).
        source: std::io::Error,
    },
    /// The CUDA driver is missing or did not initialise.
    #[error("CUDA driver unavailable: {0}")]
    CudaUnavailable(String),
    /// A CUDA driver call failed.
    #[error("CUDA error: {0}")]
    Cuda(String),
    /// cuFile cannot be used and the compat mode forbids the fallback.
    #[error("cuFile unavailable: {0}")]
    CufileUnavailable(String),
    /// A cuFile call failed.
    #[error("cuFile error: {0}")]
    Cufile(String),
    /// A cuFile driver setting given after the driver opened (cuFile reads them at the open).
    #[error("{0}")]
    DriverOpen(String),
    /// A stream-ordered call on a stream that is being captured into a CUDA graph.
    #[error("{0}")]
    StreamCapturing(String),
    /// A setting is invalid (environment variable or API value).
    #[error("{0}")]
    InvalidSetting(String),
    /// A batch entry cancelled before it started.
    #[error("{0}")]
    Canceled(String),
    /// A panic was caught.
    #[error("internal panic: {0}")]
    Panic(String),
    /// Resource exhaustion or a broken invariant.
    #[error("internal error: {0}")]
    Internal(String),
    /// A batch entry refused at its submission (so nothing of the submission was submitted):
    /// which one (`entries[index]` of the C call) and why; its status and errno are the cause's.
    #[error("entries[{index}]: {source}")]
    BatchEntry {
        /// The entry's index in the submitted array.
        index: usize,
        /// Why it was refused.
        source: Box<Error>,
    },
}

impl Error {
    /// The errno behind this error, if it came from a system call.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            Error::Open { source, .. } | Error::Io { source, .. } | Error::MappedFileShrank { source, .. } => source.raw_os_error(),
            Error::BatchEntry { source, .. } => source.os_error(),
            _ => None,
        }
    }
}

fn clone_io(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

/// An operation's result is read by every waiter, so errors are cloneable; OS errors keep their
/// errno.
impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::NullArgument(s) => Error::NullArgument(s),
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::InvalidFlags(s) => Error::InvalidFlags(s.clone()),
            Error::InvalidEnum { what, value } => Error::InvalidEnum { what, value: *value },
            Error::Overflow(s) => Error::Overflow(s.clone()),
            Error::ClosedHandle { path } => Error::ClosedHandle { path: path.clone() },
            Error::InvalidPath(s) => Error::InvalidPath(s.clone()),
            Error::Open { path, flags, source } => Error::Open { path: path.clone(), flags: flags.clone(), source: clone_io(source) },
            Error::Io { op, path, offset, source } => Error::Io { op, path: path.clone(), offset: *offset, source: clone_io(source) },
            Error::MappedFileShrank { path, offset, size, source } => Error::MappedFileShrank { path: path.clone(), offset: *offset, size: *size, source: clone_io(source) },
            Error::CudaUnavailable(s) => Error::CudaUnavailable(s.clone()),
            Error::Cuda(s) => Error::Cuda(s.clone()),
            Error::CufileUnavailable(s) => Error::CufileUnavailable(s.clone()),
            Error::Cufile(s) => Error::Cufile(s.clone()),
            Error::DriverOpen(s) => Error::DriverOpen(s.clone()),
            Error::StreamCapturing(s) => Error::StreamCapturing(s.clone()),
            Error::InvalidSetting(s) => Error::InvalidSetting(s.clone()),
            Error::Canceled(s) => Error::Canceled(s.clone()),
            Error::Panic(s) => Error::Panic(s.clone()),
            Error::Internal(s) => Error::Internal(s.clone()),
            Error::BatchEntry { index, source } => Error::BatchEntry { index: *index, source: source.clone() },
        }
    }
}

/// Shorthand used across the core.
pub type Result<T> = std::result::Result<T, Error>;

/// Text of a caught panic payload.
pub(crate) fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".into()
    }
}
