#!/bin/bash
# Runs every benchmark and writes bench/results/<date>.md plus the scaling
# plots bench/results/<date>-scaling-{runsc,none}.png.
#
# usage: bench/run.sh [--quick]     (--quick: fewer runs, under 5 minutes)
#
# Each table is one run of one program, so its ratios compare measurements
# taken on the same machine at the same time.  Run it on an otherwise idle
# machine: the load generators share its cores with sandgate.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && quick=1

need=()
for p in wrk linux-perf python3-notebook python3-fastapi python3-uvicorn python3-matplotlib; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    scripts/deps.sh --test
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
scripts/build.sh build >/dev/null
export SANDGATE_INIT=$PWD/build/sandgate-init

date=$(date -u +%F)
out=bench/results/$date.md
py=/usr/bin/python3
if [ $quick = 1 ]; then
    kernel=(-n 3 -e 30); rest=(--runs 30 --new-runs 3 --preload-runs 2)
    peers=(--quick); levels=1,8; duration=5; stream=(--runs 1); none_levels=1,8
    floor=(-r 1 -n 500)
    density=(--settle 10 --window 10 --runs 60 --steps 0,8 --max-live 8 --cycles 3 --max-paused 8)
    out=bench/results/$date-quick.md; date=$date-quick
else
    kernel=(-n 20 -e 200); rest=(--runs 200 --new-runs 30 --preload-runs 15)
    peers=(); levels=1,8,32,64; duration=20; stream=(--runs 5); none_levels=1,8,32,64
    floor=(-r 3)
    density=()  # up to 200 live and 500 paused sessions: the longest part of the run
fi

section() { printf '\n## %s\n\n' "$1" >>"$out"; echo "bench: $1" >&2; }
{
    echo "# sandgate benchmarks — $date"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
         "$(uname -sr), $(. /etc/os-release && echo "$PRETTY_NAME")."
    echo "Versions: sandgate $(build/sandgate --version | awk '{print $2}'), $(runsc --version | head -1)" \
         "(ptrace platform), ipykernel $($py -c 'import ipykernel; print(ipykernel.__version__)')," \
         "libmicrohttpd $(dpkg-query -W -f='${Version}' libmicrohttpd12), libzmq $(dpkg-query -W -f='${Version}' libzmq5)," \
         "$(wrk --version 2>&1 | head -1 | awk '{print $1, $2}')."
    echo "Medians with min and max unless said otherwise; ms unless said otherwise."
} >"$out"

section "Kernel manager: start, claim, execute (bench/kbench)"
echo '```' >>"$out"
build/bench/kbench "${kernel[@]}" >>"$out"
echo '```' >>"$out"

section "REST round trip and new sessions (bench/rest.py ${rest[*]})"
$py bench/rest.py "${rest[@]}" >>"$out"

section "Peers on the same plain ipykernel (bench/peers.py ${peers[*]})"
$py bench/peers.py "${peers[@]}" >>"$out"

section "Scaling, gVisor (bench/scale.py --levels $levels)"
$py bench/scale.py --sandbox runsc --levels "$levels" --duration "$duration" \
    --plot "bench/results/$date-scaling-runsc.png" >>"$out"
echo -e "\n![scaling, gVisor]($date-scaling-runsc.png)" >>"$out"

section "Scaling, --sandbox=none (bench/scale.py --levels $none_levels)"
$py bench/scale.py --sandbox none --levels "$none_levels" --duration "$duration" \
    --plot "bench/results/$date-scaling-none.png" \
    --profile "bench/results/$date-profile-none.txt" >>"$out"
echo -e "\n![scaling, none]($date-scaling-none.png)" >>"$out"
echo -e "\nsandgate's own CPU by function at 8 sessions: $date-profile-none.txt (perf)" >>"$out"

section "Event-loop wake-ups per execute, --sandbox=none (bench/wakeups.py)"
$py bench/wakeups.py --duration "$duration" >>"$out"

section "sandgate's own CPU per execute, alone and with 48 idle sessions (bench/loopcost.py)"
$py bench/loopcost.py >>"$out"

section "The stack's own floor per execute: libzmq + loopback TCP, nothing else (bench/zmqfloor ${floor[*]})"
build/bench/zmqfloor "${floor[@]}" >>"$out"

section "Streaming delay and large outputs, gVisor (bench/stream.py ${stream[*]})"
$py bench/stream.py --sandbox runsc "${stream[@]}" >>"$out"

section "Density: idle cost, sandboxed vs plain, live and paused sessions (bench/density.py ${density[*]})"
# Its own title goes, its sections become subsections of this one.
$py bench/density.py "${density[@]}" | sed -e '1{/^# /d}' -e 's/^##/###/' >>"$out"

echo "bench: wrote $out" >&2
