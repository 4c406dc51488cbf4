//! Issue 45, the operator's path: `doctor` is red exactly when chats cannot be reaped (the
//! server's processes out of sight, a state dir that takes no file, a hook binary gone or of
//! another version, an activity file unreadable), and `status --json` does not claim what it
//! cannot see.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use crate::common::*;

/// Write an executable file through `sh` (another process): a write fd of this one could leak
/// into another test's fork, and an exec of the file then fails (ETXTBSY).
fn write_exec(path: &std::path::Path, text: &str) {
    use std::io::Write;
    let mut c = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    assert!(c.wait().unwrap().success());
}

/// A home whose Claude Code settings run `program` as the claude-hook against `s`'s state dir.
fn wired_home(s: &Server, program: &str) -> String {
    let home = s.path("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let cmd = format!(
        "CCS_REAP_STATE_DIR='{}' '{program}' claude-hook",
        path_str(&s.state_dir())
    );
    let settings = serde_json::json!({"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": cmd}]}]}});
    std::fs::write(home.join(".claude/settings.json"), settings.to_string()).unwrap();
    path_str(&home)
}

/// The checks of `doctor --json` that found a problem.
fn problems(j: &serde_json::Value) -> Vec<String> {
    j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "problem")
        .map(|c| c["check"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn doctor_is_red_when_the_state_dir_or_the_hook_binary_would_fail_a_reap() {
    let s = Server::new();
    s.chat("ccs-1", "c1", "");
    let home = wired_home(&s, BIN);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
        ("HOME", home.as_str()),
        ("CLAUDE_CONFIG_DIR", ""),
    ];
    let o = s.run(&["doctor"], &env);
    assert!(o.stdout.ends_with("healthy\n"), "{}", o.stdout);
    assert!(o.stdout.contains("ok      state"), "{}", o.stdout);
    assert!(o.stdout.contains("ok      hook-binary"), "{}", o.stdout);

    // A state dir of another user (a volume made by root, the reaper runs as the studio's uid):
    // every reap fails, and so does doctor.
    let other = s.path("other-state");
    std::fs::create_dir(&other).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
    let other_s = path_str(&other);
    let mut bad_state = env.to_vec();
    bad_state.push(("CCS_REAP_STATE_DIR", other_s.as_str()));
    let j = s
        .run_expect(FAILED, &["doctor", "--json"], &bad_state)
        .json();
    // The hook shares the other state dir no more: that is the `hook` check's; `state` is ours.
    assert!(problems(&j).contains(&"state".to_string()), "{j}");
    let msg = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "state")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("owned by uid 65534"), "{msg}");
    // Nothing was made in it.
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 0);

    // The hook's binary gone (an upgrade under pnpm moved it), then of another version.
    let gone = path_str(&s.path("gone/ccs-reap"));
    let home = wired_home(&s, &gone);
    let mut e = env.to_vec();
    e[1] = ("HOME", home.as_str());
    let j = s.run_expect(FAILED, &["doctor", "--json"], &e).json();
    assert_eq!(problems(&j), ["hook-binary"], "{j}");
    let old = s.path("old-ccs-reap");
    write_exec(&old, "#!/bin/sh\necho 'ccs-reap 0.0.1 (commit old)'\n");
    let home = wired_home(&s, &path_str(&old));
    e[1] = ("HOME", home.as_str());
    let o = s.run_expect(FAILED, &["doctor"], &e);
    assert!(
        o.stdout.contains("PROBLEM hook-binary") && o.stdout.contains("0.0.1"),
        "{}",
        o.stdout
    );
}

#[test]
fn doctor_and_status_say_when_the_servers_processes_are_out_of_sight() {
    if std::env::var("CCS_TEST_NO_NAMESPACES").is_ok_and(|v| v == "1") {
        eprintln!("CCS_TEST_NO_NAMESPACES=1: the namespace test is skipped on purpose");
        return;
    }
    let s = Server::new();
    s.chat("ccs-1", "c1", "");
    let home = wired_home(&s, BIN);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
        ("HOME", home.as_str()),
        ("CLAUDE_CONFIG_DIR", ""),
    ];
    // In the server's pid namespace: healthy, and status sees the processes.
    s.run(&["doctor"], &env);
    let j = s.status(&env);
    assert_eq!(j["server_processes_visible"], true, "{j}");
    // A sidecar without `pid: service:studio`: another pid namespace.
    let in_other_ns = |args: &[&str]| {
        let inner = s.reap(&env);
        let mut c = Command::new("unshare");
        c.args(["-p", "-f", "--mount-proc"])
            .arg(inner.get_program())
            .args(args);
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let o = Out::from(c.stdin(Stdio::null()).output().unwrap());
        no_panic(&o);
        o
    };
    let o = in_other_ns(&["doctor", "--json"]);
    assert_eq!(
        o.code, 1,
        "unshare -p must run here (root, util-linux); CCS_TEST_NO_NAMESPACES=1 skips: {}",
        o.stderr
    );
    let j = o.json();
    assert_eq!(problems(&j), ["sight"], "{j}");
    let o = in_other_ns(&["status", "--json"]);
    let j = o.json();
    assert_eq!(j["tmux_server_up"], true, "{j}");
    assert_eq!(j["server_processes_visible"], false, "{j}");
    assert!(
        j["server_processes_problem"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "{j}"
    );
    assert!(s.has("ccs-1"));
}

/// A chat whose turns nothing reports is kept (`unseen`): when every chat is so, none can be
/// reaped and doctor is red; beside one that can be, a note.
#[test]
fn doctor_is_red_when_every_chat_is_kept_unseen() {
    let s = Server::new();
    // A claude-like launcher that names its conversation and keeps no status file.
    let blind = s.path("claude");
    write_exec(&blind, "#!/bin/sh\nexec sleep 100000\n");
    let n = s.session(
        "ccs-blind",
        &format!(
            "exec {} --session-id 7f1c0b7e-3d55-4a8e-9f0e-2b1d8c6a4e01",
            blind.display()
        ),
    );
    // Past first sight (a sweep has started its idle clock).
    s.idle_since(n, 1000);
    let env = [("CCS_ENGINE_IDLE_KILL_MS", "1h"), ("CLAUDE_CONFIG_DIR", "")];
    let verdict = |j: &serde_json::Value| {
        j["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["check"] == "turns"))
            .map(|c| c["verdict"].as_str().unwrap_or("").to_string())
    };
    let j = s.run_expect(FAILED, &["doctor", "--json"], &env).json();
    assert_eq!(verdict(&j).as_deref(), Some("problem"), "{j}");
    assert_eq!(problems(&j), ["turns"], "{j}");
    // A chat whose turns are seen (the studio marks its cid and turns): the blind one is a note.
    let n = s.session("ccs-seen", "sleep 100000");
    s.set(n, "@ccs_cid", "9a0d2c1e-5b6f-4c7d-8e9f-0a1b2c3d4e5f");
    s.idle_since(n, 1000);
    let j = s.run_expect(DONE, &["doctor", "--json"], &env).json();
    assert_eq!(verdict(&j).as_deref(), Some("note"), "{j}");
}

/// The README's plain-tmux lines ("Without a studio"), as written.
fn readme_plain_tmux_lines() -> Vec<String> {
    let text =
        std::fs::read_to_string(format!("{}/README.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let from = text
        .find("**Without a studio**")
        .expect("README.md has no \"Without a studio\" part");
    let block = &text[from..];
    let start = block.find("```sh\n").unwrap() + "```sh\n".len();
    let end = start + block[start..].find("```").unwrap();
    block[start..end]
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A stand-in for `claude` as its hooks see it: it runs the `SessionStart` hook of
/// `$HOME/.claude/settings.json` as Claude Code does (the command through `sh -c`, the event as
/// JSON on stdin, in the pane's environment), its session id the one `--session-id` or `--resume` names, else new,
/// writes its arguments to `$HOME/claude.argv`, then waits for input.
const STAND_IN_CLAUDE: &str = r#"#!/bin/sh
echo "$*" >> "$HOME/claude.argv"
sid=$(cat /proc/sys/kernel/random/uuid)
src=startup
while [ $# -gt 0 ]; do
  case "$1" in --resume) sid="$2"; src=resume; shift 2 ;; --session-id) sid="$2"; shift 2 ;; *) shift ;; esac
done
cmd=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hooks"]["SessionStart"][0]["hooks"][0]["command"])' "$HOME/.claude/settings.json")
printf '{"session_id":"%s","hook_event_name":"SessionStart","source":"%s","cwd":"%s"}' "$sid" "$src" "$PWD" | sh -c "$cmd"
echo "stand-in claude, conversation $sid"
while IFS= read -r line; do echo "reply: $line"; done
"#;

#[test]
fn the_readmes_plain_tmux_lines_learn_reap_and_resume_a_chat_on_the_users_own_tmux() {
    let s = Server::new();
    let lines = readme_plain_tmux_lines();
    assert_eq!(
        lines,
        [
            "ccs-reap claude-settings --write ~/.claude/settings.json",
            "ccs-reap spawn work -- claude",
            "ccs-reap status",
            "ccs-reap resume work",
        ],
        "the README's plain-tmux lines changed: walk the new ones here"
    );
    let home = s.path("home");
    let bin = s.path("bin");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    write_exec(&bin.join("claude"), STAND_IN_CLAUDE);
    std::os::unix::fs::symlink(BIN, bin.join("ccs-reap")).unwrap();
    let state_home = s.path("xdg-state");
    // Each line runs in a window of the user's own tmux (the test's private server, which sets
    // TMUX there), with nothing of ccs-reap configured: as a user types it.
    let walk = s.path("walk.sh");
    std::fs::write(
        &walk,
        format!(
            "unset CCS_TMUX_SOCKET CCS_TMUX_SOCKET_PATH CCS_REAP_STATE_DIR CCS_SESSION_PREFIX CCS_CONFIG CCS_REAP_COMMIT\n\
             export HOME='{}' XDG_STATE_HOME='{}' XDG_CONFIG_HOME='{}' PATH='{}':\"$PATH\"\n\
             sh -c \"$2\" > \"$HOME/out.$1\" 2>&1 < /dev/null; echo $? > \"$HOME/rc.$1.tmp\"; mv \"$HOME/rc.$1.tmp\" \"$HOME/rc.$1\"\n",
            home.display(),
            state_home.display(),
            s.path("xdg-config").display(),
            bin.display()
        ),
    )
    .unwrap();
    s.session("me", "sleep 100000");
    // The user's tmux has the user's home (new sessions take the server's environment).
    for (k, v) in [("HOME", &home), ("XDG_STATE_HOME", &state_home)] {
        s.ok(&["set-environment", "-g", k, &path_str(v)]);
    }
    let run_line = |n: usize, line: &str| -> String {
        s.ok(&[
            "new-window",
            "-d",
            "-t",
            "=me:",
            &format!("sh '{}' {n} '{line}'", walk.display()),
        ]);
        let rc = home.join(format!("rc.{n}"));
        assert!(wait_until(20.0, || rc.exists()), "{line}: did not end");
        let out = std::fs::read_to_string(home.join(format!("out.{n}"))).unwrap_or_default();
        let code = std::fs::read_to_string(&rc).unwrap();
        assert_eq!(code.trim(), "0", "{line}: exit {code}: {out}");
        out
    };
    // From outside (the test), the same state dir and server.
    let state = path_str(&state_home.join("ccs-reap"));
    let home_s = path_str(&home);
    let outside = [
        ("HOME", home_s.as_str()),
        ("CCS_REAP_STATE_DIR", state.as_str()),
    ];
    let sid = |s: &Server| -> Option<u32> {
        let o = s.tmux(&["display-message", "-p", "-t", "=ccs-work:", "#{session_id}"]);
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .trim_start_matches('$')
            .parse()
            .ok()
    };

    // `config` says which server every command talks to, and why.
    let out = run_line(9, "ccs-reap config");
    let sock = std::fs::canonicalize(&s.sock).unwrap();
    assert!(
        out.contains(&format!("# tmux server: {} ($TMUX", sock.display())),
        "{out}"
    );
    run_line(0, &lines[0]);
    run_line(1, &lines[1]);
    // The chat is on the user's tmux, and its hook told this server its conversation id.
    let n = sid(&s).expect("spawn did not make ccs-work on the tmux it was run in");
    assert!(
        wait_until(10.0, || s.show(n, "@ccs_cid").is_some()),
        "the chat never got its conversation id: its hook reports to another server\n{}\n{}",
        s.ok(&["capture-pane", "-p", "-t", "=ccs-work:"]),
        std::fs::read_to_string(home.join(".claude/settings.json")).unwrap_or_default()
    );
    let cid = s.show(n, "@ccs_cid").unwrap();
    let out = run_line(2, &lines[2]);
    assert!(out.contains("ccs-work") && out.contains(&cid[..8]), "{out}");
    // Reaped (as an idle sweep would), then back with its conversation.
    s.run(&["reap", "work", "--force"], &outside);
    assert!(wait_until(10.0, || !s.has("ccs-work")));
    let out = run_line(3, &lines[3]);
    // Inside the user's tmux: switch to it, never a tmux nested in a pane.
    assert!(out.contains("switch-client -t =ccs-work"), "{out}");
    assert!(
        s.has("ccs-work"),
        "resume did not bring it back on the user's tmux: {out}"
    );
    let argv = || std::fs::read_to_string(home.join("claude.argv")).unwrap_or_default();
    assert!(
        wait_until(10.0, || argv().lines().count() >= 2),
        "{}",
        argv()
    );
    let argv = argv();
    assert!(
        // `--session-id` when it never had a turn (no transcript), as Claude Code wants it.
        argv.lines()
            .last()
            .is_some_and(|l| l.contains(&format!("--resume {cid}"))
                || l.contains(&format!("--session-id {cid}"))),
        "{argv}\ncid {cid}: {out}\n{}",
        s.ok(&["capture-pane", "-p", "-t", "=ccs-work:"])
    );
}

#[test]
fn user_name_runs_doctor_status_and_config_as_that_users_instance_sees_them() {
    let s = Server::new();
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: --user NAME of another user is refused, and that is all checked");
    }
    // The binary where `nobody` may run it (a checkout under /root is not).
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = s.path("ccs-reap");
    // Copied by cp: a write fd of this process could leak into another test's fork and make
    // the exec fail (ETXTBSY).
    assert!(Command::new("cp")
        .arg(BIN)
        .arg(&bin)
        .status()
        .unwrap()
        .success());
    let run = |want: &[i32], args: &[&str]| {
        let inner = s.reap(&[]);
        let mut c = Command::new(&bin);
        c.args(args).stdin(Stdio::null());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        Out::from(c.output().unwrap()).expect_exit(want, &format!("{args:?}"))
    };
    // `nobody`, as the unit ccs-reap@nobody would run: its home, its uid's tmux socket.
    let root = rustix::process::geteuid().is_root();
    let o = run(
        if root { DONE } else { CONFIG },
        &["config", "--user", "nobody"],
    );
    if root {
        assert!(
            o.stdout
                .contains("# tmux server: /tmp/tmux-65534/ccstudio (the default"),
            "{}",
            o.stdout
        );
        assert!(
            o.stdout
                .lines()
                .any(|l| l == "# state dir: /nonexistent/.local/state/ccs-reap"
                    || l == "# state dir: /var/lib/ccs-reap/nobody"),
            "{}",
            o.stdout
        );
        // Not this process's settings: the harness's CCS_REAP_STATE_DIR is not in the unit's.
        assert!(
            !o.stdout.contains(&path_str(&s.state_dir())),
            "{}",
            o.stdout
        );
        let o = run(FAILED, &["--user", "nobody", "doctor", "--json"]);
        let j = o.json();
        assert!(
            j["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["check"] == "server"
                    && c["message"].as_str().unwrap().contains("/tmp/tmux-65534/")),
            "{j}"
        );
    }
    // Refused with a hint: another command, --config beside it, a user that does not exist.
    let o = s.run_expect(CONFIG, &["--user", "nobody", "turn", "begin", "1"], &[]);
    assert!(
        o.stderr
            .contains("--user goes with doctor, status and config"),
        "{}",
        o.stderr
    );
    let f = path_str(&s.path("x.env"));
    let o = s.run_expect(CONFIG, &["doctor", "--user", "nobody", "--config", &f], &[]);
    assert!(o.stderr.contains("give one or the other"), "{}", o.stderr);
    let o = s.run_expect(CONFIG, &["status", "--user", "no-such-user-ccs"], &[]);
    assert!(o.stderr.contains("no such user"), "{}", o.stderr);
}

#[test]
fn what_an_operator_reads_fits_80_columns_and_says_each_thing_once() {
    let s = Server::new();
    // A chat without a cid (a note), an activity file missing (liveness unknown), reaping off:
    // the lines under the table run long unless wrapped.
    s.session("ccs-1", "sleep 100000");
    let missing = path_str(&s.path("no-such-activity-file-with-a-rather-long-name.json"));
    let o = s.run_expect(
        FAILED,
        &["status"],
        &[("CCS_ACTIVITY_FILES", missing.as_str())],
    );
    for l in o.stdout.lines() {
        assert!(
            l.chars().count() <= 80,
            "{} columns: {l}\n{}",
            l.chars().count(),
            o.stdout
        );
    }
    assert!(o.stdout.contains("reaping is disabled"), "{}", o.stdout);
    // The unreadable activity file: a warning on stderr, once, not again on stdout.
    assert_eq!(o.stderr.matches(&missing).count(), 1, "{}", o.stderr);
    assert!(!o.stdout.contains(&missing), "said twice:\n{}", o.stdout);

    // A reap that fails (a state dir of another user): its line on stdout, and nothing else
    // about that reap on stderr.
    let n = s.chat("ccs-2", "c2", "");
    s.idle_since(n, 3_600_000);
    let other = s.path("other-state");
    std::fs::create_dir(&other).unwrap();
    std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
    let other_s = path_str(&other);
    let o = s.once(FAILED, 1000, &[("CCS_REAP_STATE_DIR", other_s.as_str())]);
    assert_eq!(
        o.stdout
            .lines()
            .filter(|l| l.starts_with("failed ccs-2"))
            .count(),
        1,
        "{}",
        o.stdout
    );
    assert!(
        !o.stderr.contains("reap failed"),
        "said twice:\n{}",
        o.stderr
    );
    assert!(s.has("ccs-2"));
}

/// A pnpm install of ccs-reap `version` under `root`, as pnpm 10 lays it out: each package in
/// its versioned store directory, its dependencies linked beside it, the studio's direct
/// dependency linked at `node_modules/ccs-reap`. The native binary is a copy of ours.
fn pnpm_layout(root: &std::path::Path, version: &str) -> std::path::PathBuf {
    use std::os::unix::fs::symlink;
    let store = root.join("node_modules/.pnpm");
    let native_pkg = store.join(format!(
        "@ccs-reap+linux-x64-gnu@{version}/node_modules/@ccs-reap/linux-x64-gnu"
    ));
    std::fs::create_dir_all(native_pkg.join("bin")).unwrap();
    let native = native_pkg.join("bin/ccs-reap");
    assert!(Command::new("cp")
        .arg(BIN)
        .arg(&native)
        .status()
        .unwrap()
        .success());
    let main = store.join(format!("ccs-reap@{version}/node_modules"));
    std::fs::create_dir_all(main.join("ccs-reap")).unwrap();
    std::fs::create_dir_all(main.join("@ccs-reap")).unwrap();
    symlink(
        format!("../../../@ccs-reap+linux-x64-gnu@{version}/node_modules/@ccs-reap/linux-x64-gnu"),
        main.join("@ccs-reap/linux-x64-gnu"),
    )
    .unwrap();
    let top = root.join("node_modules/ccs-reap");
    let _ = std::fs::remove_file(&top);
    symlink(
        format!(".pnpm/ccs-reap@{version}/node_modules/ccs-reap"),
        &top,
    )
    .unwrap();
    native
}

#[test]
fn claude_settings_under_pnpm_writes_a_path_an_upgrade_keeps_and_doctor_reads_the_projects_settings(
) {
    let s = Server::new();
    let project = s.path("studio");
    let native = pnpm_layout(&project, "0.3.0");
    assert!(native.exists(), "{}", native.display());
    let home = s.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let home_s = path_str(&home);
    // As the npm README has it: the project's own settings, written from the project.
    let inner = s.reap(&[]);
    let mut c = Command::new(&native);
    c.args(["claude-settings", "--write", ".claude/settings.json"])
        .current_dir(&project)
        .stdin(Stdio::null());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.env("HOME", &home).env("CLAUDE_CONFIG_DIR", "");
    let o = Out::from(c.output().unwrap());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let settings = std::fs::read_to_string(project.join(".claude/settings.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&settings).unwrap();
    let cmd = v["hooks"]["SessionStart"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    let stable = format!(
        "{}/node_modules/ccs-reap/../@ccs-reap/linux-x64-gnu/bin/ccs-reap",
        project.display()
    );
    assert!(cmd.contains(&stable), "{cmd}");
    assert!(!cmd.contains("@0.3.0"), "a versioned path: {cmd}");

    // The upgrade: the new version's store directories, the link moved, the old ones gone.
    pnpm_layout(&project, "0.3.1");
    std::fs::remove_dir_all(project.join("node_modules/.pnpm/ccs-reap@0.3.0")).unwrap();
    std::fs::remove_dir_all(project.join("node_modules/.pnpm/@ccs-reap+linux-x64-gnu@0.3.0"))
        .unwrap();
    let o = Command::new(&stable).arg("--version").output().unwrap();
    assert!(
        o.status.success(),
        "the hook's binary is gone after the upgrade"
    );

    // doctor, run in the project, reads the project's settings (the user's has none) and runs
    // the hook's binary.
    s.chat("ccs-1", "c1", "");
    let run_doctor = || {
        let mut d = s.reap(&[("HOME", home_s.as_str()), ("CLAUDE_CONFIG_DIR", "")]);
        d.args(["doctor", "--json"]).current_dir(&project);
        Out::from(d.output().unwrap())
    };
    let o = run_doctor();
    let j = o.json();
    let check = |name: &str| -> Vec<(String, String)> {
        j["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == name)
            .map(|c| {
                (
                    c["verdict"].as_str().unwrap().to_string(),
                    c["message"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let hook = check("hook");
    assert!(
        hook.iter()
            .any(|(v, m)| v == "ok" && m.contains(".claude/settings.json")),
        "{j}"
    );
    assert!(
        check("hook-binary").iter().all(|(v, _)| v == "ok") && !check("hook-binary").is_empty(),
        "{j}"
    );
    // A local settings file whose hook's binary is gone: a problem.
    let gone = serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command",
        "command": "'/nonexistent/ccs-reap' claude-hook"}]}]}});
    std::fs::write(
        project.join(".claude/settings.local.json"),
        gone.to_string(),
    )
    .unwrap();
    let o = run_doctor();
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(o.stdout.contains("settings.local.json"), "{}", o.stdout);
}

#[test]
fn status_shows_the_agent_each_chat_runs() {
    let s = Server::new();
    // Programs named as the agents (a sleep each): the agent is told by the start command.
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for a in ["codex", "claude"] {
        std::os::unix::fs::symlink("/bin/sleep", bin.join(a)).unwrap();
    }
    s.session("ccs-1", &format!("{} 100000", bin.join("codex").display()));
    s.session("ccs-2", &format!("{} 100000", bin.join("claude").display()));
    let j = s.status(&[]);
    let by = by_name(&j);
    assert_eq!(by["ccs-1"]["agent"], "codex", "{j}");
    assert_eq!(by["ccs-2"]["agent"], "claude", "{j}");
    // Mixed: a column, within the 80.
    let o = s.run(&["status"], &[]);
    let head = o.stdout.lines().next().unwrap();
    assert!(head.contains("AGENT"), "{}", o.stdout);
    let row = |name: &str| {
        o.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or("")
            .to_string()
    };
    assert!(row("ccs-1").contains(" codex "), "{}", o.stdout);
    assert!(row("ccs-2").contains(" claude "), "{}", o.stdout);
    assert!(
        o.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        o.stdout
    );
    // One agent for all: said once, on the totals line.
    s.tmux(&["kill-session", "-t", "=ccs-1"]);
    let o = s.run(&["status"], &[]);
    assert!(
        !o.stdout.lines().next().unwrap().contains("AGENT"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("1 session(s) (claude)"), "{}", o.stdout);
}

/// Every `ccs-reap ...` line of the shell blocks (```sh, ```bash) of the README, docs/ and the npm
/// README, up to a pipe, a redirection or a comment, `sudo`/`npx` dropped: (file, line).
fn documented_lines() -> Vec<(String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![
        format!("{root}/README.md"),
        format!("{root}/npm/ccs-reap/README.md"),
    ];
    let mut docs: Vec<String> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| path_str(&p))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut in_shell = false;
        for l in text.lines() {
            let t = l.trim();
            if t.starts_with("```") {
                in_shell = !in_shell && (t == "```sh" || t == "```bash");
                continue;
            }
            if !in_shell {
                continue;
            }
            let mut t = t;
            for p in ["sudo ", "npx "] {
                t = t.strip_prefix(p).unwrap_or(t);
            }
            if !(t == "ccs-reap" || t.starts_with("ccs-reap ")) {
                continue;
            }
            let cut = [" #", " |", " >", " &&", " ;", ")"]
                .iter()
                .filter_map(|c| t.find(c))
                .min()
                .unwrap_or(t.len());
            out.push((f.clone(), t[..cut].trim().to_string()));
        }
    }
    out
}

/// Words as sh splits a plain command line (quotes, no expansion).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[test]
fn every_documented_command_line_is_one_ccs_reap_takes() {
    let lines = documented_lines();
    assert!(lines.len() >= 20, "{lines:?}");
    let mut bad = Vec::new();
    for (f, l) in &lines {
        // `--help` where the options end: clap checks every argument before it, runs nothing.
        let mut args: Vec<String> = words(l).into_iter().skip(1).collect();
        let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
        args.insert(at, "--help".into());
        let o = Command::new(BIN)
            .args(&args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if !o.status.success() {
            bad.push(format!(
                "{f}: {l}: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "documented lines ccs-reap refuses:\n{}",
        bad.join("\n")
    );
}

#[test]
fn each_commands_man_page_says_what_its_docs_say() {
    let s = Server::new();
    let dir = s.path("man");
    std::fs::create_dir(&dir).unwrap();
    s.run(&["man", "--dir", &path_str(&dir)], &[]);
    let page =
        |name: &str| std::fs::read_to_string(dir.join(format!("ccs-reap-{name}.1"))).unwrap();
    let details = |name: &str| {
        let p = page(name);
        p.split_once(".SH DETAILS\n")
            .unwrap_or_else(|| panic!("ccs-reap-{name}(1) has no DETAILS:\n{p}"))
            .1
            .to_string()
    };
    // The checks of doctor, each by name, as docs/commands.md lists them.
    let d = details("doctor");
    for check in [
        "settings",
        "reaping",
        "server",
        "sight",
        "state",
        "hook\\-binary",
        "activity",
    ] {
        assert!(d.contains(&format!("{check}:")), "{check}: {d}");
    }
    // The states of status; pin's exit 4; turn begin's own section.
    assert!(details("status").contains("no\\-cid"));
    assert!(details("unpin").contains("4"));
    assert!(details("turn-begin").contains("exit 4"));
    // The same words as the docs: one source.
    let docs = std::fs::read_to_string(format!("{}/docs/commands.md", env!("CARGO_MANIFEST_DIR")))
        .unwrap();
    assert!(docs.contains("exactly when chats cannot be reaped"));
    assert!(d.contains("exactly when chats cannot be reaped"), "{d}");
}
