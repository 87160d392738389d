"""One execution path for the Jupyter WebSocket too: an execute_request a
frontend sends over /api/kernels/{id}/channels is relayed to the kernel as
it is, and followed by gateway/session/exec.c like a POST /execute.  With a short
--exec-timeout, the same three codes run through both front ends —
`while True: pass`, a long sleep (both stop at the timeout's interrupt) and a
sleep that ignores SIGINT (the kernel is restarted after the grace period and
its variables are lost) — and both say the same thing: REST as TimeoutError
lines, the WebSocket as a TimeoutError on stderr parented to the request,
with the execute_reply and idle status a Jupyter client waits for (sandgate's
own when the restarted kernel cannot answer).  sandgate_executions_total
counts the WebSocket's executions by outcome, and the audit log's execute /
execution.end events have the same keys and outcome names for REST, MCP and
the WebSocket."""
import os
import re
import tempfile
import time

import mcpraw
from sgd import Daemon, TOKEN, of_type, audit_read as read, audit_wait as wait
from tap import ok, done
from wsclient import WS

TIMEOUT_S = 2
SPIN = "while True: pass"
SLEEP = "import time\ntime.sleep(1000)"
STUBBORN = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1000)"


def metrics(d):
    _, _, body = d.request("GET", "/metrics")
    out = {}
    for m in re.finditer(r'^sandgate_executions_total\{kind="code",outcome="(\w+)"\} (\S+)$',
                         body.decode(), re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def ws_run(ws, code):
    """Runs code; returns (reply, iopub messages of the request, every message seen)."""
    mid = ws.send("shell", "execute_request",
                  {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": False})
    seen = ws.until_done(mid)
    mine = [m for m in seen if m["parent_header"].get("msg_id") == mid]
    reply = [m for m in mine if m["channel"] == "shell"]
    return reply[0] if reply else None, [m for m in mine if m["channel"] == "iopub"], seen


def ws_timeouts(iopub):
    """The TimeoutError texts sandgate wrote on the request's stderr."""
    return [m["content"]["text"].strip() for m in iopub if m["header"]["msg_type"] == "stream"
            and m["content"]["name"] == "stderr" and m["content"]["text"].startswith("TimeoutError")]


def rest_timeouts(lines):
    return ["TimeoutError: " + e["value"] for e in of_type(lines, "error")
            if e["name"] == "TimeoutError"]


logdir = tempfile.mkdtemp(prefix="sg-wsexec-")
LOG = os.path.join(logdir, "audit.log")
d = Daemon("--exec-timeout", str(TIMEOUT_S), "--audit-log", LOG, "--pool-size", "1")
try:
    # --- the WebSocket ---------------------------------------------------------------
    status, k = d.json("POST", "/api/kernels", {"name": "python3"}, timeout=120)
    kid = k["id"]
    ws = WS(d.url, kid, TOKEN)
    reply, _, _ = ws_run(ws, "keep = 42")
    ok(status == 201 and reply and reply["content"]["status"] == "ok", "a Jupyter kernel runs code")
    before = metrics(d)

    ws_said = {}
    for name, code in (("spin", SPIN), ("sleep", SLEEP)):
        t0 = time.time()
        reply, iopub, _ = ws_run(ws, code)
        took = time.time() - t0
        errs = [m["content"]["ename"] for m in iopub if m["header"]["msg_type"] == "error"]
        said = ws_timeouts(iopub)
        ws_said[name] = said
        kinds = [m["header"]["msg_type"] for m in iopub]
        ok(reply and reply["content"]["status"] == "error" and
           reply["content"].get("ename") == "KeyboardInterrupt" and "KeyboardInterrupt" in errs,
           f"WebSocket, {name}: interrupted at the timeout (KeyboardInterrupt, then its reply)",
           (reply and reply["content"], errs))
        ok(len(said) == 1 and "was interrupted" in said[0] and f"{TIMEOUT_S * 1000} ms" in said[0]
           and kinds.index("stream") < kinds.index("error"),
           f"WebSocket, {name}: the frontend reads the TimeoutError on stderr, before the "
           "traceback", (said, kinds))
        ok(TIMEOUT_S - 0.5 < took < TIMEOUT_S + 4, f"WebSocket, {name}: stopped in time",
           round(took, 2))
    reply, iopub, _ = ws_run(ws, "print(keep)")
    ok([m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream"] == ["42\n"],
       "WebSocket: the interrupted kernel kept its variables", iopub)

    t0 = time.time()
    reply, iopub, seen = ws_run(ws, STUBBORN)
    took = time.time() - t0
    said = ws_timeouts(iopub)
    ws_said["stubborn"] = said
    states = [m["content"]["execution_state"] for m in seen if m["header"]["msg_type"] == "status"]
    ok(reply and reply["content"]["status"] == "error" and
       reply["content"]["ename"] == "TimeoutError" and "restarted" in reply["content"]["evalue"],
       "WebSocket, a sleep that ignores SIGINT: sandgate answers the request the restarted "
       "kernel cannot (execute_reply status error, TimeoutError)", reply and reply["content"])
    ok(len(said) == 2 and "was interrupted" in said[0] and "restarted" in said[1] and
       "restarting" in states,
       "WebSocket: the frontend reads the interrupt, then the restart, on stderr; the kernel's "
       "status says restarting", (said, states))
    ok(took > TIMEOUT_S + 4, "WebSocket: the restart came after the grace period", round(took, 2))
    reply, iopub, _ = ws_run(ws, "keep")
    ok(reply and reply["content"].get("ename") == "NameError",
       "WebSocket: the restarted kernel lost its variables", reply and reply["content"])
    reply, iopub, _ = ws_run(ws, "6 * 7")
    res = [m for m in iopub if m["header"]["msg_type"] == "execute_result"]
    ok(reply and reply["content"]["status"] == "ok" and res and
       res[0]["content"]["data"]["text/plain"] == "42", "WebSocket: the new kernel works", iopub)
    ws.close()

    after = metrics(d)
    grew = {o: after.get(o, 0) - before.get(o, 0) for o in after}
    ok(grew.get("timeout") == 3 and grew.get("ok") == 2 and grew.get("error") == 1,
       "sandgate_executions_total counts the WebSocket's executions by outcome "
       "(3 timeouts, 2 ok, 1 error)", grew)

    # --- the same through POST /execute -------------------------------------------------
    status, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    d.execute("keep = 42", context_id=cid)
    rest_said = {}
    for name, code in (("spin", SPIN), ("sleep", SLEEP)):
        lines = d.execute(code, context_id=cid)
        names = [e["name"] for e in of_type(lines, "error")]
        rest_said[name] = rest_timeouts(lines)
        ok("KeyboardInterrupt" in names and len(rest_said[name]) == 1,
           f"REST, {name}: KeyboardInterrupt, then TimeoutError", names)
        ok(rest_said[name] == ws_said[name],
           f"REST and the WebSocket say the same about {name}", (rest_said[name], ws_said[name]))
    lines = d.execute("print(keep)", context_id=cid)
    ok("".join(l.get("text", "") for l in of_type(lines, "stdout")) == "42\n",
       "REST: the interrupted kernel kept its variables", lines)
    lines = d.execute(STUBBORN, context_id=cid)
    said = rest_timeouts(lines)
    ok(len(said) == 1 and said[0] == ws_said["stubborn"][-1],
       "REST, a sleep that ignores SIGINT: the same restart, in the same words",
       (said, ws_said["stubborn"]))
    lines = d.execute("keep", context_id=cid)
    ok([e["name"] for e in of_type(lines, "error")] == ["NameError"],
       "REST: the restarted kernel lost its variables, as the WebSocket's did", lines)

    # --- the audit log: the same events from every front end ------------------------------
    status, sid, _ = mcpraw.initialize(d)
    mcpraw.call(d, sid, "execute_python", {"code": "print('mcp')"})
    ends = {}
    starts = {}
    for fe, code in (("rest", "keep = 42"), ("jupyter", "keep = 42"), ("mcp", "print('mcp')")):
        ex = wait(LOG, lambda e: e["event"] == "execute" and e["frontend"] == fe and
                  e.get("code") == code)
        end = wait(LOG, lambda e: e["event"] == "execution.end" and ex and
                   e["execution"] == ex[0]["execution"])
        starts[fe], ends[fe] = ex and ex[0], end and end[0]
    ok(all(starts.values()) and all(ends.values()), "execute and execution.end from each front end",
       (starts, ends))
    keys = {fe: sorted(e) for fe, e in starts.items() if e}
    ok(len(set(map(tuple, keys.values()))) == 1, "execute has the same keys from REST, the "
       "WebSocket and MCP", keys)
    keys = {fe: sorted(e) for fe, e in ends.items() if e}
    ok(len(set(map(tuple, keys.values()))) == 1 and all(e["outcome"] == "ok" for e in ends.values()),
       "execution.end has the same keys and outcome from REST, the WebSocket and MCP", keys)
    timeouts = {}
    for e in read(LOG):
        if e["event"] == "execution.end" and e["outcome"] == "timeout":
            timeouts.setdefault(e["frontend"], []).append(e)
    errors = {fe: [e["error"] for e in es] for fe, es in timeouts.items()}
    ok(errors.get("jupyter") == errors.get("rest") ==
       ["KeyboardInterrupt", "KeyboardInterrupt", "timeout"] and
       sorted(timeouts["jupyter"][0]) == sorted(timeouts["rest"][0]),
       "the timeouts' execution.end from both: outcome timeout, the same keys, the same error "
       "(the interrupt's exception, or the error kind when the kernel was restarted)", errors)
    names = {e["outcome"] for e in read(LOG) if e["event"] == "execution.end"}
    ok(names <= {"ok", "error", "timeout", "kernel_error", "cancelled", "refused", "detached"},
       "only the one set of outcome names", names)
finally:
    d.stop()
done()
