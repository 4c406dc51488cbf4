//! The house, checked: the layers run one way and the rooms stay small (issue 28). Reads `src/`
//! and fails on
//!
//! - an import against the direction: `core` imports nothing outside the core; each adapter
//!   (`adapters::<name>`) imports the core and itself only; `config` the core and the adapters;
//!   the `engine` those and `config`; `cli` anything below it; `main.rs` the cli only;
//! - a circle between the modules of the core, the adapters or the engine (`core::policy` and
//!   `core::units` importing each other, say);
//! - a source file over [`MAX_CODE_LINES`] lines of code before its first `#[cfg(test)]`
//!   (lines neither blank nor a comment);
//! - I/O or a clock read named in the core ([`CORE_FORBIDDEN`]).
//!
//! Only the part of a file before its first `#[cfg(test)]` is read: a test may set up what it
//! needs from any layer. An import is any `crate::…` or `super::…` path in code (comments aside),
//! braces (`crate::{a, b::c}`) included.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The most lines of code a source file may have outside its tests.
const MAX_CODE_LINES: usize = 500;

/// What the core must not name: files, the environment, processes, the network, the async
/// runtime, /proc and system calls, and the clocks.
const CORE_FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::env",
    "std::process",
    "std::net",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "tokio",
    "procfs",
    "rustix",
    "Utc::now",
    "Local::now",
    "Instant::now",
    "SystemTime::now",
];

/// A module's path from its file's path under `src/` (`core/policy/mod.rs` is `core::policy`,
/// `lib.rs` the crate root, `main.rs` the binary, seen as the module `main`).
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod") | Some("lib")) {
        parts.pop();
    }
    parts
}

/// The code before the first `#[cfg(test)]`.
fn code_part(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or("")
}

/// Lines of code: neither blank nor a comment.
fn code_lines(text: &str) -> usize {
    code_part(text)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// The code with `//` comments (doc comments too) removed, string literals kept: a URL in a string
/// may cut its line short, which only hides paths, never invents one.
fn without_comments(code: &str) -> String {
    code.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths a piece of code names after `crate::`, `ccs_reap::` (the binary) or `super::`, each
/// resolved to an absolute module path (as many segments as are written in lower case: the
/// module, not the item).
fn imports(module: &[String], code: &str) -> Vec<Vec<String>> {
    let code = without_comments(code);
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let prev_ok = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let base: Option<(Vec<String>, usize)> = if !prev_ok {
            None
        } else if let Some(r) = rest.strip_prefix("crate::") {
            Some((Vec::new(), code.len() - r.len()))
        } else if let Some(r) = rest.strip_prefix("ccs_reap::") {
            Some((Vec::new(), code.len() - r.len()))
        } else if rest.starts_with("super::") {
            // `super` of a module's own file (`x.rs` or `x/mod.rs`) is its parent.
            let mut m = module.to_vec();
            let mut r = rest;
            while let Some(t) = r.strip_prefix("super::") {
                m.pop();
                r = t;
            }
            Some((m, code.len() - r.len()))
        } else {
            None
        };
        let Some((base, at)) = base else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        for tail in group_items(&code[at..]) {
            let mut p = base.clone();
            for seg in tail.split("::").map(str::trim) {
                let id = ident_at(seg);
                if id.is_empty()
                    || id == "self"
                    || !id.starts_with(|c: char| c.is_ascii_lowercase())
                {
                    break;
                }
                p.push(id.to_string());
                if id.len() != seg.len() {
                    break;
                }
            }
            out.push(p);
        }
        i = at;
    }
    out
}

/// What follows a `crate::`: one path, or the items of a `{…}` group (nested groups flattened).
fn group_items(s: &str) -> Vec<String> {
    let s = s.trim_start();
    if !s.starts_with('{') {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(s.len());
        return vec![s[..end].to_string()];
    }
    let mut depth = 0;
    let mut end = s.len();
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = k;
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &s[1..end];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let mut out = Vec::new();
    for it in items.into_iter().map(str::trim).filter(|t| !t.is_empty()) {
        match it.find("::{") {
            Some(k) => {
                for sub in group_items(&it[k + 2..]) {
                    out.push(format!("{}::{}", &it[..k], sub));
                }
            }
            None => out.push(it.to_string()),
        }
    }
    out
}

/// Whether `from` may import `to` (absolute module paths; the crate root is empty).
fn allowed(from: &[String], to: &[String]) -> bool {
    let room = |m: &[String]| m.first().cloned().unwrap_or_default();
    let (a, b) = (room(from), room(to));
    match a.as_str() {
        "" => true,
        "core" => b == "core",
        // The agent seam is pure too: one descriptor per agent CLI, over the core's data.
        "agents" => matches!(b.as_str(), "core" | "agents"),
        "adapters" => b == "core" || (b == "adapters" && from.get(1) == to.get(1)),
        "config" => matches!(b.as_str(), "core" | "adapters" | "config"),
        "engine" => matches!(
            b.as_str(),
            "core" | "agents" | "adapters" | "config" | "engine"
        ),
        "cli" => b != "main",
        "main" => b == "cli",
        _ => false,
    }
}

/// Every fault of the house in a set of files (path under `src/` and text).
fn faults(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    // Edges between the modules of the core, the adapters and the engine, two segments deep.
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (rel, text) in files {
        let module = module_of(rel);
        let code = code_part(text);
        let n = code_lines(text);
        if n > MAX_CODE_LINES {
            out.push(format!(
                "src/{rel}: {n} lines of code (over {MAX_CODE_LINES}): split it"
            ));
        }
        if matches!(module.first().map(String::as_str), Some("core" | "agents")) {
            let bare = without_comments(code);
            for word in CORE_FORBIDDEN.iter().filter(|w| bare.contains(*w)) {
                out.push(format!(
                    "src/{rel}: the core names `{word}` (no I/O, no clock)"
                ));
            }
        }
        for to in imports(&module, code) {
            if !allowed(&module, &to) {
                out.push(format!(
                    "src/{rel}: `{}` imports `{}` against the layers",
                    module.join("::"),
                    to.join("::")
                ));
            }
            let two = |m: &[String]| m.iter().take(2).cloned().collect::<Vec<_>>();
            let (a, b) = (two(&module), two(&to));
            let inner = |m: &[String]| {
                m.len() == 2 && matches!(m[0].as_str(), "core" | "adapters" | "engine")
            };
            if a != b && inner(&a) && inner(&b) {
                graph.entry(a).or_default().insert(b);
            }
        }
    }
    let reach = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    for (a, outs) in &graph {
        for b in outs {
            if a < b && reach(b).contains(a) {
                out.push(format!(
                    "`{}` and `{}` import each other (directly or around a circle)",
                    a.join("::"),
                    b.join("::")
                ));
            }
        }
    }
    out
}

pub(super) fn read_tree(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let sub = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let path = e.path();
        if path.is_dir() {
            read_tree(&path, &sub, out);
        } else if name == "tests.rs" {
            // A module's tests in a file of their own (`#[cfg(test)] mod tests;`): test code,
            // like the part after `#[cfg(test)]` in any other file.
            continue;
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            out.push((sub, text));
        }
    }
}

#[test]
fn the_house_runs_one_way_and_its_rooms_are_small() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_tree(&src, "", &mut files);
    assert!(
        files.iter().any(|(p, _)| p == "core/mod.rs"),
        "src/core/mod.rs not found: is {} the crate?",
        src.display()
    );
    let f = faults(&files);
    assert!(f.is_empty(), "the house:\n{}", f.join("\n"));
}

/// The checker itself, on made-up files: each fault it must see, and what it must let pass.
#[test]
fn the_checker_sees_what_it_must() {
    let big = "fn f() {}\n".repeat(MAX_CODE_LINES + 1);
    let big_with_tests = format!(
        "fn f() {{}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        "fn g() {}\n".repeat(MAX_CODE_LINES + 1)
    );
    let commented = format!("fn f() {{}}\n{}", "// a comment\n\n".repeat(MAX_CODE_LINES));
    // (file, text, how many faults)
    let table: &[(&str, &str, usize)] = &[
        ("core/a.rs", "use crate::core::b::X;", 0),
        ("agents/a.rs", "use crate::core::policy::valid_cid;", 0),
        ("agents/a.rs", "use crate::engine::claude_hook::EVENTS;", 1),
        ("agents/a.rs", "fn f() { std::fs::read(\"x\"); }", 1),
        ("core/a.rs", "use crate::agents::claude;", 1),
        ("engine/a.rs", "use crate::agents::claude;", 0),
        ("core/a.rs", "fn f() { std::fs::read(\"x\"); }", 1),
        (
            "core/a.rs",
            "fn f() -> i64 { chrono::Utc::now().timestamp() }",
            1,
        ),
        ("core/a.rs", "/// unlike std::fs::read\nfn f() {}", 0),
        (
            "adapters/state/mod.rs",
            "fn f() { std::fs::read(\"x\"); }",
            0,
        ),
        ("core/a.rs", "use crate::adapters::tmux::Tmux;", 1),
        ("core/a.rs", "use crate::config::Config;", 1),
        ("core/a.rs", "fn f() { crate::engine::sweep::sweep(); }", 1),
        ("core/a.rs", "use crate::{core::b, engine::c};", 1),
        ("core/a.rs", "use crate::{core::{b, c::D}, cli::{x, y}};", 2),
        (
            "core/a.rs",
            "/// see [`crate::engine::sweep`]\nfn f() {}",
            0,
        ),
        (
            "core/a.rs",
            "fn f() {}\n#[cfg(test)]\nmod t { use crate::adapters::x; }",
            0,
        ),
        ("core/p/mod.rs", "use super::units::Millis;", 0),
        ("core/p/x.rs", "use super::super::super::engine::Y;", 1),
        (
            "adapters/tmux/mod.rs",
            "use crate::core::listing::Listing;",
            0,
        ),
        ("adapters/tmux/mod.rs", "use crate::adapters::procs::x;", 1),
        (
            "adapters/tmux/args.rs",
            "use crate::adapters::tmux::Tmux;",
            0,
        ),
        ("adapters/tmux/args.rs", "use super::Tmux;", 0),
        ("adapters/tmux/args.rs", "use super::super::procs;", 1),
        ("adapters/tmux/mod.rs", "use crate::config::Socket;", 1),
        ("config.rs", "use crate::adapters::tmux::Socket;", 0),
        ("config.rs", "use crate::engine::context::Reaper;", 1),
        ("engine/sweep.rs", "use crate::config::Config;", 0),
        ("engine/sweep.rs", "use crate::cli::exit;", 1),
        ("cli/mod.rs", "use crate::engine::sweep;", 0),
        ("main.rs", "fn main() { ccs_reap::cli::main() }", 0),
        (
            "main.rs",
            "fn main() { ccs_reap::engine::daemon::run() }",
            1,
        ),
        ("engine/sweep.rs", &big, 1),
        ("engine/sweep.rs", &big_with_tests, 0),
        ("engine/sweep.rs", &commented, 0),
        ("config/table.rs", &big, 1),
    ];
    for (file, text, want) in table {
        let got = faults(&[(file.to_string(), text.to_string())]);
        assert_eq!(got.len(), *want, "{file}: {text:.80?}: {got:?}");
    }
    // A circle in the core, as `core::policy` and `core::units` had.
    let circle = [
        (
            "core/policy/mod.rs".to_string(),
            "use crate::core::units::parse;".to_string(),
        ),
        (
            "core/units.rs".to_string(),
            "use crate::core::policy::MemThreshold;".to_string(),
        ),
    ];
    let got = faults(&circle);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("core::policy") && got[0].contains("core::units"),
        "{got:?}"
    );
    // One way only is no circle.
    assert!(faults(&circle[..1]).is_empty());
    // In the engine too: the sweep and the teardown may not call each other.
    let circle = [
        (
            "engine/sweep/mod.rs".to_string(),
            "use crate::engine::teardown;".to_string(),
        ),
        (
            "engine/teardown/recover.rs".to_string(),
            "use crate::engine::sweep::x;".to_string(),
        ),
    ];
    assert_eq!(faults(&circle).len(), 1, "{:?}", faults(&circle));
}

/// No merge's conflict markers in a tracked file: two landed in docs/teardown.md once, and
/// nothing read them until a later merge.
#[test]
fn no_tracked_file_keeps_a_merge_conflict() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("git ls-files in {}: {e}", root.display()));
    assert!(
        out.status.success(),
        "git ls-files in {}: {out:?}",
        root.display()
    );
    let (ours, theirs) = ("<".repeat(7) + " ", ">".repeat(7) + " ");
    let mut found = Vec::new();
    for rel in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let rel = String::from_utf8_lossy(rel).into_owned();
        // Binary files and files git lists but the tree lacks (a deletion not committed) aside.
        let Ok(text) = std::fs::read_to_string(root.join(&rel)) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if line.starts_with(&ours) || line.starts_with(&theirs) {
                found.push(format!("{rel}:{}: {line}", n + 1));
            }
        }
    }
    assert!(found.is_empty(), "conflict markers:\n{}", found.join("\n"));
}
