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
#   PX_BENCH_STEPS     timed steps per run (default 5), best of them reported
#   PX_BENCH_ARGS      extra arguments for bench_train_step (e.g. "--model tiny")
# Prints phalanx's line (tokens/s, GFLOP/s, fraction of the sgemm rate), PyTorch's
# line, and the speedup per thread count. PyTorch is skipped, with a note, when
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
# shellcheck disable=SC2086
"$build/bin/bench_train_step" --dump "$dir" --threads 1,2 --steps "$steps" ${PX_BENCH_ARGS:-} | tee "$dir/out.txt"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  # PyTorch at 1 thread: torch and OpenBLAS both single-threaded. At 2 threads
  # its default (2 OpenMP threads spinning beside 2 OpenBLAS threads on 2
  # cores) oversubscribes badly, so several splits are run and the best counts.
  py() { # OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMP_WAIT_POLICY torch-threads label
    printf 'pytorch config: %s: ' "$5"
    OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$2 OMP_WAIT_POLICY=$3 /usr/bin/python3 "$here/train_step.py" \
      --dump "$dir" --threads "$4" --steps "$steps" --cores "$6" | tee -a "$dir/out.txt"
  }
  py 1 1 ACTIVE 1 "torch 1 thread, OpenBLAS 1 thread" 1
  py 2 2 ACTIVE 2 "torch 2 threads, OpenBLAS 2 threads (default)" 2
  py 2 2 PASSIVE 2 "torch 2 threads, OpenBLAS 2 threads, OMP_WAIT_POLICY=PASSIVE" 2
  py 2 1 ACTIVE 2 "torch 2 threads, OpenBLAS 1 thread" 2
  py 1 2 ACTIVE 1 "torch 1 thread, OpenBLAS 2 threads" 2
  awk '
    { impl = ""; th = ""; ms = ""
      for (i = 1; i <= NF; i++) { split($i, kv, "=")
        if (kv[1] == "impl") impl = kv[2]; else if (kv[1] == "threads") th = kv[2]
        else if (kv[1] == "cores") th = kv[2]; else if (kv[1] == "ms_per_step") ms = kv[2] }
      if (impl == "phalanx") c[th] = ms
      else if (impl ~ /^pytorch/ && (!(th in p) || ms + 0 < p[th] + 0)) p[th] = ms }
    END { for (t = 1; t <= 2; t++) if ((t in c) && (t in p))
            printf "ratio cores=%d speedup_vs_pytorch=%.2f (best pytorch %.1f ms / phalanx %.1f ms per step)\n", t, p[t] / c[t], p[t], c[t] }
  ' "$dir/out.txt"
else
  echo "note: PyTorch not importable by /usr/bin/python3; no ratio printed"
fi
