//! `--user NAME` (with `doctor`, `status`, `config`): the command as the `ccs-reap@NAME` instance
//! sees the world, for a root operator diagnosing it. Its unit runs the daemon as NAME with only
//! what systemd gives a service (`HOME`, `USER`, `LOGNAME`, `SHELL`, a plain `PATH`; no
//! `EnvironmentFile=`), so it finds NAME's settings file (`~NAME/.config/ccs-reap/env`, else
//! `/etc/ccs-reap/NAME.env`, else `/etc/ccs-reap/env`), its state dir (`/var/lib/ccs-reap/NAME`)
//! and NAME's tmux socket (`/tmp/tmux-<uid>/ccstudio` by default) as NAME. This process becomes
//! the same command run so: as NAME (through `runuser` when root), in that environment.

use std::ffi::OsString;
use std::process::ExitCode;

use super::exit;

/// The environment systemd gives a service's `User=`: `PATH` as systemd sets it.
const UNIT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// NAME's passwd entry (through NSS, as systemd looks it up): (uid, home, shell).
fn passwd(name: &str) -> Result<(u32, String, String), String> {
    let out = std::process::Command::new("getent")
        .args(["passwd", name])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("--user {name}: failed to run getent passwd: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = line.trim_end().split(':').collect();
    match (out.status.success(), f.as_slice()) {
        (true, [n, _, uid, _, _, home, shell]) if *n == name => {
            let uid = uid
                .parse()
                .map_err(|_| format!("--user {name}: getent passwd gave the uid {uid:?}"))?;
            Ok((uid, home.to_string(), shell.to_string()))
        }
        _ => Err(format!(
            "--user {name}: no such user (getent passwd {name})"
        )),
    }
}

/// The arguments of this process without `--user NAME` / `--user=NAME`.
fn args_without_user() -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in std::env::args_os().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        match a.to_str() {
            Some("--user") => skip = true,
            Some(s) if s.starts_with("--user=") => {}
            _ => out.push(a),
        }
    }
    out
}

/// Run this command as the instance of `name` would see it; returns only on a refusal (exit 2)
/// or when the command could not be started (exit 1).
pub(super) fn exec_as(name: &str, has_config: bool) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let refuse = |m: String| {
        say!("ccs-reap: {m}");
        ExitCode::from(exit::CONFIG)
    };
    if has_config {
        return refuse(format!(
            "--user {name} reads the settings file the instance reads; --config would be another: give one or the other"
        ));
    }
    let (uid, home, shell) = match passwd(name) {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    let me = rustix::process::geteuid();
    if !me.is_root() && me.as_raw() != uid {
        return refuse(format!(
            "--user {name} runs the command as {name}: it needs root (sudo ccs-reap ... --user {name})"
        ));
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            say!("ccs-reap: --user {name}: failed to find this binary's path: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let mut cmd = if me.as_raw() == uid {
        std::process::Command::new("env")
    } else {
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", name, "--", "env"]);
        c
    };
    cmd.arg("-i")
        .arg(format!("HOME={home}"))
        .arg(format!("USER={name}"))
        .arg(format!("LOGNAME={name}"))
        .arg(format!("SHELL={shell}"))
        .arg(format!("PATH={UNIT_PATH}"))
        .arg(&exe)
        .args(args_without_user());
    let e = cmd.exec();
    say!("ccs-reap: --user {name}: failed to run the command as {name} (runuser, env): {e}");
    ExitCode::from(exit::FAILED)
}
