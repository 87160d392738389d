#!/usr/bin/python3
"""sandgate's own cost per execute, and whether idle sessions change it.

With `--sandbox none` (the kernel's cost is not sandgate's), one client runs
`1+1` sequentially over one keep-alive connection: --runs executes (>= 400)
with one session alive, then again after --idle more sessions were started
and left idle.  For each window it reads the CPU time of every sandgate
thread (/proc/PID/task/*/schedstat, ns, and how many times the threads were
scheduled in: the wake-ups) and counts sandgate's system calls
(perf stat on raw_syscalls:sys_enter and a few by name), and reports them
per execute, with the round trip's median.  The ratio "idle / alone" is the
signal: an event loop whose cost grows with registered sessions shows it
here; the two windows alternate (idle sessions started, measured, removed)
so that a drifting machine biases neither.  Both request formats are measured: the NDJSON stream (POST /execute,
the E2B protocol) and one JSON document (Accept: application/json).

usage: bench/loopcost.py [--runs N] [--idle N] [--rounds N] [--no-perf]
                        [--baseline BUILDDIR] [--keys N]
  SG_BUILDDIR selects the build (default ./build); run as root for perf.
  --baseline measures a second build in the same run, round by round (e.g.
  the commit before a change: git worktree add /tmp/base REV &&
  /tmp/base/scripts/build.sh), and compares CPU and round trip with it.
  --keys N compares --keys-file of N tenants (made with sandgate keys add),
  authenticating as one of them, with --token instead: both daemons run side
  by side (one session each and --idle idle ones) and their windows
  alternate, pair by pair (--rounds pairs), so drift cancels; it reports the
  median of the pairs' ratios and their quartiles.
  perf's tracepoint costs sandgate CPU on every system call: --no-perf
  measures the CPU without it (bench/zmqfloor -p and without -p match).
Prints a Markdown table.
"""
import argparse
import glob
import http.client
import json
import os
import statistics
import subprocess
import tempfile
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
import sgd  # noqa: E402
from sgd import TOKEN  # noqa: E402

SYSCALLS = ["raw_syscalls:sys_enter", "syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_poll",
            "syscalls:sys_enter_getpid"]


def cpu_ns(pid):
    """CPU time of every thread of pid in ns, and how many times its threads
    were scheduled in (schedstat's first and third fields)."""
    total = runs = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                fields = f.read().split()
                total += int(fields[0])
                runs += int(fields[2])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total, runs


class Client:
    """One keep-alive connection."""

    key = TOKEN  # what the executes authenticate with

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def execute(self, ctx, as_json):
        h = {"Authorization": "Bearer " + Client.key, "Content-Type": "application/json"}
        if as_json:
            h["Accept"] = "application/json"
        self.conn.request("POST", "/execute", json.dumps({"code": "1+1", "context_id": ctx}), h)
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200 or b'"2"' not in body:
            raise RuntimeError(f"execute: {r.status} {body[:200]!r}")


def measure(d, ctx, runs, as_json, use_perf):
    """Runs executes; returns (ms p50, CPU ms per execute, syscalls per execute dict,
    wake-ups per execute)."""
    c = Client(d.url)
    for _ in range(20):  # warm: the connection, the kernel, sandgate's caches
        c.execute(ctx, as_json)
    perf = None
    if use_perf and os.geteuid() == 0:
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(SYSCALLS),
                                 "-p", str(d.proc.pid)],
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        time.sleep(0.3)  # perf attaches
    times = []
    c0 = cpu_ns(d.proc.pid)
    for _ in range(runs):
        t = time.perf_counter()
        c.execute(ctx, as_json)
        times.append((time.perf_counter() - t) * 1000)
    c1 = cpu_ns(d.proc.pid)
    cpu, wakeups = c1[0] - c0[0], c1[1] - c0[1]
    counts = {}
    if perf:
        perf.send_signal(2)
        _, err = perf.communicate()
        for line in err.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                name = parts[2].split(":")[-1].replace("sys_enter_", "")
                counts["all" if name == "sys_enter" else name] = int(parts[0]) / runs
    c.conn.close()
    return statistics.median(times), cpu / runs / 1e6, counts, wakeups / runs


def make_keys(build, n):
    """A keys file of n tenants (sandgate keys add); returns (path, the middle one's key).
    Their max-rps is set past what one client sends (the loop's cost of a key
    is measured here; pacing a tenant to its share is bench/tenant_noisy.py's)."""
    d = tempfile.mkdtemp(prefix="sg-loopcost-keys-")
    path = os.path.join(d, "keys")
    key = None
    for i in range(n):
        out = subprocess.run([os.path.join(build, "sandgate"), "keys", "add", f"t{i:05d}",
                              "--max-rps", "1000000", "--keys-file", path],
                             capture_output=True, text=True, check=True)
        if i == n // 2:
            key = out.stdout.strip().splitlines()[-1]
    return path, key


def run_build(a, build, rows):
    """One round on one build: a window alone, then with a.idle idle sessions."""
    sgd.SANDGATE = os.path.join(build, "sandgate")
    d = sgd.Daemon("--sandbox", "none", "--pool-size", "0", "--idle-timeout", "0",
                   "--max-kernels", str(a.idle + 8),
                   env={"SANDGATE_INIT": os.path.join(build, "sandgate-init")})
    Client.key = TOKEN
    try:
        st, ctx = d.json("POST", "/contexts", {}, token=Client.key)
        active = ctx["id"]

        def window(label):
            for fmt, as_json in (("NDJSON", False), ("JSON", True)):
                rows.setdefault((build, label, fmt), []).append(
                    measure(d, active, a.runs, as_json, not a.no_perf))

        window("1 session")
        idle = []
        for _ in range(a.idle):
            st, c = d.json("POST", "/contexts", {}, token=Client.key)
            if st != 201 and st != 200:
                raise RuntimeError(f"context: {st} {c}")
            idle.append(c["id"])
            d.json("POST", "/execute", {"code": "1+1", "context_id": c["id"]},
                   headers={"Accept": "application/json"}, token=Client.key)
        time.sleep(2)
        window(f"{a.idle} idle + 1")
        for c in idle:
            d.json("DELETE", "/contexts/" + c, token=Client.key)
    finally:
        d.stop()

def compare_keys(a, build, keys):
    """--token and --keys-file daemons side by side; windows alternate in pairs
    (the order flips each round).  Prints a table of the pairs' ratios."""
    daemons = []
    try:
        for k in (None, keys):
            sgd.SANDGATE = os.path.join(build, "sandgate")
            extra = ["--keys-file", k[0], "--auth-fail-limit", "0"] if k else []
            d = sgd.Daemon("--sandbox", "none", "--pool-size", "0", "--idle-timeout", "0",
                           "--max-kernels", str(a.idle + 8), *extra,
                           env={"SANDGATE_INIT": os.path.join(build, "sandgate-init")})
            daemons.append(d)
            key = k[1] if k else TOKEN
            ctxs = []
            for _ in range(a.idle + 1):
                st, c = d.json("POST", "/contexts", {}, token=key)
                if st not in (200, 201):
                    raise RuntimeError(f"context: {st} {c}")
                ctxs.append(c["id"])
                d.json("POST", "/execute", {"code": "1+1", "context_id": c["id"]},
                       headers={"Accept": "application/json"}, token=key)
            d.sg_key, d.sg_ctx = key, ctxs[0]
        time.sleep(2)
        pairs = {"NDJSON": [], "JSON": []}
        for r in range(a.rounds):
            for fmt, as_json in (("NDJSON", False), ("JSON", True)):
                got = {}
                for d in (daemons if r % 2 == 0 else daemons[::-1]):
                    Client.key = d.sg_key
                    got[id(d)] = measure(d, d.sg_ctx, a.runs, as_json, not a.no_perf)
                pairs[fmt].append((got[id(daemons[0])], got[id(daemons[1])]))
    finally:
        for d in daemons:
            d.stop()
    print(f"--keys-file ({a.keys} keys) against --token — {time.strftime('%Y-%m-%d')}, "
          f"--sandbox none, 1 session + {a.idle} idle each, both daemons running, `1+1` "
          f"sequentially over one keep-alive connection, {a.runs} executes per window, "
          f"{a.rounds} alternating pairs{'' if not a.no_perf and os.geteuid() == 0 else ', perf stat not attached'}\n")
    print("| format | --token CPU ms / execute | --keys-file CPU ms / execute | CPU ratio, median "
          "of pairs (quartiles) | --token p50 ms | --keys-file p50 ms | p50 ratio, median of "
          "pairs (quartiles) | syscalls / execute (token, keys) |")
    print("|---|---|---|---|---|---|---|---|")

    def q(v):
        qs = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        return f"{qs[1]:.3f}x ({qs[0]:.3f}-{qs[2]:.3f})"

    for fmt, ps in pairs.items():
        cpu = [k[1] / t[1] for t, k in ps]
        p50 = [k[0] / t[0] for t, k in ps]
        sc = [statistics.median(m[2].get("all", 0) for m in side) for side in zip(*ps)]
        sc_text = f"{sc[0]:.1f}, {sc[1]:.1f}" if sc[0] else "-"
        print(f"| {fmt} | {statistics.median(t[1] for t, _ in ps):.3f} | "
              f"{statistics.median(k[1] for _, k in ps):.3f} | {q(cpu)} | "
              f"{statistics.median(t[0] for t, _ in ps):.2f} | "
              f"{statistics.median(k[0] for _, k in ps):.2f} | {q(p50)} | "
              f"{sc_text} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--idle", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternations of the windows (medians are shown)")
    ap.add_argument("--no-perf", action="store_true",
                    help="no perf stat: its tracepoint adds to the CPU measured")
    ap.add_argument("--baseline", metavar="BUILDDIR",
                    help="another build (e.g. of the previous commit) measured in the same run, "
                         "round by round with SG_BUILDDIR's: the last column compares them")
    ap.add_argument("--keys", type=int, metavar="N",
                    help="compare SG_BUILDDIR's build with --keys-file of N tenants (one of "
                         "them authenticating) against --token: two daemons side by side, "
                         "--rounds alternating pairs of windows")
    a = ap.parse_args()
    builds = [os.environ["SG_BUILDDIR"]] + ([a.baseline] if a.baseline else [])
    if a.keys:
        compare_keys(a, builds[0], make_keys(builds[0], a.keys))
        return
    rows = {}
    # Alternate the windows and the builds, so that a machine whose speed
    # drifts (a shared VM does) biases none of them.
    for _ in range(a.rounds):
        for build in builds:
            run_build(a, build, rows)

    perf = not a.no_perf and os.geteuid() == 0
    print(f"sandgate's own cost per execute — {time.strftime('%Y-%m-%d')}, --sandbox none, "
          f"`1+1` sequentially over one keep-alive connection, {a.runs} executes per window, "
          f"{a.rounds} rounds{'' if perf else ', perf stat not attached'}\n")
    print("| build | sessions | format | round trip p50 ms | sandgate CPU ms / execute (range) | "
          "syscalls / execute | epoll_wait | poll | getpid | wake-ups / execute | "
          "CPU vs 1 session | CPU vs baseline | p50 vs baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base, med = {}, {}
    for (build, label, fmt), ms in rows.items():
        med[(build, label, fmt)] = (statistics.median(m[1] for m in ms),
                                    statistics.median(m[0] for m in ms))
    for (build, label, fmt), ms in rows.items():
        cpu, p50 = med[(build, label, fmt)]
        cnt = {k: statistics.median(m[2].get(k, 0) for m in ms) for k in
               ("all", "epoll_wait", "poll", "getpid")}
        base.setdefault((build, fmt), cpu)
        wk = statistics.median(m[3] for m in ms)
        lo, hi = min(m[1] for m in ms), max(m[1] for m in ms)
        sc = [f"{cnt[k]:.1f}" if perf else "-" for k in ("all", "epoll_wait", "poll", "getpid")]
        base_build = a.baseline
        vs = med.get((base_build, label, fmt)) if base_build else None
        vs_cpu = f"{cpu / vs[0]:.2f}x" if vs else "-"
        vs_p50 = f"{p50 / vs[1]:.2f}x" if vs else "-"
        print(f"| {build} | {label} | {fmt} | {p50:.2f} | {cpu:.3f} ({lo:.3f}-{hi:.3f}) | "
              f"{' | '.join(sc)} | {wk:.1f} | {cpu / base[(build, fmt)]:.2f}x | {vs_cpu} | "
              f"{vs_p50} |")


if __name__ == "__main__":
    main()
