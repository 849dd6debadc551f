#!/bin/sh
# Installs the Debian packages phalanx needs, and the Python packages its
# tests read files with (from PyPI), only those that are missing.
# Run as root (CI and `make demo`/`make test` do); a non-root run that finds
# everything present does nothing and succeeds.
set -eu
# What compiling and linking the programs needs (the image's build stage
# installs only these: `install-deps.sh --build`; fortunes is the demo corpus;
# libpcre2-dev runs the tokenizer's pre-tokenizer regexes, \p{L} and lookahead).
BUILD_PKGS="build-essential cmake pkg-config libzmq3-dev libsodium-dev libprotobuf-c-dev protobuf-c-compiler \
librdkafka-dev libxxhash-dev libjansson-dev zlib1g-dev libopenblas-dev libgloo-dev fortunes libpcre2-dev"
# What the tests and the demo use besides: kcat reads Kafka, valgrind checks
# memory, podman/runc/debootstrap build and run the image (deploy/), chromium
# renders the dashboard headless (tests/ft/test_dashboard.py),
# python3-matplotlib draws `phalanxctl plot` (and `make demo`'s loss.png),
# prometheus brings promtool (checks and unit-tests deploy/prometheus's alert
# rules and lints /metrics) and the server the dashboard's queries run on
# (tests/control/test_metrics_rules.py). Debian 12 has no smaller package with
# promtool: with its dependencies it is about 330 MB installed (22 MB of
# download), most of it libjs-moment-timezone (218 MB) for the web UI; on a
# systemd machine it also enables a prometheus service on port 9090, which
# the tests do not use.
TEST_PKGS="kcat curl python3 python3-pip python3-matplotlib valgrind podman runc debootstrap chromium prometheus"
# Each entry is DIST:MODULE (the name pip installs, the name python imports).
# safetensors: the checkpoint tool's export is read back with Hugging Face's own reader.
# kubernetes-validate: the rendered manifests are checked against Kubernetes' schemas.
# prometheus-client: /metrics is parsed by Prometheus' own text-format parser.
# matplotlib: for a python3 on PATH other than Debian's (which has python3-matplotlib).
# tokenizers: the tokenizer's ids are checked against Hugging Face's own (tests/tokenizer).
# transformers: phalanx-ckpt's Hugging Face folders are loaded by its own from_pretrained (tests/checkpoint).
# torch: what transformers runs those models with, on the CPU (installed apart: see TORCH_INDEX).
PYPKGS="safetensors:safetensors numpy:numpy kubernetes-validate:kubernetes_validate prometheus-client:prometheus_client matplotlib:matplotlib tokenizers:tokenizers transformers:transformers"
# PyPI's Linux torch wheel is built for CUDA and pulls the NVIDIA runtime
# wheels with it (about 5.3 GB installed, about 2 minutes on a fast link),
# though the tests run it on the CPU only. PyTorch's own CPU-only wheel index
# (about 0.2 GB of download) is used when PHALANX_TORCH_INDEX names it, on a
# machine that can reach it.
TORCH_INDEX="${PHALANX_TORCH_INDEX:-}"

PKGS="$BUILD_PKGS $TEST_PKGS"
BUILD_ONLY=0
if [ "${1:-}" = "--build" ]; then
  PKGS=$BUILD_PKGS
  BUILD_ONLY=1
elif [ $# -gt 0 ]; then
  echo "usage: install-deps.sh [--build]   (--build: only what compiling needs)" >&2
  exit 2
fi

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing $1:$2; run as root or install them yourself" >&2
    exit 1
  fi
}

missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "install-deps: installing:$missing"
  need_root "packages" "$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
fi

[ "$BUILD_ONLY" = 1 ] && exit 0
# The tests run this python3; Debian's refuses pip outside a virtual
# environment (PEP 668) unless told, which a test machine may do.
pip_install() {
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --root-user-action=ignore "$@"
}
if ! python3 -c "import torch" 2>/dev/null; then
  need_root "Python packages" " torch"
  if [ -n "$TORCH_INDEX" ]; then
    echo "install-deps: installing torch (CPU) from $TORCH_INDEX"
    pip_install torch --index-url "$TORCH_INDEX" || { echo "install-deps: pip could not install torch" >&2; exit 1; }
  else
    echo "install-deps: installing torch from PyPI (with its CUDA runtime wheels, about 5 GB)"
    pip_install torch || { echo "install-deps: pip could not install torch (is PyPI reachable?)" >&2; exit 1; }
  fi
fi
pymissing=""
for p in $PYPKGS; do
  python3 -c "import ${p#*:}" 2>/dev/null || pymissing="$pymissing ${p%%:*}"
done
[ -z "$pymissing" ] && exit 0
echo "install-deps: installing from PyPI:$pymissing"
need_root "Python packages" "$pymissing"
# shellcheck disable=SC2086
if ! pip_install $pymissing; then
  echo "install-deps: pip could not install$pymissing (is PyPI reachable?)" >&2
  exit 1
fi
