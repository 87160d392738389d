#!/bin/sh
# Regenerates the autotools build system (configure, Makefile.in).
set -e
cd "$(dirname "$0")"
mkdir -p build-aux m4
autoreconf -fi
# automake ships the TAP driver but does not install it on its own.
cp -f "$(automake --print-libdir)/tap-driver.sh" build-aux/tap-driver.sh
