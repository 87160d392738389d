"""Revocation is immediate: a key removed or rotated (then SIGHUP) closes at
once what it has open, not only its next requests.

The attack: bob's key leaks, or bob leaves; the operator runs `sandgate keys
remove bob` and sends SIGHUP.  New requests with the key get 401, but what
bob opened before — a kernel WebSocket, a streamed command, a command whose
stdin is a body still being sent, an envd Process.Start stream, a long
streamed /execute, an MCP tools/call answered as an event stream — would
otherwise go on running code for him.  Each must close within 1 s of the
SIGHUP (measured from the client's side), each with an audit line
("revoked", tenant bob, its path, reason "removed"); the WebSocket with a
close frame 1008.  alice's and the admin's (--token) connections stay open
and work (code runs on alice's WebSocket, and on the admin's WebSocket on
bob's context), and bob's sessions stay (the admin lists them).  Then
alice's key is rotated: her old-key connections close the same way (reason
"rotated"), and her new key works and sees her sessions.  Needs root and
runsc."""
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

from sgd import Daemon, SANDGATE, TOKEN, audit_read, audit_wait, tenants
from tap import ok, diag, done
from wsclient import WS, Closed

tmp, KEYS, (ALICE, BOB) = tenants("sg-revoke-", "alice", "bob")
AUDIT = os.path.join(tmp, "audit.log")
d = Daemon("--keys-file", KEYS, "--pool-size", "0", "--audit-log", AUDIT)
HOST = d.url.split("//", 1)[1]
LONG = "import time\nfor _ in range(600): time.sleep(0.2)"  # interruptible, outlives the test


def js(key, method, path, body=None):
    return d.json(method, path, body, token=key)


class Stream:
    """A streamed request whose answer a thread reads until the server ends
    it; ended_at is when the client saw the end (time.monotonic)."""

    def __init__(self, name, key, method, path, body=b"", headers=None, answer=True):
        self.name, self.path = name, path.split("?")[0]
        host, port = HOST.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        h = {"Host": HOST, "Authorization": "Bearer " + key, **(headers or {})}
        if answer:
            h["Content-Length"] = str(len(body))
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        self.sock.sendall(head.encode() + b"\r\n" + body)
        self.data, self.ended_at = b"", None
        self.first = threading.Event()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if answer:  # the status line and some of the stream: it is running
            self.first.wait(60)

    def _read(self):
        try:
            while True:
                b = self.sock.recv(65536)
                if not b:
                    break
                self.data += b
                self.first.set()
        except OSError:
            pass
        self.ended_at = time.monotonic()
        self.first.set()
        self.ended.set()

    def status(self):
        line = self.data.split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) > 1 else 0

    def open(self):
        return not self.ended.is_set()

    def close(self):
        self.sock.close()


class Channel:
    """A kernel WebSocket whose messages a thread reads into a queue."""

    def __init__(self, name, ctx, key):
        self.name, self.path = name, f"/api/kernels/{ctx}/channels"
        self.ws = WS(d.url, ctx, key)
        self.q = queue.Queue()
        self.ended = threading.Event()
        self.ended_at, self.code = None, None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                self.q.put(self.ws.recv())
        except Closed as e:
            self.code = e.code
        except (OSError, ConnectionError, AssertionError):
            pass
        self.ended_at = time.monotonic()
        self.ended.set()

    def open(self):
        return not self.ended.is_set()

    def run(self, code, timeout=60):
        """The stdout of code run on this WebSocket, or None."""
        try:
            mid = self.ws.send("shell", "execute_request",
                               {"code": code, "silent": False, "store_history": True,
                                "user_expressions": {}, "allow_stdin": False,
                                "stop_on_error": True})
        except OSError:
            return None
        out, replied, idle = "", False, False
        deadline = time.time() + timeout
        while not (replied and idle) and time.time() < deadline:
            try:
                m = self.q.get(timeout=0.5)
            except queue.Empty:
                if self.ended.is_set():
                    return None
                continue
            if m["parent_header"].get("msg_id") != mid:
                continue
            t = m["header"]["msg_type"]
            if t == "stream":
                out += m["content"]["text"]
            replied |= m["channel"] == "shell"
            idle |= t == "status" and m["content"]["execution_state"] == "idle"
        return out if replied and idle else None

    def close(self):
        self.ws.sock.close()


def envelope(doc):
    b = json.dumps(doc).encode()
    return struct.pack(">BI", 0, len(b)) + b


def mcp_session(key):
    """An MCP session of key's tenant: its id."""
    auth = {"Authorization": "Bearer " + key, "Accept": "application/json, text/event-stream"}
    st, hdrs, _ = d.request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "revoke", "version": "0"}}}, headers=auth, token=None)
    sid = hdrs.get("Mcp-Session-Id")
    d.request("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
              headers={**auth, "Mcp-Session-Id": sid}, token=None)
    return sid


def open_all(who, key, ctx, exec_ctx):
    """Every kind of long-lived connection, opened with key: a list."""
    chans = [Channel(f"{who}'s WebSocket", ctx, key)]
    ok(chans[0].run("print(6*7)") == "42\n", f"{who}'s WebSocket runs code")
    cmd = {"Content-Type": "application/json"}
    chans.append(Stream(f"{who}'s streamed command", key, "POST", f"/contexts/{ctx}/commands",
                        json.dumps({"cmd": "echo started; sleep 600"}).encode(), cmd))
    # A command whose stdin is this request's body, still being sent.
    s = Stream(f"{who}'s command stdin body", key, "POST", f"/contexts/{ctx}/commands?cmd=cat",
               headers={"Transfer-Encoding": "chunked"}, answer=False)
    s.sock.sendall(b"6\r\nhello\n\r\n")
    chans.append(s)
    deadline = time.time() + 30
    while time.time() < deadline:  # its command runs: the request reached its sink
        st, lst = js(key, "GET", f"/contexts/{ctx}/commands")
        if st == 200 and '"cat"' in json.dumps(lst):
            break
        time.sleep(0.1)
    ok('"cat"' in json.dumps(lst), f"{who}'s command reading its request body runs", lst)
    chans.append(Stream(f"{who}'s envd Process.Start", key, "POST", "/process.Process/Start",
                        envelope({"process": {"cmd": "/bin/sh",
                                              "args": ["-c", "echo started; sleep 600"]}}),
                        {"Content-Type": "application/connect+json", "E2b-Sandbox-Id": ctx,
                         "Connect-Protocol-Version": "1"}))
    chans.append(Stream(f"{who}'s streamed /execute", key, "POST", "/execute",
                        json.dumps({"code": "print('started', flush=True)\n" + LONG,
                                    "context_id": exec_ctx}).encode(), cmd))
    sid = mcp_session(key)
    chans.append(Stream(f"{who}'s MCP streamed tools/call", key, "POST", "/mcp", json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "execute_code", "arguments": {"code": LONG, "language": "python"}}}).encode(),
        {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "Mcp-Session-Id": sid}))
    # Each under way: open, and (but for the body still being sent) answered
    # 200 with a stream that has not ended — not a finished answer on a
    # connection kept alive.
    done_marks = (b'"result"', b"end_of_execution", b'"exit"', b'"end"')
    idle = [c.name for c in chans if not c.open() or (
        isinstance(c, Stream) and c.first.is_set() and c.data and
        (c.status() != 200 or any(m in c.data for m in done_marks)))]
    ok(not idle, f"{who}'s {len(chans)} connections are open and streaming",
       [(c.name, getattr(c, "data", b"")[:400]) for c in chans if c.name in idle])
    return chans


def sighup_and_wait(chans, limit=1.0):
    """Sends SIGHUP; returns {name: seconds until the client saw the end}."""
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGHUP)
    for c in chans:
        c.ended.wait(t0 + 10 - time.monotonic())
    return {c.name: (c.ended_at - t0 if c.ended_at else None) for c in chans}


def revoked_events(tenant, reason):
    return audit_wait(AUDIT, lambda e: e["event"] == "revoked" and e.get("tenant") == tenant
                      and e.get("reason") == reason)


def audited(chans, events):
    """The connections without a "revoked" audit line of their own path."""
    paths = [e.get("path") for e in events]
    missing = []
    for c in chans:
        if c.path in paths:
            paths.remove(c.path)
        else:
            missing.append(c.name)
    return missing


everything = []
try:
    st, b = js(BOB, "POST", "/contexts", {})
    B = b["id"]
    st, a1 = js(ALICE, "POST", "/contexts", {})
    st, a2 = js(ALICE, "POST", "/contexts", {})
    A1, A2 = a1["id"], a2["id"]
    ok(all(x.get("id") for x in (b, a1, a2)), "bob has a context, alice two", (b, a1, a2))

    admin = Channel("the admin's WebSocket on bob's context", B, TOKEN)
    bobs = open_all("bob", BOB, B, B)
    alices = open_all("alice", ALICE, A1, A2)
    everything = bobs + alices + [admin]

    # --- bob's key removed --------------------------------------------------------------
    r = subprocess.run([SANDGATE, "keys", "remove", "bob", "--keys-file", KEYS],
                       capture_output=True, text=True)
    ok(r.returncode == 0, "sandgate keys remove bob", r.stderr)
    took = sighup_and_wait(bobs)
    diag("bob's connections ended after (s): " +
         ", ".join(f"{k}: {v and round(v, 3)}" for k, v in took.items()))
    ok(all(v is not None and v < 1.0 for v in took.values()),
       "every connection bob opened closes within 1 s of SIGHUP", took)
    ok(bobs[0].code == 1008, "bob's WebSocket is closed with 1008 (policy violation)", bobs[0].code)
    ok(bobs[0].run("print(6*7)", timeout=5) is None, "and runs nothing any more")
    events = revoked_events("bob", "removed")
    ok(not audited(bobs, events), "each closed connection has its audit line (revoked, bob)",
       (audited(bobs, events), events))
    ok({e.get("frontend") for e in events} >= {"jupyter", "rest", "envd", "mcp"},
       "naming its front end", [e.get("frontend") for e in events])
    ok(all(c.open() for c in alices), "alice's connections are all still open",
       [c.name for c in alices if not c.open()])
    ok(alices[0].run("print(6*7)") == "42\n", "code runs on alice's WebSocket afterwards")
    ok(admin.open() and admin.run("print(6*7)") == "42\n",
       "the admin's WebSocket on bob's context stays open and runs code")
    st, _ = js(BOB, "GET", "/contexts")
    ok(st == 401, "bob's key is refused", st)
    st, lst = js(TOKEN, "GET", "/contexts")
    ok(st == 200 and B in [c["id"] for c in lst if c.get("tenant") == "bob"],
       "bob's context still exists: the admin lists it", lst)

    # --- alice's key rotated --------------------------------------------------------------
    r = subprocess.run([SANDGATE, "keys", "rotate", "alice", "--keys-file", KEYS],
                       capture_output=True, text=True)
    NEW = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    ok(r.returncode == 0 and NEW.startswith("sgk_"), "sandgate keys rotate alice", r.stderr)
    took = sighup_and_wait(alices)
    diag("alice's connections ended after (s): " +
         ", ".join(f"{k}: {v and round(v, 3)}" for k, v in took.items()))
    ok(all(v is not None and v < 1.0 for v in took.values()),
       "every connection alice opened with her old key closes within 1 s", took)
    events = revoked_events("alice", "rotated")
    ok(not audited(alices, events), "each audited (revoked, alice, rotated)", events)
    st, lst = js(NEW, "GET", "/contexts")
    ok(st == 200 and {A1, A2} <= {c["id"] for c in lst},
       "her new key works and her sessions are still hers", (st, lst))
    ch = Channel("alice's new WebSocket", A1, NEW)
    ok(ch.run("print(6*7)") == "42\n", "a WebSocket opened with her new key runs code")
    ch.close()
    st, _ = js(ALICE, "GET", "/contexts")
    ok(st == 401, "her old key is refused", st)
    ok(admin.open(), "the admin's WebSocket is still open")
    ok(not [e for e in audit_read(AUDIT) if e["event"] == "revoked" and
            e.get("tenant") == "admin"], "nothing of the admin's was revoked")
    ok(d.proc.poll() is None, "sandgate is still running")
finally:
    for c in everything:
        c.close()
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
