#!/bin/bash
# Installs dependencies, builds sandgate and starts it in the foreground on
# 127.0.0.1:49999 (override with SANDGATE_LISTEN).  Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec build/sandgate "$@"
