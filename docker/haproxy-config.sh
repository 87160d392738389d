#!/bin/sh
# Prints an HAProxy 2.6 configuration that puts sandgate replicas behind one
# address.  A request that names a context, kernel, Jupyter session or MCP
# session goes to the replica that handed out that id (its first 8 hex digits
# are the replica's tag, SHA-256 of the replica id); a new context goes to the
# next live replica; everything else stays on one replica per client.
# docs/deploy-cluster.md explains the choices.
set -eu

prog=$(basename "$0")
listen=127.0.0.1:49999
dns=""
lua=$(cd "$(dirname "$0")" && pwd)/sandgate-lists.lua
tls=""
cert=""
timeout=3660
bufsize=262144

usage() {
    cat <<EOF
Usage: $prog [OPTIONS] REPLICA_ID=HOST:PORT...

Prints an HAProxy 2.6 configuration (Debian 12's haproxy) for the sandgate
replicas named, each by its --replica-id and the address it listens on.

Options:
  --listen ADDR:PORT   where the proxy listens (default $listen)
  --timeout SECONDS    longest a response may stay silent, and longest a
                       WebSocket may stay idle (default $timeout: sandgate's
                       --max-timeout plus a minute)
  --bufsize BYTES      HAProxy's buffer size (default $bufsize): a
                       POST /execute body up to about this size is read whole
                       to find its context_id; a longer one without a
                       context_id in it is refused (413)
  --dns                resolve the replicas' host names while running, with
                       the resolvers in /etc/resolv.conf (Kubernetes: a pod
                       not up yet, or one that came back with a new address)
  --lua PATH           where the proxy finds sandgate-lists.lua, which joins
                       the replicas' lists (default: next to this script)
  --tls ADDR:PORT      also listen there with TLS, for E2B's SDKs configured
                       by E2B_DOMAIN alone: api.DOMAIN and PORT-ID.DOMAIN
                       (docs/deploy-cluster.md, "E2B_DOMAIN")
  --cert PEM           the certificate and key --tls serves (one PEM file:
                       a certificate for DOMAIN and *.DOMAIN, its chain,
                       its key)
  -h, --help           this text

Example:
  $prog r0=10.0.0.1:49999 r1=10.0.0.2:49999 > /etc/haproxy/haproxy.cfg
EOF
}

die() {
    echo "$prog: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --listen) [ $# -ge 2 ] || die "--listen needs ADDR:PORT"; listen=$2; shift 2 ;;
    --listen=*) listen=${1#*=}; shift ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs SECONDS"; timeout=$2; shift 2 ;;
    --timeout=*) timeout=${1#*=}; shift ;;
    --bufsize) [ $# -ge 2 ] || die "--bufsize needs BYTES"; bufsize=$2; shift 2 ;;
    --bufsize=*) bufsize=${1#*=}; shift ;;
    --dns) dns=yes; shift ;;
    --lua) [ $# -ge 2 ] || die "--lua needs PATH"; lua=$2; shift 2 ;;
    --lua=*) lua=${1#*=}; shift ;;
    --tls) [ $# -ge 2 ] || die "--tls needs ADDR:PORT"; tls=$2; shift 2 ;;
    --tls=*) tls=${1#*=}; shift ;;
    --cert) [ $# -ge 2 ] || die "--cert needs PEM"; cert=$2; shift 2 ;;
    --cert=*) cert=${1#*=}; shift ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
case $timeout in '' | *[!0-9]*) die "--timeout must be a number of seconds" ;; esac
case $bufsize in '' | *[!0-9]*) die "--bufsize must be a number of bytes" ;; esac
[ "$bufsize" -ge 16384 ] || die "--bufsize must be at least 16384"
case $listen in *:[0-9]*) ;; *) die "--listen must be ADDR:PORT, not '$listen'" ;; esac
[ -z "$tls" ] || case $tls in *:[0-9]*) ;; *) die "--tls must be ADDR:PORT, not '$tls'" ;; esac
[ -z "$tls$cert" ] || { [ -n "$tls" ] && [ -n "$cert" ]; } || die "--tls and --cert go together"
[ -z "$cert" ] || [ -r "$cert" ] || die "--cert $cert: no such readable file"
tls_bind=""
[ -z "$tls" ] || tls_bind="
    bind $tls ssl crt $cert alpn h2,http/1.1"

resolvers=""
[ -z "$dns" ] || resolvers="resolvers dns
    parse-resolv-conf
    hold valid 10s
    hold nx 5s

"

# The tag sandgate puts in every id it hands out (common/replica.c).
tag_of() {
    printf %s "$1" | sha256sum | cut -c1-8
}

ids="" tags="" servers=""
for arg; do
    id=${arg%%=*}
    addr=${arg#*=}
    [ "$id" != "$arg" ] || die "'$arg' is not REPLICA_ID=HOST:PORT"
    case $id in
    *[!A-Za-z0-9._-]* | '') die "replica id '$id' must match [A-Za-z0-9._-]{1,63}" ;;
    esac
    [ ${#id} -le 63 ] || die "replica id '$id' is longer than 63 characters"
    case $addr in
    *[!A-Za-z0-9.:_\[\]-]* | *:) die "'$addr' (replica $id) is not HOST:PORT" ;;
    *:[0-9]*) ;;
    *) die "'$addr' (replica $id) is not HOST:PORT" ;;
    esac
    tag=$(tag_of "$id")
    for seen in $ids; do
        [ "$seen" != "$id" ] || die "replica $id is named twice"
    done
    for seen in $tags; do
        [ "$seen" != "$tag" ] || die "replica $id has the tag $tag of another replica: rename one"
    done
    ids="$ids $id" tags="$tags $tag"
    servers="$servers $id=$tag=$addr"
done

# One server line per replica, taking its state from the replica's own
# backend (one health check per replica, whatever the backends using it).
tracking_servers() {
    for s in $servers; do
        id=${s%%=*}
        addr=${s##*=}
        printf '    server %s %s track health_%s/%s\n' "$id" "$addr" "$id" "$id"
    done
}

cat <<EOF
# Generated by $prog for sandgate replicas:$ids
# Routing (docs/deploy-cluster.md):
#   an id in the path (/contexts/ID, /api/kernels/ID, /api/sessions/ID), in
#   the Mcp-Session-Id header or in a POST /execute body's context_id
#     -> the replica whose tag begins the id; an unknown tag: 404
#   an E2B sandbox (/sandboxes/ID, /v2/sandboxes/ID, E2b-Sandbox-Id, a
#     PORT-ID.DOMAIN Host) -> the replica whose tag begins the id
#   an id that moved (POST /contexts/ID/move) -> the replica that has it
#     now (each replica's GET /cluster/routes, asked every 100 ms); one on
#     its way waits until it has arrived
#   a volume (/volumes/ID, /volumecontent/ID) -> the replica whose tag
#     begins the id
#   POST /contexts, POST /sandboxes, POST /v2/sandboxes -> round robin over
#     the live replicas; one with volumeMounts -> the replica that has the
#     first volume it names (sandgate-lists.lua's sandgate_place)
#   POST /volumes -> round robin
#   GET /contexts, /api/kernels, /api/sessions, /sandboxes, /v2/sandboxes,
#     /volumes -> every live replica's, joined
#   the rest -> one replica per client (source address + token)
global
    log stdout format raw local0 info
    maxconn 4096
    # A POST /execute body is read whole, up to this, to find its context_id.
    tune.bufsize $bufsize
    # GET /contexts, /api/kernels, /api/sessions: every replica's list, joined.
    setenv SANDGATE_REPLICAS "$(for s in $servers; do printf '%s=%s ' "${s%%=*}" "${s##*=}"; done)"
    lua-load $lua

defaults
    mode http
    log global
    option httplog
    option dontlognull
    # A replica that is down is known within a second or two; a request for
    # one fails within a second, never hangs.
    timeout connect 1s
    retries 1
    timeout queue 5s
    timeout http-request 30s
    timeout http-keep-alive 60s
    # Executions stream for as long as the code runs (sandgate writes a
    # keepalive every 5 s; a JSON-mode one is silent until it ends), and
    # WebSockets stay open while a notebook is.
    timeout client ${timeout}s
    timeout server ${timeout}s
    timeout tunnel ${timeout}s
    timeout client-fin 10s
    timeout server-fin 10s
    default-server inter 1s fastinter 500ms downinter 1s rise 1 fall 2${dns:+ init-addr last,libc,none resolvers dns}
    # The proxy's own answers are JSON, like sandgate's (docs/api.md, "Errors").
    http-error status 502 content-type application/json string '{"error":"unavailable","message":"the replica closed the connection without an answer: it may have stopped"}'
    http-error status 503 content-type application/json string '{"error":"unavailable","message":"no sandgate replica is up"}'
    http-error status 504 content-type application/json string '{"error":"timeout","message":"the replica sent nothing for ${timeout} s"}'

${resolvers}frontend sandgate
    bind $listen$tls_bind

    # --- the id a request names, if any ---------------------------------------
    http-request set-var(txn.sgid) path,field(3,/) if { path_beg /contexts/ }
    http-request set-var(txn.sgid) path,field(4,/) if { path_beg /api/kernels/ /api/sessions/ }
    http-request set-var(txn.sgid) req.hdr(Mcp-Session-Id) if { path /mcp /mcp/ } { req.hdr(Mcp-Session-Id) -m found }
    # E2B's sandbox API names its sandbox in the path (/sandboxes/ID/...,
    # /v2/sandboxes/ID/...).
    acl e2b_api path_beg /sandboxes /v2/sandboxes
    http-request set-var(txn.sgid) path,field(3,/) if { path_beg /sandboxes/ }
    http-request set-var(txn.sgid) path,field(4,/) if { path_beg /v2/sandboxes/ }
    # E2B's events of one sandbox (/events/sandboxes/ID) are its replica's.
    http-request set-var(txn.sgid) path,field(4,/) if { path_beg /events/sandboxes/ }
    # A volume lives on the replica that made it (its id begins with its tag).
    http-request set-var(txn.sgid) path,field(3,/) if { path_beg /volumes/ /volumecontent/ }
    # With E2B_DOMAIN alone the SDKs call PORT-ID.DOMAIN: a Host naming a
    # sandbox that way names it as E2b-Sandbox-Id (and its port as
    # E2b-Sandbox-Port) for a client that sends neither.
    acl e2b_host req.hdr(host),field(1,.) -m reg ^[0-9]+-[0-9A-Za-z-]+\$
    http-request set-header E2b-Sandbox-Id %[req.hdr(host),field(1,.),regsub(^[0-9]+-,)] if e2b_host !{ req.hdr(E2b-Sandbox-Id) -m found }
    http-request set-header E2b-Sandbox-Port %[req.hdr(host),field(1,.),field(1,-)] if e2b_host !{ req.hdr(E2b-Sandbox-Port) -m found }
    # The E2B SDKs' calls to a sandbox (envd's files and commands, the code
    # interpreter's /execute and /contexts) name it in E2b-Sandbox-Id; debug
    # mode's id and "default" mean the default context.
    acl envd_path path_beg /files /filesystem.Filesystem/ /process.Process/
    http-request set-var(txn.sgid) req.hdr(E2b-Sandbox-Id) if { req.hdr(E2b-Sandbox-Id) -m found } !{ req.hdr(E2b-Sandbox-Id) -m str debug_sandbox_id default }
    # POST /execute names its context in the body: only these requests are
    # buffered (the conditional form of option http-buffer-request).
    acl execute method POST
    acl execute_path path /execute
    http-request wait-for-body time 10s if execute execute_path
    http-request set-var(txn.sgid) req.body,json_query('\$.context_id') if execute execute_path
    acl has_id var(txn.sgid) -m reg .
    http-request set-var(txn.tag) var(txn.sgid),lower,regsub(-.*\$,) if has_id
    # A context on its way to another replica is waited for, one moved goes
    # there (sandgate-lists.lua).
    http-request set-var(txn.idsha) var(txn.sgid),lower,sha2(256),hex,lower if has_id
    http-request lua.sandgate_wait_move if has_id
    http-request set-var(txn.moved) var(txn.idsha),lua.sandgate_moved if has_id
EOF
printf '    acl known_tag var(txn.tag) -m str'
for s in $servers; do
    t=${s#*=}
    printf ' %s' "${t%%=*}"
done
printf '\n'
cat <<'EOF'
    acl hex_tag var(txn.tag) -m reg ^[0-9a-f]{8}$
    # An id that moved is known wherever it was made.
    acl known_tag var(txn.moved) -m reg .
    acl mcp path /mcp /mcp/
    # An id no replica handed out: say so, never guess a replica.
    http-request return status 404 content-type application/json lf-string '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found: no replica has the tag %[var(txn.tag)] this session id begins with"}}' if has_id !known_tag hex_tag mcp
    http-request return status 404 content-type application/json string '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found: this session id was not handed out by any replica"}}' if has_id !known_tag mcp
    # E2B's API answers its errors as {"code": STATUS, "message"}.
    http-request return status 404 content-type application/json lf-string '{"code":404,"message":"sandbox not found: no replica has the tag %[var(txn.tag)] its id begins with"}' if has_id !known_tag hex_tag e2b_api
    http-request return status 404 content-type application/json string '{"code":404,"message":"sandbox not found: its id was not handed out by any replica"}' if has_id !known_tag e2b_api
    # envd's calls (Connect RPC) read their error's kind from "code".
    http-request return status 404 content-type application/json lf-string '{"code":"not_found","message":"no replica has the tag %[var(txn.tag)] this sandbox id begins with"}' if has_id !known_tag hex_tag envd_path
    http-request return status 404 content-type application/json string '{"code":"not_found","message":"this sandbox id was not handed out by any replica"}' if has_id !known_tag envd_path
    http-request return status 404 content-type application/json lf-string '{"error":"not_found","message":"no replica has the tag %[var(txn.tag)] this id begins with"}' if has_id !known_tag hex_tag
    http-request return status 404 content-type application/json string '{"error":"not_found","message":"this id was not handed out by any replica"}' if has_id !known_tag
    # A POST /execute body longer than the buffer cannot be searched for its
    # context_id: refuse it rather than send it to the wrong replica.
    http-request set-var(txn.blen) req.body_len if execute execute_path !has_id
    http-request set-var(txn.bcut) req.body_size,sub(txn.blen) if execute execute_path !has_id
    http-request return status 413 content-type application/json string '{"error":"limit_exceeded","message":"this POST /execute body is longer than the proxy reads to find its context_id (haproxy-config.sh --bufsize)"}' if execute execute_path !has_id { var(txn.bcut) -m int gt 0 }

    # --- who the client is, for requests that name no id -------------------------
    # The token from whichever header carries it, without its scheme, so that a
    # client's E2B (X-Access-Token, E2B-Traffic-Access-Token), Jupyter
    # (Authorization: token, ?token=) and plain (Bearer) calls hash alike.
    http-request set-var(txn.token) req.hdr(Authorization),regsub(^[A-Za-z]+[[:space:]]+,)
    http-request set-var(txn.token) req.hdr(X-Access-Token) if !{ var(txn.token) -m found }
    http-request set-var(txn.token) req.hdr(E2B-Traffic-Access-Token) if !{ var(txn.token) -m found }
    http-request set-var(txn.token) req.hdr(X-API-Key) if !{ var(txn.token) -m found }
    http-request set-var(txn.token) url_param(token) if !{ var(txn.token) -m found }
    http-request set-var(txn.client) src,concat(/,txn.token)

    # --- lists: every replica's, joined (sandgate-lists.lua) -----------------------
    http-request use-service lua.sandgate_list if { method GET } { path /contexts /api/kernels /api/sessions }
    # E2B's sandbox lists, joined in their order and paged (nextToken, limit).
    http-request use-service lua.sandgate_e2b_list if { method GET } { path /sandboxes /v2/sandboxes }
    http-request use-service lua.sandgate_list if { method GET } { path /volumes }
    # A new sandbox that mounts volumes goes where the (first) volume is.
    acl create method POST
    acl create_path path /contexts /sandboxes /v2/sandboxes
    http-request wait-for-body time 10s if create create_path
    http-request use-service lua.sandgate_place if create create_path { req.body -m sub volumeMounts }

    # --- where it goes ---------------------------------------------------------------
EOF
printf '    use_backend replica_%%[var(txn.moved)] if { var(txn.moved) -m reg . }\n'
for s in $servers; do
    id=${s%%=*} rest=${s#*=}
    t=${rest%%=*}
    printf '    use_backend replica_%s if has_id { var(txn.tag) -m str %s }\n' "$id" "$t"
done
cat <<'EOF'
    use_backend spread if { method POST } { path /contexts /sandboxes /v2/sandboxes /volumes }
    default_backend pinned

# New contexts: round robin over the replicas that are up.  A connection
# refused (a replica that died since its last check) is retried on another.
backend spread
    balance roundrobin
    option redispatch 1
    retries 2
EOF
tracking_servers
cat <<'EOF'

# Requests without an id stay on one replica per client: source address and
# token, consistently hashed, so a replica going down moves only its clients.
backend pinned
    balance hash var(txn.client)
    hash-type consistent
    option redispatch 1
    retries 2
EOF
tracking_servers
for s in $servers; do
    id=${s%%=*}
    addr=${s##*=}
    cat <<EOF

# Replica $id: ids beginning $(tag_of "$id"), and those that moved there.
# Its health check also checks that the server there is $id, so a replica
# started with another id (whose ids would all be unknown there) never gets
# these requests.  A draining replica (its contexts moving to its peers:
# sandgate drain, --drain-on-stop) still serves those it holds.
backend replica_$id
    option httpchk
    http-check send meth GET uri /health ver HTTP/1.1 hdr Host sandgate
    http-check expect rstatus ^(200|503)\$
    http-check expect hdr name X-Sandgate-Replica value $id
    http-check expect rstring \"(ok|draining)\"
    http-error status 503 content-type application/json string '{"error":"unavailable","message":"replica $id, which holds this id, is down or unreachable: its contexts, kernels and sessions answer again once it is back"}'
    http-error status 502 content-type application/json string '{"error":"unavailable","message":"replica $id, which holds this id, closed the connection without an answer: it may have stopped"}'
    http-error status 504 content-type application/json string '{"error":"timeout","message":"replica $id, which holds this id, sent nothing for ${timeout} s"}'
    server $id $addr check observe layer4 error-limit 1 on-error mark-down

# Replica $id for new work (the spread and pinned backends track it): up
# while its GET /health answers 200, so a draining one takes none.
backend health_$id
    option httpchk
    http-check send meth GET uri /health ver HTTP/1.1 hdr Host sandgate
    http-check expect status 200
    http-check expect hdr name X-Sandgate-Replica value $id
    server $id $addr check
EOF
done
