//! Whether stream-ordered calls queue on their stream without blocking the caller
//! (`GDSROUTE_STREAM_ORDERED`): `auto` (the default) queues them on streams that the legacy
//! default stream does not wait for (streams created `CU_STREAM_NON_BLOCKING`) and, on the others
//! (the legacy and per-thread default streams, streams created blocking), relays them with
//! `GDSROUTE_STREAM_RELAY` on (the default), else takes KvikIO's blocking fallback; `on` queues them on every stream; `off` blocks on every stream. Why `auto`: while a
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
        let text = super::env::significant(text);
        if text.eq_ignore_ascii_case("auto") {
            return Some(StreamOrdered::Auto);
        }
        super::env::boolean(text).map(|on| if on { StreamOrdered::On } else { StreamOrdered::Off })
    }

    /// Lower-case name as used in messages.
    pub fn name(self) -> &'static str {
        match self {
            StreamOrdered::Off => "off",
            StreamOrdered::On => "on",
            StreamOrdered::Auto => "auto",
        }
    }

    /// Whether a call on a stream queues there; `legacy_waits` tells whether the legacy default
    /// stream waits for that stream, asked only under `Auto` (it is a driver call).
    pub(crate) fn queues_on<E>(self, legacy_waits: impl FnOnce() -> Result<bool, E>) -> Result<bool, E> {
        match self {
            StreamOrdered::Off => Ok(false),
            StreamOrdered::On => Ok(true),
            StreamOrdered::Auto => legacy_waits().map(|waits| !waits),
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
        let waits = |answer: bool| move || Ok::<_, ()>(answer);
        assert!(StreamOrdered::Auto.queues_on(waits(false)).unwrap());
        assert!(!StreamOrdered::Auto.queues_on(waits(true)).unwrap());
        assert!(StreamOrdered::On.queues_on(waits(true)).unwrap() && StreamOrdered::On.queues_on(waits(false)).unwrap());
        assert!(!StreamOrdered::Off.queues_on(waits(true)).unwrap() && !StreamOrdered::Off.queues_on(waits(false)).unwrap());
        let unasked = || -> Result<bool, ()> { panic!("asked outside auto") };
        assert_eq!((StreamOrdered::On.queues_on(unasked), StreamOrdered::Off.queues_on(unasked)), (Ok(true), Ok(false)));
        assert_eq!(StreamOrdered::Auto.queues_on(|| Err::<bool, _>("driver")), Err("driver"));
    }
}
