#!/bin/bash
# The Kubernetes run, on demand (not CI: it takes 30-60 minutes on 2 cores,
# twice that the first time, when it builds Kubernetes):
#
#   tests/k8s/run.sh            installs what it needs, brings up the
#                               one-node cluster (docker/k8s/local-cluster.sh),
#                               runs tests/k8s/test_on_cluster.py on it, writes
#                               tests/k8s/results/DATE.md and takes the
#                               cluster down again
#   tests/k8s/run.sh --keep     leaves the cluster up afterwards
#
# Its last line is "N passed, N failed".  Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=0
case ${1:-} in
"") ;;
--keep) keep=1 ;;
-h | --help)
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
*)
  echo "usage: tests/k8s/run.sh [--keep]" >&2
  exit 2
  ;;
esac

scripts/deps.sh --k8s
[ -d tests/node_modules ] || (cd tests && npm ci --no-audit --no-fund)
scripts/venv.sh >/dev/null

cluster=docker/k8s/local-cluster.sh
started=$(date +%s)
up_log=$(mktemp)
$cluster down >/dev/null 2>&1 || true
$cluster up 2>&1 | tee "$up_log"
[ "$keep" = 1 ] || trap '$cluster down >/dev/null 2>&1 || true' EXIT

out=$(mktemp -d)
export SG_K8S_FIGURES=$out/figures.json SG_SCREENSHOT=$out/jupyterlab.png
set +e
python3 tests/k8s/test_on_cluster.py | tee "$out/tap"
set -e
passed=$(grep -c '^ok ' "$out/tap" || true)
failed=$(grep -c '^not ok ' "$out/tap" || true)

day=$(date -u +%F)
mkdir -p tests/k8s/results
{
  echo "# tests/k8s/run.sh, $day"
  echo
  echo "Machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB," \
    "$(uname -r); git $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo
  echo "Bring-up: $(grep -o 'up: built in [0-9]* s, started in [0-9]* s' "$up_log" || echo '?')"
  echo
  echo "Figures (seconds unless named):"
  echo
  echo '```json'
  cat "$SG_K8S_FIGURES" 2>/dev/null || echo "{}"
  echo
  echo '```'
  echo
  echo "Checks: $passed passed, $failed failed (run took $(($(date +%s) - started)) s)."
  echo
  echo '```'
  grep -E '^(ok|not ok) ' "$out/tap"
  echo '```'
} >"tests/k8s/results/$day.md"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
