//! The way back (issue 30) with the real pinned Claude Code, offline, against the fake API, on a
//! private tmux server (the world of `claude_e2e`): a chat that never had a turn, reaped and
//! brought back (afresh under its id, no loop), then reaped again and brought back by `resume`
//! (a plain user without a terminal: it prints the attach command); a `--session-id` chat
//! respawned with its own command (resumed, not "already in use"); a stale tombstone whose
//! transcript is gone; a resume that fails (exit 1 with claude's own line, `resume-failed`, the
//! tombstone marked, the next spawn afresh). Each checks at the fake API that the history is in a
//! later request.
//!
//! Needs what `claude_e2e` needs (`npm ci --prefix tests/e2e`); built with the cargo feature `e2e`
//! only.

use crate::claude_e2e::*;
use crate::common::*;

use std::path::PathBuf;

/// One world's chat `ID`, run with Claude Code's own hooks (the settings `claude-settings`
/// prints), so its cid and turns come from claude itself.
struct Chat {
    w: World,
    settings: String,
}

impl Chat {
    fn new() -> Chat {
        let tools = tools_or_fail();
        let w = World::new(&tools);
        let printed = ok_with(&w.s, &w.env, &["claude-settings"], &[]).stdout;
        let settings = w.s.path("claude-settings.json");
        std::fs::write(&settings, printed).unwrap();
        Chat {
            w,
            settings: path_str(&settings),
        }
    }

    fn ccs(&self, args: &[&str]) -> Out {
        ccs_with(&self.w.s, &self.w.env, args, &[])
    }

    fn ok(&self, args: &[&str]) -> Out {
        ok_with(&self.w.s, &self.w.env, args, &[])
    }

    fn claude(&self) -> String {
        path_str(&self.w.claude)
    }

    fn start_command(&self) -> String {
        pane(&self.w.s, "#{pane_start_command}")
    }

    /// Type `msg`, wait for its echo and for the turn to end (claude's `Stop` hook).
    fn talk(&self, msg: &str) {
        let (s, api) = (&self.w.s, &self.w.api);
        wait_for(s, api, "claude ready (empty prompt)", || prompt_empty(s));
        s.ok(&["send-keys", "-t", TARGET, "-l", "--", msg]);
        wait_for(s, api, "the prompt in the input box", || prompt_has(s, msg));
        s.ok(&["send-keys", "-t", TARGET, "Enter"]);
        let echo = format!("ECHO: {msg}");
        wait_for(s, api, "the reply on screen", || screen(s).contains(&echo));
        let n = sid_of(s);
        wait_for(s, api, "the turn ended by claude's Stop hook", || {
            s.show(n, "@ccs_turn").is_none() && s.show(n, "@ccs_idle").is_some()
        });
    }

    /// The chat's cid, once its `SessionStart` hook set it.
    fn cid(&self) -> String {
        let s = &self.w.s;
        wait_for(s, &self.w.api, "the cid set by SessionStart", || {
            s.show(sid_of(s), "@ccs_cid").is_some()
        });
        s.show(sid_of(s), "@ccs_cid").unwrap()
    }

    /// Reap it now; its tombstone.
    fn reap(&self) -> serde_json::Value {
        reap_when_idle(&self.w.s, &self.w.env, ID);
        assert!(
            wait_until(10.0, || !self.w.s.has(SESSION)),
            "still there after the reap"
        );
        self.w.s.tombstone(ID).expect("a tombstone")
    }

    fn transcript(&self, cid: &str) -> PathBuf {
        self.w
            .home
            .join(".claude/projects")
            .join(&self.w.mangled)
            .join(format!("{cid}.jsonl"))
    }

    /// The last request that carried `msg` must also carry `before` (user text and its echo).
    fn history_has(&self, msg: &str, before: &str) {
        let reqs = requests_for(&self.w.api, msg);
        let r = reqs.last().expect("no API request for the message");
        let history = r["body"]["messages"].as_array().unwrap();
        let echo = format!("ECHO: {before}");
        assert!(
            history
                .iter()
                .any(|m| m["role"] == "user" && texts(m).contains(&before.to_string())),
            "the request for {msg:?} lacks {before:?}: {history:?}"
        );
        assert!(
            history
                .iter()
                .any(|m| m["role"] == "assistant" && texts(m).contains(&echo)),
            "the request for {msg:?} lacks {echo:?}: {history:?}"
        );
    }

    fn session_header(&self, msg: &str) -> String {
        let reqs = requests_for(&self.w.api, msg);
        reqs.last().expect("no API request")["headers"]["x-claude-code-session-id"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

fn words(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|w| w.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn proj(c: &Chat) -> String {
    path_str(&c.w.proj)
}

#[test]
fn an_untouched_chat_comes_back_afresh_then_resumes_by_resume_with_its_history() {
    let c = Chat::new();
    let _cleanup = Cleanup(&c.w.s);
    let (claude, settings) = (c.claude(), c.settings.clone());
    c.ok(&[
        "spawn",
        ID,
        "--cwd",
        &proj(&c),
        "--",
        &claude,
        "--settings",
        &settings,
    ]);
    let cid = c.cid();
    wait_for(&c.w.s, &c.w.api, "claude ready", || prompt_empty(&c.w.s));
    // Reaped before any turn: no transcript, and the tombstone keeps the command line.
    let t = c.reap();
    assert_eq!(t["cid"], cid.as_str(), "{t}");
    assert_eq!(
        words(&t["argv"]),
        [claude.as_str(), "--settings", &settings],
        "{t}"
    );
    assert!(!c.transcript(&cid).exists());
    // `spawn <id>` with no command replays it, afresh under the same id: up, not a loop.
    let o = c.ok(&["spawn", ID]);
    assert!(o.stderr.contains("afresh"), "{}", o.stderr);
    let start = c.start_command();
    assert!(start.contains(&format!("--session-id {cid}")), "{start}");
    assert!(!start.contains("--resume"), "{start}");
    let tag = &uuid()[..8];
    let msg1 = format!("remember PLUM-{tag}");
    c.talk(&msg1);
    assert_eq!(c.session_header(&msg1), cid);
    assert!(c.transcript(&cid).exists());
    assert!(
        c.w.s.tombstone(ID).is_none(),
        "the tombstone outlived a turn"
    );
    // Reaped again; a plain user's `resume` (no terminal) brings it back and prints the attach.
    c.reap();
    let o = c.ok(&["resume", ID]);
    let sock = path_str(&c.w.s.sock);
    assert!(
        o.stdout
            .contains(&format!("attach with: tmux -S {sock} attach -t =ccs-e2e"))
            || o.stdout.contains("attach -t =ccs-e2e"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("is back"), "{}", o.stdout);
    let start = c.start_command();
    assert!(start.contains(&format!("--resume {cid}")), "{start}");
    let msg2 = format!("which fruit {tag}");
    c.talk(&msg2);
    c.history_has(&msg2, &msg1);
    // Live: `resume --json` only says how to attach.
    let j = c.ok(&["resume", ID, "--json"]).json();
    assert_eq!(j["result"], "live", "{j}");
    assert_eq!(j["attached"], false, "{j}");
}

#[test]
fn a_session_id_chat_respawned_with_its_own_command_is_resumed() {
    let c = Chat::new();
    let _cleanup = Cleanup(&c.w.s);
    let (claude, settings) = (c.claude(), c.settings.clone());
    let u = uuid();
    let cmd = [
        "spawn",
        ID,
        "--cwd",
        &proj(&c),
        "--",
        &claude,
        "--session-id",
        &u,
        "--settings",
        &settings,
    ];
    c.ok(&cmd);
    let tag = &uuid()[..8];
    let msg1 = format!("remember KIWI-{tag}");
    c.talk(&msg1);
    c.reap();
    // The studio's same command again: `--session-id` of a used id would be "already in use".
    c.ok(&cmd);
    let start = c.start_command();
    assert!(start.contains(&format!("--resume {u}")), "{start}");
    assert!(!start.contains("--session-id"), "{start}");
    let msg2 = format!("which fruit {tag}");
    c.talk(&msg2);
    c.history_has(&msg2, &msg1);
}

#[test]
fn a_stale_tombstone_starts_afresh_and_a_failed_resume_is_told_and_never_loops() {
    let c = Chat::new();
    let _cleanup = Cleanup(&c.w.s);
    let (claude, settings) = (c.claude(), c.settings.clone());
    c.ok(&[
        "spawn",
        ID,
        "--cwd",
        &proj(&c),
        "--",
        &claude,
        "--settings",
        &settings,
    ]);
    let cid = c.cid();
    let tag = &uuid()[..8];
    let msg1 = format!("remember FIG-{tag}");
    c.talk(&msg1);
    c.reap();
    // Claude Code cleaned the transcript up: the way back starts afresh under the same id.
    let tr = c.transcript(&cid);
    std::fs::remove_file(&tr).unwrap();
    let o = c.ok(&["spawn", ID]);
    assert!(o.stderr.contains("no transcript"), "{}", o.stderr);
    assert!(c.start_command().contains(&format!("--session-id {cid}")));
    let msg2 = format!("remember PEAR-{tag}");
    c.talk(&msg2);
    assert_eq!(c.session_header(&msg2), cid);
    // A claude that runs under another HOME than the one ccs-reap looks in (a wrapper that
    // sets it): the transcript ccs-reap finds is not the one claude looks for, and claude's
    // resume fails ("No conversation found"). spawn waits for it, exits 1 with claude's own
    // line, writes `resume-failed`, marks the tombstone, kills the dead session.
    c.reap();
    let home2 = c.w.s.path("home2");
    std::fs::create_dir_all(&home2).unwrap();
    std::fs::copy(c.w.home.join(".claude.json"), home2.join(".claude.json")).unwrap();
    let wrapper = c.w.s.path("bin/home2-claude");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nHOME={} exec {} \"$@\"\n",
            path_str(&home2),
            claude
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let wrapper = path_str(&wrapper);
    let t0 = std::time::Instant::now();
    let o = c.ccs(&["spawn", ID, "--", &wrapper, "--settings", &settings]);
    eprintln!(
        "failed resume told after {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("No conversation found"), "{}", o.stderr);
    assert!(o.stderr.contains("marked"), "{}", o.stderr);
    assert!(!c.w.s.has(SESSION), "the dead session was left");
    let line = c.w.s.audit().pop().expect("an audit line");
    assert_eq!(line["outcome"], "resume-failed", "{line}");
    assert!(
        line["error"]
            .as_str()
            .unwrap_or("")
            .contains("No conversation found"),
        "{line}"
    );
    let t = c.w.s.tombstone(ID).expect("the tombstone stays");
    assert!(t["start_failed"].is_string(), "{t}");
    assert_eq!(
        words(&t["argv"]),
        [wrapper.as_str(), "--settings", &settings],
        "{t}"
    );
    // The next spawn does not try the same way again: afresh under the same id, and up.
    let o = c.ok(&["spawn", ID]);
    assert!(o.stderr.contains("afresh"), "{}", o.stderr);
    assert!(c.start_command().contains(&format!("--session-id {cid}")));
    let msg3 = format!("remember LIME-{tag}");
    c.talk(&msg3);
    c.reap();
    c.ok(&["spawn", ID]);
    assert!(c.start_command().contains(&format!("--resume {cid}")));
    let msg4 = format!("which fruit {tag}");
    c.talk(&msg4);
    c.history_has(&msg4, &msg3);
}
