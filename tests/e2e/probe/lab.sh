# Helpers for probing the real Claude Code by hand (tests/e2e/NOTES.md, "The agent seam").
# Source it: `. tests/e2e/probe/lab.sh; lab_init` makes $T (temp dir, HOME=$T/home, a private
# tmux socket $T/sock, the fake API on $PORT holding replies while $T/hold exists);
# `start NAME CWD ARGS...` runs claude in a pane; `lab_done` ends the panes, server and API.
# Never touches the default tmux server.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NM=$HERE/../node_modules
CLAUDE_BIN=$NM/@anthropic-ai/claude-code-linux-x64/claude
KEY=sk-ant-api03-ccs-e2e-fake-key-000000000000000000000000000000
unset TMUX TMUX_PANE
export LC_ALL=C.UTF-8
lab_init() {
  T=$(mktemp -d /tmp/ccs-lab.XXXXXX); SOCK=$T/sock; H=$T/home
  mkdir -p $H $T/tmp $T/bin; ln -s $CLAUDE_BIN $T/bin/claude
  python3 $HERE/../fake_api.py $T/api.log --hold-file $T/hold ${FAKE_ARGS:-} > $T/api.port 2>$T/api.err &
  API_PID=$!
  for i in $(seq 50); do [ -s $T/api.port ] && break; sleep 0.1; done
  PORT=$(head -1 $T/api.port)
  tm new-session -d -s keeper sleep 100000
}
tm() { env PATH=$T/bin:/usr/bin:/bin tmux -S "$SOCK" -f /dev/null "$@"; }
trust() { # .claude.json: onboarding done, the key approved, the given dirs trusted
  python3 - "$H/.claude.json" "$@" <<'PY'
import json,sys,os
p=sys.argv[1]
d=json.load(open(p)) if os.path.exists(p) else {}
d.setdefault("hasCompletedOnboarding",True); d["theme"]="dark"
d["customApiKeyResponses"]={"approved":["%s"%"000000000000000000000000000000"[-20:]],"rejected":[]}
pr=d.setdefault("projects",{})
for c in sys.argv[2:]: pr.setdefault(c,{})["hasTrustDialogAccepted"]=True
json.dump(d,open(p,"w"))
PY
}
# start NAME CWD args...
start() { local n=$1 c=$2; shift 2
  tm new-session -d -s "$n" -x 200 -y 50 -c "$c" \
   env -i HOME=$H PATH=$T/bin:/usr/bin:/bin TMPDIR=$T/tmp LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=xterm-256color SHELL=/bin/bash \
   ANTHROPIC_API_KEY=$KEY ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
   DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 ${EXTRA_ENV:-} claude "$@"
  tm set-option -t "$n" remain-on-exit on >/dev/null
}
screen() { tm capture-pane -p -J -S -300 -t "$1" 2>/dev/null | sed 's/\xc2\xa0/ /g; s/[[:space:]]*$//'; }
waitfor() { local t=${3:-30} s=$(date +%s.%N); while ! screen "$1" | grep -Eq -- "$2"; do
  if (( $(echo "$(date +%s.%N) - $s > $t" | bc) )); then echo "TIMEOUT waiting $2"; return 1; fi; sleep 0.1; done; }
say() { tm send-keys -t "$1" -l -- "$2"; sleep 0.3; tm send-keys -t "$1" Enter; }
lab_done() { for s in $(tm list-sessions -F '#{session_name}' | grep -vx keeper); do tm kill-session -t $s; done; sleep 1.5; tm kill-server; kill $API_PID; [ -n "${KEEP:-}" ] || { sleep 1; rm -rf "$T"; }; }
