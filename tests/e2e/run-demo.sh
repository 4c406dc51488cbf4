#!/usr/bin/env bash
# End-to-end demo: the real Claude Code CLI, offline, in tmux, against
# fake_api.py; kill the session, `claude --resume <cid>` it, and prove the
# conversation history survived (the 2nd turn's API request carries turn 1).
#
#   npm ci --prefix tests/e2e --no-audit --no-fund    # once
#   bash tests/e2e/run-demo.sh                         # prints PASS or FAIL
#
# Env knobs: E2E_TIMEOUT (seconds per wait, default 60), KEEP=1 (keep the temp
# dir even on success), CLAUDE_BIN (override the claude binary).
# Uses only a private tmux socket in a temp dir; never the default server.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NM=$HERE/node_modules
TIMEOUT=${E2E_TIMEOUT:-60}
POLL=0.2

# ---------------------------------------------------------------- binaries
case "$(uname -m)" in
    x86_64) ARCH=x64 ;;
    aarch64 | arm64) ARCH=arm64 ;;
    *) ARCH=$(uname -m) ;;
esac
LIBC=""
if ldd --version 2>&1 | grep -qi musl; then LIBC=-musl; fi
if [[ -z ${CLAUDE_BIN:-} ]]; then
    # The platform package's native binary: does not depend on the wrapper
    # package's postinstall having copied it over bin/claude.exe.
    CLAUDE_BIN=$NM/@anthropic-ai/claude-code-linux-$ARCH$LIBC/claude
fi
MCP_JS=$NM/@modelcontextprotocol/server-memory/dist/index.js
for f in "$CLAUDE_BIN" "$MCP_JS"; do
    if [[ ! -e $f ]]; then
        echo "FAIL: $f missing; run: npm ci --prefix ${HERE#"$PWD"/} --no-audit --no-fund" >&2
        exit 2
    fi
done
NODE_BIN=$(command -v node)
PY_BIN=$(command -v python3)

# ---------------------------------------------------------------- temp world
T=$(mktemp -d /tmp/ccs-e2e.XXXXXX)
SOCK=$T/sock
HOMEDIR=$T/home
PROJ=$T/proj
mkdir -p "$HOMEDIR" "$PROJ" "$T/tmp" "$T/bin"
ln -s "$CLAUDE_BIN" "$T/bin/claude" # so panes run plain `claude ...`
LOG=$T/api.log
CID=$(cat /proc/sys/kernel/random/uuid)
TAG=$RANDOM$RANDOM
MSG1="remember the word PINEAPPLE-$TAG"
MSG2="which word did I ask you to remember $TAG"
API_PID=""
RESULT=FAIL

unset TMUX TMUX_PANE
export LC_ALL=C.UTF-8 # tmux must see a UTF-8 client to print the UI's glyphs
tm() { command tmux -S "$SOCK" -f /dev/null "$@"; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
T0=$(now)

cleanup() {
    local rc=$? pids=() p i
    # claude exits asynchronously after tmux's SIGHUP (it SIGINTs its MCP
    # servers and writes logs under $HOME/.cache first), so wait for every
    # pane's process tree before deleting the temp dir.
    for p in $(tm list-panes -a -F '#{session_name}:#{pane_pid}' 2>/dev/null | grep -v '^keeper:'); do
        pids+=("${p#*:}" $(descendants "${p#*:}"))
    done
    # kill the claude sessions first, so the still-running server reaps them
    for p in $(tm list-sessions -F '#{session_name}' 2>/dev/null); do
        [[ $p == keeper ]] || tm kill-session -t "$p" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        none_alive "${pids[@]}" && break
        sleep "$POLL"
    done
    for p in "${pids[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
    tm kill-server 2>/dev/null || true
    if [[ -n $API_PID ]]; then
        kill "$API_PID" 2>/dev/null || true
        wait "$API_PID" 2>/dev/null || true
    fi
    if [[ $RESULT == PASS && -z ${KEEP:-} ]]; then
        rm -rf "$T"
    else
        echo "(temp dir kept: $T)"
    fi
    exit $rc
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    if tm has-session 2>/dev/null; then
        for s in $(tm list-sessions -F '#{session_name}' | grep -vx keeper); do
            echo "---- screen of tmux session $s ----"
            tm capture-pane -p -J -t "$s" | sed 's/\xc2\xa0/ /g' | grep -v '^[[:space:]]*$' || true
        done
    fi
    exit 1
}

# screen TARGET: the pane text, scrollback included, NBSP -> space, no
# trailing blanks (-J keeps them, e.g. after the text typed in the input box)
screen() { tm capture-pane -p -J -S -300 -t "$1" 2>/dev/null | sed 's/\xc2\xa0/ /g; s/[[:space:]]*$//'; }

# wait_for DESCRIPTION COMMAND...: poll COMMAND until it succeeds or TIMEOUT
wait_for() {
    local what=$1 start
    shift
    start=$(now)
    while ! "$@"; do
        if awk -v a="$start" -v b="$(now)" -v t="$TIMEOUT" 'BEGIN { exit !(b - a > t) }'; then
            fail "timed out after ${TIMEOUT}s waiting for: $what"
        fi
        sleep "$POLL"
    done
}

# Ready = the empty input box is drawn: a line that is just "❯" (+ spaces).
prompt_empty() { screen "$1" | grep -Eq '^❯ *$'; }
# Typed text shows in the input box as "❯ <text>".
prompt_has() { screen "$1" | grep -Fqx -- "❯ $2"; }
# The reply of the fake API, rendered as "● ECHO: <text>".
reply_shown() { screen "$1" | grep -Fq -- "ECHO: $2"; }

pane_pid() { tm list-panes -t "$1" -F '#{pane_pid}'; }

# descendants PID: every live descendant pid of PID (from /proc)
descendants() {
    ps -e -o pid=,ppid=,stat= | awk -v root="$1" '
        $3 !~ /^Z/ { parent[$1] = $2 }
        END {
            for (p in parent) {
                q = p
                while (q in parent && q != root && q > 1) q = parent[q]
                if (q == root && p != root) print p
            }
        }'
}

tree_csv() { { echo "$1"; descendants "$1"; } | paste -sd, -; }

# mcp_child PID: pid of the server-memory process under PID, if any
mcp_child() {
    local p
    for p in $(descendants "$1"); do
        if tr "\\0" " " 2>/dev/null <"/proc/$p/cmdline" | grep -q 'server-memory/dist/index.js'; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
has_mcp_child() { mcp_child "$1" >/dev/null; }

mem_of() { # PID -> "rss=..kB pss=..kB"
    awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } END { printf "rss=%dkB pss=%dkB", r, p }' \
        "/proc/$1/smaps_rollup" 2>/dev/null || echo "rss=? pss=?"
}

alive() { # PID is running and not a zombie
    local st
    st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $st != Z* ]]
}
none_alive() {
    local p
    for p in "$@"; do alive "$p" && return 1; done
    return 0
}

# ---------------------------------------------------------------- fake API
"$PY_BIN" "$HERE/fake_api.py" "$LOG" >"$T/api.out" 2>"$T/api.err" &
API_PID=$!
port_known() { [[ -s $T/api.out ]] && head -1 "$T/api.out" | grep -Eq '^[0-9]+$'; }
wait_for "fake API port" port_known
PORT=$(head -1 "$T/api.out")

# ---------------------------------------------------------------- config
# The key must be >= 20 chars: .claude.json approves a custom key by its last 20.
# Needed keys (each one's absence shows a blocking screen, see NOTES.md):
#   hasCompletedOnboarding, customApiKeyResponses.approved,
#   projects.<cwd>.hasTrustDialogAccepted.  "theme" is just insurance.
KEY=sk-ant-api03-ccs-e2e-fake-key-000000000000000000000000000000
cat >"$HOMEDIR/.claude.json" <<EOF
{
  "hasCompletedOnboarding": true,
  "theme": "dark",
  "customApiKeyResponses": { "approved": ["${KEY: -20}"], "rejected": [] },
  "projects": {
    "$PROJ": { "hasTrustDialogAccepted": true }
  }
}
EOF
cat >"$T/mcp.json" <<EOF
{
  "mcpServers": {
    "memory": {
      "command": "$NODE_BIN",
      "args": ["$MCP_JS"],
      "env": { "MEMORY_FILE_PATH": "$T/memory.jsonl" }
    }
  }
}
EOF

# The tmux server is started from a clean environment (env -i) so nothing of
# the caller's leaks in (CLAUDECODE, ANTHROPIC_*, a real HOME, ...).
PANE_PATH=PATH="$T/bin:$(dirname "$NODE_BIN"):/usr/local/bin:/usr/bin:/bin"
ENV=(
    "$PANE_PATH"
    HOME="$HOMEDIR"
    TMPDIR="$T/tmp"
    LANG=C.UTF-8
    LC_ALL=C.UTF-8
    TERM=xterm-256color
    SHELL=/bin/bash
    ANTHROPIC_API_KEY="$KEY"
    ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT"
    DISABLE_AUTOUPDATER=1
    DISABLE_TELEMETRY=1
    DISABLE_ERROR_REPORTING=1
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
)
# a keeper session keeps the tmux server (which reaps killed panes) alive
env -i "${ENV[@]}" tmux -S "$SOCK" -f /dev/null new-session -d -s keeper -x 80 -y 24 sleep 100000 </dev/null

# start_claude SESSION ARGS...: claude is the pane's process (no shell)
start_claude() {
    local s=$1
    shift
    # tmux (>= 3.2) gives a new session the PATH of the *client* that runs
    # new-session (not the server's; -e PATH=.. does not override it).
    env "$PANE_PATH" tmux -S "$SOCK" -f /dev/null \
        new-session -d -s "$s" -x 200 -y 50 -c "$PROJ" claude "$@" </dev/null
}

# send SESSION TEXT: type the text, wait until it shows, then press Enter
send() {
    tm send-keys -t "$1" -l -- "$2"
    wait_for "typed text in input box of $1" prompt_has "$1" "$2"
    tm send-keys -t "$1" Enter
}

MANGLED=$(printf '%s' "$PROJ" | sed 's/[^A-Za-z0-9]/-/g') # how claude names per-cwd dirs
TRANSCRIPT=$HOMEDIR/.claude/projects/$MANGLED/$CID.jsonl
MCPLOGS=$HOMEDIR/.cache/claude-cli-nodejs/$MANGLED/mcp-logs-memory
# mcp_connected N: N claude launches have logged a finished MCP handshake.
# (The MCP tools only reach the model's tool list once this is logged; a
# message submitted before that goes out without them.)
mcp_connected() {
    [[ $(grep -l 'Connection established' "$MCPLOGS"/*.jsonl 2>/dev/null | wc -l) -ge $1 ]]
}

# ================================================================ turn 1
t=$(now)
start_claude s1 --session-id "$CID" --mcp-config "$T/mcp.json"
wait_for "claude ready (empty prompt) in s1" prompt_empty s1
READY1=$(since "$t")
PID1=$(pane_pid s1)
wait_for "MCP server child of claude (s1)" has_mcp_child "$PID1"
MCP1=$(mcp_child "$PID1")
wait_for "MCP handshake logged in $MCPLOGS (s1)" mcp_connected 1
MCPUP1=$(since "$t")

t=$(now)
send s1 "$MSG1"
wait_for "reply to turn 1 on screen" reply_shown s1 "$MSG1"
REPLY1=$(since "$t")

# the transcript must hold the reply before we kill anything
transcript_has_reply() { grep -Fq "ECHO: $MSG1" "$TRANSCRIPT" 2>/dev/null; }
wait_for "reply 1 in transcript $TRANSCRIPT" transcript_has_reply

echo "---- process tree (turn 1) ----"
ps -o pid,ppid,sid,pgid,rss,args -p "$(pane_pid keeper),$(tree_csv "$PID1")" |
    sed 's/^/  /'
echo "  claude pid=$PID1 $(mem_of "$PID1")"
echo "  mcp    pid=$MCP1 $(mem_of "$MCP1")"

# ================================================================ kill
t=$(now)
TREE=("$PID1" $(descendants "$PID1"))
tm kill-session -t s1
# tmux sends SIGHUP to the pane; give the tree a moment, then SIGKILL leftovers
deadline=$(awk -v a="$(now)" 'BEGIN { print a + 10 }')
while ! none_alive "${TREE[@]}" && awk -v d="$deadline" -v n="$(now)" 'BEGIN { exit !(n < d) }'; do
    sleep "$POLL"
done
SURVIVORS=""
for p in "${TREE[@]}"; do alive "$p" && SURVIVORS+=" $p" && kill -KILL "$p" 2>/dev/null || true; done
[[ -z $SURVIVORS ]] || echo "  note: SIGKILLed survivors of kill-session:$SURVIVORS"
wait_for "old process tree gone" none_alive "${TREE[@]}"
KILLT=$(since "$t")

# ================================================================ resume, turn 2
t=$(now)
start_claude s2 --resume "$CID" --mcp-config "$T/mcp.json"
wait_for "claude ready (empty prompt) in s2" prompt_empty s2
READY2=$(since "$t")
history_shown() { reply_shown s2 "$MSG1"; }
wait_for "turn 1 history on the resumed screen" history_shown
PID2=$(pane_pid s2)
wait_for "MCP server child of claude (s2)" has_mcp_child "$PID2"
MCP2=$(mcp_child "$PID2")
wait_for "MCP handshake logged in $MCPLOGS (s2)" mcp_connected 2
MCPUP2=$(since "$t")

t2=$(now)
send s2 "$MSG2"
wait_for "reply to turn 2 on screen" reply_shown s2 "$MSG2"
REPLY2=$(since "$t2")

echo "---- process tree (resumed) ----"
ps -o pid,ppid,sid,pgid,rss,args -p "$(tree_csv "$PID2")" | sed 's/^/  /'
echo "  claude pid=$PID2 $(mem_of "$PID2")"
echo "  mcp    pid=$MCP2 $(mem_of "$MCP2")"

# ================================================================ verdict
CHECK="$("$PY_BIN" - "$LOG" "$CID" "$MSG1" "$MSG2" <<'EOF'
import json, sys
log, cid, m1, m2 = sys.argv[1:5]
echo1 = "ECHO: " + m1

def texts(msg):
    c = msg.get("content")
    if isinstance(c, str):
        return [c]
    return [b.get("text", "") for b in c or [] if isinstance(b, dict) and b.get("type") == "text"]

def last_user(body):
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            t = [x for x in texts(m) if not x.lstrip().startswith("<system-reminder>")]
            return t[-1].strip() if t else ""
    return ""

reqs = [json.loads(l) for l in open(log)]
msgs = [r for r in reqs if r["method"] == "POST" and r["path"].split("?")[0] == "/v1/messages"
        and isinstance(r["body"], dict)]
t1 = [r for r in msgs if last_user(r["body"]) == m1]
t2 = [r for r in msgs if last_user(r["body"]) == m2]
errs = []
if not t1:
    errs.append("no request for turn 1")
if not t2:
    errs.append("no request for turn 2")
else:
    b = t2[-1]["body"]
    ms = b["messages"]
    if not any(m["role"] == "user" and m1 in [x.strip() for x in texts(m)] for m in ms):
        errs.append("turn-2 request lacks turn-1 user text")
    if not any(m["role"] == "assistant" and echo1 in [x.strip() for x in texts(m)] for m in ms):
        errs.append("turn-2 request lacks turn-1 assistant reply")
    if t2[-1]["headers"].get("x-claude-code-session-id") != cid:
        errs.append("turn-2 session header %r != %s" % (t2[-1]["headers"].get("x-claude-code-session-id"), cid))
for name, rs in (("turn 1", t1), ("turn 2", t2)):
    if rs and "mcp__memory__" not in json.dumps(rs[-1]["body"]):
        errs.append(name + " request does not list the MCP memory tools")
other = sorted({r["method"] + " " + r["path"] for r in reqs} - {"POST /v1/messages?beta=true"})
print("requests=%d messages=%d other=%s" % (len(reqs), len(msgs), ",".join(other) or "none"))
if errs:
    print("ERR " + "; ".join(errs))
EOF
)" || fail "API log check crashed"
echo "---- API log: $(head -1 <<<"$CHECK")"
if grep -q '^ERR' <<<"$CHECK"; then
    fail "$(grep '^ERR' <<<"$CHECK")"
fi

echo "---- timings (s): ready1=$READY1 mcp1=$MCPUP1 reply1=$REPLY1 kill=$KILLT ready2=$READY2 mcp2=$MCPUP2 reply2=$REPLY2 total=$(since "$T0")"
echo "     transcript: $TRANSCRIPT"
RESULT=PASS
echo "PASS"
