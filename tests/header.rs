//! include/gdsroute.h is generated from the Rust sources by cbindgen and committed. This test
//! regenerates it in memory and fails if the committed file is stale.
//! `GDSROUTE_BLESS=1 cargo test --test header` rewrites it. It also compiles, in C and C++, a use
//! of every macro the header defines, so that nothing internal (a macro naming Rust items) can
//! leak into it unnoticed.

use std::path::Path;
use std::process::Command;

const SIZED_ENUM_CONDITION: &str = "#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L";

/// cbindgen writes a fixed-size enum as `enum NAME : uint32_t` (C++ and C23) and, before C23,
/// `enum NAME {...}; typedef uint32_t NAME;`, a tag and a typedef of one name, which C accepts
/// but `-Wc++-compat` rejects (it is invalid C++). Before C23 the enum is written without a tag
/// instead; C++ and C23 keep `enum NAME : uint32_t`, and the constants, the typedef `NAME` and
/// every function signature are unchanged, so is the ABI.
fn untag_sized_enums_before_c23(header: &str) -> String {
    let mut out = String::with_capacity(header.len());
    let mut lines = header.lines().peekable();
    let mut rewritten = 0;
    while let Some(line) = lines.next() {
        let sized = line.strip_prefix("enum ").filter(|name| !name.contains(' ') && lines.peek() == Some(&SIZED_ENUM_CONDITION));
        let Some(name) = sized else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let condition = lines.next().unwrap();
        let underlying = lines.next().unwrap_or("").trim().trim_start_matches(':').trim().to_string();
        let endif = lines.next().unwrap_or("");
        assert!(endif.starts_with("#endif") && !underlying.is_empty(), "unexpected cbindgen output after enum {name}");
        out.push_str(&format!(
            "{condition}\nenum {name} : {underlying}\n#else\nenum /* no tag before C23: {name} is the {underlying} typedef below */\n#endif\n"
        ));
        rewritten += 1;
    }
    assert!(rewritten > 0, "no fixed-size enum found: has cbindgen's output changed?");
    out
}

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
    untag_sized_enums_before_c23(&String::from_utf8(out).expect("header is UTF-8"))
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
    // the including program's own macros: series 7 (2026-11-30) leaked `#define ALIGN 4096` this way.
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

/// Object-like macros the header defines, with their expansions (the include guard left out).
fn macros(header: &str) -> Vec<(String, String)> {
    header
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("#define "))
        .map(|rest| {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            (name.clone(), rest[name.len()..].trim().to_string())
        })
        .filter(|(name, value)| !(name == "GDSROUTE_H" && value.is_empty()))
        .collect()
}

/// A C (and C++) translation unit that uses every macro of `header` the way a program would:
/// constants and strings as values, brace lists as array initialisers (issue 15:
/// `static const unsigned all[] = gdsroute_status_ALL;` did not compile), and the
/// function-attribute macro on a declaration.
fn macro_uses(header: &str) -> String {
    let mut uses = String::from("#include <gdsroute.h>\n\n");
    let mut body = String::new();
    for (i, (name, value)) in macros(header).iter().enumerate() {
        if name == "GDSROUTE_MUST_USE" {
            uses.push_str("GDSROUTE_MUST_USE int gdsroute_macro_use_attribute(void);\n");
        } else if value.starts_with('{') {
            uses.push_str(&format!("static const unsigned gdsroute_macro_use_{i}[] = {name};\n"));
            body.push_str(&format!("    n += (int)sizeof gdsroute_macro_use_{i};\n"));
        } else {
            body.push_str(&format!("    n += (int)sizeof({name});\n    (void)({name});\n"));
        }
    }
    uses.push_str("\nint gdsroute_macro_uses(void);\nint gdsroute_macro_uses(void) {\n    int n = 0;\n");
    uses.push_str(&body);
    uses.push_str("    return n;\n}\n");
    uses
}

fn compile(compiler: &str, args: &[&str], source: &Path, include: &Path) -> Result<(), String> {
    let output = Command::new(compiler)
        .args(args)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I"])
        .arg(include)
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
}

/// Compiles uses of every macro of `header` as C99 (with `-Wc++-compat`), C11, C++11 and C++17;
/// the failures, if any.
fn macro_use_failures(header: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gdsroute.h"), header).unwrap();
    let source = macro_uses(header);
    for (name, _) in macros(header) {
        assert!(source.contains(name.as_str()), "{name} unused");
    }
    let c_file = dir.path().join("macro_uses.c");
    let cpp_file = dir.path().join("macro_uses.cpp");
    std::fs::write(&c_file, &source).unwrap();
    std::fs::write(&cpp_file, &source).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let mut failures = Vec::new();
    for (compiler, args, file) in [
        (cc.as_str(), vec!["-std=c99", "-Wc++-compat"], &c_file),
        (cc.as_str(), vec!["-std=c11"], &c_file),
        (cxx.as_str(), vec!["-std=c++11"], &cpp_file),
        (cxx.as_str(), vec!["-std=c++17"], &cpp_file),
    ] {
        if let Err(e) = compile(compiler, &args, file, dir.path()) {
            failures.push(format!("{compiler} {args:?}:\n{e}\nsource:\n{source}"));
        }
    }
    failures
}

#[test]
fn every_macro_of_the_header_compiles_where_used() {
    let header = generate();
    let names: Vec<String> = macros(&header).into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "GDSROUTE_MAX_THREADS") && names.iter().any(|n| n == "GDSROUTE_VERSION_STRING"), "{names:?}");
    let failures = macro_use_failures(&header);
    assert!(failures.is_empty(), "uses of the header's macros do not compile:\n{}", failures.join("\n"));
}

#[test]
fn a_leaked_internal_macro_fails_the_check() {
    // The macro issue 15 found: cbindgen's rendering of the associated constant `Status::ALL`.
    let leaked = format!("{}\n#define gdsroute_status_ALL {{ gdsroute_status_Ok, gdsroute_status_Panic, }}\n", generate());
    let failures = macro_use_failures(&leaked);
    assert!(!failures.is_empty() && failures[0].contains("gdsroute_status_Ok"), "{failures:?}");
}
