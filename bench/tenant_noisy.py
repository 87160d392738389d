#!/usr/bin/python3
"""A noisy tenant at every limit at once, and what a quiet one still gets.

Two tenants of one keys file: mallory, with quotas (--max-contexts,
--max-live, --max-queued), and alice, without.  alice measures, over one
keep-alive connection each:

  list     GET /contexts, --lists times back to back (p50, p95)
  create   POST /contexts, then `1+1` in it (JSON mode), then DELETE:
           the time to a first answer from a new context, --creates times
  jupyter  POST /api/sessions on a context of hers (then DELETE), --creates times
  mcp      an MCP initialize (then DELETE), --creates times

in three windows: idle (mallory has nothing yet), noisy, and idle again
after mallory's load stopped (drift shows as a difference between the two
idle windows).  In the noisy window mallory is at every limit at once:

  - max-contexts reached (her --max-contexts contexts; max-live of them
    live, the others paused by max-live), a thread retrying POST /contexts
    (429 max-contexts) and executions in her paused contexts (429 max-live);
  - max-live kernels busy, each running `while True: pass`;
  - max-queued executions waiting behind them (the rest 429 max-queued),
    retried as fast as they are refused;
  - --jupyter-sessions Jupyter sessions on her contexts and --mcp-sessions
    MCP sessions, opened before the window and more opened during it;
  - --loops threads looping GET /api/sessions and GET /contexts as her.

mallory runs in a process of her own (her threads would otherwise hold the
interpreter lock alice's timings wait on).  The daemon runs with
--pool-size 0 (every create starts a sandbox) and --pause-after 0; the
table also gives sandgate's CPU time per window, as a share of one core.  Prints a Markdown table: alice's medians per window, the
ratio noisy / idle (idle: the first window), what mallory got (requests
answered, refusals by quota, sessions open), and whether the target holds
(GET /contexts p50 within 2x of idle; alice's creates all succeed).

usage: bench/tenant_noisy.py [--max-contexts N] [--max-live N] [--max-queued N]
                            [--jupyter-sessions N] [--mcp-sessions N] [--loops N]
                            [--lists N] [--interval MS] [--creates N] [--noise LIST]
                            [--max-rps N] [--daemon-rps N]
  SG_BUILDDIR selects the build (default ./build); run as root (runsc).
"""
import argparse
import http.client
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import types
import urllib.parse
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
import sgd  # noqa: E402

BUSY_CODE = "while True: pass"
MCP_ACCEPT = "application/json, text/event-stream"


class Client:
    """One keep-alive connection with a tenant's key."""

    def __init__(self, url, key, timeout=300):
        u = urllib.parse.urlparse(url)
        self.key, self.host, self.port, self.timeout = key, u.hostname, u.port, timeout
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        """(status, headers, body bytes); reconnects once after a broken connection."""
        h = {"Authorization": "Bearer " + self.key}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        h.update(headers or {})
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body, h)
                r = self.conn.getresponse()
                return r.status, r.headers, r.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, method, path, body=None, headers=None):
        st, _, data = self.request(method, path, body, headers)
        try:
            return st, json.loads(data) if data.strip() else None
        except ValueError:
            return st, data

    def close(self):
        try:
            if self.conn.sock:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def mcp_open(c):
    st, h, _ = c.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                          "params": {"protocolVersion": "2025-11-25",
                                                     "capabilities": {},
                                                     "clientInfo": {"name": "noisy",
                                                                    "version": "0"}}},
                         {"Accept": MCP_ACCEPT})
    sid = h.get("Mcp-Session-Id")
    if st == 200 and sid:
        c.request("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
                  {"Accept": MCP_ACCEPT, "Mcp-Session-Id": sid})
    return st, sid


class Mallory:
    """The noisy tenant: at every limit at once, until stop()."""

    def __init__(self, d, key, a):
        self.d, self.key, self.a = d, key, a
        self.stopping = threading.Event()
        self.threads, self.held = [], []  # connections held open by running requests
        self.answers = Counter()  # (what, status or quota) -> count
        self.lock = threading.Lock()
        c = Client(d.url, key)
        self.ctx = []
        for _ in range(a.max_contexts):
            st, body = c.json("POST", "/contexts", {})
            if st != 201:
                raise RuntimeError(f"mallory's context: {st} {body}")
            self.ctx.append(body["id"])
            st, _ = c.json("POST", "/execute", {"code": "1+1", "context_id": body["id"]},
                           {"Accept": "application/json"})
        deadline = time.time() + 120
        while time.time() < deadline:  # max-live pauses the least recently used
            st, lst = c.json("GET", "/contexts")
            live = [x["id"] for x in lst if x["state"] in ("running", "starting")]
            if len(live) <= a.max_live:
                break
            time.sleep(0.5)
        self.live = live[:a.max_live]
        self.paused = [x for x in self.ctx if x not in self.live]
        self.jupyter = []
        for i in range(a.jupyter_sessions):
            self.jupyter_session(c, i)
        self.mcp = []
        for _ in range(a.mcp_sessions):
            st, sid = mcp_open(c)
            if sid:
                self.mcp.append(sid)
        c.close()

    def count(self, what, st, body=b""):
        key = st
        if st == 429:
            try:
                key = f"429 {json.loads(body).get('quota')}"
            except (ValueError, AttributeError):
                key = "429"
        with self.lock:
            self.answers[(what, key)] += 1

    def jupyter_session(self, c, i):
        """A Jupyter session on one of her contexts (a paused one's is refused
        by max-live while her live ones are busy): (status, body)."""
        st, _, data = c.request("POST", "/api/sessions",
                                {"path": f"m{i}.ipynb", "type": "notebook",
                                 "kernel": {"id": self.ctx[i % len(self.ctx)]}})
        if st == 201:
            self.jupyter.append(json.loads(data)["id"])
        return st, data

    def hold(self, ctx, code):
        """A request that stays open (a busy loop, or an execution queued
        behind one): its status once it was accepted or refused."""
        c = Client(self.d.url, self.key, timeout=3600)
        self.held.append(c)
        ready = threading.Event()
        result = {}

        def run():
            body = json.dumps({"code": code, "context_id": ctx})
            try:
                c.conn.request("POST", "/execute", body,
                               {"Authorization": "Bearer " + self.key,
                                "Content-Type": "application/json"})
                r = c.conn.getresponse()  # streams: the status comes at once
                result["status"] = r.status
                data = r.read(256) if r.status != 200 else b""
                self.count("execute (held)", r.status, data)
                ready.set()
                r.read()
            except (OSError, AttributeError, http.client.HTTPException):
                ready.set()  # AttributeError: stop() closed it under the read

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)
        ready.wait(60)
        return result.get("status")

    def loop(self, what, fn):
        def run():
            c = Client(self.d.url, self.key, timeout=60)
            i = 0
            while not self.stopping.is_set():
                try:
                    st, body = fn(c, i)
                except (OSError, http.client.HTTPException):
                    st, body = "error", b""
                self.count(what, st, body)
                i += 1
            c.close()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def start(self):
        """Every limit at once (those --noise names)."""
        self.queued = 0
        if "busy" not in self.a.noise:
            return self.start_rest()
        for x in self.live:
            self.hold(x, BUSY_CODE)
        time.sleep(1)
        # Queued behind the loops, round robin, until max-queued refuses.
        n = 0
        while n < 4 * self.a.max_queued:
            if self.hold(self.live[n % len(self.live)], "1+1") == 429:
                break
            n += 1
        self.queued = n + len(self.live)
        self.start_rest()

    def start_rest(self):
        if "refused" not in self.a.noise:
            return self.start_sessions()
        self.loop("POST /contexts", lambda c, i: c.request("POST", "/contexts", {})[::2])
        self.loop("execute, live", lambda c, i: c.request(
            "POST", "/execute", {"code": "1", "context_id": self.live[i % len(self.live)]},
            {"Accept": "application/json"})[::2])
        if self.paused:
            self.loop("execute, paused", lambda c, i: c.request(
                "POST", "/execute", {"code": "1", "context_id": self.paused[i % len(self.paused)]},
                {"Accept": "application/json"})[::2])
        self.start_sessions()

    def start_sessions(self):
        if "sessions" in self.a.noise:
            self.loop("POST /api/sessions", lambda c, i: self.jupyter_session(c, 10000 + i))
            self.loop("MCP initialize", lambda c, i: (self.mcp_more(c), b""))
        if "lists" in self.a.noise:
            for _ in range(self.a.loops):
                self.loop("GET /api/sessions", lambda c, i: c.request("GET", "/api/sessions")[::2])
                self.loop("GET /contexts", lambda c, i: c.request("GET", "/contexts")[::2])

    def mcp_more(self, c):
        st, sid = mcp_open(c)
        if sid:
            self.mcp.append(sid)
        return st

    def stop(self):
        self.stopping.set()
        c = Client(self.d.url, self.key)
        for x in self.live:
            c.request("POST", f"/api/kernels/{x}/interrupt")
        c.close()
        for h in self.held:
            h.close()
        for t in self.threads:
            t.join(timeout=60)


def mallory_process(pipe, url, key, a):
    """mallory in a process of her own, so that her threads never hold the
    interpreter lock alice's timings wait for: set up, start, then answer
    "mark" with what she got so far and "stop" by stopping."""
    t0 = time.time()
    m = Mallory(types.SimpleNamespace(url=url), key, a)
    setup_s = time.time() - t0
    m.start()
    pipe.send((setup_s, len(m.live), len(m.paused), m.queued))
    while True:
        cmd = pipe.recv()
        if cmd == "mark":
            with m.lock:
                pipe.send((Counter(m.answers), len(m.jupyter), len(m.mcp)))
        else:
            m.stop()
            pipe.send("stopped")
            return


def cpu_seconds(pid):
    """The CPU time (user + system) process pid has used, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alice_window(d, key, ctx, a):
    """alice's numbers: list latencies (ms), creates (s), Jupyter and MCP (ms)."""
    c = Client(d.url, key)
    for _ in range(10):
        c.request("GET", "/contexts")
    cpu0, t0 = cpu_seconds(d.proc.pid), time.time()
    lists = []
    for _ in range(a.lists):
        time.sleep(a.interval / 1000)
        t = time.perf_counter()
        st, _, _ = c.request("GET", "/contexts")
        lists.append((time.perf_counter() - t) * 1000)
        if st != 200:
            raise RuntimeError(f"alice's GET /contexts: {st}")
    creates, failures = [], []
    for _ in range(a.creates):
        t = time.perf_counter()
        st, body = c.json("POST", "/contexts", {})
        if st != 201:
            failures.append(f"create {st} {body}")
            continue
        st2, r = c.json("POST", "/execute", {"code": "1+1", "context_id": body["id"]},
                        {"Accept": "application/json"})
        took = time.perf_counter() - t
        if st2 == 200 and r.get("results") and r["results"][0].get("text") == "2":
            creates.append(took)
        else:
            failures.append(f"1+1 {st2} {str(r)[:200]}")
        c.request("DELETE", f"/contexts/{body['id']}")
    jupyter, mcp = [], []
    for i in range(a.creates):
        # Kept: deleting a Jupyter session shuts its kernel down (jupyter_server's way).
        t = time.perf_counter()
        st, body = c.json("POST", "/api/sessions",
                          {"path": f"a{i}.ipynb", "type": "notebook", "kernel": {"id": ctx}})
        if st == 201:
            jupyter.append((time.perf_counter() - t) * 1000)
        else:
            failures.append(f"jupyter session {st} {body}")
        t = time.perf_counter()
        st, sid = mcp_open(c)
        if sid:
            mcp.append((time.perf_counter() - t) * 1000)
            c.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        else:
            failures.append(f"mcp {st}")
    c.close()
    cpu = (cpu_seconds(d.proc.pid) - cpu0) / (time.time() - t0)
    return {"lists": lists, "creates": creates, "jupyter": jupyter, "mcp": mcp,
            "failures": failures, "load": os.getloadavg()[0], "cpu": cpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-contexts", type=int, default=6, help="mallory's max-contexts (6)")
    ap.add_argument("--max-live", type=int, default=3, help="mallory's max-live (3)")
    ap.add_argument("--max-queued", type=int, default=8, help="mallory's max-queued (8)")
    ap.add_argument("--jupyter-sessions", type=int, default=200,
                    help="Jupyter sessions mallory opens before the window (200)")
    ap.add_argument("--mcp-sessions", type=int, default=200,
                    help="MCP sessions mallory opens before the window (200)")
    ap.add_argument("--loops", type=int, default=4,
                    help="mallory's threads looping each of GET /api/sessions and GET /contexts")
    ap.add_argument("--lists", type=int, default=300, help="alice's GET /contexts per window")
    ap.add_argument("--interval", type=float, default=10,
                    help="ms between alice's GET /contexts (10: she is no flood herself)")
    ap.add_argument("--max-rps", type=int, default=0,
                    help="mallory's max-rps (0, the default: the server's --tenant-max-rps)")
    ap.add_argument("--daemon-rps", type=int, default=None,
                    help="the server's --tenant-max-rps (default: its own default, 200)")
    ap.add_argument("--creates", type=int, default=3,
                    help="alice's context creates (and Jupyter, MCP sessions) per window")
    ap.add_argument("--noise", default="busy,refused,sessions,lists",
                    help="what mallory does, comma-separated (all four by default): busy "
                    "(max-live busy kernels and max-queued executions behind them), refused "
                    "(retrying what her quotas refuse), sessions (opening Jupyter and MCP "
                    "sessions), lists (the list loops)")
    a = ap.parse_args()
    a.noise = set(a.noise.split(","))

    tmp = tempfile.mkdtemp(prefix="sg-noisy-bench-")
    os.chmod(tmp, 0o711)
    keys = os.path.join(tmp, "keys")
    rps = ["--max-rps", str(a.max_rps)] if a.max_rps else []
    key_m = sgd.add_key(keys, "mallory", "--max-contexts", str(a.max_contexts), "--max-live",
                        str(a.max_live), "--max-queued", str(a.max_queued), *rps)
    key_a = sgd.add_key(keys, "alice")
    daemon_rps = [] if a.daemon_rps is None else ["--tenant-max-rps", str(a.daemon_rps)]
    d = sgd.Daemon("--keys-file", keys, "--pool-size", "0", "--pause-after", "0", *daemon_rps,
                   start_timeout=60)
    windows = {}
    try:
        c = Client(d.url, key_a)
        st, ac = c.json("POST", "/contexts", {})
        if st != 201:
            raise RuntimeError(f"alice's context: {st} {ac}")
        c.json("POST", "/execute", {"code": "1+1", "context_id": ac["id"]},
               {"Accept": "application/json"})  # ready: her sessions do not wait for it
        c.close()
        windows["idle"] = alice_window(d, key_a, ac["id"], a)
        print("idle window done", file=sys.stderr)
        pipe, child_end = multiprocessing.Pipe()
        mp = multiprocessing.get_context("fork").Process(
            target=mallory_process, args=(child_end, d.url, key_m, a), daemon=True)
        mp.start()
        setup_s, m_live, m_paused, m_queued = pipe.recv()
        time.sleep(2)
        pipe.send("mark")
        before, _, _ = pipe.recv()
        w0 = time.time()
        windows["noisy"] = alice_window(d, key_a, ac["id"], a)
        noisy_s = time.time() - w0
        pipe.send("mark")
        during, m_jupyter, m_mcp = pipe.recv()
        during.subtract(before)
        print("noisy window done", file=sys.stderr)
        pipe.send("stop")
        pipe.recv()
        mp.join(timeout=60)
        time.sleep(2)
        windows["idle after"] = alice_window(d, key_a, ac["id"], a)
        print("idle-after window done", file=sys.stderr)
    finally:
        d.stop()

    idle = windows["idle"]

    def med(xs):
        return statistics.median(xs) if xs else float("nan")

    rows = [
        ("GET /contexts p50, ms", lambda w: percentile(w["lists"], 50)),
        ("GET /contexts p95, ms", lambda w: percentile(w["lists"], 95)),
        ("create a context + first `1+1`, s (median)", lambda w: med(w["creates"])),
        ("POST /api/sessions, ms (median)", lambda w: med(w["jupyter"])),
        ("MCP initialize, ms (median)", lambda w: med(w["mcp"])),
    ]
    print(f"Noisy tenant — {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, runsc; "
          f"mallory: max-contexts {a.max_contexts}, max-live {a.max_live}, max-queued "
          f"{a.max_queued}, {a.jupyter_sessions} Jupyter and {a.mcp_sessions} MCP sessions "
          f"opened first, {a.loops}+{a.loops} list loops; max-rps "
          f"{a.max_rps or 'the server' + chr(39) + 's'}, server --tenant-max-rps "
          f"{'default (200)' if a.daemon_rps is None else a.daemon_rps}; "
          f"noise: {','.join(sorted(a.noise))}; "
          f"alice: {a.lists} GET /contexts {a.interval:g} ms apart, "
          f"{a.creates} creates per window\n")
    print("| alice's | idle | noisy | idle after | noisy / idle |")
    print("|---|---|---|---|---|")
    for name, f in rows:
        vals = [f(windows[w]) for w in ("idle", "noisy", "idle after")]
        print(f"| {name} | {vals[0]:.2f} | {vals[1]:.2f} | {vals[2]:.2f} | "
              f"{vals[1] / vals[0]:.2f}x |")
    print(f"| load average | {idle['load']:.1f} | {windows['noisy']['load']:.1f} | "
          f"{windows['idle after']['load']:.1f} | |")
    print(f"| sandgate's CPU, share of a core | {idle['cpu']:.2f} | {windows['noisy']['cpu']:.2f} | "
          f"{windows['idle after']['cpu']:.2f} | |")
    print()
    print(f"mallory during the noisy window ({noisy_s:.0f} s; her setup took {setup_s:.0f} s): "
          f"{m_live} busy kernels, {m_paused} paused, {m_queued} executions "
          f"running or queued; {m_jupyter} Jupyter sessions and {m_mcp} MCP sessions open "
          "at its end\n")
    print("| mallory's request | answer | count | per second |")
    print("|---|---|---|---|")
    for (what, ans), n in sorted(during.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if n > 0:
            print(f"| {what} | {ans} | {n} | {n / noisy_s:.1f} |")
    print()
    p50 = percentile(windows["noisy"]["lists"], 50) / percentile(idle["lists"], 50)
    fails = [f for w in windows.values() for f in w["failures"]]
    print(f"- target GET /contexts p50 within 2x of idle: {'yes' if p50 <= 2 else 'NO'} "
          f"({p50:.2f}x)")
    print(f"- alice's creates, Jupyter and MCP sessions all succeeded: "
          f"{'yes' if not fails else 'NO: ' + '; '.join(fails[:5])}")


if __name__ == "__main__":
    main()
