#!/bin/sh
# `make demo`: the main job on the embedded local default. Three replica
# groups train the `small` GPT on the demo corpus (Debian's fortunes,
# prepared on first use) while a seeded chaos monkey SIGKILLs a worker about
# every 10 s. Watch the drops and heals scroll by; the last line is the
# JSON summary. Status while it runs: http://127.0.0.1:8080/ or
# `build/bin/phalanxctl status`.
set -eu
BUILD=${1:-build}
# The demo starts fresh: checkpoints of an earlier demo would resume it at its
# end. (A real job keeps its folder: restarting with the same flags resumes.)
rm -rf phalanx-run/checkpoints
exec "$BUILD/bin/phalanx-launch" \
  --groups 3 --model small --steps 250 --data data/demo \
  --chaos-kill-every 10 --chaos-seed 1 \
  --http 127.0.0.1:8080 --bind tcp://127.0.0.1:7777 --log-dir phalanx-run \
  --checkpoint-dir phalanx-run/checkpoints --checkpoint-every 50 \
  -- --global-batch 12 --micro-batch 4 --seq 128 --lr 0.002 --warmup 20 --eval-every 50
