#!/bin/bash
# Runs a cluster of sandgate replicas behind HAProxy on this machine, for
# trying the routing out and for tests/gateway/test_cluster.py.  Every
# process it starts is recorded (pid files in the run dir) and stopped by
# `down`.  docs/deploy-cluster.md says how the routing works.
set -eu

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
dir=${SANDGATE_CLUSTER_DIR:-/tmp/sandgate-cluster}

usage() {
    cat <<EOF
Usage: $prog up N [PORT] [-- SANDGATE_OPTIONS...]
       $prog start REPLICA_ID
       $prog stop REPLICA_ID
       $prog status
       $prog down [--keep]

  up N [PORT]   starts N sandgate replicas (ids r0 ... r(N-1)), each with its
                own state dir under the run dir and its own loopback port,
                then HAProxy on 127.0.0.1:PORT (default 49999) with the
                configuration docker/haproxy-config.sh writes; waits until
                every replica answers through the proxy.  Options after --
                go to every replica (e.g. --pool-size 1, --sandbox none).
  start ID      starts replica ID again (after a crash or \`stop\`), on its
                state dir and port: it re-adopts its sessions
  stop ID       stops replica ID (SIGTERM; its sandboxes keep running)
  status        shows each process, its pid and whether it answers
  down          stops HAProxy and the replicas, removes their sandboxes and
                the run dir; with --keep, stops the processes only (the
                sandboxes run on, and \`up\` with the same N re-adopts them)

Environment:
  SANDGATE_CLUSTER_DIR  the run dir (default /tmp/sandgate-cluster)
  SANDGATE_TOKEN        the token of every replica (default: generated,
                        printed, and kept in the run dir's token file)
  SANDGATE              the sandgate binary (default: sandgate on PATH,
                        else build/sandgate in this source tree)
  HAPROXY               the haproxy binary (default: haproxy on PATH)
  SANDGATE_PROXY_TLS    ADDR:PORT=PEM: HAProxy also listens there with TLS,
                        serving PEM (haproxy-config.sh --tls, --cert), for
                        E2B's SDKs configured by E2B_DOMAIN

Replicas are started as the user running this (root, for runsc; sandgate
then serves HTTP as its unprivileged user).
EOF
}

die() {
    echo "$prog: $*" >&2
    exit 1
}

find_sandgate() {
    if [ -n "${SANDGATE:-}" ]; then
        [ -x "$SANDGATE" ] || die "SANDGATE=$SANDGATE is not an executable"
        echo "$SANDGATE"
    elif command -v sandgate >/dev/null; then
        command -v sandgate
    elif [ -x "$here/../build/sandgate" ]; then
        echo "$(cd "$here/../build" && pwd)/sandgate"
    else
        die "no sandgate binary: install it (make install), build it in build/, or set SANDGATE=PATH"
    fi
}

# A process that has exited but is not reaped yet (a zombie: its parent is
# gone, and whoever inherited it reaps when it will) counts as stopped.
running() { # pid
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ]
}

alive() { # pid file
    local pid
    [ -f "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] && running "$pid"
}

# Stops the process in a pid file: SIGTERM, then SIGKILL after 30 s.
stop_pid() { # pid file, name
    local pid i
    alive "$1" || { rm -f "$1"; return 0; }
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for i in $(seq 300); do
        running "$pid" || break
        sleep 0.1
    done
    if running "$pid"; then
        echo "$prog: $2 (pid $pid) did not stop in 30 s: killing it" >&2
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

token() {
    if [ -n "${SANDGATE_TOKEN:-}" ]; then
        echo "$SANDGATE_TOKEN"
    else
        cat "$dir/token"
    fi
}

# Starts replica $1 on its state dir; its port is the one it had, or a free
# one sandgate picks the first time.  Waits for its "listening on" line.
start_replica() { # id
    local id=$1 rdir=$dir/$1 port=0 i url="" sandgate
    sandgate=$(find_sandgate)
    [ -d "$rdir" ] || die "no replica $id in $dir"
    alive "$rdir/pid" && die "replica $id is already running (pid $(cat "$rdir/pid"))"
    [ -f "$rdir/port" ] && port=$(cat "$rdir/port")
    local args=(--peers "@$dir/peers")
    [ -f "$dir/args" ] && mapfile -t -O 2 args <"$dir/args"
    local from
    from=$(($(cat "$rdir/log" 2>/dev/null | wc -c) + 1))
    # The token goes through the environment: never on a command line ps shows.
    SANDGATE_TOKEN=$(token) setsid "$sandgate" --listen "127.0.0.1:$port" \
        --state-dir "$rdir/state" --replica-id "$id" \
        --max-connections-per-ip 1024 "${args[@]}" \
        </dev/null >/dev/null 2>>"$rdir/log" &
    echo $! >"$rdir/pid"
    for i in $(seq 300); do
        url=$(tail -c +"$from" "$rdir/log" 2>/dev/null | sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' | head -1)
        [ -n "$url" ] && break
        alive "$rdir/pid" || break
        sleep 0.1
    done
    [ -n "$url" ] || die "replica $id did not start; the end of $rdir/log:
$(tail -20 "$rdir/log")"
    echo "${url##*:}" >"$rdir/port"
    echo "$prog: replica $id (pid $(cat "$rdir/pid")) listening on $url, state in $rdir/state"
}

replicas() {
    local r
    for r in "$dir"/r*/; do
        [ -d "$r" ] && basename "$r"
    done | sort -V
}

proxy_port() { cat "$dir/proxy.port"; }

# Waits until each replica answers through the proxy: a request for an id
# with its tag is sent to it and answered by sandgate itself (404: no such
# context), not by the proxy (503: the replica is down).
wait_routed() { # ids...
    local id tag i code=""
    for id; do
        tag=$(printf %s "$id" | sha256sum | cut -c1-8)
        for i in $(seq 300); do
            code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(token)" \
                "http://127.0.0.1:$(proxy_port)/contexts/$tag-0000-4000-8000-000000000000" || true)
            [ "$code" = 404 ] && break
            alive "$dir/haproxy.pid" || die "haproxy stopped; the end of $dir/haproxy.log:
$(tail -5 "$dir/haproxy.log")"
            sleep 0.1
        done
        [ "$code" = 404 ] || die "replica $id does not answer through the proxy (HTTP $code)"
    done
}

cmd_up() {
    [ $# -ge 1 ] || die "up needs N (see --help)"
    local n=$1 port=49999 i id addrs=() sandgate
    shift
    if [ $# -gt 0 ] && [ "$1" != -- ]; then
        port=$1
        shift
    fi
    [ $# -gt 0 ] && [ "$1" = -- ] && shift
    case $n in '' | *[!0-9]*) die "N must be a number, not '$n'" ;; esac
    case $port in '' | *[!0-9]*) die "PORT must be a number, not '$port'" ;; esac
    [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "N must be 1 to 64"
    command -v "${HAPROXY:-haproxy}" >/dev/null || die "no haproxy (apt-get install haproxy, or set HAPROXY)"
    command -v curl >/dev/null || die "no curl (apt-get install curl)"
    sandgate=$(find_sandgate)
    alive "$dir/haproxy.pid" && die "a cluster is already up in $dir (run '$prog down' first)"
    for id in $(replicas); do
        alive "$dir/$id/pid" && die "replica $id is still running in $dir (run '$prog down' first)"
    done
    mkdir -p "$dir"
    chmod 0711 "$dir" # the replicas' unprivileged user reaches its state dirs
    if [ -z "${SANDGATE_TOKEN:-}" ] && [ ! -s "$dir/token" ]; then
        (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token")
        echo "$prog: generated a token (in $dir/token)"
    fi
    printf '%s\n' "$@" >"$dir/args"
    [ $# -gt 0 ] || : >"$dir/args"
    echo "$prog: sandgate is $sandgate"
    trap 'echo "$prog: up failed; stopping what started" >&2; cmd_down --keep >/dev/null 2>&1 || true' ERR EXIT
    for ((i = 0; i < n; i++)); do
        id=r$i
        mkdir -p "$dir/$id/state"
        chmod 0711 "$dir/$id" "$dir/$id/state"
        start_replica "$id"
        addrs+=("$id=127.0.0.1:$(cat "$dir/$id/port")")
    done
    printf '%s\n' "${addrs[@]}" >"$dir/peers" # where a context moves (--peers @FILE)
    local tls=()
    [ -z "${SANDGATE_PROXY_TLS:-}" ] || tls=(--tls "${SANDGATE_PROXY_TLS%%=*}" --cert "${SANDGATE_PROXY_TLS#*=}")
    "$here/haproxy-config.sh" --listen "127.0.0.1:$port" "${tls[@]}" "${addrs[@]}" >"$dir/haproxy.cfg"
    echo "$port" >"$dir/proxy.port"
    "${HAPROXY:-haproxy}" -c -q -f "$dir/haproxy.cfg" || die "haproxy refuses $dir/haproxy.cfg"
    setsid "${HAPROXY:-haproxy}" -f "$dir/haproxy.cfg" </dev/null >>"$dir/haproxy.log" 2>&1 &
    echo $! >"$dir/haproxy.pid"
    local ids=()
    for ((i = 0; i < n; i++)); do ids+=("r$i"); done
    wait_routed "${ids[@]}"
    trap - ERR EXIT
    echo "$prog: haproxy (pid $(cat "$dir/haproxy.pid")) on http://127.0.0.1:$port routes to $n replicas"
    [ -n "${SANDGATE_TOKEN:-}" ] || echo "$prog: token $(token)"
    echo "try: curl -H \"Authorization: Bearer \$TOKEN\" http://127.0.0.1:$port/execute -d '{\"code\":\"print(6*7)\"}'"
}

cmd_start() {
    [ $# -eq 1 ] || die "start needs a replica id (see --help)"
    start_replica "$1"
    alive "$dir/haproxy.pid" && wait_routed "$1"
    return 0
}

cmd_stop() {
    [ $# -eq 1 ] || die "stop needs a replica id (see --help)"
    [ -d "$dir/$1" ] || die "no replica $1 in $dir"
    stop_pid "$dir/$1/pid" "replica $1"
    echo "$prog: replica $1 stopped (its sandboxes keep running)"
}

cmd_status() {
    [ -d "$dir" ] || { echo "no cluster in $dir"; return 0; }
    local id port health
    for id in $(replicas); do
        port=$(cat "$dir/$id/port" 2>/dev/null || echo "?")
        if alive "$dir/$id/pid"; then
            # With the token: /health gives the counts to an admin only.
            health=$(curl -s -m 2 -H "Authorization: Bearer $(token)" \
                "http://127.0.0.1:$port/health" || echo "no answer")
            printf '%-6s pid %-8s 127.0.0.1:%-6s %s\n' "$id" "$(cat "$dir/$id/pid")" "$port" "$health"
        else
            printf '%-6s %-12s 127.0.0.1:%-6s\n' "$id" "not running" "$port"
        fi
    done
    if alive "$dir/haproxy.pid"; then
        printf '%-6s pid %-8s 127.0.0.1:%s\n' haproxy "$(cat "$dir/haproxy.pid")" "$(proxy_port)"
    else
        printf '%-6s not running\n' haproxy
    fi
}

# Removes what a replica's sessions left on the machine: runsc sandboxes, the
# workspace mounts, and (--sandbox none) kernel processes.
remove_sessions() { # state dir
    local state=$1 c pid
    if [ -d "$state/runsc" ] && command -v runsc >/dev/null; then
        for c in $(runsc --root "$state/runsc" list -quiet 2>/dev/null); do
            runsc --root "$state/runsc" delete -force "$c" >/dev/null 2>&1 || true
        done
    fi
    grep -o "$state/[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    for pid in $(grep -l -s -F "$state/kernels/" /proc/[0-9]*/cmdline | cut -d/ -f3); do
        kill -9 "$pid" 2>/dev/null || true
    done
}

cmd_down() {
    local keep=0 id
    [ "${1:-}" = --keep ] && keep=1
    [ -d "$dir" ] || { echo "$prog: no cluster in $dir"; return 0; }
    stop_pid "$dir/haproxy.pid" haproxy
    for id in $(replicas); do
        stop_pid "$dir/$id/pid" "replica $id"
    done
    if [ $keep -eq 1 ]; then
        echo "$prog: stopped; sandboxes and state kept in $dir"
        return 0
    fi
    for id in $(replicas); do
        remove_sessions "$dir/$id/state"
    done
    rm -rf "$dir"
    echo "$prog: down; $dir removed"
}

case ${1:-} in
-h | --help | help) usage ;;
up) shift; cmd_up "$@" ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
status) shift; cmd_status "$@" ;;
down) shift; cmd_down "$@" ;;
'') usage >&2; exit 2 ;;
*) die "unknown command '$1' (see --help)" ;;
esac
