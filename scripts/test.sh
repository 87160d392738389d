#!/bin/bash
# Installs dependencies (the tests' too: scripts/deps.sh --test), builds, and
# runs every test: the whole suite in the normal build, the sanitizer subset
# (Makefile.am's sanitizer_tests) under ASan + UBSan (LeakSanitizer on) — two
# tests at a time, those timed against the clock (serial_tests) alone — and
# the fuzzers for FUZZ_SECONDS each (default 20; longer runs: scripts/fuzz.sh
# SECONDS).  The sanitizer build and the fuzzers (CPU only, niced) run beside
# the install of the tests' packages and the normal build's parallel tests,
# which mostly wait on sandboxes; both are over before any serial test.  The
# tests that need none of those packages start while they install.  Each
# phase line says how long the run has taken; the slowest tests of each build
# are listed.  Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() { echo "=== $* (at $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s)"; }
slowest() { # build dir: its ten slowest tests, each log's last write less its birth
  find "$1/tests" -name '*.log' -exec stat -c '%Y %W %n' {} + |
    awk '{ printf "%5.0f s %s\n", $1 - $2, $3 }' | sort -rn | head -10
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
# Whether a test (a Python one, or a tests/ module it imports) uses the
# npm or PyPI packages that test-deps.log's job installs.
packages_re='\.venv|node_modules|\.mjs|jsenv|playwright|npx|"node"'
needs_packages() {
  local t=$1 m h
  case $t in *.py) ;; *) return 1 ;; esac
  grep -qE "$packages_re" "$t" && return 0
  for m in $(sed -nE 's/^(from|import) +([A-Za-z_0-9]+).*/\2/p' "$t" | sort -u); do
    for h in tests/$m.py tests/*/$m.py; do
      [ -f "$h" ] && grep -qE "$packages_re" "$h" && return 0
    done
  done
  return 1
}

count() { # an automake test-suite summary log: add it to the totals
  local log=$1 p=0 f=1
  if [ -f "$log" ]; then
    p=$(sed -n 's/^# PASS: *//p' "$log" | head -1)
    f=$(( $(sed -n 's/^# FAIL: *//p' "$log" | head -1) + $(sed -n 's/^# ERROR: *//p' "$log" | head -1) + $(sed -n 's/^# XPASS: *//p' "$log" | head -1) ))
  fi
  passed=$((passed + p)) failed=$((failed + f))
}

phase "build: build"
ok_build=build
scripts/build.sh build || { echo "build: build FAILED"; failed=$((failed + 1)); ok_build=; }
# The sanitizer build, then the fuzzers (fuzz_http needs build/'s
# configuration): niced, in the background, their output kept for later.
rm -f build-asan/build.ok
(
  phase "build-asan: build (in the background)"
  nice -n 10 scripts/build.sh build-asan --enable-sanitizers &&
    touch build-asan/build.ok
  phase "fuzz (in the background)"
  nice -n 10 scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
  phase "fuzz over"
) >background.log 2>&1 &
background=$!
# Each failed check with its detail (the lines tap.ok prints after it),
# first and short: a CI summary keeps only so much of what it is shown.
failed_details() { # build dir, make check output
  local t log
  for t in $(sed -n 's/^\(FAIL\|ERROR\): \([^ ]*\).*/\2/p' "$2" | sort -u); do
    log=$1/${t%.*}.log
    [ -f "$log" ] || continue
    echo "--- $log"
    if grep -q '^not ok' "$log"; then
      # a long detail's end says most: its head and its tail
      grep -A6 '^not ok' "$log" | grep -E '^(not ok|#)' | head -24 |
        sed -E 's/^(.{150}).{200,}(.{450})$/\1 […] \2/'
    else
      tail -8 "$log" | cut -c1-300
    fi
  done
}
background_over() { # waits for it (once), before anything timed against the clock
  [ -n "$background" ] || return 0
  wait "$background"
  background=
  grep -E '^(===|build)' background.log
}

for dir in build build-asan; do
  if [ "$dir" = build-asan ]; then
    background_over
    [ -f build-asan/build.ok ] && ok_build=build-asan ||
      { echo "build-asan: build FAILED"; failed=$((failed + 1)); continue; }
  fi
  [ "$ok_build" = "$dir" ] || continue
  # Two tests at a time, then those timed against the clock (Makefile.am's
  # serial_tests) one at a time; each set has its own summary log.  While
  # the tests' packages are still being installed, those that need none
  # run first ("early").
  lists=$(make -s -C "$dir" print-tests)
  all=$(echo "$lists" | tail -2 | head -1) serial=$(echo "$lists" | tail -1)
  parallel=$(printf '%s\n' $all | grep -vxF $(printf -- '-e %s ' $serial) | tr '\n' ' ')
  serial=$(printf '%s\n' $all | grep -xF $(printf -- '-e %s ' $serial) | tr '\n' ' ')
  early=
  if [ -n "${test_deps:-}" ]; then
    early=$(for t in $parallel; do needs_packages "$t" || echo "$t"; done | tr '\n' ' ')
    parallel=$(for t in $parallel; do needs_packages "$t" && echo "$t"; done | tr '\n' ' ')
  fi
  rm -f "$dir"/test-suite*.log "$dir"/check*.out
  for set in "early -j2" "parallel -j2" "serial -j1"; do
    set -- $set
    [ -n "$(echo ${!1})" ] || continue
    if [ "$1" != early ] && [ -n "${test_deps:-}" ]; then
      wait "$test_deps" || { cat test-deps.log; echo "0 passed, 1 failed"; exit 1; }
      tail -3 test-deps.log
      test_deps=
    fi
    [ "$1" = serial ] && background_over
    phase "$dir: $1 tests"
    make -C "$dir" -k "$2" check TESTS="${!1}" TEST_SUITE_LOG="test-suite-$1.log" \
      >"$dir/check-$1.out" 2>&1
    grep -E '^(FAIL|ERROR|XPASS):' "$dir/check-$1.out"
    log=$dir/test-suite-$1.log
    [ -f "$log" ] && grep -E '^# (TOTAL|PASS|FAIL|ERROR)' "$log"
    failed_details "$dir" "$dir/check-$1.out"
    count "$log"
  done
  slowest "$dir"
done

background_over
phase fuzz
fuzz_out=$(sed -n '/^=== fuzz (in/,$p' background.log)
echo "$fuzz_out" | tail -15
fp=$(echo "$fuzz_out" | sed -n 's/^fuzz: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
ff=$(echo "$fuzz_out" | sed -n 's/^fuzz: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
passed=$((passed + ${fp:-0})) failed=$((failed + ${ff:-1}))

phase done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
