#!/usr/bin/python3
"""Fair share between tenants: one tenant's busy loops against another's
round trips, with and without a cgroup per tenant.

Two tenants of one keys file: A holds --busy sessions (4), B one.  B runs
`1+1` sequentially over one keep-alive connection, --runs executes (200)
per window, and the round trip of each is timed.  Windows:

  idle   A's sessions exist but run nothing
  busy   each of A's sessions runs `while True: pass` (started before the
         window, interrupted after it)

on two daemons at once, the same settings but --tenant-cgroups: yes (each
tenant's sandboxes in /sandgate/t-TENANT, tenants of equal CPU weight) and
no (every sandbox a cgroup of its own under /sandgate, so A's four weigh
four times B's one).  The windows alternate round by round (--rounds, 3),
so that a drifting machine biases neither.  During each window the CPU that
A's and B's sandboxes used (cpuacct.usage of their cgroups) is read, to
show that A saturated the machine.  Each round ends with a share window
(--share-seconds, 10): B runs `while True: pass` too, beside A's four, and
the CPU each tenant got is read — the scheduler's split itself, which
latency shows only through the noise of everything else.

The daemons run with --cpus 2 (--cpus-per-sandbox): on this 2-core VM no
sandbox is held back by its CFS quota, so what decides B's latency is the
scheduler's weights alone, the thing compared.  (A's four single-threaded
loops ask for four cores either way: with --cpus 1 they would saturate two
cores too.)

usage: bench/fairshare.py [--runs N] [--busy N] [--rounds N] [--cpus N] [--share-seconds S]
  SG_BUILDDIR selects the build (default ./build); run as root (runsc).
Prints a Markdown table and the settings.
"""
import argparse
import glob
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
import sgd  # noqa: E402

BUSY_CODE = "while True: pass"


class Client:
    """One keep-alive connection with a tenant's key."""

    def __init__(self, url, key, timeout=120):
        u = urllib.parse.urlparse(url)
        self.key = key
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)

    def execute(self, ctx, code, timeout=None):
        h = {"Authorization": "Bearer " + self.key, "Content-Type": "application/json",
             "Accept": "application/json"}
        body = {"code": code, "context_id": ctx}
        if timeout:
            body["timeout"] = timeout
        self.conn.request("POST", "/execute", json.dumps(body), h)
        r = self.conn.getresponse()
        return r.status, r.read()


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cpuacct_ns(ctx):
    """CPU the context's running sandbox has used (its cgroup's cpuacct.usage)."""
    for pid in sgd.sandbox_pids(ctx):
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                for line in f:
                    _, names, path = line.rstrip("\n").split(":", 2)
                    if "cpuacct" in names.split(","):
                        with open(f"/sys/fs/cgroup/cpuacct{path}/cpuacct.usage") as u:
                            return int(u.read())
        except (OSError, ValueError):
            pass
    return 0


def cgroup_of(ctx):
    for pid in sgd.sandbox_pids(ctx):
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if "cpu" in names.split(","):
                    return path
    return "?"


def foreign_sandboxes(ours):
    """runsc sandboxes on the machine that are not this benchmark's (other
    tests sharing the VM): they compete for the same CPUs."""
    n = 0
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = open(p, "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"runsc-sandbox") and not any(
                o.encode() in a for a in argv for o in ours):
            n += 1
    return n


class Setup:
    """A daemon with tenants A (a.busy sessions) and B (one)."""

    def __init__(self, a, keys, key_a, key_b, tenant_cgroups):
        self.name = "per-tenant cgroups" if tenant_cgroups else "no tenant cgroups"
        self.d = sgd.Daemon("--keys-file", keys, "--pool-size", "0", "--pause-after", "0",
                            "--idle-timeout", "0", "--cpus", str(a.cpus), "--exec-timeout", "0",
                            "--tenant-cgroups", "yes" if tenant_cgroups else "no")
        self.key_a, self.key_b = key_a, key_b
        self.a_ctx = [self.context(key_a) for _ in range(a.busy)]
        self.b_ctx = self.context(key_b)

    def context(self, key):
        st, c = self.d.json("POST", "/contexts", {}, token=key)
        if st not in (200, 201):
            raise RuntimeError(f"context: {st} {c}")
        st, _, body = self.d.request("POST", "/execute", {"code": "1+1", "context_id": c["id"]},
                                     token=key, headers={"Accept": "application/json"})
        if st != 200:
            raise RuntimeError(f"execute: {st} {body!r}")
        return c["id"]

    def ids(self):
        return self.a_ctx + [self.b_ctx]

    def start_busy(self, with_b=False):
        """A's loops (and B's, with_b), each on its own connection; returns
        what stop_busy needs."""
        ctxs = self.a_ctx + ([self.b_ctx] if with_b else [])
        clients = [Client(self.d.url, self.key_b if x == self.b_ctx else self.key_a, timeout=3600)
                   for x in ctxs]
        threads = []
        for c, ctx in zip(clients, ctxs):
            def run(c=c, ctx=ctx):
                try:
                    c.execute(ctx, BUSY_CODE, timeout=3600)
                except (OSError, http.client.HTTPException):
                    pass  # its connection closed: the loop is interrupted
            t = threading.Thread(target=run, daemon=True)
            t.start()
            threads.append(t)
        # Until every loop runs: A's sandboxes take CPU.
        before = [cpuacct_ns(x) for x in ctxs]
        deadline = time.time() + 30
        while time.time() < deadline:
            time.sleep(0.5)
            now = [cpuacct_ns(x) for x in ctxs]
            if all(n - b > 0.1e9 for n, b in zip(now, before)):
                break
            before = now
        return clients, threads, ctxs

    def stop_busy(self, busy):
        clients, threads, ctxs = busy
        for ctx in ctxs:  # the Jupyter API's interrupt (a context is a kernel)
            key = self.key_b if ctx == self.b_ctx else self.key_a
            self.d.request("POST", f"/api/kernels/{ctx}/interrupt", token=key)
        for c in clients:
            try:
                c.conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.conn.close()
        for t in threads:
            t.join(timeout=30)
        # Until A's sandboxes are quiet again (the disconnect interrupted them).
        before = sum(cpuacct_ns(x) for x in ctxs)
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.5)
            now = sum(cpuacct_ns(x) for x in ctxs)
            if now - before < 0.05e9:
                return
            before = now
        raise RuntimeError("A's sessions still use CPU after their loops were interrupted")

    def window(self, runs):
        """B's round trips (ms), and the cores A's and B's sandboxes used meanwhile."""
        c = Client(self.d.url, self.key_b)
        for _ in range(10):  # warm: the connection and the kernel
            c.execute(self.b_ctx, "1+1")
        a0 = sum(cpuacct_ns(x) for x in self.a_ctx)
        b0 = cpuacct_ns(self.b_ctx)
        w0 = time.perf_counter()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            st, body = c.execute(self.b_ctx, "1+1")
            times.append((time.perf_counter() - t) * 1000)
            if st != 200 or b'"2"' not in body:
                raise RuntimeError(f"execute: {st} {body[:200]!r}")
        wall = time.perf_counter() - w0
        a1 = sum(cpuacct_ns(x) for x in self.a_ctx)
        b1 = cpuacct_ns(self.b_ctx)
        c.conn.close()
        return times, (a1 - a0) / 1e9 / wall, (b1 - b0) / 1e9 / wall, os.getloadavg()[0]

    def share(self, seconds):
        """With A's loops and one of B's running: the cores each tenant got."""
        busy = self.start_busy(with_b=True)
        try:
            a0, b0 = sum(cpuacct_ns(x) for x in self.a_ctx), cpuacct_ns(self.b_ctx)
            w0 = time.perf_counter()
            time.sleep(seconds)
            wall = time.perf_counter() - w0
            a1, b1 = sum(cpuacct_ns(x) for x in self.a_ctx), cpuacct_ns(self.b_ctx)
        finally:
            self.stop_busy(busy)
        return (a1 - a0) / 1e9 / wall, (b1 - b0) / 1e9 / wall

    def stop(self):
        self.d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200, help="B's executes per window")
    ap.add_argument("--busy", type=int, default=4, help="A's busy sessions")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the windows")
    ap.add_argument("--cpus", default="2", help="the daemons' --cpus (per sandbox)")
    ap.add_argument("--share-seconds", type=float, default=10,
                    help="the share window: B runs a loop too, for this long")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="sg-fairshare-bench-")
    os.chmod(tmp, 0o711)
    keys = os.path.join(tmp, "keys")

    def add(name):
        r = subprocess.run([sgd.SANDGATE, "keys", "add", name, "--keys-file", keys],
                           capture_output=True, text=True, check=True)
        return r.stdout.strip().splitlines()[-1]

    key_a, key_b = add("tenant-a"), add("tenant-b")
    setups = []
    try:
        setups = [Setup(a, keys, key_a, key_b, True), Setup(a, keys, key_a, key_b, False)]
        ours = [x for s in setups for x in s.ids()]
        places = {s.name: (cgroup_of(s.a_ctx[0]), cgroup_of(s.b_ctx)) for s in setups}
        rows = {}  # (setup, idle|busy) -> [window results]
        foreign = []
        for r in range(a.rounds):
            order = setups if r % 2 == 0 else setups[::-1]
            for s in order:
                foreign.append(foreign_sandboxes(ours))
                rows.setdefault((s.name, "idle"), []).append(s.window(a.runs))
                busy = s.start_busy()
                try:
                    rows.setdefault((s.name, "busy"), []).append(s.window(a.runs))
                finally:
                    s.stop_busy(busy)
                rows.setdefault((s.name, "share"), []).append(s.share(a.share_seconds))
                print(f"round {r + 1}/{a.rounds}: {s.name} done", file=sys.stderr)
    finally:
        for s in setups:
            s.stop()

    print(f"Fair share — {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, runsc "
          f"(--platform ptrace), --cpus {a.cpus} per sandbox; tenant A: {a.busy} sessions, "
          f"`{BUSY_CODE}` in each when busy; tenant B: `1+1` sequentially over one keep-alive "
          f"connection, {a.runs} executes per window, {a.rounds} rounds (windows pooled)\n")
    print("| setup | A | B p50 ms | B p90 ms | B p99 ms | p50 busy/idle | p90 busy/idle | "
          "A's sandboxes, cores | B's sandbox, cores | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    p50 = {}
    for s in setups:
        for state in ("idle", "busy"):
            ws = rows[(s.name, state)]
            times = [t for w in ws for t in w[0]]
            q = (percentile(times, 50), percentile(times, 90), percentile(times, 99))
            p50[(s.name, state)] = q
            idle = p50[(s.name, "idle")]
            ratio50 = f"{q[0] / idle[0]:.2f}x" if state == "busy" else "-"
            ratio90 = f"{q[1] / idle[1]:.2f}x" if state == "busy" else "-"
            a_cores = statistics.median(w[1] for w in ws)
            b_cores = statistics.median(w[2] for w in ws)
            load = statistics.median(w[3] for w in ws)
            print(f"| {s.name} | {state} | {q[0]:.2f} | {q[1]:.2f} | {q[2]:.2f} | {ratio50} | "
                  f"{ratio90} | {a_cores:.2f} | {b_cores:.3f} | {load:.1f} |")
    print()
    print(f"Both busy: A's {a.busy} loops and one of B's, {a.share_seconds:g} s per round — "
          "the CPU each tenant got (cores, median of the rounds; range)\n")
    print("| setup | A, cores | B, cores | B's share |")
    print("|---|---|---|---|")
    for s in setups:
        sh = rows[(s.name, "share")]
        ac = [x[0] for x in sh]
        bc = [x[1] for x in sh]
        fr = [b / (x + b) for x, b in zip(ac, bc) if x + b > 0]
        print(f"| {s.name} | {statistics.median(ac):.2f} ({min(ac):.2f}-{max(ac):.2f}) | "
              f"{statistics.median(bc):.2f} ({min(bc):.2f}-{max(bc):.2f}) | "
              f"{statistics.median(fr):.0%} |")
    print()
    per_round = []
    for s in setups:
        r50 = [statistics.median(b[0]) / statistics.median(i[0])
               for i, b in zip(rows[(s.name, "idle")], rows[(s.name, "busy")])]
        per_round.append(f"{s.name}: " + ", ".join(f"{x:.2f}x" for x in r50))
    print("p50 busy/idle round by round — " + "; ".join(per_round) + "\n")
    for name, (pa, pb) in places.items():
        print(f"- {name}: A's first sandbox in `{pa}`, B's in `{pb}`")
    print(f"- other runsc sandboxes on the machine at each window's start (not this "
          f"benchmark's): {foreign}")


if __name__ == "__main__":
    main()
