. "$(dirname "$0")/lab.sh"; lab_init; P=$T/proj; mkdir -p $P; trust $P
mark() { echo "$(date +%s.%N | cut -c1-14) MARK $*" >> $T/w.log; }
start c $P --permission-mode default; waitfor c '^❯ *$' 40
python3 "$(dirname "$0")/watch_status.py" $H/.claude/sessions $T/w.log & WP=$!
mark RUN sleep 2; say c "RUN: sleep 2"; sleep 5; screen c | grep -v '^$' | grep -v '───' | tail -8
mark RUN touch; say c "RUN: touch $T/made"; sleep 3; screen c | grep -v '^$' | grep -v '───'| tail -14
mark Enter; tm send-keys -t c Enter; sleep 3; ls $T/made; screen c | grep -v '^$' | grep -v '───'| tail -5
mark RUN touch2; say c "RUN: touch $T/made2"; sleep 3; mark Escape-at-dialog; tm send-keys -t c Escape; sleep 2; screen c | grep -v '^$' | grep -v '───'| tail -5
kill $WP; grep -v reads= $T/w.log
python3 -c "
import json
for l in open('$T/api.log'):
  j=json.loads(l); b=j['body']
  if isinstance(b,dict): print(j['path'], [ (m['role'], str(m['content'])[:100]) for m in b.get('messages',[]) if m['role']!='system'][-2:])
"
lab_done
