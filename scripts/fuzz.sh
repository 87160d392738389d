#!/bin/bash
# Builds the libFuzzer harnesses with clang (ASan + UBSan) and runs each for a
# bounded time.  usage: scripts/fuzz.sh [SECONDS per harness, default 60]
# Prints "fuzz: N passed, N failed" last; a finding leaves its input in
# build-fuzz/<harness>/ (crash-*, leak-*, timeout-*).
set -u
cd "$(dirname "$0")/.."
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out"
deps=$(pkg-config --cflags --libs libczmq libzmq libsodium jansson)
common="common/error.c common/xalloc.c common/log.c common/replica.c"
passed=0 failed=0
extra_args="" # more libFuzzer options for the next harness

run_harness() { # name sources... ; seed dir prepared by the caller
    local name=$1; shift
    local bin=$out/$name
    if ! clang -g -O1 -std=gnu17 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined "$@" $common $deps -o "$bin"; then
        echo "fuzz: $name: build failed"; failed=$((failed + 1)); return
    fi
    mkdir -p "$out/$name.corpus" "$out/$name.findings"
    echo "fuzz: running $name for ${seconds}s"
    if (cd "$out/$name.findings" && "../$name" -max_total_time="$seconds" -max_len=65536 \
        -print_final_stats=1 $extra_args "../$name.corpus" ../"$name".seeds) >"$out/$name.log" 2>&1; then
        grep -E "stat::number_of_executed_units|cov:" "$out/$name.log" | tail -2
        echo "fuzz: $name: no findings"; passed=$((passed + 1))
    else
        tail -40 "$out/$name.log"
        echo "fuzz: $name: FINDING (see $out/$name.findings)"; failed=$((failed + 1))
    fi
}

rm -rf "$out/fuzz_jmsg.seeds"
/usr/bin/python3 tests/fuzz/make_seeds.py tests/proto/golden/vectors.json "$out/fuzz_jmsg.seeds"
run_harness fuzz_jmsg tests/fuzz/fuzz_jmsg.c proto/jmsg.c proto/jsession.c

# WebSocket frames: a few valid client frames (masked text, fragmented
# binary with a ping, close, a character split across fragments) as seeds.
rm -rf "$out/fuzz_ws.seeds" && mkdir -p "$out/fuzz_ws.seeds"
printf '\x00\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58' >"$out/fuzz_ws.seeds/text"
printf '\x03\x02\x82\x01\x02\x03\x04\x00\x01\x89\x80\x00\x00\x00\x00\x80\x81\x00\x00\x00\x00\x02' \
    >"$out/fuzz_ws.seeds/fragments"
printf '\x00\x88\x85\x00\x00\x00\x00\x03\xe8bye' >"$out/fuzz_ws.seeds/close"
printf '\x01\x01\x82\x00\x00\x00\x00a\xc3\x8a\x80\x00\x00\x00\x00\x80\x81\x00\x00\x00\x00\xa9' \
    >"$out/fuzz_ws.seeds/split-character"
run_harness fuzz_ws tests/fuzz/fuzz_ws.c gateway/jupyter/ws.c

# envd's streaming request bodies (first byte odd) and base64 bytes (even):
# an envelope with a message, one cut short, a base64 string.
rm -rf "$out/fuzz_envd.seeds" && mkdir -p "$out/fuzz_envd.seeds"
printf '\x01\x00\x00\x00\x00\x1c{"process":{"pid":1},"x":[]}' >"$out/fuzz_envd.seeds/envelope"
printf '\x01\x00\x00\x00\x00\x30{"process":' >"$out/fuzz_envd.seeds/short"
printf '\x00aGVsbG8gd29ybGQ=' >"$out/fuzz_envd.seeds/base64"
run_harness fuzz_envd tests/fuzz/fuzz_envd.c gateway/envd/proto.c

# Jupyter messages in WebSocket messages, both formats: a v1 message with a
# buffer, a default-format binary one with a buffer, a text one.  The first
# byte picks the frame type (bit 0: text).
seeds=$out/fuzz_wsmsg.seeds
rm -rf "$seeds" && mkdir -p "$seeds"
# v1: count 7; offsets 64 (the channel), 69 (header), 98, 100, 102, 114 (the
# buffer), 116 (the end): 0x40 0x45 0x62 0x64 0x66 0x72 0x74
printf '\x00\x07\x00\x00\x00\x00\x00\x00\x00' >"$seeds/v1"
for o in 40 45 62 64 66 72 74; do
    printf "\\x$o\\x00\\x00\\x00\\x00\\x00\\x00\\x00" >>"$seeds/v1"
done
printf 'shell{"msg_id":"a","msg_type":"t"}{}{}{"code":"1"}\x00b' >>"$seeds/v1"
# default, binary: count 2; offsets 12 (the JSON) 72 (the buffer)
printf '\x00\x00\x00\x00\x02\x00\x00\x00\x0c\x00\x00\x00\x48' >"$seeds/default-buffer"
printf '{"header":{"msg_id":"a","msg_type":"t"},"channel":"control"}\xff' >>"$seeds/default-buffer"
printf '\x01{"header":{"msg_id":"a","msg_type":"t"},"channel":"stdin","content":{"value":"x"}}' \
    >"$seeds/text"
run_harness fuzz_wsmsg tests/fuzz/fuzz_wsmsg.c gateway/jupyter/wsmsg.c proto/jmsg.c proto/jconn.c

# The HTTP stack in-process: request bytes, headers, paths, routing, and the
# JSON bodies of the REST, Jupyter and MCP routes (tests/fuzz/fuzz_http.c).
# Its Python scripts beside it, where the daemon finds them in a build.
mkdir -p "$out/py" && cp gateway/session/py/*.py "$out/py/"
printf '#define PACKAGE_VERSION "fuzz"\n' >"$out/config.h"
rm -rf "$out/fuzz_http.seeds" && cp -r tests/fuzz/http-seeds "$out/fuzz_http.seeds"
extra_args="-dict=$PWD/tests/fuzz/http.dict -timeout=20 -rss_limit_mb=4096"
# The daemon's sources come from the build's Makefile (print-daemon-sources),
# so a new file cannot be missed here; GET /openapi.json's compiled-in spec and
# the egress proxy's Lua too.
builddir=${SG_BUILDDIR:-build}
if ! all=$(make -s -C "$builddir" print-daemon-sources); then
    echo "fuzz: fuzz_http needs a configured build in $builddir (scripts/build.sh build)"
    failed=$((failed + 1))
else
    # Its C files but main() and those run_harness adds itself.
    sources=$(printf '%s\n' $all | grep '\.c$' | grep -vxF -e gateway/main.c $(printf -- '-e %s ' $common))
    /usr/bin/python3 scripts/openapi-json.py docs/openapi.yaml "$out/openapi_json.c"
    # ... and the egress proxy's compiled-in Lua, which the build makes
    make -s -C "$builddir" egress_proxy_lua.c
    # shellcheck disable=SC2086 # one word per file
    run_harness fuzz_http tests/fuzz/fuzz_http.c -I"$out" -DSG_INIT_PATH='"/nonexistent"' \
        $sources "$out/openapi_json.c" "$builddir/egress_proxy_lua.c" \
        $(pkg-config --cflags --libs libmicrohttpd zlib) -lm
fi
extra_args=""

echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
