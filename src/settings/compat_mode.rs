//! KvikIO's compatibility mode: whether reads into device memory may call cuFile (OFF), must not
//! (ON), or try it and fall back to our POSIX backend (AUTO). The numbers match KvikIO's enum.

pub(crate) use crate::abi::CompatMode;

impl CompatMode {
    /// Parses KvikIO's spellings, case-insensitively: on/true/yes/1, off/false/no/0, auto. As
    /// KvikIO's `parse_compat_mode_str`, the whole value must be one of them ("yes please" is
    /// rejected); surrounding whitespace is ignored (the rule of every setting,
    /// `env::significant`), which KvikIO does not ignore.
    pub fn parse(text: &str) -> Option<CompatMode> {
        let text = super::env::significant(text);
        if text.eq_ignore_ascii_case("auto") {
            return Some(CompatMode::Auto);
        }
        super::env::boolean(text).map(|on| if on { CompatMode::On } else { CompatMode::Off })
    }

    /// Lower-case name as used in messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            CompatMode::Off => "off",
            CompatMode::On => "on",
            CompatMode::Auto => "auto",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn parses_kvikio_spellings() {
        for s in ["on", "ON", "True", "yes", "1", " on "] {
            assert_eq!(CompatMode::parse(s), Some(CompatMode::On), "{s}");
        }
        for s in ["off", "FALSE", "No", "0"] {
            assert_eq!(CompatMode::parse(s), Some(CompatMode::Off), "{s}");
        }
        assert_eq!(CompatMode::parse("Auto"), Some(CompatMode::Auto));
        for s in ["", "11", "2", "yes please", "onn", "*&^Yes"] {
            assert_eq!(CompatMode::parse(s), None, "{s}");
        }
    }

    #[test]
    fn raw_values_match_kvikio() {
        assert_eq!(CompatMode::from_raw(0).unwrap(), CompatMode::Off);
        assert_eq!(CompatMode::from_raw(1).unwrap(), CompatMode::On);
        assert_eq!(CompatMode::from_raw(2).unwrap(), CompatMode::Auto);
        assert!(matches!(CompatMode::from_raw(3), Err(Error::InvalidEnum { value: 3, .. })));
    }
}
