//! The settings file, `ccs-reap config`, `CCS_LOG`'s level names, the allow-list of the studio's
//! own `CCS_*` names, and settings whose lease can never pass: through the real binary.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;

/// Write `text` as a settings file at `name` in the test's dir, mode 0600; its path.
fn settings(s: &Server, name: &str, text: &str) -> String {
    let p = s.path(name);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    path_str(&p)
}

/// `config --json`'s entry for `name`.
fn entry(j: &serde_json::Value, name: &str) -> serde_json::Value {
    j["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {j}"))
        .clone()
}

#[test]
fn the_settings_file_is_read_and_the_environment_wins_with_each_source_named() {
    let s = Server::new();
    let f = settings(
        &s,
        "my.env",
        "# the studio\nCCS_ENGINE_IDLE_KILL_MS=30m\n\nCCS_REAP_INTERVAL_MS='5s'\nCCS_ENGINE_MEM_HIGH=\"2G\"\n",
    );
    let j = s
        .run(
            &["--config", &f, "config", "--json"],
            &[("CCS_REAP_INTERVAL_MS", "7s")],
        )
        .json();
    assert_eq!(j["file"], f.as_str(), "{j}");
    let idle = entry(&j, "CCS_ENGINE_IDLE_KILL_MS");
    assert_eq!(idle["value"], "30m");
    assert_eq!(idle["source"], "file");
    assert_eq!(idle["line"], 2);
    let interval = entry(&j, "CCS_REAP_INTERVAL_MS");
    assert_eq!(interval["value"], "7s", "the environment wins: {interval}");
    assert_eq!(interval["source"], "environment");
    assert_eq!(entry(&j, "CCS_ENGINE_MEM_HIGH")["value"], "2G");
    assert_eq!(entry(&j, "CCS_AUDIT_KEEP")["source"], "default");
    assert!(
        j["rules"]
            .as_str()
            .unwrap()
            .contains("CCS_ENGINE_MEM_HIGH=2G"),
        "{j}"
    );

    // The text form: NAME=value lines, each under its source's comment line, defaults commented
    // out.
    let o = s.run(&["config", "--config", &f], &[]);
    assert!(
        o.stdout
            .contains(&format!("# {f}:2\nCCS_ENGINE_IDLE_KILL_MS=30m\n")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("\n# CCS_AUDIT_KEEP (default: 5)\n"),
        "{}",
        o.stdout
    );

    // The same file drives the sweep: status sees the idle limit the file sets (reaping enabled),
    // through CCS_CONFIG as through --config.
    s.session("ccs-1", "sleep 600");
    let st = s.status(&[("CCS_CONFIG", &f)]);
    assert_eq!(st["enabled"], true, "{st}");
    let st = s.status(&[]);
    assert_eq!(st["enabled"], false, "{st}");
}

#[test]
fn configs_output_is_a_settings_file_that_gives_the_same_values_back() {
    let s = Server::new();
    s.session("ccs-1", "sleep 600");
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", "30m"),
        ("CCS_REAP_ENV_ALLOW", "CCS_STUDIO_*,CCS_X"),
        ("CCS_REAP_GRACE_MS", " 3s"),
        ("CCS_AUDIT_KEEP", "7"),
    ];
    let first = s.run(&["config", "--json"], &env).json();
    let text = s.run(&["config"], &env).stdout;
    let f = settings(&s, "back.env", &text);
    // Read back with none of those in the environment: the same values, no warning, and every
    // command runs on it (before, `30m    # environment` was the value: exit 2).
    let o = s.run(&["config", "--json", "--config", &f], &[]);
    let back = o.json();
    for (name, _) in env {
        assert_eq!(
            entry(&back, name)["value"],
            entry(&first, name)["value"],
            "{name}: {text}"
        );
        assert_eq!(entry(&back, name)["source"], "file", "{name}");
    }
    assert_eq!(back["warnings"], serde_json::json!([]), "{back}");
    let st = s.status(&[("CCS_CONFIG", &f)]);
    assert_eq!(st["enabled"], true, "{st}");
}

#[test]
fn the_default_place_is_read_and_a_bad_value_there_is_named_with_file_and_line() {
    let s = Server::new();
    let f = settings(
        &s,
        "xdg-config/ccs-reap/env",
        "CCS_ENGINE_IDLE_KIL_MS=1\nCCS_REAP_INTERVAL_MS=30 sec\n",
    );
    let o = s.run_expect(CONFIG, &["config"], &[]);
    assert!(
        o.stderr
            .contains(&format!("{f}:2: invalid CCS_REAP_INTERVAL_MS=\"30 sec\"")),
        "{}",
        o.stderr
    );
    std::fs::write(&f, "CCS_ENGINE_IDLE_KIL_MS=1\n").unwrap();
    let o = s.run(&["config"], &[]);
    assert!(
        o.stderr.contains(&format!(
            "{f}:1: CCS_ENGINE_IDLE_KIL_MS is not a ccs-reap setting and is ignored: did you mean CCS_ENGINE_IDLE_KILL_MS?"
        )),
        "{}",
        o.stderr
    );
    // A line that is no assignment: exit 2 with its place, nothing read.
    std::fs::write(&f, "CCS_LOG=info\nexport CCS_ENGINE_IDLE_KILL_MS=1\n").unwrap();
    let o = s.run_expect(CONFIG, &["status"], &[]);
    assert!(o.stderr.contains(&format!("{f}:2")), "{}", o.stderr);
    // A file named explicitly must exist.
    let o = s.run_expect(CONFIG, &["config", "--config", "/nonexistent/env"], &[]);
    assert!(o.stderr.contains("/nonexistent/env"), "{}", o.stderr);
}

#[test]
fn a_hostile_settings_file_is_refused_with_exit_2_and_the_reason_never_read() {
    let s = Server::new();
    let fifo = s.path("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let zero = s.path("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let big = settings(&s, "big", &"#".repeat(2 << 20));
    let open = settings(&s, "open", "CCS_LOG=info\n");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let dir = s.path("adir");
    std::fs::create_dir(&dir).unwrap();
    let mut table: Vec<(String, &str)> = vec![
        (path_str(&fifo), "a FIFO"),
        (path_str(&zero), "a character device"),
        (big, "more than the 1048576"),
        (open, "writable by every user"),
        (path_str(&dir), "a directory"),
    ];
    // A team's group can write it: a group other than the caller's own (root's: gid 0). Only
    // root can give a file a group it is not in; CI runs as root.
    if rustix::process::geteuid().is_root() {
        let team = settings(&s, "team", "CCS_LOG=info\n");
        std::fs::set_permissions(&team, std::fs::Permissions::from_mode(0o660)).unwrap();
        std::os::unix::fs::chown(&team, Some(0), Some(4242)).unwrap();
        table.push((team, "writable by group 4242"));
    }
    for (file, why) in &table {
        for args in [&["status"][..], &["config", "--json"][..], &["--once"][..]] {
            let t = Instant::now();
            let mut c = s.reap(&[("CCS_CONFIG", file), ("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
            let mut child = c
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let done = wait_until(10.0, || child.try_wait().unwrap().is_some());
            if !done {
                let _ = child.kill();
            }
            let o: Out = child.wait_with_output().unwrap().into();
            assert!(done, "{args:?} with {file} did not end");
            assert_eq!(o.code, 2, "{args:?} {file}: {}", o.stderr);
            assert!(
                o.stderr
                    .contains(&format!("settings file {file}: refused: "))
                    && o.stderr.contains(why),
                "{args:?} {file}: {}",
                o.stderr
            );
            assert!(t.elapsed() < Duration::from_secs(10));
        }
    }
    // claude-hook reads the same file, and never fails claude: one line, exit 0.
    let o = s
        .reap(&[("CCS_CONFIG", &path_str(&zero))])
        .arg("claude-hook")
        .output()
        .unwrap();
    let o: Out = o.into();
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("a character device"), "{}", o.stderr);
}

#[test]
fn ccs_log_takes_journalctl_level_names_and_refuses_a_filter_with_no_level() {
    let s = Server::new();
    s.session("ccs-1", "sleep 600");
    // warning: the warning about an unknown setting is logged, the INFO lines are not.
    let o = s.run(
        &["status"],
        &[("CCS_LOG", "warning"), ("CCS_ENGINE_IDLE_KIL_MS", "1")],
    );
    assert!(o.stderr.contains(" WARN "), "{}", o.stderr);
    assert!(!o.stderr.contains(" INFO "), "{}", o.stderr);
    let o = s.run(
        &["status"],
        &[("CCS_LOG", "err"), ("CCS_ENGINE_IDLE_KIL_MS", "1")],
    );
    assert!(!o.stderr.contains(" WARN "), "{}", o.stderr);
    for bad in ["verbose", "warnings", "3"] {
        let o = s.run_expect(CONFIG, &["status"], &[("CCS_LOG", bad)]);
        assert!(
            o.stderr.contains(&format!("invalid CCS_LOG=\"{bad}\""))
                && o.stderr.contains("warning")
                && o.stderr.contains("notice"),
            "{bad}: {}",
            o.stderr
        );
    }
}

#[test]
fn the_studios_own_ccs_names_draw_no_warning() {
    let s = Server::new();
    let o = s.run(
        &["config"],
        &[
            ("CCS_CFG", "/etc/studio.json"),
            ("CCS_STUDIO_ROOM", "a"),
            ("CCS_PROJECT", "b"),
            ("CCS_REAP_ENV_ALLOW", "CCS_STUDIO_*, CCS_PROJECT"),
        ],
    );
    assert!(
        !o.stderr.contains("is not a ccs-reap setting"),
        "{}",
        o.stderr
    );
    let o = s.run(&["config"], &[("CCS_CFG", "x"), ("CCS_PROJECT", "b")]);
    assert!(
        o.stderr.contains("CCS_PROJECT is not a ccs-reap setting") && !o.stderr.contains("CCS_CFG"),
        "{}",
        o.stderr
    );
    let o = s.run_expect(CONFIG, &["config"], &[("CCS_REAP_ENV_ALLOW", "studio_x")]);
    assert!(o.stderr.contains("CCS_REAP_ENV_ALLOW"), "{}", o.stderr);
    // The npm package's own override, and the name a named agent's command carries into its
    // hooks: no warning on any command, the hooks included.
    let ours = [
        ("CCS_REAP_BINARY", "/opt/ccs-reap"),
        ("CCS_REAP_AGENT", "claude"),
    ];
    for args in [
        &["config"][..],
        &["status"][..],
        &["claude-hook"][..],
        &["hook", "--agent", "codex"][..],
    ] {
        let o = s.run_any(args, &ours);
        assert!(
            !o.stderr.contains("is not a ccs-reap setting"),
            "{args:?}: {}",
            o.stderr
        );
    }
}

#[test]
fn a_lease_that_can_never_pass_is_refused_with_the_arithmetic() {
    let s = Server::new();
    let o = s.run_expect(
        CONFIG,
        &["--once"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "0"),
            ("CCS_TMUX_TIMEOUT_MS", "300"),
        ],
    );
    assert!(
        o.stderr.contains("3×0 + 3×300 + 2000 = 2900 ms")
            && o.stderr.contains("0 + 2×300 + 2000 = 2600 ms")
            && o.stderr.contains("leaves 300 ms")
            && o.stderr.contains("mark too old"),
        "{}",
        o.stderr
    );
    // Just enough: 2×100 + 300 = 500 ms.
    s.run(
        &["config"],
        &[("CCS_REAP_GRACE_MS", "100"), ("CCS_TMUX_TIMEOUT_MS", "300")],
    );
}

#[test]
fn the_daemons_start_line_names_the_version_and_every_rule() {
    let s = Server::new();
    s.session("ccs-1", "sleep 600");
    let log = s.path("daemon.log");
    let _d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", "30m"),
            ("CCS_ENGINE_MEM_HIGH", "2G"),
            ("CCS_ENGINE_MAX_IDLE", "4"),
            ("CCS_ENGINE_WARN_MS", "2m"),
            ("CCS_LOG", "info"),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    let mut line = String::new();
    let seen = wait_until(10.0, || {
        line = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains("ccs-reap started"))
            .unwrap_or_default()
            .to_string();
        !line.is_empty()
    });
    assert!(
        seen,
        "no start line: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    for want in [
        format!("version={}", env!("CARGO_PKG_VERSION")),
        "idle CCS_ENGINE_IDLE_KILL_MS=30m".into(),
        "memory CCS_ENGINE_MEM_HIGH=2G".into(),
        "max-idle CCS_ENGINE_MAX_IDLE=4".into(),
        "warned CCS_ENGINE_WARN_MS=2m".into(),
        "floor CCS_ENGINE_MIN_IDLE_MS=60000".into(),
        "settings_file=none".into(),
    ] {
        assert!(line.contains(&want), "{want} not in {line}");
    }
}

#[test]
fn claude_settings_hands_the_settings_file_and_its_values_to_the_hook() {
    let s = Server::new();
    let f = settings(&s, "studio.env", "CCS_REAP_GRACE_MS=1s\n");
    let o = s.run(&["--config", &f, "claude-settings"], &[]);
    let canonical = path_str(&std::fs::canonicalize(&f).unwrap());
    assert!(
        o.stdout.contains(&format!("CCS_CONFIG='{canonical}'"))
            && o.stdout.contains("CCS_REAP_GRACE_MS='1s'"),
        "{}",
        o.stdout
    );
}

/// A user's instance of the system unit (`ccs-reap@USER`), as root: `/etc/ccs-reap/USER.env`
/// and `/var/lib/ccs-reap/USER`, removed on drop. The user name is this test's own.
struct Instance {
    file: std::path::PathBuf,
    dir: std::path::PathBuf,
    /// The parents this test made (`/etc/ccs-reap`, `/var/lib/ccs-reap`), removed after it when
    /// empty: a machine is left as it was (scripts/check-deb checks a purge leaves no /etc/ccs-reap).
    made: Vec<std::path::PathBuf>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
        for d in &self.made {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[test]
fn the_system_units_instance_file_and_state_dir_are_found_by_every_call_of_its_user() {
    const HOW: &str = "this test writes /etc/ccs-reap/<user>.env and /var/lib/ccs-reap/<user> \
                       for a user name of its own: run the suite as root (CI does), or skip it \
                       with --skip the_system_units_instance";
    assert!(rustix::process::geteuid().is_root(), "not root: {HOW}");
    let user = format!("ccs-test-{}", std::process::id());
    let made = ["/etc/ccs-reap", "/var/lib/ccs-reap"]
        .iter()
        .map(std::path::PathBuf::from)
        .filter(|d| !d.exists())
        .collect();
    let inst = Instance {
        file: format!("/etc/ccs-reap/{user}.env").into(),
        dir: format!("/var/lib/ccs-reap/{user}").into(),
        made,
    };
    std::fs::create_dir_all("/etc/ccs-reap").unwrap();
    std::fs::write(&inst.file, "CCS_ENGINE_IDLE_KILL_MS=7m\n").unwrap();
    std::fs::set_permissions(&inst.file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir_all(&inst.dir).unwrap();
    std::fs::set_permissions(&inst.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let s = Server::new();
    let xdg_state = s.path("xdg-state");
    let config = |env: &[(&str, &str)]| -> serde_json::Value {
        let o = s
            .reap(env)
            .env_remove("CCS_REAP_STATE_DIR")
            .env("USER", &user)
            .env("XDG_STATE_HOME", &xdg_state)
            .args(["config", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let j = config(&[]);
    assert_eq!(j["file"], path_str(&inst.file), "{j}");
    assert_eq!(entry(&j, "CCS_ENGINE_IDLE_KILL_MS")["value"], "7m", "{j}");
    assert_eq!(j["state_dir"], path_str(&inst.dir), "{j}");
    // A user file of the user's own comes first, whole: nothing of the instance file is read.
    settings(&s, "xdg-config/ccs-reap/env", "CCS_REAP_GRACE_MS=3s\n");
    let j = config(&[]);
    assert_eq!(
        entry(&j, "CCS_ENGINE_IDLE_KILL_MS")["value"],
        serde_json::Value::Null,
        "{j}"
    );
    assert_eq!(entry(&j, "CCS_REAP_GRACE_MS")["value"], "3s", "{j}");
    // A symlink in its place, even to a directory of ours, is not the instance's state dir.
    let elsewhere = s.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::remove_dir(&inst.dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &inst.dir).unwrap();
    let j = config(&[]);
    assert_eq!(j["state_dir"], path_str(&xdg_state.join("ccs-reap")), "{j}");
    std::fs::remove_file(&inst.dir).unwrap();
    std::fs::create_dir(&inst.dir).unwrap();
    // The instance dir of another owner is not this user's state dir.
    std::os::unix::fs::chown(&inst.dir, Some(65534), None).unwrap();
    let j = config(&[]);
    assert_eq!(j["state_dir"], path_str(&xdg_state.join("ccs-reap")), "{j}");
}
