. "$(dirname "$0")/lab.sh"; lab_init; P=$T/proj; mkdir -p $P; trust $P
A=$(cat /proc/sys/kernel/random/uuid)
start c $P --session-id $A; waitfor c '^❯ *$' 40; say c "old message"; waitfor c "ECHO: old message"; tm kill-session -t c; sleep 1.5
TR=$(find $H/.claude/projects -name "$A.jsonl")
python3 - $TR <<'PY'
import json,sys,datetime
p=sys.argv[1]; out=[]
for l in open(p):
    j=json.loads(l)
    if "timestamp" in j:
        t=datetime.datetime.fromisoformat(j["timestamp"].replace("Z","+00:00"))-datetime.timedelta(hours=3)
        j["timestamp"]=t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]+"Z"
    out.append(json.dumps(j))
open(p,"w").write("\n".join(out)+"\n")
PY
python3 - $H/.claude.json <<'PY'
import json,sys,time
p=sys.argv[1]; d=json.load(open(p)); d["cachedGrowthBookFeatures"]={"tengu_gleaming_fair_reuse":True}; d["cachedGrowthBookFeaturesAt"]=int(time.time()*1000); json.dump(d,open(p,"w"))
PY
cp $TR $T/tr.bak
try() { local n=$1; shift; cp $T/tr.bak $TR; start $n $P --resume $A "$@"; sleep 4; if screen $n | grep -q 'Resume from summary'; then echo "$n: DIALOG"; else echo "$n: no dialog"; fi; screen $n | grep -v '^$' | grep -v '───' | tail -7; tm kill-session -t $n; sleep 1; }
EXTRA_ENV="CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 CLAUDE_CODE_RESUME_TOKEN_THRESHOLD=1" try d1
EXTRA_ENV="CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1" try d2
echo '{"resumeReturnDismissed":true}' > $T/s.json
EXTRA_ENV="CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 CLAUDE_CODE_RESUME_TOKEN_THRESHOLD=1" try d3 --settings $T/s.json
EXTRA_ENV="CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 CLAUDE_CODE_RESUME_TOKEN_THRESHOLD=1 CLAUDE_CODE_RESUME_THRESHOLD_MINUTES=1000000000" try d4
EXTRA_ENV="CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 CLAUDE_CODE_RESUME_TOKEN_THRESHOLD=1000000000000" try d5
lab_done; echo T=$T
