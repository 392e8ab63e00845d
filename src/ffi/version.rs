//! Run-time version of the library; the header's GDSROUTE_VERSION_* macros hold the version it
//! was generated for.

use std::ffi::c_char;

fn component(text: &str) -> u32 {
    text.parse().unwrap_or(0)
}

/// Major version of the loaded library.
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_version_major() -> u32 {
    component(env!("CARGO_PKG_VERSION_MAJOR"))
}

/// Minor version of the loaded library.
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_version_minor() -> u32 {
    component(env!("CARGO_PKG_VERSION_MINOR"))
}

/// Patch version of the loaded library.
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_version_patch() -> u32 {
    component(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The version as a static "MAJOR.MINOR.PATCH" string; never freed.
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_version_string() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

symbol_version!(gdsroute_version_major, gdsroute_version_minor, gdsroute_version_patch, gdsroute_version_string);
