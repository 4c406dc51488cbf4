//! An interrupted turn ends (issue 30, item 8): Escape while the fake API holds the reply fires
//! no hook, so `@ccs_turn` stays set; once the turn is older than the floor
//! (`ccs_reap::engine::agent_status::TURN_FLOOR_MS`), a sweep reads claude's own status file
//! (`idle`), ends the turn and starts the idle clock, and a later sweep reaps the chat, never
//! before the idle limit has run from the moment the turn really ended.
//!
//! The hold is released only once the interrupt is on screen (the prompt's text back in the
//! input box, between its two rules): released earlier, a claude slow to take the Escape (a
//! loaded machine) gets its reply first, `Stop` ends the turn, and there is nothing to test.

use super::*;

/// The input box: the lines between the last two rules of `─` (the footer is below the last).
fn input_box(s: &Server) -> Vec<String> {
    let scr = screen(s);
    let lines: Vec<&str> = scr.lines().collect();
    let rules: Vec<usize> = (0..lines.len())
        .filter(|&i| !lines[i].is_empty() && lines[i].chars().all(|c| c == '\u{2500}'))
        .collect();
    match rules[..] {
        [.., a, b] => lines[a + 1..b].iter().map(|l| l.to_string()).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn a_turn_interrupted_by_escape_later_lets_the_chat_be_reaped() {
    use ccs_reap::engine::agent_status::TURN_FLOOR_MS;
    let tools = tools_or_fail();
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
    let cid = s.show(n, "@ccs_cid").unwrap();

    // 2. A prompt whose reply is held: the hook marks the turn.
    std::fs::write(&hold, "").unwrap();
    let msg = format!("held {}", &uuid()[..8]);
    let in_box = format!("\u{276f} {msg}");
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg]);
    wait_for(&s, &api, "the text typed", || {
        input_box(&s).contains(&in_box)
    });
    // The turn (its hook's value) begins after this: its age is at most `t_turn.elapsed()`.
    let t_turn = Instant::now();
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the held request at the fake API", || {
        !requests_for(&api, &msg).is_empty()
    });
    let turn = s
        .show(n, "@ccs_turn")
        .expect("the turn marked by UserPromptSubmit");
    wait_for(&s, &api, "claude busy (esc to interrupt)", || {
        screen(&s).contains("esc to interrupt")
    });

    // 3. Escape: claude puts the prompt back in the box; no hook fires, the turn stays. Held
    // until then: the reply must not beat the Escape.
    s.ok(&["send-keys", "-t", TARGET, "Escape"]);
    wait_for(
        &s,
        &api,
        "the interrupted prompt back in the input box",
        || input_box(&s).contains(&in_box),
    );
    // The turn really ended before now.
    let t_ended = Instant::now();
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

    // 6. Idle past the limit: reaped, with its cid, and not before the limit has run from the
    // turn's real end (the sweep that reaped it finished at least 3 s after it).
    wait_for(&s, &api, "a sweep to reap the interrupted chat", || {
        ok(&["--once"]);
        !s.has(SESSION)
    });
    let after_end = t_ended.elapsed();
    assert!(
        after_end >= Duration::from_secs(3),
        "reaped {after_end:?} after the turn ended, before the 3 s limit"
    );
    let line = s.audit().pop().expect("an audit line");
    assert_eq!(line["outcome"], "reaped", "{line}");
    assert_eq!(line["reason"], "idle", "{line}");
    assert_eq!(line["cid"], cid.as_str(), "{line}");
    assert!(
        line["idle_ms"].as_u64().is_some_and(|ms| ms >= 3000),
        "{line}"
    );
}
