#!/bin/bash
# Kernel manager benchmark: cold start, pool claim, and execute round trip in
# gVisor versus unsandboxed, as medians of RUNS (default 20) starts and EXECS
# (default 200) executions.  usage: bench/kernel.sh [RUNS] [EXECS]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build >/dev/null
echo "sandgate kernel benchmark — $(date -u +%F), $(nproc) cores, $(runsc --version | head -1)"
echo
SANDGATE_INIT=$PWD/build/sandgate-init build/bench/kbench -n "${1:-20}" -e "${2:-200}"
