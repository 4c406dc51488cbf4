//! A chat watched from a grouped session (issue 49): `tmux new-session -t ccs-e2e`, the usual way
//! to watch one session from a second terminal, with a client attached to the group member and
//! none to the chat's own session. The real claude, idle past the limit, is kept (`viewed`) and
//! its idle clock refreshed while that client stays; once it leaves, a sweep reaps the chat, and
//! `spawn` brings it back with `--resume`, its history in the next request.

use super::*;

#[test]
fn a_chat_watched_from_a_grouped_session_is_kept_until_its_viewer_leaves() {
    let tools = tools_or_fail();
    let World {
        s,
        api,
        proj,
        claude,
        env,
        ..
    } = World::new(&tools);
    let _cleanup = Cleanup(&s);
    let limit = [
        ("CCS_ENGINE_IDLE_KILL_MS", "2s"),
        ("CCS_REAP_GRACE_MS", "5s"),
    ];
    let ok = |args: &[&str]| ok_with(&s, &env, args, &limit);
    let settings = s.path("claude-settings.json");
    std::fs::write(&settings, ok(&["claude-settings"]).stdout).unwrap();
    let (claude_s, settings_s) = (path_str(&claude), path_str(&settings));
    let tag = &uuid()[..8];
    let msg1 = format!("remember the word KIWI-{tag}");
    let msg2 = format!("which fruit did I name {tag}");
    let echo1 = format!("ECHO: {msg1}");

    // 1. A plain claude with its hooks, one turn: its cid, its idle clock.
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
    let claude1: i32 = pane(&s, "#{pane_pid}").parse().unwrap();
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg1]);
    wait_for(&s, &api, "the prompt in the input box", || {
        prompt_has(&s, &msg1)
    });
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the reply on screen", || {
        screen(&s).contains(&echo1)
    });
    wait_for(&s, &api, "the turn ended by claude's Stop hook", || {
        s.show(n, "@ccs_turn").is_none()
            && s.show(n, "@ccs_idle").is_some()
            && s.show(n, "@ccs_cid").is_some()
    });
    let cid = s.show(n, "@ccs_cid").unwrap_or_default();

    // 2. A second terminal's view: a session grouped with the chat's, a client attached to it.
    s.ok(&["new-session", "-d", "-t", "=ccs-e2e", "-s", "watch"]);
    let _viewer = KillOnDrop(
        Command::new("tmux")
            .arg("-S")
            .arg(&s.sock)
            .args(["-C", "attach", "-t", "=watch"])
            .env_remove("TMUX")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(10.0, || s.attached("watch")), "no viewer");
    assert!(!s.attached(SESSION), "the viewer is on the group member");

    // 3. Idle past the limit, watched: kept, its clock refreshed by the sweep.
    let idle: i64 = s.show(n, "@ccs_idle").unwrap().parse().unwrap();
    assert!(wait_until(10.0, || now_ms() - idle > 2500));
    let before = now_ms();
    let rep = ok(&["--once", "--json"]).json();
    assert_eq!(by_name(&rep)[SESSION]["state"], "viewed", "{rep}");
    assert!(
        s.has(SESSION) && alive(claude1),
        "the watched chat was reaped"
    );
    let stamp: i64 = s.show(n, "@ccs_idle").unwrap().parse().unwrap();
    assert!(
        stamp >= before,
        "the clock was not refreshed: {stamp} < {before}"
    );

    // 4. The viewer leaves: the chat is reaped once idle past the limit.
    drop(_viewer);
    assert!(
        wait_until(10.0, || !s.attached("watch")),
        "the viewer stayed"
    );
    wait_for(&s, &api, "a sweep to reap the chat", || {
        ok(&["--once"]);
        !s.has(SESSION)
    });
    assert!(
        wait_until(10.0, || !alive(claude1)),
        "claude {claude1} survived the reap"
    );
    let line = s.audit().pop().expect("an audit line");
    assert_eq!(line["outcome"], "reaped", "{line}");
    assert_eq!(line["cid"], cid.as_str(), "{line}");

    // 5. Back with --resume: the next request carries the first exchange.
    ok(&["spawn", ID, "--", &claude_s, "--settings", &settings_s]);
    let start2 = pane(&s, "#{pane_start_command}");
    assert!(start2.contains(&format!("--resume {cid}")), "{start2}");
    wait_for(&s, &api, "resumed claude ready", || prompt_empty(&s));
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg2]);
    wait_for(&s, &api, "the prompt in the input box", || {
        prompt_has(&s, &msg2)
    });
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the request of turn 2", || {
        !requests_for(&api, &msg2).is_empty()
    });
    let r2 = requests_for(&api, &msg2);
    let history = r2[r2.len() - 1]["body"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "user" && texts(m).contains(&msg1)),
        "the turn-2 request lacks turn 1: {history:?}"
    );
}
