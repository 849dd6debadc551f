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
# After the run, `phalanxctl plot` draws the loss with each drop and heal
# marked into phalanx-run/loss.png and the path is printed; the exit status
# stays the launcher's (a plot that cannot be drawn only says why).
set -eu
BUILD=${1:-build}
# The demo starts fresh: checkpoints of an earlier demo would resume it at its
# end. (A real job keeps its folder: restarting with the same flags resumes.)
rm -rf phalanx-run/checkpoints
rm -f phalanx-run/worker-*.out # the plot draws this run's lines only
# Not exec'd, since the plot comes after: the launcher runs in the
# background, SIGINT and SIGTERM are passed on to it (it stops the job), and
# its exit status is this script's.
"$BUILD/bin/phalanx-launch" \
  --groups 3 --model small --steps 250 \
  --chaos-kill-every 10 --chaos-seed 1 --chaos-until-step 100 \
  --mode auto --auto-failures-per-hour 60 --auto-window 15 --auto-hold 5 \
  --http 127.0.0.1:8080 --bind tcp://127.0.0.1:7777 --log-dir phalanx-run \
  --checkpoint-dir phalanx-run/checkpoints --checkpoint-every 50 \
  -- --global-batch 12 --micro-batch 4 --seq 128 --lr 0.002 --warmup 20 --eval-every 50 \
     --inner-steps 10 &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || :' INT
trap 'kill -TERM "$pid" 2>/dev/null || :' TERM
rc=0
wait "$pid" || rc=$?
# A trapped signal ends the wait early: wait again for the launcher's own status.
while kill -0 "$pid" 2>/dev/null; do
  rc=0
  wait "$pid" || rc=$?
done
trap - INT TERM
if "$BUILD/bin/phalanxctl" plot --log-dir phalanx-run --out phalanx-run/loss.png; then
  echo "loss curve with drops and heals: $(pwd)/phalanx-run/loss.png"
else
  echo "demo: no plot (see the message above); the run's logs are in phalanx-run/" >&2
fi
exit "$rc"
