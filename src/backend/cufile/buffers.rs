//! Buffers registered with cuFile through gdsroute (`cuFileBufRegister`, KvikIO's
//! `buffer_register` / `memory_register`), by base address and reference-counted: each
//! registration of a base counts once more, and only the deregistration that brings the count
//! to 0 calls `cuFileBufDeregister`. cuFile itself is not counted: a second `cuFileBufRegister`
//! of a base fails with 5023 (MEMORY_ALREADY_REGISTERED) and one deregistration undoes it, so two
//! parts of a program sharing a buffer would pull it from under each other. Where cuFile is not
//! used (compat mode ON, cuFile unusable) a registration is recorded and counted, and nothing is
//! registered. A base cuFile had registered already (someone called cuFile directly) is
//! recorded, and left registered with cuFile when its last gdsroute reference goes.
//!
//! The registry's lock is held across the cuFile call, so that a registration and a
//! deregistration of one base never cross; cuFile's call takes about 35 ms per GiB of device
//! memory (measured on the H200, docs/local-api.md, "Buffer registration").

use crate::error::{Error, Result};
use crate::sys::cufile::CufileFailure;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// cuFile's code for a base that is registered already.
const MEMORY_ALREADY_REGISTERED: i32 = 5023;

/// What a registration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// `cuFileBufRegister` registered the buffer.
    Cufile,
    /// The base was registered through gdsroute already: one more reference, nothing called.
    AnotherReference,
    /// cuFile had the base registered already, not through gdsroute: recorded, and left
    /// registered with cuFile when its last reference goes.
    RegisteredOutside,
    /// cuFile is not used in this process (compat mode ON, or cuFile unusable): recorded and
    /// counted, nothing registered.
    Skipped,
}

/// What a deregistration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deregistration {
    /// References remain (this many): nothing called.
    StillReferenced(u64),
    /// The last reference went: `cuFileBufDeregister` was called, if gdsroute registered it.
    Released,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    len: usize,
    references: u64,
    /// gdsroute's `cuFileBufRegister` registered it, so the last deregistration undoes it.
    ours: bool,
}

/// The bases registered through gdsroute.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<BTreeMap<usize, Entry>>,
}

impl Registry {
    pub(crate) const fn new() -> Registry {
        Registry { entries: Mutex::new(BTreeMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `len` bytes at `base`: another reference when the base is recorded (its first
    /// length stays), else `cufile` (`None`: cuFile is not used) and a new record.
    ///
    /// Errors: cuFile's refusal (other than 5023), as `Error::Cufile`; nothing is recorded then.
    pub(crate) fn register(&self, base: usize, len: usize, cufile: Option<impl FnOnce() -> std::result::Result<(), CufileFailure>>) -> Result<Registration> {
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(&base) {
            entry.references += 1;
            return Ok(Registration::AnotherReference);
        }
        let how = match cufile.map(|call| call()) {
            None => Registration::Skipped,
            Some(Ok(())) => Registration::Cufile,
            Some(Err(e)) if e.code == MEMORY_ALREADY_REGISTERED => Registration::RegisteredOutside,
            Some(Err(e)) => return Err(Error::Cufile(format!("{e} (buffer {base:#x}, {len} bytes)"))),
        };
        entries.insert(base, Entry { len, references: 1, ours: how == Registration::Cufile });
        Ok(how)
    }

    /// Drops one reference of `base`; the last one calls `cufile` where gdsroute registered it
    /// with cuFile.
    ///
    /// Errors: `InvalidArgument` for a base not registered through gdsroute; cuFile's refusal as
    /// `Error::Cufile` (the record goes anyway: cuFile no longer holds it as ours).
    pub(crate) fn deregister(&self, base: usize, cufile: impl FnOnce() -> std::result::Result<(), CufileFailure>) -> Result<Deregistration> {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(&base) else {
            return Err(Error::InvalidArgument(format!(
                "buffer {base:#x} is not registered through gdsroute (register it first; a buffer is named by the base it was registered with)"
            )));
        };
        if entry.references > 1 {
            entry.references -= 1;
            return Ok(Deregistration::StillReferenced(entry.references));
        }
        let ours = entry.ours;
        entries.remove(&base);
        if ours {
            cufile().map_err(|e| Error::Cufile(format!("{e} (buffer {base:#x})")))?;
        }
        Ok(Deregistration::Released)
    }

    /// References held on `base` (0: not registered through gdsroute).
    pub(crate) fn references(&self, base: usize) -> u64 {
        self.lock().get(&base).map_or(0, |e| e.references)
    }

    /// Bytes gdsroute holds registered with cuFile now.
    pub(crate) fn cufile_bytes(&self) -> u64 {
        self.lock().values().filter(|e| e.ours).map(|e| e.len as u64).sum()
    }
}

/// The process's registry.
pub(crate) static REGISTERED: Registry = Registry::new();

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn ok() -> std::result::Result<(), CufileFailure> {
        Ok(())
    }

    #[test]
    fn two_registrations_need_two_deregistrations_and_cufile_is_called_once_each_way() {
        let registry = Registry::new();
        let (registers, deregisters) = (Cell::new(0), Cell::new(0));
        let register = || {
            registers.set(registers.get() + 1);
            ok()
        };
        assert_eq!(registry.register(0x1000, 4096, Some(register)).unwrap(), Registration::Cufile);
        assert_eq!(registry.register(0x1000, 4096, Some(|| -> std::result::Result<(), CufileFailure> { panic!("not called") })).unwrap(), Registration::AnotherReference);
        assert_eq!((registers.get(), registry.references(0x1000), registry.cufile_bytes()), (1, 2, 4096));
        let deregister = || {
            deregisters.set(deregisters.get() + 1);
            ok()
        };
        assert_eq!(registry.deregister(0x1000, deregister).unwrap(), Deregistration::StillReferenced(1));
        assert_eq!(deregisters.get(), 0, "still referenced: cuFile keeps it");
        assert_eq!(registry.deregister(0x1000, deregister).unwrap(), Deregistration::Released);
        assert_eq!((deregisters.get(), registry.references(0x1000), registry.cufile_bytes()), (1, 0, 0));
    }

    #[test]
    fn an_unknown_base_is_a_clear_error_and_calls_nothing() {
        let registry = Registry::new();
        let e = registry.deregister(0x2000, || -> std::result::Result<(), CufileFailure> { panic!("not called") }).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(ref m) if m.contains("0x2000") && m.contains("not registered")), "{e}");
    }

    #[test]
    fn without_cufile_a_registration_is_recorded_and_its_deregistration_calls_nothing() {
        let registry = Registry::new();
        let none: Option<fn() -> std::result::Result<(), CufileFailure>> = None;
        assert_eq!(registry.register(0x3000, 100, none).unwrap(), Registration::Skipped);
        assert_eq!((registry.references(0x3000), registry.cufile_bytes()), (1, 0));
        assert_eq!(registry.deregister(0x3000, || -> std::result::Result<(), CufileFailure> { panic!("not called") }).unwrap(), Deregistration::Released);
    }

    #[test]
    fn a_base_cufile_had_already_is_left_to_its_owner() {
        let registry = Registry::new();
        let already = || Err(CufileFailure::code("cuFileBufRegister", MEMORY_ALREADY_REGISTERED, 0));
        assert_eq!(registry.register(0x4000, 100, Some(already)).unwrap(), Registration::RegisteredOutside);
        assert_eq!(registry.cufile_bytes(), 0, "not ours");
        assert_eq!(registry.deregister(0x4000, || -> std::result::Result<(), CufileFailure> { panic!("not called") }).unwrap(), Deregistration::Released);
    }

    #[test]
    fn a_refusal_records_nothing_and_names_the_buffer() {
        let registry = Registry::new();
        let refused = || Err(CufileFailure::code("cuFileBufRegister", 5030, 0));
        let e = registry.register(0x5000, 100, Some(refused)).unwrap_err();
        assert!(matches!(e, Error::Cufile(ref m) if m.contains("0x5000") && m.contains("100 bytes")), "{e}");
        assert_eq!(registry.references(0x5000), 0);
    }

    #[test]
    fn a_refused_deregistration_is_reported_and_the_record_goes() {
        let registry = Registry::new();
        registry.register(0x6000, 100, Some(ok)).unwrap();
        let e = registry.deregister(0x6000, || Err(CufileFailure::code("cuFileBufDeregister", 5024, 0))).unwrap_err();
        assert!(matches!(e, Error::Cufile(_)), "{e}");
        assert_eq!(registry.references(0x6000), 0);
    }
}
