//! Helpers shared by the integration tests: reproducible random file contents (never zeros),
//! temporary files holding them, and the poison byte of guard margins.
#![allow(dead_code)] // each test binary uses a subset

use std::io::Write;

pub mod gpu;

/// Guard margin bytes around destination buffers; they must survive every read untouched.
pub const POISON: u8 = 0xA5;

/// `len` pseudo-random bytes from `seed` (xorshift64), the same on every run.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A temporary file holding `data`, in `dir` (or the default temporary directory).
pub fn temp_file_in(dir: Option<&str>, data: &[u8]) -> tempfile::NamedTempFile {
    let mut tmp = match dir {
        Some(dir) => tempfile::NamedTempFile::new_in(dir).unwrap(),
        None => tempfile::NamedTempFile::new().unwrap(),
    };
    tmp.write_all(data).unwrap();
    tmp.flush().unwrap();
    tmp
}

/// Opens `path` read-only through the library, with the given compat mode (or the default).
pub fn open(path: &std::path::Path, compat: Option<gdsroute::settings::CompatMode>) -> gdsroute::File {
    gdsroute::File::open(path.as_os_str().as_encoded_bytes(), "r", 0, compat).unwrap()
}
