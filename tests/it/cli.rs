//! The command line's conventions: `--version`, shell completions and man pages generated from the
//! clap definition. None of them reads the configuration: they work with garbage in it.

use crate::common::*;

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
        assert_eq!(
            o.stdout,
            format!("ccs-reap {}\n", env!("CARGO_PKG_VERSION"))
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

    // bash loads the script and registers it, and it completes a subcommand.
    let o = run(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("ccs-reap.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    let check = Command::new("bash")
        .arg("--norc")
        .arg("-c")
        .arg(
            r#"source "$1" && complete -p ccs-reap &&
               COMP_WORDS=(ccs-reap sp) COMP_CWORD=1 COMP_LINE="ccs-reap sp" COMP_POINT=11 &&
               _ccs__reap ccs-reap sp ccs-reap && printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(&script)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(out.contains("-F _ccs__reap ccs-reap"), "{out}");
    assert!(out.lines().any(|l| l == "spawn"), "{out}");
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
