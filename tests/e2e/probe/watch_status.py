# Poll a Claude Code sessions dir every 20 ms; log each status change, removal and torn read.
# Usage: watch_status.py SESSIONS_DIR LOGFILE
import json,glob,os,sys,time
d=sys.argv[1]; out=open(sys.argv[2],"a",buffering=1); last={}; torn=0; reads=0
while True:
    for f in glob.glob(d+"/*.json"):
        try: t=open(f).read()
        except OSError: continue
        reads+=1
        try: j=json.loads(t); st=j.get("status")
        except ValueError: torn+=1; out.write("%.3f TORN %s %r\n"%(time.time(),f,t[-80:])); continue
        if last.get(f)!=st: last[f]=st; out.write("%.3f %s status=%s\n"%(time.time(),os.path.basename(f),st))
    for f in list(last):
        if not os.path.exists(f): out.write("%.3f %s REMOVED\n"%(time.time(),os.path.basename(f))); del last[f]
    if reads%500==0: out.write("%.3f reads=%d torn=%d\n"%(time.time(),reads,torn))
    time.sleep(0.02)
