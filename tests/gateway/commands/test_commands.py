"""Commands beside the kernel (/contexts/{context}/commands) against real
runsc: a foreground command's output streamed as NDJSON (its first line read
before it prints its last) or as one JSON document, 500 KiB of output intact,
exit codes, cwd, envs, a timeout that kills; stdin streamed from the request
body (5 MiB, over --max-body, through sha256sum); background commands listed,
read, fed stdin live, signalled, killed and waited for; a paused context
resumed for a command; commands and executions not waiting for each other;
another tenant's context and command ids answered 404 like unknown ones; bad
input answered 400; and the daemon and another context working afterwards.
Needs root and runsc."""
import hashlib
import http.client
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse

from sgd import Daemon, SANDGATE, TOKEN, add_key, of_type, rss_kib, stdout
from tap import ok, diag, done, skip

# AddressSanitizer's quarantine keeps freed memory: RSS says nothing there.
ASAN = b"libasan" in subprocess.run(["ldd", SANDGATE], capture_output=True).stdout
tmp = tempfile.mkdtemp(prefix="sg-commands-")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")
ALICE = add_key(KEYS, "alice")
BOB = add_key(KEYS, "bob")

d = Daemon("--keys-file", KEYS, "--max-body", "1048576", "--max-timeout", "600")
host = urllib.parse.urlparse(d.url)


def conn():
    return http.client.HTTPConnection(host.hostname, host.port, timeout=120)


def post(path, body, key=ALICE, accept=None, raw=None):
    """(status, headers, bytes) of a POST."""
    h = {"Authorization": "Bearer " + key}
    if accept:
        h["Accept"] = accept
    if raw is None:
        h["Content-Type"] = "application/json"
    return d.request("POST", path, body, headers=h, token=None, raw=raw)


def ndjson(data):
    return [json.loads(l) for l in data.decode().splitlines() if l.strip()]


def run(ctx, cmd, **fields):
    """A foreground command's NDJSON lines."""
    status, _, data = post(f"/contexts/{ctx}/commands", dict(cmd=cmd, **fields))
    if status != 200:
        raise RuntimeError(f"command: {status} {data!r}")
    return [l for l in ndjson(data) if l["type"] != "keepalive"]


def js(method, path, body=None, key=ALICE):
    return d.json(method, path, body, token=key)


def settled(value, still=1.0, most=10.0):
    """value() once it has grown by less than 256 (KiB) in `still` seconds
    (at most `most` seconds): what a process piles up, once it stops."""
    deadline = time.time() + most
    seen = [(time.time(), value())]
    while time.time() < deadline:
        time.sleep(0.2)
        seen.append((time.time(), value()))
        past = [v for t, v in seen if t <= seen[-1][0] - still]
        if past and seen[-1][1] - past[-1] < 256:
            break
    return seen[-1][1]


def exit_of(lines):
    ex = of_type(lines, "exit")
    return ex[0] if ex else {}


try:
    status, c = js("POST", "/contexts", {})
    CTX = c["id"]
    status, c = js("POST", "/contexts", {})
    OTHER = c["id"]

    # --- foreground: NDJSON, JSON, exit codes, cwd, envs ---------------------------------
    lines = run(CTX, "echo out; echo err >&2; exit 3")
    types = [l["type"] for l in lines]
    ok(types[0] == "start" and lines[0]["id"] and isinstance(lines[0]["pid"], int),
       "the stream starts with the command's id and pid", lines)
    ok(types[-1] == "exit" and exit_of(lines)["exit_code"] == 3, "and ends with its exit code",
       lines)
    ok(stdout(lines) == "out\n" and "".join(l["text"] for l in of_type(lines, "stderr")) == "err\n",
       "stdout and stderr are told apart", lines)
    ok(exit_of(run(CTX, "true"))["exit_code"] == 0, "exit code 0")
    ok(exit_of(run(CTX, "kill -TERM $$"))["exit_code"] == 128 + 15,
       "a command killed by a signal exits 128 + the signal")
    ok(exit_of(run(CTX, "no-such-program-here"))["exit_code"] == 127, "a missing program: 127")
    status, _, data = post(f"/contexts/{CTX}/commands",
                           {"cmd": "pwd; echo $GREETING; exit 5", "cwd": "/tmp",
                            "envs": {"GREETING": "hello there"}}, accept="application/json")
    doc = json.loads(data)
    ok(status == 200 and doc["stdout"] == "/tmp\nhello there\n" and doc["exit_code"] == 5,
       "Accept: application/json: one document, with cwd and envs applied", doc)
    ok(doc["id"] and doc["stderr"] == "" and doc["duration_ms"] >= 0 and doc["timed_out"] is False,
       "with its id, stderr and duration", doc)
    run(CTX, "mkdir -p sub")
    ok(stdout(run(CTX, "pwd", cwd="sub")) == "/home/user/sub\n",
       "a relative cwd is under /home/user")
    ok(stdout(run(CTX, "id -u")).strip() != "0", "commands run as the sandbox user, not root")
    lines = [l for l in ndjson(post(f"/contexts/{CTX}/commands",
                                    {"argv": ["printf", "%s|", "a b", "c"]})[2])]
    ok(stdout(lines) == "a b|c|", "argv runs without a shell", lines)

    # --- 500 KiB of output, intact ---------------------------------------------------
    gen = "python3 -c \"import sys; sys.stdout.write(''.join('%07d\\n' % i for i in range(64000)))\""
    want = "".join("%07d\n" % i for i in range(64000))
    ok(stdout(run(CTX, gen)) == want, "512000 bytes of output intact (NDJSON)")
    status, _, data = post(f"/contexts/{CTX}/commands", {"cmd": gen}, accept="application/json")
    ok(status == 200 and json.loads(data)["stdout"] == want, "and in one JSON document")
    ok(stdout(run(CTX, "python3 -c 'print(6*7)'")) == "42\n", "python3 -c works")
    if stdout(run(CTX, "command -v python || true")).strip():
        ok(stdout(run(CTX, "python -c 'print(6*7)'")) == "42\n", "python -c works")
    else:
        skip("python -c works", "no python in this image (python-is-python3)")

    # --- a slow reader holds the command back: nothing lost, nothing piled up -------------
    big = (4 if ASAN else 32) << 20  # the RSS check needs 32 MiB to tell; ASan makes it slow
    c0 = conn()
    c0.connect()  # a small receive buffer: the kernel's socket buffers hide little
    c0.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    c0.request("POST", f"/contexts/{CTX}/commands",
               json.dumps({"cmd": f"head -c {big} /dev/zero | tr '\\0' x"}),
               {"Authorization": "Bearer " + ALICE, "Content-Type": "application/json"})
    r0 = c0.getresponse()
    first = r0.readline()
    rss0 = rss_kib(d.proc.pid)
    rss1 = settled(lambda: rss_kib(d.proc.pid))  # the daemon's pile, if it would make one
    # Reading now with a small buffer would crawl: loopback's MSS (~64 KiB)
    # is over its window, so TCP sends on its persist timer (~170 KB/s).
    c0.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    lines = [json.loads(first)] + [json.loads(l) for l in r0.read().decode().splitlines()
                                   if l.strip()]
    c0.close()
    text = stdout(lines)
    ok(len(text) == big and text.count("x") == big and exit_of(lines).get("exit_code") == 0,
       f"{big} bytes to a client that stops reading for a while arrive whole",
       (len(text), exit_of(lines)))
    ok(ASAN or rss1 - rss0 < 6 * 1024,
       f"while it does not read, sandgate does not hold the output ({rss1 - rss0} KiB more)")
    ok(not of_type(lines, "dropped"), "and drops none of it")

    # --- streamed: the first line is read before the command prints its last -------------
    flag = "/tmp/go-on"
    c1 = conn()
    c1.request("POST", f"/contexts/{CTX}/commands", json.dumps({
        "cmd": f"echo first; while [ ! -e {flag} ]; do sleep 0.1; done; echo last", "timeout": 120}),
        {"Authorization": "Bearer " + ALICE, "Content-Type": "application/json"})
    r = c1.getresponse()
    ok(r.status == 200 and r.getheader("Content-Type") == "application/x-ndjson",
       "a foreground command answers 200 application/x-ndjson")
    seen = []
    while not any(l.get("type") == "stdout" for l in seen):
        line = r.readline()
        if not line:
            break
        seen.append(json.loads(line))
    ok(stdout(seen) == "first\n", "its first line arrives while it still runs", seen)
    # It prints its last only once the flag exists, which this makes now.
    ok(exit_of(run(CTX, f"touch {flag}"))["exit_code"] == 0,
       "another command runs beside it (and lets it finish)")
    rest = [json.loads(l) for l in r.read().decode().splitlines() if l.strip()]
    c1.close()
    ok(stdout(rest) == "last\n" and exit_of(rest)["exit_code"] == 0,
       "then its last line and its exit", rest)

    # --- timeouts ------------------------------------------------------------------
    lines = run(CTX, "sleep 60; echo after", timeout=2)
    ex = exit_of(lines)
    ok(ex.get("exit_code") == 124 and ex.get("timed_out") is True and "timeout" in ex.get("error", ""),
       "past its timeout the command is killed: exit 124, timed_out", lines)
    ok(stdout(lines) == "", "it never got to its end", lines)
    # A timeout under a millisecond was 0 ms, which means none: the command
    # ran to its end (found checking the OpenAPI spec's timeout > 0).
    t0 = time.time()
    lines = run(CTX, "sleep 30; echo after", timeout=1e-7)
    ok(exit_of(lines).get("timed_out") is True and time.time() - t0 < 15,
       "a timeout of 1e-7 s is one: the command is killed, not left without a timeout", lines)
    status, _, data = post(f"/contexts/{CTX}/commands?cmd=echo%20hi&timeout=nan", None,
                           raw=b"")
    ok(status == 400, "?timeout=nan is refused (strtod takes it; it was cast to an int)",
       (status, data[:200]))

    # --- stdin streamed from the body ------------------------------------------------
    blob = hashlib.sha256(b"seed").digest() * (5 * 1024 * 1024 // 32)
    status, _, data = post(f"/contexts/{CTX}/commands?cmd=sha256sum", None,
                           raw=blob)
    lines = ndjson(data)
    ok(status == 200 and stdout(lines).split()[0] == hashlib.sha256(blob).hexdigest(),
       "5 MiB of stdin streamed from the body (over --max-body) reach sha256sum intact",
       (status, data[:300]))
    ok(exit_of(lines).get("exit_code") == 0, "and it exits 0")
    status, _, data = post(f"/contexts/{CTX}/commands?cmd=" + urllib.parse.quote("wc -c; pwd")
                           + "&cwd=/tmp&env=A%3D1", None, raw=b"12345",
                           accept="application/json")
    doc = json.loads(data)
    ok(status == 200 and doc["stdout"] == "5\n/tmp\n", "the query gives cwd; JSON mode too", doc)
    status, _, data = post(f"/contexts/{CTX}/commands?cmd=head%20-c%203", None,
                           raw=b"x" * (3 << 20))
    ok(status == 200 and stdout(ndjson(data)) == "xxx" and exit_of(ndjson(data))["exit_code"] == 0,
       "a command that stops reading early: the rest of the body is dropped, the answer comes",
       data[:300])

    # --- background ------------------------------------------------------------------
    status, _, data = post(f"/contexts/{CTX}/commands",
                           {"cmd": "echo started; touch /tmp/started; exec sleep 300",
                            "background": True})
    bg = json.loads(data)
    ok(status == 201 and bg["state"] in ("starting", "running") and bg["background"] is True,
       "a background command: 201 with its id, pid and state", bg)
    status, lst = js("GET", f"/contexts/{CTX}/commands")
    mine = [c for c in lst if c["id"] == bg["id"]]
    ok(status == 200 and mine and mine[0]["state"] == "running", "the list shows it running", lst)
    status, one = js("GET", f"/contexts/{CTX}/commands/{bg['id']}")
    ok(status == 200 and one["pid"] == bg["pid"] and "exit_code" not in one, "and so does its status",
       one)
    for _ in range(300):  # until it has printed (a TERM before would kill it first)
        if exit_of(run(CTX, "test -e /tmp/started"))["exit_code"] == 0:
            break
    status, _, _ = post(f"/contexts/{CTX}/commands/{bg['id']}/signal", {"signal": "TERM"})
    ok(status == 204, "POST .../signal TERM: 204")
    status, one = js("GET", f"/contexts/{CTX}/commands/{bg['id']}?wait=1")
    ok(status == 200 and one["state"] == "exited" and one["exit_code"] == 128 + 15,
       "?wait=1 answers at its end, with the exit code of TERM", one)
    status, _, data = d.request("GET", f"/contexts/{CTX}/commands/{bg['id']}/output", token=ALICE)
    lines = ndjson(data)
    ok(stdout(lines) == "started\n" and exit_of(lines)["exit_code"] == 143,
       "its output was kept for a later reader, then its exit", lines)

    status, _, data = post(f"/contexts/{CTX}/commands", {"cmd": "sleep 300", "background": True})
    k = json.loads(data)
    status, _, _ = d.request("DELETE", f"/contexts/{CTX}/commands/{k['id']}", token=ALICE)
    ok(status == 204, "DELETE kills a running command: 204")
    status, one = js("GET", f"/contexts/{CTX}/commands/{k['id']}?wait=1")
    ok(one["exit_code"] == 128 + 9, "it ended by KILL", one)
    status, again = js("DELETE", f"/contexts/{CTX}/commands/{k['id']}")
    ok(status == 409 and again["error"] == "conflict", "DELETE of an ended command: 409", again)

    # A cat fed through POST .../stdin while a reader reads it live.
    status, _, data = post(f"/contexts/{CTX}/commands",
                           {"cmd": "cat", "background": True, "stdin": True})
    cat = json.loads(data)
    ok(status == 201 and cat["stdin"] is True, "a background command with stdin open", cat)
    c2 = conn()
    c2.request("GET", f"/contexts/{CTX}/commands/{cat['id']}/output",
               headers={"Authorization": "Bearer " + ALICE})
    r2 = c2.getresponse()
    status, _, _ = post(f"/contexts/{CTX}/commands/{cat['id']}/stdin", None, raw=b"ping\n")
    ok(status == 204, "POST .../stdin: 204")
    got = []
    while stdout(got) != "ping\n":
        line = r2.readline()
        if not line:
            break
        got.append(json.loads(line))
    ok(stdout(got) == "ping\n", "the reader gets what cat echoed while cat still runs", got)
    status, _, _ = post(f"/contexts/{CTX}/commands/{cat['id']}/stdin?close=1", None,
                        raw=b"pong\n")
    tail = [json.loads(l) for l in r2.read().decode().splitlines() if l.strip()]
    c2.close()
    ok(status == 204 and stdout(tail) == "pong\n" and exit_of(tail)["exit_code"] == 0,
       "stdin closed (?close=1): cat prints the rest and exits 0", tail)
    status, err = js("POST", f"/contexts/{CTX}/commands/{cat['id']}/stdin")
    ok(status == 409, "stdin to an ended command: 409", err)
    status, _, data = post(f"/contexts/{CTX}/commands", {"cmd": "sleep 300", "background": True})
    nostdin = json.loads(data)
    status, _, data = post(f"/contexts/{CTX}/commands/{nostdin['id']}/stdin", None, raw=b"x")
    ok(status == 409 and b"stdin" in data, "stdin to a command started without it: 409", data)
    d.request("DELETE", f"/contexts/{CTX}/commands/{nostdin['id']}", token=ALICE)

    # --- commands and executions do not wait for each other ---------------------------
    status, _, data = post(f"/contexts/{OTHER}/commands", {"cmd": "sleep 300", "background": True})
    status, res = d.json("POST", "/execute", {"code": "6*7", "context_id": OTHER}, token=ALICE,
                         headers={"Accept": "application/json"})
    ok(status == 200 and res["results"][0]["text"] == "42",
       "an execution runs while a command runs in its context", res)
    holder = {}
    code = ("import os, time\nopen('/tmp/exec-busy', 'w').close()\n"
            "while not os.path.exists('/tmp/exec-go'):\n    time.sleep(0.1)\nprint('released')")

    def busy():
        holder["r"] = d.json("POST", "/execute", {"code": code, "context_id": OTHER,
                                                  "timeout": 120},
                             token=ALICE, headers={"Accept": "application/json"})
    t = threading.Thread(target=busy)
    t.start()
    # The command waits for the execution to run, the execution for the
    # file that only this command makes.
    ok(exit_of(run(OTHER, "while [ ! -e /tmp/exec-busy ]; do sleep 0.1; done; touch /tmp/exec-go",
                   timeout=120))["exit_code"] == 0,
       "a command runs while the kernel is busy with an execution")
    t.join(120)
    ok(holder.get("r", (0, {}))[1].get("stdout") == "released\n",
       "and that execution then ends, released by it", holder.get("r"))
    sleeper = json.loads(data)["id"]
    d.request("DELETE", f"/contexts/{OTHER}/commands/{sleeper}", token=ALICE)
    js("GET", f"/contexts/{OTHER}/commands/{sleeper}?wait=1")  # a context with one runs on

    # --- a paused context is resumed for a command --------------------------------------
    status, p = js("POST", f"/contexts/{OTHER}/pause")
    if status == 200 and p["state"] == "paused":
        lines = run(OTHER, "echo awake")
        ok(stdout(lines) == "awake\n", "a command on a paused context resumes it", lines)
        status, c = js("GET", f"/contexts/{OTHER}")
        ok(c["state"] == "running", "the context runs again", c)
    else:
        ok(False, "the context pauses (for the resume check)", (status, p))

    # --- another tenant: 404 as for unknown ids ---------------------------------------
    status, _, data = post(f"/contexts/{CTX}/commands", {"cmd": "sleep 300", "background": True})
    secret = json.loads(data)
    for method, suffix, body in [("GET", "/commands", None),
                                 ("POST", "/commands", {"cmd": "id"}),
                                 ("GET", f"/commands/{secret['id']}", None),
                                 ("GET", f"/commands/{secret['id']}/output", None),
                                 ("POST", f"/commands/{secret['id']}/signal", {"signal": "KILL"}),
                                 ("DELETE", f"/commands/{secret['id']}", None)]:
        s_bob, b_bob = js(method, f"/contexts/{CTX}{suffix}", body, key=BOB)
        ok(s_bob == 404 and b_bob["message"] == f"no context '{CTX}'",
           f"bob: {method} /contexts/ALICES{suffix} is 404, no context", (s_bob, b_bob))
    s_bob, _, b_bob = d.request("POST", f"/contexts/{CTX}/commands?cmd=id", token=BOB,
                                raw=b"data")
    ok(s_bob == 404, "bob: a stdin-streamed start in alice's context is 404", b_bob)
    s_bob, _, b_bob = d.request("POST", f"/contexts/{CTX}/commands/{secret['id']}/stdin",
                                token=BOB, raw=b"data")
    ok(s_bob == 404, "bob: stdin to alice's command is 404", b_bob)
    status, one = js("GET", f"/contexts/{CTX}/commands/{secret['id']}")
    ok(status == 200 and one["state"] == "running", "alice's command is untouched by bob's tries",
       one)
    status, bc = js("POST", "/contexts", {}, key=BOB)
    status, nope = js("GET", f"/contexts/{bc['id']}/commands/{secret['id']}", key=BOB)
    ok(status == 404 and nope["message"] == f"no command '{secret['id']}'",
       "alice's command id in bob's context: no such command", nope)
    d.request("DELETE", f"/contexts/{CTX}/commands/{secret['id']}", token=ALICE)

    # --- bad input ---------------------------------------------------------------------
    for body, why in [({}, "neither cmd nor argv"),
                      ({"cmd": "id", "argv": ["id"]}, "both cmd and argv"),
                      ({"cmd": 5}, "cmd not a string"),
                      ({"argv": ["id", 5]}, "argv not strings"),
                      ({"argv": []}, "argv empty"),
                      ({"cmd": ""}, "cmd empty"),
                      ({"cmd": "id", "envs": {"1BAD": "x"}}, "a bad env name"),
                      ({"cmd": "id", "envs": {"A": 1}}, "an env value not a string"),
                      ({"cmd": "id", "timeout": -1}, "a negative timeout"),
                      ({"cmd": "id", "timeout": 100000}, "a timeout over --max-timeout"),
                      ({"cmd": "id", "background": "yes"}, "background not a boolean")]:
        status, err = js("POST", f"/contexts/{CTX}/commands", body)
        ok(status == 400 and err["error"] == "invalid" and err["message"],
           f"400 for {why}", (status, err))
    status, _, data = post(f"/contexts/{CTX}/commands", None, raw=b"{not json")
    ok(status == 400 and b"malformed JSON" in data, "400 for malformed JSON", data)
    status, _, data = post(f"/contexts/{CTX}/commands?cmd=cat&timeout=abc", None, raw=b"x")
    ok(status == 400 and b"timeout" in data, "400 for a bad timeout in the query", data)
    status, _, data = post(f"/contexts/{CTX}/commands?cmd=cat&env=NOEQUALS", None, raw=b"x")
    ok(status == 400, "400 for an env without '=' in the query", data)
    status, _, data = post(f"/contexts/{CTX}/commands", {"cmd": "sleep 300", "background": True})
    victim = json.loads(data)
    status, err = js("POST", f"/contexts/{CTX}/commands/{victim['id']}/signal", {"signal": "USR1"})
    ok(status == 400 and "INT, TERM, HUP or KILL" in err["message"], "400 for another signal", err)
    status, err = js("POST", f"/contexts/{CTX}/commands/{victim['id']}/signal", {})
    ok(status == 400, "400 for no signal", err)
    d.request("DELETE", f"/contexts/{CTX}/commands/{victim['id']}", token=ALICE)
    for bad in ["999", "abc", "0", "01"]:
        status, err = js("GET", f"/contexts/{CTX}/commands/{bad}")
        ok(status == 404 and err["message"] == f"no command '{bad}'",
           f"unknown command id {bad!r}: 404", err)

    # --- afterwards ---------------------------------------------------------------------
    ok(exit_of(run(CTX, "true"))["exit_code"] == 0, "the context still runs commands")
    status, res = d.json("POST", "/execute", {"code": "1+1", "context_id": CTX}, token=ALICE,
                         headers={"Accept": "application/json"})
    ok(status == 200 and res["results"][0]["text"] == "2", "and executions", res)
    status, res = d.json("POST", "/execute", {"command": "echo old", "context_id": CTX},
                         token=ALICE)
    ok(status == 200 and res["stdout"] == "old\n" and res["exit_code"] == 0,
       "POST /execute's command keeps its JSON answer", res)
    status, h = d.json("GET", "/health", token=None)
    ok(status == 200 and h["status"] == "ok", "the daemon is healthy")
finally:
    try:
        d.stop()
    except RuntimeError as e:
        ok(False, "no sanitizer report", e)
done()
