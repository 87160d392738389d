#!/usr/bin/python3
"""Density: how many sandboxed sessions one machine holds, and what each costs.

Four sections, each one run of this program on one machine (select them
with --sections; the defaults are the full run):

 1 idle   Idle cost of one live sandboxed session.  One session executes
          `1+1`, then is left alone for --settle s (30); over the next
          --window s (30) the CPU of every thread of every process of its
          sandbox is read (/proc/PID/task/*/schedstat, field 1, ns): the
          runsc-gofer and runsc-sandbox processes whose command line names
          the container (its id starts with the context's kernel id) and all
          their descendants (the ptrace platform's stub processes, in which
          the kernel's own code runs).  Reported as % of one core, per
          process and in total, with the memory of the same processes (PSS
          from /proc/PID/smaps_rollup, summed: shared pages are split, not
          counted twice).  Target: <= 0.2 % of a core.
 2 exec   Execute, sandboxed vs plain.  `1+1` over one keep-alive
          connection (http.client, Accept: application/json), --runs
          executes (300) on a runsc daemon and on a `--sandbox none` daemon,
          in 3 alternating windows of runs/3 so that a drifting machine
          biases neither; p50 and p90 of each, and the ratio.  Target:
          sandboxed <= 2.5x plain.
 3 fill   Fill with live idle sessions.  One active session's p50 (100
          executes) is the baseline; then idle sandboxed sessions are added
          in steps (--steps, up to --max-live; created --concurrency at a
          time, each executes `1+1` once and then idles).  After each step:
          --settle s of quiet, then the active session's p50 again, the
          machine's CPU busy (/proc/stat over 10 s), MemAvailable and
          sandgate's RSS (its HTTP process and its launcher).  Stops when the
          p50 exceeds 1.3x the baseline, when MemAvailable < 2 GiB, or at
          --max-live.
 4 paused Paused sessions (POST /contexts/{id}/pause, /resume; GET
          /contexts/{id} "state"; an execute on a paused context resumes
          it).  Skipped, with the reason, if the daemon answers 404 (or 405)
          to a pause.  (a) pause time and checkpoint_bytes of an idle
          session that holds `np.arange(10**6)` (target <= 1 s); (b) resume
          overhead: the first execute after a pause minus a running
          session's p50, p50 over --cycles (10) pause/execute cycles (target
          <= 400 ms added); (c) fill: sessions created and paused until
          --max-paused (500), MemAvailable < 2 GiB, or the disk budget
          (--disk-budget GiB of the state directory's filesystem; default
          its free space minus 2 GiB) — disk per paused session (growth of
          `du -sx` of the state directory / count; checkpoint_bytes when
          given), runsc processes left for paused sessions (none expected),
          time per pause, and an active session's p50 before and after.

One sandgate (runsc, ptrace platform) serves sections 1, 3 and 4, started
with --pool-size 0 --idle-timeout 0, --max-kernels above what the run
needs and --pause-after 0 if this build has that option (no automatic
pause while idle cost is measured); section 2 adds a --sandbox none one.
Every context is deleted at the end, also on Ctrl-C or SIGTERM, and the
daemons are stopped (tests/lib/sgd.py removes what is left).  What was
skipped, and why, is printed at the end.

usage: bench/density.py [--sections 1,2,3,4] [--out [FILE]] [--settle S]
                        [--window S] [--runs N] [--steps 0,16,32,...]
                        [--max-live N] [--concurrency N] [--max-paused N]
                        [--disk-budget GIB] [--cycles N]
  Run as root.  SG_BUILDDIR selects the build (default ./build).  Prints
  Markdown; --out also writes it to bench/results/<date>-density.md (or FILE).
  A short run: --sections 1,2,3 --max-live 16
"""
import argparse
import concurrent.futures
import functools
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
import sgd  # noqa: E402
from sgd import TOKEN, SANDGATE  # noqa: E402
from loopcost import cpu_ns  # noqa: E402  (every thread's CPU, schedstat)
from scale import machine_busy  # noqa: E402  (the machine's busy cores, /proc/stat)

GIB = 2 ** 30
MEM_FLOOR = 2 * GIB  # stop filling below this much MemAvailable
LINES = []  # the Markdown report, printed as it grows and written by --out
SKIPPED = []  # (section, why)
STOP = threading.Event()  # Ctrl-C or SIGTERM: create nothing more


def out(line=""):
    LINES.append(line)
    print(line, flush=True)


def note(msg):
    """Progress, on stderr (not part of the report)."""
    print(f"density: {msg}", file=sys.stderr, flush=True)


def skip(section, why):
    SKIPPED.append((section, why))
    out(f"*Skipped: {why}*\n")


# --- the machine and processes ------------------------------------------------

def meminfo(field):
    with open("/proc/meminfo") as f:
        return int(re.search(field + r":\s+(\d+) kB", f.read()).group(1)) * 1024


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def ppids():
    """{pid: parent pid} of every process."""
    m = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    m[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return m


def descendants(roots):
    """roots and every process below them."""
    parent = ppids()
    children = {}
    for pid, pp in parent.items():
        children.setdefault(pp, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.append(pid)
            todo.extend(children.get(pid, []))
    return found


def runsc_pids(state_dir, needle=None):
    """runsc-gofer / runsc-sandbox processes of this daemon (their --root is
    under state_dir), and if needle is given, only those naming it."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        args = cmdline(p)
        if not args or os.path.basename(args[0]) not in ("runsc-gofer", "runsc-sandbox"):
            continue
        joined = " ".join(args)
        if state_dir not in joined:
            continue
        if needle is None or needle in args or f"/kernels/{needle}/" in joined \
                or f"/kernels/{needle}-" in joined:  # a kernel id: any of its sandboxes
            pids.append(int(p))
    return pids


def kernel_id(d, ctx):
    """A context's kernel id (today the context id itself)."""
    st, c = d.json("GET", "/contexts/" + ctx)
    return (c or {}).get("kernel_id", ctx)


def container_id(d, ctx):
    """The sandbox (container) id of a context: the kernel record's
    sandbox_id (STATE/sessions/<kernel id>.json), else the kernel id."""
    kid = kernel_id(d, ctx)
    try:
        with open(os.path.join(d.dir, "sessions", kid + ".json")) as f:
            return json.load(f)["sandbox_id"]
    except (OSError, ValueError, KeyError):
        return kid


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return int(re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024
    except (OSError, AttributeError):
        return 0


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        return 0


def sandgate_pids(d):
    """The daemon's own processes: the HTTP server and its launcher (not runsc)."""
    return [p for p in descendants([d.proc.pid])
            if cmdline(p)[:1] and os.path.basename(cmdline(p)[0]) == "sandgate"]


def du_bytes(path):
    """Bytes allocated under path on its own filesystem (not the loop-mounted
    workspaces, which are counted through their image files)."""
    r = subprocess.run(["du", "-sxB1", path], capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.stdout else 0


def free_bytes(path):
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize


# --- talking to a daemon -------------------------------------------------------

def Daemon(*args):
    """sgd.Daemon in a session of its own: a Ctrl-C on the terminal then
    reaches this program, which deletes the contexts, and not sandgate."""
    popen = subprocess.Popen
    sgd.subprocess.Popen = functools.partial(popen, start_new_session=True)
    try:
        return sgd.Daemon(*args)
    finally:
        sgd.subprocess.Popen = popen


class Client:
    """One keep-alive connection."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)

    def execute(self, ctx, code="1+1", expect="2"):
        """One execute; returns its round trip in ms."""
        h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
             "Accept": "application/json"}
        t = time.perf_counter()
        self.conn.request("POST", "/execute", json.dumps({"code": code, "context_id": ctx}), h)
        r = self.conn.getresponse()
        body = r.read()
        ms = (time.perf_counter() - t) * 1000
        if r.status != 200 or (expect and f'"{expect}"'.encode() not in body):
            raise RuntimeError(f"execute: {r.status} {body[:300]!r}")
        return ms

    def times(self, ctx, n, warm=20):
        for _ in range(warm):  # the connection, the kernel after a quiet spell
            self.execute(ctx)
        return [self.execute(ctx) for _ in range(n)]

    def close(self):
        self.conn.close()


def pct(values, q):
    """The q-th percentile (nearest rank)."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q / 100 * len(v) + 0.5)) - 1))]


class Sessions:
    """The contexts one daemon has for this run; deletes them all at the end."""

    def __init__(self, d):
        self.d = d
        self.ids = []

    def new(self, execute=True):
        st, c = self.d.json("POST", "/contexts", {}, timeout=600)
        if st not in (200, 201):
            raise RuntimeError(f"POST /contexts: {st} {c}")
        self.ids.append(c["id"])
        if execute:  # the kernel has started and run code once
            st, r = self.d.json("POST", "/execute", {"code": "1+1", "context_id": c["id"]},
                                headers={"Accept": "application/json"}, timeout=600)
            if st != 200 or r["results"][0]["text"] != "2":
                raise RuntimeError(f"first execute: {st} {r}")
        return c["id"]

    def delete(self, ctx):
        self.d.request("DELETE", "/contexts/" + ctx, timeout=120)
        if ctx in self.ids:
            self.ids.remove(ctx)

    def delete_all(self):
        ids = list(self.ids)
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda c: self._quiet_delete(c), ids))

    def _quiet_delete(self, ctx):
        try:
            self.delete(ctx)
        except Exception as e:  # the daemon's stop removes what is left
            note(f"delete {ctx}: {e}")


# --- 1: idle cost of one session ----------------------------------------------

def section_idle(a, d, s):
    out("## 1. Idle cost of one live sandboxed session\n")
    ctx = s.new()
    cid = container_id(d, ctx)
    note(f"idle: session {ctx} (container {cid}) executed 1+1; quiet for {a.settle} s")
    time.sleep(a.settle)
    roots = runsc_pids(d.dir, cid)
    if not roots:
        skip("1", f"no runsc-gofer/runsc-sandbox process names container {cid}")
        s.delete(ctx)
        return
    pids = descendants(roots)
    parent = ppids()
    own = sandgate_pids(d)
    c0 = {p: cpu_ns(p)[0] for p in pids + own}
    t0 = time.time()
    note(f"idle: measuring {len(pids)} processes for {a.window} s")
    time.sleep(a.window)
    c1 = {p: cpu_ns(p)[0] for p in pids + own}
    wall = time.time() - t0
    gone = [p for p in pids if not os.path.exists(f"/proc/{p}")]

    out(f"One session, `1+1` once, then {a.settle} s of quiet; CPU over the next "
        f"{wall:.1f} s (schedstat of every thread), memory as PSS (smaps_rollup). "
        f"Container `{cid}`.\n")
    out("| process | pid | CPU % of one core | PSS MiB |")
    out("|---|---|---|---|")
    total_cpu = total_pss = 0
    for p in pids:
        args = cmdline(p)
        name = os.path.basename(args[0]) if args else comm(p)
        if p not in roots:  # which runsc process it is below
            up = p
            while up not in roots and up in parent:
                up = parent[up]
            name = f"{name} (below {os.path.basename((cmdline(up) or ['?'])[0])}: ptrace stub)"
        cpu = (c1[p] - c0[p]) / 1e9 / wall * 100
        pss = pss_bytes(p)
        total_cpu += cpu
        total_pss += pss
        out(f"| {name} | {p} | {cpu:.3f} | {pss / 2**20:.1f} |")
    out(f"| **total** | | **{total_cpu:.3f}** | **{total_pss / 2**20:.1f}** |")
    own_cpu = sum(c1[p] - c0[p] for p in own) / 1e9 / wall * 100
    out(f"\nsandgate itself (HTTP process + launcher) over the same window: "
        f"{own_cpu:.3f} % of a core.")
    if gone:
        out(f"Processes that ended during the window (their last CPU is missing): {gone}")
    verdict = "met" if total_cpu <= 0.2 else "**not met**"
    out(f"\nTarget ≤ 0.2 % of a core per idle session: {total_cpu:.3f} % — {verdict}.\n")
    s.delete(ctx)


# --- 2: execute, sandboxed vs plain -------------------------------------------

def section_exec(a, d, s, build_args):
    out("## 2. Execute `1+1`, sandboxed vs plain\n")
    plain = Daemon("--sandbox", "none", *build_args)
    ps = Sessions(plain)
    try:
        ctx = {"runsc": s.new(), "none": ps.new()}
        url = {"runsc": d.url, "none": plain.url}
        times = {"runsc": [], "none": []}
        per = max(1, a.runs // 3)
        # Alternate: a drifting machine (a shared VM does) biases neither side.
        for r in range(3):
            for mode in ("runsc", "none"):
                c = Client(url[mode])
                times[mode] += c.times(ctx[mode], per)
                c.close()
            note(f"exec: round {r + 1}/3 done")
        out(f"One keep-alive connection per window, POST /execute (JSON), 3 alternating "
            f"rounds of {per} executes per daemon ({3 * per} each).\n")
        out("| sandbox | p50 ms | p90 ms | executes |")
        out("|---|---|---|---|")
        for mode in ("runsc", "none"):
            t = times[mode]
            out(f"| {mode} | {statistics.median(t):.2f} | {pct(t, 90):.2f} | {len(t)} |")
        ratio = statistics.median(times["runsc"]) / statistics.median(times["none"])
        ratio90 = pct(times["runsc"], 90) / pct(times["none"], 90)
        verdict = "met" if ratio <= 2.5 else "**not met**"
        out(f"\nsandboxed / plain: {ratio:.2f}x at p50, {ratio90:.2f}x at p90. "
            f"Target ≤ 2.5x: {verdict}.\n")
        s.delete(ctx["runsc"])
    finally:
        ps.delete_all()
        plain.stop()


# --- 3: fill with live idle sessions ------------------------------------------

def create_many(s, n, concurrency):
    """n new sessions, concurrency at a time; stops early below MEM_FLOOR."""
    made = []

    def one(_):
        if STOP.is_set() or meminfo("MemAvailable") < MEM_FLOOR:
            return None
        return s.new()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        for c in ex.map(one, range(n)):
            if c:
                made.append(c)
    return made


def active_p50(d, ctx):
    """The active session's p50 over 100 executes (after 20 to warm it)."""
    c = Client(d.url)
    p50 = statistics.median(c.times(ctx, 100, warm=20))
    c.close()
    return p50


def section_fill(a, d, s):
    out("## 3. Fill with live idle sessions\n")
    # The baseline is measured the way every step is: after the quiet spell
    # (a session that has just been busy answers faster than one that has not).
    active = s.new()
    note(f"fill: active session {active}; quiet {a.settle} s")
    time.sleep(a.settle)
    base = active_p50(d, active)
    note(f"fill: active session p50 {base:.2f} ms")
    steps = [n for n in (int(x) for x in a.steps.split(",")) if n <= a.max_live]
    if not steps or a.max_live > steps[-1]:
        steps.append(a.max_live)
    out(f"The active session alone, after {a.settle:.0f} s of quiet: p50 **{base:.2f} ms** "
        f"(100 executes after 20 to warm it). Idle sessions are added {a.concurrency} at a "
        f"time (each `1+1` once); after each step {a.settle:.0f} s of quiet, then the active "
        f"session's p50 the same way (a window over 1.3x is measured once more and the "
        f"lower taken, so one burst from another process does not end the fill), the "
        f"machine's CPU over 10 s, MemAvailable, sandgate's RSS (HTTP process + "
        f"launcher).\n")
    out("| idle sessions | create s | active p50 ms | vs alone | machine CPU busy (cores) "
        "| MemAvailable GiB | sandgate RSS MiB |")
    out("|---|---|---|---|---|---|---|")
    idle, last_ok, why = [], None, f"--max-live {a.max_live} reached"
    mem0 = meminfo("MemAvailable")
    for n in steps:
        t0 = time.time()
        idle += create_many(s, n - len(idle), a.concurrency)
        made = time.time() - t0
        note(f"fill: {len(idle)} idle sessions (step {n}), quiet {a.settle} s")
        time.sleep(a.settle)
        p50 = shown = active_p50(d, active)
        if p50 > 1.3 * base:
            again = active_p50(d, active)
            p50, shown = min(p50, again), f"{p50:.2f}, again {again:.2f}"
        else:
            shown = f"{p50:.2f}"
        busy = machine_busy(10)
        mem = meminfo("MemAvailable")
        rss = sum(rss_bytes(p) for p in sandgate_pids(d))
        out(f"| {len(idle)} | {made:.0f} | {shown} | {p50 / base:.2f}x | {busy:.2f} | "
            f"{mem / GIB:.1f} | {rss / 2**20:.1f} |")
        if p50 > 1.3 * base:
            why = f"the active p50 passed 1.3x its figure alone at {len(idle)} idle sessions"
            break
        last_ok = len(idle)
        if len(idle) < n or mem < MEM_FLOOR:
            why = f"MemAvailable fell below {MEM_FLOOR / GIB:.0f} GiB"
            break
    out(f"\nStopped: {why}. Last step within 1.3x: "
        f"{last_ok if last_ok is not None else 'none'} idle sessions.")
    if idle:
        used = (mem0 - meminfo("MemAvailable")) / len(idle)
        out(f"Machine memory per idle session (MemAvailable drop / count): "
            f"{used / 2**20:.0f} MiB.")
    out()
    s.delete_all()


# --- 4: paused sessions -------------------------------------------------------

def state(d, ctx):
    st, c = d.json("GET", "/contexts/" + ctx)
    return (c or {}).get("state")


def pause(d, ctx):
    """Pauses ctx; returns (status, seconds until paused, context JSON)."""
    t = time.perf_counter()
    st, c = d.json("POST", f"/contexts/{ctx}/pause", timeout=600)
    if st in (200, 202) and (c or {}).get("state") != "paused":
        deadline = time.time() + 300  # an answer before the checkpoint: wait for it
        while time.time() < deadline:
            st2, c2 = d.json("GET", "/contexts/" + ctx)
            if (c2 or {}).get("state") == "paused":
                c = dict(c2, **{k: v for k, v in (c or {}).items() if k not in c2})
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"pause: {ctx} still {(c or {}).get('state')} after 300 s")
    return st, time.perf_counter() - t, c or {}


def section_paused(a, d, s):
    out("## 4. Paused sessions\n")
    ctx = s.new()
    st, _, c = pause(d, ctx)
    if st in (404, 405):
        skip("4", f"the daemon has no pause API: POST /contexts/{{id}}/pause answered {st} "
                  f"{json.dumps(c)}")
        s.delete(ctx)
        return
    if st not in (200, 202):
        skip("4", f"POST /contexts/{{id}}/pause answered {st} {json.dumps(c)}")
        s.delete(ctx)
        return
    # That probe paused a fresh session: bring it back for the real measurements.
    st, c = d.json("POST", f"/contexts/{ctx}/resume", timeout=600)
    if st != 200:
        note(f"paused: POST /contexts/{{id}}/resume answered {st} {c}; the execute resumes it")

    # (a) pause time and checkpoint size of a session holding a numpy array.
    cl = Client(d.url)
    cl.execute(ctx, "import numpy as np; a = np.arange(10**6); int(a.sum())", expect=None)
    time.sleep(5)  # idle
    st, secs, c = pause(d, ctx)
    if st not in (200, 202):
        raise RuntimeError(f"pause: {st} {c}")
    gone = not runsc_pids(d.dir, kernel_id(d, ctx))
    ck = c.get("checkpoint_bytes")
    out("### (a) Pause of an idle session holding `np.arange(10**6)`\n")
    out(f"Pause: {st}, **{secs * 1000:.0f} ms** until `paused` (target ≤ 1 s: "
        f"{'met' if secs <= 1 else '**not met**'}); checkpoint_bytes: "
        f"{f'{ck / 2**20:.1f} MiB' if ck is not None else 'not given'}; runsc processes "
        f"left: {'none' if gone else 'some'}.")
    r = cl.execute(ctx, "int(a.sum())", expect=str(sum(range(10**6))))
    out(f"The first execute after it (resumes, the array intact): {r:.0f} ms.\n")

    # (b) resume overhead: first execute after a pause vs a running session's p50.
    run_p50 = statistics.median(cl.times(ctx, 30))
    over, pauses = [], []
    for i in range(a.cycles):
        st, secs, c = pause(d, ctx)
        pauses.append(secs * 1000)
        if state(d, ctx) != "paused":
            raise RuntimeError(f"cycle {i}: not paused after the pause: {state(d, ctx)}")
        cl.close()
        cl = Client(d.url)  # a fresh connection, as a returning client has
        over.append(cl.execute(ctx) - run_p50)
    cl.close()
    added = statistics.median(over)
    out(f"### (b) Resume overhead, {a.cycles} pause/execute cycles\n")
    out(f"Running session p50 {run_p50:.1f} ms (30 executes); first execute after a pause "
        f"adds p50 **{added:.0f} ms** (min {min(over):.0f}, max {max(over):.0f}); target "
        f"≤ 400 ms: {'met' if added <= 400 else '**not met**'}. Pause p50 "
        f"{statistics.median(pauses):.0f} ms.\n")
    s.delete(ctx)

    # (c) fill with paused sessions.
    out("### (c) Fill with paused sessions\n")
    active = s.new()
    cl = Client(d.url)
    before = statistics.median(cl.times(active, 100))
    cl.close()
    free0, du0, mem0 = free_bytes(d.dir), du_bytes(d.dir), meminfo("MemAvailable")
    budget = a.disk_budget * GIB if a.disk_budget is not None else free0 - 2 * GIB
    paused, times, cks, why = [], [], [], f"--max-paused {a.max_paused} reached"

    def one(_):
        if STOP.is_set():
            raise KeyboardInterrupt()
        c = s.new()
        st, secs, j = pause(d, c)
        if st not in (200, 202):
            raise RuntimeError(f"pause {c}: {st} {j}")
        return c, secs, j.get("checkpoint_bytes")
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
        while len(paused) < a.max_paused:
            used = free0 - free_bytes(d.dir)
            per = used / len(paused) if paused else 0
            batch = min(a.concurrency, a.max_paused - len(paused))
            if used + per * batch > budget:
                why = f"the disk budget ({budget / GIB:.1f} GiB) would be passed"
                break
            if meminfo("MemAvailable") < MEM_FLOOR:
                why = f"MemAvailable fell below {MEM_FLOOR / GIB:.0f} GiB"
                break
            for c, secs, ck in ex.map(one, range(batch)):
                paused.append(c)
                times.append(secs * 1000)
                if ck is not None:
                    cks.append(ck)
            if len(paused) % 50 < batch:
                note(f"paused: {len(paused)} sessions")
    grow = du_bytes(d.dir) - du0
    left = [c for c in paused if runsc_pids(d.dir, kernel_id(d, c))]
    sandboxes = len([p for p in runsc_pids(d.dir)
                     if os.path.basename(cmdline(p)[0]) == "runsc-sandbox"])
    cl = Client(d.url)
    after = statistics.median(cl.times(active, 100))
    cl.close()
    n = max(1, len(paused))
    out(f"{len(paused)} sessions created and paused ({a.concurrency} at a time); stopped: "
        f"{why}.\n")
    out("| figure | value |")
    out("|---|---|")
    out(f"| disk per paused session (du -sx growth / count) | {grow / n / 2**20:.1f} MiB |")
    out(f"| disk per paused session (free space drop / count) | "
        f"{(free0 - free_bytes(d.dir)) / n / 2**20:.1f} MiB |")
    if cks:
        out(f"| checkpoint_bytes p50 | {statistics.median(cks) / 2**20:.1f} MiB |")
    out(f"| machine memory per paused session (MemAvailable drop / count) | "
        f"{(mem0 - meminfo('MemAvailable')) / n / 2**20:.1f} MiB |")
    out(f"| paused sessions with a runsc process left | {len(left)} |")
    out(f"| runsc-sandbox processes of this daemon (1 active session) | {sandboxes} |")
    if times:
        out(f"| pause time p50 / p90 | {statistics.median(times):.0f} / {pct(times, 90):.0f} ms |")
    out(f"| active session p50 before / with them paused | {before:.2f} / {after:.2f} ms "
        f"({after / before:.2f}x) |")
    out()
    s.delete_all()


# --- main ---------------------------------------------------------------------

def build_id():
    """sandgate's version and the commit of the tree its build came from."""
    src = os.path.dirname(os.path.abspath(os.environ["SG_BUILDDIR"]))
    rev = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", src, "diff", "--quiet", "HEAD", "--", ".",
                            ":!bench", ":!docs"], capture_output=True).returncode
    ver = subprocess.run([SANDGATE, "--version"], capture_output=True, text=True).stdout.split()
    return f"sandgate {ver[1] if len(ver) > 1 else '?'}, commit {rev}" + \
        (" (+ uncommitted changes)" if dirty == 1 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="1,2,3,4",
                    help="which to run: 1 idle, 2 exec, 3 fill, 4 paused (numbers or names)")
    ap.add_argument("--out", nargs="?", const="", default=None,
                    help="also write the report (default bench/results/<date>-density.md)")
    ap.add_argument("--settle", type=float, default=30, help="quiet before a measurement (s)")
    ap.add_argument("--window", type=float, default=30, help="section 1's CPU window (s)")
    ap.add_argument("--runs", type=int, default=300, help="section 2's executes per daemon")
    ap.add_argument("--steps", default="0,16,32,64,100,150,200")
    ap.add_argument("--max-live", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=3, help="sessions created at once (2-4)")
    ap.add_argument("--max-paused", type=int, default=500)
    ap.add_argument("--disk-budget", type=float, default=None,
                    help="GiB section 4 may use (default: free space minus 2 GiB)")
    ap.add_argument("--cycles", type=int, default=10, help="section 4's pause/execute cycles")
    a = ap.parse_args()
    names = {"idle": "1", "exec": "2", "fill": "3", "paused": "4"}
    sections = {names.get(x.strip(), x.strip()) for x in a.sections.split(",")}
    if os.geteuid() != 0:
        sys.exit("density: run as root (runsc sandboxes need it)")

    # Ctrl-C or SIGTERM: queued creations are dropped (STOP), and the
    # finally below deletes what exists.
    def on_signal(*_):
        STOP.set()
        raise KeyboardInterrupt()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    helptext = subprocess.run([SANDGATE, "--help"], capture_output=True, text=True).stdout
    extra = []
    if "--pause-after" in helptext:
        extra = ["--pause-after", "0"]
    else:
        SKIPPED.append(("-", "this sandgate has no --pause-after option; not passed"))
    common = ["--pool-size", "0", "--idle-timeout", "0",
              "--max-kernels", str(max(a.max_live, a.max_paused if "4" in sections else 0) + 16)]

    out(f"# sandgate density — {time.strftime('%Y-%m-%d')}\n")
    out(f"Machine: {os.cpu_count()} cores, {meminfo('MemTotal') / GIB:.0f} GiB, "
        f"{os.uname().sysname} {os.uname().release}; "
        f"{subprocess.run(['runsc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}"
        f" (ptrace platform). Build: {build_id()} ({os.environ['SG_BUILDDIR']}). "
        f"Daemon options: {' '.join(common + extra)}. Sections run: "
        f"{','.join(sorted(sections))}.\n")

    d = s = None
    interrupted = False
    try:
        d = Daemon(*common, *extra)
        s = Sessions(d)
        runs = [("1", lambda: section_idle(a, d, s)),
                ("2", lambda: section_exec(a, d, s, common)),
                ("3", lambda: section_fill(a, d, s)),
                ("4", lambda: section_paused(a, d, s))]
        for n, run in runs:
            if n not in sections:
                continue
            try:
                run()
            except (Exception, AssertionError) as e:
                # A failed section is reported, its contexts removed, and the
                # next one runs.
                skip(n, f"failed: {type(e).__name__}: {e}")
                s.delete_all()
    except KeyboardInterrupt:
        interrupted = True
        SKIPPED.append(("run", "interrupted (Ctrl-C or SIGTERM); the report is partial"))
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the clean-up finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if s:
            note(f"deleting {len(s.ids)} contexts")
            s.delete_all()
        if d:
            d.stop()
        for n in "1234":
            if n not in sections:
                SKIPPED.append((n, "not selected (--sections)"))
        if SKIPPED:
            out("## Skipped\n")
            for sec, why in sorted(SKIPPED):
                out(f"- section {sec}: {why}" if sec != "-" else f"- {why}")
            out()
        if a.out is not None:
            path = a.out or os.path.join(HERE, "results",
                                         time.strftime("%Y-%m-%d") + "-density.md")
            with open(path, "w") as f:
                f.write("\n".join(LINES) + "\n")
            note(f"wrote {path}")
    if interrupted:
        sys.exit(130)


if __name__ == "__main__":
    main()
