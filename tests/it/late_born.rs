//! The fence checks the name, and nothing born late survives (issue 29, items 3 and 4), on a real
//! tmux: a session renamed during the `before` hook is never killed under its new name, nor one a
//! viewer attached to during it; helpers a chat starts after the victims were collected (during
//! the hook, or during the grace from a parent that ignores SIGTERM and forks setsid'd children
//! that ignore SIGTERM and SIGHUP) do not outlive the reap, and the audit line is `reaped` with
//! `survivors: []` only when none lives.

use std::os::unix::fs::PermissionsExt;

use crate::common::wrapper::shq;
use crate::common::*;

const HOUR: i64 = 3_600_000;

/// An executable script at `name` in the test's dir.
fn script(s: &Server, name: &str, body: &str) -> String {
    let p = s.path(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    path_str(&p)
}

/// A `before` hook that runs `body` (with `$T` the test's tmux command) once the decision on
/// stdin is read; the `after` call does nothing.
fn before_hook(s: &Server, body: &str) -> String {
    let t = format!("tmux -S {} -f /dev/null", s.sock.display());
    script(
        s,
        "hook",
        &format!("#!/bin/sh\ncat >/dev/null\n[ \"$1\" = before ] || exit 0\nT=\"{t}\"\n{body}\n"),
    )
}

fn line_pids(l: &serde_json::Value, key: &str) -> Vec<i32> {
    l[key]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|p| p.as_i64().unwrap() as i32)
        .collect()
}

#[test]
fn a_session_renamed_during_the_before_hook_is_never_killed_under_its_new_name() {
    // To a name not ours, and to another chat's name of ours.
    for new_name in ["other-1", "ccs-2"] {
        let s = Server::new();
        let n = s.chat("ccs-1", "c1", "plain");
        s.idle_since(n, HOUR);
        let pids = s.pid_list("ccs-1");
        let h = before_hook(&s, &format!("$T rename-session -t ccs-1 {new_name}"));
        let o = s.once(DONE_OR_FAILED, 300, &[("CCS_REAP_HOOK", h.as_str())]);
        no_panic(&o);
        assert!(
            s.has(new_name),
            "{new_name}: the renamed session went: {}",
            o.stderr
        );
        for (kind, pid) in &pids {
            assert!(
                alive(*pid),
                "{new_name}: the renamed chat's {kind} ({pid}) was signalled: {}",
                o.stderr
            );
        }
        let lines = s.audit_of("ccs-1");
        assert_eq!(lines.len(), 1, "{new_name}: {lines:?}");
        assert_eq!(lines[0]["outcome"], "aborted", "{new_name}: {}", lines[0]);
        assert!(
            lines[0]["error"]
                .as_str()
                .unwrap_or("")
                .contains("fenced off"),
            "{new_name}: {}",
            lines[0]
        );
        assert!(line_pids(&lines[0], "survivors").is_empty());
        assert!(
            s.tombstone("1").is_none(),
            "{new_name}: a tombstone was written"
        );
        // The mark is released: nothing holds the session.
        let n2: u32 = s
            .ok(&["display-message", "-p", "-t", new_name, "#{session_id}"])
            .trim()
            .trim_start_matches('$')
            .parse()
            .unwrap();
        assert_eq!(n2, n);
        assert_eq!(s.show(n, "@ccs_reaping"), None, "{new_name}: mark left");
    }
}

/// The fence's other check, after the name: a viewer (a control-mode client) that attaches during
/// the `before` hook, after the re-check passed, stops the reap before its first signal.
#[test]
fn a_viewer_that_attaches_during_the_before_hook_stops_the_reap_at_the_fence() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    let pids = s.pid_list("ccs-1");
    // The viewer is cut off from the hook's output, which the reaper reads to its end; the hook
    // writes down what it saw once the viewer is there.
    let seen = s.path("attached");
    let body = format!(
        r#"(sleep 30 | $T -C attach -t =ccs-1 &) </dev/null >/dev/null 2>&1
i=0
while [ "$($T display -p -t =ccs-1: '#{{session_attached}}')" = 0 ] && [ $i -lt 500 ]; do
  sleep 0.02; i=$((i+1))
done
$T display -p -t =ccs-1: '#{{session_attached}}' >{}"#,
        shq(&path_str(&seen))
    );
    let h = before_hook(&s, &body);
    let o = s.once(DONE_OR_FAILED, 300, &[("CCS_REAP_HOOK", h.as_str())]);
    no_panic(&o);
    let attached = std::fs::read_to_string(&seen).unwrap_or_default();
    assert!(
        !attached.trim().is_empty() && attached.trim() != "0",
        "the viewer never attached during the hook ({attached:?}): {}",
        o.stderr
    );
    for (kind, pid) in &pids {
        assert!(
            alive(*pid),
            "the watched chat's {kind} ({pid}) was signalled: {}",
            o.stderr
        );
    }
    let lines = s.audit_of("ccs-1");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "aborted", "{}", lines[0]);
    assert!(
        lines[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("fenced off"),
        "{}",
        lines[0]
    );
    assert!(s.tombstone("1").is_none(), "a tombstone was written");
    assert_eq!(s.show(n, "@ccs_reaping"), None, "mark left");
}

/// Wait for a pid file to name `want` processes; their pids.
fn wait_pids(s: &Server, file: &str, want: usize) -> Vec<i32> {
    let p = s.path(file);
    assert!(
        wait_until(10.0, || pids_in(&p).len() >= want),
        "{file}: {:?}",
        pid_file(&p)
    );
    pids_in(&p)
}

#[test]
fn helpers_started_during_the_hook_or_the_grace_never_survive_the_reap() {
    let s = Server::new();
    let late = path_str(&s.path("late.pids"));
    // A parent that ignores SIGTERM (and the SIGHUP of its pane's end): at the SIGTERM, inside
    // the grace, it forks three children
    // that setsid and ignore SIGTERM and SIGHUP (they carry the chat's TMUX marker and nothing
    // else: not in the pane's session, and their parent is SIGKILLed after the grace).
    let child = script(
        &s,
        "child.sh",
        "#!/bin/sh\ntrap '' TERM HUP\necho \"grace $$\" >>\"$1\"\nexec sleep 100000\n",
    );
    let breeder = script(
        &s,
        "breeder.sh",
        &format!(
            "#!/bin/sh\nspawn() {{ setsid {child} \"$1\" </dev/null >/dev/null 2>&1 & }}\n\
             trap '' HUP\ntrap 'spawn {late}; spawn {late}; spawn {late}' TERM\n\
             echo \"breeder $$\" >>{late}\nwhile :; do sleep 0.05; done\n"
        ),
    );
    let n = s.session(
        "ccs-1",
        &format!("{breeder} </dev/null & exec {} --resume c1", fake_claude()),
    );
    assert_eq!(wait_pids(&s, "late.pids", 1).len(), 1);
    s.idle_since(n, HOUR);
    // During the hook, after the victims' scan: a helper of the chat's (its TMUX marker, in no
    // pane: a window of its own would be the user's, and keep the chat shared) that ignores
    // SIGHUP and SIGTERM, and a setsid'd daemon it starts.
    let hooked = script(
        &s,
        "hooked.sh",
        &format!(
            "#!/bin/sh\ntrap '' TERM HUP\nsetsid {child} {late} </dev/null >/dev/null 2>&1 &\n\
             echo \"hook-window $$\" >>{late}\nexec sleep 100000\n"
        ),
    );
    let h = before_hook(
        &s,
        &format!(
            "m=$($T display-message -p -t =ccs-1: '#{{socket_path}},#{{pid}},#{{session_id}}' | tr -d '$')\n\
             TMUX=\"$m\" setsid {hooked} </dev/null >/dev/null 2>&1 &\n\
             i=0; while [ \"$(grep -c . {late})\" -lt 3 ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done"
        ),
    );
    let o = s.once(DONE_OR_FAILED, 1500, &[("CCS_REAP_HOOK", h.as_str())]);
    no_panic(&o);
    let born = pid_file(&s.path("late.pids"));
    // The breeder, the hook's window and its daemon, and the three born in the grace.
    assert!(
        born.iter().filter(|(k, _)| k == "grace").count() >= 4,
        "the grace's children were not born: {born:?}\n{}",
        o.stderr
    );
    let living: Vec<&(String, i32)> = born.iter().filter(|(_, p)| alive(*p)).collect();
    assert!(
        living.is_empty(),
        "born late and survived: {living:?} of {born:?}\n{}",
        o.stderr
    );
    assert!(!s.has("ccs-1"));
    let lines = s.audit_of("ccs-1");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["outcome"], "reaped", "{l}");
    assert!(line_pids(l, "survivors").is_empty(), "{l}");
    // Each one ended is named among the chat's processes.
    let pids = line_pids(l, "pids");
    for (kind, pid) in &born {
        assert!(pids.contains(pid), "{kind} {pid} not in {pids:?}: {l}");
    }
}
