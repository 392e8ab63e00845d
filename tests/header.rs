//! include/gdsroute.h is generated from the Rust sources by cbindgen and committed. This test
//! regenerates it in memory and fails if the committed file is stale.
//! `GDSROUTE_BLESS=1 cargo test --test header` rewrites it.

use std::path::Path;

fn version_macros() -> String {
    let major: u32 = env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap();
    let minor: u32 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
    let patch: u32 = env!("CARGO_PKG_VERSION_PATCH").parse().unwrap();
    format!(
        "\n/** Version of the library this header belongs to; compare with gdsroute_version_*(). */\n\
         #define GDSROUTE_VERSION_MAJOR {major}\n\
         #define GDSROUTE_VERSION_MINOR {minor}\n\
         #define GDSROUTE_VERSION_PATCH {patch}\n\
         #define GDSROUTE_VERSION_STRING \"{major}.{minor}.{patch}\"\n\
         /** MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */\n\
         #define GDSROUTE_VERSION ({major} * 10000 + {minor} * 100 + {patch})\n\n\
         /** Marks functions whose status must be checked ([[nodiscard]] in C++17 and C23). */\n\
         #if (defined(__cplusplus) && __cplusplus >= 201703L) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 202311L)\n\
         #define GDSROUTE_MUST_USE [[nodiscard]]\n\
         #else\n\
         #define GDSROUTE_MUST_USE\n\
         #endif\n"
    )
}

fn generate() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = Some(version_macros());
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut out);
    String::from_utf8(out).expect("header is UTF-8")
}

#[test]
fn committed_header_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/gdsroute.h");
    let fresh = generate();
    if std::env::var_os("GDSROUTE_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/gdsroute.h is stale: run `GDSROUTE_BLESS=1 cargo test --test header` and commit it"
    );
}

#[test]
fn every_macro_and_function_of_the_header_carries_the_prefix() {
    // A name without the prefix (a Rust `pub const` cbindgen picked up, say) would clash with
    // the including program's own macros: session 7 leaked `#define ALIGN 4096` this way.
    let header = generate();
    for line in header.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("#define ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            assert!(name.starts_with("GDSROUTE_") || name.starts_with("gdsroute_"), "unprefixed macro: {line}");
        }
        if let Some(open) = line.find('(').filter(|_| line.ends_with(");") && !line.starts_with('#')) {
            let name = line[..open].split_whitespace().last().unwrap_or("").trim_start_matches('*');
            assert!(name.starts_with("gdsroute_"), "unprefixed function: {line}");
        }
    }
}
