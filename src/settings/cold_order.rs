//! Which devices get turns in file order for reads of ranges not in the page cache
//! (`GDSROUTE_COLD_ORDER`, `crate::disk_order`). One in-order stream is what a rotational disk
//! wants; fast NVMe arrays want many requests in flight, so the default follows the kernel's
//! `rotational` flag of the file's device.

use crate::error::{Error, Result};

/// When the tasks of a parallel POSIX read take turns in file order for their disk reads.
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ColdOrder {
    /// On devices the kernel reports as rotational (`queue/rotational`).
    #[default]
    Auto = 0,
    /// On every device.
    On = 1,
    /// Never: every task reads as soon as a thread runs it (KvikIO's behaviour).
    Off = 2,
}

impl ColdOrder {
    /// Converts a raw value received from C.
    pub fn from_raw(value: u32) -> Result<ColdOrder> {
        match value {
            0 => Ok(ColdOrder::Auto),
            1 => Ok(ColdOrder::On),
            2 => Ok(ColdOrder::Off),
            _ => Err(Error::InvalidEnum { what: "cold order", value }),
        }
    }

    /// Parses auto, on or off, case-insensitively, surrounding whitespace ignored.
    pub fn parse(text: &str) -> Option<ColdOrder> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(ColdOrder::Auto),
            "on" => Some(ColdOrder::On),
            "off" => Some(ColdOrder::Off),
            _ => None,
        }
    }

    /// Lower-case name as used in messages.
    pub fn name(self) -> &'static str {
        match self {
            ColdOrder::Auto => "auto",
            ColdOrder::On => "on",
            ColdOrder::Off => "off",
        }
    }

    /// Whether reads of a file on a device with this `rotational` flag take turns.
    pub fn applies(self, rotational: bool) -> bool {
        match self {
            ColdOrder::Auto => rotational,
            ColdOrder::On => true,
            ColdOrder::Off => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_converts_and_applies() {
        for (s, v) in [("auto", ColdOrder::Auto), (" On ", ColdOrder::On), ("OFF", ColdOrder::Off)] {
            assert_eq!(ColdOrder::parse(s), Some(v), "{s}");
            assert_eq!(ColdOrder::from_raw(v as u32).unwrap(), v);
            assert_eq!(ColdOrder::parse(v.name()), Some(v));
        }
        for s in ["", "1", "true", "rotational", "on please"] {
            assert_eq!(ColdOrder::parse(s), None, "{s}");
        }
        assert!(matches!(ColdOrder::from_raw(3), Err(Error::InvalidEnum { value: 3, .. })));
        assert_eq!([false, true].map(|r| ColdOrder::Auto.applies(r)), [false, true]);
        assert_eq!([false, true].map(|r| ColdOrder::On.applies(r)), [true, true]);
        assert_eq!([false, true].map(|r| ColdOrder::Off.applies(r)), [false, false]);
    }
}
