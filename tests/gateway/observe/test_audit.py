"""The audit log (--audit-log, docs/operations.md): every kind of event
through each front end — the REST API, a Jupyter WebSocket and MCP — with
the client's address and an ISO-8601 time; the token never in it (not from
Authorization, not from a ?token= URL, not from a refused request with a
wrong one), nor file contents or output; --audit-code hash writes the
SHA-256 and no code; SIGHUP after logrotate's rename opens the new file
(and keeps the old one when the serving uid cannot create it); '-' writes to
stderr; what sandgate does on its own (an idle pause, a cull, a re-adoption
at start, a kernel's death) is logged with no front end and no client."""
import hashlib
import json
import os
import re
import signal
import tempfile
import time
import urllib.request

import mcpraw
from sgd import Daemon, TOKEN, sandbox_pids, audit_read as read, audit_wait as wait
from tap import ok, diag, done
from wsclient import WS

SERVE_UID, SANDBOX_GID = 64122, 64123  # --user's default, the sandbox group
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
WRONG = "wrong-token-0123456789-zz"


def ev(name, **fields):
    return lambda e: e["event"] == name and all(e.get(k) == v for k, v in fields.items())


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    return out


def name_of(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


# A directory only root may write to, as /var/log is: the file is opened
# before the daemon drops to its serving uid.
logdir = tempfile.mkdtemp(prefix="sg-audit-")
os.chmod(logdir, 0o755)
LOG = os.path.join(logdir, "audit.log")

d = Daemon("--audit-log", LOG, "--pool-size", "1")
try:
    st = os.stat(LOG)
    ok(st.st_uid == 0 and st.st_mode & 0o777 == 0o640,
       "the audit log is created 0640 before privileges are dropped", oct(st.st_mode))
    _, health = d.json("GET", "/health")
    replica = health["replica"]

    # --- REST -------------------------------------------------------------------
    status, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    e = wait(LOG, ev("context.create", context=cid))
    ok(e and e[0]["frontend"] == "rest" and e[0]["client"] == "127.0.0.1" and
       e[0]["language"] == "python", "REST: context.create with front end and client", e)

    code = "print('OUT' + 'PUT-mark')"
    d.execute(code, context_id=cid)
    ex = wait(LOG, ev("execute", context=cid, code=code))
    ok(ex and ex[0]["frontend"] == "rest" and ex[0]["language"] == "python" and
       ex[0]["code_sha256"] == hashlib.sha256(code.encode()).hexdigest() and
       ex[0]["code_bytes"] == len(code), "REST: execute with the code and its SHA-256", ex)
    n = ex[0]["execution"] if ex else None
    end = wait(LOG, ev("execution.end", execution=n))
    ok(end and end[0]["outcome"] == "ok" and end[0]["output_bytes"] == len("OUTPUT-mark\n") and
       isinstance(end[0]["duration_ms"], int) and end[0]["kind"] == "code" and
       end[0]["context"] == cid, "REST: execution.end: outcome, output bytes, duration", end)

    d.execute("1/0", context_id=cid)
    end = wait(LOG, lambda e: e["event"] == "execution.end" and e.get("error"))
    ok(end and end[0]["outcome"] == "error" and end[0]["error"] == "ZeroDivisionError",
       "REST: an exception's name in execution.end", end)

    d.execute("import time; time.sleep(20)", context_id=cid, timeout=1)
    end = wait(LOG, ev("execution.end", outcome="timeout"), timeout=30)
    ok(end, "REST: a timeout is the outcome 'timeout'", end)

    d.execute("import os; print(os.environ['AUDIT_VAR'])", context_id=cid,
              env_vars={"AUDIT_VAR": "env-secret-value"})
    e = wait(LOG, lambda e: e["event"] == "execute" and e.get("env_vars"))
    ok(e and e[0]["env_vars"] == ["AUDIT_VAR"], "REST: env_vars names, not values", e)

    status, _, _ = d.request("POST", "/execute", {"command": "echo cmd-$((6*7))",
                                                  "context_id": cid},
                             headers={"Accept": "application/json"})
    c = wait(LOG, ev("command", command="echo cmd-$((6*7))"))
    ok(status == 200 and c and c[0]["command_sha256"] and "code" not in c[0],
       "REST: command with the command text", c)
    end = wait(LOG, ev("execution.end", execution=c[0]["execution"] if c else None))
    ok(end and end[0]["kind"] == "command" and end[0]["exit_code"] == 0 and
       end[0]["outcome"] == "ok", "REST: a command's end with its exit code", end)

    big = "x = 1\n" + "#" * 70000
    d.execute(big, context_id=cid)
    e = wait(LOG, lambda e: e["event"] == "execute" and e.get("code_bytes") == len(big))
    ok(e and len(e[0]["code"].encode()) < 65536 + 200 and e[0]["code"].startswith("x = 1\n#") and
       "audit log keeps the first 65536 bytes" in e[0]["code"] and
       e[0]["code_sha256"] == hashlib.sha256(big.encode()).hexdigest(),
       "REST: code past 64 KiB is cut, with a marker, its hash of the whole", 
       e and e[0]["code"][-120:])

    status, _, _ = d.request("PUT", f"/contexts/{cid}/files/data/up.txt",
                             raw=b"file-content-marker\n",
                             headers={"Content-Type": "application/octet-stream"})
    e = wait(LOG, ev("file.write", context=cid))
    ok(status == 201 and e and e[0]["path"] == "data/up.txt" and e[0]["size"] == 20 and
       e[0]["frontend"] == "rest", "REST: file.write with path and size", e)
    status, _, _ = d.request("DELETE", f"/contexts/{cid}/files/data/up.txt")
    e = wait(LOG, ev("file.delete", context=cid))
    ok(status == 204 and e and e[0]["path"] == "data/up.txt" and e[0]["size"] == 20,
       "REST: file.delete with path and size", e)

    status, _, _ = d.request("POST", f"/contexts/{cid}/restart")
    ok(status == 204 and wait(LOG, ev("context.restart", context=cid)), "REST: context.restart")
    d.execute("1", context_id=cid)  # ready again
    status, _ = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    ok(status == 200 and wait(LOG, ev("context.pause", context=cid)), "REST: context.pause",
       status)
    status, _ = d.json("POST", f"/contexts/{cid}/resume", timeout=120)
    ok(status == 200 and wait(LOG, ev("context.resume", context=cid)), "REST: context.resume",
       status)

    # --- refused requests -----------------------------------------------------------
    status, _, _ = d.request("GET", "/contexts", token=WRONG)
    e = wait(LOG, ev("refused", status=401, path="/contexts"))
    ok(status == 401 and e and e[0]["method"] == "GET" and e[0]["client"] == "127.0.0.1",
       "401 with a wrong token: refused, method, path, client", e)
    status, _, _ = d.request("GET", f"/api/kernels?token={WRONG}&x=1", token=None)
    e = wait(LOG, ev("refused", status=401, path="/api/kernels"))
    ok(status == 401 and e, "401 with ?token=: refused, the path without its query", e)
    status, _, _ = d.request("POST", "/execute", raw=b'{"code": "' + b"#" * (1 << 20) + b'"}')
    e = wait(LOG, ev("refused", status=413))
    ok(status == 413 and e and e[0]["path"] == "/execute", "413: refused", e)
    d.execute("import os; os.symlink('/etc', 'etc-link')", context_id=cid)
    status, _, _ = d.request("GET", f"/contexts/{cid}/files/etc-link/passwd")
    e = wait(LOG, ev("refused", status=403))
    ok(status == 403 and e and e[0]["path"] == f"/contexts/{cid}/files/etc-link/passwd",
       "403: refused", e)

    status, _, _ = d.request("DELETE", f"/contexts/{cid}")
    ok(status == 204 and wait(LOG, ev("context.delete", context=cid, frontend="rest")),
       "REST: context.delete")

    # --- Jupyter: REST and the WebSocket --------------------------------------------
    status, k = d.json("POST", "/api/kernels", {"name": "python3"}, timeout=120)
    kid = k["id"]
    e = wait(LOG, ev("kernel.create", context=kid))
    ok(status == 201 and e and e[0]["frontend"] == "jupyter" and e[0]["client"] == "127.0.0.1",
       "Jupyter: kernel.create", e)
    ws = WS(d.url, kid, TOKEN)  # the token in the URL, as browsers send it
    code = "w = 6 * 7\nprint(w)"
    reply, _ = ws.execute(code)
    ex = wait(LOG, ev("execute", context=kid, code=code))
    ok(reply["content"]["status"] == "ok" and ex and ex[0]["frontend"] == "jupyter" and
       ex[0]["client"] == "127.0.0.1", "Jupyter WebSocket: execute with front end and client", ex)
    end = wait(LOG, ev("execution.end", execution=ex[0]["execution"] if ex else None))
    ok(end and end[0]["outcome"] == "ok" and end[0]["output_bytes"] == 3,
       "Jupyter WebSocket: execution.end with output bytes", end)
    ws.execute("raise KeyError('k')")
    end = wait(LOG, ev("execution.end", context=kid, error="KeyError"))
    ok(end and end[0]["outcome"] == "error", "Jupyter WebSocket: an exception's name", end)
    ws.close()
    status, _, _ = d.request("POST", f"/api/kernels/{kid}/interrupt")
    ok(status == 204 and wait(LOG, ev("kernel.interrupt", context=kid)), "Jupyter: interrupt")
    status, _ = d.json("POST", f"/api/kernels/{kid}/restart", timeout=120)
    ok(status == 200 and wait(LOG, ev("kernel.restart", context=kid, frontend="jupyter")),
       "Jupyter: kernel.restart")
    status, s = d.json("POST", "/api/sessions", {"path": "nb.ipynb", "type": "notebook",
                                                 "kernel": {"name": "python3"}}, timeout=120)
    sid = s["id"]
    e = wait(LOG, ev("session.create", session=sid))
    ok(status == 201 and e and e[0]["context"] == s["kernel"]["id"] and e[0]["path"] == "nb.ipynb"
       and e[0]["frontend"] == "jupyter", "Jupyter: session.create", e)
    status, _, _ = d.request("DELETE", f"/api/sessions/{sid}")
    ok(status == 204 and wait(LOG, ev("session.delete", session=sid)), "Jupyter: session.delete")
    status, _, _ = d.request("DELETE", f"/api/kernels/{kid}")
    ok(status == 204 and wait(LOG, ev("kernel.delete", context=kid)), "Jupyter: kernel.delete")

    # --- MCP --------------------------------------------------------------------------
    status, msid, _ = mcpraw.initialize(d)
    e = wait(LOG, ev("session.create", session=msid))
    ok(status == 200 and e and e[0]["frontend"] == "mcp" and e[0]["client"] == "127.0.0.1",
       "MCP: session.create", e)
    code = "print(sum(range(10)))"
    status, answer = mcpraw.call(d, msid, "execute_python", {"code": code})
    ok(status == 200 and mcpraw.text_of(answer).strip() == "45", "MCP: execute_python runs",
       answer)
    e = wait(LOG, ev("kernel.create", session=msid))
    mk = e[0]["context"] if e else None
    ok(e and e[0]["frontend"] == "mcp", "MCP: kernel.create for the session", e)
    ex = wait(LOG, ev("execute", code=code))
    ok(ex and ex[0]["frontend"] == "mcp" and ex[0]["context"] == mk, "MCP: execute", ex)
    end = wait(LOG, ev("execution.end", execution=ex[0]["execution"] if ex else None))
    ok(end and end[0]["outcome"] == "ok" and end[0]["output_bytes"] == 3, "MCP: execution.end",
       end)
    status, answer = mcpraw.call(d, msid, "write_file",
                                 {"path": "m.txt", "content": "mcp-content-marker"})
    e = wait(LOG, ev("file.write", session=msid))
    ok(e and e[0]["path"] == "m.txt" and e[0]["size"] == 18 and e[0]["frontend"] == "mcp",
       "MCP: file.write", e)
    status, answer = mcpraw.call(d, msid, "restart_kernel", {})
    ok(wait(LOG, ev("kernel.restart", session=msid, frontend="mcp")), "MCP: kernel.restart")
    status, _, _ = d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": msid})
    e = wait(LOG, ev("session.delete", session=msid))
    ok(status == 200 and e and e[0]["reason"] == "deleted by the client" and
       e[0]["frontend"] == "mcp", "MCP: session.delete", e)

    # --- every line -------------------------------------------------------------------
    events = read(LOG)
    ok(all(ISO.match(e["ts"]) and e["replica"] == replica and "frontend" in e and "client" in e
           for e in events), "every line: ISO-8601 UTC time, replica, front end, client",
       [e for e in events if not ISO.match(e.get("ts", ""))][:3])
    text = open(LOG).read()
    for secret, what in ((TOKEN, "the token"), (WRONG, "a wrong token"),
                         ("Bearer", "an Authorization header"), ("token=", "a ?token= query"),
                         ("file-content-marker", "an uploaded file's contents"),
                         ("mcp-content-marker", "an MCP file's contents"),
                         ("OUTPUT-mark", "output"), ("env-secret-value", "an env_vars value")):
        ok(secret not in text, f"never in the log: {what}")
    with urllib.request.urlopen(urllib.request.Request(
            d.url + "/metrics", headers={"Authorization": "Bearer " + TOKEN})) as r:
        page = r.read().decode()
    ok("sandgate_audit_dropped_total 0" in page, "/metrics: sandgate_audit_dropped_total 0")

    # --- SIGHUP: logrotate -----------------------------------------------------------
    launcher = [c for c in children(d.proc.pid) if name_of(c) == "sandgate-priv"]
    os.rename(LOG, LOG + ".1")
    fd = os.open(LOG, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)  # logrotate's "create"
    os.fchown(fd, SERVE_UID, SANDBOX_GID)
    os.close(fd)
    os.kill(d.proc.pid, signal.SIGHUP)
    for p in launcher:  # 'kill -HUP' of every sandgate process must not end the launcher
        os.kill(p, signal.SIGHUP)
    deadline = time.time() + 10
    while time.time() < deadline and not any("audit log was reopened" in l for l in d.log):
        time.sleep(0.1)
    d.execute("print('after rotation')")
    new = wait(LOG, ev("execute", code="print('after rotation')"))
    old = [e for e in read(LOG + ".1") if e.get("code") == "print('after rotation')"]
    ok(new and not old, "after a rename and SIGHUP, events go to the new file", (new, old))
    ok(launcher and all(os.path.exists(f"/proc/{p}") and name_of(p) == "sandgate-priv"
                        for p in launcher), "the launcher ignores SIGHUP", launcher)

    # Without a new file, the serving uid cannot create one here: the old
    # file stays in use, and the log says so.
    os.rename(LOG, LOG + ".2")
    os.kill(d.proc.pid, signal.SIGHUP)
    deadline = time.time() + 10
    while time.time() < deadline and not any("stays in use" in l for l in d.log):
        time.sleep(0.1)
    d.execute("print('no new file')")
    kept = wait(LOG + ".2", ev("execute", code="print('no new file')"))
    ok(kept and not os.path.exists(LOG) and any("stays in use" in l for l in d.log),
       "SIGHUP without a file it may create: the old one stays in use, with a warning",
       [l for l in d.log if "SIGHUP" in l])
finally:
    d.stop()

# --- what sandgate does on its own -----------------------------------------------------
def own(e):
    return e["frontend"] is None and e["client"] is None


LOG3 = os.path.join(logdir, "auto.log")
d = Daemon("--audit-log", LOG3, "--pool-size", "0", "--pause-after", "3", "--idle-timeout", "12")
try:
    status, ctx = d.json("POST", "/contexts", {"language": "python"})
    a = ctx["id"]
    d.execute("x = 1", context_id=a)
    paused = wait(LOG3, ev("context.pause", context=a), timeout=30)
    ok(paused and own(paused[0]) and paused[0]["reason"] == "idle (--pause-after)" and
       paused[0]["outcome"] == "ok", "an idle pause: context.pause, its reason and outcome, "
       "no front end or client", paused)
    d.restart()
    adopted = wait(LOG3, ev("context.adopt", context=a), timeout=20)
    ok(adopted and own(adopted[0]) and adopted[0]["paused"] is True,
       "a restart's re-adoption: context.adopt, paused", adopted)
    culled = wait(LOG3, ev("context.delete", context=a), timeout=40)
    ok(culled and own(culled[0]) and culled[0]["reason"] == "idle (--idle-timeout)" and
       culled[0]["idle_ms"] >= 12000, "a cull: context.delete, its reason and idle time", culled)
    status, ctx = d.json("POST", "/contexts", {"language": "python"})
    b = ctx["id"]
    d.execute("y = 2", context_id=b)
    for pid in sandbox_pids(b):
        os.kill(pid, signal.SIGKILL)
    dead = wait(LOG3, ev("context.dead", context=b), timeout=20)
    ok(dead and own(dead[0]) and dead[0]["error"] and "\n" not in dead[0]["error"],
       "a killed sandbox: context.dead with the error's kind, not its text", dead)
finally:
    d.stop()

# --- --audit-code hash, and '-': stderr ----------------------------------------------
d = Daemon("--audit-log", "-", "--audit-code", "hash", "--pool-size", "1")
try:
    code = "print('hashed-' + 'code')"
    d.execute(code)
    d.request("POST", "/execute", {"command": "echo hashed-command"},
              headers={"Accept": "application/json"})
    deadline = time.time() + 10
    lines = []
    while time.time() < deadline:
        lines = [json.loads(l) for l in list(d.log) if l.startswith('{"ts":')]
        if sum(e["event"] == "execution.end" for e in lines) >= 2:
            break
        time.sleep(0.1)
    ex = [e for e in lines if e["event"] == "execute"]
    cm = [e for e in lines if e["event"] == "command"]
    ok(ex and "code" not in ex[-1] and
       ex[-1]["code_sha256"] == hashlib.sha256(code.encode()).hexdigest() and
       ex[-1]["code_bytes"] == len(code), "--audit-code hash: the SHA-256, no code", ex)
    ok(cm and "command" not in cm[-1] and
       cm[-1]["command_sha256"] == hashlib.sha256(b"echo hashed-command").hexdigest(),
       "--audit-code hash: a command's SHA-256, not its text", cm)
    ok(any(e["event"] == "execution.end" for e in lines), "--audit-log -: events on stderr",
       len(lines))
    ok(not any("hashed-" in l for l in d.log if l.startswith('{"ts":')),
       "--audit-code hash: neither code nor command in the log")
finally:
    d.stop()
    for f in os.listdir(logdir):
        os.unlink(os.path.join(logdir, f))
    os.rmdir(logdir)
done()
