#!/usr/bin/env python3
"""Judge a soak run: the driver's log against the reaper's audit log, tombstones and /proc.

    scripts/soak-check.py RUN_DIR

RUN_DIR is what scripts/soak leaves (with --keep): driver.jsonl, meta.json, state/ (the daemon's
CCS_REAP_STATE_DIR) and pids/ (the pids each fake claude recorded, one file per spawn). The process
checks read /proc, so they mean something only while the run's processes have not been cleaned up
(scripts/soak calls this before its cleanup).

A chat's incarnation is one session: (chat id, tmux $N, tmux server pid). An audit line belongs to
the server that was up at its `at` (the driver logs the server's pid every 500 ms and with every
spawn).

Violations (exit 1):
  turn      a reap (outcome `reaped`) whose window [at, at + took_ms] overlaps a turn of that
            incarnation (from its successful `turn begin` returning to its `turn end` being
            called), or a `turn end` that found the session gone after a successful `turn begin`
            (unless the tmux server died in between).
  viewer    a reap of an incarnation whose viewer was confirmed attached before the reap began and
            was still attached when it finished (or was thrown out by it). A viewer that came or
            went while a teardown ran is counted as an edge race, which the contract allows: it
            re-checks rules 1-3 right after marking the session, not later.
  pids      a pid of a reaped tree alive (not a zombie) now: the audit's `pids`, and every pid the
            fake claude of a reaped incarnation recorded. A pid whose process started after the
            reap is a reused pid, not a survivor.
  orphans   a process carrying the live server's TMUX in its environment whose session is gone.
  tombstone a respawn (spawn without --cid) after a reap whose session did not get the chat's cid
            back (history lost); a respawn with no reap and no server death before it; a reaped
            last incarnation without its tombstone.
  rss       the daemon's VmRSS at the end above its baseline (the first sample after a quarter of
            the run) by more than the slack (meta.json rss_slack_kb, 2 MiB).
  run       a failed reap, a command that failed, the daemon not exiting 0 on SIGTERM, or a run
            that did not exercise the reaper (no reap, no respawn, no long turn, no viewer).

Warnings (reported, exit status unchanged): the tmux server died. tmux 3.3a's server segfaults
when control-mode clients detach within tens of ms of attaching, with no ccs-reap anywhere near
(kernel: "tmux: server[PID]: segfault at 20 ... in tmux[3da13,...]"); the checker reads the kernel
log for that line, and attributes to the dead server what died with it (turns cut short, viewers
thrown out, commands that failed, helpers left behind), never to the reaper.
"""

import bisect
import collections
import datetime
import glob
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ccs_harness import alive, procs_with_tmux_env, start_epoch  # noqa: E402


def epoch(rfc3339):
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def overlaps(a0, a1, b0, b1):
    return a0 < b1 and b0 < a1


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    with open(os.path.join(run, "meta.json")) as f:
        meta = json.load(f)
    events = []
    with open(os.path.join(run, "driver.jsonl")) as f:
        for line in f:
            if line.strip():
                events.append(json.loads(line))
    audit = []
    try:
        with open(os.path.join(meta["state_dir"], "reaped.jsonl")) as f:
            audit = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        pass

    violations = collections.defaultdict(list)
    warnings = []
    notes = collections.Counter()

    def bad(kind, msg):
        violations[kind].append(msg)

    idle_s = meta["idle_ms"] / 1000
    turns = [e for e in events if e["ev"] == "turn"]
    views = [e for e in events if e["ev"] == "view"]
    spawns = [e for e in events if e["ev"] == "spawn"]

    # ---------------------------------------------------------------- the tmux server's life
    # Observations (time, server pid): the sampler's, and every spawn's.
    obs = []
    deaths = {}  # server pid -> (last seen alive, noticed gone)
    for e in events:
        if e["ev"] == "server":
            if e.get("pid") is not None:
                obs.append((e["t"], e["pid"]))
            if e.get("prev") is not None:
                deaths[e["prev"]] = (e.get("last_seen") or e["t"], e["t"])
        elif e["ev"] == "spawn" and e.get("server"):
            obs.append((e["t1"], e["server"]))
    obs.sort()
    obs_t = [o[0] for o in obs]

    def server_at(t):
        i = bisect.bisect_right(obs_t, t) - 1
        return obs[i][1] if i >= 0 else (obs[0][1] if obs else None)

    def died_during(server, t0, t1):
        d = deaths.get(server)
        return d is not None and d[0] <= t1 and t0 <= d[1]

    def any_died_during(t0, t1):
        return any(d[0] - 0.5 <= t1 and t0 <= d[1] + 0.5 for d in deaths.values())

    def failed_command(what, rc, t0, t1, stderr):
        if any_died_during(t0, t1):
            notes["commands that failed while the tmux server died"] += 1
        else:
            bad("run", f"{what} exited {rc}: {(stderr or '').strip()[-300:]}")

    segv = {}
    if deaths:
        try:
            k = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
            for line in k.splitlines():
                m = re.search(r"tmux: server\[(\d+)\]: (segfault.*)", line)
                if m and int(m.group(1)) in deaths:
                    segv[int(m.group(1))] = m.group(2).strip()
        except Exception:  # noqa: BLE001
            pass
    for pid, (seen, gone) in sorted(deaths.items(), key=lambda x: x[1]):
        why = segv.get(pid, "no kernel message found (dmesg)")
        warnings.append(
            f"the tmux server (pid {pid}) died between {datetime.datetime.fromtimestamp(seen).strftime('%H:%M:%S.%f')[:-3]} "
            f"and {datetime.datetime.fromtimestamp(gone).strftime('%H:%M:%S.%f')[:-3]}: {why}"
        )

    # ---------------------------------------------------------------- audit lines
    reaped = [a for a in audit if a.get("outcome") == "reaped"]
    for a in audit:
        a["_t0"] = epoch(a["at"])
        a["_t1"] = a["_t0"] + a.get("took_ms", 0) / 1000
        a["_server"] = server_at(a["_t0"])
    reaps_of = collections.defaultdict(list)  # (id, $N, server) -> reaped lines
    for a in reaped:
        reaps_of[(a["id"], a["tmux_id"], a["_server"])].append(a)
    outcomes = collections.Counter(a.get("outcome") for a in audit)

    def reaps_for(rec):
        if rec.get("server") is not None and rec.get("tmux_id"):
            return reaps_of.get((rec["id"], rec["tmux_id"], rec["server"]), [])
        return [a for a in reaped if a["id"] == rec["id"] and (not rec.get("tmux_id") or a["tmux_id"] == rec["tmux_id"])]

    # ---------------------------------------------------------------- turns
    ok_turns = [t for t in turns if t.get("begin_rc") == 0]
    for t in ok_turns:
        t_end = t.get("end_t0", meta["t_stop"])
        for a in reaps_for(t):
            if overlaps(t["begin_t1"], t_end, a["_t0"], a["_t1"]):
                bad("turn", f"{t['id']}: reaped ({a['tmux_id']}, {a['at']}, {a.get('took_ms')} ms) during a turn [{t['begin_t1']:.3f}, {t_end:.3f}]")
        if t.get("end_rc") == 4:
            if died_during(t.get("server"), t["begin_t0"], t.get("end_t1", t_end)):
                notes["turns cut short by the tmux server's death"] += 1
            else:
                bad("turn", f"{t['id']} ({t.get('tmux_id')}): the session vanished during a turn (begin ok at {t['begin_t1']:.3f}, end found it gone at {t['end_t0']:.3f})")
        elif t.get("end_rc") not in (0, None):
            failed_command(f"{t['id']}: turn end", t["end_rc"], t["end_t0"], t["end_t1"], t.get("stderr"))
    for t in turns:
        if t.get("begin_rc") not in (0, 4):
            failed_command(f"{t['id']}: turn begin", t.get("begin_rc"), t["begin_t0"], t["begin_t1"], t.get("stderr"))
    for s in spawns:
        if s.get("rc") != 0:
            failed_command(f"{s['id']}: spawn", s.get("rc"), s["t0"], s["t1"], s.get("stderr"))
    long_turns = sum(1 for t in ok_turns if t.get("hold", 0) > idle_s)
    begin_times = [t["begin_t1"] - t["begin_t0"] for t in turns]

    # ---------------------------------------------------------------- viewers
    confirmed = [v for v in views if v.get("t_confirmed") is not None]
    kicked_by_server = 0
    for v in confirmed:
        c, e = v["t_confirmed"], (v["t_gone"] if v.get("kicked") else v["t_end"])
        hit = False
        for a in reaps_for(v):
            if not overlaps(c, e, a["_t0"], a["_t1"]):
                continue
            hit = True
            if c < a["_t0"] and (e > a["_t1"] or v.get("kicked")):
                bad("viewer", f"{v['id']}: reaped ({a['tmux_id']}, {a['at']}) while viewer pid {v['pid']} was attached [{c:.3f}, {e:.3f}]{' and was thrown out' if v.get('kicked') else ''}")
            else:
                notes["viewer edge races (came or went during a teardown)"] += 1
        if v.get("kicked") and not hit:
            if died_during(v.get("server"), c, e + 1):
                kicked_by_server += 1
            else:
                notes["viewers that left on their own (session gone, no reap of it seen)"] += 1
    kicked = sum(1 for v in confirmed if v.get("kicked"))

    # ---------------------------------------------------------------- pids
    reused = checked = recorded = not_in_audit = 0
    incarnation = {}  # (id, $N, server) -> spawn event
    for s in spawns:
        if s.get("created"):
            incarnation[(s["id"], s["tmux_id"], s.get("server"))] = s
    for a in reaped:
        for pid in a.get("pids", []):
            checked += 1
            if alive(pid):
                st = start_epoch(pid)
                if st is not None and st > a["_t0"] - 0.01:
                    reused += 1
                    continue
                bad("pids", f"{a['id']} ({a['tmux_id']}, reaped {a['at']}): pid {pid} is alive")
        s = incarnation.get((a["id"], a["tmux_id"], a["_server"]))
        if not s:
            bad("run", f"{a['id']}: reaped {a['tmux_id']} (server {a['_server']}), which no spawn of the driver created")
            continue
        try:
            with open(s["pids_file"]) as f:
                rows = [line.split() for line in f if len(line.split()) == 2]
        except FileNotFoundError:
            rows = []
        listed = set(a.get("pids", []))
        for kind, pid in rows:
            pid = int(pid)
            recorded += 1
            if pid not in listed:
                not_in_audit += 1
            if alive(pid):
                st = start_epoch(pid)
                if st is not None and st > a["_t0"] - 0.01:
                    reused += 1
                    continue
                bad("pids", f"{a['id']} ({a['tmux_id']}, reaped {a['at']}): {kind} helper pid {pid} is alive")

    # Processes of the live server whose session is gone.
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    r = subprocess.run(["tmux", "-S", meta["sock"], "display-message", "-p", "#{pid}"], capture_output=True, text=True, env=env)
    live_server = int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else None
    r = subprocess.run(["tmux", "-S", meta["sock"], "list-sessions", "-F", "#{session_id}"], capture_output=True, text=True, env=env)
    live = {int(x[1:]) for x in r.stdout.split() if x.startswith("$")}
    for pid, (spid, n) in sorted(procs_with_tmux_env(meta["sock"]).items()):
        if not alive(pid):
            continue
        if spid == live_server and n in live:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        if spid in deaths:
            notes["processes left by a tmux server that died (its sessions were never reaped)"] += 1
        else:
            bad("orphans", f"pid {pid} ({cmd}) of session ${n} (server {spid}), which is gone")

    # ---------------------------------------------------------------- tombstones
    by_chat = collections.defaultdict(list)
    for s in spawns:
        if s.get("created"):
            by_chat[s["id"]].append(s)
        elif s.get("rc") == 0 and not s.get("first"):
            notes["respawns that found the session already there"] += 1
    respawns = in_flight = 0
    for cid_id, incs in by_chat.items():
        for k, s in enumerate(incs):
            if k == 0:
                continue
            respawns += 1
            prev = incs[k - 1]
            prev_reaps = reaps_of.get((cid_id, prev["tmux_id"], prev.get("server")), [])
            if prev_reaps:
                a = prev_reaps[-1]
                if s["t0"] < a["_t1"]:
                    notes["respawns begun while the previous reap still ran"] += 1
                if s.get("cid_seen") != s.get("want_cid"):
                    racing = s["t0"] < a["_t1"]
                    in_flight += racing
                    bad("tombstone", f"{cid_id}: respawned as {s['tmux_id']} with cid {s.get('cid_seen')!r}, not {s.get('want_cid')!r}: history lost"
                        + (f" (spawned at {s['t0']:.3f} while the reap of {a['tmux_id']} begun at {a['_t0']:.3f} still ran until {a['_t1']:.3f}: the session had vanished and the tombstone was not written yet)" if racing else ""))
            elif prev.get("server") in deaths:
                notes["respawns after the tmux server died (nothing to resume from)"] += 1
            else:
                bad("tombstone", f"{cid_id}: respawned as {s['tmux_id']}, but its previous session {prev['tmux_id']} was neither reaped nor lost with the server")
        last = incs[-1]
        last_reaps = reaps_of.get((cid_id, last["tmux_id"], last.get("server")), [])
        found = glob.glob(os.path.join(meta["state_dir"], "studios", "*", "sessions", f"{cid_id}.json"))
        p = found[0] if found else os.path.join(meta["state_dir"], "studios", "?", "sessions", f"{cid_id}.json")
        if last_reaps:
            try:
                with open(p) as f:
                    t = json.load(f)
                # A large batch's tombstones are batch files, each chat's name a link to the one
                # holding its record (docs/files.md): the record of this chat is the one to check.
                if isinstance(t, dict) and list(t) == ["batch"]:
                    t = next((r for r in t["batch"] if r.get("id") == cid_id), {})
            except (OSError, ValueError) as e:
                bad("tombstone", f"{cid_id}: reaped at {last_reaps[-1]['at']}, not respawned, and no tombstone ({e})")
                continue
            if t.get("cid") != last["want_cid"]:
                bad("tombstone", f"{cid_id}: tombstone cid {t.get('cid')!r}, not {last['want_cid']!r}")
        elif os.path.exists(p):
            notes["stale tombstones (a live chat has one: written by a reap that a respawn overtook)"] += 1

    # ---------------------------------------------------------------- rss
    rss = meta.get("rss", [])
    base = end = peak = None
    if len(rss) >= 4:
        t_base = meta["t_start"] + meta["duration"] / 4
        base_row = next((x for x in rss if x[0] >= t_base), rss[len(rss) // 4])
        base, end, peak = base_row[1], rss[-1][1], max(x[1] for x in rss)
        if end > base + meta["rss_slack_kb"]:
            bad("rss", f"the daemon's RSS grew from {base} kB to {end} kB (slack {meta['rss_slack_kb']} kB)")
    else:
        bad("run", f"too few RSS samples ({len(rss)})")

    # ---------------------------------------------------------------- the run itself
    for a in audit:
        if a.get("outcome") == "failed":
            bad("run", f"{a['id']} ({a['tmux_id']}): reap failed: {a.get('error')} survivors {a.get('survivors')}")
    if meta.get("daemon_exit") != 0:
        bad("run", f"the daemon exited {meta.get('daemon_exit')} on SIGTERM")
    for e in meta.get("driver_errors", []):
        bad("run", f"driver: {e}")
    if not reaped:
        bad("run", "no reap happened: the soak proved nothing")
    if respawns == 0:
        bad("run", "no chat was respawned: the soak proved nothing about tombstones")
    if long_turns == 0:
        bad("run", "no turn outlasted the idle limit")
    if not confirmed:
        bad("run", "no viewer ever attached")

    # ---------------------------------------------------------------- report
    dur = meta["t_stop"] - meta["t_start"]
    print(f"soak: {dur:.0f} s, {meta['chats']} chats, seed {meta['seed']}; idle limit {meta['idle_ms']} ms, "
          f"interval {meta['interval_ms']} ms, grace {meta['grace_ms']} ms")
    print(f"  driver: {len(spawns)} spawns ({respawns} respawns), {len(ok_turns)} turns "
          f"({long_turns} longer than the idle limit, {sum(1 for t in turns if t.get('begin_rc') == 4)} begins answered 4), "
          f"{len(confirmed)} viewer attaches ({kicked} thrown out: {kicked_by_server} by a dying tmux server)")
    if begin_times:
        print(f"  turn begin: slowest {max(begin_times) * 1000:.0f} ms")
    print(f"  reaper: {len(audit)} audit lines: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"  pids: {checked} audit pids and {recorded} recorded helper pids of reaped trees checked "
          f"({reused} reused by newer processes, {not_in_audit} recorded pids not listed in the audit line)")
    if base is not None:
        print(f"  daemon RSS: first {rss[0][1]} kB, baseline {base} kB, peak {peak} kB, end {end} kB "
              f"({len(rss)} samples); exit {meta.get('daemon_exit')} on SIGTERM")
    for k, v in sorted(notes.items()):
        print(f"  note: {k}: {v}")
    for w in warnings:
        print(f"  [WARN] tmux: {w}")
    kinds = ["turn", "viewer", "pids", "orphans", "tombstone", "rss", "run"]
    total = sum(len(v) for v in violations.values())
    for k in kinds:
        vs = violations.get(k, [])
        print(f"  [{'PASS' if not vs else 'FAIL'}] {k}: {len(vs)} violation(s)")
        for m in vs[:20]:
            print(f"      {m}")
        if len(vs) > 20:
            print(f"      ... and {len(vs) - 20} more")
    summary = {
        "violations": {k: violations.get(k, []) for k in kinds},
        "warnings": warnings,
        "notes": dict(notes),
        "counts": {
            "spawns": len(spawns), "respawns": respawns, "turns": len(ok_turns), "long_turns": long_turns,
            "viewer_attaches": len(confirmed), "audit": dict(outcomes), "respawns_during_reap": in_flight,
        },
        "rss_kb": {"first": rss[0][1] if rss else None, "baseline": base, "peak": peak, "end": end},
    }
    with open(os.path.join(run, "check.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("soak: OK" if total == 0 else f"soak: {total} violation(s)")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
