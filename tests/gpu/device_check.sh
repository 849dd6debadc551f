#!/bin/bash
# The GPU tests on a lent GPU machine that has none of the project's
# libraries: unpacks the bundle of scripts/gpu-bundle.sh, finds CUDA's own
# libraries (cudart, cuBLAS, NCCL) on that machine, and runs every test of
# tests/gpu.cmake directly (ctest's files name this machine's paths), each
# bounded by a timeout, then bench/gpu_step.py (fp32 at B=4; bf16 at B=4,
# and at B=16 with each attention: gpu_step_bf16), bench_gpu_ops (bench/gpu_ops.cpp: each CUDA
# op's share of a gpt2-124m step at B=16, T=1024 in fp32, bf16 math and bf16
# storage: gpu_ops_bench) and bench/checkpoint.py's
# step-time overhead of saving on the GPU (gpu_ckpt_overhead).
#
#   [BASELINE_BUNDLE=OLD.tar.xz] [CKPT_SHAPES="4x1024x30 ..."] [BASELINE_SHAPES=...]
#     tests/gpu/device_check.sh BUNDLE.tar.xz OUT_DIR [TEST...]
#
# gpu_ckpt_overhead runs gpt2-124m at each of CKPT_SHAPES (B x T x measured
# steps; default 4x1024x30) as gpu_ckpt_overhead_<B>x<T>. BASELINE_BUNDLE:
# another build's bundle (an earlier commit's), whose overhead is measured
# too, at BASELINE_SHAPES (default CKPT_SHAPES), on the same GPU.
#
# Writes OUT_DIR/summary.txt (the machine: nvidia-smi, the libraries found;
# then one line per test: name, exit status, seconds; 0 passed, 77 skipped,
# 124 timed out), OUT_DIR/tests.log (the end of each test's output) and
# OUT_DIR/logs.tgz (each test's whole output and the job folders of the
# distributed tests). Few files: a lent machine sends back at most 8.
# With TEST names, runs only those (names as in tests/gpu.cmake, or gpu_step,
# gpu_step_bf16, gpu_ops_bench, gpu_ckpt_overhead).
# PX_KEEP_SCRATCH=1 keeps the distributed tests' job folders (worker logs,
# events) in logs.tgz even when they pass.
set -u
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
[ -f "$1" ] || { echo "device_check.sh: no bundle at '$1' (make it with scripts/gpu-bundle.sh)" >&2; exit 2; }
tarball=$1
out=$2
shift 2
mkdir -p "$out"
work=$(mktemp -d /tmp/pxgpu.XXXXXX)
trap 'rm -rf "$work"' EXIT # what is worth keeping is in OUT_DIR/logs.tgz
tar -C "$work" -xJf "$tarball" || { echo "cannot unpack $tarball" >&2; exit 2; }
bin=$(echo "$work"/*/bin)
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"

dirs=
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  p=$(find /usr/local/cuda/ /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
  if [ -z "$p" ]; then echo "missing $lib" | tee -a "$out/summary.txt"; continue; fi
  d=$(dirname "$p")
  case ":$dirs:" in *":$d:"*) ;; *) dirs=$dirs:$d ;; esac
done
export LD_LIBRARY_PATH=${dirs#:}
{ nvidia-smi; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ldd "$bin/phalanx-worker"; python3 --version; } >> "$out/summary.txt" 2>&1
logs=$work/logs
mkdir -p "$logs"

wanted() { [ $# -eq 0 ] && return 0; local t; for t in "${selected[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
selected=("$@")
data=
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  [ ${#selected[@]} -eq 0 ] || wanted "$name" || return 0
  local t0=$(date +%s%N)
  timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  printf '%-26s rc=%-3s %6ss\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000000 )) | tee -a "$out/summary.txt"
  { echo "=== $name (rc=$rc)"; tail -n 150 "$logs/$name.log"; } >> "$out/tests.log"
  return $rc
}

run gpu_cuda_available 60 "$bin/test_cuda_available"
run gpu_ops 120 "$bin/test_gpu_ops" ||
  { [ $? -ne 77 ] && run gpu_ops_memcheck 120 compute-sanitizer --tool memcheck --print-limit 20 "$bin/test_gpu_ops"; }
run gpu_ops_bf16 120 "$bin/test_gpu_ops_bf16" ||
  { [ $? -ne 77 ] && run gpu_ops_bf16_memcheck 120 compute-sanitizer --tool memcheck --print-limit 20 "$bin/test_gpu_ops_bf16"; }
run gpu_flash 300 "$bin/test_gpu_flash" ||
  { [ $? -ne 77 ] && run gpu_flash_memcheck 300 compute-sanitizer --tool memcheck --print-limit 20 "$bin/test_gpu_flash"; }
run gpu_model 120 "$bin/test_gpu_model"
run gpu_reference 60 "$bin/test_gpu_reference" tests/reference
export PYTHONUNBUFFERED=1 TMPDIR=$work
run gpu_distributed_parity 150 python3 tests/gpu/test_distributed.py "$bin" parity
run gpu_distributed_kill 200 python3 tests/gpu/test_distributed.py "$bin" kill
run gpu_distributed_ranks2 200 python3 tests/gpu/test_distributed.py "$bin" ranks2
run gpu_distributed_checkpoint 150 python3 tests/gpu/test_distributed.py "$bin" checkpoint
run gpu_distributed_sharded 240 python3 tests/gpu/test_distributed.py "$bin" sharded
run gpu_distributed_sharded_kill 240 python3 tests/gpu/test_distributed.py "$bin" sharded_kill
run gpu_distributed_sharded_checkpoint 200 python3 tests/gpu/test_distributed.py "$bin" sharded_checkpoint
run gpu_distributed_pipeline 300 python3 tests/gpu/test_distributed.py "$bin" pipeline
run gpu_distributed_recompute 200 python3 tests/gpu/test_distributed.py "$bin" recompute
run gpu_distributed_pipeline_kill 240 python3 tests/gpu/test_distributed.py "$bin" pipeline_kill
run gpu_distributed_diloco 300 python3 tests/gpu/test_distributed.py "$bin" diloco
run gpu_distributed_diloco_auto 240 python3 tests/gpu/test_distributed.py "$bin" diloco_auto
run gpu_bf16_quality 300 python3 tests/gpu/test_bf16.py "$bin" quality
run gpu_bf16_layouts 300 python3 tests/gpu/test_bf16.py "$bin" layouts
run gpu_bf16_kill 200 python3 tests/gpu/test_bf16.py "$bin" kill
run gpu_bf16_checkpoint 150 python3 tests/gpu/test_bf16.py "$bin" checkpoint
if [ ${#selected[@]} -eq 0 ] || wanted gpu_step || wanted gpu_step_bf16 || wanted gpu_ckpt_overhead; then
  data=$(python3 -c "import sys; sys.path.insert(0, 'tests/lib'); from phalanx_test import make_corpus; print(make_corpus('$bin', '$work/bench-data', words=200000))")
fi
run gpu_step 180 python3 bench/gpu_step.py --bindir "$bin" --data "$data" --compile
run gpu_step_bf16 300 sh -c "python3 bench/gpu_step.py --bindir '$bin' --data '$data' --precision bf16 --compile &&
  python3 bench/gpu_step.py --bindir '$bin' --data '$data' --precision bf16 --batch 16 --attention both --compile"
run gpu_ops_bench 240 "$bin/bench_gpu_ops" --preset gpt2-124m --B 16 --T 1024
if [ ${#selected[@]} -eq 0 ] || wanted gpu_ckpt_overhead; then
  ckpt_bench() {  # ckpt_bench NAME BINDIR SHAPE
    local name=$1_${3%x*}
    selected+=("$name")
    run "$name" 240 python3 bench/checkpoint.py "$2" --skip-save --models gpt2-124m --shape "gpt2-124m=$3" \
      --device cuda --threads 4 --pairs 2 --data "$data" --scratch "$work/ckpt-$name"
    rm -rf "$work/ckpt-$name"
  }
  # the disk the checkpoints go to: what a gpt2-124m state's 1.49 GB takes to write
  [ ${#selected[@]} -eq 0 ] || selected+=(disk_dd)
  run disk_dd 60 dd if=/dev/zero of="$work/dd.bin" bs=16M count=89 conv=fsync
  rm -f "$work/dd.bin"
  for shape in ${CKPT_SHAPES:-4x1024x30}; do ckpt_bench gpu_ckpt_overhead "$bin" "$shape"; done
  if [ -n "${BASELINE_BUNDLE:-}" ]; then
    mkdir -p "$work/baseline" && tar -C "$work/baseline" -xJf "$BASELINE_BUNDLE"
    for shape in ${BASELINE_SHAPES:-${CKPT_SHAPES:-4x1024x30}}; do
      ckpt_bench gpu_ckpt_overhead_baseline "$(echo "$work"/baseline/*/bin)" "$shape"
    done
  fi
fi
tar -C "$work" -czf "$out/logs.tgz" --exclude='*.bin' --exclude='build-gpu-*' --exclude='baseline' \
  --exclude='ckpt-*' . 2>/dev/null
