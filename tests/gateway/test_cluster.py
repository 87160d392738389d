"""Three sandgate replicas behind HAProxy (docker/local-cluster.sh and the
configuration docker/haproxy-config.sh writes): new contexts spread over the
replicas, every request that names an id reaches the replica that made it
(REST, Jupyter REST and WebSocket, MCP), an id no replica made gets a clear
404, the joined lists (GET /contexts, /api/kernels) answer for the caller's
tenant on every replica (two tenants of one keys file, given to each
replica: each sees its own contexts of all three replicas and none of the
other's, with its key in Authorization or ?token=; the admin sees all), a
replica killed with SIGKILL answers a clear 503 at once while the
others carry on, and the same replica restarted on its state dir has its
contexts back with their variables.  Then the real clients' scripts (E2B SDK,
@jupyterlab/services, the MCP SDK) run through the proxy, and E2B's SDKs
configured by E2B_DOMAIN alone reach the proxy's TLS side by name: from a
network namespace whose DNS (dnsmasq) answers every name of the domain with
the proxy's address, trusting a test CA (api.DOMAIN, PORT-ID.DOMAIN)."""
import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from sgd import Daemon, TOKEN, add_key, free_port, stdout
from tap import ok, diag, done, relay_checks
from mcpraw import initialize, call, text_of, post, err_code
from wsclient import WS

SRC = os.environ.get("SG_SRCDIR", ".")
BUILD = os.environ.get("SG_BUILDDIR", ".")
CLUSTER = os.path.join(SRC, "docker/local-cluster.sh")
REPLICAS = ["r0", "r1", "r2"]
UNKNOWN = "00000000-0000-4000-8000-000000000000"  # a tag no replica here has


def tag(replica):
    return hashlib.sha256(replica.encode()).hexdigest()[:8]


class Proxy:
    """The proxy's address, with sgd.Daemon's request helpers."""
    request = Daemon.request
    json = Daemon.json

    def __init__(self, url):
        self.url = url


def cluster(*args, timeout=300):
    return subprocess.run([CLUSTER, *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def execute(p, code, context_id, timeout=120):
    """(status, replica, lines or error document) of an execution through the proxy."""
    status, hdrs, data = p.request("POST", "/execute", {"code": code, "context_id": context_id},
                                   timeout=timeout)
    replica = hdrs.get("X-Sandgate-Replica")
    if status != 200:
        try:
            return status, replica, json.loads(data)
        except ValueError:
            return status, replica, {"error": None, "message": "", "body": data[:300]}
    return status, replica, [json.loads(l) for l in data.decode().splitlines() if l.strip()]


DOMAIN = "sandgate.test"
NS, VETH = f"sgdomain{os.getpid() % 10000}", f"sgdom{os.getpid() % 10000}"
HOST_SIDE, NS_SIDE = "10.231.77.1", "10.231.77.2"
TLS = tempfile.mkdtemp(prefix="sg-tls-", dir="/tmp")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def domain_setup():
    """A test CA and a certificate for DOMAIN and *.DOMAIN (HAProxy's PEM);
    network namespace NS, reached from the host over a veth pair; dnsmasq on
    the host's side answering DOMAIN's names with HOST_SIDE, the namespace's
    resolver (ip netns exec reads /etc/netns/NS/resolv.conf).  Returns the
    dnsmasq process."""
    ca, key = os.path.join(TLS, "ca.pem"), os.path.join(TLS, "ca.key")
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", key,
       "-out", ca, "-subj", "/CN=sandgate test CA", "-addext",
       "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaf, lkey, csr, ext = (os.path.join(TLS, n) for n in ("leaf.pem", "leaf.key", "leaf.csr",
                                                            "leaf.ext"))
    with open(ext, "w") as f:
        f.write(f"subjectAltName=DNS:{DOMAIN},DNS:*.{DOMAIN}\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid,issuer\n")
    sh("openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", lkey, "-out", csr,
       "-subj", f"/CN=*.{DOMAIN}")
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", key, "-CAcreateserial",
       "-days", "2", "-out", leaf, "-extfile", ext)
    with open(os.path.join(TLS, "proxy.pem"), "w") as out:
        for part in (leaf, lkey):
            with open(part) as f:
                out.write(f.read())
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS)
    sh("ip", "addr", "add", f"{HOST_SIDE}/30", "dev", VETH)
    sh("ip", "link", "set", VETH, "up")
    sh("ip", "-n", NS, "addr", "add", f"{NS_SIDE}/30", "dev", "eth0")
    sh("ip", "-n", NS, "link", "set", "eth0", "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    os.makedirs(f"/etc/netns/{NS}", exist_ok=True)
    with open(f"/etc/netns/{NS}/resolv.conf", "w") as f:
        f.write(f"nameserver {HOST_SIDE}\n")
    dns = subprocess.Popen(["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
                            "--no-resolv", "--no-hosts", "--bind-interfaces",
                            f"--listen-address={HOST_SIDE}", "--except-interface=lo",
                            f"--address=/{DOMAIN}/{HOST_SIDE}", "--pid-file", "--user=root"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return dns


def domain_teardown(dns):
    if dns is not None:
        dns.kill()
        dns.wait()
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "link", "del", VETH, check=False)
    shutil.rmtree(f"/etc/netns/{NS}", ignore_errors=True)
    shutil.rmtree(TLS, ignore_errors=True)


def in_domain(cmd, key, timeout=600):
    """Runs cmd in NS, as a client configured by E2B_DOMAIN would be."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_DOMAIN=DOMAIN, E2B_API_KEY=key, SSL_CERT_FILE=os.path.join(TLS, "ca.pem"),
               NODE_EXTRA_CA_CERTS=os.path.join(TLS, "ca.pem"),
               PYTHONPATH=os.path.join(SRC, "tests", "lib"))
    return subprocess.run(["ip", "netns", "exec", NS, *cmd], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=os.path.join(SRC, "tests"))


def pid_of(replica):
    with open(os.path.join(RUN, replica, "pid")) as f:
        return int(f.read())


RUN = tempfile.mkdtemp(prefix="sg-cluster-", dir="/tmp")
os.chmod(RUN, 0o711)
ENV = dict(os.environ, SANDGATE_CLUSTER_DIR=RUN, SANDGATE=os.path.join(BUILD, "sandgate"),
           SANDGATE_TOKEN=TOKEN, SANDGATE_PROXY_TLS=f"{HOST_SIDE}:443={TLS}/proxy.pem")
PORT = free_port()
p = Proxy(f"http://127.0.0.1:{PORT}")
started = []
dnsmasq = None
# Two tenants in one keys file, which every replica reads.
KEYS = os.path.join(RUN, "keys")
ALICE = add_key(KEYS, "alice")
BOB = add_key(KEYS, "bob")
try:
    dnsmasq = domain_setup()
    r = cluster("up", "3", str(PORT), "--", "--pool-size", "1", "--keys-file", KEYS)
    ok(r.returncode == 0, "local-cluster.sh up 3 starts three replicas and HAProxy",
       r.stdout[-2000:] + r.stderr[-3000:])
    if r.returncode != 0:
        raise SystemExit
    started = [pid_of(x) for x in REPLICAS]
    with open(os.path.join(RUN, "haproxy.pid")) as f:
        started.append(int(f.read()))
    st = cluster("status")
    ok(st.returncode == 0 and all(f'"replica":"{x}"' in st.stdout for x in REPLICAS)
       and "haproxy" in st.stdout, "status shows the three replicas healthy and HAProxy",
       st.stdout + st.stderr)

    # --- new contexts spread over the replicas --------------------------------------
    contexts = {}  # id -> replica
    bad = []
    for i in range(30):
        status, hdrs, data = p.request("POST", "/contexts", {})
        replica = hdrs.get("X-Sandgate-Replica")
        cid = json.loads(data).get("id") if status == 201 else None
        if status != 201 or replica not in REPLICAS or not cid.startswith(tag(replica) + "-"):
            bad.append((status, replica, data[:200]))
        else:
            contexts[cid] = replica
    counts = {x: sum(1 for v in contexts.values() if v == x) for x in REPLICAS}
    ok(not bad and len(contexts) == 30,
       "30 POST /contexts: each answered 201 by a replica whose tag begins the id", bad)
    ok(all(c >= 8 for c in counts.values()),
       f"round robin: the contexts are spread over all three replicas {counts}", counts)

    # --- each context keeps its variables, routed by context_id ----------------------
    def set_and_read(cid):
        s1, r1, out1 = execute(p, f"v = {cid!r}", cid)
        s2, r2, out2 = execute(p, "print(v)", cid)
        return cid, (s1, r1, s2, r2, stdout(out2) if s2 == 200 else out2)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = dict(pool.map(set_and_read, contexts))
    wrong = {c: v for c, v in results.items()
             if v != (200, contexts[c], 200, contexts[c], c + "\n")}
    ok(not wrong, "every context keeps a variable across /execute calls routed by its "
       "context_id, on the replica that made it", wrong)

    status, hdrs, data = p.request("GET", "/contexts")
    listed = [c["id"] for c in json.loads(data)] if status == 200 else []
    ok(status == 200 and set(contexts) <= set(listed) and len(listed) == len(set(listed)),
       "GET /contexts lists every replica's contexts, each once (the proxy joins the lists)",
       (status, len(listed), data[:300]))
    status, answer = p.json("GET", "/contexts", token="wrong-token-0123456789abcdef")
    ok(status == 401, "a list asked with a wrong token: the replicas' 401", (status, answer))

    # --- tenants: the joined lists answer for the caller's key ----------------------
    owned = {"alice": {}, "bob": {}}  # tenant -> {id: replica}
    for i in range(12):
        name, key = ("alice", ALICE) if i % 2 == 0 else ("bob", BOB)
        status, hdrs, data = p.request("POST", "/contexts", {}, token=key)
        if status == 201:
            owned[name][json.loads(data)["id"]] = hdrs.get("X-Sandgate-Replica")
    ok(all(len(o) == 6 and set(o.values()) == set(REPLICAS) for o in owned.values()),
       "alice and bob (keys of one keys file) each have contexts on all three replicas",
       owned)

    def listed(path, key, query=False):
        """(status, {id: tenant}) of a joined list asked with key (the header, or ?token=)."""
        status, _, data = p.request("GET", path + (f"?token={key}" if query else ""),
                                    token=None if query else key)
        try:
            items = json.loads(data)
            return status, {x["id"]: x.get("tenant") for x in items}
        except (ValueError, TypeError, KeyError):
            return status, data[:300]

    everyone = set(contexts) | set(owned["alice"]) | set(owned["bob"])
    for name, key, other in (("alice", ALICE, "bob"), ("bob", BOB, "alice")):
        for path, query in (("/contexts", False), ("/contexts", True), ("/api/kernels", True)):
            how = "?token=" if query else "Authorization"
            status, got = listed(path, key, query)
            ok(status == 200 and isinstance(got, dict) and set(got) == set(owned[name]),
               f"GET {path} with {name}'s key ({how}) through the proxy: exactly {name}'s "
               "contexts from every replica, none of the other's or the admin's",
               (status, got if not isinstance(got, dict) else
                {"missing": set(owned[name]) - set(got),
                 "foreign": set(got) & (everyone - set(owned[name]))}))
        status, got = listed("/contexts", key)
        ok(isinstance(got, dict) and set(got.values()) == {name},
           f"... each entry marked with tenant {name}", got)
        st, answer = p.json("GET", f"/contexts/{next(iter(owned[other]))}", token=key)
        ok(st == 404 and answer.get("error") == "not_found",
           f"{name} asking for one of {other}'s contexts through the proxy: 404", (st, answer))
    status, got = listed("/contexts", TOKEN)
    ok(status == 200 and isinstance(got, dict) and everyone <= set(got) and
       {got[c] for c in owned["alice"]} == {"alice"} and {got[c] for c in owned["bob"]} == {"bob"},
       "the admin's token sees every tenant's contexts of every replica, with their tenant",
       (status, len(got) if isinstance(got, dict) else got))
    for c in list(owned["alice"]) + list(owned["bob"]):
        p.request("DELETE", f"/contexts/{c}")

    # --- Jupyter: REST and a WebSocket through the proxy ----------------------------
    status, hdrs, data = p.request("POST", "/api/kernels", {"name": "python3"})
    kernel = json.loads(data) if status == 201 else {}
    kid, kreplica = kernel.get("id", ""), hdrs.get("X-Sandgate-Replica")
    ok(status == 201 and kreplica in REPLICAS and kid.startswith(tag(kreplica) + "-"),
       "POST /api/kernels: a kernel id with its replica's tag", (status, data[:300]))
    status, hdrs, data = p.request("GET", f"/api/kernels/{kid}")
    ok(status == 200 and json.loads(data)["id"] == kid and
       hdrs.get("X-Sandgate-Replica") == kreplica,
       "GET /api/kernels/{id} reaches the kernel's replica", (status, data[:300]))
    status, answer = p.json("GET", "/api/kernels")
    ok(status == 200 and kid in [k["id"] for k in answer],
       "GET /api/kernels lists the kernel it started", answer)
    try:
        ws = WS(p.url, kid, TOKEN, session="cluster-ws")
        reply, io = ws.execute("k = 6 * 7\nprint(k)")
        out = "".join(m["content"].get("text", "") for m in io
                      if m["header"]["msg_type"] == "stream")
        ok(reply["content"]["status"] == "ok" and out == "42\n",
           "a WebSocket execute through the proxy", (reply["content"], out))
        reply, io = ws.execute("print(k + 1)")
        out = "".join(m["content"].get("text", "") for m in io
                      if m["header"]["msg_type"] == "stream")
        ok(out == "43\n", "the kernel keeps its variables across WebSocket executes", out)
        ws.close()
    except Exception as e:  # noqa: BLE001 -- report, go on
        ok(False, "a WebSocket execute through the proxy", repr(e))
    status, hdrs, data = p.request("POST", "/api/sessions",
                                   {"path": "c.ipynb", "type": "notebook", "name": "c",
                                    "kernel": {"name": "python3"}})
    sess = json.loads(data) if status == 201 else {}
    sreplica = hdrs.get("X-Sandgate-Replica")
    ok(status == 201 and sess.get("id", "").startswith(tag(sreplica or "") + "-") and
       sess["kernel"]["id"].startswith(tag(sreplica or "") + "-"),
       "POST /api/sessions: session and kernel ids with the replica's tag", (status, data[:300]))
    status, answer = p.json("GET", f"/api/sessions/{sess.get('id')}")
    ok(status == 200 and answer["id"] == sess.get("id"),
       "GET /api/sessions/{id} reaches the session's replica", (status, answer))

    # --- MCP: a session keeps its kernel's state --------------------------------------
    status, sid, answer = initialize(p)
    ok(status == 200 and sid and sid[:8] in [tag(x) for x in REPLICAS],
       "MCP initialize: a session id with a replica's tag", (status, sid, answer))
    status, answer = call(p, sid, "execute_python", {"code": "m = 21"})
    status, answer = call(p, sid, "execute_python", {"code": "print(m * 2)"}, rid=2)
    ok(status == 200 and "42" in text_of(answer),
       "MCP: the session's kernel keeps a variable across tool calls", (status, answer))

    # --- volumes: on the replica that made them; sandboxes mounting one placed there ------
    vols = {}  # name -> (id, token, replica)
    for i in range(3):
        status, hdrs, data = p.request("POST", "/volumes", {"name": f"v{i}", "sizeMiB": 16},
                                       token=ALICE)
        v = json.loads(data) if status == 201 else {}
        vols[f"v{i}"] = (v.get("volumeID", ""), v.get("token"), hdrs.get("X-Sandgate-Replica"))
    ok(len({r for _, _, r in vols.values()}) == 3 and
       all(i.startswith(tag(r) + "-") for i, _, r in vols.values()),
       "POST /volumes: round robin, each id beginning with its replica's tag", vols)
    status, listed_vols = p.json("GET", "/volumes", token=ALICE)
    ok(status == 200 and sorted(v["name"] for v in listed_vols) == ["v0", "v1", "v2"],
       "GET /volumes joins every replica's", (status, listed_vols))
    placed = []
    for name, (vid, vtok, replica) in vols.items():
        st1, _, _ = p.request("PUT", f"/volumecontent/{vid}/file?path=/f", token=vtok,
                              raw=f"in {name}".encode())
        for body in ({"volumeMounts": [{"name": name, "path": "/mnt/v"}]},):
            status, hdrs, data = p.request("POST", "/contexts", body, token=ALICE)
            cid = json.loads(data).get("id", "") if status == 201 else ""
            s2, _, out = execute(p, "print(open('/mnt/v/f').read())", cid) if cid else (0, 0, [])
            placed.append((st1, status, cid[:8] == vid[:8], stdout(out) if s2 == 200 else out))
        status, hdrs, data = p.request("POST", "/sandboxes", {
            "templateID": "base", "volumeMounts": [{"name": name, "path": "/mnt/v"}]},
            token=None, headers={"X-API-Key": ALICE})
        sbx = json.loads(data).get("sandboxID", "") if status == 201 else ""
        placed.append((st1, status, sbx[:8] == vid[:8], data[:200] if status != 201 else ""))
        for c in (cid, sbx):
            if c:
                p.request("DELETE", f"/contexts/{c}", token=ALICE)
    ok(placed == [(201, 201, True, f"in v{i}\n") if j == 0 else (201, 201, True, "")
                  for i in range(3) for j in range(2)],
       "POST /contexts and E2B's POST /sandboxes with volumeMounts: placed on the volume's "
       "replica, which mounts it", placed)
    status, answer = p.json("GET", f"/volumes/{UNKNOWN}", token=ALICE)
    ok(status == 404, "a volume id no replica made: 404", (status, answer))
    for vid, _, _ in vols.values():
        p.request("DELETE", f"/volumes/{vid}", token=ALICE)

    # --- a context moves to another replica, its id kept ----------------------------------
    status, hdrs, data = p.request("POST", "/contexts", {}, token=ALICE)
    mid, home = json.loads(data)["id"], hdrs.get("X-Sandgate-Replica")
    execute(p, "moved = 'kept'; open('m.txt', 'w').write('file kept')", mid)
    there = next(x for x in REPLICAS if x != home)
    status, answer = p.json("POST", f"/contexts/{mid}/move", {"to": there}, token=ALICE)
    ok(status == 403, "a tenant's key may not move a context (the operator's)", (status, answer))
    status, answer = p.json("POST", f"/contexts/{mid}/move", {"to": there}, token=BOB)
    ok(status == 404, "another tenant's context is unknown to it", (status, answer))
    status, answer = p.json("POST", f"/contexts/{mid}/move", {"to": "nowhere"})
    ok(status == 400 and "peers" in answer.get("message", ""), "an unknown replica: 400",
       (status, answer))
    result = {}
    mover = threading.Thread(target=lambda: result.update(
        r=p.json("POST", f"/contexts/{mid}/move", {"to": there})))
    mover.start()
    during = []  # from its first moment: the replica waits for the proxy to know
    while mover.is_alive() or len(during) < 3:
        status, replica, out = execute(p, "print(moved)", mid)
        during.append((status, stdout(out) if status == 200 else out))
    mover.join()
    status, answer = result["r"]
    ok(status == 200 and answer.get("replica") == there and answer.get("id") == mid,
       f"POST /contexts/{{id}}/move: moved from {home} to {there} in {answer.get('ms')} ms",
       (status, answer))
    ok(all(d == (200, "kept\n") for d in during), f"{len(during)} executions sent while it "
       "moved (from its first moment) were answered, none refused", during)
    got = None
    for _ in range(100):  # the proxy learns the route within half a second
        status, replica, out = execute(p, "print(moved, open('m.txt').read())", mid)
        got = (status, replica, stdout(out) if status == 200 else out)
        if replica == there and status == 200:
            break
        time.sleep(0.05)
    ok(got == (200, there, "kept file kept\n"), "the same id reaches it on its new replica, "
       "its variables and files kept", got)
    status, answer = p.json("GET", f"/contexts/{mid}", token=ALICE)
    ok(status == 200 and answer.get("tenant") == "alice", "it is still alice's", (status, answer))
    for _ in range(100):  # the old replica lets it go 1.5 s after the move
        status, _, data = p.request("GET", "/contexts", token=ALICE)
        ids = [c["id"] for c in json.loads(data)] if status == 200 else []
        if ids.count(mid) == 1:
            break
        time.sleep(0.05)
    ok(ids.count(mid) == 1, "the joined list shows it once", ids)
    status, answer = p.json("DELETE", f"/contexts/{mid}", token=ALICE)
    ok(status in (200, 204), "it is deleted where it is now", (status, answer))

    # --- ids no replica made ---------------------------------------------------------------
    for method, path in (("GET", f"/contexts/{UNKNOWN}"), ("GET", f"/api/kernels/{UNKNOWN}"),
                         ("DELETE", f"/api/sessions/{UNKNOWN}"),
                         ("GET", f"/contexts/{UNKNOWN}/files")):
        status, answer = p.json(method, path)
        ok(status == 404 and answer["error"] == "not_found" and
           "no replica" in answer["message"] and UNKNOWN[:8] in answer["message"],
           f"{method} {path.replace(UNKNOWN, '<unknown tag>')}: a clear 404", (status, answer))
    status, _, answer = execute(p, "1", UNKNOWN)
    ok(status == 404 and answer["error"] == "not_found" and "no replica" in answer["message"],
       "POST /execute with an unknown tag's context_id: a clear 404", (status, answer))
    status, _, answer = post(p, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=UNKNOWN)
    ok(status == 404 and err_code(answer) == -32001,
       "MCP with an unknown tag's session id: 404, JSON-RPC -32001", (status, answer))

    # --- a replica dies (one of its peers moving a context to it) ---------------------------
    victim = "r1"
    mover_ctx = next(c for c, x in contexts.items() if x == "r0")
    result = {}
    mover = threading.Thread(target=lambda: result.update(
        r=p.json("POST", f"/contexts/{mover_ctx}/move", {"to": victim})))
    mover.start()
    time.sleep(0.1)
    os.kill(pid_of(victim), signal.SIGKILL)
    # SIGKILL is delivered on its way: until the process is gone its socket
    # may still take a request, which the proxy then answers 502 (a replica
    # that dies with requests in flight).  Wait until its port refuses.
    with open(os.path.join(RUN, victim, "port")) as f:
        vport = int(f.read())
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", vport), timeout=1).close()
            time.sleep(0.05)
        except OSError:
            break
    dead = [c for c, x in contexts.items() if x == victim]
    live = [c for c, x in contexts.items() if x != victim]
    slow, wrong = [], []
    for c in dead[:4]:
        t0 = time.time()
        status, _, answer = execute(p, "print(v)", c, timeout=30)
        took = time.time() - t0
        if took > 3:
            slow.append(took)
        if not (status == 503 and answer["error"] == "unavailable" and victim in
                answer["message"]):
            wrong.append((status, answer))
    ok(not wrong, f"the killed replica's contexts answer a clear 503 naming {victim}", wrong)
    ok(not slow, "... within 3 s each (no hang)", slow)
    t0 = time.time()
    status, answer = p.json("GET", f"/contexts/{dead[0]}", timeout=30)
    ok(status == 503 and time.time() - t0 < 3, "GET /contexts/{id} too", (status, answer))
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        after = dict(pool.map(lambda c: (c, execute(p, "print(v)", c)), live))
    wrong = {c: v for c, v in after.items() if v[0] != 200 or stdout(v[2]) != c + "\n"}
    ok(not wrong, "the other replicas' contexts keep their variables", wrong)
    mover.join()
    status, answer = result["r"]
    ok(status == 502 and after[mover_ctx][1] == "r0",
       f"a move to {victim}, killed meanwhile: 502, and the context stays on r0, whole",
       (status, answer, after.get(mover_ctx)))
    status, answer = p.json("GET", "/contexts")
    listed = {c["id"] for c in answer} if status == 200 else set()
    ok(status == 200 and set(live) <= listed and not listed & set(dead),
       "GET /contexts lists the live replicas' contexts", (status, len(listed)))
    placed = []
    for _ in range(6):
        status, hdrs, data = p.request("POST", "/contexts", {})
        placed.append((status, hdrs.get("X-Sandgate-Replica")))
    ok(all(s == 201 and x in REPLICAS and x != victim for s, x in placed),
       "new contexts go only to the live replicas", placed)

    # --- the replica comes back on its state dir -----------------------------------------------
    r = cluster("start", victim)
    ok(r.returncode == 0, f"local-cluster.sh start {victim}: same id, port and state dir",
       r.stdout + r.stderr)
    started.append(pid_of(victim))
    back = {c: execute(p, "print(v)", c) for c in dead}
    wrong = {c: v for c, v in back.items()
             if v[0] != 200 or v[1] != victim or stdout(v[2]) != c + "\n"}
    ok(not wrong, f"{victim}'s contexts answer again, with their variables", wrong)
    with open(os.path.join(RUN, victim, "port")) as f:
        status, _ = Proxy(f"http://127.0.0.1:{int(f.read())}").json(
            "GET", f"/contexts/{mover_ctx}")
    status2, _, out = execute(p, "print(v)", mover_ctx)
    ok(status == 404 and status2 == 200 and stdout(out) == mover_ctx + "\n",
       f"{victim}, back, has no copy of it: one context, on r0", (status, status2, out))

    # --- the real clients, through the proxy -------------------------------------------------
    if not os.path.isdir(os.path.join(SRC, "tests/node_modules")):
        diag("tests/node_modules is missing (cd tests && npm ci): the SDK scripts are skipped")
    else:
        # e2b_envd.mjs: files.* and commands.* with alice's key (bob's the other
        # tenant's), its sandboxes on whichever replicas they land.
        for script, key, args, least in (("e2b_sdk.mjs", TOKEN, [], 15),
                                         ("mcp_sdk.mjs", TOKEN, [], 35),
                                         ("e2b_envd.mjs", ALICE, [BOB], 45)):
            r = subprocess.run(["node", os.path.join(SRC, "tests/lib", script), p.url,
                                key, *args], capture_output=True, text=True, timeout=900)
            checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            checks = [c for c in checks if "ok" in c]
            ok(len(checks) >= least, f"{script} through the proxy ran its checks "
               f"({len(checks)})", r.stderr[-2000:])
            for c in checks:
                ok(c["ok"], f"{script}: {c['name']}", c.get("detail"))
    py = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")
    if os.access(py, os.X_OK):  # the Python SDK's files.* and commands.*
        r = subprocess.run([py, os.path.join(SRC, "tests/clients/e2b_envd.py"), p.url, ALICE, BOB],
                           capture_output=True, text=True, timeout=900)
        checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        ok(len(checks) >= 40, f"e2b_envd.py through the proxy ran its checks ({len(checks)})",
           r.stderr[-2000:])
        for c in checks:
            ok(c["ok"], f"e2b_envd.py: {c['name']}", c.get("detail"))

    # --- E2B_DOMAIN: the SDKs by name, through the proxy's TLS side --------------------------
    st, ctx = p.json("POST", "/contexts", {})
    execute(p, "v = 'by host'", ctx.get("id"))
    r = in_domain(["curl", "-sS", "--cacert", os.path.join(TLS, "ca.pem"),
                   "-H", f"X-Access-Token: {TOKEN}", "-d", '{"code": "print(v)"}',
                   f"https://49999-{ctx.get('id')}.{DOMAIN}/execute"], TOKEN, timeout=60)
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    ok(r.returncode == 0 and {"type": "stdout", "text": "by host\n"} in
       [{k: x.get(k) for k in ("type", "text")} for x in lines],
       "a PORT-ID.DOMAIN Host alone (TLS, the test CA) reaches the sandbox on its replica",
       r.stdout[-500:] + r.stderr[-1000:])
    p.json("DELETE", f"/contexts/{ctx.get('id')}")
    if os.access(py, os.X_OK):
        r = in_domain([py, os.path.join(SRC, "tests/gateway/e2b_domain.py"), BOB, UNKNOWN],
                      ALICE)
        info = relay_checks(r, 12, "the Python SDK by E2B_DOMAIN")
        boxes = info.get("SANDBOXES", "").split()
        ok(sorted(b[:8] for b in boxes) == sorted(tag(x) for x in REPLICAS),
           "its three sandboxes were made on the three replicas", boxes)
    if os.path.isdir(os.path.join(SRC, "tests/node_modules")):
        r = in_domain(["node", os.path.join(SRC, "tests/gateway/rest/e2b_sandbox_api.mjs")],
                      BOB)
        relay_checks(r, 6, "the JS SDK by E2B_DOMAIN")
    if os.path.isdir(os.path.join(SRC, "tests/node_modules")):
        for mode in ("default", "v1"):  # the WebSocket's JSON format, then v1's
            r = subprocess.run(["node", os.path.join(SRC, "tests/lib/jlab_services.mjs"),
                                p.url, TOKEN, mode], capture_output=True, text=True, timeout=400)
            checks = [l for l in r.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
            ok(r.returncode == 0 and len(checks) >= 30,
               f"jlab_services.mjs {mode} through the proxy: {len(checks)} checks "
               f"(exit {r.returncode})", r.stdout[-2000:] + r.stderr[-2000:])
            for line in checks:
                ok(line.startswith("ok "),
                   f"jlab_services.mjs {mode}: " + line.split(" - ", 1)[-1])

    # --- a replica drains: its contexts move to the others, by load, none refused -------------
    drainer, peers = "r2", ["r0", "r1"]

    def direct(replica):
        with open(os.path.join(RUN, replica, "port")) as f:
            return Proxy(f"http://127.0.0.1:{int(f.read())}")

    d2 = direct(drainer)
    for c in d2.json("GET", "/contexts")[1]:
        d2.request("DELETE", f"/contexts/{c['id']}")
    mine = [d2.json("POST", "/contexts", {}, token=ALICE)[1]["id"] for _ in range(4)]
    for c in mine:
        execute(p, f"v = {c!r}", c)
    def load(x):
        return direct(x).json("GET", "/cluster/routes", token=None)[1].get("contexts", 0)

    # r1 holds two more than r0 (after what earlier parts left): r0 gets three, r1 one
    while load("r1") < load("r0") + 2:
        direct("r1").json("POST", "/contexts", {}, token=ALICE)
    while load("r0") + 2 < load("r1"):
        direct("r0").json("POST", "/contexts", {}, token=ALICE)
    loads = {x: load(x) for x in peers}
    answers, stop_ = [], threading.Event()

    def keep_asking(c):
        while not stop_.is_set():
            t0 = time.time()
            status, _, out = execute(p, "print(v)", c, timeout=60)
            answers.append((c, status, stdout(out) if status == 200 else out, time.time() - t0))

    askers = [threading.Thread(target=keep_asking, args=(c,)) for c in mine]
    for t in askers:
        t.start()
    status, summary = d2.json("POST", "/cluster/drain", timeout=300)
    time.sleep(0.5)
    stop_.set()
    for t in askers:
        t.join()
    moved = summary.get("moved", []) if status == 200 else []
    ok(status == 200 and sorted(m["id"] for m in moved) == sorted(mine) and
       not summary.get("stayed"), f"POST /cluster/drain of {drainer}: its {len(mine)} contexts "
       "moved", (status, summary))
    greedy, at = True, dict(loads)
    for m in moved:  # each went to the peer holding fewest then
        greedy &= m["replica"] in at and at[m["replica"]] == min(at.values())
        at[m.get("replica")] = at.get(m.get("replica"), 0) + 1
    ok(greedy and len({m["replica"] for m in moved}) == 2,
       f"spread by load: {loads} before, then to "
       f"{[m['replica'] for m in moved]}", (loads, moved))
    wrong = [a for a in answers if a[1] != 200 or a[2] != a[0] + "\n"]
    ok(answers and not wrong, f"{len(answers)} executions through the proxy during the drain: "
       f"each answered with its variable, none refused (longest "
       f"{max(a[3] for a in answers):.2f} s)", wrong[:5])
    health = d2.json("GET", "/health", token=None)
    placed = [p.request("POST", "/contexts", {}, token=ALICE)[1].get("X-Sandgate-Replica")
              for _ in range(4)]
    ok(health == (503, {"status": "draining"}) and drainer not in placed,
       f"{drainer} says draining; new contexts go to the others {placed}", (health, placed))
finally:
    domain_teardown(dnsmasq)
    r = cluster("down")
    ok(r.returncode == 0 and not os.path.exists(RUN), "local-cluster.sh down", r.stdout + r.stderr)
    alive = []
    for pid in started:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":  # a zombie has stopped
                    alive.append(pid)
        except FileNotFoundError:
            pass
    ok(not alive, "down stopped every replica it started", alive)
    shutil.rmtree(RUN, ignore_errors=True)
done()
