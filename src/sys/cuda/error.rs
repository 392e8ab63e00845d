//! The CUDA layer's error type. A failed driver call keeps the CUresult name and number and the
//! call that returned it; `Unavailable` says in words why CUDA cannot be used at all. The router
//! maps these onto the crate's `Error` (CudaUnavailable / Cuda).

use cudarc::driver::sys::CUresult;

/// Every failure of the CUDA layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaFailure {
    /// libcuda is missing, lacks a symbol, or `cuInit` failed; the text is the human reason,
    /// e.g. "libcuda.so.1 not found: ..." or "cuInit failed: CUDA_ERROR_NO_DEVICE (100)".
    #[error("{0}")]
    Unavailable(String),
    /// CUDA was initialised in a parent process and this is a forked child.
    #[error(
        "CUDA was initialised in the parent process (pid {parent}); re-initialise after fork is not supported (this is pid {child})"
    )]
    Forked {
        /// The PID that called `cuInit`.
        parent: u32,
        /// The PID of the caller.
        child: u32,
    },
    /// A driver call returned an error.
    #[error("{call} failed: {name} ({code})")]
    Call {
        /// The driver function, e.g. "cuMemcpyHtoDAsync".
        call: &'static str,
        /// The CUresult name, e.g. "CUDA_ERROR_INVALID_VALUE".
        name: String,
        /// The CUresult number.
        code: u32,
    },
    /// An operation needs a current CUDA context and the calling thread has none.
    #[error("{0} needs a current CUDA context and the calling thread has none")]
    NoContext(&'static str),
    /// The calling thread's own state (its streams and events) is already destroyed: a call from
    /// an `atexit` handler, which glibc runs after the main thread's thread-local destructors.
    #[error("{0} cannot run on this thread: its thread-local state is gone (the process is exiting)")]
    ThreadExiting(&'static str),
}

impl CudaFailure {
    /// The CUresult number when this is a failed call, else `None`.
    pub fn code(&self) -> Option<u32> {
        match self {
            CudaFailure::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Turns a CUresult into `Ok(())` or a `CudaFailure::Call` naming `call`.
pub(crate) fn check(call: &'static str, result: CUresult) -> Result<(), CudaFailure> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaFailure::Call {
            call,
            name: result_name(result),
            code: result as u32,
        })
    }
}

/// The CUresult's symbolic name (the enum's Debug text is exactly the C name).
pub(crate) fn result_name(result: CUresult) -> String {
    format!("{result:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_failure_names_call_code_and_name() {
        let e = check("cuInit", CUresult::CUDA_ERROR_NO_DEVICE).unwrap_err();
        assert_eq!(e.to_string(), "cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
        assert_eq!(e.code(), Some(100));
        assert!(check("cuInit", CUresult::CUDA_SUCCESS).is_ok());
    }
}
