. "$(dirname "$0")/lab.sh"; lab_init; P=$T/proj; mkdir -p $P; trust $P
mark() { echo "$(date +%s.%N | cut -c1-14) MARK $*" >> $T/w.log; }
start c $P --permission-mode default; waitfor c '^❯ *$' 40
python3 "$(dirname "$0")/watch_status.py" $H/.claude/sessions $T/w.log & WP=$!
sleep 0.5
PP=$(tm display -p -t c '#{pane_pid}'); echo pane_pid=$PP; ps -o pid,ppid,args --ppid $PP; ls $H/.claude/sessions
SF=$(ls $H/.claude/sessions/*.json); cat $SF; echo; echo "stat22=$(awk '{print $22}' /proc/$PP/stat)"
touch $T/hold; mark say held; say c "held one"; waitfor c 'esc to interrupt' 20; sleep 1.5; mark Escape; tm send-keys -t c Escape; sleep 1.5; rm $T/hold; sleep 1
screen c | tail -8
mark say RUN; say c "RUN: sleep 2"; sleep 3; screen c | tail -14; mark Enter-accept; tm send-keys -t c Enter; waitfor c 'TOOL DONE' 20; sleep 0.5
mark say RUN esc; say c "RUN: sleep 1"; sleep 2.5; mark Escape-at-dialog; tm send-keys -t c Escape; sleep 1.5; screen c | tail -6
mark say BGRUN; say c "BGRUN: sleep 8"; sleep 2.5; screen c | tail -12; mark Enter-accept-bg; tm send-keys -t c Enter; sleep 12; screen c | tail -10
mark say RUN fg-esc; say c "RUN: sleep 20"; sleep 2.5; mark Enter-accept; tm send-keys -t c Enter; sleep 2; mark Escape-during-tool; tm send-keys -t c Escape; sleep 2
mark SIGTERM; kill -TERM $(python3 -c "import json;print(json.load(open('$SF'))['pid'])"); sleep 2
kill $WP; cat $T/w.log | grep -v reads=; grep reads= $T/w.log | tail -1
lab_done
