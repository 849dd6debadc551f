#!/bin/sh
# Training-step benchmark: phalanx against PyTorch on the same model, weights
# and batch (`small`, B=8, T=256 by default), at 1 and 2 threads. PyTorch
# runs the model a PyTorch user writes (bench/torch_gpt.py: nanoGPT layout,
# SDPA, fused AdamW), eager and under torch.compile, both in float32.
#   bench/train_step.sh [BUILD_DIR]        (default build; needs bench_train_step built)
# Environment:
#   PX_BENCH_PYTHON    interpreter with PyTorch 2.x (default
#                      /opt/phalanx-bench-venv/bin/python when present, else
#                      /usr/bin/python3). Make the venv with:
#                        python3 -m venv /opt/phalanx-bench-venv
#                        /opt/phalanx-bench-venv/bin/pip install torch numpy
#   PX_BENCH_CORETYPE  OPENBLAS_CORETYPE for BOTH sides: "auto" (default: unset,
#                      OpenBLAS detects this CPU) or an OpenBLAS name (Haswell,
#                      Zen, SkylakeX, ...). A name is checked against this CPU's
#                      flags first: a kernel the CPU cannot run dies with SIGILL
#                      (SkylakeX on an AVX2-only EPYC). It only changes a side
#                      that calls OpenBLAS; the PyTorch line says which BLAS it has.
#   PX_BENCH_STEPS     timed steps per run (default 5)
#   PX_BENCH_WARMUP    untimed steps first, per run (default 2; the compile
#                      happens in the first, so it is never timed)
#   PX_BENCH_ROUNDS    rounds of (phalanx, then PyTorch eager and compile at
#                      each thread count), one after the other so both sides
#                      see the same machine load (default 3); the best step of
#                      all rounds is compared
#   PX_BENCH_THREADS   thread counts (default "1 2"), the same for both sides
#   PX_BENCH_MODES     PyTorch modes (default "eager compile")
#   PX_BENCH_ARGS      extra arguments for bench_train_step (e.g.
#                      "--model gpt2-124m --batch 4 --seq 256")
# Every PyTorch run checks that its first-step loss equals phalanx's within
# 1e-4 relative and the script stops, failing, when it does not. It ends with
# the speedup per thread count against eager, against compile and against the
# better of the two: wall clock, best step over all rounds; at 1 thread also
# the ratio of CPU time per step, which a busy machine disturbs less. Then
# the rate (GFLOP/s of the step's counted FLOPs) phalanx would need for 1.5x
# the better mode, against this CPU's FMA peak on as many threads.
set -eu
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
bin=$build/bin/bench_train_step
steps=${PX_BENCH_STEPS:-5}
warmup=${PX_BENCH_WARMUP:-2}
rounds=${PX_BENCH_ROUNDS:-3}
threads=${PX_BENCH_THREADS:-1 2}
modes=${PX_BENCH_MODES:-eager compile}
coretype=${PX_BENCH_CORETYPE:-auto}
venv=/opt/phalanx-bench-venv/bin/python
if [ -n "${PX_BENCH_PYTHON:-}" ]; then python=$PX_BENCH_PYTHON
elif [ -x "$venv" ]; then python=$venv
else python=/usr/bin/python3
fi
[ -x "$bin" ] || { echo "train_step.sh: $bin not found (cmake --build $build --target bench_train_step?)" >&2; exit 2; }

# CPU flags an OpenBLAS core type needs; unknown names are refused rather
# than risked.
coretype_flags() {
  case $(echo "$1" | tr '[:upper:]' '[:lower:]') in
    prescott) echo pni ;;
    core2|atom) echo ssse3 ;;
    penryn|dunnington) echo sse4_1 ;;
    nehalem) echo sse4_2 ;;
    sandybridge) echo avx ;;
    haswell|zen) echo avx2 fma ;;
    skylakex) echo avx512f avx512cd avx512bw avx512dq avx512vl ;;
    cooperlake) echo avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 ;;
    sapphirerapids) echo avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 amx_tile amx_bf16 ;;
    *) return 1 ;;
  esac
}
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
if [ "$coretype" = auto ]; then
  unset OPENBLAS_CORETYPE
  echo "note: OPENBLAS_CORETYPE unset for both phalanx and PyTorch (OpenBLAS auto-detects the CPU)"
else
  need=$(coretype_flags "$coretype") || {
    echo "train_step.sh: PX_BENCH_CORETYPE: '$coretype' is not a core type this script knows the CPU flags of (Prescott, Core2, Atom, Penryn, Dunnington, Nehalem, Sandybridge, Haswell, Zen, SkylakeX, Cooperlake, SapphireRapids, or auto)" >&2
    exit 2
  }
  for f in $need; do
    case $cpu_flags in *" $f "*) ;; *)
      echo "train_step.sh: PX_BENCH_CORETYPE=$coretype needs CPU flag '$f', which this CPU lacks (it would die with SIGILL); use auto" >&2
      exit 2 ;;
    esac
  done
  export OPENBLAS_CORETYPE="$coretype"
  echo "note: OPENBLAS_CORETYPE=$coretype set by this script for both phalanx and PyTorch (CPU has: $need)"
fi

echo "cpu: model=\"$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')\" cores=$(nproc) load=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
blas=$(ldd "$bin" | awk '/libopenblas|libblas|libmkl/ { print $3; exit }')
if [ -n "$blas" ]; then
  real=$(readlink -f "$blas")
  pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1 || true)
  ver=$( [ -n "$pkg" ] && dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo "?")
  echo "phalanx: blas=$real package=${pkg:-?} version=$ver (its openblas_config line follows)"
else
  echo "phalanx: blas=? (ldd $bin names no BLAS library)"
fi

have_torch=0
if "$python" "$here/train_step.py" --info 2>/dev/null; then
  if "$python" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
    have_torch=1
  else
    echo "note: $python has PyTorch < 2 (no scaled_dot_product_attention); no ratio printed. Set PX_BENCH_PYTHON."
  fi
else
  echo "note: PyTorch not importable by $python; no ratio printed. Set PX_BENCH_PYTHON."
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tlist=$(echo "$threads" | tr ' ' ',')
c_loss=
r=1
while [ $r -le "$rounds" ]; do
  echo "round $r/$rounds"
  dump=
  [ $r = 1 ] && dump="--dump $dir"
  # shellcheck disable=SC2086
  "$bin" $dump --threads "$tlist" --steps "$steps" --warmup "$warmup" ${PX_BENCH_ARGS:-} >"$dir/c.txt" || {
    cat "$dir/c.txt"; echo "train_step.sh: FAILED: bench_train_step (above)" >&2; exit 1; }
  tee -a "$dir/out.txt" <"$dir/c.txt"
  if [ -z "$c_loss" ]; then
    c_loss=$(sed -n 's/.*impl=phalanx .*first_loss=\([^ ]*\).*/\1/p' "$dir/c.txt" | head -1)
    [ -n "$c_loss" ] || { echo "train_step.sh: no first_loss in phalanx's output" >&2; exit 1; }
  fi
  if [ $have_torch = 1 ]; then
    for t in $threads; do
      for m in $modes; do
        flag=
        [ "$m" = compile ] && flag=--compile
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=$t "$python" "$here/train_step.py" --dump "$dir" --threads "$t" \
          --steps "$steps" --warmup "$warmup" --c-loss "$c_loss" $flag >"$dir/py.txt" 2>"$dir/err.txt" || {
            cat "$dir/py.txt"; cat "$dir/err.txt" >&2
            echo "train_step.sh: FAILED: PyTorch $m at $t threads (above)" >&2
            exit 1
          }
        tee -a "$dir/out.txt" <"$dir/py.txt"
      done
    done
  fi
  r=$((r + 1))
done
awk -v threads="$threads" '
  function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
  function keep(arr, carr, key, ms, cpu) {
    if (!(key in arr) || ms < arr[key]) arr[key] = ms
    if (!(key in carr) || cpu < carr[key]) carr[key] = cpu }
  /^bench=train_step/ { fps = get("flops_per_step") + 0 }
  /impl=/ { impl = get("impl"); co = get("cores"); ms = get("ms_per_step") + 0; cpu = get("cpu_ms") + 0
    if (impl == "phalanx") {
      if (get("fma_peak_gflops") + 0 > pk[co]) pk[co] = get("fma_peak_gflops") + 0
      if (!(co in c) || ms < c[co]) { fr[co] = get("fraction_of_sgemm"); gf[co] = get("gflops"); sg[co] = get("sgemm_gflops") }
      keep(c, cc, co, ms, cpu)
    } else if (impl == "pytorch-eager") keep(e, ec, co, ms, cpu)
    else if (impl == "pytorch-compile") keep(k, kc, co, ms, cpu) }
  function ratio(name, t, base, ours) { printf " vs_%s=%.2f (%.1f ms)", name, base / ours, base }
  END { n = split(threads, ts, " ")
    for (i = 1; i <= n; i++) { t = ts[i]
      if (!(t in c)) continue
      printf "best threads=%d phalanx_ms=%.1f gflops=%s sgemm_gflops=%s fraction_of_sgemm=%s\n", t, c[t], gf[t], sg[t], fr[t]
      if (!(t in e) && !(t in k)) continue
      printf "speedup threads=%d", t
      if (t in e) ratio("eager", t, e[t], c[t])
      if (t in k) ratio("compile", t, k[t], c[t])
      better = (t in e) ? e[t] : k[t]; if ((t in k) && k[t] < better) better = k[t]
      printf " vs_better=%.2f target=1.5 %s\n", better / c[t], (better / c[t] >= 1.5 ? "met" : "NOT_MET")
      if (fps > 0 && pk[t] > 0) {
        need = 1.5 * fps / (better * 1e6)
        printf "target_needs threads=%d gflops=%.1f fma_peak_gflops=%.1f of_peak=%.2f pytorch_of_peak=%.2f%s\n", t, need, pk[t],
          need / pk[t], fps / (better * 1e6) / pk[t], (need > pk[t] ? " (above the peak: no float32 step reaches 1.5x here)" : "") }
      if (t == 1) {
        printf "cpu_time_speedup threads=1"
        if (t in ec) printf " vs_eager=%.2f (%.1f / %.1f CPU ms)", ec[t] / cc[t], ec[t], cc[t]
        if (t in kc) printf " vs_compile=%.2f (%.1f / %.1f CPU ms)", kc[t] / cc[t], kc[t], cc[t]
        printf "\n" }
    } }
' "$dir/out.txt"
