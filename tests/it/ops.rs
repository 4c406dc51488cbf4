//! Issue 31's operator surface: degraded states (metric, /healthz, one log line each way),
//! `doctor`, output said once (stdout results, stderr warnings, JSON stderr), the messages that
//! say what is true, and the release (version, CHANGELOG, docs).

use crate::common::http::{free_port, get, samples};
use crate::common::*;
use std::process::Stdio;
use std::time::Duration;

/// The daemon on `s`, reaping after an hour, sweeping every 100 ms, serving metrics on a free
/// port and logging to `daemon.log`, with `extra` settings: (the daemon, its port, its log).
fn watched_daemon(s: &Server, extra: &[(&str, &str)]) -> (KillOnDrop, u16, std::path::PathBuf) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = s.path("daemon.log");
    let mut env = vec![
        ("CCS_ENGINE_IDLE_KILL_MS", "3600000"),
        ("CCS_REAP_INTERVAL_MS", "100"),
        ("CCS_METRICS_ADDR", addr.as_str()),
    ];
    env.extend_from_slice(extra);
    let d = KillOnDrop(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    (d, port, log)
}

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{rel}")).unwrap()
}

#[test]
fn a_missing_activity_file_is_degraded_said_once_each_way_with_a_metric_and_a_503() {
    let s = Server::new();
    s.chat("ccs-1", "c1", "");
    let act = s.path("activity.json");
    let act_s = path_str(&act);
    let (_d, port, log) = watched_daemon(&s, &[("CCS_ACTIVITY_FILES", act_s.as_str())]);
    let health = || get(port, "/healthz", Duration::from_secs(2));
    assert!(
        wait_until(10.0, || health().is_some_and(
            |r| r.status.contains("503") && r.body.contains("activity-file")
        )),
        "no 503 naming the activity file: {:?}\n{}",
        health().map(|r| (r.status, r.body)),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let m = samples(&get(port, "/metrics", Duration::from_secs(2)).unwrap().body);
    assert_eq!(
        m.get("ccs_reap_degraded{reason=\"activity-file\"}"),
        Some(&1.0),
        "{m:?}"
    );
    assert_eq!(
        m.get("ccs_reap_degraded{reason=\"no-cid\"}"),
        Some(&0.0),
        "{m:?}"
    );
    // Many sweeps later (100 ms each), still one line.
    let sweeps = |m: &std::collections::HashMap<String, f64>| {
        m.get("ccs_reap_sweeps_total").copied().unwrap_or(0.0)
    };
    let before = sweeps(&m);
    assert!(wait_until(10.0, || {
        let m = samples(
            &get(port, "/metrics", Duration::from_secs(2))
                .map(|r| r.body)
                .unwrap_or_default(),
        );
        sweeps(&m) >= before + 10.0
    }));
    let text = std::fs::read_to_string(&log).unwrap();
    let said = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(said("CCS_ACTIVITY_FILES) is unreadable"), 1, "{text}");
    // The sweep that kept everything is said when its error is new, not every sweep.
    let sweep_lines = text
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains(": sweep "))
        .count();
    assert!(sweep_lines <= 1, "{sweep_lines} sweep lines:\n{text}");
    // The file appears: healthy again, and said once.
    std::fs::write(&act, "{}").unwrap();
    assert!(
        wait_until(10.0, || health().is_some_and(|r| r.status.contains("200"))),
        "{:?}",
        health().map(|r| (r.status, r.body))
    );
    let m = samples(&get(port, "/metrics", Duration::from_secs(2)).unwrap().body);
    assert_eq!(
        m.get("ccs_reap_degraded{reason=\"activity-file\"}"),
        Some(&0.0)
    );
    assert!(wait_until(5.0, || std::fs::read_to_string(&log)
        .unwrap()
        .contains("no longer degraded (activity-file)")));
}

#[test]
fn doctor_says_why_chats_are_never_reaped_and_exits_1_on_a_problem() {
    let s = Server::new();
    let home = s.path("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let home_s = path_str(&home);
    let on = [
        ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
        ("HOME", home_s.as_str()),
        ("CLAUDE_CONFIG_DIR", ""),
    ];
    // No session under the prefix, two near-misses; the hook is not wired (a note while no
    // chat lacks its cid: nothing is kept for it yet).
    s.session("CCS-1", "sleep 100000");
    s.session("ccs_2", "sleep 100000");
    let o = s.run_expect(FAILED, &["doctor"], &on);
    assert!(
        o.stdout.contains("PROBLEM sessions") && o.stdout.contains("CCS-1, ccs_2"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("note    hook"), "{}", o.stdout);
    let j = s.run_expect(FAILED, &["doctor", "--json"], &on).json();
    assert_eq!(j["ok"], false);
    let problems: Vec<&str> = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "problem")
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(problems, ["sessions"], "{j}");
    // A chat without its cid and no hook: that chat is never reaped.
    s.session("ccs-0", "sleep 100000");
    let o = s.run_expect(FAILED, &["doctor"], &on);
    assert!(o.stdout.contains("PROBLEM hook"), "{}", o.stdout);
    s.tmux(&["kill-session", "-t", "=ccs-0"]);

    // A chat with its cid, the hook wired to our state dir: healthy, exit 0.
    s.chat("ccs-3", "c3", "");
    let bin = BIN;
    let cmd = format!(
        "CCS_REAP_STATE_DIR='{}' '{bin}' claude-hook",
        path_str(&s.state_dir())
    );
    let settings =
        serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": cmd}]}]}});
    std::fs::write(home.join(".claude/settings.json"), settings.to_string()).unwrap();
    let o = s.run(&["doctor"], &on);
    assert!(o.stdout.ends_with("healthy\n"), "{}", o.stdout);
    assert!(o.stdout.contains("ok      hook"), "{}", o.stdout);

    // Wired to another state dir: the hooks do not share ours.
    let other = cmd.replace(&path_str(&s.state_dir()), "/elsewhere");
    let settings = serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": other}]}]}});
    std::fs::write(home.join(".claude/settings.json"), settings.to_string()).unwrap();
    let o = s.run_expect(FAILED, &["doctor"], &on);
    assert!(
        o.stdout.contains("do not share a state dir"),
        "{}",
        o.stdout
    );

    // No server at the socket, an activity file missing, reaping off: each a problem.
    let act = path_str(&s.path("nope.json"));
    let gone = path_str(&s.path("no-such-socket"));
    let o = s.run_expect(
        FAILED,
        &["doctor", "--json"],
        &[
            ("HOME", home_s.as_str()),
            ("CCS_TMUX_SOCKET_PATH", gone.as_str()),
            ("CCS_ACTIVITY_FILES", act.as_str()),
        ],
    );
    let j = o.json();
    let problems: Vec<&str> = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "problem")
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    for want in ["reaping", "server", "activity"] {
        assert!(problems.contains(&want), "{want}: {j}");
    }
}

#[test]
fn commands_say_results_on_stdout_and_only_warnings_on_stderr() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 3_600_000);
    // CCS_LOG=debug (the fixture's): still no INFO or DEBUG line from a command without -v.
    let o = s.once(DONE, 1000, &[]);
    assert!(o.stdout.contains("reaped ccs-1"), "{}", o.stdout);
    assert!(
        !o.stderr.contains("ccs-1"),
        "the reap was said twice:\n{}",
        o.stderr
    );
    assert!(
        !o.stderr.contains(" INFO ") && !o.stderr.contains(" DEBUG "),
        "{}",
        o.stderr
    );
    let o = s.run(&["status"], &[]);
    assert!(
        !o.stderr.contains(" INFO ") && !o.stderr.contains(" DEBUG "),
        "{}",
        o.stderr
    );
    // -v brings them back.
    let o = s.run(&["status", "-v"], &[]);
    assert!(
        o.stderr.contains(" DEBUG ") || o.stderr.contains(" INFO "),
        "{}",
        o.stderr
    );
}

#[test]
fn under_json_logs_every_stderr_line_is_json() {
    let s = Server::new();
    let gone = path_str(&s.path("no-such-socket"));
    let env = [
        ("CCS_LOG_FORMAT", "json"),
        ("CCS_TMUX_SOCKET_PATH", gone.as_str()),
        ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
        ("CCS_BOGUS_SETTING", "1"),
    ];
    for args in [&["--once"][..], &["status"], &["--dry-run", "pin", "1"]] {
        let o = s.run_any(args, &env);
        assert!(!o.stderr.trim().is_empty(), "{args:?}: nothing said");
        for l in o.stderr.lines() {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {l}\n{}", o.stderr));
            assert!(v["level"].is_string(), "{l}");
        }
    }
    let o = s.run_any(&["--once"], &env);
    assert!(o.stderr.contains("no tmux server at"), "{}", o.stderr);
    // JSON asked for in the settings file only: a refused value there is said as JSON too.
    let f = s.path("json.env");
    std::fs::write(&f, "CCS_LOG_FORMAT=json\nCCS_REAP_INTERVAL_MS=soon\n").unwrap();
    let o = s.run_expect(CONFIG, &["status", "--config", &path_str(&f)], &[]);
    assert!(o.stderr.contains("CCS_REAP_INTERVAL_MS"), "{}", o.stderr);
    for l in o.stderr.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{}", o.stderr));
        assert!(v["level"].is_string(), "{l}");
    }
}

#[test]
fn once_warns_of_no_server_even_when_reaping_is_off() {
    let s = Server::new();
    let gone = path_str(&s.path("no-such-socket"));
    let o = s.sweep(DONE, &[], &[("CCS_TMUX_SOCKET_PATH", gone.as_str())]);
    assert!(o.stderr.contains("reaping is disabled"), "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("no tmux server at {gone}")),
        "{}",
        o.stderr
    );
    for name in [
        "CCS_ENGINE_MEM_PSI",
        "CCS_ENGINE_SESSION_MEM_MAX",
        "CCS_ENGINE_MAX_IDLE",
    ] {
        assert!(o.stderr.contains(name), "{name}: {}", o.stderr);
    }
}

#[test]
fn what_turns_reaping_on_is_named_whole_in_help_and_man() {
    let s = Server::new();
    let help = s.run(&["--help"], &[]).stdout;
    let man = s.run(&["man"], &[]).stdout.replace("\\-", "-");
    for name in [
        "CCS_ENGINE_IDLE_KILL_MS",
        "CCS_ENGINE_MEM_HIGH",
        "CCS_ENGINE_MEM_PSI",
        "CCS_ENGINE_SESSION_MEM_MAX",
        "CCS_ENGINE_MAX_IDLE",
    ] {
        for (what, text) in [("--help", &help), ("man", &man)] {
            let off = text
                .split("Reaping is off until")
                .nth(1)
                .unwrap_or_default();
            let sentence = off.split(". ").next().unwrap_or_default();
            assert!(
                sentence.contains(name),
                "{what}: {name} missing in: {sentence}"
            );
        }
    }
}

#[test]
fn dry_run_is_offered_only_where_it_means_something() {
    let s = Server::new();
    for cmd in [
        "pin",
        "unpin",
        "spawn",
        "room",
        "config",
        "events",
        "claude-settings",
        "hook-settings",
    ] {
        let h = s.run(&[cmd, "--help"], &[]).stdout;
        assert!(
            !h.contains("--dry-run"),
            "{cmd} --help offers --dry-run:\n{h}"
        );
    }
    for cmd in ["status", "reap", "claude-hook", "hook"] {
        let h = s.run(&[cmd, "--help"], &[]).stdout;
        assert!(
            h.contains("--dry-run"),
            "{cmd} --help lacks --dry-run:\n{h}"
        );
    }
    // After the subcommand: clap's refusal; before it: ours, naming the right commands.
    let o = s.run_expect(CONFIG, &["pin", "1", "--dry-run"], &[]);
    assert!(o.stderr.contains("--dry-run"), "{}", o.stderr);
    let o = s.run_expect(CONFIG, &["--dry-run", "turn", "begin", "1"], &[]);
    assert!(
        o.stderr.contains("status, reap, claude-hook and hook")
            && o.stderr.contains("turn, spawn, room, pin"),
        "{}",
        o.stderr
    );
    // The spellings that worked still do.
    s.run(&["--dry-run", "status"], &[]);
    s.run(&["status", "--dry-run"], &[]);
}

#[test]
fn reap_of_a_busy_chat_says_it_is_busy_and_one_process_is_singular() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.set(n, "@ccs_turn", &now_ms().to_string());
    let o = s.run_expect(FAILED, &["reap", "1"], &[("CCS_ENGINE_IDLE_KILL_MS", "1h")]);
    assert!(
        o.stderr
            .contains("refusing to reap ccs-1: it is busy (a turn is running)"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("changed"), "{}", o.stderr);
    let n2 = s.session("ccs-2", "sleep 100000");
    s.set(n2, "@ccs_cid", "c2");
    let o = s.run(&["reap", "2", "--force"], &[("CCS_REAP_GRACE_MS", "1000")]);
    assert!(o.stdout.contains(": 1 process,"), "{}", o.stdout);
}

#[test]
fn exit_3_names_the_lock_holder() {
    let s = Server::new();
    s.chat("ccs-1", "c1", "");
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
        ("CCS_REAP_INTERVAL_MS", "200"),
    ];
    let first = KillOnDrop(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = first.0.id();
    // Until the first holds its lock (it writes its pid into it), a second would take it.
    let holds = || {
        std::fs::read_dir(s.state_dir())
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name().to_string_lossy().starts_with("reaper-")
                    && std::fs::read_to_string(e.path()).is_ok_and(|t| t.trim() == pid.to_string())
            })
    };
    assert!(
        wait_until(10.0, holds),
        "the first daemon never took its lock"
    );
    let o = s.run_expect(&[3], &[], &env);
    assert!(o.stderr.contains(&format!("pid {pid}")), "{}", o.stderr);
}

#[test]
fn the_release_is_0_3_0_with_a_dated_changelog_section_and_working_readme_snippets() {
    let v = env!("CARGO_PKG_VERSION");
    assert_eq!(v, "0.3.0");
    let cl = read("CHANGELOG.md");
    let heads: Vec<&str> = cl.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(heads.first(), Some(&"## Unreleased"), "{heads:?}");
    let dated = heads.get(1).copied().unwrap_or_default();
    let date = dated
        .strip_prefix(&format!("## {v} - "))
        .unwrap_or_default();
    assert!(
        chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok(),
        "no dated section for {v}: {dated:?}"
    );
    // Every install snippet, image tag and package names this version, never an older one.
    let tagged = [
        ("README.md", format!("ccs-reap_{v}-1_amd64.deb")),
        ("README.md", format!("ccs-reap:{v}")),
        ("docs/docker.md", format!("ccs-reap:{v}")),
        ("contrib/docker/Dockerfile", format!("ccs-reap:{v}")),
        ("contrib/docker/studio.Dockerfile", format!("ccs-reap:{v}")),
    ];
    for (file, want) in &tagged {
        let text = read(file);
        assert!(text.contains(want.as_str()), "{file} does not name {want}");
        for pre in ["ccs-reap:", "ccs-reap_"] {
            for (i, _) in text.match_indices(pre) {
                let named: String = text[i + pre.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let named = named.trim_end_matches('.');
                assert!(
                    named.is_empty() || named == v,
                    "{file}: {pre}{named} names another version than {v}"
                );
            }
        }
    }
    let deb = read("contrib/debian/changelog");
    assert!(
        deb.starts_with(&format!("ccs-reap ({v}-1) ")),
        "contrib/debian/changelog's first entry is not {v}-1: {}",
        deb.lines().next().unwrap_or_default()
    );
    for pkg in [
        "ccs-reap",
        "linux-x64-gnu",
        "linux-x64-musl",
        "linux-arm64-gnu",
        "linux-arm64-musl",
    ] {
        let j: serde_json::Value = serde_json::from_str(&read(&format!("npm/{pkg}/package.json")))
            .unwrap_or_else(|e| panic!("npm/{pkg}/package.json: {e}"));
        assert_eq!(j["version"], v, "npm/{pkg}/package.json");
    }
    assert!(
        read("LICENSE").contains("MIT License"),
        "LICENSE is not the MIT license Cargo.toml names"
    );
    let readme = read("README.md");
    for (i, l) in readme.lines().enumerate() {
        if let Some(rest) = l.split("ccs-reap man --dir ").nth(1) {
            let dir = rest.split_whitespace().next().unwrap_or_default();
            let before: String = readme.lines().take(i).collect::<Vec<_>>().join("\n");
            assert!(
                before.contains(&format!("mkdir -p {dir}"))
                    || l.contains(&format!("mkdir -p {dir}")),
                "README line {}: `man --dir {dir}` without `mkdir -p {dir}` before it",
                i + 1
            );
        }
    }
}

#[test]
fn the_man_page_explains_itself_with_examples_and_points_to_installed_docs() {
    let s = Server::new();
    let man = s.run(&["man"], &[]).stdout;
    for section in [
        ".SH DESCRIPTION",
        ".SH STATES",
        ".SH EXAMPLES",
        ".SH \"SEE ALSO\"",
    ] {
        assert!(man.contains(section), "no {section}");
    }
    let name_line = man
        .split(".SH NAME")
        .nth(1)
        .and_then(|s| s.lines().nth(1))
        .unwrap_or_default()
        .to_string();
    let desc = man
        .split(".SH DESCRIPTION")
        .nth(1)
        .and_then(|s| s.split(".SH").next())
        .unwrap_or_default();
    let about = name_line.split(" \\- ").nth(1).unwrap_or_default();
    assert!(
        !about.is_empty() && !desc.contains(about),
        "DESCRIPTION repeats NAME: {about}"
    );
    assert!(
        !man.contains("docs/"),
        "the man page names docs/ files that are not installed"
    );
    assert!(man.replace("\\-", "-").contains("/usr/share/doc/ccs-reap"));
    for state in ["no\\-cid", "busy", "viewed", "pinned", "idle", "expired"] {
        assert!(man.contains(state), "state {state} not explained");
    }
}

#[test]
fn a_relative_socket_or_state_dir_is_refused_naming_it() {
    let s = Server::new();
    for var in ["CCS_TMUX_SOCKET_PATH", "CCS_REAP_STATE_DIR"] {
        let o = s.run_expect(CONFIG, &["status"], &[(var, "rel/x")]);
        assert!(
            o.stderr.contains(var) && o.stderr.contains("absolute"),
            "{var}: {}",
            o.stderr
        );
        assert!(!s.path("rel").exists() && !std::path::Path::new("rel").exists());
    }
}

#[test]
fn status_claims_no_write_it_does_not_make_for_a_chat_at_first_sight() {
    let s = Server::new();
    let n = s.session("ccs-1", "sleep 600");
    let env = [("CCS_ENGINE_IDLE_KILL_MS", "30m")];
    let st = s.status(&env);
    let row = &by_name(&st)["ccs-1"];
    let why = row["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("no idle clock yet") && !why.contains("started"),
        "{row}"
    );
    assert_eq!(s.show(n, "@ccs_idle"), None, "status wrote the idle stamp");
    let human = s.run(&["status"], &env).stdout;
    assert!(!human.contains("clock started"), "{human}");
}

#[test]
fn a_studio_whose_chats_never_get_a_cid_is_degraded_once_and_no_longer_when_one_does() {
    let s = Server::new();
    // Idle chats with no conversation id anywhere (no @ccs_cid, no claude command line).
    let a = s.session("ccs-1", "sleep 600");
    s.session("ccs-2", "sleep 600");
    let (_d, port, log) = watched_daemon(&s, &[]);
    let health = || get(port, "/healthz", Duration::from_secs(2));
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Ten sweeps in a row, 100 ms apart: degraded, said once, the 503 names it.
    assert!(
        wait_until(15.0, || health().is_some_and(
            |r| r.status.contains("503") && r.body.contains("no-cid")
        )),
        "no 503 naming no-cid: {:?}\n{}",
        health().map(|r| (r.status, r.body)),
        text()
    );
    let m = samples(&get(port, "/metrics", Duration::from_secs(2)).unwrap().body);
    assert_eq!(
        m.get("ccs_reap_degraded{reason=\"no-cid\"}"),
        Some(&1.0),
        "{m:?}"
    );
    // A chat gets its cid (the hook wired at last): healthy again after the clear sweeps, each
    // way said once.
    s.set(a, "@ccs_cid", "11111111-2222-3333-4444-555555555555");
    assert!(
        wait_until(15.0, || health().is_some_and(|r| r.status.contains("200"))),
        "{:?}\n{}",
        health().map(|r| (r.status, r.body)),
        text()
    );
    assert!(wait_until(5.0, || text().contains("no longer degraded (no-cid)")));
    let t = text();
    let said = |needle: &str| t.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(said("has had no conversation id for"), 1, "{t}");
    assert_eq!(said("no longer degraded (no-cid)"), 1, "{t}");
}

/// `status`'s text as one line (its notes are wrapped at spaces).
fn flat(out: &str) -> String {
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Issue 43.7/43.8: an unused Codex CLI chat has no conversation id by design (codex picks it at
/// its first prompt). It is `no-cid`, and kept, but it is no degraded reaper (`/healthz` 200, no
/// `no-cid` metric), and `status` and `doctor` name its own agent's fix, never `claude-settings`.
/// A Gemini CLI chat with no id is told its own fix too.
#[test]
fn an_unused_codex_chat_is_no_cid_by_design_not_degraded_and_each_chat_is_told_its_own_fix() {
    let s = Server::new();
    // A stand-in named `codex` (its pane's start command is what names the agent).
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let codex = bin.join("codex");
    std::fs::write(&codex, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&codex, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let codex_s = path_str(&codex);
    s.session(
        "ccs-cx1",
        &format!("{codex_s} --dangerously-bypass-hook-trust"),
    );
    s.session("ccs-cx2", &codex_s);
    let (_d, port, log) = watched_daemon(&s, &[]);
    let health = || get(port, "/healthz", Duration::from_secs(2));
    // Well past the ten sweeps (100 ms apart) that make an all-no-cid studio degraded.
    std::thread::sleep(Duration::from_millis(3000));
    let h = health().expect("healthz answers");
    assert!(
        h.status.contains("200"),
        "{} {}\n{}",
        h.status,
        h.body,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let m = samples(&get(port, "/metrics", Duration::from_secs(2)).unwrap().body);
    assert_eq!(
        m.get("ccs_reap_degraded{reason=\"no-cid\"}"),
        Some(&0.0),
        "{m:?}"
    );
    let env = [("CCS_ENGINE_IDLE_KILL_MS", "1h")];
    let st = s.status(&env);
    assert_eq!(by_name(&st)["ccs-cx1"]["state"], "no-cid", "{st}");
    let out = flat(&s.run(&["status"], &env).stdout);
    assert!(out.contains("no-cid by design (ccs-cx1, ccs-cx2)"), "{out}");
    assert!(out.contains("hook-settings --agent codex"), "{out}");
    assert!(!out.contains("claude-settings"), "{out}");
    let home = s.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let home_s = path_str(&home);
    let denv = [
        ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
        ("HOME", home_s.as_str()),
        ("CLAUDE_CONFIG_DIR", ""),
    ];
    let j = s.run(&["doctor", "--json"], &denv).json();
    let check = |name: &str| {
        j["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(check("cid")["verdict"], "note", "{j}");
    let said = check("cid")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        said.contains("no-cid by design") && said.contains("hook-settings --agent codex"),
        "{j}"
    );
    // Claude Code's hook not wired is no problem for codex chats.
    assert_ne!(check("hook")["verdict"], "problem", "{j}");

    // A Gemini CLI chat with no id (its hook not wired): told gemini's fix, and a problem.
    let gemini = bin.join("gemini");
    std::fs::copy(&codex, &gemini).unwrap();
    std::fs::set_permissions(&gemini, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    s.session("ccs-gm1", &path_str(&gemini));
    // Once a sweep has started its clock.
    assert!(wait_until(10.0, || by_name(&s.status(&env))["ccs-gm1"]
        ["state"]
        == "no-cid"));
    let out = flat(&s.run(&["status"], &env).stdout);
    assert!(
        out.contains("no-cid (ccs-gm1)")
            && out.contains("hook-settings --agent gemini --write ~/.gemini/settings.json"),
        "{out}"
    );
    assert!(!out.contains("claude-settings"), "{out}");
}
