#!/usr/bin/env python3
"""A stand-in for claude-code-studio's subscription engine (issue 43, item 10).

Written from the description in issue 43 ("The studio."), not from the studio's code. It does
only what that description says the studio does, so that ccs-reap can be checked beside it:

* one tmux session `ccs-<chat>` per chat, on its own tmux server (`--socket PATH`, as `tmux -S`;
  the studio itself uses `tmux -L ccstudio`), created only when `has-session` fails, running

      env -u CLAUDECODE '<claude>' --session-id '<cid>'|--resume '<cid>' --model '<m>'
          --dangerously-skip-permissions [--mcp-config '<tmp>/ccs-mcp-<hash>.json']

  (`--resume` whenever the chat's row has a cid; a new chat gets `--session-id <new uuid>`);
* right after creating it, it sets `CCS_CFG` (a hash of prompt, MCP set and model) in that
  session's environment; a session that exists with another (or no) `CCS_CFG` is killed (plain
  `kill-session`) and started again with `--resume`;
* a message is `load-buffer` + `paste-buffer -dpr` + `send-keys Enter` into the pane, then it
  polls (every 1.5 s; `--poll`) until the transcript has a reply with a `stop_reason` and the
  pane no longer looks busy; 30 s (`--silence`) without new output in the pane is an error
  ("interactive session went idle without producing a reply");
* it keeps no spare session: its tmux server exits with its last chat;
* its viewer is `tmux -C attach-session -t <name>` with pipes.

What it adds for tests, none of which changes what tmux or claude see: a state dir (`--state`)
with the chat rows (`chats.json`) and a log of what it did (`studio.log`, one JSON line per
start, kill and message), a JSON line on stdout per command, and waiting for claude's input box
before the first paste into a session it just started (the studio waits for its own ready sign;
a paste before claude draws its box is lost).

Usage:
  studio.py --socket S --state DIR --claude PATH --cwd DIR [opts] send CHAT TEXT
  studio.py ... ensure CHAT          start (or restart) the chat's session, wait for its box
  studio.py ... view CHAT [--for S]  attach a control-mode viewer for S seconds

Exit 0 with {"ok": true, ...} on stdout, 1 with {"ok": false, "error": ...}. Python 3.11 stdlib.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid

ARGS = None
PROMPT = "\u276f"


class StudioError(Exception):
    pass


def tmux(*args, stdin=None):
    env = dict(os.environ)
    env.pop("TMUX", None)
    env.pop("TMUX_PANE", None)
    cmd = ["tmux", "-u", "-S", ARGS.socket]
    if ARGS.tmux_conf:
        cmd += ["-f", ARGS.tmux_conf]
    return subprocess.run(cmd + list(args), input=stdin, capture_output=True, env=env)


def tmux_ok(*args, stdin=None):
    p = tmux(*args, stdin=stdin)
    if p.returncode != 0:
        raise StudioError("tmux %s: %s" % (" ".join(args), p.stderr.decode(errors="replace").strip()))
    return p.stdout.decode(errors="replace")


def log(event, **kw):
    kw.update(ts=time.time(), event=event)
    with open(os.path.join(ARGS.state, "studio.log"), "a", encoding="utf-8") as f:
        f.write(json.dumps(kw) + "\n")


def rows():
    try:
        with open(os.path.join(ARGS.state, "chats.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save_rows(r):
    p = os.path.join(ARGS.state, "chats.json")
    with open(p + ".tmp", "w", encoding="utf-8") as f:
        json.dump(r, f)
    os.replace(p + ".tmp", p)


def session(chat):
    return "ccs-" + chat


def mcp_text():
    if not ARGS.mcp_config:
        return ""
    with open(ARGS.mcp_config, encoding="utf-8") as f:
        return f.read()


def cfg_hash():
    """CCS_CFG: a hash of the prompt, the MCP set and the model."""
    h = hashlib.sha256(json.dumps([ARGS.prompt, mcp_text(), ARGS.model]).encode())
    return h.hexdigest()[:16]


def has_session(name):
    return tmux("has-session", "-t", "=" + name).returncode == 0


def session_cfg(name):
    p = tmux("show-environment", "-t", "=" + name, "CCS_CFG")
    out = p.stdout.decode(errors="replace").strip()
    if p.returncode == 0 and out.startswith("CCS_CFG="):
        return out[len("CCS_CFG="):]
    return None


def q(v):
    """One value single-quoted for the shell, as the studio writes it."""
    return "'" + v.replace("'", "'\\''") + "'"


def start(chat):
    """Create the chat's session: --resume its row's cid, or --session-id a new one."""
    name = session(chat)
    r = rows()
    row = r.setdefault(chat, {})
    if row.get("cid"):
        mode, cid = "resume", row["cid"]
    else:
        mode, cid = "session-id", str(uuid.uuid4())
        row["cid"] = cid
        save_rows(r)
    cmd = "env -u CLAUDECODE %s --%s %s --model %s" % (q(ARGS.claude), mode, q(cid), q(ARGS.model))
    if ARGS.skip_permissions:
        cmd += " --dangerously-skip-permissions"
    if ARGS.mcp_config:
        tmp = os.environ.get("TMPDIR") or "/tmp"
        mcp = os.path.join(tmp, "ccs-mcp-%s.json" % cfg_hash())
        with open(mcp, "w", encoding="utf-8") as f:
            f.write(mcp_text())
        cmd += " --mcp-config " + q(mcp)
    tmux_ok("new-session", "-d", "-s", name, "-x", "200", "-y", "50", "-c", ARGS.cwd, cmd)
    tmux_ok("set-environment", "-t", "=" + name, "CCS_CFG", cfg_hash())
    log("start", chat=chat, mode=mode, cid=cid, command=cmd)
    return mode


def ensure(chat):
    """The session of `chat`, started when `has-session` fails or restarted when its CCS_CFG
    differs. Returns how it was started now ("session-id", "resume") or None if it ran."""
    name = session(chat)
    if has_session(name):
        have, want = session_cfg(name), cfg_hash()
        if have == want:
            return None
        log("kill", chat=chat, why="CCS_CFG differs", have=have, want=want)
        tmux("kill-session", "-t", "=" + name)
        deadline = time.monotonic() + 10
        while has_session(name) and time.monotonic() < deadline:
            time.sleep(0.05)
    return start(chat)


def screen(name):
    p = tmux("capture-pane", "-p", "-J", "-t", "=" + name + ":")
    text = p.stdout.decode(errors="replace").replace("\u00a0", " ")
    return [l.rstrip() for l in text.split("\n")]


def looks_busy(lines):
    return any("esc to interrupt" in l for l in lines)


def wait_ready(name):
    """Claude's empty input box (a line that is just the prompt glyph)."""
    deadline = time.monotonic() + ARGS.ready_timeout
    while time.monotonic() < deadline:
        if not has_session(name):
            raise StudioError("session %s went while starting" % name)
        if any(l == PROMPT for l in screen(name)):
            return
        time.sleep(0.1)
    raise StudioError("session %s never showed its input box" % name)


def transcript(chat):
    cfg = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.environ["HOME"], ".claude")
    slug = "".join(c if c.isascii() and c.isalnum() else "-" for c in os.path.realpath(ARGS.cwd))
    return os.path.join(cfg, "projects", slug, rows()[chat]["cid"] + ".jsonl")


def reply_after(path, offset):
    """The text of the first finished reply in the transcript past `offset`, or None."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return None
    texts = []
    for line in data.split(b"\n"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("type") != "assistant":
            continue
        m = e.get("message") or {}
        for b in m.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "text":
                texts.append(b.get("text", ""))
        if m.get("stop_reason") not in (None, "tool_use"):
            return "".join(texts)
    return None


def send(chat, text):
    name = session(chat)
    t0 = time.monotonic()
    started = ensure(chat)
    if started:
        wait_ready(name)
    path = transcript(chat)
    try:
        offset = os.path.getsize(path)
    except FileNotFoundError:
        offset = 0
    buf = "ccs-send-" + chat
    tmux_ok("load-buffer", "-b", buf, "-", stdin=text.encode())
    tmux_ok("paste-buffer", "-dpr", "-b", buf, "-t", "=" + name + ":")
    tmux_ok("send-keys", "-t", "=" + name + ":", "Enter")
    log("send", chat=chat, text=text, started=started)
    last, last_change = None, time.monotonic()
    while True:
        time.sleep(ARGS.poll)
        if not has_session(name):
            raise StudioError("session %s went during the message" % name)
        lines = screen(name)
        now = time.monotonic()
        if lines != last:
            last, last_change = lines, now
        reply = reply_after(path, offset)
        if reply is not None and not looks_busy(lines):
            return {"reply": reply, "started": started, "took_ms": int((now - t0) * 1000)}
        if now - last_change >= ARGS.silence:
            raise StudioError("interactive session went idle without producing a reply")


def view(chat, secs):
    """The studio's viewer: a control-mode client with pipes, for `secs` seconds."""
    env = dict(os.environ)
    env.pop("TMUX", None)
    env.pop("TMUX_PANE", None)
    cmd = ["tmux", "-u", "-S", ARGS.socket, "-C", "attach-session", "-t", "=" + session(chat)]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env)
    time.sleep(secs)
    out, _ = p.communicate(b"\n", timeout=10)
    lines = out.decode(errors="replace").split("\n")
    return {"lines": len(lines), "begin": sum(l.startswith("%begin") for l in lines),
            "exit": p.returncode}


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True, help="the tmux socket path (tmux -S)")
    ap.add_argument("--tmux-conf", default=None, help="tmux -f (tests: /dev/null)")
    ap.add_argument("--state", required=True, help="chat rows and studio.log")
    ap.add_argument("--claude", default="claude")
    ap.add_argument("--cwd", default=os.getcwd())
    ap.add_argument("--model", default="claude-sonnet-4-5")
    ap.add_argument("--prompt", default="", help="hashed into CCS_CFG")
    ap.add_argument("--mcp-config", default=None, help="an MCP config to pass (copied to a tmp)")
    ap.add_argument("--no-skip-permissions", dest="skip_permissions", action="store_false")
    ap.add_argument("--poll", type=float, default=1.5, help="seconds between polls")
    ap.add_argument("--silence", type=float, default=30.0,
                    help="seconds without pane output before a message fails")
    ap.add_argument("--ready-timeout", type=float, default=60.0)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("chat")
    s.add_argument("text")
    e = sub.add_parser("ensure")
    e.add_argument("chat")
    v = sub.add_parser("view")
    v.add_argument("chat")
    v.add_argument("--for", dest="secs", type=float, default=1.0)
    ARGS = ap.parse_args()
    os.makedirs(ARGS.state, exist_ok=True)
    try:
        if ARGS.cmd == "send":
            out = send(ARGS.chat, ARGS.text)
        elif ARGS.cmd == "ensure":
            started = ensure(ARGS.chat)
            wait_ready(session(ARGS.chat))
            out = {"started": started}
        else:
            out = view(ARGS.chat, ARGS.secs)
    except StudioError as e:
        log("error", chat=ARGS.chat, error=str(e))
        print(json.dumps({"ok": False, "error": str(e)}), flush=True)
        return 1
    out["ok"] = True
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
