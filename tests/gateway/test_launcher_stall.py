"""A stopped or silent launcher never stalls the daemon.

sandgate's privileged launcher (kernelmgr/launcher.c) makes workspaces and
starts sandboxes.  These tests stop it with SIGSTOP and check that what does
not need it carries on: a running kernel's NDJSON stream keeps flowing and
/health answers; a POST /contexts that needs it waits without blocking
anything and ends with the context created once the launcher runs again — or,
when the launcher stays silent past --launcher-timeout, with a clear 504,
after which the other sessions still work and the launcher, once back, serves
new contexts again.  Needs root (the launcher exists only then) and runsc."""
import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse

from sgd import Daemon, TOKEN, stdout
from tap import ok, diag, done

LAUNCHER_TIMEOUT = 4


def launcher_pid(d):
    out = subprocess.run(["pgrep", "-P", str(d.proc.pid), "-x", "sandgate-priv"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def timed_json(d, method, path, body=None):
    t0 = time.monotonic()
    st, data = d.json(method, path, body)
    return st, data, t0, time.monotonic()


d = Daemon("--pool-size", "0", "--launcher-timeout", str(LAUNCHER_TIMEOUT))
lp = None
try:
    lp = launcher_pid(d)
    ok(lp is not None, "the daemon runs a launcher (sandgate-priv)", lp)
    st, ctx = d.json("POST", "/contexts", {})
    ok(st == 201, "a context is created", (st, ctx))
    lines = d.execute("6*7", context_id=ctx["id"])
    ok([l for l in lines if l["type"] == "result"][0]["text"] == "42", "and runs code")

    # --- stopped for 2.5 s: nothing that does not need it waits ------------------
    u = urllib.parse.urlparse(d.url)
    arrivals = []

    def stream():
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        c.request("POST", "/execute", json.dumps({
            "code": "import time\nfor i in range(120):\n    print(i, flush=True)\n"
                    "    time.sleep(0.05)",
            "context_id": ctx["id"]}),
            {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
        r = c.getresponse()
        while True:
            line = r.readline()
            if not line:
                break
            arrivals.append((time.monotonic(), json.loads(line)))
        c.close()

    streamer = threading.Thread(target=stream)
    streamer.start()
    deadline = time.monotonic() + 60
    while not any(l["type"] == "stdout" for _, l in arrivals) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(lp, signal.SIGSTOP)
    t_stop = time.monotonic()
    created = {}
    creator = threading.Thread(
        target=lambda: created.update(zip(("status", "body", "t0", "t1"),
                                          timed_json(d, "POST", "/contexts", {}))))
    creator.start()
    time.sleep(0.3)
    st, health, h0, h1 = timed_json(d, "GET", "/health")
    time.sleep(max(0.0, 2.5 - (time.monotonic() - t_stop)))
    os.kill(lp, signal.SIGCONT)
    t_cont = time.monotonic()
    creator.join(60)
    streamer.join(120)

    during = [t for t, l in arrivals if l["type"] == "stdout" and t_stop - 0.2 <= t <= t_cont + 0.2]
    gaps = [b - a for a, b in zip(during, during[1:])]
    biggest = max(gaps) if gaps else 99
    diag(f"stdout lines while the launcher was stopped: {len(during)}, "
         f"largest gap {biggest * 1000:.0f} ms")
    ok(len(during) >= 20 and biggest < 1.0,
       "a running kernel's stream keeps flowing while the launcher is stopped "
       f"(largest gap {biggest * 1000:.0f} ms)")
    ok(stdout([l for _, l in arrivals]) == "".join(f"{i}\n" for i in range(120)),
       "the stream is complete")
    ok(st == 200 and h1 - h0 < 1.0, f"/health answers during the stop ({(h1 - h0) * 1000:.0f} ms)",
       health)
    ok(created.get("status") == 201 and created["t1"] >= t_cont - 0.05,
       "a POST /contexts made during the stop ends with the context created after SIGCONT "
       f"({(created.get('t1', 0) - t_cont) * 1000:.0f} ms after it)", created)
    if created.get("status") == 201:
        lines = d.execute("print('new')", context_id=created["body"]["id"])
        ok(stdout(lines) == "new\n", "that context runs code", lines)
        d.json("DELETE", "/contexts/" + created["body"]["id"])

    # --- silent: the request that needs it fails after the timeout -------------------
    os.kill(lp, signal.SIGSTOP)
    st, body, t0, t1 = timed_json(d, "POST", "/contexts", {})
    ok(st == 504 and "launcher" in body.get("message", ""),
       f"a launcher that does not answer: POST /contexts fails with 504 after "
       f"{t1 - t0:.1f} s (--launcher-timeout {LAUNCHER_TIMEOUT})", (st, body))
    ok(LAUNCHER_TIMEOUT - 0.5 <= t1 - t0 < LAUNCHER_TIMEOUT + 5, "after about the timeout",
       t1 - t0)
    lines = d.execute("print('still here')", context_id=ctx["id"])
    ok(stdout(lines) == "still here\n", "the other session keeps working meanwhile", lines)
    st, h = d.json("GET", "/health")
    ok(st == 200, "and /health answers")
    st, listed = d.json("GET", "/contexts")
    ok(st == 200 and [c["id"] for c in listed] == [ctx["id"]],
       "the context that could not be made is not listed", listed)
    os.kill(lp, signal.SIGCONT)
    st, again = d.json("POST", "/contexts", {})
    ok(st == 201, "once the launcher runs again, contexts are created again", (st, again))
    if st == 201:
        lines = d.execute("print('back')", context_id=again["id"])
        ok(stdout(lines) == "back\n", "and run code", lines)
finally:
    if lp:
        try:
            os.kill(lp, signal.SIGCONT)
        except ProcessLookupError:
            pass
    d.stop()
done()
