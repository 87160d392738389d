"""The hostile-tenant suite: quotas.  A tenant that tries to take more than
its share through a side door is refused, with a 429 naming the quota and
its value, and nothing is left behind; other tenants are untouched.

Each check is a finding made by playing a hostile second tenant against
sandgate (docs/security.md, "Tenants"): Jupyter sessions without a bound,
MCP sessions outside every tenant quota, max-live bypassed by every wake
path but /execute (commands, ?path= files, envd Filesystem and Process),
max-queued ignoring commands and envd processes, and snapshots outside
every quota (they outlive their context; a refused fork kept its
snapshot).  Needs root and runsc."""
import http.client
import json
import os
import struct
import tempfile
import time

import mcpraw
from sgd import Daemon, TOKEN, add_key
from tap import ok, diag, done

tmp = tempfile.mkdtemp(prefix="sg-quotas-")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")
BOB = add_key(KEYS, "bob", "--max-live", "1")
DAVE = add_key(KEYS, "dave", "--max-queued", "1")
JILL = add_key(KEYS, "jill", "--max-jupyter-sessions", "3")
MONA = add_key(KEYS, "mona", "--max-mcp-sessions", "2")
SAM = add_key(KEYS, "sam", "--max-snapshots", "2", "--max-contexts", "2")
SIZE = add_key(KEYS, "size", "--max-snapshot-mib", "1")
DISK = add_key(KEYS, "disk", "--max-disk-mib", "1")
RITA = add_key(KEYS, "rita", "--max-rps", "5")
ALICE = add_key(KEYS, "alice")
d = Daemon("--keys-file", KEYS, "--pool-size", "0")


def js(key, method, path, body=None, headers=None):
    st, _, data = d.request(method, path, body, token=key, headers=headers)
    try:
        return st, json.loads(data) if data.strip() else None
    except ValueError:
        return st, data


def text_of(answer):
    """An answer as text, whatever it was (JSON, or bytes that were not)."""
    if isinstance(answer, (bytes, bytearray)):
        return answer.decode(errors="replace")
    return json.dumps(answer)


def quota_refused(answer, name, limit):
    """A 429's body names the quota and its value."""
    return (isinstance(answer, dict) and answer.get("quota") == name and
            answer.get("limit") == limit and name in answer.get("message", ""))


def execute(key, code, ctx):
    st, _, data = d.request("POST", "/execute", {"code": code, "context_id": ctx}, token=key)
    return st, [json.loads(l) for l in data.decode().splitlines() if l.strip()]


def stdout_of(lines):
    return "".join(l.get("text", "") for l in lines if l.get("type") == "stdout")


def stream_start(key, body):
    """A streamed POST /execute read later: (status, response, connection)."""
    c = http.client.HTTPConnection(d.url.split("//", 1)[1], timeout=120)
    c.request("POST", "/execute", json.dumps(body),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    if r.status == 200:
        r.readline()  # the first line: it runs
    return r.status, r, c


def stream_end(run):
    _, r, c = run
    rest = r.read()
    c.close()
    return rest


def state_of(key, ctx):
    st, c = js(key, "GET", f"/contexts/{ctx}")
    return c.get("state") if st == 200 else None


def wait_state(key, ctx, want, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline and state_of(key, ctx) != want:
        time.sleep(0.2)
    return state_of(key, ctx)


def envd(key, ctx, service, body, stream=False):
    """A Connect RPC call of E2B's envd protocol on context ctx: (status,
    the answer's JSON, or the stream's messages)."""
    h = {"E2b-Sandbox-Id": ctx, "Connect-Protocol-Version": "1"}
    if stream:
        raw = json.dumps(body).encode()
        h["Content-Type"] = "application/connect+json"
        st, hdrs, data = d.request("POST", service, token=key, headers=h,
                                   raw=b"\0" + struct.pack(">I", len(raw)) + raw, timeout=30)
        if not (hdrs.get("Content-Type") or "").startswith("application/connect"):
            return st, json.loads(data) if data.strip() else None
        msgs, i = [], 0
        while i + 5 <= len(data):
            n = struct.unpack(">I", data[i + 1:i + 5])[0]
            msgs.append(json.loads(data[i + 5:i + 5 + n]))
            i += 5 + n
        return st, msgs
    return js(key, "POST", service, body, headers=h)


def metric(name_and_labels):
    st, _, data = d.request("GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name_and_labels + " "):
            return float(line.split()[-1])
    return None


def live_count(tenant):
    return metric(f'sandgate_tenant_sessions{{tenant="{tenant}",state="live"}}')


try:
    # --- max-live on every wake path --------------------------------------------------
    st, b1 = js(BOB, "POST", "/contexts", {})
    ok(st == 201, "bob (max-live 1) creates a context", (st, b1))
    B1 = b1["id"]
    st, lines = execute(BOB, "kept = 6 * 7", B1)
    st, b2 = js(BOB, "POST", "/contexts", {})
    ok(st == 201, "and a second one", (st, b2))
    B2 = b2["id"]
    ok(wait_state(BOB, B1, "paused") == "paused",
       "the first is paused to stay within max-live", state_of(BOB, B1))
    st, _ = execute(BOB, "x = 1", B2)
    busy = stream_start(BOB, {"code": "import time\nfor _ in range(600): time.sleep(0.1)",
                              "context_id": B2})
    ok(busy[0] == 200, "the second runs a long cell: it cannot be paused to make room")
    wakes = [
        ("a command", lambda: js(BOB, "POST", f"/contexts/{B1}/commands", {"cmd": "echo hi"})),
        ("a background command",
         lambda: js(BOB, "POST", f"/contexts/{B1}/commands", {"cmd": "sleep 1",
                                                               "background": True})),
        ("?path= files", lambda: js(BOB, "GET", f"/contexts/{B1}/files?path=/tmp")),
        ("envd Filesystem.ListDir",
         lambda: envd(BOB, B1, "/filesystem.Filesystem/ListDir", {"path": "/tmp"})),
        ("envd Process.Start",
         lambda: envd(BOB, B1, "/process.Process/Start",
                      {"process": {"cmd": "/bin/echo", "args": ["hi"]}}, stream=True)),
        ("an execution", lambda: execute(BOB, "print(kept)", B1)),
    ]
    for what, call in wakes:
        st, ans = call()
        text = text_of(ans)
        ok(st == 429 and "max-live" in text,
           f"max-live: {what} on a paused context is refused with 429 naming max-live",
           (st, text[:300]))
        ok(state_of(BOB, B1) == "paused", f"... and the context stays paused ({what})",
           state_of(BOB, B1))
    ok(live_count("bob") == 1, "bob never had more than 1 live kernel", live_count("bob"))
    st, ans = js(BOB, "GET", f"/contexts/{B1}/commands")
    ok(st == 200 and ans == [], "the refused commands left nothing behind", ans)
    st, _ = js(BOB, "POST", f"/api/kernels/{B2}/interrupt")
    stream_end(busy)
    ok(wait_state(BOB, B2, "running") == "running", "the long cell is interrupted",
       state_of(BOB, B2))
    st, ans = js(BOB, "POST", f"/contexts/{B1}/commands", {"cmd": "echo hi"},
                 headers={"Accept": "application/json"})
    ok(st == 200 and "hi" in text_of(ans),
       "with the other idle, a command wakes the paused context (the idle one pauses)",
       (st, ans))
    st, lines = execute(BOB, "print(kept)", B1)
    ok(stdout_of(lines) == "42\n", "its variables came back", lines)
    ok(wait_state(BOB, B2, "paused") == "paused", "the other was paused to make room")

    # --- max-queued: executions, commands and envd processes together -----------------
    st, dd = js(DAVE, "POST", "/contexts", {})
    D = dd["id"]
    busy = stream_start(DAVE, {"code": "import time\nfor _ in range(600): time.sleep(0.1)",
                               "context_id": D})
    ok(busy[0] == 200, "dave (max-queued 1) runs a long cell")
    for what, call in [
        ("a background command",
         lambda: js(DAVE, "POST", f"/contexts/{D}/commands", {"cmd": "sleep 5",
                                                              "background": True})),
        ("a foreground command",
         lambda: js(DAVE, "POST", f"/contexts/{D}/commands", {"cmd": "echo hi"})),
        ("envd Process.Start",
         lambda: envd(DAVE, D, "/process.Process/Start",
                      {"process": {"cmd": "/bin/sleep", "args": ["5"]}}, stream=True)),
        ("a second execution", lambda: execute(DAVE, "1", D)),
    ]:
        st, ans = call()
        text = text_of(ans)
        ok(st == 429 and "max-queued" in text,
           f"max-queued: {what} while the cell runs is refused with 429 naming it",
           (st, text[:300]))
    st, ans = js(DAVE, "GET", f"/contexts/{D}/commands")
    ok(st == 200 and ans == [], "no command was started", ans)
    js(DAVE, "POST", f"/api/kernels/{D}/interrupt")
    stream_end(busy)
    wait_state(DAVE, D, "running")
    st, c = js(DAVE, "POST", f"/contexts/{D}/commands", {"cmd": "sleep 30", "background": True})
    ok(st == 201, "once it ended, a background command is accepted", (st, c))
    st, ans = execute(DAVE, "1", D)
    ok(st == 429 and "max-queued" in text_of(ans),
       "and while that command runs, an execution counts against the same quota", (st, ans))
    st, _ = js(DAVE, "DELETE", f"/contexts/{D}/commands/{c['id']}")
    deadline = time.time() + 20
    while time.time() < deadline:
        st, lines = execute(DAVE, "print(2)", D)
        if st == 200:
            break
        time.sleep(0.2)
    ok(st == 200 and stdout_of(lines) == "2\n", "the command killed, executions run again",
       (st, lines))

    # --- Jupyter sessions: a count, and labels of bounded length ----------------------
    st, k = js(JILL, "POST", "/api/kernels", {"name": "python3"})
    ok(st == 201, "jill (max-jupyter-sessions 3) starts a kernel", (st, k))
    K = k["id"]
    made = []
    for i in range(3):
        st, s = js(JILL, "POST", "/api/sessions", {"path": f"n{i}.ipynb", "type": "notebook",
                                                   "name": "", "kernel": {"id": K}})
        made.append(st)
        if st == 201:
            last = s["id"]
    ok(made == [201, 201, 201], "three sessions on it", made)
    st, ans = js(JILL, "POST", "/api/sessions", {"path": "n3.ipynb", "type": "notebook",
                                                 "kernel": {"id": K}})
    ok(st == 429 and quota_refused(ans, "max-jupyter-sessions", 3),
       "the fourth: 429 naming max-jupyter-sessions (3)", (st, ans))
    st, lst = js(JILL, "GET", "/api/sessions")
    ok(len(lst) == 3, "the refused one was not made", len(lst))
    st, ans = js(ALICE, "POST", "/api/sessions", {"path": "a.ipynb", "type": "notebook",
                                                  "kernel": {"name": "python3"}})
    ok(st == 201, "another tenant still creates sessions", (st, ans))
    js(ALICE, "DELETE", f"/api/sessions/{ans['id']}")
    for field in ("path", "name", "type"):
        body = {"path": "long.ipynb", "type": "notebook", "kernel": {"id": K}}
        body[field] = "x" * 100000
        st, ans = js(JILL, "POST", "/api/sessions", body)
        ok(st == 413 and field in text_of(ans) and "4096" in text_of(ans),
           f"a {field} of 100 kB is refused with 413 naming the field and the bound", (st, ans))
    st, lst = js(JILL, "GET", "/api/sessions")
    ok(len(lst) == 3, "nothing was made for them", len(lst))
    st, ans = js(JILL, "PATCH", f"/api/sessions/{last}", {"name": "y" * 5000})
    ok(st == 413, "nor may a rename make one longer", (st, ans))
    st, _ = js(JILL, "DELETE", f"/api/sessions/{last}")  # its kernel too, as Jupyter does
    st, s = js(JILL, "POST", "/api/sessions", {"path": "again.ipynb", "type": "notebook",
                                               "kernel": {"name": "python3"}})
    ok(st == 201, "once one is deleted, a session can be made again", (st, s))

    # --- MCP sessions: counted per tenant ---------------------------------------------
    auth = lambda key: {"Authorization": "Bearer " + key}

    def mcp_init(key):
        return mcpraw.post(d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "raw", "version": "0"}}},
                           headers=auth(key))

    got = [mcp_init(MONA) for _ in range(2)]
    ok(all(g[0] == 200 and g[1].get("Mcp-Session-Id") for g in got),
       "mona (max-mcp-sessions 2) opens two MCP sessions", [g[0] for g in got])
    st, hdrs, ans = mcp_init(MONA)
    data = ((ans or {}).get("error") or {}).get("data") or {}
    ok(st == 429 and data.get("quota") == "max-mcp-sessions" and data.get("limit") == 2 and
       not hdrs.get("Mcp-Session-Id"),
       "the third: 429, a JSON-RPC error naming max-mcp-sessions (2), no session", (st, ans))
    st, hdrs, ans = mcp_init(ALICE)
    ok(st == 200 and hdrs.get("Mcp-Session-Id"), "another tenant still opens MCP sessions", st)
    st, _, _ = d.request("DELETE", "/mcp", token=MONA,
                         headers={"Mcp-Session-Id": got[0][1]["Mcp-Session-Id"]})
    st, hdrs, ans = mcp_init(MONA)
    ok(st == 200 and hdrs.get("Mcp-Session-Id"), "one closed, mona may open another", st)

    # --- snapshots: counted whether their context lives or not ------------------------
    st, s1 = js(SAM, "POST", "/contexts", {})
    S1 = s1["id"]
    execute(SAM, "v = 1", S1)
    snaps = [js(SAM, "POST", f"/contexts/{S1}/snapshots", {}) for _ in range(2)]
    ok([s for s, _ in snaps] == [201, 201], "sam (max-snapshots 2) takes two snapshots",
       [a for _, a in snaps])
    st, _ = js(SAM, "DELETE", f"/contexts/{S1}")
    ok(st == 204, "and deletes their context")
    st, s2 = js(SAM, "POST", "/contexts", {})
    S2 = s2["id"]
    execute(SAM, "w = 2", S2)
    st, ans = js(SAM, "POST", f"/contexts/{S2}/snapshots", {})
    ok(st == 429 and quota_refused(ans, "max-snapshots", 2),
       "a new context gets no fresh allowance: 429 naming max-snapshots (2)", (st, ans))
    st, lst = js(SAM, "GET", "/snapshots")
    ok(len(lst) == 2, "two snapshots, as before", len(lst))
    js(SAM, "DELETE", f"/snapshots/{snaps[0][1]['id']}")
    st, s3 = js(SAM, "POST", "/contexts", {})
    ok(st == 201, "sam makes a second context (max-contexts 2)", (st, s3))
    st, ans = js(SAM, "POST", f"/contexts/{S2}/fork", {"keep_snapshot": True})
    ok(st == 429 and quota_refused(ans, "max-contexts", 2),
       "a fork past max-contexts is refused with 429 naming it", (st, ans))
    st, lst = js(SAM, "GET", "/snapshots")
    ok(len(lst) == 1, "and keeps no snapshot", [s["id"] for s in lst])

    st, z = js(SIZE, "POST", "/contexts", {})
    execute(SIZE, "1", z["id"])  # running: a snapshot is of an idle kernel
    st, snap = js(SIZE, "POST", f"/contexts/{z['id']}/snapshots", {})
    ok(st == 201 and snap["bytes"] > 1 << 20,
       "size (max-snapshot-mib 1) takes one snapshot of more than 1 MiB", (st, snap))
    st, ans = js(SIZE, "POST", f"/contexts/{z['id']}/snapshots", {})
    ok(st == 429 and quota_refused(ans, "max-snapshot-mib", 1),
       "the next: 429 naming max-snapshot-mib (1)", (st, ans))

    st, w = js(DISK, "POST", "/contexts", {})
    execute(DISK, "1", w["id"])
    st, snap = js(DISK, "POST", f"/contexts/{w['id']}/snapshots", {})
    ok(st == 201, "disk (max-disk-mib 1) takes a snapshot", (st, snap))
    st, ans = js(DISK, "POST", "/contexts", {})
    ok(st == 429 and quota_refused(ans, "max-disk-mib", 1),
       "then a new context: 429 naming max-disk-mib (1)", (st, ans))
    st, ans = js(DISK, "POST", "/api/kernels", {"name": "python3"})
    ok(st == 429 and ans.get("quota") == "max-disk-mib", "so too through Jupyter", (st, ans))
    st, _ = js(DISK, "DELETE", f"/snapshots/{snap['id']}")
    st, ans = js(DISK, "POST", "/contexts", {})
    ok(st == 201, "the snapshot deleted, it may make one again", (st, ans))

    # --- requests a second: a tenant's share of the loop --------------------------------
    import concurrent.futures

    def timed_list(key):
        c = http.client.HTTPConnection(d.url.split("//", 1)[1], timeout=30)
        t = time.time()
        c.request("GET", "/contexts", headers={"Authorization": "Bearer " + key})
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body, time.time() - t

    with concurrent.futures.ThreadPoolExecutor(30) as pool:
        got = list(pool.map(timed_list, [RITA] * 30))
        theirs = [pool.submit(timed_list, ALICE), pool.submit(timed_list, TOKEN)]
    served = [g for g in got if g[0] == 200]
    refused = [g for g in got if g[0] == 429]
    ok(len(served) + len(refused) == 30 and len(served) >= 10 and len(refused) >= 5,
       "rita (max-rps 5) sends 30 at once: a second's worth at once, a second's worth waits "
       "its turn, the rest is refused", [g[:1] for g in got])
    ok(all(json.loads(g[1]).get("quota") == "max-rps" and json.loads(g[1]).get("limit") == 5
           for g in refused), "each refusal is a 429 naming max-rps (5)", refused[:1])
    ok(sum(g[2] >= 0.15 for g in served) >= 4, "those past the burst waited their turn",
       sorted(round(g[2], 3) for g in served))
    ok(all(f.result()[0] == 200 for f in theirs),
       "meanwhile another tenant and the admin are served", [f.result()[:1] for f in theirs])
    time.sleep(2.2)  # her queue drains: a burst again
    ok(timed_list(RITA)[0] == 200, "two seconds later she is served again")

    # The admin is held to nothing; the daemon serves on.
    st, _ = js(TOKEN, "GET", "/contexts")
    ok(st == 200, "the daemon still answers")
finally:
    d.stop()
done()
