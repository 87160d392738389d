"""Tenants, hardened: a key is checked when a request's headers come, and
nothing else is done for a wrong one.

Attacks and what must hold:
* Key guessing with bodies that never come: wrong keys sent with
  `Content-Length: 100` and one byte of body, then silence.  Each is
  answered 401 at once (the body is not awaited) and counted, so past
  --auth-fail-limit the address gets 429, at its headers too, even with a
  right key; another address still works.
* `Expect: 100-continue` with a wrong key gets its 401 and no 100.
* An envd upload (POST /files, which makes the tenant's default context)
  without a key or with a wrong one, its body never sent: nothing is
  created (the admin's list shows no context).
* /health without a key tells only that the daemon is alive: counts of
  sessions moved with every key's creations, an oracle for guessing keys.
  An admin's key still gets them; a wrong key is refused and counted.
* Audit lines stay bounded: a command of 100 kB makes a line whose
  command is cut to 4 KiB, with its length noted; code that JSON escapes to 400 KiB makes a line that keeps its
  short fields and names the code dropped; --audit-max-size rotates the
  file.
Needs root (a log directory for the serving uid) and runsc."""
import json
import os
import socket
import subprocess
import tempfile
import time

from sgd import Daemon, SANDGATE, TOKEN, add_key
from tap import ok, diag, done

LIMIT = 5
SERVE_UID = 64122  # --user's default: it rotates the log, so it owns the directory
LINE_MAX = 256 << 10
MAX_SIZE = 16 << 10

r = subprocess.run([SANDGATE, "--audit-max-size", "lots"], capture_output=True, text=True)
ok(r.returncode == 2 and "--audit-max-size wants a size" in r.stderr,
   "--audit-max-size takes a size", r.stderr)

tmp = tempfile.mkdtemp(prefix="sg-tauth-")
os.chmod(tmp, 0o755)
KEYS = os.path.join(tmp, "keys")
ALICE = add_key(KEYS, "alice")
logdir = os.path.join(tmp, "log")
os.mkdir(logdir, 0o750)
os.chown(logdir, SERVE_UID, 0)
LOG = os.path.join(logdir, "audit.log")


def audit_lines():
    """Every line of the log and its rotated files, oldest first, raw."""
    lines = []
    for p in [LOG + ".3", LOG + ".2", LOG + ".1", LOG]:
        if os.path.exists(p):
            with open(p, "rb") as f:
                lines += f.read().splitlines()
    return lines


def events():
    return [json.loads(l) for l in audit_lines()]


d = Daemon("--keys-file", KEYS, "--pool-size", "0", "--auth-fail-limit", str(LIMIT),
           "--auth-block", "60", "--max-body", "2M", "--audit-log", LOG,
           "--audit-max-size", "16K", "--audit-keep", "2")
PORT = int(d.url.rsplit(":", 1)[1])


closed = []  # for each raw(): whether the server closed the connection


def raw(src, data, wait=3.0):
    """Sends data from address src, then nothing more; what came back before
    the server closed the connection or wait seconds passed."""
    s = socket.create_connection(("127.0.0.1", PORT), source_address=(src, 0), timeout=wait)
    s.sendall(data)
    got = b""
    deadline = time.time() + wait
    closed.append(False)
    try:
        while time.time() < deadline:
            s.settimeout(max(0.01, deadline - time.time()))
            chunk = s.recv(65536)
            if not chunk:
                closed[-1] = True
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return got


def upload(key, extra=b""):
    """POST /files (envd) promising 100 bytes, sending one."""
    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    return (b"POST /files?path=/home/user/f HTTP/1.1\r\nHost: x\r\n" + auth + extra +
            b"Content-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\nx")


def status(resp):
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.1 ") else None


def metric(name):
    _, _, page = d.request("GET", "/metrics")
    for line in page.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


try:
    # --- /health --------------------------------------------------------------------
    st, h = d.json("GET", "/health", token=None)
    ok(st == 200 and h == {"status": "ok"}, "GET /health without a key: only {status: ok}", h)
    st, h = d.json("GET", "/health", token=ALICE)
    ok(st == 200 and h == {"status": "ok"}, "a tenant's key gets no counts either", h)
    st, h = d.json("GET", "/health")
    ok(st == 200 and h.get("status") == "ok" and "sessions" in h.get("kernels", {}),
       "an admin's key gets the counts", h)
    resp = raw("127.0.0.9", b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
               b"sgk_wrong\r\n\r\n")
    ok(status(resp) == 401, "a wrong key on /health is refused, not answered as none",
       resp[:200])

    # --- a wrong key's body is never awaited -----------------------------------------
    failures = metric("sandgate_http_auth_failures_total")
    t0 = time.time()
    del closed[:]
    codes = [status(raw("127.0.0.2", upload(f"sgk_wrong{i}"))) for i in range(LIMIT + 1)]
    took = time.time() - t0
    ok(codes == [401] * (LIMIT + 1) and took < 6,
       f"{LIMIT + 1} wrong keys with 1 of 100 body bytes: 401 each, at once ({took:.2f} s)",
       codes)
    ok(closed == [True] * (LIMIT + 1), "and the connection closed after each answer", closed)
    ok(metric("sandgate_http_auth_failures_total") - failures == LIMIT + 1,
       "each counted as a failed authentication", metric("sandgate_http_auth_failures_total"))
    resp = raw("127.0.0.2", upload("sgk_wrong-again"))
    ok(status(resp) == 429, "past --auth-fail-limit the address gets 429 at its headers",
       resp[:200])
    resp = raw("127.0.0.2", upload(ALICE))
    ok(status(resp) == 429, "a right key from it too", resp[:200])
    resp = raw("127.0.0.3", b"GET /contexts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
               ALICE.encode() + b"\r\nConnection: close\r\n\r\n")
    ok(status(resp) == 200, "while another address still works", resp[:200])

    resp = raw("127.0.0.4", upload("sgk_wrong", b"Expect: 100-continue\r\n"))
    ok(status(resp) == 401 and b"100 Continue" not in resp,
       "Expect: 100-continue with a wrong key: 401, no 100", resp[:200])

    # --- nothing is created for a request without a key --------------------------------
    for src, key in (("127.0.0.5", None), ("127.0.0.6", "sgk_wrong")):
        resp = raw(src, upload(key))
        ok(status(resp) == 401, f"envd POST /files {'without a key' if key is None else 'with a wrong key'}, "
           "its body never sent: 401 at once", resp[:200])
    st, ctxs = d.json("GET", "/contexts")
    ok(st == 200 and ctxs == [],
       "no context was created, for these nor for alice's right key from the blocked address "
       "(the admin's list)", ctxs)
    ok(metric("sandgate_contexts") == 0, "nor counted on /metrics",
       metric("sandgate_contexts"))

    refused = [e for e in events() if e["event"] == "refused"]
    ok(sum(e["status"] == 401 and e["client"] == "127.0.0.2" for e in refused) == LIMIT + 1 and
       any(e["status"] == 429 and e["client"] == "127.0.0.2" for e in refused),
       "the refusals at the headers are in the audit log", refused[-3:])

    # --- audit lines are bounded -------------------------------------------------------
    st, sess = d.json("POST", "/api/sessions",
                      {"path": "n.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
    ok(st == 201, "a Jupyter session", (st, str(sess)[:200]))
    kid = sess["kernel"]["id"] if isinstance(sess, dict) and sess.get("kernel") else None
    # A command of 100 kB (a Jupyter session's labels are bounded before
    # they reach the log: 413 past 4096 bytes).
    cmd = "true " + "n" * 100000
    st, _, _ = d.request("POST", f"/contexts/{kid}/commands", {"cmd": cmd},
                         headers={"Accept": "application/json"})
    lines = [l for l in audit_lines() if b'"command.start"' in l]
    e = json.loads(lines[-1]) if lines else {}
    ok(lines and len(lines[-1]) + 1 <= LINE_MAX and len(e.get("command", "")) == 4096 and
       e.get("command_bytes") == len(cmd) and e.get("command_truncated") is True,
       f"a 100 kB command's audit line is {len(lines[-1]) if lines else 0} bytes: the command "
       "cut to 4 KiB, command_bytes and command_truncated",
       {k: (v if k != "command" else len(v)) for k, v in e.items()})
    # 64 KiB of code (the cap of the code itself) that JSON writes as six
    # times as many bytes: the line keeps its short fields only.
    code = "\x01" * 70000
    st, _, _ = d.request("POST", "/execute", {"code": code, "context_id": kid})
    lines = [l for l in audit_lines() if b'"event":"execute"' in l]
    e = json.loads(lines[-1]) if lines else {}
    ok(st == 200 and lines and len(lines[-1]) + 1 <= LINE_MAX and "code" not in e and
       e.get("dropped") == ["code"] and e.get("line_truncated") is True and
       e.get("line_bytes", 0) > LINE_MAX and e.get("code_bytes") == 70000 and
       e.get("code_truncated") is True and len(e.get("code_sha256", "")) == 64,
       "an execute line that would be 400 KiB keeps its short fields, names the code dropped",
       (st, {k: v for k, v in e.items() if k != "code"}))
    if isinstance(sess, dict) and "id" in sess:
        d.request("DELETE", f"/api/sessions/{sess['id']}")
        d.request("DELETE", f"/api/kernels/{sess['kernel']['id']}")

    # --- rotation by size ----------------------------------------------------------------
    for _ in range(300):  # each a "refused" line (403) of about 200 bytes
        d.request("GET", "/metrics", token=ALICE)
    sizes = {p: os.path.getsize(p) for p in (LOG, LOG + ".1", LOG + ".2", LOG + ".3")
             if os.path.exists(p)}
    ok(set(sizes) == {LOG, LOG + ".1", LOG + ".2"} and
       all(n <= MAX_SIZE for n in sizes.values()),
       "--audit-max-size 16K --audit-keep 2: audit.log, .1 and .2, none over 16 KiB", sizes)
    try:
        evs = events()
        whole = True
    except ValueError:
        evs, whole = [], False
    ok(whole and evs[-1]["event"] == "refused" and evs[-1]["tenant"] == "alice",
       "every line whole, the newest in audit.log", evs[-1:] if evs else None)
    ok(os.stat(LOG).st_uid == SERVE_UID, "the new file is the serving uid's")
    ok(any("audit log" in l and "reached" in l for l in d.log),
       "the rotation is logged", d.log[-5:])
finally:
    d.stop()

done()
