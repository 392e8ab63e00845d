//! Every pointer to README.md or to a page under docs/ names a file, and a heading, that exist.
//! Scanned: include/, src/, docs/, README.md, CONTRIBUTING.md and CHANGELOG.md (comment markers
//! are stripped and lines joined, so a pointer may wrap). The pointers recognised are the forms
//! the tree uses (CONTRIBUTING.md, "Pointers to the docs"):
//!
//! - a section in quotes after the file, with or without a comma, the file in backticks or not:
//!   `README, "Known issues"`, `docs/routing.md, "Direct I/O"`. It names a heading whose text is
//!   the section, or starts with it followed by ` (` or `:` (`"Direct I/O"` names
//!   `### Direct I/O (…)`);
//! - one capitalised word without quotes after `README, ` or `docs/NAME.md, `, ending at
//!   punctuation or the end of the text (`README, Settings`): the same rule;
//! - a markdown link `[text](docs/routing.md#the-decision)` (relative to the page it is in), whose
//!   anchor is GitHub's for one of the target's headings;
//! - any other `docs/…` path: the file or folder exists.
//!
//! A `README` preceded by a path (`tools/probes/README.md`) is that file, not the top README.

use std::collections::HashMap;
use std::path::Path;

/// One pointer found in a text: the file it names (a path from the repository root), and the
/// section (`Quoted`) or markdown anchor it names, if any.
#[derive(Debug, Clone, PartialEq)]
struct Pointer {
    line: usize,
    file: String,
    target: Target,
}

#[derive(Debug, Clone, PartialEq)]
enum Target {
    File,
    Section(String),
    Anchor(String),
}

/// The text with comment markers stripped and lines joined by one space, and where each line
/// starts in it (to report line numbers).
fn flatten(text: &str) -> (String, Vec<usize>) {
    let mut flat = String::new();
    let mut starts = Vec::new();
    for line in text.lines() {
        starts.push(flat.len());
        let mut body = line.trim_start();
        for marker in ["//!", "///", "//", "/**", "*/", "*"] {
            if let Some(rest) = body.strip_prefix(marker) {
                body = rest;
                break;
            }
        }
        flat.push_str(body.trim());
        flat.push(' ');
    }
    (flat, starts)
}

fn line_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset)
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// What follows a file name: `, "Section"`, ` "Section"`, `, Word` (then punctuation), or nothing.
fn section_after(rest: &str) -> Option<String> {
    let rest = rest.strip_prefix('`').unwrap_or(rest);
    let rest = rest.strip_prefix(',').unwrap_or(rest);
    let rest = rest.strip_prefix(' ')?;
    if let Some(quoted) = rest.strip_prefix('"') {
        let end = quoted.find('"').filter(|&e| e > 0 && e <= 100)?;
        return Some(quoted[..end].to_string());
    }
    let word_len = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
    let word = &rest[..word_len];
    let ends = rest[word_len..].chars().next().is_none_or(|c| matches!(c, ')' | '.' | ';' | ',' | ':'));
    (word.len() > 1 && word.starts_with(|c: char| c.is_ascii_uppercase()) && ends).then(|| word.to_string())
}

/// Every pointer in `text`, a file at `origin` (a path from the root; markdown links resolve
/// against its folder).
fn pointers_in(origin: &str, text: &str) -> Vec<Pointer> {
    let (flat, starts) = flatten(text);
    let mut found = Vec::new();
    let mut push = |at: usize, file: String, target: Target| found.push(Pointer { line: line_of(&starts, at), file, target });
    let preceded_by_path = |at: usize| flat[..at].chars().next_back().is_some_and(is_path_char);

    for (at, _) in flat.match_indices("README") {
        if preceded_by_path(at) {
            continue;
        }
        let mut rest = &flat[at + "README".len()..];
        if rest.starts_with('\'') || rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue; // "the README's order", or another word
        }
        rest = rest.strip_prefix(".md").unwrap_or(rest);
        if let Some(anchor) = rest.strip_prefix('#') {
            let end = anchor.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).unwrap_or(anchor.len());
            push(at, "README.md".into(), Target::Anchor(anchor[..end].to_string()));
        } else if let Some(section) = section_after(rest) {
            push(at, "README.md".into(), Target::Section(section));
        }
    }

    for (at, _) in flat.match_indices("docs/") {
        if preceded_by_path(at) || flat[..at].ends_with("](") {
            continue; // a markdown link: below
        }
        let len = flat[at..].find(|c: char| !is_path_char(c)).unwrap_or(flat.len() - at);
        let path = flat[at..at + len].trim_end_matches(['.', ',']);
        let rest = &flat[at + path.len()..];
        let target = match (path.ends_with(".md"), rest.strip_prefix('#')) {
            (true, Some(anchor)) => {
                let end = anchor.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).unwrap_or(anchor.len());
                Target::Anchor(anchor[..end].to_string())
            }
            (true, None) => section_after(rest).map_or(Target::File, Target::Section),
            _ => Target::File,
        };
        push(at, path.to_string(), target);
    }

    if origin.ends_with(".md") {
        let folder = Path::new(origin).parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        for (at, _) in flat.match_indices("](") {
            let link = &flat[at + 2..];
            let Some(end) = link.find(')') else { continue };
            let link = &link[..end];
            if link.contains("://") || !(link.contains(".md") || link.starts_with("docs/")) {
                continue;
            }
            let (file, anchor) = link.split_once('#').map_or((link, None), |(f, a)| (f, Some(a)));
            let file = if folder.is_empty() { file.to_string() } else { format!("{folder}/{file}") };
            push(at, normalise(&file), anchor.map_or(Target::File, |a| Target::Anchor(a.to_string())));
        }
    }
    found
}

/// `docs/../README.md` → `README.md`.
fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            p => parts.push(p),
        }
    }
    parts.join("/") + if path.ends_with('/') { "/" } else { "" }
}

/// The headings of a markdown text (outside fenced code blocks).
fn headings(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !fenced && (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.push(line[hashes..].trim().to_string());
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn names(heading: &str, section: &str) -> bool {
    heading == section
        || heading.strip_prefix(section).is_some_and(|rest| rest.starts_with(" (") || rest.starts_with(':'))
}

/// What is wrong with `pointer`, if anything. `read` gives a file's text (folders: empty), or
/// `None` where nothing exists.
fn problem(pointer: &Pointer, read: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let Some(text) = read(&pointer.file) else {
        return Some(format!("{} does not exist", pointer.file));
    };
    match &pointer.target {
        Target::File => None,
        Target::Section(section) => (!headings(&text).iter().any(|h| names(h, section)))
            .then(|| format!("{} has no heading \"{section}\"", pointer.file)),
        Target::Anchor(anchor) => (!headings(&text).iter().any(|h| anchor_of(h) == *anchor))
            .then(|| format!("{} has no heading with anchor #{anchor}", pointer.file)),
    }
}

fn scanned_files(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut files = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string(), "CHANGELOG.md".to_string()];
    for dir in ["include", "src", "docs"] {
        walk(root, &root.join(dir), &mut files);
    }
    files
}

fn read_from(root: &Path) -> impl Fn(&str) -> Option<String> + '_ {
    move |path: &str| {
        let full = root.join(path);
        if full.is_dir() {
            Some(String::new())
        } else {
            std::fs::read_to_string(full).ok()
        }
    }
}

#[test]
fn every_pointer_to_a_readme_or_docs_section_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = read_from(root);
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in scanned_files(root) {
        let Some(text) = read(&file) else { continue };
        for pointer in pointers_in(&file, &text) {
            checked += 1;
            if let Some(why) = problem(&pointer, &read) {
                broken.push(format!("{file}:{}: {why}", pointer.line));
            }
        }
    }
    assert!(checked > 50, "only {checked} pointers found: has the pointer syntax changed?");
    assert!(broken.is_empty(), "{} broken pointers:\n{}", broken.len(), broken.join("\n"));
}

#[test]
fn every_form_is_recognised_and_a_broken_pointer_fails() {
    let tree: HashMap<&str, &str> = HashMap::from([
        ("README.md", "# t\n\n## Settings\n\n## Known issues\n\n```sh\n# Not a heading\n```\n"),
        ("docs/routing.md", "# Routing\n\n### Direct I/O (`KVIKIO_AUTO_DIRECT_IO_READ`)\n\n## The decision\n"),
        ("docs/writes.md", "# Writes\n\n## Writes across a file-size limit (`RLIMIT_FSIZE`): the reconciliation\n"),
        ("docs/", ""),
    ]);
    let read = |path: &str| tree.get(path).map(|t| t.to_string());
    let source = "/// See README, \"Known issues\"; README, Settings.\n\
                  /// Also docs/routing.md, \"Direct\n/// I/O\" and `docs/routing.md`, \"The decision\",\n\
                  /// docs/writes.md \"Writes across a file-size limit\", the README's order, and `docs/`.\n\
                  /// tools/probes/README.md, \"Nothing\" is another file.\n";
    let found = pointers_in("src/x.rs", source);
    let targets: Vec<(&str, &Target)> = found.iter().map(|p| (p.file.as_str(), &p.target)).collect();
    let section = |s: &str| Target::Section(s.to_string());
    assert_eq!(
        targets,
        [
            ("README.md", &section("Known issues")),
            ("README.md", &section("Settings")),
            ("docs/routing.md", &section("Direct I/O")),
            ("docs/routing.md", &section("The decision")),
            ("docs/writes.md", &section("Writes across a file-size limit")),
            ("docs/", &Target::File),
        ]
    );
    assert_eq!(found[2].line, 2, "a pointer is reported at the line where it starts");
    assert!(found.iter().all(|p| problem(p, &read).is_none()), "{:?}", found.iter().filter_map(|p| problem(p, &read)).collect::<Vec<_>>());

    let links = pointers_in("docs/writes.md", "[a](routing.md#the-decision), [b](../README.md#known-issues) [c](routing.md#direct-io-kvikio_auto_direct_io_read)");
    assert_eq!(links.len(), 3);
    assert!(links.iter().all(|p| problem(p, &read).is_none()), "{links:?}");

    // Each broken form fails, saying why.
    let broken = "README, \"Writes\"; README, Setings. docs/routing.md, \"Direct I/O reads\"; docs/gone.md; \
                  `docs/routing.md`, \"Routing in\"; README \"Not a heading\"";
    let problems: Vec<String> = pointers_in("src/y.rs", broken).iter().filter_map(|p| problem(p, &read)).collect();
    assert_eq!(
        problems,
        [
            "README.md has no heading \"Writes\"",
            "README.md has no heading \"Setings\"",
            "README.md has no heading \"Not a heading\"",
            "docs/routing.md has no heading \"Direct I/O reads\"",
            "docs/gone.md does not exist",
            "docs/routing.md has no heading \"Routing in\"",
        ]
    );
    let bad_link = pointers_in("README.md", "[x](docs/routing.md#no-such-anchor) [y](docs/missing.md)");
    let problems: Vec<String> = bad_link.iter().filter_map(|p| problem(p, &read)).collect();
    assert_eq!(problems, ["docs/routing.md has no heading with anchor #no-such-anchor", "docs/missing.md does not exist"]);
}
