#!/bin/sh
# Prints the Debian packages that hold the shared libraries the programs in
# BINDIR link against, one per line: the image's runtime stage installs
# exactly these, so it carries no compiler and no -dev package. Run in the
# build stage, where the libraries are installed. CUDA's own libraries
# (/usr/local/cuda*) are left out: the GPU variant's CUDA base provides them.
set -eu
dir=${1:?usage: runtime-packages.sh BINDIR}
libs=$(for f in "$dir"/*; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
pkgs=""
for lib in $libs; do
  # Resolve links (alternatives: libopenblas.so.0 -> the pthread variant's file).
  real=$(readlink -f "$lib")
  case "$real" in /usr/local/cuda*) continue ;; esac
  owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "$lib" 2>/dev/null) || {
    echo "runtime-packages: no Debian package holds $lib" >&2
    exit 1
  }
  pkgs="$pkgs ${owner%%:*}"
done
[ -n "$pkgs" ] || { echo "runtime-packages: no shared libraries found in $dir" >&2; exit 1; }
printf '%s\n' $pkgs | sort -u
