#!/bin/sh
# `make image`: builds the phalanx image (deploy/Containerfile) with podman,
# tagged localhost/phalanx:VERSION and localhost/phalanx:latest.
#
# The base is $BASE when given (e.g. docker.io/library/debian:bookworm-slim
# where a registry is reachable). Otherwise it is made here, since the
# project's machines reach no registry: `debootstrap --variant=minbase
# bookworm` from the Debian mirror apt already uses, imported into podman as
# localhost/phalanx-base:bookworm (kept, so later builds skip this step;
# IMAGE_REBASE=1 makes it again).
#
# podman's settings come from deploy/containers.conf through CONTAINERS_CONF.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/deploy/containers.conf}"
TAG=${IMAGE:-localhost/phalanx}
say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 1; }

command -v podman >/dev/null || die "podman is not installed (scripts/install-deps.sh installs it)"

# The Debian mirror apt uses here: the first bookworm source, deb822
# (.sources) or one-line format. Never a host written into this script.
apt_mirror() {
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      /^[ \t]*$/ { if (uri != "" && suite ~ /(^| )bookworm( |$)/ && types ~ /(^| )deb( |$)/) { print uri; exit } uri = suite = types = ""; next }
      /^URIs:/   { uri = $2 }
      /^Suites:/ { suite = $0; sub(/^Suites:[ \t]*/, "", suite) }
      /^Types:/  { types = $0; sub(/^Types:[ \t]*/, "", types) }
      END        { if (uri != "" && suite ~ /(^| )bookworm( |$)/ && types ~ /(^| )deb( |$)/) print uri }
    ' "$f"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } if ($(i + 1) == "bookworm") print $i }'
}

BASE_IMAGE=${BASE:-}
if [ -z "$BASE_IMAGE" ]; then
  BASE_IMAGE=localhost/phalanx-base:bookworm
  if [ "${IMAGE_REBASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then
    command -v debootstrap >/dev/null || die "debootstrap is not installed (scripts/install-deps.sh installs it)"
    [ "$(id -u)" = 0 ] || die "debootstrap needs root to make the base image; or set BASE to an image you can pull"
    mirror=$(apt_mirror | head -1)
    [ -n "$mirror" ] || die "no bookworm 'deb' source in /etc/apt/sources.list*; set BASE to a Debian bookworm image instead"
    root=$(mktemp -d "${TMPDIR:-/var/tmp}/phalanx-rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT INT TERM
    say "making the base: debootstrap --variant=minbase bookworm from $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.log" 2>&1 || {
      tail -20 "$root.log" >&2; rm -f "$root.log"; die "debootstrap failed (log above)"
    }
    rm -f "$root.log"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    say "importing it as $BASE_IMAGE"
    tar -C "$root" -c . | podman import --quiet - "$BASE_IMAGE" >/dev/null
    rm -rf "$root"
    trap - EXIT INT TERM
  else
    say "base $BASE_IMAGE exists (IMAGE_REBASE=1 makes it again)"
  fi
fi

VERSION=$(git describe --always --dirty --tags 2>/dev/null || echo unknown)
# The source label: where this tree came from (the origin remote), if known.
SOURCE=$(git config --get remote.origin.url 2>/dev/null || echo unknown)
say "building $TAG:$VERSION from $BASE_IMAGE"
# --network host: the build stage's apt reaches the mirror the host reaches.
podman build --network host -f deploy/Containerfile \
  --build-arg BASE="$BASE_IMAGE" --build-arg VERSION="$VERSION" --build-arg SOURCE="$SOURCE" \
  -t "$TAG:$VERSION" -t "$TAG:latest" .
# The build stage's newest image stays under a name (the next build's cache);
# the ones earlier builds left behind (about 1 GB each) go.
podman build --quiet --network host -f deploy/Containerfile --target build \
  --build-arg BASE="$BASE_IMAGE" -t "$TAG-build:cache" . >/dev/null
podman image prune -f --filter label=phalanx.stage=build >/dev/null
say "built $TAG:$VERSION (also $TAG:latest); size $(podman image inspect --format '{{.Size}}' "$TAG:latest" | awk '{ printf "%.0f MB", $1 / 1e6 }')"
