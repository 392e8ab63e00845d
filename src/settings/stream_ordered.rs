//! Whether stream-ordered calls queue on their stream without blocking the caller
//! (`GDSROUTE_STREAM_ORDERED`): `auto` (the default) queues them on streams that the legacy
//! default stream does not wait for (streams created `CU_STREAM_NON_BLOCKING`) and takes KvikIO's
//! blocking fallback on the others (the legacy and per-thread default streams, streams created
//! blocking); `on` queues them on every stream; `off` blocks on every stream. Why `auto`: while a
//! call waits queued on a stream that a synchronous legacy-stream call of the program waits for
//! (a `cuMemcpyDtoH` on the legacy stream), the CUDA driver holds a lock of the whole process that
//! the transfer's own copies wait for, so the two wait for each other (docs/routing.md,
//! "Stream-ordered calls"). On a non-blocking stream nothing of the legacy stream waits for the
//! call, and the H200 passed every ordering, overlap, error and exit test there on both routes
//! (2026-12-04).

pub(crate) use crate::abi::StreamOrdered;

impl StreamOrdered {
    /// Parses auto, or a boolean as the other switches spell one (1/true/on/yes, 0/false/off/no),
    /// case-insensitively, surrounding whitespace ignored.
    pub fn parse(text: &str) -> Option<StreamOrdered> {
        match super::env::significant(text).to_ascii_lowercase().as_str() {
            "auto" => Some(StreamOrdered::Auto),
            "1" | "true" | "on" | "yes" => Some(StreamOrdered::On),
            "0" | "false" | "off" | "no" => Some(StreamOrdered::Off),
            _ => None,
        }
    }

    /// Lower-case name as used in messages.
    pub fn name(self) -> &'static str {
        match self {
            StreamOrdered::Off => "off",
            StreamOrdered::On => "on",
            StreamOrdered::Auto => "auto",
        }
    }

    /// Whether a call on a stream queues there, given whether the legacy default stream waits
    /// for that stream.
    pub(crate) fn queues_on(self, waited_for_by_legacy_stream: bool) -> bool {
        match self {
            StreamOrdered::Off => false,
            StreamOrdered::On => true,
            StreamOrdered::Auto => !waited_for_by_legacy_stream,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_auto_and_booleans() {
        for (s, v) in [("auto", StreamOrdered::Auto), (" AUTO ", StreamOrdered::Auto), ("on", StreamOrdered::On), ("1", StreamOrdered::On), ("Yes", StreamOrdered::On), ("true", StreamOrdered::On), ("off", StreamOrdered::Off), ("0", StreamOrdered::Off), ("no", StreamOrdered::Off), ("FALSE", StreamOrdered::Off)] {
            assert_eq!(StreamOrdered::parse(s), Some(v), "{s}");
        }
        for v in [StreamOrdered::Off, StreamOrdered::On, StreamOrdered::Auto] {
            assert_eq!(StreamOrdered::parse(v.name()), Some(v));
            assert_eq!(StreamOrdered::from_raw(v as u32).unwrap(), v);
        }
        for s in ["", "2", "automatic", "on please"] {
            assert_eq!(StreamOrdered::parse(s), None, "{s}");
        }
        assert!(StreamOrdered::from_raw(3).is_err());
    }

    #[test]
    fn auto_queues_only_where_the_legacy_stream_does_not_wait() {
        assert!(StreamOrdered::Auto.queues_on(false));
        assert!(!StreamOrdered::Auto.queues_on(true));
        assert!(StreamOrdered::On.queues_on(true) && StreamOrdered::On.queues_on(false));
        assert!(!StreamOrdered::Off.queues_on(true) && !StreamOrdered::Off.queues_on(false));
    }
}
