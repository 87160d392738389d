#!/usr/bin/python3
"""The sandbox runtime side by side: the runsc sandgate installs (built from
gVisor's Go module, scripts/runsc.pin; systrap) against Debian 12's runsc
(2022-12-19; ptrace), and plain kernels (--sandbox none) as the baseline,
all with the same sandgate build, in one run.

Per runtime, one daemon at a time (--pool-size 0 --pause-after 0):
  execute p50      `1+1` (POST /execute, JSON mode), --runs times on one
                   warm context; ratio to plain's
  32 busy          wrk, 32 connections each on its own context posting `1+1`
                   for --duration s: executes/s; ratio to plain's
  idle CPU         8 idle contexts, each's processes (sandbox, gofer, or the
                   plain kernel) over --window s, in % of one core per context
                   (/proc/PID/task/*/schedstat)
  idle memory      MemAvailable's drop per context for the 32 contexts
and, for each runsc, on an idle numpy session (np.arange(10**6), a 10^6-
element list), --rounds times each, with runsc's own time on the path
(sandgate's debug log of the same run):
  pause            POST /contexts/{id}/pause to its 200
  resume           the next execute's result after a pause
  snapshot         POST /contexts/{id}/snapshots to its 201
  execute during   an execute sent 20 ms into a snapshot, to its result
  from snapshot    POST /contexts {snapshot} to the new context's first result
  fork             POST /contexts/{id}/fork to the child's first result
  8 from one       8 contexts from one snapshot at once, until all answered
  roll back        POST /contexts/{id}/restore to the context's next result
  image            the snapshot's bytes on disk (memory image + workspace data)
and runsc's own floor for the first two (bench/runsc_floor.py: the same
kernel bootstrap in a bare `runsc run` of the pinned runsc, binding the
host's Unix sockets itself, and with sandgate-init's relay, against a plain
one; a lean ZeroMQ client, no sandgate), and where an execute's time goes:
the cost of one system call in each
runtime (a cell calling getppid() 20,000 times, per call), and the system
calls one `1+1` makes in the sandbox, by thread (the pinned runsc with
--strace, through a wrapper: every call is logged, so that daemon's times
are not reported).

With --execute-only, only `1+1` through sandgate (plain, the pinned runsc)
and bare (bench/runsc_floor.py's three ways), all at once, in turns.
With --state-only, only the pinned runsc's state operations, each against
runsc's own floor on its path measured bare in the same run (bench/
runsc_floor.py's StateFloor, a round of it after each of sandgate's).

usage: bench/runtime.py [--runs N] [--duration S] [--rounds N] [--window S]
                        [--old PATH] [--new PATH] [--state-only | --execute-only]
Needs root, wrk, Debian's runsc at --old (installed with apt-get when
/usr/bin/runsc is missing) and a build in build/ (or SG_BUILDDIR).  Prints
Markdown.
"""
import argparse
import collections
import concurrent.futures
import glob
import os
import re
import shutil
import statistics
import tempfile
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
from scale import mem_available, run_wrk  # noqa: E402
from snapshot import StepDaemon  # noqa: E402
import runsc_floor  # noqa: E402

SETUP = "import numpy as np\narr = np.arange(10**6)\nbig = list(range(10**6))"


def run(d, ctx, code="1"):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": ctx},
                   headers={"Accept": "application/json"}, timeout=300)
    if st != 200 or r.get("error"):
        raise RuntimeError(f"execute: {st} {r}")
    return r


def ms_since(t0):
    return (time.perf_counter() - t0) * 1000


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def stats(xs):
    return f"{med(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})" if xs else "-"


def version(runsc):
    out = subprocess.run([runsc, "--version"], capture_output=True, text=True).stdout
    return out.split()[2] if out else "?"


def pids_of(ids):
    """Processes whose command line names one of ids (sandboxes, gofers,
    plain kernels: sandgate names their files and containers by the id)."""
    found = []
    for p in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(p + "/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if any(i in cmd for i in ids):
            found.append(int(p[6:]))
    return found


def cpu_ns(pids):
    total = 0
    for pid in pids:
        for t in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                total += int(open(t).read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def new_context(d):
    st, c = d.json("POST", "/contexts", {}, timeout=300)
    if st != 201:
        raise RuntimeError(f"POST /contexts: {st} {c}")
    return c["id"]


def throughput(d, a):
    """execute p50, 32 busy, idle CPU and memory, for daemon d."""
    out = {}
    ctx = new_context(d)
    for _ in range(20):
        run(d, ctx, "1+1")
    xs = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        run(d, ctx, "1+1")
        xs.append(ms_since(t0))
    out["p50"] = xs
    d.json("DELETE", "/contexts/" + ctx)
    before = mem_available()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ctxs = list(pool.map(lambda _: new_context(d), range(32)))
        list(pool.map(lambda c: run(d, c, "1+1"), ctxs))
    time.sleep(a.settle)
    out["mem"] = (before - mem_available()) / 32 / 2**20
    watched = pids_of(ctxs[:8])
    c0 = cpu_ns(watched)
    time.sleep(a.window)
    out["idle"] = (cpu_ns(watched) - c0) / 1e9 / a.window / 8 * 100
    w = run_wrk(d.url.rstrip("/"), ctxs, a.duration)
    out["rps"], out["errors"] = w["rps"], w["errors"]
    for c in ctxs:
        d.json("DELETE", "/contexts/" + c)
    return out


# bench/runsc_floor.py's StateFloor names for state_ops' rows.
BARE = {"pause": "pause", "first result after a pause": "resume",
        "snapshot of an idle context": "snapshot",
        "an execute sent 20 ms into it, to its result": "snapshot",
        "new context from a snapshot, to its first result": "from snapshot",
        "fork, to the child's first result": "fork",
        "roll back, to the next result": "roll back",
        "8 contexts from one snapshot, all answering": "8 from one"}


def state_ops(d, a, bare=None):
    """The state operations on an idle numpy session, with runsc's time in
    them (sandgate's debug log) and, given a StateFloor, runsc's own floor
    for each, measured bare between sandgate's rounds."""
    rows = {}

    def add(name, x, floor):
        rows.setdefault(name, ([], [], []))
        rows[name][0].append(x)
        rows[name][1].append(floor)

    ctx = new_context(d)
    run(d, ctx, SETUP)
    run(d, ctx)
    sizes, last = [], None
    for _ in range(a.rounds):
        time.sleep(0.5)
        t0 = time.perf_counter()
        st, p = d.json("POST", f"/contexts/{ctx}/pause", timeout=300)
        x = ms_since(t0)
        if st != 200:
            raise RuntimeError(f"pause: {st} {p}")
        time.sleep(0.3)
        add("pause", x, d.steps_since(t0, "runsc checkpoint") + d.steps_since(t0, "runsc delete"))
        t0 = time.perf_counter()
        run(d, ctx)
        x = ms_since(t0)
        time.sleep(0.3)
        add("first result after a pause", x, d.steps_since(t0, "runsc restore"))

        time.sleep(0.5)
        probe = {}

        def second_client():
            time.sleep(0.02)
            t = time.perf_counter()
            run(d, ctx)
            probe["ms"] = ms_since(t)

        th = threading.Thread(target=second_client)
        t0 = time.perf_counter()
        th.start()
        st, s = d.json("POST", f"/contexts/{ctx}/snapshots", {}, timeout=300)
        x = ms_since(t0)
        th.join()
        time.sleep(0.3)
        if st != 201:
            raise RuntimeError(f"snapshot: {st} {s}")
        cp = d.steps_since(t0, "runsc checkpoint") + d.steps_since(t0, "runsc delete")
        add("snapshot of an idle context", x, cp)
        add("an execute sent 20 ms into it, to its result", probe["ms"],
            cp + d.steps_since(t0, "runsc restore"))
        sizes.append(s["bytes"])
        if last:
            d.json("DELETE", "/snapshots/" + last)
        last = s["id"]

        t0 = time.perf_counter()
        st, k = d.json("POST", "/contexts", {"snapshot": last}, timeout=300)
        run(d, k["id"])
        x = ms_since(t0)
        time.sleep(0.3)
        add("new context from a snapshot, to its first result", x,
            d.steps_since(t0, "runsc restore"))
        d.json("DELETE", "/contexts/" + k["id"])

        time.sleep(0.5)
        t0 = time.perf_counter()
        st, k = d.json("POST", f"/contexts/{ctx}/fork", {}, timeout=300)
        run(d, k["id"])
        x = ms_since(t0)
        time.sleep(0.3)
        # Pausing for it (old runsc): the parent's restore and the child's
        # run side by side; live (no delete): the child's restore alone.
        dele = d.steps_since(t0, "runsc delete")
        add("fork, to the child's first result", x,
            d.steps_since(t0, "runsc checkpoint") + dele +
            d.steps_since(t0, "runsc restore") / (2 if dele else 1))
        d.json("DELETE", "/contexts/" + k["id"])

        time.sleep(0.5)
        t0 = time.perf_counter()
        d.json("POST", f"/contexts/{ctx}/restore", {"snapshot": last}, timeout=300)
        run(d, ctx)
        x = ms_since(t0)
        time.sleep(0.3)
        add("roll back, to the next result", x, d.steps_since(t0, "runsc restore"))

        time.sleep(0.5)
        t0 = time.perf_counter()

        def one(_):
            st, k = d.json("POST", "/contexts", {"snapshot": last}, timeout=300)
            run(d, k["id"])
            return k["id"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            made = list(pool.map(one, range(8)))
        x = ms_since(t0)
        time.sleep(0.3)
        add("8 contexts from one snapshot, all answering", x,
            d.steps_since(t0, "runsc restore") / (os.cpu_count() or 1))
        for k in made:
            d.json("DELETE", "/contexts/" + k)
        if bare:
            time.sleep(0.5)
            b = bare.round()
            for name, (_, _, xs) in rows.items():
                xs.append(b[BARE[name]])
    return rows, med(sizes) / 2**20


SYSCALL = ("import ctypes, time\nf = ctypes.CDLL(None).getppid\n"
           "t = time.perf_counter()\nfor _ in range(20000): f()\n"
           "print((time.perf_counter() - t) / 20000 * 1e6)")


def syscall_us(d):
    """One getppid(), in µs (the Python loop's own cost included)."""
    ctx = new_context(d)
    xs = [float(run(d, ctx, SYSCALL)["stdout"]) for _ in range(3)]
    d.json("DELETE", "/contexts/" + ctx)
    return med(xs)


def syscalls_per_execute(runsc, n=50):
    """System calls of one `1+1` in the sandbox, by thread name, from runsc's
    --strace log (a wrapper adds the flags)."""
    tmp = tempfile.mkdtemp(prefix="sg-strace-")
    os.chmod(tmp, 0o755)
    logs = os.path.join(tmp, "logs")
    os.mkdir(logs)
    wrapper = os.path.join(tmp, "runsc")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nexec {runsc} --debug --strace --debug-log={logs}/ \"$@\"\n")
    os.chmod(wrapper, 0o755)
    line = re.compile(r"\] \[\s*\d+:\s*\d+\] (\S+) E (\w+)\(")

    def count():
        c = collections.Counter()
        for path in glob.glob(os.path.join(logs, "*boot*")):
            with open(path, errors="replace") as f:
                for text in f:
                    m = line.search(text)
                    if m:
                        c[(m.group(1), m.group(2))] += 1
        return c

    d = daemon(["--runsc", wrapper])
    try:
        ctx = new_context(d)
        for _ in range(20):
            run(d, ctx, "1+1")
        time.sleep(2)
        before = count()
        for _ in range(n):
            run(d, ctx, "1+1")
        time.sleep(2)
        diff = count() - before
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    by_thread, by_call = collections.Counter(), collections.Counter()
    for (who, call), v in diff.items():
        by_thread[who] += v / n
        by_call[call] += v / n
    return by_thread, by_call


def print_floor(floor, plain, new, name):
    """runsc's own cost on the execute path, and sandgate's against it."""
    p = {m: med(xs) for m, xs in floor["p50"].items()}
    b = floor["busy"]
    print(f"\nrunsc's own floor (bench/runsc_floor.py, {name}, no sandgate; a lean ZeroMQ "
          f"client, interleaved): `1+1` p50 plain {p['plain']:.2f} ms, in a bare sandbox "
          f"{p['runsc']:.2f} ms ({p['runsc'] / p['plain']:.2f}x), the same through "
          f"sandgate-init's relay {p['relay']:.2f} ms ({p['relay'] / p['plain']:.2f}x); 32 busy "
          f"kernels {b['plain']:.0f} against {b['runsc']:.0f} executes/s "
          f"({b['runsc'] / b['plain']:.2f}x).")
    ceiling = med(plain["p50"]) + p["runsc"] - p["plain"]
    rate = plain["rps"] * b["runsc"] / b["plain"]
    print(f"sandgate against it: its sandboxed p50 {med(new['p50']):.2f} ms is "
          f"{med(new['p50']) / ceiling:.2f}x its plain p50 plus runsc's own cost "
          f"({ceiling:.2f} ms); its 32 busy sessions' {new['rps']:.0f} executes/s are "
          f"{new['rps'] / rate:.2f}x its plain rate scaled by runsc's own ratio "
          f"({rate:.0f}/s).")


def print_state(ops, names, rounds):
    """The state operations' table: per runtime sandgate's time and runsc's
    commands in it; for the runtime measured bare too, its floor and the ratio."""
    print(f"\nState operations, an idle numpy session, {rounds} rounds. \"runsc in it\": the "
          f"time of runsc's own commands within the operation (checkpoint, delete, restore of "
          f"the very sandboxes, from sandgate's debug log). \"Bare runsc\": the same path with "
          f"no sandgate (bench/runsc_floor.py's StateFloor: sandgate-init's detach and attach, "
          f"runsc checkpoint and restore, a lean client's first result), measured between "
          f"sandgate's rounds.\n")
    head, cols = ["operation"], 0
    for n in names:
        head += [n, "runsc in it"]
        if any(r[2] for r in ops[n][0].values()):
            head += ["bare runsc", "÷ bare"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for op in ops[names[0]][0]:
        cells = []
        for n in names:
            xs, fl, bare = ops[n][0].get(op, ([], [], []))
            cells += [stats(xs), stats(fl)]
            if any(r[2] for r in ops[n][0].values()):
                cells += [stats(bare), f"{med(xs) / med(bare):.2f}x" if bare else "-"]
        print(f"| {op} | " + " | ".join(cells) + " |")
    print("| image, MiB | " + " | ".join(
        f"{ops[n][1]:.1f} | " + (" | | " if any(r[2] for r in ops[n][0].values()) else "")
        for n in names) + "|")


def state_only(a):
    """--state-only: the pinned runsc's state operations against its bare floor."""
    name = f"runsc {version(a.new)}, systrap"
    d = daemon(["--runsc", a.new, "--platform", "systrap"])
    bare = runsc_floor.StateFloor(a.new, SETUP)
    try:
        ops = {name: state_ops(d, a, bare)}
    finally:
        bare.close()
        d.stop()
    print(f"# State operations against runsc's own floor — {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"\nMachine: {os.cpu_count()} cores. ms; median (min-max).")
    print_state(ops, [name], a.rounds)


def execute_only(a):
    """--execute-only: `1+1` through sandgate (plain and the pinned runsc)
    and bare (runsc_floor's lean client on a plain kernel, in a bare runsc,
    through sandgate-init's relay), all five started at once and measured
    in turns of 50 executes, --rounds * 4 turns each, so that the machine's
    drift falls on all alike."""
    work = tempfile.mkdtemp(prefix="sg-floor-", dir="/var/tmp")
    os.chmod(work, 0o755)
    daemons = {"sandgate, plain": daemon(["--sandbox", "none"]),
               "sandgate, runsc": daemon(["--runsc", a.new, "--platform", "systrap"])}
    bare = {m: runsc_floor.start(m, 1, a.new, work) for m in runsc_floor.MODES}
    try:
        turns = {}
        for name, d in daemons.items():
            ctx = new_context(d)
            turns[name] = lambda d=d, ctx=ctx: run(d, ctx, "1+1")
        for m, (_, clients) in bare.items():
            def one(c=clients[0]):
                c.send()
                if not c.wait(30):
                    raise RuntimeError("an execute did not finish")
            turns[f"bare, {m}"] = one
        xs = {n: [] for n in turns}
        for f in turns.values():  # warm
            for _ in range(20):
                f()
        for _ in range(a.rounds * 4):
            for n, f in turns.items():
                for _ in range(50):
                    t0 = time.perf_counter()
                    f()
                    xs[n].append(ms_since(t0))
    finally:
        for d in daemons.values():
            d.stop()
        for kernels, clients in bare.values():
            runsc_floor.stop(kernels, clients)
        shutil.rmtree(work, ignore_errors=True)
    p = {n: med(v) for n, v in xs.items()}
    print(f"# `1+1` against runsc's own floor — {time.strftime('%Y-%m-%d %H:%M')}\n")
    print(f"Machine: {os.cpu_count()} cores; runsc {version(a.new)}, systrap. "
          f"{len(xs['bare, plain'])} executes each, in turns of 50. ms.\n")
    print("| path | p50 | p90 |")
    print("|---|---|---|")
    for n, v in xs.items():
        print(f"| {n} | {p[n]:.2f} | {sorted(v)[int(len(v) * 0.9)]:.2f} |")
    ceiling = p["sandgate, plain"] + p["bare, runsc"] - p["bare, plain"]
    print(f"\nsandgate in runsc ÷ plain: {p['sandgate, runsc'] / p['sandgate, plain']:.2f}x. "
          f"runsc's own cost (bare runsc - bare plain): {p['bare, runsc'] - p['bare, plain']:.2f} "
          f"ms (through sandgate-init's relay: {p['bare, relay'] - p['bare, plain']:.2f} ms). "
          f"sandgate in runsc ÷ (sandgate plain + runsc's own cost = {ceiling:.2f} ms): "
          f"{p['sandgate, runsc'] / ceiling:.2f}x.")


def daemon(sandbox_args):
    return StepDaemon("--pool-size", "0", "--pause-after", "0", "--max-snapshots", "0",
                      "--max-kernels", "64", "--log-level", "debug", *sandbox_args)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=30)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--old", default="/usr/bin/runsc")
    ap.add_argument("--new", default="/usr/local/bin/runsc")
    ap.add_argument("--state-only", action="store_true",
                    help="only the pinned runsc's state operations and their bare floor")
    ap.add_argument("--execute-only", action="store_true",
                    help="only `1+1` through sandgate and bare, interleaved")
    a = ap.parse_args()
    if a.state_only:
        return state_only(a)
    if a.execute_only:
        return execute_only(a)
    if a.old == "/usr/bin/runsc" and not os.path.exists(a.old):
        subprocess.run(["apt-get", "install", "-y", "-q", "runsc"], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
                       stdout=subprocess.DEVNULL)
    runtimes = [("plain (--sandbox none)", ["--sandbox", "none"], None),
                (f"runsc {version(a.old)}, ptrace", ["--runsc", a.old, "--platform", "ptrace"],
                 "old"),
                (f"runsc {version(a.new)}, systrap", ["--runsc", a.new, "--platform", "systrap"],
                 "new")]
    tp, ops, sys_us = {}, {}, {}
    for name, args, key in runtimes:
        print(f"runtime: {name}", file=sys.stderr)
        d = daemon(args)
        try:
            tp[name] = throughput(d, a)
            sys_us[name] = syscall_us(d)
            if key == "new":
                bare = runsc_floor.StateFloor(a.new, SETUP)
                try:
                    ops[name] = state_ops(d, a, bare)
                finally:
                    bare.close()
            elif key:
                ops[name] = state_ops(d, a)
        finally:
            d.stop()
    print("runtime: the pinned runsc, bare (its own floor)", file=sys.stderr)
    floor = runsc_floor.measure(a.new, a.runs, 32, a.duration)
    print("runtime: the pinned runsc with --strace", file=sys.stderr)
    by_thread, by_call = syscalls_per_execute(a.new)
    plain = tp[runtimes[0][0]]
    print(f"# The sandbox runtime side by side — {time.strftime('%Y-%m-%d')}\n")
    print(f"Machine: {os.cpu_count()} cores; one sandgate build "
          f"({subprocess.run([os.path.join(os.environ['SG_BUILDDIR'], 'sandgate'), '--version'], capture_output=True, text=True).stdout.strip()}); "
          f"each runtime its own daemon, one after the other. ms unless said otherwise; "
          f"median (min-max).\n")
    print("| | execute p50 | ÷ plain | 32 busy, executes/s | ÷ plain | idle CPU per context "
          "(% of a core) | memory per idle context (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for name, _, _ in runtimes:
        t = tp[name]
        print(f"| {name} | {stats(t['p50'])} | {med(t['p50']) / med(plain['p50']):.2f}x | "
              f"{t['rps']:.0f}{' (' + str(t['errors']) + ' errors)' if t['errors'] else ''} | "
              f"{t['rps'] / plain['rps']:.2f}x | {t['idle']:.3f} | {t['mem']:.0f} |")
    print_floor(floor, plain, tp[runtimes[2][0]], runtimes[2][0])
    print_state(ops, [n for n, _, k in runtimes if k], a.rounds)
    total = sum(by_thread.values())
    print(f"\nWhere an execute's time goes. One getppid() from Python, µs: " +
          ", ".join(f"{n} {sys_us[n]:.2f}" for n, _, _ in runtimes) +
          f". A `1+1` makes {total:.0f} system calls in the sandbox (pinned runsc, --strace): " +
          ", ".join(f"{w} {v:.1f}" for w, v in by_thread.most_common()) + "; by call: " +
          ", ".join(f"{c} {v:.1f}" for c, v in by_call.most_common(8)) + ".")
    extra = {n: total * (sys_us[n] - sys_us[runtimes[0][0]]) / 1000 for n in names}
    print("Those calls at each runtime's cost over plain's, ms per execute: " +
          ", ".join(f"{n} {v:.2f}" for n, v in extra.items()) + ".")


if __name__ == "__main__":
    main()
