//! An interrupted turn ends (issue 30, item 8): Escape while the fake API holds the reply fires
//! no hook, so `@ccs_turn` stays set; once the turn is older than the floor
//! (`ccs_reap::engine::agent_status::TURN_FLOOR_MS`), a sweep reads claude's own status file
//! (`idle`), ends the turn and starts the idle clock, and a later sweep reaps the chat.

use super::*;

#[test]
#[ignore = "flaky since the merges of 2026-12-01 (3 of 5 runs: the sweep before the 10 s floor saw the chat idle, or status did not name the idle status file within 60 s); run it with --ignored; open in issue 30"]
fn a_turn_interrupted_by_escape_later_lets_the_chat_be_reaped() {
    use ccs_reap::engine::agent_status::TURN_FLOOR_MS;
    let Some(tools) = tools_or_skip() else {
        return;
    };
    let World {
        s,
        api,
        proj,
        claude,
        env,
        hold,
        ..
    } = World::new(&tools);
    let _cleanup = Cleanup(&s);
    let limit = [
        ("CCS_ENGINE_IDLE_KILL_MS", "3s"),
        ("CCS_REAP_GRACE_MS", "5s"),
    ];
    let ok = |args: &[&str]| ok_with(&s, &env, args, &limit);
    let settings = s.path("claude-settings.json");
    std::fs::write(&settings, ok(&["claude-settings"]).stdout).unwrap();
    let (claude_s, settings_s) = (path_str(&claude), path_str(&settings));

    // 1. A plain claude with its hooks; its cid from SessionStart.
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

    // 2. A prompt whose reply is held: the hook marks the turn.
    std::fs::write(&hold, "").unwrap();
    let msg = format!("held {}", &uuid()[..8]);
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg]);
    wait_for(&s, &api, "the text typed", || prompt_has(&s, &msg));
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the held request at the fake API", || {
        !requests_for(&api, &msg).is_empty()
    });
    let turn = s
        .show(n, "@ccs_turn")
        .expect("the turn marked by UserPromptSubmit");
    let t_turn = Instant::now();

    // 3. Escape: claude puts the prompt back in the box; no hook fires, the turn stays.
    s.ok(&["send-keys", "-t", TARGET, "Escape"]);
    wait_for(&s, &api, "the interrupted prompt back in the box", || {
        prompt_has(&s, &msg)
    });
    std::fs::remove_file(&hold).unwrap();
    assert_eq!(s.show(n, "@ccs_turn").as_deref(), Some(turn.as_str()));
    // Before the floor a sweep leaves it busy (a prompt just submitted is not read).
    if t_turn.elapsed() < Duration::from_millis(TURN_FLOOR_MS as u64 - 3000) {
        let rep = ok(&["--once", "--json"]).json();
        assert_eq!(by_name(&rep)[SESSION]["state"], "busy", "{rep}");
        assert_eq!(s.show(n, "@ccs_turn").as_deref(), Some(turn.as_str()));
    }

    // 4. Past the floor: `status` says what the next sweep does, and writes nothing.
    wait_for(&s, &api, "status naming claude's idle status file", || {
        let st = by_name(&s_status(&s, &env, &limit));
        st[SESSION]["why"]
            .as_str()
            .is_some_and(|w| w.contains("idle by its status file"))
    });
    assert_eq!(s.show(n, "@ccs_turn").as_deref(), Some(turn.as_str()));

    // 5. A sweep ends the turn and starts the idle clock; it is idle, not reaped yet.
    let rep = ok(&["--once", "--json"]).json();
    assert_eq!(s.show(n, "@ccs_turn"), None, "{rep}");
    assert!(s.show(n, "@ccs_idle").is_some());
    assert_eq!(by_name(&rep)[SESSION]["state"], "idle", "{rep}");
    assert!(s.has(SESSION));

    // 6. Idle past the limit: reaped, with its cid.
    wait_for(&s, &api, "a sweep to reap the interrupted chat", || {
        ok(&["--once"]);
        !s.has(SESSION)
    });
    let line = s.audit().pop().expect("an audit line");
    assert_eq!(line["outcome"], "reaped", "{line}");
    assert_eq!(line["reason"], "idle", "{line}");
}
