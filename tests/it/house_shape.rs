//! The shape of the house's code, checked (issue 46): reads `src/` (test code aside) and fails on
//!
//! - a function longer than [`MAX_FN_LINES`] lines, but the two documented long ones
//!   ([`LONG_BY_DESIGN`]: the core's one decision and tmux's listing parser, each one table);
//! - a function in `engine/` or `adapters/` with [`MAX_PARAMS`] or more parameters (`self` aside):
//!   a small struct of what it uses says more;
//! - a `Result<_, String>` in `engine/` or `adapters/`: each room has its error type;
//! - a function in `engine/` that takes the whole context (`&Reaper`, `Arc<Reaper>`) and is not
//!   an entry point: entry points are the engine's `pub` surface (what the cli calls); an inner
//!   function (`pub(crate)`, `pub(super)`, private) takes the handles it uses. Besides: the
//!   projections `of` (a small struct of handles made from the context, `Hands::of(&Reaper)`),
//!   and the few steps of a driver that hand the context on to other rooms' entries
//!   ([`HANDS_ON`], each named);
//! - a `std::sync::Mutex` (whose poisoning every lock would have to unwrap): `parking_lot`'s;
//! - a call sideways between the engine's rooms: each room has a tier ([`ENGINE_TIERS`]) and
//!   imports only rooms of a lower tier (handles < the look < stages < drivers < entries); the
//!   handles (tier 0) may hold one another (`house.rs` forbids circles).
//!
//! Comments and string literals are blanked before reading; a function is its `fn` to the
//! brace that closes its body. Test code is not read: files named `tests.rs` or `standin.rs`,
//! files under a `tests/` directory, and the part of a file after its first `#[cfg(test)]`.

use std::path::Path;

/// The most lines a function may span, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 80;

/// Functions that may be longer, and why: each is one table read top to bottom.
const LONG_BY_DESIGN: &[(&str, &str)] = &[
    ("core/policy/mod.rs", "decide_one"),
    ("core/listing.rs", "parse_listing"),
];

/// A function in `engine/` or `adapters/` takes fewer parameters than this.
const MAX_PARAMS: usize = 6;

/// The engine's rooms by tier. A room imports only rooms of a lower tier: the handles (state
/// that outlives a call, and the look at the world), the stages (one job each), the drivers
/// (a sweep, a room request: look, decide, then run a stage) and the entries (what the cli and
/// the daemon call).
const ENGINE_TIERS: &[(&str, u8)] = &[
    ("context", 0),
    ("inflight", 0),
    ("ownership", 0),
    ("lease_clock", 0),
    ("watching", 0),
    ("record", 0),
    ("agent_status", 0),
    ("own_pane", 0),
    ("hook_common", 0),
    ("observe", 1),
    ("teardown", 2),
    ("resume", 2),
    ("doctor", 2),
    ("sweep", 3),
    ("room", 4),
    ("claude_hook", 5),
    ("agent_hook", 5),
    ("commands", 6),
    ("daemon", 6),
];

/// Steps of the drivers (`room`, `commands`) that take the whole context only to hand it on to
/// the entries of other rooms (`observe_with`, `teardown::reap_to`, `teardown::recover`), each
/// of which makes its own small struct of handles (`Eyes::of`, `Hands::of`, `Recovery`).
const HANDS_ON: &[(&str, &str)] = &[
    ("engine/room.rs", "rounds"),
    ("engine/room.rs", "reap_round"),
    ("engine/room.rs", "finish_dead_reapers"),
    ("engine/commands.rs", "reap_one"),
    ("engine/commands.rs", "make_way"),
];

/// Comments, string and char literals blanked (newlines kept), so that braces, parentheses and
/// words inside them are not read as code.
fn blank(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep = |out: &mut String, s: &[u8]| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            keep(&mut out, &b[i..end]);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            keep(&mut out, &b[i..end]);
            i = end;
        } else if b[i] == b'r'
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && b[i + 1..].iter().take_while(|&&c| c == b'#').count() < 8
            && b.get(i + 1 + b[i + 1..].iter().take_while(|&&c| c == b'#').count()) == Some(&b'"')
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            let end = text[start..]
                .find(&close)
                .map_or(b.len(), |p| start + p + close.len());
            keep(&mut out, &b[i..end]);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            keep(&mut out, &b[i..end]);
            i = end;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(3)
            } else {
                None
            };
            match len {
                Some(n) => {
                    keep(&mut out, &b[i..i + n]);
                    i += n;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Blanked code without its test items: each item under `#[cfg(test)]` (a `mod tests;` line,
/// a `mod tests { .. }` block, a helper) is cut to its end, the rest of the file read on.
fn without_test_items(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut at = 0;
    while let Some(p) = code[at..].find("#[cfg(test)]") {
        let start = at + p;
        out.push_str(&code[at..start]);
        let end = match code[start..].find(['{', ';']).map(|q| start + q) {
            Some(q) if b[q] == b'{' => close_of(b, q),
            Some(q) => q + 1,
            None => code.len(),
        };
        out.extend(code[start..end].chars().filter(|c| *c == '\n'));
        at = end;
    }
    out.push_str(&code[at..]);
    out
}

/// A function read from the code: its name, first line, parameters (`self` aside), lines
/// spanned and parameter text.
#[derive(Debug)]
struct Func {
    name: String,
    line: usize,
    params: Vec<String>,
    lines: Option<usize>,
    /// Declared `pub` without a restriction: the surface of its room.
    public: bool,
}

/// The index just past the bracket that closes the one open at `open` (`(` or `{`).
fn close_of(code: &[u8], open: usize) -> usize {
    let (o, c) = (code[open], if code[open] == b'(' { b')' } else { b'}' });
    let mut depth = 0usize;
    for (k, &ch) in code.iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
    }
    code.len()
}

/// Every `fn` of blanked code.
fn functions(code: &str) -> Vec<Func> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find("fn ") {
        let start = at + p;
        at = start + 3;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let name: String = code[at..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(paren) = code[at..].find('(').map(|q| at + q) else {
            break;
        };
        if name.is_empty() || code[at..paren].contains(['{', ';']) {
            continue;
        }
        let end = close_of(b, paren);
        let mut params = Vec::new();
        let (mut depth, mut cur) = (0i32, String::new());
        for ch in code[paren + 1..end - 1].chars() {
            match ch {
                '<' | '(' | '[' | '{' => depth += 1,
                '>' | ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
            if ch == ',' && depth == 0 {
                params.push(std::mem::take(&mut cur));
            } else {
                cur.push(ch);
            }
        }
        params.push(cur);
        params.retain(|p| {
            let p = p.trim().trim_start_matches('&').trim_start();
            let p = p.strip_prefix('\'').map_or(p, |l| {
                l.split_once(' ').map_or("", |(_, rest)| rest).trim_start()
            });
            let p = p.strip_prefix("mut ").unwrap_or(p).trim_start();
            !(p.is_empty() || p == "self" || p.starts_with("self:") || p.starts_with("self "))
        });
        let body = code[end..].find(['{', ';']).map(|q| end + q);
        let lines = match body {
            Some(q) if b[q] == b'{' => {
                let stop = close_of(b, q);
                Some(code[start..stop].lines().count())
            }
            _ => None,
        };
        let line_start = code[..start].rfind('\n').map_or(0, |q| q + 1);
        let before = code[line_start..start].trim();
        let public = before == "pub" || before.starts_with("pub ") && !before.starts_with("pub(");
        out.push(Func {
            public,
            name,
            line: code[..start].lines().count() + 1,
            params: params.into_iter().map(|p| p.trim().to_string()).collect(),
            lines,
        });
    }
    out
}

/// The engine's room of a file under `src/` (`engine/sweep/lost.rs` is `sweep`).
fn engine_room(rel: &str) -> Option<&str> {
    let rest = rel.strip_prefix("engine/").filter(|r| *r != "mod.rs")?;
    let first = rest.split('/').next()?;
    Some(first.strip_suffix(".rs").unwrap_or(first))
}

fn tier(room: &str) -> Option<u8> {
    ENGINE_TIERS
        .iter()
        .find(|(r, _)| *r == room)
        .map(|(_, t)| *t)
}

/// Every fault of the code's shape in a set of files (path under `src/`, text).
fn shape_faults(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let code = without_test_items(&blank(text));
        let inner = rel.starts_with("engine/") || rel.starts_with("adapters/");
        for f in functions(&code) {
            let long_ok = LONG_BY_DESIGN.iter().any(|(p, n)| p == rel && *n == f.name);
            if let Some(n) = f.lines.filter(|n| *n > MAX_FN_LINES && !long_ok) {
                out.push(format!(
                    "src/{rel}:{}: `{}` spans {n} lines (over {MAX_FN_LINES}): split it",
                    f.line, f.name
                ));
            }
            if inner && f.params.len() >= MAX_PARAMS {
                out.push(format!(
                    "src/{rel}:{}: `{}` takes {} parameters: a small struct of what it uses",
                    f.line,
                    f.name,
                    f.params.len()
                ));
            }
            let whole = f.params.iter().any(|p| {
                // `r: &'a Reaper` is `r:&Reaper`: lifetimes and spaces aside.
                let bare: String = p
                    .split_whitespace()
                    .filter(|w| !w.starts_with('\'') || w.len() == 1)
                    .flat_map(|w| w.split('\'').next().map(str::to_string))
                    .collect();
                bare.ends_with("&Reaper") || bare.contains("Arc<Reaper>")
            });
            let hands_on = HANDS_ON.iter().any(|(p, n)| p == rel && *n == f.name);
            if rel.starts_with("engine/") && whole && !f.public && f.name != "of" && !hands_on {
                out.push(format!(
                    "src/{rel}:{}: `{}` takes the whole context: pass the handles it uses",
                    f.line, f.name
                ));
            }
        }
        let squeezed: String = code.split_whitespace().collect();
        let std_mutex = squeezed.contains("std::sync::Mutex")
            || squeezed.match_indices("std::sync::{").any(|(k, _)| {
                squeezed[k..]
                    .split('}')
                    .next()
                    .is_some_and(|g| g.contains("Mutex"))
            });
        if std_mutex {
            out.push(format!(
                "src/{rel}: a std::sync::Mutex: parking_lot's does not poison"
            ));
        }
        if inner {
            let squeezed: String = code.split_whitespace().collect();
            for (k, _) in squeezed.match_indices("Result<") {
                let rest = &squeezed[k..];
                let (mut depth, mut end) = (0i32, rest.len());
                for (j, ch) in rest.char_indices() {
                    match ch {
                        '<' => depth += 1,
                        '>' => {
                            depth -= 1;
                            if depth == 0 {
                                end = j;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                if rest[..end].ends_with(",String") {
                    out.push(format!(
                        "src/{rel}: `{}>`: give the room an error type",
                        &rest[..end]
                    ));
                }
            }
        }
        if let Some(from) = engine_room(rel) {
            let Some(t_from) = tier(from) else {
                out.push(format!(
                    "src/{rel}: the engine's room `{from}` has no tier in ENGINE_TIERS"
                ));
                continue;
            };
            let mut seen = std::collections::BTreeSet::new();
            for (k, _) in code.match_indices("engine::") {
                let to: String = code[k + 8..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let Some(t_to) = tier(&to) else { continue };
                let sideways = t_to > t_from || (t_to == t_from && t_from > 0);
                if to != from && sideways && seen.insert(to.clone()) {
                    out.push(format!(
                        "src/{rel}: `{from}` calls sideways into `{to}` (tier {t_from} -> {t_to})"
                    ));
                }
            }
        }
    }
    out
}

/// `src/` without its test code: as `house.rs` reads it, less the stand-in and the files
/// under a `tests/` directory.
fn read_src(dir: &Path, out: &mut Vec<(String, String)>) {
    super::house::read_tree(dir, "", out);
    out.retain(|(rel, _)| {
        !rel.ends_with("standin.rs") && !rel.split('/').any(|part| part == "tests")
    });
}

#[test]
fn the_code_keeps_its_shape() {
    let mut files = Vec::new();
    read_src(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(
        files.len() > 50,
        "read only {} files under src/",
        files.len()
    );
    let faults = shape_faults(&files);
    assert!(
        faults.is_empty(),
        "{} faults of shape:\n{}",
        faults.len(),
        faults.join("\n")
    );
}

#[test]
fn the_shape_checker_sees_what_it_must() {
    let long = format!("fn f() {{\n{}}}\n", "    g();\n".repeat(MAX_FN_LINES));
    let rows: &[(&str, String, usize)] = &[
        ("core/a.rs", long.clone(), 1),
        (
            "core/policy/mod.rs",
            long.replace("fn f", "fn decide_one"),
            0,
        ),
        ("core/a.rs", format!("/* {long} */"), 0),
        (
            "core/a.rs",
            format!("fn f() {{}}\n#[cfg(test)]\nmod t {{ {long} }}"),
            0,
        ),
        (
            "adapters/a.rs",
            "fn f(a: u8, b: u8, c: u8, d: u8, e: u8, g: u8) {}".into(),
            1,
        ),
        (
            "adapters/a.rs",
            "fn f(&self, a: u8, b: u8, c: u8, d: u8, e: u8) {}".into(),
            0,
        ),
        (
            "adapters/a.rs",
            "fn f(a: (u8, u8, u8, u8, u8, u8)) {}".into(),
            0,
        ),
        (
            "cli/a.rs",
            "fn f(a: u8, b: u8, c: u8, d: u8, e: u8, g: u8) {}".into(),
            0,
        ),
        (
            "adapters/a.rs",
            "fn f() -> Result<Vec<u8>, String> { todo!() }".into(),
            1,
        ),
        (
            "engine/sweep/a.rs",
            "fn f() -> Result<u8,\n  String> { todo!() }".into(),
            1,
        ),
        (
            "engine/sweep/a.rs",
            "fn f() -> Result<u8, Strings> { todo!() }".into(),
            0,
        ),
        (
            "engine/sweep/a.rs",
            "fn f() { let s = \"Result<u8, String>\"; }".into(),
            0,
        ),
        (
            "cli/a.rs",
            "fn f() -> Result<u8, String> { todo!() }".into(),
            0,
        ),
        ("engine/sweep/a.rs", "fn f(r: &Reaper) {}".into(), 1),
        (
            "engine/sweep/a.rs",
            "pub(crate) fn f(r: &Reaper) {}".into(),
            1,
        ),
        ("engine/sweep/a.rs", "pub fn f(r: &Reaper) {}".into(), 0),
        ("engine/sweep/a.rs", "fn of(r: &Reaper) -> Self {}".into(), 0),
        ("engine/room.rs", "fn rounds(r: &Reaper) {}".into(), 0),
        ("engine/sweep/a.rs", "fn rounds(r: &Reaper) {}".into(), 1),
        (
            "engine/sweep/a.rs",
            "pub async fn f(r: &Reaper) {}".into(),
            0,
        ),
        (
            "engine/ownership.rs",
            "use crate::engine::lease_clock::x;".into(),
            0,
        ),
        ("engine/mod.rs", "pub mod sweep;".into(), 0),
        ("engine/sweep/a.rs", "fn f(r: &Arc<Reaper>) {}".into(), 1),
        ("engine/sweep/a.rs", "fn f<'a>(r: &'a Reaper) {}".into(), 1),
        ("engine/sweep/a.rs", "pub(crate) async fn f<'a>(\n    r: &'a Reaper,\n    s: Option<Sink<'a>>,\n) -> u8 {\n    0\n}".into(), 1),
        ("engine/sweep/a.rs", "fn f<'a>(r: &'a  Arc<Reaper>) {}".into(), 1),
        ("engine/sweep/a.rs", "fn f(r: &Reapers) {}".into(), 0),
        (
            "engine/teardown/a.rs",
            "use crate::engine::resume::x;".into(),
            1,
        ),
        (
            "engine/teardown/a.rs",
            "use crate::engine::observe::x;".into(),
            0,
        ),
        (
            "engine/observe.rs",
            "use crate::engine::sweep::x;".into(),
            1,
        ),
        (
            "engine/sweep/a.rs",
            "use crate::engine::sweep::x;".into(),
            0,
        ),
        (
            "engine/sweep/a.rs",
            "/// see [`crate::engine::room`]\nfn f() {}".into(),
            0,
        ),
        ("engine/nowhere.rs", "fn f() {}".into(), 1),
        (
            "adapters/a.rs",
            "fn f<'a>(x: &'a str) -> char { '{' }".into(),
            0,
        ),
    ];
    for (rel, text, want) in rows {
        let got = shape_faults(&[(rel.to_string(), text.clone())]);
        assert_eq!(got.len(), *want, "{rel}: {text:?}: {got:?}");
    }
}
