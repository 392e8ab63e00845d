//! cuFile status codes as plain integers, our own message table for them, and the small error
//! types the rest of `cufile` returns. Codes stay `i32` everywhere: a future libcufile may return
//! a value no enum here knows, and turning that into a Rust enum would be undefined behaviour.

use std::fmt;

/// `CU_FILE_SUCCESS`.
pub(crate) const CU_FILE_SUCCESS: i32 = 0;
/// `CU_FILE_CUDA_DRIVER_ERROR`: `cu_err` then holds a `CUresult`.
pub(crate) const CU_FILE_CUDA_DRIVER_ERROR: i32 = 5011;
/// `CU_FILE_INVALID_VALUE`: bad argument, or a statistics level too low for the query.
pub(crate) const CU_FILE_INVALID_VALUE: i32 = 5022;
/// Not a cuFile code: this crate's marker for "the loaded libcufile does not export the symbol
/// that the call needs". The failure's `context` names the symbol.
pub(crate) const SYMBOL_MISSING: i32 = -1;

/// Lowest cuFile operation error code; the table below runs to 5050 (cuFile 1.15–1.20).
const FIRST_OP_ERROR: i32 = 5001;

/// Short text for a cuFile status code (0, 5001–5050), or for [`SYMBOL_MISSING`].
///
/// Returns "unknown cuFile error" for any other value, including the two numbers the enum skips
/// (5021, 5032). The texts are ours, written from the meanings in NVIDIA's `cufile.h`.
pub(crate) fn code_message(code: i32) -> &'static str {
    const TABLE: [&str; 50] = [
        /* 5001 */
        "driver not initialised (nvidia-fs not loaded and compat mode disallowed?)",
        /* 5002 */ "invalid driver property",
        /* 5003 */ "driver property out of range",
        /* 5004 */ "nvidia-fs driver version mismatch",
        /* 5005 */ "cannot read the nvidia-fs driver version",
        /* 5006 */ "driver is shutting down",
        /* 5007 */ "GPUDirect Storage is not supported on this platform",
        /* 5008 */ "GPUDirect Storage is not supported for this file",
        /* 5009 */ "GPUDirect Storage is not supported on this GPU",
        /* 5010 */ "nvidia-fs ioctl failed",
        /* 5011 */ "CUDA driver API call failed (see cu_err)",
        /* 5012 */ "invalid device pointer",
        /* 5013 */ "pointer has an unsupported memory type",
        /* 5014 */ "pointer range runs past the allocation",
        /* 5015 */ "CUDA context of the buffer is not current",
        /* 5016 */ "access beyond the maximum pinned size",
        /* 5017 */ "access beyond the mapped size",
        /* 5018 */ "unsupported file type (not a regular file?)",
        /* 5019 */ "unsupported file open flags",
        /* 5020 */ "file descriptor lacks O_DIRECT",
        /* 5021 */ "",
        /* 5022 */ "invalid argument (or statistics level too low)",
        /* 5023 */ "buffer is already registered",
        /* 5024 */ "buffer is not registered",
        /* 5025 */ "permission denied on the driver or the file",
        /* 5026 */ "driver is already open",
        /* 5027 */
        "file handle not registered (no udev database? typical in containers and VMs without /run/udev)",
        /* 5028 */ "file descriptor is already registered",
        /* 5029 */ "GPU device not found",
        /* 5030 */ "internal cuFile error",
        /* 5031 */ "could not obtain a new file descriptor",
        /* 5032 */ "",
        /* 5033 */ "nvidia-fs setup failed (libcuda missing?)",
        /* 5034 */ "GPUDirect Storage disabled for this file by configuration",
        /* 5035 */ "batch submission failed",
        /* 5036 */ "could not pin GPU memory",
        /* 5037 */ "batch queue is full",
        /* 5038 */ "stream (async) operations not supported",
        /* 5039 */ "batch setup failed internally; retry later",
        /* 5040 */ "batch submit failed internally; retry later",
        /* 5041 */ "batch status query failed internally; retry later",
        /* 5042 */ "batch cancel failed internally; retry later",
        /* 5043 */ "out of memory; retry later",
        /* 5044 */ "I/O error inside cuFile",
        /* 5045 */ "internal buffer registration failed",
        /* 5046 */ "internal hash table operation failed",
        /* 5047 */ "invalid cuFile context",
        /* 5048 */ "nvidia-fs internal driver error",
        /* 5049 */ "batch I/O needs compat mode, which is off",
        /* 5050 */ "GPUDirect Storage maximum error code",
    ];
    match code {
        CU_FILE_SUCCESS => "success",
        SYMBOL_MISSING => "symbol not exported by the loaded libcufile",
        c if (FIRST_OP_ERROR..FIRST_OP_ERROR + TABLE.len() as i32).contains(&c) => {
            match TABLE[(c - FIRST_OP_ERROR) as usize] {
                "" => "unknown cuFile error",
                text => text,
            }
        }
        _ => "unknown cuFile error",
    }
}

/// A failed cuFile call: the cuFile code, the CUDA code riding along with 5011, the errno when
/// the failure came from the file system, and the API that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CufileFailure {
    /// cuFile status code (5001–5050, [`SYMBOL_MISSING`], or 0 when only `errno` is meaningful).
    pub code: i32,
    /// `CUresult` reported with code 5011 (`CUfileError_t::cu_err`), else 0.
    pub cu_err: i32,
    /// errno for file-system failures (a read returning −1).
    pub errno: Option<i32>,
    /// The cuFile function (or symbol) involved, e.g. `"cuFileHandleRegister"`.
    pub context: &'static str,
}

impl CufileFailure {
    /// A failure carrying a cuFile code and, for 5011, a CUDA result.
    pub fn code(context: &'static str, code: i32, cu_err: i32) -> Self {
        CufileFailure {
            code,
            cu_err,
            errno: None,
            context,
        }
    }

    /// The loaded library lacks `symbol`.
    pub fn missing(symbol: &'static str) -> Self {
        Self::code(symbol, SYMBOL_MISSING, 0)
    }

    /// The text from [`code_message`] for this failure's code.
    pub fn message(&self) -> &'static str {
        code_message(self.code)
    }
}

impl fmt::Display for CufileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.context)?;
        if self.code != CU_FILE_SUCCESS {
            write!(f, ": cuFile error {} ({})", self.code, self.message())?;
        }
        if self.code == CU_FILE_CUDA_DRIVER_ERROR && self.cu_err != 0 {
            write!(f, ", CUresult {}", self.cu_err)?;
        }
        if let Some(errno) = self.errno {
            write!(
                f,
                ": errno {} ({})",
                errno,
                std::io::Error::from_raw_os_error(errno)
            )?;
        }
        Ok(())
    }
}

/// Why a `cuFileRead` returned no bytes (`cuFileWrite` returns the same way), decoded per
/// cufile.h: −1 with errno set (a cuFile code when errno is above 5000), or a cuFile code negated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoFailure {
    /// −1 with a plain errno (a file-system error).
    Errno(i32),
    /// A cuFile code: from a return value below −1, or from errno > 5000 after a −1.
    Cufile(i32),
}

impl IoFailure {
    /// Decodes a negative `cuFileRead` result. `errno` is the thread's errno read right after
    /// the call; it matters only when `ret == -1`.
    pub fn decode(ret: isize, errno: i32) -> Self {
        if ret == -1 {
            if errno > 5000 {
                IoFailure::Cufile(errno)
            } else {
                IoFailure::Errno(errno)
            }
        } else {
            // Codes are 5001–5050; anything beyond i32 is garbage, reported as "unknown".
            IoFailure::Cufile(i32::try_from(ret.unsigned_abs()).unwrap_or(i32::MAX))
        }
    }
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        CufileFailure::from(*self).fmt(f)
    }
}

impl std::error::Error for IoFailure {}

impl From<IoFailure> for CufileFailure {
    fn from(r: IoFailure) -> Self {
        match r {
            IoFailure::Errno(e) => CufileFailure {
                code: 0,
                cu_err: 0,
                errno: Some(e),
                context: "cuFileRead",
            },
            IoFailure::Cufile(c) => CufileFailure::code("cuFileRead", c, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_covers_the_header_range() {
        assert_eq!(code_message(0), "success");
        assert_eq!(code_message(5001).split(' ').next(), Some("driver"));
        assert!(code_message(5027).contains("udev"));
        assert!(code_message(5050).contains("maximum"));
        for gap in [5000, 5021, 5032, 5051, -5011, 42] {
            assert_eq!(code_message(gap), "unknown cuFile error", "{gap}");
        }
        for c in (5001..=5050).filter(|c| *c != 5021 && *c != 5032) {
            assert_ne!(code_message(c), "unknown cuFile error", "{c}");
        }
    }

    #[test]
    fn read_decoding() {
        assert_eq!(
            IoFailure::decode(-1, libc::EIO),
            IoFailure::Errno(libc::EIO)
        );
        assert_eq!(IoFailure::decode(-1, 5011), IoFailure::Cufile(5011));
        assert_eq!(IoFailure::decode(-5027, 0), IoFailure::Cufile(5027));
        assert_eq!(
            IoFailure::decode(isize::MIN, 0),
            IoFailure::Cufile(i32::MAX)
        );
    }

    #[test]
    fn display_is_informative() {
        let f = CufileFailure::code("cuFileHandleRegister", 5027, 0);
        let s = f.to_string();
        assert!(
            s.contains("cuFileHandleRegister") && s.contains("5027") && s.contains("udev"),
            "{s}"
        );
        let e = CufileFailure::from(IoFailure::Errno(libc::EIO)).to_string();
        assert!(e.contains("errno 5"), "{e}");
        let c = CufileFailure::code("cuFileDriverOpen", 5011, 100).to_string();
        assert!(c.contains("CUresult 100"), "{c}");
    }
}
