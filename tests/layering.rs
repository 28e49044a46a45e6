//! The dependency rules between the crate's top-level modules (docs/architecture.md, "Who may
//! import whom"), checked on the source text: every `crate::…` path in `src/**/*.rs` — in `use`
//! lines and in bodies, grouped (`crate::{a, b}`) or not — and every `super::…` path that climbs
//! out of its top-level module. Comments and string literals are skipped, so a doc link does not
//! count. A failure names file:line, the path and the rule it breaks.
//!
//! The pure modules (`PURE`) are a crate of their own, `crates/core`, whose dependencies hold
//! no runtime, client, lock or system call: the compiler refuses those, and an import of the
//! main crate's modules (`cargo tree` checks that none of them comes back transitively). What the compiler cannot
//! refuse, std's threads, files, environment, clocks, prints, locks and mutable statics, is
//! checked here on its sources, so the core cannot quietly become stateful; so is the order of
//! its modules (`RULES`, the same rows as the main crate's).
//!
//! Inside a top-level module the files form layers too: no folder's files import each other in
//! a circle (`no_folder_has_an_import_circle`), and the folders of `src/controller/` and
//! `src/tui/` form a stack (`FOLDERS`): an import from one into a folder above it fails, naming
//! file:line (`no_import_climbs_the_folder_stack`).
//!
//! No server, no compiler: a small tokenizer is enough because the rules are about names.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use std::path::{Path, PathBuf};

/// Which top-level modules each top-level module may import (besides itself). A module missing
/// here fails the test: a new module gets a place in the layering when it is added.
///
/// Bottom to top: `model` ← `snapshot` ← `core` ← `load` ← `cluster` ← {`admission`,
/// `controller`} ← `tui` ← `cli` ← `main`. `text` (terminal-safe text, error chains) is pure
/// and open to all; `logging` (process-wide subscribers) only to the shells that set one up.
const RULES: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("text", &[]),
    ("logging", &[]),
    ("snapshot", &["model", "text"]),
    ("core", &["model", "snapshot", "text"]),
    ("load", &["model", "snapshot", "core", "text"]),
    ("cluster", &["model", "snapshot", "core", "load", "text"]),
    (
        "admission",
        &["model", "snapshot", "core", "load", "cluster", "text"],
    ),
    (
        "controller",
        &["model", "snapshot", "core", "load", "cluster", "text"],
    ),
    ("tui", SHELL),
    // Everything: `cli` is the top of the stack.
    ("cli", &["*"]),
];

/// What the TUI may import: everything but `cli`.
const SHELL: &[&str] = &[
    "model",
    "snapshot",
    "core",
    "load",
    "cluster",
    "admission",
    "controller",
    "text",
    "logging",
];

/// Leaks tolerated while a change in flight removes them: (file, imported module). None are
/// left (the controller redesign removed the last ones); an entry that no longer occurs fails,
/// so the list only shrinks.
const KNOWN_LEAKS: &[(&str, &str)] = &[];

/// The pure modules (docs/architecture.md, "The pure core"), every top-level module of the crate
/// in `CORE_CRATE`: what they compute depends on their arguments alone. Their side effects live
/// at the edges, which pass in what they need (the snapshot's clock, the CEL checker in
/// `core::Options`). The main crate re-exports them under the same paths (and keeps a `text` of
/// its own for kube's errors, which re-exports the core's).
const PURE: &[&str] = &["model", "text", "snapshot", "core"];

/// The pure core's crate, relative to the workspace root.
const CORE_CRATE: &str = "crates/core";

/// Packages the core crate must not depend on, even transitively: a runtime, the API client,
/// locks, system calls, the shells' error type.
const IMPURE_PACKAGES: &[&str] = &[
    "tokio",
    "kube",
    "kube-client",
    "kube-runtime",
    "parking_lot",
    "libc",
    "anyhow",
];

/// `std::` modules a pure module must not use: threads, files, the environment, processes,
/// sockets, standard input and output.
const IMPURE_STD: &[&str] = &["thread", "fs", "env", "process", "net", "io"];

/// Types a pure module must not name anywhere: shared mutable state between calls or threads.
const IMPURE_TYPES: &[&str] = &["Mutex", "RwLock", "Condvar", "Barrier", "thread_local"];

/// What makes a `static` mutable beyond the types above: `static mut`. (A `static` of `Cell`,
/// `RefCell` or `OnceCell` is not `Sync`, which the compiler refuses.) A `static` of
/// `OnceLock`/`LazyLock` is allowed: it holds data parsed once from what is compiled in
/// (`core::crd`'s match schema), a constant computed late, the same for every caller.
const MUTABLE_STATIC: &[&str] = &["mut"];

/// Clocks: `X::now`.
const CLOCKS: &[&str] = &["SystemTime", "Instant", "Utc", "Local"];

/// Writing to the terminal is IO.
const PRINTS: &[&str] = &["print", "println", "eprint", "eprintln", "dbg"];

/// Every side effect in `source` a pure module must not have: (line, what).
fn impurities(source: &str) -> Vec<(usize, String)> {
    let toks = Toks::of(source);
    let ident = |i: usize| toks.ident(i);
    let is = |i: usize, t: &Tok| toks.is(i, t);
    let mut out = Vec::new();
    for (i, (tok, line)) in toks.iter().enumerate() {
        let Tok::Ident(w) = tok else { continue };
        let w = w.as_str();
        let after_std = i >= 2 && is(i - 1, &Tok::Path) && ident(i - 2) == Some("std");
        if after_std && IMPURE_STD.contains(&w) {
            out.push((*line, format!("std::{w}")));
        }
        if w == "std" && is(i + 1, &Tok::Path) && is(i + 2, &Tok::Sym('{')) {
            // `std::{fs, sync::Mutex}`
            for n in group_heads(&toks, i + 2) {
                if IMPURE_STD.contains(&n.as_str()) {
                    out.push((*line, format!("std::{n}")));
                }
            }
        }
        if IMPURE_TYPES.contains(&w) || w.starts_with("Atomic") {
            out.push((*line, w.to_string()));
        }
        if w == "now"
            && i >= 2
            && is(i - 1, &Tok::Path)
            && let Some(clock) = ident(i - 2).filter(|c| CLOCKS.contains(c))
        {
            out.push((*line, format!("{clock}::now")));
        }
        if PRINTS.contains(&w) && is(i + 1, &Tok::Sym('!')) {
            out.push((*line, format!("{w}!")));
        }
        // A `static` item (not the `'static` lifetime): its type, up to `=` or `;`.
        if w == "static" && !(i > 0 && is(i - 1, &Tok::Sym('\''))) {
            let mutable = toks[i + 1..]
                .iter()
                .take_while(|(t, _)| !matches!(t, Tok::Sym('=') | Tok::Sym(';')))
                .find_map(|(t, _)| match t {
                    Tok::Ident(n) if MUTABLE_STATIC.contains(&n.as_str()) => Some(n.clone()),
                    _ => None,
                });
            if let Some(m) = mutable {
                out.push((*line, format!("a mutable static ({m})")));
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    line: usize,
    /// The path as written, up to the module it reaches (`crate::cli::args`, `super::super::x`).
    written: String,
    /// The top-level module it reaches (`cli`), `*` for a glob of the crate root.
    top: String,
}

/// `text` with comments, string and char literals blanked (newlines kept, so lines still count).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && {
            let start = if c[i] == 'b' { i + 2 } else { i + 1 };
            let mut j = start;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let start = if c[i] == 'b' { i + 2 } else { i + 1 };
            let mut j = start;
            while c[j] == '#' {
                j += 1;
            }
            let hashes = j - start;
            out.push(' ');
            i += 1;
            while i <= j {
                out.push(' ');
                i += 1;
            }
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
            continue;
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
            continue;
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\u{1b}'); a lifetime ('a) has no closing quote.
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(' ');
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
            continue;
        }
        if i < c.len() {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Sym(char),
}

/// A source's tokens (comments and literals stripped), with lookups that are `None` or false
/// past the end.
struct Toks(Vec<(Tok, usize)>);

impl Toks {
    fn of(source: &str) -> Toks {
        Toks(tokens(&strip(source)))
    }
    fn ident(&self, i: usize) -> Option<&str> {
        match self.0.get(i) {
            Some((Tok::Ident(s), _)) => Some(s.as_str()),
            _ => None,
        }
    }
    fn is(&self, i: usize, t: &Tok) -> bool {
        self.0.get(i).map(|(x, _)| x) == Some(t)
    }
}

impl std::ops::Deref for Toks {
    type Target = [(Tok, usize)];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The first segment of each item of the group `{…}` that opens at `toks[open]`:
/// `{a, b::c, *, self}` → `a`, `b`, `*`, `self`.
fn group_heads(toks: &[(Tok, usize)], open: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let mut d = 0;
    let mut item_start = true;
    for (t, _) in &toks[open..] {
        match t {
            Tok::Sym('{') => {
                d += 1;
                item_start = d == 1;
            }
            Tok::Sym('}') => {
                d -= 1;
                if d == 0 {
                    break;
                }
            }
            Tok::Sym(',') if d == 1 => item_start = true,
            Tok::Sym('*') if d == 1 && item_start => {
                heads.push("*".into());
                item_start = false;
            }
            Tok::Ident(n) if d == 1 && item_start => {
                heads.push(n.clone());
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_string).unwrap_or(word);
            out.push((Tok::Ident(word), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Sym(ch), line));
            i += 1;
        }
    }
    out
}

/// The module path of a file under `src/`: `src/cluster/mod.rs` → `[cluster]`,
/// `src/cluster/list.rs` → `[cluster, list]`, `src/lib.rs` → `[]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// Every path in `source` (a file whose module path is `module`) that names a top-level module:
/// `crate::x…`, `crate::{x, y}`, and `super::…` chains, resolved against inline `mod m { … }`.
fn imports(source: &str, module: &[String]) -> Vec<Import> {
    let toks = Toks::of(source);
    let ident = |i: usize| toks.ident(i);
    let is = |i: usize, t: &Tok| toks.is(i, t);
    let mut out = Vec::new();
    // Inline modules: (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = &toks[i];
        match tok {
            Tok::Sym('{') => depth += 1,
            Tok::Sym('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(name), true) = (ident(i + 1), is(i + 2, &Tok::Sym('{'))) {
                    inline.push((name.to_string(), depth + 1));
                }
            }
            _ => {}
        }
        let start_of_path = i == 0 || !is(i - 1, &Tok::Path);
        let head = ident(i);
        if start_of_path && matches!(head, Some("crate" | "super")) && is(i + 1, &Tok::Path) {
            let mut base: Vec<String> = Vec::new();
            let mut written = String::new();
            let mut j = i;
            if head == Some("crate") {
                written.push_str("crate::");
                j += 2;
            } else {
                base = module.to_vec();
                base.extend(inline.iter().map(|(n, _)| n.clone()));
                while ident(j) == Some("super") && is(j + 1, &Tok::Path) {
                    base.pop();
                    written.push_str("super::");
                    j += 2;
                }
            }
            if base.is_empty() {
                // At the crate root: the next segment (or each item of a group) is a module.
                let mut names = Vec::new();
                if let Some(name) = ident(j) {
                    names.push(name.to_string());
                } else if is(j, &Tok::Sym('*')) {
                    names.push("*".to_string());
                } else if is(j, &Tok::Sym('{')) {
                    names.extend(group_heads(&toks, j).into_iter().filter(|n| n != "self"));
                }
                for name in names {
                    out.push(Import {
                        line: *line,
                        written: format!("{written}{name}"),
                        top: name,
                    });
                }
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn rule(module: &str) -> Option<&'static [&'static str]> {
    RULES.iter().find(|(m, _)| *m == module).map(|(_, a)| *a)
}

/// The rule an import breaks, if any.
fn broken(from: &str, to: &str) -> Option<String> {
    if from == to {
        return None;
    }
    let Some(allowed) = rule(from) else {
        return Some(format!(
            "`{from}` has no rule: add it to RULES in tests/layering.rs and docs/architecture.md"
        ));
    };
    if to == "*" {
        return Some("a glob of the crate root hides what is imported".into());
    }
    if rule(to).is_none() {
        return Some(format!("`{to}` is not a module with a rule"));
    }
    if allowed.contains(&to) || allowed == ["*"] {
        return None;
    }
    Some(if to == "cli" {
        "only main.rs imports `cli`".to_string()
    } else if allowed.is_empty() {
        format!("`{from}` imports nothing of ours")
    } else {
        format!("`{from}` may import only {}", allowed.join(", "))
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every import in `src/` that breaks a rule: (file relative to the crate, imported module, text).
fn violations(root: &Path) -> Vec<(String, String, String)> {
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under src/",
        files.len()
    );
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src");
        // main.rs is the binary crate: its `crate::` is itself, and it may import anything.
        if rel == Path::new("main.rs") {
            continue;
        }
        let module = module_of(rel);
        let Some(from) = module.first() else {
            continue; // lib.rs declares the modules
        };
        let text = std::fs::read_to_string(&path).expect("readable source");
        let file = format!("src/{}", rel.display());
        for imp in imports(&text, &module) {
            if let Some(why) = broken(from, &imp.top) {
                out.push((
                    file.clone(),
                    imp.top.clone(),
                    format!("{file}:{}: `{}…`: {why}", imp.line, imp.written),
                ));
            }
        }
    }
    out
}

#[test]
fn every_import_follows_the_layering() {
    let all = violations(Path::new(env!("CARGO_MANIFEST_DIR")));
    let known = |f: &str, m: &str| KNOWN_LEAKS.iter().any(|(kf, km)| *kf == f && *km == m);
    let new: Vec<&str> = all
        .iter()
        .filter(|(f, m, _)| !known(f, m))
        .map(|(_, _, text)| text.as_str())
        .collect();
    assert!(
        new.is_empty(),
        "imports that break the layering (docs/architecture.md):\n  {}",
        new.join("\n  ")
    );
    let gone: Vec<String> = KNOWN_LEAKS
        .iter()
        .filter(|(kf, km)| !all.iter().any(|(f, m, _)| f == kf && m == km))
        .map(|(f, m)| format!("{f} → {m}"))
        .collect();
    assert!(
        gone.is_empty(),
        "known leaks that no longer occur: remove them from KNOWN_LEAKS: {}",
        gone.join(", ")
    );
}

/// Every side effect in the core crate's sources under `root`: "file:line: what".
fn impure(root: &Path) -> Vec<String> {
    let src = root.join(CORE_CRATE).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under {}",
        files.len(),
        src.display()
    );
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src");
        let text = std::fs::read_to_string(&path).expect("readable source");
        for (line, what) in impurities(&text) {
            out.push(format!("{CORE_CRATE}/src/{}:{line}: {what}", rel.display()));
        }
    }
    out
}

#[test]
fn the_pure_modules_have_no_side_effects() {
    let found = impure(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        found.is_empty(),
        "side effects in the pure core ({}; docs/architecture.md): move them to an edge and \
         pass in what the core needs:\n  {}",
        PURE.join(", "),
        found.join("\n  ")
    );
}

/// Every import in the core crate that breaks a rule: its modules are `PURE` and each may
/// import only the ones below it (`RULES`). "file:line: …".
fn core_crate_violations(root: &Path) -> Vec<String> {
    let src = root.join(CORE_CRATE).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src");
        let module = module_of(rel);
        let file = format!("{CORE_CRATE}/src/{}", rel.display());
        let Some(from) = module.first() else {
            continue; // lib.rs declares the modules
        };
        if !PURE.contains(&from.as_str()) {
            out.push(format!(
                "{file}: `{from}` is not a pure module: add it to PURE"
            ));
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        for imp in imports(&text, &module) {
            if let Some(why) = broken(from, &imp.top) {
                out.push(format!("{file}:{}: `{}…`: {why}", imp.line, imp.written));
            }
        }
    }
    out
}

#[test]
fn the_core_crate_follows_the_layering() {
    let found = core_crate_violations(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        found.is_empty(),
        "imports in the core crate that break the layering (docs/architecture.md):\n  {}",
        found.join("\n  ")
    );
}

/// The packages the core crate is built with on any platform (normal dependencies, features
/// as the workspace resolves them for it alone), by `cargo tree`: "name vX.Y.Z" each.
fn core_packages(root: &Path) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(root)
        .args([
            "tree",
            "--offline",
            "-p",
            "kubectl-vap-core",
            // Every platform's dependencies: sha2 brought libc on aarch64 only.
            "--target",
            "all",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    // --offline: a test downloads nothing. scripts/test runs `cargo fetch` first, which
    // fetches every platform's crates (a build fetches only this platform's).
    assert!(
        out.status.success(),
        "cargo tree: {}(run `cargo fetch` first: it downloads the crates of every platform)",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut packages: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .collect();
    packages.sort();
    packages.dedup();
    packages
}

#[test]
fn the_core_crate_depends_on_no_runtime_client_or_lock() {
    let packages = core_packages(Path::new(env!("CARGO_MANIFEST_DIR")));
    let name = |p: &str| p.split(' ').next().unwrap_or_default().to_string();
    assert!(
        packages.iter().any(|p| name(p) == "serde_json"),
        "cargo tree's output not understood: {packages:?}"
    );
    let found: Vec<&String> = packages
        .iter()
        .filter(|p| IMPURE_PACKAGES.contains(&name(p).as_str()))
        .collect();
    assert!(
        found.is_empty(),
        "the pure core depends on {found:?} (crates/core/Cargo.toml; docs/architecture.md, \
         \"The pure core\"; `cargo tree -p kubectl-vap-core -i <package>` says through what)"
    );
}

#[test]
fn the_purity_scanner_sees_every_kind_of_side_effect() {
    let src = r##"
use std::sync::{Arc, Mutex};
use std::{fs, collections::HashMap};
static CACHE: OnceLock<Mutex<u8>> = OnceLock::new();
static SCHEMA: OnceLock<Value> = OnceLock::new();
static mut N: u8 = 0;
static C: RefCell<u8> = RefCell::new(0);
use std::io::Write;
fn f(x: &'static str) -> &'static str {
    std::thread::spawn(|| ());
    let t = chrono::Utc::now(); let i = Instant::now();
    let v = std::env::var("X");
    let a = AtomicUsize::new(0);
    println!("{}", "std::fs in a string, Mutex in a comment"); // std::thread
    x
}
"##;
    let found: Vec<(usize, String)> = impurities(src);
    let expected: Vec<(usize, String)> = [
        (2, "Mutex"),
        (3, "std::fs"),
        (4, "Mutex"),
        (6, "a mutable static (mut)"),
        (8, "std::io"),
        (10, "std::thread"),
        (11, "Utc::now"),
        (11, "Instant::now"),
        (12, "std::env"),
        (13, "AtomicUsize"),
        (14, "println!"),
    ]
    .iter()
    .map(|(l, w)| (*l, w.to_string()))
    .collect();
    assert_eq!(found, expected);
}

fn tops(source: &str, module: &[&str]) -> Vec<(usize, String)> {
    let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
    imports(source, &module)
        .into_iter()
        .filter(|i| {
            // Paths that stay inside the file's own top module are not edges.
            module.first() != Some(&i.top)
        })
        .map(|i| (i.line, i.top))
        .collect()
}

#[test]
fn the_scanner_sees_every_kind_of_path() {
    let src = r##"
use crate::model::Constraint;
use crate::{snapshot::Snapshot, core::{self, Options}, text};
use super::sibling;
fn f() {
    let x = crate::cli::error_text(&e);
    let s = "crate::tui::run";          // crate::controller in a comment
    let r = r#"crate::admission"#;
    let c = '"'; let l: &'static str = "";
    /* crate::logging /* nested */ crate::logging */
    super::super::controller::go();
}
mod tests {
    use super::*;
    fn g() { super::super::super::load::x(); }
}
"##;
    assert_eq!(
        tops(src, &["cluster", "list"]),
        vec![
            (2, "model".to_string()),
            (3, "snapshot".into()),
            (3, "core".into()),
            (3, "text".into()),
            (6, "cli".into()),
            (11, "controller".into()),
            (15, "load".into()),
        ]
    );
    // From a top-level file (`src/snapshot.rs`), one `super::` reaches the root.
    assert_eq!(
        tops("fn f() { super::model::x(); }", &["snapshot"]),
        vec![(1, "model".to_string())]
    );
}

/// `src/lib.rs` lists the modules bottom to top ("each module imports only those above it"):
/// the list must be RULES' order, or the sentence is false.
#[test]
fn lib_rs_lists_the_modules_in_the_order_of_the_rules() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("src/lib.rs");
    let listed: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! - [`"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let rules: Vec<&str> = RULES.iter().map(|(m, _)| *m).collect();
    assert_eq!(listed, rules, "src/lib.rs's list against RULES");
}

#[test]
fn the_rules_say_which_way_is_down() {
    assert_eq!(broken("core", "model"), None);
    assert_eq!(broken("tui", "controller"), None);
    assert_eq!(broken("cli", "tui"), None);
    assert!(broken("model", "snapshot").is_some());
    assert!(broken("core", "cluster").is_some());
    assert!(broken("cluster", "controller").is_some());
    assert!(broken("controller", "admission").is_some());
    assert_eq!(
        broken("tui", "cli").as_deref(),
        Some("only main.rs imports `cli`")
    );
    assert!(broken("newmodule", "model").is_some_and(|w| w.contains("no rule")));
}

// ---------------------------------------------------------------------------------------------
// Inside each folder: the files form layers too. Every folder of `src/` (and below) is checked
// for an import circle between its files: a file that imports, through any chain, a file that
// imports it back cannot be read from the bottom up.

/// Folders (relative to `src/`) whose circle a change in flight removes. An entry whose folder
/// no longer has a circle fails, so the list only shrinks.
const KNOWN_CIRCLES: &[&str] = &[];

/// One `use`/body path expanded from its groups: the segments as written, from the crate root
/// once resolved (`crate::`, `super::`, `self::` replaced by the module path they mean), and the
/// name it is bound to when imported with `as`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FullPath {
    line: usize,
    segments: Vec<String>,
    alias: Option<String>,
}

/// A path's segments and the name it is bound to with `as`.
type Leaf = (Vec<String>, Option<String>);

/// The leaves of the path tree that starts at `toks[j]` (after its `crate::`/`super::`/`self::`
/// head), each prefixed with `base`: `a::{b, c::{d, e as f}}` → `a::b`, `a::c::d`, `a::c::e as f`.
/// Returns the leaves and the index just past the tree.
fn path_leaves(toks: &Toks, mut j: usize, base: Vec<String>) -> (Vec<Leaf>, usize) {
    let mut segs = base;
    loop {
        if let Some(name) = toks.ident(j) {
            if name != "self" {
                segs.push(name.to_string());
            }
            j += 1;
            if toks.is(j, &Tok::Path) {
                j += 1;
                continue;
            }
            let alias = if toks.ident(j) == Some("as") {
                j += 2;
                toks.ident(j - 1).map(str::to_string)
            } else {
                None
            };
            return (vec![(segs, alias)], j);
        } else if toks.is(j, &Tok::Sym('*')) {
            return (vec![(segs, None)], j + 1);
        } else if toks.is(j, &Tok::Sym('{')) {
            let mut out = Vec::new();
            j += 1;
            while j < toks.len() && !toks.is(j, &Tok::Sym('}')) {
                if toks.is(j, &Tok::Sym(',')) {
                    j += 1;
                    continue;
                }
                let (mut leaves, next) = path_leaves(toks, j, segs.clone());
                out.append(&mut leaves);
                // Whatever follows an item up to its `,` or `}` (a stray token) is skipped.
                j = next.max(j + 1);
                while j < toks.len() && !toks.is(j, &Tok::Sym(',')) && !toks.is(j, &Tok::Sym('}')) {
                    j += 1;
                }
            }
            return (out, j + 1);
        } else {
            return (vec![(segs, None)], j);
        }
    }
}

/// Whether `#[cfg(test)]` starts at `toks[i]`.
fn cfg_test_at(toks: &Toks, i: usize) -> bool {
    let want = [
        Tok::Sym('#'),
        Tok::Sym('['),
        Tok::Ident("cfg".into()),
        Tok::Sym('('),
        Tok::Ident("test".into()),
        Tok::Sym(')'),
        Tok::Sym(']'),
    ];
    want.iter().enumerate().all(|(k, t)| toks.is(i + k, t))
}

/// Every `crate::`, `super::` and `self::` path in `source` (the file of module `module`),
/// resolved from the crate root, groups expanded; items under `#[cfg(test)]` skipped.
fn full_paths(source: &str, module: &[String]) -> Vec<FullPath> {
    let toks = Toks::of(source);
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        if cfg_test_at(&toks, i) {
            // Skip the item: up to its `;` or the end of its first `{…}` block.
            let mut j = i + 7;
            let mut d = 0usize;
            while j < toks.len() {
                match &toks[j].0 {
                    Tok::Sym('{') => d += 1,
                    Tok::Sym('}') => {
                        d = d.saturating_sub(1);
                        if d == 0 {
                            break;
                        }
                    }
                    Tok::Sym(';') if d == 0 => break,
                    _ => {}
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        let (tok, line) = &toks[i];
        match tok {
            Tok::Sym('{') => depth += 1,
            Tok::Sym('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(name), true) = (toks.ident(i + 1), toks.is(i + 2, &Tok::Sym('{'))) {
                    inline.push((name.to_string(), depth + 1));
                }
            }
            _ => {}
        }
        let start_of_path = i == 0 || !toks.is(i - 1, &Tok::Path);
        let head = toks.ident(i);
        if start_of_path
            && matches!(head, Some("crate" | "super" | "self"))
            && toks.is(i + 1, &Tok::Path)
        {
            let mut here = module.to_vec();
            here.extend(inline.iter().map(|(n, _)| n.clone()));
            let mut j = i;
            let base = match head {
                Some("crate") => {
                    j += 2;
                    Vec::new()
                }
                Some("self") => {
                    j += 2;
                    here
                }
                _ => {
                    while toks.ident(j) == Some("super") && toks.is(j + 1, &Tok::Path) {
                        here.pop();
                        j += 2;
                    }
                    here
                }
            };
            let (leaves, next) = path_leaves(&toks, j, base);
            for (segments, alias) in leaves {
                out.push(FullPath {
                    line: *line,
                    segments,
                    alias,
                });
            }
            i = next.max(i + 1);
            continue;
        }
        i += 1;
    }
    out
}

/// An edge between two files of one folder: `from` imports `to` at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// The file-level import graph of `folder` (a module path) among `files` (module path, file
/// name for messages, source). A node is a direct child of the folder: a file `x.rs` or a
/// subfolder `x/`; `mod.rs` is the folder's door (declarations and re-exports) and no node, but
/// a path through one of its `pub use`s counts as an edge to the file re-exported.
fn folder_edges(folder: &[String], files: &[(Vec<String>, String, String)]) -> Vec<Edge> {
    let n = folder.len();
    let nodes: Vec<&str> = files
        .iter()
        .filter(|(m, _, _)| m.len() > n && m[..n] == *folder)
        .map(|(m, _, _)| m[n].as_str())
        .collect();
    // What the folder's mod.rs re-exports: name → the node it comes from.
    let mut reexports: Vec<(String, String)> = Vec::new();
    if let Some((_, _, src)) = files.iter().find(|(m, _, _)| m.as_slice() == folder) {
        for p in full_paths(src, folder) {
            let rel = &p.segments[..];
            if rel.len() > n + 1 && rel[..n] == *folder && nodes.contains(&rel[n].as_str()) {
                let name = p
                    .alias
                    .clone()
                    .unwrap_or_else(|| rel[rel.len() - 1].clone());
                reexports.push((name, rel[n].clone()));
            }
        }
        // A grouped `use x::{…}` inside mod.rs resolves against the folder (`x` is a child).
        let toks = Toks::of(src);
        for i in 0..toks.len() {
            let bare_use = toks.ident(i) == Some("use")
                && toks.ident(i + 1).is_some_and(|x| nodes.contains(&x))
                && toks.is(i + 2, &Tok::Path);
            if bare_use {
                let (leaves, _) = path_leaves(&toks, i + 1, folder.to_vec());
                for (segs, alias) in leaves {
                    if segs.len() > n + 1 {
                        let name = alias.unwrap_or_else(|| segs[segs.len() - 1].clone());
                        reexports.push((name, segs[n].clone()));
                    }
                }
            }
        }
    }
    let mut edges = Vec::new();
    for (module, file, src) in files {
        if module.len() <= n || module[..n] != *folder {
            continue;
        }
        let from = &module[n];
        for p in full_paths(src, module) {
            let s = &p.segments;
            if s.len() <= n || s[..n] != *folder {
                continue;
            }
            let to = if nodes.contains(&s[n].as_str()) {
                Some(s[n].clone())
            } else {
                reexports
                    .iter()
                    .find(|(name, _)| *name == s[n])
                    .map(|(_, node)| node.clone())
            };
            if let Some(to) = to.filter(|t| t != from) {
                let e = Edge {
                    from: from.clone(),
                    to,
                    at: format!("{file}:{}", p.line),
                };
                // `use super::x::{self, Y}` is one edge.
                if !edges.contains(&e) {
                    edges.push(e);
                }
            }
        }
    }
    edges
}

/// Every node reachable from `from` (itself included).
fn reach<'a>(edges: &'a [Edge], from: &'a str) -> Vec<&'a str> {
    let mut seen = vec![from];
    let mut todo = vec![from];
    while let Some(x) = todo.pop() {
        for e in edges.iter().filter(|e| e.from == x) {
            if !seen.contains(&e.to.as_str()) {
                seen.push(e.to.as_str());
                todo.push(e.to.as_str());
            }
        }
    }
    seen
}

/// The circles of a graph: each strongly connected component of two or more nodes (every file
/// in it reaches every other), with the shortest cycle through its first node, each edge with
/// its place.
fn circles(edges: &[Edge]) -> Vec<(Vec<String>, Vec<Edge>)> {
    let mut nodes: Vec<&str> = edges
        .iter()
        .flat_map(|e| [e.from.as_str(), e.to.as_str()])
        .collect();
    nodes.sort();
    nodes.dedup();
    let mut done: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for &a in &nodes {
        if done.contains(&a) {
            continue;
        }
        let from_a = reach(edges, a);
        let mut scc: Vec<&str> = from_a
            .iter()
            .copied()
            .filter(|b| reach(edges, b).contains(&a))
            .collect();
        scc.sort();
        done.extend(scc.iter().copied());
        if scc.len() < 2 {
            continue;
        }
        // The shortest cycle through `a`: a breadth-first search back to it inside the component.
        let mut prev: Vec<(&str, &Edge)> = Vec::new();
        let mut frontier = vec![a];
        let mut found = None;
        'search: while !frontier.is_empty() {
            let mut next = Vec::new();
            for x in frontier {
                for e in edges
                    .iter()
                    .filter(|e| e.from == x && scc.contains(&e.to.as_str()))
                {
                    if e.to == a {
                        found = Some(e);
                        break 'search;
                    }
                    if !prev.iter().any(|(n, _)| *n == e.to) {
                        prev.push((e.to.as_str(), e));
                        next.push(e.to.as_str());
                    }
                }
            }
            frontier = next;
        }
        let mut cycle = Vec::new();
        let mut e = found.expect("a component of two or more nodes has a cycle through each");
        loop {
            cycle.push(e.clone());
            if e.from == a {
                break;
            }
            e = prev.iter().find(|(n, _)| *n == e.from).expect("reached").1;
        }
        cycle.reverse();
        out.push((scc.iter().map(|s| s.to_string()).collect(), cycle));
    }
    out
}

/// The library's files under `src/` (`main.rs`, the binary, left out): (module path, file name
/// for messages, source).
fn library_files(root: &Path) -> Vec<(Vec<String>, String, String)> {
    let src = root.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .iter()
        .filter(|p| {
            p.strip_prefix(&src)
                .is_ok_and(|r| r != Path::new("main.rs"))
        })
        .map(|p| {
            let rel = p.strip_prefix(&src).expect("under src");
            let text = std::fs::read_to_string(p).expect("readable source");
            (module_of(rel), format!("src/{}", rel.display()), text)
        })
        .collect()
}

/// Every folder under `src/` with a circle: (folder relative to `src/`, description).
fn folder_circles(root: &Path) -> Vec<(String, String)> {
    let files = library_files(root);
    // Every folder: the directory of each file below the root, and its parents.
    let mut folders: Vec<Vec<String>> = Vec::new();
    for (_, file, _) in &files {
        let rel = Path::new(file).strip_prefix("src").expect("src/");
        let mut dir: Vec<String> = rel
            .parent()
            .map(|d| d.iter().map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        while !dir.is_empty() {
            if !folders.contains(&dir) {
                folders.push(dir.clone());
            }
            dir.pop();
        }
    }
    folders.sort();
    let mut out = Vec::new();
    for folder in folders {
        for (nodes, cycle) in circles(&folder_edges(&folder, &files)) {
            let path: Vec<String> = cycle
                .iter()
                .map(|e| format!("{} → {} ({})", e.from, e.to, e.at))
                .collect();
            out.push((
                folder.join("/"),
                format!(
                    "src/{}/: {} files in a circle ({}); one cycle: {}",
                    folder.join("/"),
                    nodes.len(),
                    nodes.join(", "),
                    path.join(", ")
                ),
            ));
        }
    }
    out
}

#[test]
fn no_folder_has_an_import_circle() {
    let all = folder_circles(Path::new(env!("CARGO_MANIFEST_DIR")));
    let new: Vec<&str> = all
        .iter()
        .filter(|(f, _)| !KNOWN_CIRCLES.contains(&f.as_str()))
        .map(|(_, text)| text.as_str())
        .collect();
    assert!(
        new.is_empty(),
        "import circles between the files of a folder (each file imports only files below it; \
         docs/architecture.md): move the item to the file of the layer it belongs to:\n  {}",
        new.join("\n  ")
    );
    let gone: Vec<&str> = KNOWN_CIRCLES
        .iter()
        .copied()
        .filter(|k| !all.iter().any(|(f, _)| f == k))
        .collect();
    assert!(
        gone.is_empty(),
        "folders in KNOWN_CIRCLES without a circle now: remove them: {}",
        gone.join(", ")
    );
}

/// A source file of the tests below: its module path, its file name and its text.
fn file(m: &[&str], src: &str) -> (Vec<String>, String, String) {
    let module: Vec<String> = m.iter().map(|s| s.to_string()).collect();
    let name = format!("src/{}.rs", module.join("/"));
    (module, name, src.to_string())
}

#[test]
fn the_circle_finder_finds_a_circle_through_every_kind_of_path() {
    let files = vec![
        // The door: re-exports `Key` from `d`.
        file(
            &["f"],
            "mod a; mod b; mod c; mod d;\npub use d::{Key, Other as Renamed};",
        ),
        // a → b through a group in a body, a → d through the re-export.
        file(
            &["f", "a"],
            "use crate::model::X;\nfn g() {\n    crate::f::{b::run, self::a::z}();\n    let k: super::Key;\n}",
        ),
        // b → c with `super::`; its tests' import of `a` does not count.
        file(
            &["f", "b"],
            "use super::c::{self, Thing};\n#[cfg(test)]\nmod tests {\n    use crate::f::a::x;\n}",
        ),
        // c → a closes the circle; `self::` stays in c.
        file(
            &["f", "c"],
            "fn h() { self::local(); }\n\n\nuse crate::f::{a::{deep::y}};",
        ),
        // d imports nothing of the folder.
        file(
            &["f", "d"],
            "// crate::f::a in a comment\nfn x() { let s = \"super::a\"; }",
        ),
    ];
    let folder = vec!["f".to_string()];
    let edges = folder_edges(&folder, &files);
    let pairs: Vec<(&str, &str, &str)> = edges
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str(), e.at.as_str()))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("a", "b", "src/f/a.rs:3"),
            ("a", "d", "src/f/a.rs:4"),
            ("b", "c", "src/f/b.rs:1"),
            ("c", "a", "src/f/c.rs:4"),
        ]
    );
    let found = circles(&edges);
    assert_eq!(found.len(), 1);
    let (nodes, cycle) = &found[0];
    assert_eq!(nodes, &["a", "b", "c"]);
    let at: Vec<&str> = cycle.iter().map(|e| e.at.as_str()).collect();
    assert_eq!(at, vec!["src/f/a.rs:3", "src/f/b.rs:1", "src/f/c.rs:4"]);
    // Without c's import the layers hold: a on b on c, and d below a.
    let layered: Vec<Edge> = edges.into_iter().filter(|e| e.from != "c").collect();
    assert!(circles(&layered).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Between the folders of a folder: a stack. The children of `src/controller/` and `src/tui/`
// (their folders and the files beside them) are in one order, bottom to top, and a file imports
// only files of its own child or of a child below it: so the tree can be read from the bottom
// up, folder by folder, as each folder's files can.

/// The order of the children of a folder (relative to `src/`), bottom to top: each file in a
/// child (a folder, or a file beside the folders) imports only files of that child or of one
/// before it here. `mod.rs` is the folder's door and no child: it declares and re-exports, and
/// a path through one of its re-exports counts as an import of the child re-exported. A child
/// missing from its row fails the test, and so does a name in a row with no such child: a new
/// folder or file gets its place when it is added (docs/architecture.md draws these trees).
const FOLDERS: &[(&str, &[&str])] = &[
    (
        "controller",
        &[
            "tasks",     // the supervisor; `changed`
            "reconcile", // a decision: keys, world, cache, queue, reconcilers, the worker's step
            "store",     // what a copy has read: the reflector stores
            "view",      // what a copy knows of itself and publishes: state, status, fence
            "tell",      // Events, metrics, outages
            "error",     // `Error`, `RequestError`
            "ask",       // a request to the leader: its tracking, the requests channel
            "watch",     // the tasks that keep the stores current
            "lead",      // the election on the Lease; requests the leader serves
            "run",       // start-up, the door, the writer, the workers, publishing
        ],
    ),
    (
        "tui",
        &[
            "say",     // words and glyphs
            "model",   // the state, its actions and keys, and the one update
            "draw",    // the frame drawn from the state
            "sources", // where the data comes from: files, the live controller
        ],
    ),
];

/// What breaks `folders` (rows of `FOLDERS`) among `files` (module path, file name, source):
/// an import from a child into a child above it (file:line, the two children and the row), a
/// child without a place in its row, a name in a row with no such child.
fn stack_breaks(
    folders: &[(&str, &[&str])],
    files: &[(Vec<String>, String, String)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, order) in folders {
        let folder: Vec<String> = name.split('/').map(str::to_string).collect();
        let n = folder.len();
        let mut children: Vec<&str> = files
            .iter()
            .filter(|(m, _, _)| m.len() > n && m[..n] == *folder)
            .map(|(m, _, _)| m[n].as_str())
            .collect();
        children.sort();
        children.dedup();
        for child in &children {
            if !order.contains(child) {
                out.push(format!(
                    "src/{name}/{child}: no place in FOLDERS' row for src/{name}/: give it one"
                ));
            }
        }
        for child in order.iter() {
            if !children.contains(child) {
                out.push(format!(
                    "FOLDERS' row for src/{name}/ names `{child}`, which is neither a file nor a folder there"
                ));
            }
        }
        let place = |child: &str| order.iter().position(|c| *c == child);
        for e in folder_edges(&folder, files) {
            if let (Some(from), Some(to)) = (place(&e.from), place(&e.to))
                && from < to
            {
                out.push(format!(
                    "{}: `{}` imports `{}`, which is above it in src/{name}/ (bottom up: {})",
                    e.at,
                    e.from,
                    e.to,
                    order.join(" < ")
                ));
            }
        }
    }
    out
}

#[test]
fn no_import_climbs_the_folder_stack() {
    let files = library_files(Path::new(env!("CARGO_MANIFEST_DIR")));
    let found = stack_breaks(FOLDERS, &files);
    assert!(
        found.is_empty(),
        "imports that climb the stack of folders (a file imports only its own folder or folders \
         below it; FOLDERS, docs/architecture.md): move the item down to the folder it belongs \
         to:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_stack_check_finds_an_import_that_climbs() {
    let files = vec![
        // The door re-exports `Top` from the folder `high`.
        file(
            &["f"],
            "mod low; mod mid; mod high;\npub use high::top::Top;",
        ),
        // Down: `high` may import `mid` and `low`; `mid` may import `low`.
        file(
            &["f", "high", "top"],
            "use crate::f::mid::M;\nuse super::super::low::a::A;",
        ),
        file(&["f", "mid"], "use super::low::a::A;"),
        // Up, twice: into `mid` by its path, into `high` through the door's re-export; the
        // import of its own folder is no edge, and its tests' import does not count.
        file(
            &["f", "low", "a"],
            "use super::b::B;\nfn g() {\n    crate::f::mid::m();\n    let t: super::super::Top;\n}\n#[cfg(test)]\nmod tests {\n    use crate::f::high::top::x;\n}",
        ),
        file(&["f", "low", "b"], ""),
    ];
    let order: &[&str] = &["low", "mid", "high"];
    // Without `low`'s climbing imports the stack holds.
    let mut down = files.clone();
    down[3].2 = "use super::b::B;".to_string();
    assert_eq!(stack_breaks(&[("f", order)], &down), Vec::<String>::new());
    assert_eq!(
        stack_breaks(&[("f", order)], &files),
        vec![
            "src/f/low/a.rs:3: `low` imports `mid`, which is above it in src/f/ (bottom up: low < mid < high)",
            "src/f/low/a.rs:4: `low` imports `high`, which is above it in src/f/ (bottom up: low < mid < high)",
        ]
    );
    // Every child has a place, and every place a child.
    let short: &[&str] = &["low", "high", "gone"];
    assert_eq!(
        stack_breaks(&[("f", short)], &files),
        vec![
            "src/f/mid: no place in FOLDERS' row for src/f/: give it one",
            "FOLDERS' row for src/f/ names `gone`, which is neither a file nor a folder there",
            "src/f/low/a.rs:4: `low` imports `high`, which is above it in src/f/ (bottom up: low < high < gone)",
        ]
    );
}

/// The files of `src/` that may name anyhow: the binary's edge. The library returns typed
/// errors (thiserror, the cause as a `#[source]`), which `cli` turns into what `main` prints.
fn anyhow_outside_the_edge(root: &Path) -> Vec<String> {
    let src = root.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut out = Vec::new();
    for p in paths {
        let rel = p.strip_prefix(&src).expect("under src");
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("readable source");
        for (tok, line) in Toks::of(&text).iter() {
            if *tok == Tok::Ident("anyhow".into()) {
                out.push(format!("src/{}:{line}", rel.display()));
            }
        }
    }
    out
}

#[test]
fn anyhow_is_only_in_cli_and_main() {
    let found = anyhow_outside_the_edge(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        found.is_empty(),
        "anyhow outside src/cli/ and src/main.rs (return a thiserror error with its cause as a \
         #[source]; docs/architecture.md, Errors): {}",
        found.join(", ")
    );
}
