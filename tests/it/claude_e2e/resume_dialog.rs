//! The "resume from summary" dialog (issue 30, item 9), brought up offline with the real claude:
//! a conversation with a summary precomputed in the background (Claude Code's flag cache in
//! `.claude.json` with `CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1`, `precomputeArmTokens`
//! in the `--settings` file, a few turns: `<cid>/precompact.json` beside the transcript), older
//! than 70 minutes (the transcript's timestamps moved 3 h back) and over a token threshold of 1.
//!
//! 1. A claude that resumes it on its own (a studio's, in a `ccs-` session, not through
//!    `spawn`) shows the dialog: the world brings it up. The studio's turn (`turn begin`, then its
//!    message and Enter) picks "Resume from summary", which runs a manual compaction: its
//!    `PostCompact` must not close the studio's turn (a sweep still says busy).
//! 2. The same conversation (files restored) reaped by ccs-reap and brought back by `spawn`: no
//!    dialog, and the message typed as soon as the box is ready reaches the API with the whole
//!    history (`CLAUDE_CODE_RESUME_THRESHOLD_MINUTES` set for that claude only).

use super::*;

const DIALOG: &str = "Resume from summary";

fn screen_of(s: &Server, target: &str) -> String {
    let o = s.tmux(&["capture-pane", "-p", "-J", "-S", "-300", "-t", target]);
    String::from_utf8_lossy(&o.stdout).replace('\u{a0}', " ")
}

/// Every `timestamp` of the transcript moved `hours` back (RFC 3339, as claude writes them).
fn age_transcript(path: &Path, hours: i64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut j: serde_json::Value = serde_json::from_str(l).unwrap();
        if let Some(t) = j["timestamp"].as_str() {
            let t =
                chrono::DateTime::parse_from_rfc3339(t).unwrap() - chrono::Duration::hours(hours);
            j["timestamp"] = t
                .with_timezone(&chrono::Utc)
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string()
                .into();
        }
        out.push_str(&j.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// Whether any user message of a request's body has `needle` in its text.
fn history_has(body: &serde_json::Value, needle: &str) -> bool {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .any(|m| texts(m).iter().any(|t| t.contains(needle)))
}

#[test]
fn the_resume_dialog_never_eats_a_resumed_chats_message_nor_closes_a_studios_turn() {
    let tools = tools_or_fail();
    let World {
        s,
        api,
        home,
        proj,
        claude,
        mangled,
        env,
        ..
    } = World::new(&tools);
    let _cleanup = Cleanup(&s);
    let ok = |args: &[&str]| ok_with(&s, &env, args, &[]);

    // The world: the remote flags that allow a background summary, its reuse, and the dialog,
    // read from the disk cache with telemetry off; a token threshold of 1.
    let cj = home.join(".claude.json");
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cj).unwrap()).unwrap();
    let flags = serde_json::json!({
        "tengu_gleaming_fair_reuse": true,
        "tengu_sepia_moth": true,
        "tengu_amber_packet": true,
    });
    let now = chrono::Utc::now().timestamp_millis();
    for k in ["cachedGrowthBookFeatures", "cachedFeatureFlags"] {
        j[k] = flags.clone();
        j[format!("{k}At")] = now.into();
    }
    std::fs::write(&cj, j.to_string()).unwrap();
    for (k, v) in [
        ("CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF", "1"),
        ("CLAUDE_CODE_RESUME_TOKEN_THRESHOLD", "1"),
    ] {
        s.ok(&["set-environment", "-g", k, v]);
    }
    // The hooks, with `precomputeArmTokens` (read from the `--settings` file only), and a line
    // in a log once ccs-reap's PostCompact hook has run.
    let hook_log = s.path("post-compact.log");
    let mut settings: serde_json::Value =
        serde_json::from_str(&ok(&["claude-settings"]).stdout).unwrap();
    settings["precomputeArmTokens"] = 1.into();
    let post = &mut settings["hooks"]["PostCompact"][0]["hooks"][0]["command"];
    *post = format!(
        "{}; echo done >> '{}'",
        post.as_str().expect("claude-settings' PostCompact hook"),
        path_str(&hook_log)
    )
    .into();
    let settings_path = s.path("claude-settings.json");
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let (claude_s, settings_s) = (path_str(&claude), path_str(&settings_path));

    // A chat with a few turns, until claude has persisted a precomputed summary.
    ok(&[
        "spawn",
        ID,
        "--cwd",
        &path_str(&proj),
        "--",
        &claude_s,
        "--settings",
        &settings_s,
    ]);
    let n = sid_of(&s);
    wait_for(&s, &api, "claude ready (empty prompt)", || prompt_empty(&s));
    wait_for(&s, &api, "the cid from SessionStart", || {
        s.show(n, "@ccs_cid").is_some()
    });
    let cid = s.show(n, "@ccs_cid").unwrap();
    let dir = home.join(".claude/projects").join(&mangled);
    let transcript = dir.join(format!("{cid}.jsonl"));
    let precompact = dir.join(&cid).join("precompact.json");
    let tag = &uuid()[..8];
    for k in 1..=8 {
        if precompact.exists() {
            break;
        }
        let msg = format!("old message {k} {tag}");
        s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg]);
        wait_for(&s, &api, "the text typed", || prompt_has(&s, &msg));
        s.ok(&["send-keys", "-t", TARGET, "Enter"]);
        wait_for(&s, &api, "the reply on screen", || {
            screen(&s).contains(&format!("ECHO: {msg}"))
        });
        wait_for(&s, &api, "the turn ended by Stop", || {
            s.show(n, "@ccs_turn").is_none()
        });
    }
    wait_for(&s, &api, "a precomputed summary persisted", || {
        precompact.exists()
    });

    // Reaped by ccs-reap (its tombstone keeps the command line), and left 3 h.
    reap_when_idle(&s, &env, ID);
    assert!(!s.has(SESSION), "{:?}", s.names());
    age_transcript(&transcript, 3);
    let saved = (
        std::fs::read(&transcript).unwrap(),
        std::fs::read(&precompact).unwrap(),
    );

    // 1. A studio's own `claude --resume` of it, in a chat session: the dialog.
    let posts = || {
        std::fs::read_to_string(&hook_log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let posts_before = posts();
    let dlg = "=ccs-dlg:";
    s.ok(&[
        "new-session",
        "-d",
        "-s",
        "ccs-dlg",
        "-c",
        &path_str(&proj),
        &claude_s,
        "--settings",
        &settings_s,
        "--resume",
        &cid,
    ]);
    wait_for(&s, &api, "the dialog on a plain resume", || {
        screen_of(&s, dlg).contains(DIALOG)
    });
    // The studio's turn: begin, its message, Enter (which picks "Resume from summary").
    ok(&["turn", "begin", "dlg"]);
    let n_dlg: u32 = s
        .ok(&["display-message", "-p", "-t", dlg, "#{session_id}"])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap();
    let turn = s.show(n_dlg, "@ccs_turn").expect("the studio's turn begun");
    let lost = "where were we";
    s.ok(&["send-keys", "-t", dlg, "-l", "--", lost]);
    // Its Enter, again every 2 s while the dialog stays: text and Enter in one burst can be
    // taken as a paste, the Enter swallowed (NOTES.md, "Submit"). Once the dialog is gone an
    // Enter is not sent again.
    let mut last_enter: Option<Instant> = None;
    wait_for(&s, &api, "the dialog answered (Enter)", || {
        if !screen_of(&s, dlg).contains(DIALOG) {
            return true;
        }
        if last_enter.is_none_or(|t| t.elapsed() >= Duration::from_secs(2)) {
            s.ok(&["send-keys", "-t", dlg, "Enter"]);
            last_enter = Some(Instant::now());
        }
        false
    });
    wait_for(&s, &api, "ccs-reap's PostCompact hook run", || {
        posts() > posts_before
    });
    assert_eq!(
        s.show(n_dlg, "@ccs_turn").as_deref(),
        Some(turn.as_str()),
        "the compaction closed the studio's turn"
    );
    assert_eq!(s.show(n_dlg, "@ccs_compact"), None);
    let rep = ok(&["--once", "--json"]).json();
    assert_eq!(by_name(&rep)["ccs-dlg"]["state"], "busy", "{rep}");
    // (The message went to the dialog, never to the API.)
    assert!(requests_for(&api, lost).is_empty());
    ok(&["turn", "end", "dlg"]);
    let dlg_pid: i32 = s
        .ok(&["list-panes", "-t", dlg, "-F", "#{pane_pid}"])
        .trim()
        .parse()
        .unwrap();
    s.ok(&["kill-session", "-t", "=ccs-dlg"]);
    wait_for(&s, &api, "the studio's claude gone", || !alive(dlg_pid));

    // 2. The same conversation brought back by ccs-reap: no dialog, the first message arrives.
    std::fs::write(&transcript, &saved.0).unwrap();
    std::fs::write(&precompact, &saved.1).unwrap();
    ok(&["spawn", ID]);
    let start = pane(&s, "#{pane_start_command}");
    assert!(
        start.contains("CLAUDE_CODE_RESUME_THRESHOLD_MINUTES=") && start.contains(&cid),
        "{start}"
    );
    let mut seen_dialog = false;
    wait_for(&s, &api, "the resumed claude ready (empty prompt)", || {
        let scr = screen(&s);
        seen_dialog |= scr.contains(DIALOG);
        seen_dialog || scr.lines().any(|l| l == "\u{276f}")
    });
    assert!(!seen_dialog, "the dialog came up on ccs-reap's resume");
    let msg = format!("new message {tag}");
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg]);
    wait_for(&s, &api, "the text typed", || {
        seen_dialog |= screen(&s).contains(DIALOG);
        seen_dialog || prompt_has(&s, &msg)
    });
    assert!(!seen_dialog, "the dialog came up on ccs-reap's resume");
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the reply on screen", || {
        let scr = screen(&s);
        seen_dialog |= scr.contains(DIALOG);
        seen_dialog || scr.contains(&format!("ECHO: {msg}"))
    });
    assert!(!seen_dialog, "the dialog came up on ccs-reap's resume");
    let reqs = requests_for(&api, &msg);
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert!(
        history_has(&reqs[0]["body"], &format!("old message 1 {tag}")),
        "the whole history is not in the request: {}",
        reqs[0]["body"]["messages"]
    );
}
