//! Status codes returned by every C entry point. The numbers are part of the ABI: explicit,
//! grouped by hundreds, append-only. A retired code stays here as a comment, never reused.

/// Result of a gdsroute call. 0 is success; other values are grouped: 1xx bad arguments,
/// 2xx file-system and I/O, 3xx CUDA and cuFile, 4xx settings, 9xx internal.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 100,
    /// An argument had a value the function does not accept.
    InvalidArgument = 101,
    /// The open flags were not one of "r", "r+", "w", "w+".
    InvalidFlags = 102,
    /// An enumeration value passed from C was out of range.
    InvalidEnum = 103,
    /// A size or offset does not fit the arithmetic of the call (off_t, ssize_t or size_t).
    Overflow = 104,
    /// The file handle was closed.
    ClosedHandle = 105,
    /// The path contains an interior NUL byte or is empty.
    InvalidPath = 106,
    /// The file could not be opened; the last error message holds the path and errno.
    OpenFailed = 200,
    /// A read or other system call failed; the last error message holds errno.
    IoError = 201,
    /// The CUDA driver (libcuda) could not be loaded or initialised.
    CudaUnavailable = 300,
    /// A CUDA driver call failed.
    CudaError = 301,
    /// libcufile could not be loaded or cuFile cannot serve this file, and compat mode is OFF.
    CufileUnavailable = 302,
    /// A cuFile call failed.
    CufileError = 303,
    /// A setting (environment variable or API value) is invalid.
    InvalidSetting = 400,
    /// A panic was caught inside the library; the library stays usable.
    Panic = 900,
    /// An internal invariant was violated or a resource (thread, memory) could not be obtained.
    Internal = 901,
}

/// Every status, in numeric order; used by `from_code` and the tests. A module constant, not an
/// associated one: cbindgen turned the associated `Status::ALL` into a `gdsroute_status_ALL` macro of Rust
/// variant names that no C program could compile (issue 15).
const ALL: [Status; 17] = [
    Status::Ok,
    Status::NullArgument,
    Status::InvalidArgument,
    Status::InvalidFlags,
    Status::InvalidEnum,
    Status::Overflow,
    Status::ClosedHandle,
    Status::InvalidPath,
    Status::OpenFailed,
    Status::IoError,
    Status::CudaUnavailable,
    Status::CudaError,
    Status::CufileUnavailable,
    Status::CufileError,
    Status::InvalidSetting,
    Status::Panic,
    Status::Internal,
];

impl Status {
    /// The status with this numeric code, if there is one.
    pub fn from_code(code: u32) -> Option<Status> {
        ALL.into_iter().find(|s| *s as u32 == code)
    }

    /// A short, static, NUL-terminated description of the code.
    pub fn description(self) -> &'static std::ffi::CStr {
        match self {
            Status::Ok => c"success",
            Status::NullArgument => c"a required pointer argument was NULL",
            Status::InvalidArgument => c"invalid argument",
            Status::InvalidFlags => c"invalid open flags (expected \"r\", \"r+\", \"w\" or \"w+\")",
            Status::InvalidEnum => c"enumeration value out of range",
            Status::Overflow => c"size or offset overflows the call's arithmetic",
            Status::ClosedHandle => c"the file handle is closed",
            Status::InvalidPath => c"invalid path",
            Status::OpenFailed => c"the file could not be opened",
            Status::IoError => c"I/O error",
            Status::CudaUnavailable => c"the CUDA driver is unavailable",
            Status::CudaError => c"CUDA driver call failed",
            Status::CufileUnavailable => c"cuFile is unavailable and compat mode is OFF",
            Status::CufileError => c"cuFile call failed",
            Status::InvalidSetting => c"invalid setting",
            Status::Panic => c"internal panic caught",
            Status::Internal => c"internal error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_sorted() {
        let codes: Vec<u32> = ALL.iter().map(|s| *s as u32).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
        for s in ALL {
            assert_eq!(Status::from_code(s as u32), Some(s));
        }
        assert_eq!(Status::from_code(7), None);
    }
}
