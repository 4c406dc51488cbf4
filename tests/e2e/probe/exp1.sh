. "$(dirname "$0")/lab.sh"; lab_init; echo T=$T
D1="$T/p.dot_under sp"; D2="$T/é日本🙂"; LONG=$T/$(printf 'x%.0s' $(seq 120))/$(printf 'y%.0s' $(seq 100)); 
mkdir -p "$D1" "$D2" "$LONG" $T/real; ln -s $T/real $T/link
trust "$D1" "$D2" "$LONG" "$T/link" "$T/real"
i=0; for d in "$D1" "$D2" "$LONG" "$T/link"; do i=$((i+1)); start s$i "$d"; done
for i in 1 2 3 4; do waitfor s$i '^❯ *$' 40 || screen s$i | tail -20; say s$i "hello $i"; done
for i in 1 2 3 4; do waitfor s$i "ECHO: hello $i" 30; done
find $H/.claude/projects -name '*.jsonl' | sed "s|$T|\$T|"
ls $H/.claude/projects/
lab_done
echo "LONG=$LONG"
