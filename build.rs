//! Sets the soname of the Linux shared library (cargo has no option for it), so that installed
//! copies follow the usual libgdsroute.so -> .so.MAJOR -> .so.MAJOR.MINOR.PATCH scheme, and
//! passes the linker version script src/gdsroute.map, which names the exported functions by
//! release (each bound to its version by `symbol_version!` in src/ffi/).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/gdsroute.map");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgdsroute.so.{major}");
        // Never unmapped by dlclose: the library's pool threads and exit handlers run its code
        // until the process ends (tests/exit/exit_dlopen.c).
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/src/gdsroute.map");
    }
}
