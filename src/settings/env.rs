//! Reading KvikIO's environment variables. Values are parsed strictly: a number is digits only
//! (surrounding whitespace and a leading '+' allowed), so "4MiB" is an error naming the variable
//! and the value instead of KvikIO's silent 4. Sizes are 64-bit, so values of 2 GiB and more work.

use crate::error::{Error, Result};
use crate::settings::CompatMode;

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

fn read_value(env: &dyn EnvSource, name: &str) -> Result<Option<String>> {
    match env.get(name) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(lossy)) => Err(Error::InvalidSetting(format!("{name}={lossy:?} is not valid UTF-8"))),
    }
}

/// Parses an unsigned decimal integer strictly (see module docs).
pub fn parse_unsigned(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Reads a positive (or, with `allow_zero`, non-negative) integer variable.
pub fn read_unsigned(env: &dyn EnvSource, name: &str, allow_zero: bool) -> Result<Option<u64>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    let what = if allow_zero { "a non-negative integer" } else { "a positive integer" };
    match parse_unsigned(&raw) {
        Some(0) if !allow_zero => Err(Error::InvalidSetting(format!("{name}={raw:?}: must be {what}"))),
        Some(v) => Ok(Some(v)),
        None => Err(Error::InvalidSetting(format!(
            "{name}={raw:?}: expected {what} in plain decimal digits (no units, no sign, no fraction)"
        ))),
    }
}

/// Reads a variable that has an alias (KVIKIO_NTHREADS / KVIKIO_NUM_THREADS). As in KvikIO, the
/// same raw value under both names is fine and different values are an error.
pub fn read_unsigned_with_alias(
    env: &dyn EnvSource,
    name: &str,
    alias: &str,
    allow_zero: bool,
) -> Result<Option<u64>> {
    let primary = read_value(env, name)?;
    let secondary = read_value(env, alias)?;
    if let (Some(a), Some(b)) = (&primary, &secondary)
        && a != b
    {
        return Err(Error::InvalidSetting(format!(
            "{alias}={b:?} conflicts with its alias {name}={a:?}; set one of them or give both the same value"
        )));
    }
    let chosen = if primary.is_some() { name } else { alias };
    read_unsigned(env, chosen, allow_zero)
}

/// Reads a boolean variable: 1/true/on/yes or 0/false/off/no, any case, surrounding whitespace
/// ignored.
pub fn read_bool(env: &dyn EnvSource, name: &str) -> Result<Option<bool>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(Some(true)),
        "0" | "false" | "off" | "no" => Ok(Some(false)),
        _ => Err(Error::InvalidSetting(format!("{name}={raw:?}: expected 1/true/on/yes or 0/false/off/no"))),
    }
}

/// Reads a variable whose value is one of a few words, recognised by `parse`; `expected` lists
/// them for the error message.
pub fn read_word<T>(env: &dyn EnvSource, name: &str, parse: impl Fn(&str) -> Option<T>, expected: &str) -> Result<Option<T>> {
    let Some(raw) = read_value(env, name)? else { return Ok(None) };
    parse(&raw).map(Some).ok_or_else(|| Error::InvalidSetting(format!("{name}={raw:?}: expected {expected}")))
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
        assert_eq!(parse_unsigned("4194304"), Some(4194304));
        assert_eq!(parse_unsigned(" +8 "), Some(8));
        assert_eq!(parse_unsigned("3000000000"), Some(3_000_000_000));
        for bad in ["", " ", "4MiB", "1e6", "0x10", "1.5", "-5", "abc", "99999999999999999999999"] {
            assert_eq!(parse_unsigned(bad), None, "{bad}");
        }
    }

    #[test]
    fn errors_name_variable_and_value() {
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "4MiB")]);
        let err = read_unsigned(&env, "KVIKIO_TASK_SIZE", false).unwrap_err().to_string();
        assert!(err.contains("KVIKIO_TASK_SIZE") && err.contains("4MiB"), "{err}");
        let env = MapEnv::of(&[("KVIKIO_TASK_SIZE", "0")]);
        assert!(read_unsigned(&env, "KVIKIO_TASK_SIZE", false).is_err());
        assert_eq!(read_unsigned(&env, "KVIKIO_TASK_SIZE", true).unwrap(), Some(0));
    }

    #[test]
    fn aliases() {
        let env = MapEnv::of(&[("A", "4"), ("B", "4")]);
        assert_eq!(read_unsigned_with_alias(&env, "A", "B", false).unwrap(), Some(4));
        let env = MapEnv::of(&[("B", "6")]);
        assert_eq!(read_unsigned_with_alias(&env, "A", "B", false).unwrap(), Some(6));
        let env = MapEnv::of(&[("A", "4"), ("B", "5")]);
        let err = read_unsigned_with_alias(&env, "A", "B", false).unwrap_err().to_string();
        assert!(err.contains("conflicts"), "{err}");
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
