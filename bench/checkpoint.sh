#!/bin/sh
# bench/checkpoint: what checkpoints cost, each figure against a baseline
# measured in this same script (absolute times on this machine are noisy).
#   1. save throughput: px_ckpt_write of a gpt2-124m state (params, m, v:
#      1.5 GB) vs dd conv=fsync of as many bytes into the same folder;
#   2. restore: px_ckpt_load (verify every byte, assemble) vs cat of the same
#      data file, caches dropped before each when allowed (else both warm);
#   3. step-time overhead of async saving every 10 steps vs none, on `small`
#      and `gpt2-124m` (one group, phalanx-launch), from the launcher's
#      per-step timestamps over the steps after the first 10.
# OPENBLAS_CORETYPE is set (to $CORETYPE, default Zen) for every run of part 3,
# both sides alike: Debian's OpenBLAS picks a slow generic kernel otherwise.
# Usage: bench/checkpoint.sh [SCRATCH_DIR]   (build first: make build)
set -eu
BIN=${BUILD:-build}/bin
DIR=${1:-/tmp/phalanx-bench-ckpt}
REPS=${REPS:-3}
export OPENBLAS_CORETYPE=${CORETYPE:-Zen}
rm -rf "$DIR" && mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT

now() { date +%s.%N; }
drop() { sync; if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo cold; else echo warm; fi; }

echo "== 1. save: px_ckpt_write vs dd conv=fsync (gpt2-124m state), $REPS reps"
best_ours=0; best_dd=0
for i in $(seq "$REPS"); do
  rm -rf "$DIR/ck" "$DIR/dd.bin"
  out=$("$BIN/bench_ckpt_save" gpt2-124m "$DIR/ck" save)
  bytes=$(echo "$out" | sed -n 's/^bytes=//p'); s=$(echo "$out" | sed -n 's/^save_s=//p')
  t0=$(now); dd if=/dev/zero of="$DIR/dd.bin" bs=1M count=$((bytes / 1048576)) conv=fsync 2>/dev/null; t1=$(now)
  d=$(echo "$t1 - $t0" | bc -l)
  ours=$(echo "$bytes / $s / 1000000" | bc -l); theirs=$(echo "$((bytes / 1048576)) * 1048576 / $d / 1000000" | bc -l)
  printf "  rep %d: ours %.0f MB/s (%.2f s), dd %.0f MB/s (%.2f s), ratio %.2f\n" "$i" "$ours" "$s" "$theirs" "$d" \
    "$(echo "$ours / $theirs" | bc -l)"
  best_ours=$(echo "if ($ours > $best_ours) $ours else $best_ours" | bc -l)
  best_dd=$(echo "if ($theirs > $best_dd) $theirs else $best_dd" | bc -l)
done
printf "save: best ours %.0f MB/s, best dd %.0f MB/s, ratio %.2f (target >= 0.80)\n" "$best_ours" "$best_dd" \
  "$(echo "$best_ours / $best_dd" | bc -l)"

echo "== 2. restore: px_ckpt_load vs cat > /dev/null of the same file"
rm -f "$DIR/dd.bin"
cache=$(drop); out=$("$BIN/bench_ckpt_save" gpt2-124m "$DIR/ck" load); l=$(echo "$out" | sed -n 's/^load_s=//p')
drop >/dev/null; t0=$(now); cat "$DIR/ck/step_00000001/rank00000.bin" > /dev/null; t1=$(now)
c=$(echo "$t1 - $t0" | bc -l)
printf "restore (%s caches): ours %.2f s, cat %.2f s, ratio cat/ours %.2f\n" "$cache" "$l" "$c" "$(echo "$c / $l" | bc -l)"
rm -rf "$DIR/ck"

# Seconds from the line of step FIRST to the line of the last step.
span() { awk -v first="$2" '/\] step +[0-9]+ \|/ { t = substr($2, 1, length($2) - 2) + 0; n = $4 + 0;
         if (n == first) a = t; if (n > last) { last = n; b = t } } END { printf "%.1f %d\n", b - a, last - first }' "$1"; }

run_job() { # MODEL STEPS WITH_CKPT -> launcher output file
  out="$DIR/job-$1-$3.txt"
  set -- "$1" "$2" "$3"
  extra=""
  [ "$3" = yes ] && extra="--checkpoint-dir $DIR/ckpt-$1 --checkpoint-every 10 --checkpoint-keep 2"
  # shellcheck disable=SC2086
  "$BIN/phalanx-launch" --groups 1 --model "$1" --steps "$2" --log-dir "$DIR/log-$1-$3" \
    --http 127.0.0.1:18099 --bind tcp://127.0.0.1:17799 $extra \
    -- --global-batch "$GB" --micro-batch "$GB" --seq "$SEQ" --threads 2 > "$out" 2>&1
  rm -rf "$DIR/ckpt-$1"
  echo "$out"
}

echo "== 3. step time with saving every 10 steps vs none (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, both runs)"
for spec in "small 210 8 128" "gpt2-124m 40 2 64"; do
  set -- $spec
  GB=$3; SEQ=$4
  base=$(span "$(run_job "$1" "$2" no)" 10); with=$(span "$(run_job "$1" "$2" yes)" 10)
  b=${base% *}; w=${with% *}; n=${base#* }
  printf "%s: %d steps after step 10: none %.1f s, every 10 %.1f s, overhead %+.1f%% (target < 3%%)\n" "$1" "$n" "$b" "$w" \
    "$(echo "($w / $b - 1) * 100" | bc -l)"
done
