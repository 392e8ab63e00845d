//! The shared library exports exactly the functions the header declares, each under the symbol
//! version of the release that added it (src/gdsroute.map), and nothing else; the map and the
//! `symbol_version!` lines of src/ffi/ name the same functions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/deps/libgdsroute.so`, built beside this test (cargo copies it up to
/// `target/<profile>/` only on `cargo build`).
fn shared_library() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().join("libgdsroute.so")
}

fn header_functions() -> BTreeSet<String> {
    let header = include_str!("../include/gdsroute.h");
    let mut names = BTreeSet::new();
    for (i, _) in header.match_indices("gdsroute_") {
        let rest = &header[i..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if rest[end..].starts_with('(') {
            names.insert(rest[..end].to_string());
        }
    }
    names
}

/// Each function of src/gdsroute.map with the version node that lists it.
fn map_versions() -> BTreeMap<String, String> {
    let map = include_str!("../src/gdsroute.map");
    let mut node = String::new();
    let mut names = BTreeMap::new();
    for line in map.lines().map(str::trim) {
        if let Some(name) = line.strip_suffix(" {").filter(|n| n.starts_with("GDSROUTE_")) {
            node = name.to_string();
        } else if line.starts_with("gdsroute_") {
            let previous = names.insert(line.trim_end_matches(';').to_string(), node.clone());
            assert!(previous.is_none(), "{line} is listed twice");
        }
    }
    names
}

fn map_functions() -> BTreeSet<String> {
    map_versions().into_keys().collect()
}

/// The functions named by `symbol_version!(...)` in the files of src/ffi/, with the version
/// each is bound to (`GDSROUTE_0.1` unless the line names another first).
fn versioned_in_source() -> BTreeMap<String, String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/ffi");
    let mut names = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines().filter(|l| l.starts_with("symbol_version!(")) {
            let list = line.trim_start_matches("symbol_version!(").trim_end_matches(");");
            let (version, list) = match list.split_once(':') {
                Some((version, rest)) => (version.trim().to_string(), rest),
                None => ("GDSROUTE_0.1".to_string(), list),
            };
            names.extend(list.split(',').map(|n| (n.trim().to_string(), version.clone())));
        }
    }
    names
}

#[test]
fn the_version_script_and_the_sources_list_the_header_functions() {
    assert_eq!(map_functions(), header_functions());
    assert_eq!(versioned_in_source(), map_versions());
}

#[test]
fn exports_are_the_header_functions_at_their_release_versions() {
    let versions = map_versions();
    let lib = shared_library();
    if !lib.exists() {
        eprintln!("skipped: {} not built", lib.display());
        return;
    }
    let out = match Command::new("nm").args(["-D", "--defined-only"]).arg(&lib).output() {
        Ok(out) if out.status.success() => out,
        _ => {
            eprintln!("skipped: nm not available");
            return;
        }
    };
    let mut exported = BTreeSet::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, symbol) = (fields[fields.len() - 2], fields[fields.len() - 1]);
        let (name, version) = symbol.split_once("@@").unwrap_or((symbol, ""));
        if kind == "A" && name == version {
            continue; // the version node itself
        }
        assert_eq!(Some(version), versions.get(name).map(String::as_str), "{name} is exported without the version of the release that added it");
        exported.insert(name.to_string());
    }
    assert_eq!(exported, header_functions());
}

/// Every setting can be repaired from C after a bad value in the environment, which makes every
/// call that needs the settings fail until its setter runs: each variable of the settings table
/// is repaired through its C setter by one of the `repair` cases of tests/c/CMakeLists.txt
/// (test_env_settings.c knows the setter of each).
#[test]
fn every_setting_is_repaired_through_its_c_setter_in_a_c_test() {
    let cmake = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/CMakeLists.txt")).unwrap();
    let repaired: BTreeSet<&str> = cmake
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "repair")
        .flat_map(|w| w[1].trim_end_matches(')').split(','))
        .collect();
    for setting in &gdsroute::settings::TABLE {
        assert!(repaired.contains(setting.name), "{} has no repair case in tests/c/CMakeLists.txt", setting.name);
    }
}
