#!/bin/sh
# Training-step benchmark, phalanx against PyTorch eager on the same model,
# weights and batch (`small`, B=8, T=256 by default), at 1 and 2 threads.
#   bench/train_step.sh [BUILD_DIR]        (default build; needs bench_train_step built)
# Environment:
#   PX_BENCH_CORETYPE  OpenBLAS kernel for BOTH sides: "auto" (default: unset
#                      OPENBLAS_CORETYPE so OpenBLAS detects this CPU) or a name
#                      such as Haswell, SkylakeX, Prescott (exported as
#                      OPENBLAS_CORETYPE). PyTorch here (Debian python3-torch)
#                      calls the same system OpenBLAS, so both sides get the
#                      same sgemm.
#   PX_BENCH_STEPS     timed steps per run (default 5)
#   PX_BENCH_ROUNDS    rounds of (phalanx, every PyTorch configuration), run one
#                      after the other so both sides see the same machine load
#                      (default 3); the best step of all rounds is compared
#   PX_BENCH_ARGS      extra arguments for bench_train_step (e.g. "--model tiny")
# Prints phalanx's lines (tokens/s, GFLOP/s, fraction of the sgemm rate), PyTorch's
# lines, and the speedup per core count: wall clock, best step over all rounds;
# at 1 core also the ratio of CPU time per step, which a busy machine disturbs less. PyTorch is skipped, with a note, when
# /usr/bin/python3 cannot import torch.
set -eu
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
steps=${PX_BENCH_STEPS:-5}
coretype=${PX_BENCH_CORETYPE:-auto}
if [ "$coretype" = auto ]; then
  unset OPENBLAS_CORETYPE
  echo "note: OPENBLAS_CORETYPE unset for both phalanx and PyTorch (OpenBLAS auto-detects the CPU)"
else
  export OPENBLAS_CORETYPE="$coretype"
  echo "note: OPENBLAS_CORETYPE=$coretype set by this script for both phalanx and PyTorch"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
rounds=${PX_BENCH_ROUNDS:-3}
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo "note: PyTorch not importable by /usr/bin/python3; no ratio printed"
# PyTorch at 1 thread: torch and OpenBLAS both single-threaded. At 2 threads
# its default (2 OpenMP threads spinning beside 2 OpenBLAS threads on 2 cores)
# oversubscribes badly, so several splits are run and the best one counts.
py() { # OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMP_WAIT_POLICY torch-threads cores label
  printf 'pytorch config: %s: ' "$6"
  OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$2 OMP_WAIT_POLICY=$3 /usr/bin/python3 "$here/train_step.py" \
    --dump "$dir" --threads "$4" --cores "$5" --steps "$steps" | tee -a "$dir/out.txt"
}
r=1
while [ $r -le "$rounds" ]; do
  echo "round $r/$rounds"
  # shellcheck disable=SC2086
  "$build/bin/bench_train_step" --dump "$dir" --threads 1,2 --steps "$steps" ${PX_BENCH_ARGS:-} | tee -a "$dir/out.txt"
  if [ $have_torch = 1 ]; then
    py 1 1 ACTIVE 1 1 "torch 1 thread, OpenBLAS 1 thread"
    py 2 2 ACTIVE 2 2 "torch 2 threads, OpenBLAS 2 threads (default)"
    py 2 2 PASSIVE 2 2 "torch 2 threads, OpenBLAS 2 threads, OMP_WAIT_POLICY=PASSIVE"
    py 2 1 ACTIVE 2 2 "torch 2 threads, OpenBLAS 1 thread"
    py 1 2 ACTIVE 1 2 "torch 1 thread, OpenBLAS 2 threads"
  fi
  r=$((r + 1))
done
awk '
  function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
  /impl=/ { impl = get("impl"); co = get("cores"); ms = get("ms_per_step") + 0; cpu = get("cpu_ms") + 0
    if (impl == "phalanx") {
      if (!(co in c) || ms < c[co]) { c[co] = ms; fr[co] = get("fraction_of_sgemm"); gf[co] = get("gflops"); sg[co] = get("sgemm_gflops") }
      if (!(co in cc) || cpu < cc[co]) cc[co] = cpu
    } else if (impl ~ /^pytorch/) {
      if (!(co in p) || ms < p[co]) p[co] = ms
      if (!(co in pc) || cpu < pc[co]) pc[co] = cpu
    } }
  END { for (t = 1; t <= 2; t++) {
      if (t in c) printf "best cores=%d phalanx_ms=%.1f gflops=%s sgemm_gflops=%s fraction_of_sgemm=%s\n", t, c[t], gf[t], sg[t], fr[t]
      if ((t in c) && (t in p))
        printf "ratio cores=%d speedup_vs_pytorch=%.2f (best pytorch %.1f ms / best phalanx %.1f ms per step)\n", t, p[t] / c[t], p[t], c[t]
    }
    if ((1 in cc) && (1 in pc))
      printf "ratio cores=1 cpu_time_speedup_vs_pytorch=%.2f (pytorch %.1f / phalanx %.1f CPU ms per step)\n", pc[1] / cc[1], pc[1], cc[1]
  }
' "$dir/out.txt"
