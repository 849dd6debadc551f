#!/bin/sh
# Packs what the GPU tests need into one folder that can be copied to a GPU
# machine that has the NVIDIA driver, CUDA 13 (cuBLAS) and NCCL but none of
# the project's other libraries (the lent device machines: an image with
# PyTorch and the CUDA toolkit, no network, no Debian packages).
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build build-gpu-bundle)
#
# OUT_DIR/bin: the binaries tests/gpu/device_check.sh runs, their run path set to ../lib
# (DT_RPATH, so it also covers the libraries' own dependencies).
# OUT_DIR/lib: every shared library they load that is neither glibc, the C++
# runtime nor CUDA's (ZeroMQ, Gloo, OpenBLAS, protobuf-c, librdkafka and
# what those pull in). CUDA's libraries (cudart, cuBLAS, NCCL) come from the
# GPU machine: tests/gpu/device_check.sh finds them there.
# Also OUT_DIR.tar.xz, the same compressed. Built on Debian 12 (glibc 2.36), so it runs where glibc is 2.36 or newer.
set -eu
case "${1:-}" in -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
build=${1:-build}
out=${2:-build-gpu-bundle}
command -v patchelf >/dev/null || { echo "gpu-bundle: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
bins="test_cuda_available test_gpu_ops test_gpu_ops_bf16 test_gpu_flash test_gpu_model test_gpu_reference
      bench_gpu_ops phalanx-worker phalanx-coordinator phalanx-launch phalanx-data phalanxctl"
for b in $bins; do
  [ -x "$build/bin/$b" ] || { echo "gpu-bundle: $build/bin/$b missing: build with nvcc present first" >&2; exit 2; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
# Kept out: what every glibc machine has, and CUDA's own libraries.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl|libcuda)\.so'
for b in $bins; do
  cp "$build/bin/$b" "$out/bin/"
  ldd "$build/bin/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    echo "$name" | grep -Eq "$skip" && continue
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*
# The second entry serves tests/gpu/test_distributed.py, which runs a copy of
# phalanx-launch from a scratch folder under TMPDIR: device_check.sh sets
# TMPDIR to the folder the bundle is unpacked in.
for f in "$out"/bin/*; do patchelf --force-rpath --set-rpath "\$ORIGIN/../lib:\$ORIGIN/../$(basename "$out")/lib" "$f"; done
for f in "$out"/lib/*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$f"; done
# One compressed file, so that it fits what travels to a lent machine (64 MiB).
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
du -sh "$out" "$out.tar.xz"
