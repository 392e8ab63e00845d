//! Which descriptor of a file gdsroute registers with cuFile (`GDSROUTE_CUFILE_FD`). KvikIO always
//! opens a second one with `O_DIRECT`, which real GDS (nvidia-fs) needs. Without nvidia-fs cuFile
//! serves reads through its own POSIX path, and on an `O_DIRECT` descriptor that path bypasses the
//! page cache: measured 1.4-1.9 GB/s (disk bound) on the H200 machine, against 22-25 GB/s at 4
//! threads and 40-43 GB/s at 16 on the handle's buffered descriptor, which cuFile registers fine
//! in compat mode (2026-11-30; docs/routing.md, "The decision").

pub(crate) use crate::abi::CufileFd;
use std::fmt;

impl CufileFd {
    /// Parses auto, direct or buffered, case-insensitively, surrounding whitespace ignored (the
    /// rule of every setting, `env::significant`).
    pub fn parse(text: &str) -> Option<CufileFd> {
        match super::env::significant(text).to_ascii_lowercase().as_str() {
            "auto" => Some(CufileFd::Auto),
            "direct" => Some(CufileFd::Direct),
            "buffered" => Some(CufileFd::Buffered),
            _ => None,
        }
    }

    /// Lower-case name as used in messages.
    pub fn name(self) -> &'static str {
        match self {
            CufileFd::Auto => "auto",
            CufileFd::Direct => "direct",
            CufileFd::Buffered => "buffered",
        }
    }

    /// Decides the descriptor. `nvfs_loaded` is whether cuFile's driver properties report an
    /// nvidia-fs version other than 0.0 (`None`: properties unavailable, so KvikIO's `O_DIRECT`).
    pub fn choose(self, nvfs_loaded: Option<bool>) -> FdChoice {
        let (descriptor, why) = match (self, nvfs_loaded) {
            (CufileFd::Direct, _) => (Descriptor::Direct, "setting GDSROUTE_CUFILE_FD=direct"),
            (CufileFd::Buffered, _) => (Descriptor::Buffered, "setting GDSROUTE_CUFILE_FD=buffered"),
            (CufileFd::Auto, Some(false)) => (Descriptor::Buffered, "no nvidia-fs: cuFile's compat path reads the page cache"),
            (CufileFd::Auto, Some(true)) => (Descriptor::Direct, "nvidia-fs is loaded: real GDS needs O_DIRECT"),
            (CufileFd::Auto, None) => (Descriptor::Direct, "nvidia-fs state unknown (no driver properties)"),
        };
        FdChoice { descriptor, why }
    }
}

/// The kind of descriptor registered with cuFile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Descriptor {
    /// A second descriptor of the file, opened with `O_DIRECT`.
    Direct,
    /// The handle's own descriptor (page cache).
    Buffered,
}

/// A decided descriptor and why; displays as "cuFile registered the buffered descriptor (...)".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdChoice {
    /// What is (to be) registered.
    pub descriptor: Descriptor,
    /// Why, for reports.
    pub why: &'static str,
}

impl fmt::Display for FdChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.descriptor {
            Descriptor::Direct => "O_DIRECT",
            Descriptor::Buffered => "buffered",
        };
        write!(f, "cuFile registered the {kind} descriptor ({})", self.why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn parses_and_converts() {
        for (s, v) in [("auto", CufileFd::Auto), (" Direct ", CufileFd::Direct), ("BUFFERED", CufileFd::Buffered)] {
            assert_eq!(CufileFd::parse(s), Some(v), "{s}");
            assert_eq!(CufileFd::parse(v.name()), Some(v));
            assert_eq!(CufileFd::from_raw(v as u32).unwrap(), v);
        }
        for s in ["", "o_direct", "1", "on", "buffered please"] {
            assert_eq!(CufileFd::parse(s), None, "{s}");
        }
        assert!(matches!(CufileFd::from_raw(3), Err(Error::InvalidEnum { value: 3, .. })));
    }

    #[test]
    fn auto_is_buffered_only_without_nvidia_fs() {
        use Descriptor::*;
        let cases = [
            (CufileFd::Auto, Some(false), Buffered),
            (CufileFd::Auto, Some(true), Direct),
            (CufileFd::Auto, None, Direct),
            (CufileFd::Direct, Some(false), Direct),
            (CufileFd::Buffered, Some(true), Buffered),
        ];
        for (setting, nvfs, expected) in cases {
            assert_eq!(setting.choose(nvfs).descriptor, expected, "{setting:?} {nvfs:?}");
        }
        let text = CufileFd::Auto.choose(Some(false)).to_string();
        assert_eq!(text, "cuFile registered the buffered descriptor (no nvidia-fs: cuFile's compat path reads the page cache)");
        assert!(CufileFd::Direct.choose(None).to_string().contains("O_DIRECT descriptor"));
    }
}
