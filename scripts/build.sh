#!/bin/bash
# Builds sandgate into build/ (or $1, with configure options after it).
#   scripts/build.sh                       normal build in build/
#   scripts/build.sh build-asan --enable-sanitizers
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || ./autogen.sh >/dev/null
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || ../configure -q --enable-werror "$@"
make -j"$(nproc)" >/dev/null
make -j"$(nproc)" check TESTS= >/dev/null  # test programs too
echo "build: $dir ok"
