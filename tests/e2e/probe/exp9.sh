# The "resume from summary" dialog offline (NOTES.md, (e)): flags in the flag cache, a summary
# precomputed and persisted by a first claude over five turns, the transcript aged 3 h, then --resume.
cd "$(dirname "$0")"
. ./lab.sh; lab_init; P=$T/proj; mkdir -p $P; trust $P
python3 - $H/.claude.json <<'PY'
import json,sys,time
p=sys.argv[1]; d=json.load(open(p)); f={k:True for k in ["tengu_gleaming_fair_reuse","tengu_sepia_moth","tengu_amber_packet"]}
d["cachedGrowthBookFeatures"]=f; d["cachedGrowthBookFeaturesAt"]=int(time.time()*1000)
d["cachedFeatureFlags"]=f; d["cachedFeatureFlagsAt"]=int(time.time()*1000)
json.dump(d,open(p,"w"))
PY
echo '{"precomputeArmTokens":1}' > $T/s.json
export EXTRA_ENV="CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 CLAUDE_CODE_RESUME_TOKEN_THRESHOLD=1 ${MORE_ENV:-}"
A=$(cat /proc/sys/kernel/random/uuid)
start c $P --session-id $A --settings $T/s.json --debug; waitfor c '^❯ *$' 40; for k in 1 2 3 4 5; do say c "old message $k"; waitfor c "ECHO: old message $k"; done; sleep 5
echo "---- api after first turn: $(wc -l < $T/api.log)"; python3 -c '
import sys,json
for l in open(sys.argv[1]):
    j=json.loads(l); b=j.get("body") or {}; m=b.get("messages") or []
    print(j.get("method"), j.get("path"), len(m), str(m[-1])[:200] if m else "")' $T/api.log
find $H/.claude/projects -type f | sed "s|$H||"
tm kill-session -t c; sleep 1.5
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
N0=$(wc -l < $T/api.log)
start d $P --resume $A --settings $T/s.json --debug
for i in $(seq 40); do sleep 0.25; screen d | grep -q 'Resume from summary' && { echo "DIALOG after $i"; break; }; done
screen d | grep -v '^$' | grep -v '───' | tail -8
echo "---- api since resume:"; tail -n +$((N0+1)) $T/api.log | cut -c1-300
grep -h -i -E 'precompute|sidecar|summary|stale' $H/.claude/debug/*.txt | cut -c1-250 | tail -20
lab_done
