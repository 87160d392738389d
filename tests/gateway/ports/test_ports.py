"""A sandbox's own servers reached from outside (gateway/ports/): a server
the test starts in a sandbox (echo_server.py) answers through
/contexts/{id}/ports/{port}/PATH, E2B's Host: PORT-ID.DOMAIN and the
E2b-Sandbox-Id/-Port headers docker/'s proxy sets; methods, bodies, the
target as sent, headers both ways (sandgate's key never passed on), status
codes, 5 MiB, a body streamed as the server writes it, IPv6, errors (502,
400), another tenant and no key (404), the max-queued quota, a paused
sandbox resumed; E2B's SDK, configured only by environment (e2b_ports.py):
get_host's public URL, allowPublicTraffic false with the sandbox's
traffic token, and maskRequestHost."""
import hashlib
import http.client
import json
import os
import subprocess
import tempfile
import time

from sgd import Daemon, add_key, wait_for
from tap import ok, done, relay_checks

SRC = os.environ.get("SG_SRCDIR", ".")
HERE = os.path.join(SRC, "tests", "gateway", "ports")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")

tmp = tempfile.mkdtemp(prefix="sg-ports-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice = add_key(keys, "alice", "--max-queued", "2")
bob = add_key(keys, "bob")
carol = add_key(keys, "carol")
d = Daemon("--pool-size", "0", "--keys-file", keys)
host, port = d.url.split("//")[1].split(":")


def call(method, path, token=alice, headers=None, body=None, conn=None):
    """(status, headers, body) of one request."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    c = conn or http.client.HTTPConnection(host, int(port), timeout=120)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def echo(status_headers_body):
    st, hd, body = status_headers_body
    try:
        return st, hd, json.loads(body)
    except ValueError:
        return st, hd, body


def start_server(cid, token, *args):
    """Starts echo_server.py ARGS in context cid and waits until it listens."""
    src = open(os.path.join(HERE, "echo_server.py")).read()
    code = ("import subprocess, sys, socket, time\n"
            f"open('/tmp/echo_server.py', 'w').write({src!r})\n"
            f"subprocess.Popen([sys.executable, '/tmp/echo_server.py', *{list(args)!r}])\n"
            "for _ in range(500):\n"
            "    try:\n"
            f"        socket.create_connection(({(args[1:] or ['127.0.0.1'])[0]!r}, {args[0]}))"
            ".close(); break\n"
            "    except OSError: time.sleep(0.02)\n"
            "print('listening')\n")
    st, _, out = d.request("POST", "/execute", {"context_id": cid, "code": code}, token=token)
    return st == 200 and b"listening" in out


try:
    st, ctx = d.json("POST", "/contexts", {}, token=alice)
    cid = ctx.get("id")
    ok(st == 201 and start_server(cid, alice, "8001") and start_server(cid, alice, "8002", "::1"),
       "alice's context runs the echo server on 127.0.0.1:8001 and [::1]:8002", ctx)
    base = f"/contexts/{cid}/ports/8001"

    st, hd, doc = echo(call("GET", base + "/echo/a%20b?x=1&y=%2F", headers={"X-Custom": "v"}))
    ok(st == 200 and doc.get("method") == "GET" and doc.get("path") == "/echo/a%20b?x=1&y=%2F",
       "GET: the server gets the path and query as the client sent them", (st, doc))
    sent = doc.get("headers", {}) if isinstance(doc, dict) else {}
    ok(sent.get("X-Custom") == "v" and "Authorization" not in sent and sent.get("Host"),
       "the client's headers go on, not the key sandgate checked", sent)
    ok(hd.get("x-echo") == "yes" and hd.get("set-cookie") == "a=1",
       "the server's headers come back", hd)
    st, _, doc = echo(call("GET", base + "/echo", token=None, headers={"X-API-Key": alice}))
    sent = doc.get("headers", {}) if isinstance(doc, dict) else {}
    ok(st == 200 and "X-API-Key" not in sent and "X-Api-Key" not in sent,
       "a key in X-API-Key authenticates and stays with sandgate too", (st, sent))

    payload = bytes(range(256)) * 400
    seen = []
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        st, _, doc = echo(call(method, base + "/echo", body=payload))
        seen.append((method, st, isinstance(doc, dict) and doc.get("method"),
                     isinstance(doc, dict) and doc.get("body", "").encode("latin-1") == payload))
    ok(all(s == 200 and m == want and same for want, s, m, same in seen),
       "POST, PUT, PATCH, DELETE and OPTIONS with a 100 KiB body reach it whole", seen)
    st, hd, body = call("HEAD", base + "/echo")
    ok(st == 200 and body == b"" and hd.get("x-echo") == "yes", "HEAD: headers, no body",
       (st, hd, body))
    codes = [call("GET", f"{base}/status/{n}")[0] for n in (201, 404, 418, 500)]
    ok(codes == [201, 404, 418, 500], "the server's status codes come back as they are", codes)
    st, _, big = call("GET", base + "/big")
    ok(st == 200 and hashlib.sha256(big).hexdigest() ==
       hashlib.sha256(bytes(range(256)) * 20480).hexdigest(), "5 MiB, byte for byte", len(big))

    # Streamed: "first" arrives while the server waits for /go, which only
    # this client sends, after reading it.
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.request("GET", base + "/stream", headers={"Authorization": "Bearer " + alice})
    r = c.getresponse()
    first = r.read1(100) if r.status == 200 else b""
    go = call("GET", base + "/go")[0]
    rest = r.read()
    ok(first == b"first\n" and go == 200 and rest == b"second\n",
       "the body is streamed as the server writes it", (r.status, first, go, rest))

    st, _, doc = echo(call("GET", f"/contexts/{cid}/ports/8002/echo"))
    ok(st == 200 and isinstance(doc, dict) and doc.get("path") == "/echo",
       "a server on ::1 only is reached too", (st, doc))

    # E2B's forms: the host names the port and the sandbox.
    st, _, doc = echo(call("GET", "/echo?q=1", headers={"Host": f"8001-{cid}.sandbox.test"}))
    ok(st == 200 and isinstance(doc, dict) and doc.get("path") == "/echo?q=1" and
       doc["headers"].get("Host") == f"8001-{cid}.sandbox.test",
       "Host: 8001-ID.DOMAIN: the whole target, and the Host, go to the server", (st, doc))
    st, _, doc = echo(call("GET", "/echo", headers={"E2b-Sandbox-Id": cid,
                                                    "E2b-Sandbox-Port": "8001"}))
    sent = doc.get("headers", {}) if isinstance(doc, dict) else {}
    ok(st == 200 and "E2b-Sandbox-Id" not in sent,
       "E2b-Sandbox-Id and E2b-Sandbox-Port (docker/'s proxy): the same", (st, sent))
    st, hd, _ = call("GET", "/health", headers={"E2b-Sandbox-Id": cid,
                                                "E2b-Sandbox-Port": "49983"})
    ok(st < 300 and "x-echo" not in hd, "envd's port stays sandgate's own (/health)", (st, hd))
    st, hd, _ = call("GET", "/health", headers={"Host": "8080-gateway.example.test"})
    ok(st == 200 and "x-echo" not in hd,
       "a host that only looks like PORT-ID (no such context) keeps sandgate's routes", st)

    st, _, doc = echo(call("GET", f"/contexts/{cid}/ports/8009/"))
    ok(st == 502 and isinstance(doc, dict) and doc.get("port") == 8009 and
       doc.get("sandboxId") == cid and "nothing listens" in doc.get("message", ""),
       "nothing on the port: 502 naming it", (st, doc))
    bad = [call("GET", f"/contexts/{cid}/ports/{p}/")[0] for p in ("0", "70000", "abc", "")]
    ok(bad == [400] * 4, "a port that is not 1..65535: 400", bad)

    # Tenants: another's key, no key (sandgate's own contexts are never public).
    seen = [call("GET", base + "/echo", token=bob)[0], call("GET", base + "/echo", token=None)[0],
            call("GET", "/echo", token=bob, headers={"Host": f"8001-{cid}.sandbox.test"})[0],
            call("GET", "/echo", token=None, headers={"Host": f"8001-{cid}.sandbox.test"})[0]]
    ok(seen == [404] * 4, "bob's key, and none, see an unknown context (both forms)", seen)

    # max-queued 2: two forwards held by the server, a third refused until
    # they end (the release is a file, written through sandgate's files API).
    held = []
    for _ in range(2):
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        c.request("GET", base + "/hold", headers={"Authorization": "Bearer " + alice})
        held.append(c)
    refused = wait_for(lambda: call("GET", base + "/echo")[0] == 429, timeout=30)
    st, _, doc = echo(call("GET", base + "/echo"))
    put = d.request("PUT", f"/contexts/{cid}/files?path=/tmp/release", raw=b"x",
                    token=alice)[0]
    answers = [(r.status, r.read()) for r in (c.getresponse() for c in held)]
    after = call("GET", base + "/echo")[0]
    ok(refused and st == 429 and isinstance(doc, dict) and doc.get("quota") == "max-queued" and
       put in (200, 201, 204) and answers == [(200, b"released")] * 2 and after == 200,
       "forwards in flight count against max-queued: the third waits for one to end",
       (refused, st, doc, put, answers, after))

    st, _ = d.json("POST", f"/contexts/{cid}/pause", {}, token=alice)
    st2, c2 = d.json("GET", f"/contexts/{cid}", token=alice)
    st3, _, doc = echo(call("GET", base + "/echo"))
    ok(st == 200 and c2.get("state") == "paused" and st3 == 200 and isinstance(doc, dict),
       "a paused sandbox is resumed by a request to its port, its server still there",
       (st, c2.get("state"), st3))

    st, _, out = d.request("POST", "/execute", {"context_id": cid, "code": "6*7"}, token=alice)
    ok(st == 200 and b"42" in out, "the context still runs code", (st, out[-200:]))

    # E2B's SDK, unchanged.
    if not os.access(PY, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
    else:
        env = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=carol)
        r = subprocess.run([PY, os.path.join(HERE, "e2b_ports.py"), bob], env=env,
                           capture_output=True, text=True, timeout=600)
        relay_checks(r, 11, "the Python SDK's e2b_ports.py")
finally:
    d.stop()
done()
