"""Tenants: a key per user or agent, sessions owned by their tenant, quotas.

A keys file made with `sandgate keys` holds alice (at most 3 contexts), bob
(at most 1 live kernel), ops (admin), dave (at most 2 executions waiting or
running), erin (no limit) and frank (1 live kernel); the daemon also has
--token, an admin key.  Through every front end — REST contexts, executions,
files, commands, pause/resume, the Jupyter REST API and its WebSocket, MCP —
bob cannot see, run in, read, change or delete anything of alice's: her ids
answer him exactly as ids that do not exist (the same status and body).
Lists show each tenant its own; an admin sees all, with their tenant.  Then:
quotas (429 naming the quota; the other tenant unaffected; max-live pauses
the least recently used idle session, when a session is created and when
one is resumed, explicitly or by an execution; max-queued through REST, the
WebSocket and MCP), ownership across a restart, SIGHUP
adding and removing keys without touching sessions, a world-readable keys
file refused at start, every audit line naming its tenant, /metrics for
admins only, and brute force (30 wrong keys from one address: 429 for it,
while a right key from another address works).  Needs root and runsc."""
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid

import mcpraw
from sgd import Daemon, TOKEN, SANDGATE, wait_for
from tap import ok, diag, done
from wsclient import WS, handshake

tmp = tempfile.mkdtemp(prefix="sg-tenants-")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")


def keys(*args):
    return subprocess.run([SANDGATE, "keys", *args, "--keys-file", KEYS], capture_output=True,
                          text=True)


# --- sandgate keys -------------------------------------------------------------------
r = keys("add", "alice", "--max-contexts", "3")
lines = r.stdout.strip().splitlines()
ok(r.returncode == 0 and lines and lines[-1].startswith("sgk_") and len(lines[-1]) > 40,
   "keys add prints the new key as its last line", r.stdout + r.stderr)
ALICE = lines[-1]
BOB = keys("add", "bob", "--max-live", "1").stdout.strip().splitlines()[-1]
OPS = keys("add", "ops", "--admin").stdout.strip().splitlines()[-1]
DAVE = keys("add", "dave", "--max-queued", "2").stdout.strip().splitlines()[-1]
ERIN = keys("add", "erin").stdout.strip().splitlines()[-1]
FRANK = keys("add", "frank", "--max-live", "1").stdout.strip().splitlines()[-1]
text = open(KEYS).read()
ok(ALICE not in text and BOB not in text and OPS not in text and "sha256:" in text,
   "the file holds hashes, never a key")
ok(stat.S_IMODE(os.stat(KEYS).st_mode) == 0o600, "the file is written mode 0600")
ok(" max-queued=2" in text, "max-queued is written to the file", text)
r = keys("list")
ok(r.returncode == 0 and "alice" in r.stdout and "bob" in r.stdout and ALICE not in r.stdout,
   "keys list shows the tenants, not their keys", r.stdout)
ok("MAX-QUEUED" in r.stdout and any(l.split()[:1] == ["dave"] and "2" in l.split()[2:]
                                    for l in r.stdout.splitlines()),
   "and their max-queued", r.stdout)
r = keys("add", "alice")
ok(r.returncode != 0 and "exists" in r.stderr, "a tenant cannot be added twice", r.stderr)
r = keys("add", "gina", "--internet", "--egress", "198.51.100.0/24,api.example.com,*.example.org")
bad = keys("add", "hank", "--egress", "api..example.com")
listed = keys("list").stdout
ok(r.returncode == 0 and " egress=198.51.100.0/24,api.example.com,*.example.org" in
   open(KEYS).read() and "api.example.com" in listed and bad.returncode != 0 and
   "--egress" in bad.stderr, "--egress: a tenant's limit, checked as rules are, in the file "
   "and the list", (r.stderr, bad.stderr, listed))
keys("remove", "gina")

# A keys file others can read is refused at start, naming it and its mode.
os.chmod(KEYS, 0o644)
p = subprocess.run([SANDGATE, "--keys-file", KEYS, "--listen", "127.0.0.1:0", "--state-dir",
                    tmp + "/refused"], capture_output=True, text=True, timeout=30)
ok(p.returncode != 0 and KEYS in p.stderr and "0644" in p.stderr,
   "a world-readable keys file is refused at start, naming the file and its mode", p.stderr)
os.chmod(KEYS, 0o600)

AUDIT = os.path.join(tmp, "audit.log")
d = Daemon("--keys-file", KEYS, "--pool-size", "0", "--audit-log", AUDIT, "--auth-block", "30")


def as_(key, method, path, body=None, headers=None):
    status, hdrs, data = d.request(method, path, body, token=key, headers=headers)
    return status, data


def js(key, method, path, body=None):
    st, data = as_(key, method, path, body)
    try:
        return st, json.loads(data) if data.strip() else None
    except ValueError:
        return st, data


def execute(key, code, **fields):
    st, data = as_(key, "POST", "/execute", dict(code=code, **fields))
    lines = [json.loads(l) for l in data.decode().splitlines() if l.strip()] if st == 200 else []
    return st, lines, data


def stdout_of(lines):
    return "".join(l.get("text", "") for l in lines if l["type"] == "stdout")


def stream_start(key, body):
    """A streamed POST /execute whose lines are read later (stream_end):
    (status, response, connection); 200 means the execution was accepted."""
    c = http.client.HTTPConnection(d.url.split("//", 1)[1], timeout=120)
    c.request("POST", "/execute", json.dumps(body),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r, c


def stream_end(run):
    _, r, c = run
    lines = [json.loads(l) for l in r.read().decode().splitlines() if l.strip()]
    c.close()
    return lines


def wait_states(key, pred, timeout=60):
    """The states of key's contexts {id: state}, once pred holds of them."""
    deadline = time.time() + timeout
    states = {}
    while time.time() < deadline:
        st, lst = js(key, "GET", "/contexts")
        states = {c["id"]: c["state"] for c in lst} if st == 200 else {}
        if pred(states):
            break
        time.sleep(0.3)
    return states


try:
    # --- alice's context, and what bob sees of it -------------------------------------
    st, a = js(ALICE, "POST", "/contexts", {})
    ok(st == 201 and a.get("tenant") == "alice", "alice creates a context; it is hers", (st, a))
    A = a["id"]
    st, lines, _ = execute(ALICE, "secret = 'alice-only'\nopen('notes.txt','w').write('hers')\n"
                           "print('ok')", context_id=A)
    ok(st == 200 and stdout_of(lines) == "ok\n", "alice runs code in it", lines)
    st, b = js(BOB, "POST", "/contexts", {})
    ok(st == 201 and b.get("tenant") == "bob", "bob creates one of his own", (st, b))
    B = b["id"]

    st, lst = js(BOB, "GET", "/contexts")
    ok(st == 200 and [c["id"] for c in lst] == [B], "bob's list shows only his context", lst)
    st, lst = js(ALICE, "GET", "/contexts")
    ok(st == 200 and [c["id"] for c in lst] == [A], "alice's list shows only hers", lst)
    for key, who in ((TOKEN, "the --token admin"), (OPS, "an admin key")):
        st, lst = js(key, "GET", "/contexts")
        got = {c["id"]: c.get("tenant") for c in lst} if st == 200 else {}
        ok(got.get(A) == "alice" and got.get(B) == "bob",
           f"{who} sees both, each with its tenant", lst)

    # Every way bob could name A, recorded to compare with an unknown id later.
    probes = [
        ("GET", f"/contexts/{A}", None),
        ("DELETE", f"/contexts/{A}", None),
        ("POST", f"/contexts/{A}/restart", None),
        ("POST", f"/contexts/{A}/pause", None),
        ("POST", f"/contexts/{A}/resume", None),
        ("GET", f"/contexts/{A}/files", None),
        ("GET", f"/contexts/{A}/files/notes.txt", None),
        ("PUT", f"/contexts/{A}/files/evil.txt", b"overwrite"),
        ("DELETE", f"/contexts/{A}/files/notes.txt", None),
        ("POST", "/execute", {"code": "print(secret)", "context_id": A}),
        ("POST", "/execute", {"command": "cat notes.txt", "context_id": A}),
        ("GET", f"/api/kernels/{A}", None),
        ("DELETE", f"/api/kernels/{A}", None),
        ("POST", f"/api/kernels/{A}/interrupt", None),
        ("POST", f"/api/kernels/{A}/restart", None),
        ("POST", "/api/sessions", {"path": "x.ipynb", "type": "notebook",
                                   "kernel": {"id": A}}),
    ]

    def probe(key, method, path, body):
        if isinstance(body, bytes):
            status, _, data = d.request(method, path, token=key, raw=body)
            return status, data
        return as_(key, method, path, body)

    seen_by_bob = [probe(BOB, *p) for p in probes]
    for (method, path, _), (st, data) in zip(probes, seen_by_bob):
        ok(st == 404, f"bob: {method} {path.replace(A, 'A')} is 404", (st, data[:200]))
    st, lst = js(BOB, "GET", "/api/kernels")
    ok(st == 200 and A not in [k["id"] for k in lst], "bob's /api/kernels leaves A out", lst)
    s, status, hdrs, _ = handshake(d.url, f"/api/kernels/{A}/channels?token={BOB}")
    s.close()
    ok(status == 404, "bob cannot open A's kernel WebSocket", status)
    ws = WS(d.url, A, ALICE)
    reply = ws.execute("print(secret)")
    ok("alice-only" in json.dumps(reply), "alice can", reply)
    ws.close()

    # MCP: alice's session is unknown to bob.
    status, hdrs, ans = mcpraw.post(
        d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}},
        headers={"Authorization": "Bearer " + ALICE})
    sid = hdrs.get("Mcp-Session-Id")
    ok(status == 200 and sid, "alice opens an MCP session", (status, ans))
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"code": "print(6*7)"}}}
    st_a, _, ans_a = mcpraw.post(d, call, session=sid, accept="application/json",
                                 headers={"Authorization": "Bearer " + ALICE})
    ok(st_a == 200 and "42" in mcpraw.text_of(ans_a), "alice's MCP session runs her code", ans_a)
    st_b, _, ans_b = mcpraw.post(d, call, session=sid, accept="application/json",
                                 headers={"Authorization": "Bearer " + BOB})
    fake = str(uuid.uuid4())
    st_u, _, ans_u = mcpraw.post(d, call, session=fake, accept="application/json",
                                 headers={"Authorization": "Bearer " + BOB})
    ok(st_b == 404 and st_u == 404 and
       json.dumps(ans_b).replace(sid, "S") == json.dumps(ans_u).replace(fake, "S"),
       "bob using alice's MCP session gets what an unknown session gets", (ans_b, ans_u))

    # Default contexts are per tenant.
    st, lines, _ = execute(ALICE, "shared = 'from alice'; print('set')")
    ok(st == 200 and stdout_of(lines) == "set\n", "alice's default context runs", lines)
    st, lines, _ = execute(BOB, "print(shared)")
    ok(st == 200 and any(l["type"] == "error" and l["name"] == "NameError" for l in lines),
       "bob's default context is not alice's (NameError)", lines)

    # --- quotas ---------------------------------------------------------------------------
    st, q = js(ALICE, "POST", "/contexts", {})
    # A, her MCP session's kernel and her default context: 3.
    ok(st == 429 and q.get("error") == "quota_exceeded" and q.get("quota") == "max-contexts" and
       q.get("limit") == 3, "alice's fourth context: 429 naming max-contexts and 3", (st, q))
    st, q = js(ALICE, "POST", "/contexts", {"internet": True})
    ok(st == 429 and q.get("quota") == "internet", "alice may not ask for a network", (st, q))
    # bob has B and his default context, live; max-live 1 pauses the older idle one.
    time.sleep(1)
    st, c3 = js(BOB, "POST", "/contexts", {})
    ok(st == 201, "bob at max-live still creates: his least recently used idle session is paused",
       (st, c3))
    states = wait_states(BOB, lambda s: s.get(B) == "paused")
    ok(states.get(B) == "paused", "B, bob's least recently used, was paused", states)
    st, lines, _ = execute(TOKEN, "print('admin')")
    ok(st == 200 and stdout_of(lines) == "admin\n", "an admin has no quota and runs code", lines)

    # max-queued: dave's executions waiting or running, all his sessions together.
    st1, d1 = js(DAVE, "POST", "/contexts", {})
    st2, d2 = js(DAVE, "POST", "/contexts", {})
    ok(st1 == 201 and st2 == 201, "dave (max-queued 2) creates two contexts", (st1, d1, st2, d2))
    D1, D2 = d1["id"], d2["id"]
    SLEEP = "import time; time.sleep(5); print('slept')"
    runs = [stream_start(DAVE, {"code": SLEEP, "context_id": c}) for c in (D1, D2)]
    ok([run[0] for run in runs] == [200, 200], "dave streams two executions at once, one in each",
       [run[0] for run in runs])
    st, q = js(DAVE, "POST", "/execute", {"code": "print(3)", "context_id": D1})
    ok(st == 429 and q.get("error") == "quota_exceeded" and q.get("quota") == "max-queued" and
       q.get("limit") == 2, "his third while they run: 429 naming max-queued and 2", (st, q))
    ws = WS(d.url, D2, DAVE)
    reply, iopub = ws.execute("print(3)")
    ws.close()
    c = reply["content"]
    ok(c.get("status") == "error" and c.get("ename") == "QuotaExceeded" and
       "max-queued (2)" in c.get("evalue", "") and
       any("max-queued" in m["content"].get("text", "") for m in iopub),
       "through the Jupyter WebSocket: an error reply (and stderr) naming max-queued", (c, iopub))
    status, hdrs, ans = mcpraw.post(
        d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}},
        headers={"Authorization": "Bearer " + DAVE})
    st_m, _, ans_m = mcpraw.post(
        d, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"code": "print(3)"}}},
        session=hdrs.get("Mcp-Session-Id"), accept="application/json",
        headers={"Authorization": "Bearer " + DAVE})
    ok(st_m == 200 and ans_m["result"].get("isError") and
       "max-queued (2)" in mcpraw.text_of(ans_m),
       "through MCP: execute_python's error names max-queued", ans_m)
    st, e = js(ERIN, "POST", "/contexts", {})
    ok(st == 201, "meanwhile erin creates a context", (st, e))
    st, lines, _ = execute(ERIN, "print('erin runs')", context_id=e["id"])
    ok(st == 200 and stdout_of(lines) == "erin runs\n", "and runs code in it", (st, lines))
    ends = [stream_end(run) for run in runs]
    ok(all(stdout_of(l) == "slept\n" and l[-1]["type"] == "end_of_execution" for l in ends),
       "dave's two executions ran to their end", ends)
    st, lines, _ = execute(DAVE, "print('again')", context_id=D1)
    ok(st == 200 and stdout_of(lines) == "again\n", "once they ended, dave runs code again",
       (st, lines))
    st, page = as_(OPS, "GET", "/metrics")
    ok('sandgate_tenant_quota_refusals_total{tenant="dave",quota="max-queued"} 3\n' in
       page.decode(), "the three refusals are counted under max-queued",
       [l for l in page.decode().splitlines() if "quota_refusals" in l])

    # max-live holds when a context is resumed: frank has at most one live.
    st, f1 = js(FRANK, "POST", "/contexts", {})
    F1 = f1["id"]
    st, lines, _ = execute(FRANK, "x = 'kept'; print('f1')", context_id=F1)
    ok(st == 200 and stdout_of(lines) == "f1\n", "frank (max-live 1) runs code in F1", lines)
    st, f2 = js(FRANK, "POST", "/contexts", {})
    F2 = f2["id"]
    states = wait_states(FRANK, lambda s: s.get(F1) == "paused")
    ok(st == 201 and states.get(F1) == "paused", "his second context F2 pauses F1", (st, states))
    st, lines, _ = execute(FRANK, "print('f2')", context_id=F2)
    ok(st == 200 and stdout_of(lines) == "f2\n", "F2 runs code", lines)
    live_seen, watching = [], threading.Event()

    def watch():
        while not watching.is_set():
            st, lst = js(FRANK, "GET", "/contexts")
            if st == 200:
                live = [c["id"] for c in lst if c["state"] not in ("paused", "pausing", "dead")]
                live_seen.append(live)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        st, r = js(FRANK, "POST", f"/contexts/{F1}/resume")
        ok(st == 200 and r.get("state") == "running", "frank resumes F1", (st, r))
        states = wait_states(FRANK, lambda s: s.get(F2) == "paused")
        ok(states.get(F2) == "paused" and states.get(F1) == "running",
           "F2, his other live context, was paused to make room", states)
        st, lines, _ = execute(FRANK, "print(x)", context_id=F1)
        ok(st == 200 and stdout_of(lines) == "kept\n", "F1 kept its variables", lines)
        run = stream_start(FRANK, {"code": SLEEP, "context_id": F1})
        ok(run[0] == 200, "F1 runs a sleep", run[0])
        st, q = js(FRANK, "POST", f"/contexts/{F2}/resume")
        ok(st == 429 and q.get("error") == "quota_exceeded" and q.get("quota") == "max-live" and
           q.get("limit") == 1, "with F1 busy, resuming F2 is 429 naming max-live and 1", (st, q))
        st, q = js(FRANK, "POST", "/execute", {"code": "print('f2')", "context_id": F2})
        ok(st == 429 and q.get("quota") == "max-live",
           "so is an execution that would resume F2", (st, q))
        stream_end(run)
        st, lines, _ = execute(FRANK, "print('f2 again')", context_id=F2)
        states = wait_states(FRANK, lambda s: s.get(F1) == "paused")
        ok(st == 200 and stdout_of(lines) == "f2 again\n" and states.get(F1) == "paused",
           "with F1 idle, an execution resumes F2 and pauses F1", (st, lines, states))
    finally:
        watching.set()
        watcher.join()
    ok(live_seen and max(len(l) for l in live_seen) <= 1,
       "frank never had more than one live context", [l for l in live_seen if len(l) > 1][:3])

    # --- audit and metrics ---------------------------------------------------------------
    events = [json.loads(l) for l in open(AUDIT)]
    mine = [e for e in events if e.get("context") == A and e["event"] in ("context.create",
                                                                           "execute")]
    ok(mine and all(e.get("tenant") == "alice" for e in mine),
       "audit lines of alice's acts name her", mine[:3])
    ok(all("tenant" in e for e in events), "every audit line has a tenant field")
    st, _ = as_(BOB, "GET", "/metrics")
    ok(st == 403, "/metrics needs an admin key", st)
    st, page = as_(OPS, "GET", "/metrics")
    page = page.decode()
    ok(st == 200 and 'sandgate_tenant_sessions{tenant="alice",state="live"}' in page and
       'sandgate_tenant_quota_refusals_total{tenant="alice",quota="max-contexts"} 1\n' in page and
       'sandgate_tenant_executions_total{tenant="alice"}' in page,
       "/metrics has per-tenant sessions, executions and quota refusals",
       [l for l in page.splitlines() if "tenant" in l][:12])

    # --- ownership across a restart ------------------------------------------------------
    d.restart()
    st, lst = js(ALICE, "GET", "/contexts")
    ok(st == 200 and A in [c["id"] for c in lst], "after a restart alice still has A", lst)
    st, data = as_(BOB, "GET", f"/contexts/{A}")
    ok(st == 404, "and bob still cannot see it", st)
    st, lines, _ = execute(ALICE, "print(secret)", context_id=A)
    ok(st == 200 and stdout_of(lines) == "alice-only\n", "A kept its variables", lines)

    # --- SIGHUP: keys added and removed, sessions untouched --------------------------------
    CAROL = keys("add", "carol").stdout.strip().splitlines()[-1]
    st, _ = js(CAROL, "GET", "/contexts")
    ok(st == 401, "a key added to the file works only after SIGHUP", st)
    keys("remove", "bob")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: js(CAROL, "GET", "/contexts")[0] != 401)
    st, lst = js(CAROL, "GET", "/contexts")
    ok(st == 200 and lst == [], "after SIGHUP carol's new key works (and sees nothing)", (st, lst))
    st, _ = js(BOB, "GET", "/contexts")
    ok(st == 401, "bob's removed key stops working at once", st)
    st, lst = js(TOKEN, "GET", "/contexts")
    ok(st == 200 and B in [c["id"] for c in lst], "bob's sessions are kept (an admin sees them)",
       lst)
    # The 404 alice's id gives another tenant is byte-identical to an unknown id's: carol
    # asks for A, then alice deletes A and carol asks again.
    carol_sees = [probe(CAROL, *p) for p in probes]
    st, _ = js(ALICE, "DELETE", f"/contexts/{A}")
    ok(st == 204, "alice deletes A", st)
    unknown = [probe(CAROL, *p) for p in probes]
    same = [p[1] for p, x, y in zip(probes, carol_sees, unknown) if x != y]
    ok(not same, "every answer for another tenant's id is byte-identical to an unknown id's",
       same)
    diag(f"e.g. {carol_sees[0][0]} {carol_sees[0][1][:120]!r}")

    # --- brute force ----------------------------------------------------------------------
    # Two failures came before (carol's key before SIGHUP, bob's after).
    codes = [js("sgk_wrong" + str(i), "GET", "/contexts")[0] for i in range(30)]
    ok(codes[:18] == [401] * 18 and codes[-5:] == [429] * 5 and codes.count(401) <= 20,
       "30 wrong keys from one address: 401, then 429 for that address", codes)
    st, _ = js(ALICE, "GET", "/contexts")
    ok(st == 429, "while blocked, even a right key from that address gets 429", st)
    # Another address (127.0.0.2 is loopback too) is not blocked.
    port = int(d.url.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
    s.sendall(f"GET /contexts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n"
              "Connection: close\r\n\r\n".encode())
    resp = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        resp += chunk
    s.close()
    ok(resp.startswith(b"HTTP/1.1 200"), "a right key from another address still works",
       resp[:80])
    deadline = time.time() + 10  # the log is read by a thread of sgd's
    while time.time() < deadline and not any("failed to authenticate" in l for l in d.log):
        time.sleep(0.1)
    ok(any("failed to authenticate more than 20 times" in l for l in d.log),
       "the block is logged", d.log[-5:])
finally:
    d.stop()

done()
