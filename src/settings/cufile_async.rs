//! How a stream-ordered call that cuFile serves moves its bytes (`GDSROUTE_CUFILE_ASYNC`):
//! `tasks`, the engine's stream mode with parallel `cuFileRead` / `cuFileWrite` tasks once the
//! stream reached the call (the default: every route the same machinery), or `native`, cuFile's
//! own `cuFileReadAsync` / `cuFileWriteAsync` on streams registered with
//! `gdsroute_stream_register` (on a stream cuFile has not registered, cuFile 1.15 blocks the
//! caller until the stream's queued work finished, so those keep `tasks`). Both are offered so
//! that they can be measured side by side (docs/routing.md, "Stream-ordered calls").

use crate::error::{Error, Result};

/// The `GDSROUTE_CUFILE_ASYNC` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CufileAsync {
    /// The engine's stream mode, parallel cuFile tasks.
    #[default]
    Tasks = 0,
    /// `cuFileReadAsync` / `cuFileWriteAsync` on registered streams.
    Native = 1,
}

impl CufileAsync {
    /// Parses tasks or native, case-insensitively, surrounding whitespace ignored.
    pub(crate) fn parse(text: &str) -> Option<CufileAsync> {
        match super::env::significant(text).to_ascii_lowercase().as_str() {
            "tasks" => Some(CufileAsync::Tasks),
            "native" => Some(CufileAsync::Native),
            _ => None,
        }
    }

    /// Lower-case name as used in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CufileAsync::Tasks => "tasks",
            CufileAsync::Native => "native",
        }
    }

    /// The setting from its stored value.
    pub(crate) fn from_raw(value: u32) -> Result<CufileAsync> {
        [CufileAsync::Tasks, CufileAsync::Native].into_iter().find(|m| *m as u32 == value).ok_or(Error::InvalidEnum { what: "cuFile async mode", value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_converts() {
        for (s, v) in [("tasks", CufileAsync::Tasks), (" Native ", CufileAsync::Native), ("TASKS", CufileAsync::Tasks)] {
            assert_eq!(CufileAsync::parse(s), Some(v), "{s}");
            assert_eq!(CufileAsync::parse(v.name()), Some(v));
            assert_eq!(CufileAsync::from_raw(v as u32).unwrap(), v);
        }
        for s in ["", "on", "1", "native please"] {
            assert_eq!(CufileAsync::parse(s), None, "{s}");
        }
        assert!(CufileAsync::from_raw(2).is_err());
    }
}
