//! The command line's conventions: `--version`, shell completions and man pages generated from the
//! clap definition. None of them reads the configuration: they work with garbage in it.

use crate::common::*;

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

/// Run the binary with garbage configuration (which every real command refuses with exit 2).
fn run(args: &[&str]) -> Out {
    let o = Command::new(BIN)
        .args(args)
        .env("CCS_REAP_INTERVAL_MS", "garbage")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

const SUBCOMMANDS: [&str; 5] = ["status", "turn", "spawn", "reap", "completions"];

#[test]
fn version_names_the_crate_version() {
    for flag in ["--version", "-V"] {
        let o = run(&[flag]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        // The commit it was built from (build.rs; the same for this test binary, built in the
        // same run): a git commit here, where the sources are a git checkout.
        let commit = env!("CCS_REAP_COMMIT");
        let in_git = Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .is_ok_and(|o| o.status.success());
        if in_git {
            assert!(
                commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
                "{commit:?} is no commit"
            );
        }
        assert_eq!(
            o.stdout,
            format!("ccs-reap {} (commit {commit})\n", env!("CARGO_PKG_VERSION"))
        );
    }
    // And the garbage is refused by a command that reads it: the runs above did not read it.
    let o = run(&["--once"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("CCS_REAP_INTERVAL_MS"), "{}", o.stderr);
}

#[test]
fn completions_for_every_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = run(&["completions", shell]);
        assert_eq!(o.code, 0, "{shell}: {}", o.stderr);
        assert!(o.stdout.contains("ccs-reap"), "{shell}: {}", o.stdout);
        for sub in SUBCOMMANDS {
            assert!(o.stdout.contains(sub), "{shell}: no {sub}\n{}", o.stdout);
        }
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.code, 2, "an unknown shell is a usage error: {}", o.stdout);

    // No hidden command is offered (`formats`, the benchmark's helper).
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert!(!o.stdout.contains("formats"), "{shell}: {}", o.stdout);
    }
}

/// Source the generated bash script, set COMP_WORDS/COMP_CWORD for `line` (the last word being
/// completed), call the function `complete -p` names, and return COMPREPLY.
fn bash_complete(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let check = Command::new("bash")
        .arg("--norc")
        .arg("--noprofile")
        .arg("-c")
        .arg(
            r#"script=$1; shift
               source "$script" || exit 10
               spec=$(complete -p ccs-reap) || exit 11
               fn=${spec#*-F }; fn=${fn%% *}
               COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
               COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
               prev=""; [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD-1]}
               "$fn" ccs-reap "${COMP_WORDS[COMP_CWORD]}" "$prev" || exit 12
               printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(script)
        .args(words)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{words:?}: exit {:?}: {}",
        check.status.code(),
        String::from_utf8_lossy(&check.stderr)
    );
    String::from_utf8_lossy(&check.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn bash_completion_completes_past_the_first_word() {
    let o = run(&["completions", "bash"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("ccs-reap.bash");
    std::fs::write(&script, &o.stdout).unwrap();

    // The first word: subcommands, no hidden one.
    let got = bash_complete(&script, &["ccs-reap", "sp"]);
    assert_eq!(got, ["spawn"]);
    let got = bash_complete(&script, &["ccs-reap", ""]);
    assert!(got.iter().any(|w| w == "status"), "{got:?}");
    assert!(!got.iter().any(|w| w == "formats"), "{got:?}");
    // A subcommand's subcommand.
    let got = bash_complete(&script, &["ccs-reap", "turn", ""]);
    assert!(got.iter().any(|w| w == "begin"), "{got:?}");
    assert!(got.iter().any(|w| w == "end"), "{got:?}");
    // A subcommand's flag.
    let got = bash_complete(&script, &["ccs-reap", "events", "--f"]);
    assert_eq!(got, ["--from-start"]);
    let got = bash_complete(&script, &["ccs-reap", "status", "--"]);
    assert!(got.iter().any(|w| w == "--json"), "{got:?}");
    // A shell name.
    let got = bash_complete(&script, &["ccs-reap", "completions", "z"]);
    assert_eq!(got, ["zsh"]);
    let got = bash_complete(&script, &["ccs-reap", "completions", "f"]);
    assert_eq!(got, ["fish"]);
}

/// The settings' one source ([`ccs_reap::config::VARS`]) against what the operator reads: the
/// tables of docs/configuration.md (each row's group and default), `--help` and the man page.
#[test]
fn settings_docs_help_and_man_page_agree() {
    use ccs_reap::config::VARS;
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let mut group = String::new();
    let mut rows = Vec::new();
    for line in doc.lines() {
        if let Some(g) = line.strip_prefix("## ") {
            group = g.trim().to_string();
        }
        if let Some(rest) = line.strip_prefix("| `CCS_") {
            let cols: Vec<&str> = rest.split(" | ").collect();
            let name = format!("CCS_{}", cols[0].trim_end_matches('`'));
            let default = cols[1].replace('`', "");
            rows.push((name, group.clone(), default));
        }
    }
    let want: Vec<(String, String, String)> = VARS
        .iter()
        .map(|v| (v.name.into(), v.group.into(), v.default.into()))
        .collect();
    assert_eq!(
        rows, want,
        "docs/configuration.md's tables and config::VARS disagree"
    );

    let help = run(&["--help"]);
    assert_eq!(help.code, 0, "{}", help.stderr);
    let man = run(&["man"]);
    assert_eq!(man.code, 0, "{}", man.stderr);
    for v in VARS {
        assert!(
            help.stdout
                .contains(&format!("  {} [default: {}]\n", v.name, v.default)),
            "--help lacks {} with its default:\n{}",
            v.name,
            help.stdout
        );
        assert!(
            help.stdout.contains(&format!("\n{}:\n", v.group)),
            "--help lacks the group {}",
            v.group
        );
        assert!(
            man.stdout.contains(&format!(".TP\n\\fB{}\\fR\n", v.name)),
            "the man page's ENVIRONMENT lacks {}",
            v.name
        );
        assert!(
            man.stdout
                .contains(&format!("Default: {}.", v.default.replace('-', "\\-"))),
            "the man page lacks {}'s default",
            v.name
        );
    }
    // .env.example, which the units' install copies, names every setting; the README's short
    // table names no variable that is not one.
    let root = env!("CARGO_MANIFEST_DIR");
    let example = std::fs::read_to_string(format!("{root}/.env.example")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    for v in VARS {
        assert!(example.contains(v.name), ".env.example lacks {}", v.name);
    }
    for row in readme.lines().filter(|l| l.starts_with("| `CCS_")) {
        for name in row.split('`').filter(|w| w.starts_with("CCS_")) {
            assert!(
                VARS.iter().any(|v| v.name == name),
                "README.md names {name}, which is no setting"
            );
        }
    }
    // `-h` is short, but says where they are.
    let h = run(&["-h"]);
    assert!(
        !h.stdout.contains("CCS_ENGINE_IDLE_KILL_MS"),
        "{}",
        h.stdout
    );
    assert!(h.stdout.contains("--help"), "{}", h.stdout);
}

#[test]
fn man_pages_cover_every_visible_command() {
    let o = run(&["man"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains(".TH ccs-reap 1"), "{}", o.stdout);
    assert!(o.stdout.contains(".SH SYNOPSIS"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains(&format!("ccs-reap {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        o.stdout
    );
    for sub in SUBCOMMANDS {
        assert!(
            o.stdout.contains(&format!("ccs\\-reap\\-{sub}(1)")),
            "no {sub}\n{}",
            o.stdout
        );
    }
    // The environment is where the configuration is: the page says so.
    assert!(o.stdout.contains("CCS_ENGINE_IDLE_KILL_MS"), "{}", o.stdout);
    for section in [".SH ENVIRONMENT", ".SH \"EXIT STATUS\"", ".SH FILES"] {
        assert!(o.stdout.contains(section), "no {section}\n{}", o.stdout);
    }
    for code in 0..=4 {
        assert!(
            o.stdout.contains(&format!(".TP\n\\fB{code}\\fR\n")),
            "no exit status {code}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let o = run(&["man", "--dir", &path_str(dir.path())]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in [
        "ccs-reap.1",
        "ccs-reap-status.1",
        "ccs-reap-turn.1",
        "ccs-reap-turn-begin.1",
        "ccs-reap-turn-end.1",
        "ccs-reap-spawn.1",
        "ccs-reap-reap.1",
        "ccs-reap-completions.1",
        "ccs-reap-man.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "no {want}: {pages:?}");
    }
    // Neither the hidden benchmark helper nor clap's help command gets a page.
    for p in &pages {
        assert!(
            p.starts_with("ccs-reap")
                && p.ends_with(".1")
                && !p.contains("formats")
                && !p.contains("help"),
            "{p}"
        );
    }
    // The installed main page is the one `man` prints, with its own sections.
    let main = std::fs::read_to_string(dir.path().join("ccs-reap.1")).unwrap();
    assert_eq!(main, run(&["man"]).stdout);
    let spawn = std::fs::read_to_string(dir.path().join("ccs-reap-spawn.1")).unwrap();
    assert!(spawn.contains(".TH ccs-reap-spawn 1"), "{spawn}");
    assert!(spawn.contains("\\-\\-cid"), "{spawn}");

    let o = run(&["man", "--dir", "/nonexistent/ccs-reap-man"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("/nonexistent/ccs-reap-man"),
        "{}",
        o.stderr
    );
}

/// The JSON log lines of a run, parsed (each line of stderr that is JSON, a `<N>` prefix cut).
fn json_logs(stderr: &str) -> Vec<(Option<u8>, serde_json::Value)> {
    stderr
        .lines()
        .filter_map(|l| {
            let (prio, rest) = match l.strip_prefix('<').and_then(|r| r.split_once('>')) {
                Some((n, rest)) => (n.parse().ok(), rest),
                None => (None, l),
            };
            serde_json::from_str(rest).ok().map(|v| (prio, v))
        })
        .collect()
}

#[test]
fn json_logs_carry_typed_values_and_journald_priorities() {
    let s = Server::new();
    let n = s.session("ccs-a", "sleep 600");
    s.idle_since(n, 5_000);
    let json = [
        ("CCS_LOG_FORMAT", "json"),
        ("CCS_LOG", "debug"),
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
    ];
    // -v: a command's INFO and DEBUG lines are only said when asked for.
    let o = s.sweep(&[0], &["--dry-run", "-v"], &json);
    let logs = json_logs(&o.stderr);
    let decided = logs
        .iter()
        .map(|(_, v)| v)
        .find(|v| v["fields"]["message"] == "decided")
        .unwrap_or_else(|| panic!("no decided line:\n{}", o.stderr));
    // A number, not "Some(5000)".
    let idle = decided["fields"]["idle_ms"].as_u64();
    assert!(
        idle.is_some_and(|ms| (5_000..600_000).contains(&ms)),
        "{decided}"
    );
    for (_, v) in &logs {
        let line = v.to_string();
        for debug in ["Some(", "\"None\"", "Path(\\\""] {
            assert!(
                !line.contains(debug),
                "a Debug string in a log line: {line}"
            );
        }
    }
    assert!(
        logs.iter().all(|(p, _)| p.is_none()),
        "a priority without the journal"
    );

    // Under journald (JOURNAL_STREAM names the file stderr is), each line starts with its
    // syslog priority: <4> for a warning, <7> debug.
    let journal_run = |env: &[(&str, &str)], matching: bool| -> String {
        let log = s.path("journal.log");
        let f = std::fs::File::create(&log).unwrap();
        let md = f.metadata().unwrap();
        let stream = if matching {
            format!("{}:{}", md.dev(), md.ino())
        } else {
            format!("{}:{}", md.dev(), md.ino() + 1)
        };
        let st = s
            .reap(env)
            .args(["--once", "--dry-run", "-v"])
            .env("JOURNAL_STREAM", &stream)
            .env("CCS_NOT_A_SETTING", "1")
            .stdout(Stdio::null())
            .stderr(f)
            .status()
            .unwrap();
        assert!(st.success(), "{st:?}");
        std::fs::read_to_string(&log).unwrap()
    };
    let err = journal_run(&json, true);
    let logs = json_logs(&err);
    assert!(!logs.is_empty(), "{err}");
    for (p, v) in &logs {
        let want = match v["level"].as_str() {
            Some("ERROR") => 3,
            Some("WARN") => 4,
            Some("INFO") => 6,
            _ => 7,
        };
        assert_eq!(*p, Some(want), "{v}");
    }
    assert!(logs.iter().any(|(p, _)| *p == Some(4)), "{err}");
    assert!(logs.iter().any(|(p, _)| *p == Some(7)), "{err}");
    // And in text.
    let text: Vec<(&str, &str)> = json
        .iter()
        .copied()
        .filter(|(k, _)| *k != "CCS_LOG_FORMAT")
        .collect();
    let err = journal_run(&text, true);
    let warn = err
        .lines()
        .find(|l| l.contains("CCS_NOT_A_SETTING"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(warn.starts_with("<4>"), "{warn}");
    // A JOURNAL_STREAM inherited by a process whose stderr is elsewhere: no prefix.
    let err = journal_run(&text, false);
    assert!(!err.is_empty() && !err.contains("<4>"), "{err}");
}

const LONG_ID: &str = "a-very-long-chat-identifier-from-the-studio-0001";
const LONG_CID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

/// Three chats: an idle one, a busy one with a long id and a long cid, a viewed one.
fn studio(s: &mut Server) -> (u32, u32) {
    let idle = s.chat("ccs-1", "conv-a", "");
    s.idle_since(idle, 5_000);
    let busy = s.chat(&format!("ccs-{LONG_ID}"), LONG_CID, "");
    s.set(busy, "@ccs_turn", &(now_ms() - 2_000).to_string());
    s.chat("ccs-3", "conv-c", "");
    s.attach_control("ccs-3");
    (idle, busy)
}

#[test]
fn status_fits_80_columns_and_wide_shows_everything() {
    let mut s = Server::new();
    studio(&mut s);
    let env = [("CCS_ENGINE_IDLE_KILL_MS", LIMIT)];
    let o = s.run(&["status"], &env);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines[0].starts_with("SESSION "), "{}", o.stdout);
    let table = &lines[..4];
    for l in table {
        assert!(
            l.chars().count() <= 80,
            "{} columns: {l}",
            l.chars().count()
        );
    }
    let long = table
        .iter()
        .find(|l| l.starts_with("ccs-a-very"))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(long.contains('…'), "{long}");
    assert!(
        !long.contains(LONG_ID) && !long.contains(LONG_CID),
        "{long}"
    );
    for want in ["ccs-1 ", "idle", "busy", "viewed", "ctl", "conv-a"] {
        assert!(o.stdout.contains(want), "no {want}:\n{}", o.stdout);
    }

    let o = s.run(&["status", "--wide"], &env);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let header = o.stdout.lines().next().unwrap_or("");
    for col in ["SESSION", "TMUX", "TURN", "CID", "RSS", "PSS", "WHY"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        o.stdout.contains(&format!("ccs-{LONG_ID}")) && o.stdout.contains(LONG_CID),
        "{}",
        o.stdout
    );
    assert!(!o.stdout.contains('…'), "{}", o.stdout);
    // The columns line up: every row's CID starts where the header's does.
    let at = header.find("CID").unwrap();
    let row = o.stdout.lines().find(|l| l.contains(LONG_CID)).unwrap();
    assert_eq!(row.find(LONG_CID), Some(at), "{header}\n{row}");
}

/// Every field of a document by the schema's rules: `_ms` a number (a duration: no Unix time),
/// `at` and `*_at` an RFC 3339 string, `tmux_id` a `$N` string; `null` for an unknown value.
fn check_schema(v: &serde_json::Value, path: &str, errors: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let here = format!("{path}.{k}");
                if x.is_null() {
                    continue;
                }
                if k.ends_with("_ms") {
                    match x.as_u64() {
                        Some(n) if n < 1_000_000_000_000 => {}
                        _ => errors.push(format!("{here} = {x}: not a duration in ms")),
                    }
                } else if k == "at" || k.ends_with("_at") {
                    let ok = x
                        .as_str()
                        .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok());
                    if !ok {
                        errors.push(format!("{here} = {x}: not RFC 3339"));
                    }
                } else if k == "tmux_id" {
                    let ok = x.as_str().is_some_and(|t| {
                        t.strip_prefix('$')
                            .is_some_and(|n| n.parse::<u32>().is_ok())
                    });
                    if !ok {
                        errors.push(format!("{here} = {x}: not a $N string"));
                    }
                }
                check_schema(x, &here, errors);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                check_schema(x, &format!("{path}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

fn schema_errors(v: &serde_json::Value) -> Vec<String> {
    let mut e = Vec::new();
    check_schema(v, "", &mut e);
    e
}

#[test]
fn status_json_and_the_audit_line_share_one_versioned_schema() {
    let mut s = Server::new();
    let (idle, busy) = studio(&mut s);
    let env = [("CCS_ENGINE_IDLE_KILL_MS", LIMIT)];
    let st = s.status(&env);
    assert_eq!(st["schema_version"], 2, "{st:#}");
    assert_eq!(schema_errors(&st), Vec::<String>::new(), "{st:#}");
    let by = by_name(&st);
    assert_eq!(by["ccs-1"]["tmux_id"], format!("${idle}"));
    assert!(by["ccs-1"]["reap_at"].is_string(), "{st:#}");
    let busy_row = &by[&format!("ccs-{LONG_ID}")];
    assert_eq!(busy_row["tmux_id"], format!("${busy}"));
    assert!(busy_row["turn_started_at"].is_string(), "{busy_row}");
    // And the check catches what it is there for.
    for bad in [
        serde_json::json!({"deadline_ms": 1_764_000_000_000_u64}),
        serde_json::json!({"tmux_id": 3}),
        serde_json::json!({"reap_at": 1_764_000_000_000_u64}),
        serde_json::json!({"x": [{"seen_at": "yesterday"}]}),
    ] {
        assert!(!schema_errors(&bad).is_empty(), "{bad}");
    }

    // The reap's line, printed and in the audit log: the same schema, the same tmux_id.
    let o = s.run(&["reap", "1", "--json"], &env);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let printed = o.json();
    let logged = s.audit();
    assert_eq!(logged.len(), 1, "{logged:?}");
    for line in [&printed, &logged[0]] {
        assert_eq!(line["schema_version"], 2, "{line}");
        assert_eq!(line["tmux_id"], by["ccs-1"]["tmux_id"], "{line}");
        assert_eq!(schema_errors(line), Vec::<String>::new(), "{line}");
    }
}
