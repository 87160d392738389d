#!/bin/bash
# Installs dependencies (the tests' too: scripts/deps.sh --test), builds, and
# runs every test: the whole suite in the normal build, the sanitizer subset
# (Makefile.am's sanitizer_tests) under ASan + UBSan (LeakSanitizer on), then
# the fuzzers for FUZZ_SECONDS each (default 30; longer runs: scripts/fuzz.sh SECONDS).  Each phase line says how
# long the run has taken; the slowest tests of each build are listed.  Ends
# with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() { echo "=== $* (at $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s)"; }
slowest() { # build dir: its ten slowest tests, by their logs' times
  find "$1/tests" -name '*.log' -printf '%T@ %p\n' | sort -n |
    awk 'NR > 1 { printf "%5.0f s %s\n", $1 - prev, $2 } { prev = $1 }' | sort -rn | head -10
}
phase deps
scripts/deps.sh --test || { echo "0 passed, 1 failed"; exit 1; }

# The client SDKs the tests drive, pinned by tests/package-lock.json, and
# the PyPI packages they use, pinned by tests/requirements*.txt: fetched
# while the first build compiles, and waited for before its tests.
(cd tests && npm ci --no-audit --no-fund --loglevel=error && cd .. && scripts/venv.sh) \
  >test-deps.log 2>&1 &
test_deps=$!

passed=0 failed=0
count() { # build dir: add that build's automake test-suite summary to the totals
  local log=$1/test-suite.log p=0 f=1
  if [ -f "$log" ]; then
    p=$(sed -n 's/^# PASS: *//p' "$log" | head -1)
    f=$(( $(sed -n 's/^# FAIL: *//p' "$log" | head -1) + $(sed -n 's/^# ERROR: *//p' "$log" | head -1) + $(sed -n 's/^# XPASS: *//p' "$log" | head -1) ))
  fi
  passed=$((passed + p)) failed=$((failed + f))
}

for b in "build" "build-asan --enable-sanitizers"; do
  set -- $b
  dir=$1
  phase "$dir: build"
  if ! scripts/build.sh "$@"; then
    echo "$dir: build FAILED"; failed=$((failed + 1)); continue
  fi
  if [ -n "${test_deps:-}" ]; then
    wait "$test_deps" || { cat test-deps.log; echo "0 passed, 1 failed"; exit 1; }
    tail -3 test-deps.log
    test_deps=
  fi
  phase "$dir: tests"
  rm -f "$dir/test-suite.log"
  make -C "$dir" -k check >"$dir/check.out" 2>&1
  grep -E '^(FAIL|ERROR|XPASS):' "$dir/check.out"
  [ -f "$dir/test-suite.log" ] && grep -E '^# (TOTAL|PASS|FAIL|ERROR)' "$dir/test-suite.log"
  grep -qE '^(FAIL|ERROR)' "$dir/check.out" && [ -f "$dir/test-suite.log" ] && \
    sed -n '/^FAIL\|^ERROR/,+30p' "$dir/test-suite.log" | head -120
  slowest "$dir"
  count "$dir"
done

phase fuzz
fuzz_out=$(scripts/fuzz.sh "${FUZZ_SECONDS:-30}" 2>&1)
echo "$fuzz_out" | tail -15
fp=$(echo "$fuzz_out" | sed -n 's/^fuzz: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
ff=$(echo "$fuzz_out" | sed -n 's/^fuzz: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
passed=$((passed + ${fp:-0})) failed=$((failed + ${ff:-1}))

phase done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
