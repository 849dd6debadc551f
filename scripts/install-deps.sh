#!/bin/sh
# Installs the Debian packages phalanx needs, only those that are missing.
# Run as root (CI and `make demo`/`make test` do); a non-root run that finds
# everything present does nothing and succeeds.
set -eu
PKGS="build-essential cmake pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler \
librdkafka-dev libxxhash-dev libjansson-dev kcat libopenblas-dev libgloo-dev fortunes curl python3 valgrind"
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing:$missing"
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing packages:$missing; run as root or install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
