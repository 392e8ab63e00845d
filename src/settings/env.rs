//! Reading KvikIO's environment variables. Values are parsed strictly: a number is digits only
//! (surrounding whitespace and a leading '+' allowed), so "4MiB" is an error naming the variable
//! and the value instead of KvikIO's silent 4. Sizes are 64-bit, so values of 2 GiB and more work.
//!
//! Every message about an environment value has one form: `NAME="value as given": problem`
//! (the value in double quotes, escaped as Rust's `{:?}` does), whatever the setting.

use crate::error::{Error, Result};
use crate::settings::CompatMode;
use std::ops::RangeInclusive;

/// Where the environment comes from; tests substitute a map for the process environment.
pub trait EnvSource {
    /// The raw value of `name`, if set. Non-UTF-8 values are reported as set but unreadable.
    fn get(&self, name: &str) -> Option<std::result::Result<String, String>>;
}

/// The real process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<std::result::Result<String, String>> {
        std::env::var_os(name).map(|v| v.into_string().map_err(|raw| raw.to_string_lossy().into_owned()))
    }
}

/// The one form of every message about an environment value: `NAME="raw": problem`.
pub fn value_error(name: &str, raw: &str, problem: impl std::fmt::Display) -> Error {
    Error::InvalidSetting(format!("{name}={raw:?}: {problem}"))
}

fn read_value(env: &dyn EnvSource, name: &str) -> Result<Option<String>> {
    match env.get(name) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(lossy)) => Err(value_error(name, &lossy, "not valid UTF-8")),
    }
}

/// Why a text is not an unsigned decimal integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotUnsigned {
    /// Not plain decimal digits (units, sign, fraction, empty, ...).
    NotDigits,
    /// Digits, but more than fit in 64 bits.
    TooLarge,
}

/// Parses an unsigned decimal integer strictly (see module docs).
pub fn parse_unsigned(text: &str) -> std::result::Result<u64, NotUnsigned> {
    let t = text.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NotUnsigned::NotDigits);
    }
    digits.parse().map_err(|_| NotUnsigned::TooLarge)
}

/// Reads an integer variable whose value must lie in `range` (the start is 0 or 1).
pub fn read_unsigned(env: &dyn EnvSource, name: &str, range: RangeInclusive<u64>) -> Result<Option<u64>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    let what = if *range.start() == 0 { "a non-negative integer" } else { "a positive integer" };
    let max = *range.end();
    match parse_unsigned(&raw) {
        Ok(v) if range.contains(&v) => Ok(Some(v)),
        Ok(v) if v < *range.start() => Err(value_error(name, &raw, format_args!("must be {what}"))),
        Ok(_) | Err(NotUnsigned::TooLarge) => Err(value_error(name, &raw, format_args!("out of range (max {max})"))),
        Err(NotUnsigned::NotDigits) => Err(value_error(
            name,
            &raw,
            format_args!("expected {what} in plain decimal digits (no units, no sign, no fraction)"),
        )),
    }
}

/// Reads a variable that has an alias (KVIKIO_NTHREADS / KVIKIO_NUM_THREADS) with `read`. As in
/// KvikIO, both names may be set if they mean the same: the values are compared after parsing,
/// so "4", "04" and " 4" agree; different values are an error naming both. A bad value under
/// either name is that name's error.
pub fn read_with_alias<T: PartialEq>(
    env: &dyn EnvSource,
    name: &str,
    alias: &str,
    read: impl Fn(&dyn EnvSource, &str) -> Result<Option<T>>,
) -> Result<Option<T>> {
    let primary = read(env, name)?;
    let secondary = read(env, alias)?;
    match (primary, secondary) {
        (Some(a), Some(b)) if a != b => {
            let raw = |n| read_value(env, n).ok().flatten().unwrap_or_default();
            Err(Error::InvalidSetting(format!(
                "{alias}={:?} conflicts with its alias {name}={:?}; set one of them or give both the same value",
                raw(alias),
                raw(name)
            )))
        }
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

/// Reads a boolean variable: 1/true/on/yes or 0/false/off/no, any case, surrounding whitespace
/// ignored.
pub fn read_bool(env: &dyn EnvSource, name: &str) -> Result<Option<bool>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(Some(true)),
        "0" | "false" | "off" | "no" => Ok(Some(false)),
        _ => Err(value_error(name, &raw, "expected 1/true/on/yes or 0/false/off/no")),
    }
}

/// Reads a variable whose value is one of a few words, recognised by `parse`; `expected` lists
/// them for the error message.
pub fn read_word<T>(env: &dyn EnvSource, name: &str, parse: impl Fn(&str) -> Option<T>, expected: &str) -> Result<Option<T>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    parse(&raw).map(Some).ok_or_else(|| value_error(name, &raw, format_args!("expected {expected}")))
}

/// Reads KVIKIO_COMPAT_MODE.
pub fn read_compat_mode(env: &dyn EnvSource, name: &str) -> Result<Option<CompatMode>> {
    read_word(env, name, CompatMode::parse, "one of on/true/yes/1, off/false/no/0, auto (any case)")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fake environment for tests.
    pub struct MapEnv(pub HashMap<String, String>);

    impl MapEnv {
        pub fn of(pairs: &[(&str, &str)]) -> MapEnv {
            MapEnv(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
        }
    }

    impl EnvSource for MapEnv {
        fn get(&self, name: &str) -> Option<std::result::Result<String, String>> {
            self.0.get(name).cloned().map(Ok)
        }
    }

    #[test]
    fn strict_integers() {
        assert_eq!(parse_unsigned("4194304"), Ok(4194304));
        assert_eq!(parse_unsigned(" +8 "), Ok(8));
        assert_eq!(parse_unsigned("3000000000"), Ok(3_000_000_000));
        assert_eq!(parse_unsigned("18446744073709551615"), Ok(u64::MAX));
        for bad in ["", " ", "4MiB", "1e6", "0x10", "1.5", "-5", "abc"] {
            assert_eq!(parse_unsigned(bad), Err(NotUnsigned::NotDigits), "{bad}");
        }
        for huge in ["18446744073709551616", "99999999999999999999999"] {
            assert_eq!(parse_unsigned(huge), Err(NotUnsigned::TooLarge), "{huge}");
        }
    }

    #[test]
    fn errors_name_variable_and_value() {
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "4MiB")]);
        let err = read_unsigned(&env, "KVIKIO_TASK_SIZE", 1..=u64::MAX).unwrap_err().to_string();
        assert!(err.contains("KVIKIO_TASK_SIZE") && err.contains("4MiB"), "{err}");
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "0")]);
        assert!(read_unsigned(&env, "KVIKIO_TASK_SIZE", 1..=u64::MAX).is_err());
        assert_eq!(read_unsigned(&env, "KVIKIO_TASK_SIZE", 0..=u64::MAX).unwrap(), Some(0));
    }

    #[test]
    fn digits_beyond_the_maximum_are_out_of_range_not_bad_digits() {
        // Issue 15: 20 digits were reported as "expected a positive integer in plain decimal digits".
        for (raw, max) in [("99999999999999999999", u64::MAX), ("1025", 1024), ("18446744073709551616", 1024)] {
            let env = MapEnv::of(&[("N", raw)]);
            let err = read_unsigned(&env, "N", 1..=max).unwrap_err().to_string();
            assert_eq!(err, format!("N=\"{raw}\": out of range (max {max})"));
        }
    }

    #[test]
    fn every_message_quotes_the_value_the_same_way() {
        // Issue 15: `N=1025:` next to `N="0":`. One form for every reader and every problem.
        let unsigned = |raw: &str| read_unsigned(&MapEnv::of(&[("N", raw)]), "N", 1..=1024).unwrap_err().to_string();
        let cases = [
            ("0", unsigned("0")),
            ("1025", unsigned("1025")),
            ("4MiB", unsigned("4MiB")),
            ("", unsigned("")),
            ("maybe", read_bool(&MapEnv::of(&[("N", "maybe")]), "N").unwrap_err().to_string()),
            ("sometimes", read_compat_mode(&MapEnv::of(&[("N", "sometimes")]), "N").unwrap_err().to_string()),
        ];
        for (raw, err) in cases {
            assert!(err.starts_with(&format!("N={raw:?}: ")), "{err}");
        }
    }

    #[test]
    fn aliases_compare_values_not_spellings() {
        let read = |env: &dyn EnvSource, n: &str| read_unsigned(env, n, 1..=1024);
        for (a, b) in [("4", "4"), ("4", "04"), ("4", " 4"), ("+4", "4 ")] {
            let env = MapEnv::of(&[("A", a), ("B", b)]);
            assert_eq!(read_with_alias(&env, "A", "B", read).unwrap(), Some(4), "{a:?} {b:?}");
        }
        let env = MapEnv::of(&[("B", "6")]);
        assert_eq!(read_with_alias(&env, "A", "B", read).unwrap(), Some(6));
        assert_eq!(read_with_alias(&MapEnv::of(&[]), "A", "B", read).unwrap(), None);
        let env = MapEnv::of(&[("A", "4"), ("B", "5")]);
        let err = read_with_alias(&env, "A", "B", read).unwrap_err().to_string();
        assert!(err.contains("conflicts") && err.contains("B=\"5\"") && err.contains("A=\"4\""), "{err}");
        // A bad value under either name is reported as that name's own error.
        let env = MapEnv::of(&[("A", "4"), ("B", "x")]);
        let err = read_with_alias(&env, "A", "B", read).unwrap_err().to_string();
        assert!(err.starts_with("B=\"x\": expected"), "{err}");
    }

    #[test]
    fn booleans() {
        assert_eq!(read_bool(&MapEnv::of(&[("B", " Yes ")]), "B").unwrap(), Some(true));
        assert_eq!(read_bool(&MapEnv::of(&[("B", "0")]), "B").unwrap(), Some(false));
        assert!(read_bool(&MapEnv::of(&[("B", "2")]), "B").unwrap_err().to_string().contains("B=\"2\""));
        assert_eq!(read_bool(&MapEnv::of(&[]), "B").unwrap(), None);
    }

    #[test]
    fn compat_mode_variable() {
        let env = MapEnv::of(&[("M", "YES")]);
        assert_eq!(read_compat_mode(&env, "M").unwrap(), Some(CompatMode::On));
        let env = MapEnv::of(&[("M", "maybe")]);
        let err = read_compat_mode(&env, "M").unwrap_err().to_string();
        assert!(err.contains("M=\"maybe\""), "{err}");
        assert_eq!(read_compat_mode(&MapEnv::of(&[]), "M").unwrap(), None);
    }
}
