. "$(dirname "$0")/lab.sh"; lab_init; P=$T/proj; mkdir -p $P; trust $P
now() { date +%s.%N; }
# wait for pane death; print elapsed, status, last lines
deadwait() { local s=$1 t0=$2; for i in $(seq 300); do d=$(tm display -p -t "$s" '#{pane_dead} #{pane_dead_status}'); [ "${d%% *}" = 1 ] && break; sleep 0.05; done
  echo "$s: dead=$d after $(echo "$(now) - $t0" | bc)s"; screen $s | grep -v '^$' | tail -4; }
A=$(cat /proc/sys/kernel/random/uuid)
# plain claude, no turn
start plain $P; waitfor plain '^❯ *$' 40
ls $H/.claude/sessions/; cat $H/.claude/sessions/*.json; echo
B=$(python3 -c 'import json,glob;print(json.load(open(glob.glob("'$H'/.claude/sessions/*.json")[0]))["sessionId"])')
tm kill-session -t plain; sleep 1.5
echo "transcripts after untouched plain exit:"; find $H/.claude/projects -name '*.jsonl' 2>/dev/null; ls $H/.claude/sessions/
t0=$(now); start r1 $P --resume $B; deadwait r1 $t0
t0=$(now); start r2 $P --resume $(cat /proc/sys/kernel/random/uuid); deadwait r2 $t0
# never-used id via --session-id
start sid $P --session-id $A; waitfor sid '^❯ *$' 40; cat $H/.claude/sessions/*.json; echo
say sid "first turn"; waitfor sid "ECHO: first turn"
find $H/.claude/projects -name '*.jsonl'
tm kill-session -t sid; sleep 1.5
t0=$(now); start sid2 $P --session-id $A; deadwait sid2 $t0
t0=$(now); start res $P --resume $A; waitfor res '^❯ *$' 40; echo "resume ready after $(echo "$(now) - $t0" | bc)s"; screen res | grep ECHO
# --session-id while --resume A runs elsewhere
t0=$(now); start sid3 $P --session-id $A; deadwait sid3 $t0
# a --resume with --session-id both
t0=$(now); start both $P --resume $A --session-id $A; deadwait both $t0
lab_done
