#!/bin/sh
# `make demo`: the main job on the embedded local default. Three replica
# groups train the `small` GPT on the demo corpus (Debian's fortunes,
# prepared on first use) while a seeded chaos monkey SIGKILLs a worker about
# every 10 s until step 100. The job runs in --mode auto: the first kill
# makes the coordinator switch it to DiLoCo (outer steps every 10 steps,
# a line each with the bytes sent), and 15 s after the kills stop it
# switches back to sync (`* mode switched ...` lines with the measured
# reason). Watch the drops and heals scroll by; the last line is the JSON
# summary. Status while it runs (mode, outer steps, bytes):
# http://127.0.0.1:8080/ or `build/bin/phalanxctl status`.
set -eu
BUILD=${1:-build}
# The demo starts fresh: checkpoints of an earlier demo would resume it at its
# end. (A real job keeps its folder: restarting with the same flags resumes.)
rm -rf phalanx-run/checkpoints
exec "$BUILD/bin/phalanx-launch" \
  --groups 3 --model small --steps 250 --data data/demo \
  --chaos-kill-every 10 --chaos-seed 1 --chaos-until-step 100 \
  --mode auto --auto-failures-per-hour 60 --auto-window 15 --auto-hold 5 \
  --http 127.0.0.1:8080 --bind tcp://127.0.0.1:7777 --log-dir phalanx-run \
  --checkpoint-dir phalanx-run/checkpoints --checkpoint-every 50 \
  -- --global-batch 12 --micro-batch 4 --seq 128 --lr 0.002 --warmup 20 --eval-every 50 \
     --inner-steps 10
