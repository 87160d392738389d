"""Idle rules with a frontend attached, as JupyterLab attaches to a kernel an
agent drives: its WebSocket on /api/kernels/{id}/channels.

With --pause-after 2 and --idle-timeout 6: a context with a WebSocket
attached is neither paused nor culled, however long the socket stays
silent; once the socket closes, the idle clock starts from the close, and
the context pauses, then is culled, by the usual rules.  A paused context
resumes when a WebSocket attaches: it runs, answers kernel_info and
execute over the socket, its variables kept.  Tenants: bob's key gets 404
for alice's context's channels and kernel, as for an id that does not
exist; alice's key and the admin token attach.  Needs root and runsc."""
import shutil
import time

from sgd import Daemon, TOKEN, tenants
from tap import ok, diag, done
from wsclient import WS, V1, handshake

PAUSE_AFTER, IDLE_TIMEOUT = 2, 6
UNKNOWN = "00000000-0000-4000-8000-000000000000"

tmp, KEYS, (ALICE, BOB) = tenants("sg-fidle-", "alice", "bob")


def state(d, cid):
    st, c = d.json("GET", f"/contexts/{cid}", token=ALICE)
    return c["state"] if st == 200 else st


def kernel_info(ws):
    mid = ws.send("shell", "kernel_info_request", {})
    seen = ws.until(lambda m: m["channel"] == "shell" and
                    m["parent_header"].get("msg_id") == mid)
    return seen[-1]["content"]


def handshake_status(d, cid, key):
    s, status, _, _ = handshake(d.url, f"/api/kernels/{cid}/channels?token={key}")
    s.close()
    return status


d = Daemon("--pool-size", "0", "--keys-file", KEYS, "--pause-after", str(PAUSE_AFTER),
           "--idle-timeout", str(IDLE_TIMEOUT))
try:
    # --- tenants: who may attach ---------------------------------------------------------
    st, c = d.json("POST", "/contexts", {}, token=ALICE)
    A = c["id"]
    ws = WS(d.url, A, ALICE, protocols=[V1])
    ok(kernel_info(ws).get("status") == "ok", "alice's key attaches to her context")
    ok(handshake_status(d, A, BOB) == 404 and handshake_status(d, UNKNOWN, BOB) == 404,
       "bob's key gets 404 for her context's channels, as for an unknown id")
    st_b, _, body_b = d.request("GET", f"/api/kernels/{A}", token=BOB)
    st_u, _, body_u = d.request("GET", f"/api/kernels/{UNKNOWN}", token=BOB)
    ok(st_b == 404 and body_b.replace(A.encode(), b"ID") == body_u.replace(UNKNOWN.encode(), b"ID"),
       "and for GET /api/kernels/{id}, the same answer as an unknown id", (st_b, body_b, body_u))
    admin = WS(d.url, A, TOKEN)
    ok(kernel_info(admin).get("status") == "ok", "the admin token attaches too")
    admin.close()
    reply, _ = ws.execute("v = 'kept'")
    ok(reply["content"]["status"] == "ok", "code runs over alice's socket")

    # --- attached: neither paused nor culled -------------------------------------------
    seen, t0 = set(), time.time()
    while time.time() - t0 < IDLE_TIMEOUT + PAUSE_AFTER + 2:
        seen.add(state(d, A))
        time.sleep(0.25)
    ok(seen == {"running"}, f"with a WebSocket attached and silent for "
       f"{IDLE_TIMEOUT + PAUSE_AFTER + 2} s (past --pause-after and --idle-timeout) the "
       "context stays running", seen)
    st, k = d.json("GET", f"/api/kernels/{A}", token=ALICE)
    ok(st == 200 and k.get("connections") == 1, "the kernels API counts the connection", k)
    reply, iopub = ws.execute("print(v)")
    out = "".join(m["content"].get("text", "") for m in iopub if m["header"]["msg_type"] == "stream")
    ok(out == "kept\n", "the socket still answers, variables kept", out)

    # --- detached: paused, then culled, timed from the close ------------------------------
    ws.close()
    closed = time.time()
    first, states = {}, []
    while time.time() - closed < PAUSE_AFTER + IDLE_TIMEOUT + 30:
        s = state(d, A)
        if not states or states[-1] != s:
            states.append(s)
            first.setdefault(s, time.time() - closed)
        if s == 404:
            break
        time.sleep(0.1)
    diag(f"after the close: {[(s, round(first[s], 2)) for s in states]}")
    ok("paused" in states and states[-1] == 404 and states.index("paused") < len(states) - 1,
       "once the socket closes the context pauses, then is culled", states)
    ok(first.get("pausing", first.get("paused", 0)) >= PAUSE_AFTER - 0.5,
       f"the pause comes --pause-after ({PAUSE_AFTER} s) after the close, not at once", first)
    ok(first.get(404, 0) >= IDLE_TIMEOUT - 0.5,
       f"the cull --idle-timeout ({IDLE_TIMEOUT} s) after the close", first)

    # --- a paused context resumes when a frontend attaches ---------------------------------
    st, c = d.json("POST", "/contexts", {}, token=ALICE)
    B = c["id"]
    st, _, body = d.request("POST", "/execute", {"code": "w = 'still here'", "context_id": B},
                            token=ALICE)
    st, p = d.json("POST", f"/contexts/{B}/pause", token=ALICE)
    ok(st == 200 and p["state"] == "paused", "a context is paused", (st, p))
    ws = WS(d.url, B, ALICE, protocols=[V1])
    info = kernel_info(ws)
    ok(info.get("status") == "ok" and state(d, B) == "running",
       "a WebSocket attaching resumes it: running, kernel_info answers", (info, state(d, B)))
    reply, iopub = ws.execute("print(w)")
    out = "".join(m["content"].get("text", "") for m in iopub if m["header"]["msg_type"] == "stream")
    ok(reply["content"]["status"] == "ok" and out == "still here\n",
       "execute over the socket sees the variables it had", out)
    time.sleep(PAUSE_AFTER + 2)
    ok(state(d, B) == "running", "and, attached, it is not paused again")
    ws.close()
finally:
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
