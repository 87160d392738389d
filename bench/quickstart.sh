#!/bin/bash
# Times the quick start on a clean Debian 12: this tree's HEAD, cloned into a
# podman container of the minbase image (mmdebstrap --variant=minbase
# bookworm, what docker/build-image.sh imports as localhost/debian:bookworm),
# runs scripts/deps.sh (or deps.sh --test with --test) and scripts/build.sh,
# and prints each step's seconds and what apt fetched.  The download's time
# is this machine's link to its Debian mirror.  Needs root, podman, runc,
# mmdebstrap (scripts/deps.sh --test).
#   bench/quickstart.sh [--test]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
deps_args=${1:-}
base=localhost/debian:bookworm
cache=${SANDGATE_IMAGE_CACHE:-/var/tmp/sandgate-image-cache}
if ! podman image exists "$base"; then
  mkdir -p "$cache"
  [ -s "$cache/bookworm-minbase.tar" ] ||
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$cache/bookworm-minbase.tar"
  podman import --quiet "$cache/bookworm-minbase.tar" "$base" >/dev/null
fi
work=$(mktemp -d /tmp/sg-quickstart-XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/src"
# runc: crun fails on this cgroup setup; the limits as tests/build/test_image.py sets them.
podman --runtime "$(command -v runc || echo /usr/sbin/runc)" run --rm --network=host \
  --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 -v "$work/src:/src" "$base" \
  bash -c '
  set -e
  cd /src
  t0=$(date +%s.%N)
  scripts/deps.sh '"$deps_args"' >/tmp/deps.out 2>&1 || { tail -20 /tmp/deps.out; exit 1; }
  t1=$(date +%s.%N)
  scripts/build.sh build >/dev/null 2>&1
  t2=$(date +%s.%N)
  grep -E "^(Need to get|After this|Fetched)" /tmp/deps.out | tail -3
  python3 -c "print(\"quickstart: deps %.0f s, build %.0f s, total %.0f s\" % ($t1 - $t0, $t2 - $t1, $t2 - $t0))"
  build/sandgate --version'
