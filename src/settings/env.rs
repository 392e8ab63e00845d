//! Reading the settings' environment variables. One rule for every value, numbers, booleans and
//! words alike: surrounding whitespace is ignored (`significant`), the rest must be exactly one of
//! the setting's spellings. A number is decimal digits, optionally after a '+', so "4MiB" is an
//! error naming the variable and the value instead of KvikIO's silent 4. Sizes are 64-bit, so
//! values of 2 GiB and more work.
//!
//! Every message about an environment value has one form: `NAME="value as given": problem`
//! (the value in double quotes, escaped as Rust's `{:?}` does), whatever the setting.

use crate::error::{Error, Result};
use std::ops::RangeInclusive;

/// Where the environment comes from; tests substitute a map for the process environment.
pub(crate) trait EnvSource {
    /// The raw value of `name`, if set. Non-UTF-8 values are reported as set but unreadable.
    fn get(&self, name: &str) -> Option<std::result::Result<String, String>>;
}

/// The real process environment.
pub(crate) struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<std::result::Result<String, String>> {
        std::env::var_os(name).map(|v| v.into_string().map_err(|raw| raw.to_string_lossy().into_owned()))
    }
}

/// The one form of every message about an environment value: `NAME="raw": problem`.
pub(crate) fn value_error(name: &str, raw: &str, problem: impl std::fmt::Display) -> Error {
    Error::InvalidSetting(format!("{name}={raw:?}: {problem}"))
}

fn read_value(env: &dyn EnvSource, name: &str) -> Result<Option<String>> {
    match env.get(name) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(lossy)) => Err(value_error(name, &lossy, "not valid UTF-8")),
    }
}

/// The part of a value that counts, for every setting: the value without surrounding whitespace.
pub(crate) fn significant(raw: &str) -> &str {
    raw.trim()
}

/// The project's one spelling of a boolean, any case: 1/true/on/yes or 0/false/off/no (the
/// switches, and the booleans `KVIKIO_COMPAT_MODE` and `GDSROUTE_STREAM_ORDERED` also accept).
/// `text` is already significant.
pub(crate) fn boolean(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// Why a text is not an unsigned decimal integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotUnsigned {
    /// Not plain decimal digits (units, sign, fraction, empty, ...).
    NotDigits,
    /// Digits, but more than fit in 64 bits.
    TooLarge,
}

/// Parses an unsigned decimal integer strictly: digits, optionally after a '+' (the value's
/// significant text: whitespace is the reader's to remove).
pub(crate) fn parse_unsigned(text: &str) -> std::result::Result<u64, NotUnsigned> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NotUnsigned::NotDigits);
    }
    digits.parse().map_err(|_| NotUnsigned::TooLarge)
}

/// How a setting's value is spelled, each kind giving a raw `u64` (`table::Value`).
pub(crate) enum Parse {
    /// A decimal integer in the range (its start is 0 or 1).
    Unsigned(RangeInclusive<u64>),
    /// 1/true/on/yes or 0/false/off/no, any case.
    Bool,
    /// One of a few words, recognised by `parse`; `expected` lists them for the error message.
    Word { parse: fn(&str) -> Option<u64>, expected: &'static str },
}

impl Parse {
    /// The raw value of a significant text, or the problem with it.
    fn parse(&self, text: &str) -> std::result::Result<u64, String> {
        match self {
            Parse::Unsigned(range) => {
                let what = if *range.start() == 0 { "a non-negative integer" } else { "a positive integer" };
                match parse_unsigned(text) {
                    Ok(v) if range.contains(&v) => Ok(v),
                    Ok(v) if v < *range.start() => Err(format!("must be {what}")),
                    Ok(_) | Err(NotUnsigned::TooLarge) => Err(format!("out of range (max {})", range.end())),
                    Err(NotUnsigned::NotDigits) => {
                        Err(format!("expected {what} in plain decimal digits (no units, no sign, no fraction)"))
                    }
                }
            }
            Parse::Bool => boolean(text).map(u64::from).ok_or_else(|| "expected 1/true/on/yes or 0/false/off/no".to_string()),
            Parse::Word { parse, expected } => parse(text).ok_or_else(|| format!("expected {expected}")),
        }
    }
}

/// Reads one variable as `parse` spells it: `None` when unset.
pub(crate) fn read(env: &dyn EnvSource, name: &str, parse: &Parse) -> Result<Option<u64>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    parse.parse(significant(&raw)).map(Some).map_err(|problem| value_error(name, &raw, problem))
}

/// Reads a variable and its aliases (KVIKIO_NTHREADS / KVIKIO_NUM_THREADS) with `read`. As in
/// KvikIO, several names may be set if they mean the same: the values are compared after parsing,
/// so "4", "04" and " 4" agree; different values are an error naming both. A bad value under
/// any name is that name's error.
pub(crate) fn read_with_aliases<T: PartialEq>(
    env: &dyn EnvSource,
    name: &str,
    aliases: &[&str],
    read: impl Fn(&dyn EnvSource, &str) -> Result<Option<T>>,
) -> Result<Option<T>> {
    let mut found: Option<(&str, T)> = None;
    for &each in std::iter::once(&name).chain(aliases) {
        let Some(value) = read(env, each)? else { continue };
        match &found {
            Some((first, earlier)) if *earlier != value => {
                let raw = |n| read_value(env, n).ok().flatten().unwrap_or_default();
                return Err(Error::InvalidSetting(format!(
                    "{each}={:?} conflicts with its alias {first}={:?}; set one of them or give both the same value",
                    raw(each),
                    raw(first)
                )));
            }
            Some(_) => {}
            None => found = Some((each, value)),
        }
    }
    Ok(found.map(|(_, value)| value))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::settings::CompatMode;
    use std::collections::HashMap;

    /// A fake environment for tests.
    pub(crate) struct MapEnv(pub HashMap<String, String>);

    impl MapEnv {
        pub(crate) fn of(pairs: &[(&str, &str)]) -> MapEnv {
            MapEnv(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
        }
    }

    impl EnvSource for MapEnv {
        fn get(&self, name: &str) -> Option<std::result::Result<String, String>> {
            self.0.get(name).cloned().map(Ok)
        }
    }

    fn unsigned(env: &dyn EnvSource, name: &str, range: RangeInclusive<u64>) -> Result<Option<u64>> {
        read(env, name, &Parse::Unsigned(range))
    }

    fn boolean(env: &dyn EnvSource, name: &str) -> Result<Option<u64>> {
        read(env, name, &Parse::Bool)
    }

    #[test]
    fn strict_integers() {
        assert_eq!(parse_unsigned("4194304"), Ok(4194304));
        assert_eq!(parse_unsigned("+8"), Ok(8));
        assert_eq!(parse_unsigned("3000000000"), Ok(3_000_000_000));
        assert_eq!(parse_unsigned("18446744073709551615"), Ok(u64::MAX));
        for bad in ["", " ", "4MiB", "1e6", "0x10", "1.5", "-5", "abc", "+ 8"] {
            assert_eq!(parse_unsigned(bad), Err(NotUnsigned::NotDigits), "{bad}");
        }
        for huge in ["18446744073709551616", "99999999999999999999999"] {
            assert_eq!(parse_unsigned(huge), Err(NotUnsigned::TooLarge), "{huge}");
        }
    }

    #[test]
    fn surrounding_whitespace_is_ignored_for_numbers_booleans_and_words_alike() {
        let env = MapEnv::of(&[("N", " +8\t"), ("B", " Yes\n"), ("W", "  auto ")]);
        assert_eq!(unsigned(&env, "N", 1..=u64::MAX).unwrap(), Some(8));
        assert_eq!(boolean(&env, "B").unwrap(), Some(1));
        let word = Parse::Word { parse: |t| (t == "auto").then_some(7), expected: "auto" };
        assert_eq!(read(&env, "W", &word).unwrap(), Some(7));
        // Inner whitespace is not ignored: the significant text must be one spelling.
        let env = MapEnv::of(&[("N", "4 4"), ("B", "y es")]);
        assert!(unsigned(&env, "N", 1..=u64::MAX).is_err());
        assert!(boolean(&env, "B").is_err());
    }

    #[test]
    fn errors_name_variable_and_value() {
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "4MiB")]);
        let err = unsigned(&env, "KVIKIO_TASK_SIZE", 1..=u64::MAX).unwrap_err().to_string();
        assert!(err.contains("KVIKIO_TASK_SIZE") && err.contains("4MiB"), "{err}");
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "0")]);
        assert!(unsigned(&env, "KVIKIO_TASK_SIZE", 1..=u64::MAX).is_err());
        assert_eq!(unsigned(&env, "KVIKIO_TASK_SIZE", 0..=u64::MAX).unwrap(), Some(0));
    }

    #[test]
    fn digits_beyond_the_maximum_are_out_of_range_not_bad_digits() {
        // Issue 15: 20 digits were reported as "expected a positive integer in plain decimal digits".
        for (raw, max) in [("99999999999999999999", u64::MAX), ("1025", 1024), ("18446744073709551616", 1024)] {
            let env = MapEnv::of(&[("N", raw)]);
            let err = unsigned(&env, "N", 1..=max).unwrap_err().to_string();
            assert_eq!(err, format!("N=\"{raw}\": out of range (max {max})"));
        }
    }

    #[test]
    fn every_message_quotes_the_value_the_same_way() {
        // Issue 15: `N=1025:` next to `N="0":`. One form for every reader and every problem.
        let err = |raw: &str, parse: &Parse| read(&MapEnv::of(&[("N", raw)]), "N", parse).unwrap_err().to_string();
        let compat = &crate::settings::TABLE[0].parse;
        let cases = [
            ("0", err("0", &Parse::Unsigned(1..=1024))),
            ("1025", err("1025", &Parse::Unsigned(1..=1024))),
            ("4MiB", err("4MiB", &Parse::Unsigned(1..=1024))),
            ("", err("", &Parse::Unsigned(1..=1024))),
            ("maybe", err("maybe", &Parse::Bool)),
            ("sometimes", err("sometimes", compat)),
        ];
        for (raw, err) in cases {
            assert!(err.starts_with(&format!("N={raw:?}: ")), "{err}");
        }
    }

    #[test]
    fn aliases_compare_values_not_spellings() {
        let read = |env: &dyn EnvSource, n: &str| unsigned(env, n, 1..=1024);
        for (a, b) in [("4", "4"), ("4", "04"), ("4", " 4"), ("+4", "4 ")] {
            let env = MapEnv::of(&[("A", a), ("B", b)]);
            assert_eq!(read_with_aliases(&env, "A", &["B"], read).unwrap(), Some(4), "{a:?} {b:?}");
        }
        let env = MapEnv::of(&[("B", "6")]);
        assert_eq!(read_with_aliases(&env, "A", &["B"], read).unwrap(), Some(6));
        assert_eq!(read_with_aliases(&MapEnv::of(&[]), "A", &["B"], read).unwrap(), None);
        let env = MapEnv::of(&[("A", "4"), ("B", "5")]);
        let err = read_with_aliases(&env, "A", &["B"], read).unwrap_err().to_string();
        assert!(err.contains("conflicts") && err.contains("B=\"5\"") && err.contains("A=\"4\""), "{err}");
        // A bad value under either name is reported as that name's own error.
        let env = MapEnv::of(&[("A", "4"), ("B", "x")]);
        let err = read_with_aliases(&env, "A", &["B"], read).unwrap_err().to_string();
        assert!(err.starts_with("B=\"x\": expected"), "{err}");
    }

    #[test]
    fn booleans() {
        assert_eq!(boolean(&MapEnv::of(&[("B", " Yes ")]), "B").unwrap(), Some(1));
        assert_eq!(boolean(&MapEnv::of(&[("B", "0")]), "B").unwrap(), Some(0));
        assert!(boolean(&MapEnv::of(&[("B", "2")]), "B").unwrap_err().to_string().contains("B=\"2\""));
        assert_eq!(boolean(&MapEnv::of(&[]), "B").unwrap(), None);
    }

    #[test]
    fn compat_mode_variable() {
        let compat = &crate::settings::TABLE[0];
        assert_eq!(compat.name, "KVIKIO_COMPAT_MODE");
        let env = MapEnv::of(&[("M", "YES")]);
        assert_eq!(read(&env, "M", &compat.parse).unwrap(), Some(CompatMode::On as u64));
        let env = MapEnv::of(&[("M", "maybe")]);
        let err = read(&env, "M", &compat.parse).unwrap_err().to_string();
        assert!(err.contains("M=\"maybe\""), "{err}");
        assert_eq!(read(&MapEnv::of(&[]), "M", &compat.parse).unwrap(), None);
    }
}
