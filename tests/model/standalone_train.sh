#!/bin/sh
# End-to-end check of `phalanx-data` and `phalanx-worker --standalone` on a
# small generated corpus: the train and eval losses must fall, the saved model
# must load back, SIGTERM must stop cleanly after the current step with a
# summary, and bad flags must exit 2 naming the flag.
#   usage: standalone_train.sh BIN_DIR WORK_DIR
set -eu
# Test machines are shared: idle OpenMP threads that spin while the other core
# is busy elsewhere can slow a run tenfold. Sleeping waits keep this test quick;
# they do not change any result.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work/text"
fail() { echo "FAIL: $*"; exit 1; }

# A learnable corpus: short sentences from a tiny grammar, deterministic.
awk 'BEGIN {
  split("the a one every some", d, " "); split("cat dog bird fish fox", n, " ");
  split("runs sleeps eats jumps sings", v, " "); split("quickly slowly happily loudly", a, " ");
  s = 12345;
  for (i = 0; i < 4000; i++) {
    s = (s * 1103515245 + 12345) % 2147483648; x = int(s / 65536);
    printf "%s %s %s %s.\n", d[x % 5 + 1], n[int(x / 5) % 5 + 1], v[int(x / 25) % 5 + 1], a[int(x / 125) % 4 + 1];
  }
}' > "$work/text/corpus.txt"

"$bin/phalanx-data" --out "$work/shards" --val-fraction 0.1 "$work/text/corpus.txt" > "$work/data.log"
grep -q '^summary .*train_shards=1 .*val_shards=1' "$work/data.log" || fail "phalanx-data summary: $(cat "$work/data.log")"

"$bin/phalanx-worker" --standalone --model tiny --data "$work/shards" --steps 80 --batch 8 --seq 64 \
  --lr 3e-3 --warmup 5 --eval-every 40 --eval-batches 4 --threads 2 --seed 1 \
  --save "$work/model.bin" > "$work/train.log"
cat "$work/train.log" | grep -E '^(config|eval|summary|saved)'

# mean loss of the first and last 10 steps; first and last eval loss
losses=$(sed -n 's/^step=[0-9]*\/[0-9]* loss=\([0-9.]*\).*/\1/p' "$work/train.log")
n=$(echo "$losses" | wc -l)
[ "$n" -eq 80 ] || fail "expected 80 step lines, got $n"
first=$(echo "$losses" | head -10 | awk '{s += $1} END {print s / NR}')
last=$(echo "$losses" | tail -10 | awk '{s += $1} END {print s / NR}')
vals=$(sed -n 's/^eval step=[0-9]* val_loss=\([0-9.]*\).*/\1/p' "$work/train.log")
vfirst=$(echo "$vals" | head -1)
vlast=$(echo "$vals" | tail -1)
echo "train loss $first -> $last, val loss $vfirst -> $vlast"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "train loss did not fall by 1.0: $first -> $last"
awk -v a="$vfirst" -v b="$vlast" 'BEGIN { exit !(b < a - 1.0) }' || fail "val loss did not fall by 1.0: $vfirst -> $vlast"
grep -q 'stopped=completed' "$work/train.log" || fail "no completed summary"

# the saved model loads back and starts where training ended
"$bin/phalanx-worker" --standalone --model "$work/model.bin" --data "$work/shards" --steps 1 \
  --batch 8 --seq 64 --eval-every 1 --eval-batches 4 --threads 2 > "$work/reload.log"
v0=$(sed -n 's/^eval step=0 val_loss=\([0-9.]*\).*/\1/p' "$work/reload.log")
awk -v a="$v0" -v b="$vlast" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-3) }' \
  || fail "reloaded model's val loss $v0 differs from the trained one's $vlast"
echo "reloaded model: val loss $v0"

# SIGTERM: finishes the step in flight, prints the summary, exits 0
"$bin/phalanx-worker" --standalone --model tiny --data "$work/shards" --steps 1000000 --batch 4 \
  --seq 32 --eval-every 0 --threads 1 > "$work/term.log" 2>&1 &
pid=$!
i=0
while ! grep -q '^step=5/' "$work/term.log" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 300 ] || { kill -9 $pid; fail "training did not start"; }
  sleep 0.1
done
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM"
grep -q '^summary .*stopped=signal' "$work/term.log" || fail "no summary with stopped=signal after SIGTERM"
grep '^summary' "$work/term.log"

# bad flags exit 2 and name the flag
for args in "--steps 0" "--lr x" "--batch -3" "--device tpu" "--model nosuchmodel" "--threads 99999" "--nope"; do
  rc=0
  # shellcheck disable=SC2086
  "$bin/phalanx-worker" --standalone $args > "$work/flag.log" 2>&1 || rc=$?
  flag=${args%% *}
  [ $rc -eq 2 ] || fail "'$args' exited $rc, expected 2"
  grep -q -- "$flag" "$work/flag.log" || fail "'$args': message does not name $flag: $(cat "$work/flag.log")"
done
echo "bad flags: exit 2 naming the flag"
rm -rf "$work"
echo "standalone_train: ok"
