"""Network egress (--egress-allow, {"internet": true}): off by default, opt-in
per context, with the host, other sandboxes, private, link-local (metadata)
and other reserved ranges always blocked unless the operator names a range
inside them.

The test builds its own "internet": a network namespace behind a veth pair,
with a "public" web server and package index on 198.51.100.10, a private
address (10.99.0.10), an allowed private range (10.213.0.10) and a metadata
address (169.254.169.254), the host routing to them.  Real runsc, real pip."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import inet
import mcpraw
from inet import sh, wheel
import sgd
from sgd import Daemon
from tap import ok, diag, done, relay_checks

HERE = os.path.dirname(os.path.abspath(__file__))
E2B_PY = os.path.join(HERE, "..", "..", ".venv-e2b", "bin", "python")

TAG = str(os.getpid() % 100000)
NS = f"sgtinet{TAG}"
VETH = f"sgti{TAG}"
# TEST-NET-2 for the "public" side: TEST-NET-3 (203.0.113.0/24) is where some
# machines reach their package registries, and the route below would hide them.
PUBLIC, PRIVATE, ALLOWED, METADATA = "198.51.100.10", "10.99.0.10", "10.213.0.10", "169.254.169.254"
PUBLIC2 = "198.51.100.20"  # a second public address, for a sandbox's own rules
HOST_SIDE = "198.51.100.1"
ROUTES = ["10.213.0.0/24", "10.99.0.0/24", "169.254.169.254/32"]
FAKE_NS = "sandgate-00000000-0000-4000-8000-000000000000-1"


def internet_up(root):
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS)
    sh("ip", "addr", "add", f"{HOST_SIDE}/24", "dev", VETH)
    sh("ip", "link", "set", VETH, "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    for a in (f"{PUBLIC}/24", f"{PUBLIC2}/24", f"{ALLOWED}/24", f"{PRIVATE}/24", f"{METADATA}/16"):
        sh("ip", "-n", NS, "addr", "add", a, "dev", "eth0")
    sh("ip", "-n", NS, "link", "set", "eth0", "up")
    sh("ip", "-n", NS, "route", "add", "default", "via", HOST_SIDE)
    for r in ROUTES:
        sh("ip", "route", "add", r, "via", PUBLIC)
    wheel(root)
    with open(f"{root}/big", "wb") as f:
        f.write(os.urandom(BIG))
    return [subprocess.Popen(["ip", "netns", "exec", NS, "python3", *cmd],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for cmd in (["-m", "http.server", "8080", "--directory", root], ["-c", SINK])]


# Port 9000: reads what a connection sends, answers with the byte count.
SINK = '''
import socket, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 9000)); srv.listen()
def serve(c):
    n = 0
    while (b := c.recv(65536)):
        n += len(b)
    c.sendall(str(n).encode()); c.close()
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
'''
BIG = 4 << 20


def internet_down(servers):
    for server in servers or ():
        server.kill()
        server.wait()
    for r in ROUTES:
        sh("ip", "route", "del", r, check=False)
    sh("ip", "link", "del", VETH, check=False)
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "netns", "del", FAKE_NS, check=False)
    sh("nft", "delete", "table", "inet", "sandgate", check=False)  # what sandgate leaves
    sh("ip", "link", "del", "sgh16000", check=False)


PROBE = r'''
import json, socket
def tcp(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "open"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", (host, port))
        return "sent"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
def icmp(host):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        return type(e).__name__
    s.settimeout(3)
    try:
        s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (host, 0))  # echo request
        s.recvfrom(64)
        return "reply"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
print(json.dumps({t: tcp(h, p) for t, (h, p) in TARGETS.items()} |
                 {"udp": udp("%s", 9), "icmp": icmp("%s"), "icmp-metadata": icmp("%s")}))
'''


LIMITS = r'''
import json, socket, time, urllib.request
def conn(host):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, 8080))
        return s, "open"
    except OSError as e:
        s.close()
        return None, type(e).__name__
held = [conn("%s") for _ in range(5)]
for s, _ in held:
    if s:
        s.close()
for _ in range(20):
    s, after = conn("%s")
    if s:
        s.close()
        break
    time.sleep(0.5)
t = time.monotonic()
n = len(urllib.request.urlopen("http://%s:8080/big", timeout=60).read())
down = time.monotonic() - t
t = time.monotonic()
s = socket.create_connection((HOST, 9000), timeout=60)
s.sendall(b"x" * BIG)
s.shutdown(socket.SHUT_WR)
up = int(s.recv(64))
print(json.dumps({"conns": [h[1] for h in held], "after": after, "down_bytes": n,
                  "down_s": down, "up_bytes": up, "up_s": time.monotonic() - t}))
'''


def notebook_kernel(d, env):
    """Debian's Notebook 6 with --gateway-url at d and env in its environment
    starts a kernel: (its id, its context at d, Notebook's log).  Notebook's
    shutdown deletes the kernel."""
    tmp = tempfile.mkdtemp(prefix="sgt-nb-")
    e = dict(os.environ, **env)
    for var in ("JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR"):
        e[var] = os.path.join(tmp, var.lower())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(tmp, "log"), "w+")
    nb = subprocess.Popen(["/usr/bin/python3", "-m", "notebook", "--no-browser", "--allow-root",
                           "--ip=127.0.0.1", f"--port={port}", "--NotebookApp.port_retries=0",
                           "--NotebookApp.token=nbtoken", f"--notebook-dir={tmp}",
                           f"--gateway-url={d.url.rstrip('/')}",
                           f"--GatewayClient.auth_token={sgd.TOKEN}",
                           "--GatewayClient.request_timeout=120"],
                          env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    kid, ctx = None, {}
    try:
        deadline = time.time() + 60
        while kid is None and time.time() < deadline and nb.poll() is None:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels", method="POST",
                                         data=b'{"name": "python3"}',
                                         headers={"Authorization": "token nbtoken"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    kid = json.loads(r.read())["id"]
            except OSError:
                time.sleep(0.3)
        if kid:
            ctx = d.json("GET", f"/contexts/{kid}")[1]
    finally:
        nb.send_signal(signal.SIGTERM)
        try:
            nb.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(nb.pid, signal.SIGKILL)
            nb.wait()
        log.seek(0)
        text = log.read()
        shutil.rmtree(tmp, ignore_errors=True)
    return kid, ctx, text


def mcp_initialize(d, flag):
    """initialize at /mcp?internet=FLAG (None: no query): (status, session, answer)."""
    path = "/mcp" + (f"?internet={flag}" if flag else "")
    st, hdrs, data = d.request("POST", path, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                              "params": {"protocolVersion": "2025-11-25",
                                                         "capabilities": {},
                                                         "clientInfo": {"name": "t", "version": "0"}}},
                               headers={"Accept": mcpraw.JSON_AND_SSE})
    sid = hdrs.get("Mcp-Session-Id")
    if sid:
        mcpraw.post(d, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=sid)
    return st, sid, json.loads(data)


def probe(d, cid, targets):
    code = f"TARGETS = {json.dumps(targets)}\n" + PROBE % (PUBLIC, PUBLIC, METADATA)
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, "timeout": 120},
                   headers={"Accept": "application/json"})
    try:
        return json.loads(r["stdout"])
    except Exception:
        return {"error": r}


def run(d, cid, code, timeout=120):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, "timeout": timeout},
                   headers={"Accept": "application/json"})
    return r if st == 200 else {"status": st, "body": r, "stdout": ""}


def netns_names():
    return sorted(n for n in os.listdir("/var/run/netns") if n.startswith("sandgate-")) \
        if os.path.isdir("/var/run/netns") else []


def nft_table():
    return sh("nft", "list", "table", "inet", "sandgate", check=False).returncode == 0


def refused(d):
    """GET /metrics' egress lines: ({context id: packets}, total or None, the page)."""
    st, _, body = d.request("GET", "/metrics")
    page = body.decode()
    per = {m[0]: int(m[1]) for m in
           re.findall(r'^sandgate_egress_refused_total\{context="([^"]+)"\} (\d+)$', page, re.M)}
    total = re.search(r"^sandgate_egress_refused_all_total (\d+)$", page, re.M)
    return per, int(total[1]) if total else None, page


def metric(d, name):
    page = d.request("GET", "/metrics")[2].decode()
    m = re.search(rf"^{re.escape(name)} (\d+)$", page, re.M)
    return int(m[1]) if m else None


def warm_pool(keys_file, alice, carol):
    """The warm pool's sandboxes with a network (the operator's policy): a
    session with no rules of its own and no tenant's limit takes one (E2B's
    create by default too); one with rules, or a tenant's limit (carol's:
    PUBLIC), starts a sandbox of its own, its rules there before its code
    runs."""
    d = Daemon("--pool-size", "1", "--pause-after", "0", "--egress-allow", "0.0.0.0/0",
               "--egress-dns", PUBLIC, "--keys-file", keys_file)
    try:
        one_two = {"one": [PUBLIC, 8080], "two": [PUBLIC2, 8080]}
        asks = [("an allowOut/denyOut context", alice, "/contexts", {"internet": True, "network": {
                    "allowOut": [PUBLIC], "denyOut": ["0.0.0.0/0"]}}, ("open", "refused"), 0),
                ("a context without rules", alice, "/contexts", {"internet": True},
                 ("open", "open"), 1),
                ("a context of a tenant whose limit is PUBLIC", carol, "/contexts",
                 {"internet": True}, ("open", "refused"), 0),
                ("E2B's create, saying nothing of the network", alice, "/sandboxes",
                 {"templateID": "base"}, ("open", "open"), 1)]
        for what, key, path, body, want, pooled in asks:
            warm = sgd.wait_for(
                lambda: metric(d, 'sandgate_pool_kernels{state="ready"}') == 2, 180)
            before = metric(d, "sandgate_pool_claims_total")
            st, c = d.json("POST", path, body, token=key)
            cid = c.get("id") or c.get("sandboxID")
            r = probe(d, cid, one_two)
            got = tuple("open" if r.get(t) == "open" else "refused" for t in ("one", "two"))
            ok(warm and st == 201 and metric(d, "sandgate_pool_claims_total") == before + pooled
               and got == want, f"{what}: {'from the warm pool' if pooled else 'a new sandbox'}"
               f", its first code reaches {PUBLIC} {want[0]}, {PUBLIC2} {want[1]}",
               (warm, st, c, r))
    finally:
        d.stop()


def host_addrs():
    out = sh("ip", "-4", "-o", "addr", "show").stdout
    return [a for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
            if not a.startswith("127.") and not a.startswith("100.127.") and a != HOST_SIDE]


def e2b_network(d, alice, bob):
    """Runs e2b_network.py with alice's key (bob's for another tenant's view);
    the id of the sandbox it leaves running, or None."""
    if not os.access(E2B_PY, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
        return None
    env = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=alice)
    r = subprocess.run([E2B_PY, os.path.join(HERE, "e2b_network.py"), PUBLIC, PUBLIC2, bob],
                       env=env, capture_output=True, text=True, timeout=600)
    return relay_checks(r, 13, "the Python SDK's e2b_network.py").get("SANDBOX")


def main():
    lock = inet.ready(["nft"], HOST_SIDE, ROUTES)
    if not lock:
        return
    root = tempfile.mkdtemp(prefix="sgt-index-")
    keys_dir, keys_file, (bob,) = sgd.tenants("sgt-egress-", "bob")
    alice = sgd.add_key(keys_file, "alice", "--internet")  # may have sandboxes with a network
    carol = sgd.add_key(keys_file, "carol", "--internet", "--egress", PUBLIC)  # at most PUBLIC
    servers = d = None
    try:
        servers = internet_up(root)
        time.sleep(0.5)

        # --- default: no network for anyone -------------------------------------------
        d = Daemon("--pool-size", "0", "--pause-after", "0")
        st, e = d.json("POST", "/contexts", {"internet": True})
        ok(st == 400 and "--egress-allow" in e.get("message", ""),
           "without --egress-allow, {\"internet\": true} is refused with the reason", (st, e))
        per, total, page = refused(d)
        ok("sandgate_egress" not in page and "sandgate_contexts" in page,
           "and /metrics has no egress lines", page[-300:])
        st, e = d.json("POST", "/api/kernels", {"name": "python3",
                                                "env": {"KERNEL_INTERNET": "true"}})
        ok(st == 400 and "--egress-allow" in e.get("message", ""),
           "so is a Jupyter kernel with KERNEL_INTERNET=true", (st, e))
        st, _, e = mcp_initialize(d, "true")
        ok("--egress-allow" in json.dumps(e.get("error", {})),
           "and an MCP session at /mcp?internet=true", e)
        d.stop()
        d = None

        # --- --egress-allow 0.0.0.0/0 ---------------------------------------------------
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow", "0.0.0.0/0",
                   "--egress-dns", PUBLIC, "--keys-file", keys_file)
        ok(nft_table(), "with --egress-allow, table inet sandgate is installed")
        # E2B's network rules, with the real SDK: each sandbox's own, inside the operator's.
        e2b = e2b_network(d, alice, bob)
        st, e = d.json("POST", "/contexts", {"internet": "yes"})
        ok(st == 400 and "boolean" in e.get("message", ""), "'internet' must be a boolean",
           (st, e))
        st, a = d.json("POST", "/contexts", {"internet": True})
        ok(st == 201 and a.get("internet") is True, "POST /contexts {\"internet\": true}", a)
        st, b = d.json("POST", "/contexts", {"internet": True})
        st, plain = d.json("POST", "/contexts", {})
        ok(st == 201 and plain.get("internet") is False, "a context is without network by default",
           plain)
        st, g = d.json("GET", f"/contexts/{a['id']}")
        ok(g.get("internet") is True, "GET /contexts/{id} shows internet", g)

        # sandgate's own rules: POST /contexts {"network"}, PUT /contexts/{id}/network.
        rules = {"allowOut": [PUBLIC], "denyOut": ["0.0.0.0/0"]}
        bad = [d.json("POST", "/contexts", {"network": rules})[0],
               d.json("POST", "/contexts", {"internet": True,
                                            "network": {"allowOut": ["exa_mple.org"]}})[0],
               d.json("POST", "/contexts", {"internet": True, "network": "x"})[0]]
        ok(bad == [400, 400, 400], "POST /contexts: network without internet, a bad host name, not "
           "an object: 400", bad)
        st, nc = d.json("POST", "/contexts", {"internet": True, "network": rules}, token=alice)
        pair = {"one": [PUBLIC, 8080], "two": [PUBLIC2, 8080]}
        r = probe(d, nc["id"], pair)
        ok(st == 201 and nc.get("network") == rules and r.get("one") == "open" and
           r.get("two") not in (None, "open"), "POST /contexts {\"internet\": true, \"network\": "
           f"{{allowOut [{PUBLIC}], denyOut [0.0.0.0/0]}}}}: it reaches {PUBLIC}, not {PUBLIC2}",
           (st, nc, r))
        swapped = {"allowOut": [PUBLIC2], "denyOut": ["0.0.0.0/0"]}
        st_bob, _ = d.json("PUT", f"/contexts/{nc['id']}/network", swapped, token=bob)
        st_bad, e = d.json("PUT", f"/contexts/{nc['id']}/network", {"allowOut": ["a..example"]},
                           token=alice)
        st, _ = d.json("PUT", f"/contexts/{nc['id']}/network", swapped, token=alice)
        r = probe(d, nc["id"], pair)
        g = d.json("GET", f"/contexts/{nc['id']}", token=alice)[1]
        ok(st_bob == 404 and st_bad == 400 and e.get("error") and st == 204 and
           g.get("network") == swapped and r.get("two") == "open" and
           r.get("one") not in (None, "open"),
           f"PUT /contexts/{{id}}/network: bob's 404, a bad host name 400; alice's 204, then it "
           f"reaches {PUBLIC2} and not {PUBLIC}", (st_bob, st_bad, e, st, g, r))
        st, _ = d.json("PUT", f"/contexts/{plain['id']}/network", {"allowOut": [PUBLIC]})
        ok(st == 409, "allowOut for a context without a network: 409", st)
        d.request("DELETE", f"/contexts/{nc['id']}", token=alice)

        port = int(d.url.rsplit(":", 1)[1].rstrip("/"))
        targets = {"public": [PUBLIC, 8080], "metadata": [METADATA, 8080],
                   "private": [PRIVATE, 8080], "allowed-private": [ALLOWED, 8080],
                   "host-veth": [HOST_SIDE, 8080], "gateway-port": [HOST_SIDE, port]}
        for i, h in enumerate(host_addrs()):
            targets[f"host-{i}"] = [h, 22]
            targets[f"host-{i}-gateway"] = [h, port]
        r = probe(d, a["id"], targets)
        diag(f"opted in: {r}")
        ok(r.get("public") == "open", f"an opted-in context reaches {PUBLIC} (a public address)", r)
        ok(r.get("icmp") == "reply" and r.get("icmp-metadata") != "reply",
           "ICMP too: echo from the public address, none from the metadata one", r)
        for t in targets:
            if t != "public":
                ok(r.get(t) not in (None, "open"), f"but not {t} {targets[t][0]}:{targets[t][1]}",
                   r)
        # Refusals are counted per context: a's probes refused some; b, also
        # opted in, has sent nothing yet (its first probe comes below).
        per, total, page = refused(d)
        diag(f"refused: {per}, total {total}")
        ok(per.get(a["id"], 0) > 0 and per.get(b["id"]) == 0 and plain["id"] not in per and
           total is not None and total >= per.get(a["id"], 0),
           "/metrics counts refused packets per context with a network (a > 0, b 0, none for "
           "a context without one) and in total", (per, total))
        body = run(d, a["id"], "import urllib.request\n"
                   f"print(urllib.request.urlopen('http://{PUBLIC}:8080/simple/', timeout=10)"
                   ".read().decode()[:40])")
        ok("sgdemo" in body.get("stdout", ""), "and fetches a page over HTTP", body)
        conf = run(d, a["id"], "print(open('/etc/resolv.conf').read())")
        ok(f"nameserver {PUBLIC}" in conf.get("stdout", ""),
           "--egress-dns is the sandbox's resolver", conf)

        r = probe(d, plain["id"], {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        diag(f"not opted in: {r}")
        ok(r.get("public") not in (None, "open") and r.get("private") not in (None, "open") and
           r.get("udp") != "sent" and r.get("icmp") not in (None, "reply"),
           "a context that did not opt in reaches nothing (TCP, UDP, ICMP)", r)

        pip = (f"import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', "
               f"'install', '--disable-pip-version-check', '--no-cache-dir', '--target', "
               f"'/home/user/pkgs', '--index-url', 'http://{PUBLIC}:8080/simple/', "
               f"'--trusted-host', '{PUBLIC}', 'sgdemo'], "
               "capture_output=True, text=True, timeout=90)\n"
               "print(r.returncode)\nprint(r.stdout[-300:], r.stderr[-300:])")
        r = run(d, a["id"], pip + "\nsys.path.insert(0, '/home/user/pkgs')\n"
                "import sgdemo\nprint('VALUE', sgdemo.VALUE)")
        ok(r.get("stdout", "").startswith("0\n") and "VALUE 42" in r.get("stdout", ""),
           "pip install from a package index works in an opted-in context", r)
        r = run(d, plain["id"], pip)
        ok(not r.get("stdout", "").startswith("0\n"),
           "and fails in a context that did not opt in", r.get("stdout", "")[-300:])
        # `python -m venv` and the venv's own pip, as the sandbox user.
        venv = (f"import subprocess\n"
                f"def sh(*a):\n"
                f"    r = subprocess.run(list(a), capture_output=True, text=True, timeout=240)\n"
                f"    return r.returncode, (r.stdout + r.stderr)[-300:]\n"
                f"print(sh('python', '-m', 'venv', '/tmp/venv'))\n"
                f"print(sh('/tmp/venv/bin/pip', 'install', '--disable-pip-version-check', "
                f"'--no-cache-dir', '--index-url', 'http://{PUBLIC}:8080/simple/', "
                f"'--trusted-host', '{PUBLIC}', 'sgdemo'))\n"
                f"print(sh('/tmp/venv/bin/python', '-c', "
                f"'import sgdemo, sys; print(\"VALUE\", sgdemo.VALUE, sys.prefix)'))\n")
        r = run(d, a["id"], venv, timeout=600)
        out = r.get("stdout", "")
        ok(out.count("(0, ") == 3 and "VALUE 42 /tmp/venv" in out,
           "python -m venv makes a virtual environment whose pip installs from the index", out)

        # Two opted-in contexts cannot reach each other.
        serve = ("import socket, threading\nsrv = socket.socket()\n"
                 "srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                 "srv.bind(('0.0.0.0', 8000)); srv.listen()\n"
                 "threading.Thread(target=lambda: [srv.accept()[0].close() for _ in iter(int, 1)],"
                 " daemon=True).start()\n"
                 f"u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(('{PUBLIC}', 9))\n"
                 "print(u.getsockname()[0])")
        baddr = run(d, b["id"], serve).get("stdout", "").strip()
        self_ok = probe(d, b["id"], {"self": [baddr, 8000]}).get("self")
        r = probe(d, a["id"], {"other": [baddr, 8000]})
        ok(baddr.startswith("100.127.") and self_ok == "open" and r.get("other") != "open",
           f"two opted-in contexts cannot reach each other ({baddr}:8000 open for itself, "
           f"{r.get('other')} for the other)", (baddr, self_ok, r))

        # --- pause, resume, snapshot and fork with a network -----------------------------
        # runsc saves the sandbox's network stack.  Across a pause an open
        # connection to a host outside carries on (the host kept its end)
        # and a listening socket listens again; a fork gets a namespace and
        # address of its own, its listening sockets listen, and the
        # connections it inherited are broken (docs/api.md).
        addr = ("u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"u.connect(('{PUBLIC}', 9)); print(u.getsockname()[0])")
        r = run(d, a["id"], "import socket\n"
                f"sink = socket.create_connection(('{PUBLIC}', 9000), timeout=10)\n"
                "sink.sendall(b'x' * 1000)\n"
                "srv = socket.socket(); srv.bind(('127.0.0.1', 8001)); srv.listen()\n" + addr)
        a_addr = r.get("stdout", "").strip()
        st, p = d.json("POST", f"/contexts/{a['id']}/pause", timeout=120)
        ok(st == 200 and p.get("state") == "paused" and p.get("internet") is True,
           "a context with a network and a connection open to a host outside pauses", (st, p))
        r = run(d, a["id"], "sink.sendall(b'y' * 500); sink.shutdown(socket.SHUT_WR)\n"
                "print(sink.recv(64).decode())\n"
                "c = socket.create_connection(('127.0.0.1', 8001), timeout=5); print('listens')")
        ok(r.get("stdout") == "1500\nlistens\n",
           "after the resume that connection carries on (the host got all 1500 bytes) and its "
           "listening socket listens again", r)
        r = probe(d, a["id"], {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        ok(r.get("public") == "open" and r.get("private") != "open",
           "and its network works, within the rules", r)
        run(d, a["id"], f"held = socket.create_connection(('{PUBLIC}', 9000), timeout=10)\n"
            "held.sendall(b'h' * 10)")
        st, snap = d.json("POST", f"/contexts/{a['id']}/snapshots", {}, timeout=180)
        st2, f = d.json("POST", f"/contexts/{a['id']}/fork", {}, timeout=180)
        r = run(d, a["id"], "held.sendall(b'p' * 5); held.shutdown(socket.SHUT_WR)\n"
                "print(held.recv(64).decode())")
        ok(st == 201 and st2 == 201 and r.get("stdout") == "15\n",
           "a snapshot and a fork of it: 201, and the context runs on with its connection",
           (st, snap, st2, f, r))
        r = probe(d, f.get("id"), {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        ok(f.get("internet") is True and r.get("public") == "open" and r.get("private") != "open",
           "the fork has a network, within the rules", (f, r))
        r = run(d, f.get("id"), "try:\n    held.sendall(b'c'); print('sent')\n"
                "except OSError as e:\n    print('broken', type(e).__name__)\n"
                "c = socket.create_connection(('127.0.0.1', 8001), timeout=5); print('listens')\n"
                + addr)
        lines = r.get("stdout", "").split()
        ok(len(lines) == 4 and lines[0] == "broken" and lines[2] == "listens" and
           lines[3].startswith("100.127.") and lines[3] != a_addr,
           f"in the fork the connection it inherited is broken ({lines[1:2]}), its listening "
           f"socket listens, and its address is its own ({lines[3:]} vs {a_addr})", r)
        st, c2 = d.json("POST", "/contexts", {"snapshot": snap.get("id")}, timeout=180)
        r = probe(d, c2.get("id"), {"public": [PUBLIC, 8080]})
        ok(st == 201 and c2.get("internet") is True and r.get("public") == "open",
           "a context from the snapshot has a network too", (st, c2, r))
        st, jk = d.json("POST", "/api/kernels",
                        {"name": "python3", "env": {"KERNEL_SNAPSHOT": snap.get("id")}},
                        timeout=180)
        st2, g = d.json("GET", f"/contexts/{jk.get('id')}")
        ok(st == 201 and g.get("internet") is True,
           "so does a Jupyter kernel from it (KERNEL_SNAPSHOT, no KERNEL_INTERNET)", (st, jk, g))
        for extra in (f.get("id"), c2.get("id"), jk.get("id")):
            d.json("DELETE", f"/contexts/{extra}")
        d.json("DELETE", f"/snapshots/{snap.get('id')}")
        deadline = time.time() + 15
        alive = 2 + (1 if e2b else 0)  # a, b and the E2B sandbox left running
        while len(netns_names()) > alive and time.time() < deadline:
            time.sleep(0.2)

        # Deleting a context removes its namespace and veth.
        names = netns_names()
        ok(len(names) == alive, "one namespace per opted-in sandbox", names)
        links = sorted(os.path.basename(p) for p in glob.glob("/sys/class/net/sgh*"))
        st, _ = d.json("DELETE", f"/contexts/{b['id']}")
        deadline = time.time() + 15
        while True:
            left = [n for n in netns_names() if b["id"] in n]
            links2 = sorted(os.path.basename(p) for p in glob.glob("/sys/class/net/sgh*"))
            if (not left and len(links2) < len(links)) or time.time() > deadline:
                break
            time.sleep(0.1)
        ok(st == 204 and not left and len(links2) == len(links) - 1,
           "deleting a context removes its namespace and its veth", (left, links, links2))
        per2, total2, _ = refused(d)
        ok(b["id"] not in per2 and per2.get(a["id"], 0) >= per.get(a["id"], 0) and
           total2 is not None and total2 >= total,
           "a deleted context's refusal line is gone; the others and the total stay", (per2, total2))
        sets = sh("nft", "-j", "list", "set", "inet", "sandgate", "refused_by").stdout
        ok(len(re.findall(r'"val": "sgh\d+"', sets)) == sum(1 for n in per2.values() if n > 0),
           "and its element in the set refused_by went with its veth", sets[-400:])

        # A restart re-adopts the opted-in session with its network.
        d.restart()
        r = probe(d, a["id"], {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        st, g = d.json("GET", f"/contexts/{a['id']}")
        ok(r.get("public") == "open" and r.get("private") != "open" and g.get("internet") is True,
           "after a restart the re-adopted session has its network and its rules", (r, g))
        if e2b:
            r = probe(d, e2b, {"allowed": [PUBLIC, 8080], "denied": [PUBLIC2, 8080]})
            ok(r.get("allowed") == "open" and r.get("denied") == "ConnectionRefusedError",
               "and an E2B sandbox keeps its own rules (allow one address, deny the rest)", r)
            st, _ = d.json("POST", f"/contexts/{e2b}/restart", {}, token=alice)
            r = probe(d, e2b, {"allowed": [PUBLIC, 8080], "denied": [PUBLIC2, 8080]})
            ok(st == 204 and r.get("allowed") == "open" and r.get("denied") == "ConnectionRefusedError",
               "so does its new sandbox after a kernel restart", (st, r))
            nft = sh("nft", "list", "map", "inet", "sandgate", "sandboxes").stdout
            ok(d.json("DELETE", f"/sandboxes/{e2b}", token=alice)[0] == 204 and
               sgd.wait_for(lambda: sh("nft", "list", "map", "inet", "sandgate",
                                       "sandboxes").stdout.count("jump sb") ==
                            nft.count("jump sb") - 1),
               "a deleted sandbox's rules go with it", nft)

        # A crash leaves the table and the namespace; the next start takes them over.
        for p in sh("pgrep", "-f", "--", f"--state-dir {d.dir}", check=False).stdout.split():
            os.kill(int(p), signal.SIGKILL)
        d.proc.wait()
        d.drain.join(timeout=10)
        veths = glob.glob("/sys/class/net/sgh*")
        ok(nft_table() and veths, "after a crash the rules and the running session's veth are left",
           veths)
        d._start()
        r = probe(d, a["id"], {"public": [PUBLIC, 8080], "metadata": [METADATA, 8080]})
        ok(r.get("public") == "open" and r.get("metadata") != "open",
           "the next start installs the rules again and the session works", r)
        # The same opt-in from Jupyter clients and MCP clients.
        st, e = d.json("POST", "/api/kernels", {"name": "python3",
                                                "env": {"KERNEL_INTERNET": "maybe"}})
        ok(st == 400 and "KERNEL_INTERNET" in e.get("message", ""),
           "KERNEL_INTERNET must be true or false", (st, e))
        st, jk = d.json("POST", "/api/kernels", {"name": "python3",
                                                 "env": {"KERNEL_INTERNET": "true"}})
        st2, g = d.json("GET", f"/contexts/{jk.get('id')}")
        r = probe(d, jk.get("id"), {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        ok(st == 201 and g.get("internet") is True and r.get("public") == "open" and
           r.get("private") != "open",
           "a Jupyter kernel started with env KERNEL_INTERNET=true (what a Jupyter server with "
           "--gateway-url forwards) has the network, within the rules", (st, g, r))
        d.json("DELETE", f"/api/kernels/{jk.get('id')}")
        kid, g, nb_log = notebook_kernel(d, {"KERNEL_INTERNET": "true"})
        ok(kid and g.get("internet") is True,
           "Notebook started with KERNEL_INTERNET=true and --gateway-url: its kernel has the "
           "network", (kid, g, nb_log[-1500:]))
        st, _, e = mcp_initialize(d, "maybe")
        ok("internet" in json.dumps(e.get("error", {})), "/mcp?internet=maybe is refused", e)
        for flag, want in (("true", "open"), (None, "closed")):
            st, sid, e = mcp_initialize(d, flag)
            _, tools = mcpraw.post(d, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                   session=sid, accept="application/json")[1:]
            desc = tools["result"]["tools"][0]["description"]
            code = f"TARGETS = {json.dumps({'public': [PUBLIC, 8080]})}\n" + \
                PROBE % (PUBLIC, PUBLIC, METADATA)
            _, ans = mcpraw.call(d, sid, "execute_python", {"code": code, "timeout": 60})
            r = json.loads(mcpraw.text_of(ans) or "{}")
            ok((r.get("public") == "open") == (want == "open") and
               ("internet" in desc) == (want == "open"),
               f"an MCP session at /mcp{'?internet=' + flag if flag else ''}: {PUBLIC} is "
               f"{want}, and execute_python's description says so", (r, desc[:160]))
            d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        d.stop()
        d = None
        ok(nft_table() and not netns_names(),
           "after sandgate stops, the namespace names are gone and the table stays (sessions "
           "that run on keep their rules)", netns_names())

        # --- --egress-allow 10.213.0.0/24 only; a crash's leftovers go at start ------------
        sh("ip", "netns", "add", FAKE_NS)
        sh("ip", "link", "add", "sgh16000", "type", "veth", "peer", "name", "sgs16000")
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow", "10.213.0.0/24",
                   "--egress-max-conns", "3", "--egress-rate", "1024")
        ok(FAKE_NS not in netns_names() and not os.path.exists("/sys/class/net/sgh16000"),
           "at start, a namespace and a veth no sandbox claims (a crash's leftovers) are removed",
           (netns_names(), os.path.exists("/sys/class/net/sgh16000")))
        st, c = d.json("POST", "/contexts", {"internet": True})
        r = probe(d, c["id"], {"allowed": [ALLOWED, 8080], "public": [PUBLIC, 8080],
                                "private": [PRIVATE, 8080], "metadata": [METADATA, 8080]})
        diag(f"10.213.0.0/24 only: {r}")
        ok(r.get("allowed") == "open" and all(r.get(t) not in (None, "open") for t in
                                              ("public", "private", "metadata")),
           "--egress-allow 10.213.0.0/24: that private range is reachable, nothing else", r)

        # --egress-max-conns 3: a fourth connection open at once is refused; closing
        # one makes room.  --egress-rate 1024 (KiB/s): 4 MiB take seconds each way.
        r = run(d, c["id"], f"HOST = '{ALLOWED}'\nBIG = {BIG}\n" +
                LIMITS % (ALLOWED, ALLOWED, ALLOWED))
        try:
            lim = json.loads(r["stdout"])
        except Exception:
            lim = {"error": r}
        diag(f"limits: {lim}")
        ok(lim.get("conns") == ["open"] * 3 + ["ConnectionRefusedError"] * 2 and
           lim.get("after") == "open",
           "--egress-max-conns 3: three connections open, the next ones refused, room again "
           "once they close", lim)
        ok(lim.get("down_bytes") == BIG and lim.get("down_s", 0) >= BIG / (2 * 1024 * 1024),
           "--egress-rate 1024: 4 MiB downloaded whole, no faster than twice the rate", lim)
        ok(lim.get("up_bytes") == BIG and lim.get("up_s", 0) >= BIG / (2 * 1024 * 1024),
           "and uploaded whole, no faster than twice the rate", lim)
        d.stop()
        d = None

        warm_pool(keys_file, alice, carol)

        for bad, want in (("10.0.0.0/33", "not CIDR"), ("10.1.2.3/8", "not CIDR"),
                          ("::/0", "IPv6"), ("198.51.100.0/24:0", "not CIDR")):
            r = subprocess.run([sgd.SANDGATE, "--egress-allow", bad, "--state-dir", root],
                               capture_output=True, text=True, timeout=30)
            ok(r.returncode != 0 and want in r.stderr,
               f"--egress-allow {bad}: refused at start ({r.stderr.strip()[:90]})", r.stderr)
    except Exception as e:
        ok(False, "egress", f"{type(e).__name__}: {e}\n" + ("".join(d.log[-30:]) if d else ""))
    finally:
        if d:
            d.stop()
        internet_down(servers)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(keys_dir, ignore_errors=True)


if __name__ == "__main__":
    signal.alarm(900)  # never hang the suite
    main()
    done()
