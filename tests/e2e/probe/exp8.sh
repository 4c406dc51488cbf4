. "$(dirname "$0")/lab.sh"; FAKE_ARGS="--delay 0.5" lab_init; P=$T/proj; mkdir -p $P $T/cfg; trust $P; cp $H/.claude.json $T/cfg/.claude.json
mark() { echo "$(date +%s.%N | cut -c1-14) MARK $*" >> $T/w.log; }
EXTRA_ENV="CLAUDE_CONFIG_DIR=$T/cfg" start c1 $P; EXTRA_ENV="CLAUDE_CONFIG_DIR=$T/cfg" start c2 $P
waitfor c1 '^❯ *$' 40; waitfor c2 '^❯ *$' 40; sleep 1
echo "panes: $(tm list-panes -a -F '#{session_name}:#{pane_pid}' | tr '\n' ' ')"; ls $T/cfg/sessions
python3 "$(dirname "$0")/watch_status.py" $T/cfg/sessions $T/w.log & WP=$!
mark say slow; say c1 "a fairly long message so that the slow stream takes a good many seconds to finish"; waitfor c1 'esc to interrupt' 20; sleep 2; mark Escape-while-streaming; tm send-keys -t c1 Escape; sleep 2
screen c1 | grep -v '^$' | grep -v '───' | tail -6
kill $WP; grep -v reads= $T/w.log
lab_done
