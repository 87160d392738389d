#!/usr/bin/python3
"""Snapshots, fork and roll-back: what each costs a client, against runsc's
own floor measured in the same run.

An idle numpy session (`arr = np.arange(10**6)`, a 10^6-element list) is
snapshotted, forked, rolled back and cloned, --rounds times each:
  snapshot      POST /contexts/{id}/snapshots, and how long the context did
                not answer meanwhile (a second client runs `1` in it 50 ms
                after the snapshot began: until its result)
  from snapshot POST /contexts {snapshot} to its first result
  fork          POST /contexts/{id}/fork to the new context's first result
  roll back     POST /contexts/{id}/restore to the context's next result
  8 at once     8 contexts from one snapshot, until all 8 answered
and the bytes per snapshot.  The floor: runsc's own time on each
operation's path (`runsc checkpoint`, `delete`, `restore` of the very
sandboxes, as sandgate's debug log times them in the same run): what
sandgate adds is the rest, "sandgate's share" (each round's time less its
own floor).  8 at once: its floor is the 8 restores as runsc took them,
two at a time, divided by the CPUs; 8 uncontended ones divided by the CPUs
are printed below the table.

usage: bench/snapshot.py [--rounds N]   (root, a build in build/ or SG_BUILDDIR)
Prints a Markdown table.
"""
import argparse
import concurrent.futures
import os
import re
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
from sgd import Daemon  # noqa: E402

STEP = re.compile(r"sandbox (\S+): (runsc \w+|the relay's \w+) in (\d+) ms")


class StepDaemon(Daemon):
    """A daemon at debug level whose log's runsc steps are kept (each
    operation's floor: runsc's own time on the very sandbox)."""

    def _drain(self):
        self.steps = []
        for line in self.proc.stderr:
            m = STEP.search(line)
            if m:
                self.steps.append((time.perf_counter(), m.group(2), int(m.group(3))))
            self.log.append(line)
            del self.log[:-200]

    def steps_since(self, t, what):
        return sum(ms for at, name, ms in self.steps if at >= t and name == what)

SETUP = "import numpy as np\narr = np.arange(10**6)\nbig = list(range(10**6))"


def run(d, ctx, code="1"):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": ctx},
                   headers={"Accept": "application/json"}, timeout=300)
    if st != 200 or r.get("error"):
        raise RuntimeError(f"execute: {st} {r}")


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def stats(xs):
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    n = a.rounds
    d = StepDaemon("--pool-size", "0", "--pause-after", "0", "--max-snapshots", "0",
                   "--max-kernels", "64", "--log-level", "debug")
    rows = {}

    def measure(name, fn, floor_of, what):
        """fn n times: its ms, and runsc's own ms on its path (floor_of(t0))."""
        xs, fl = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            xs.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.3)  # the steps' log lines
            fl.append(floor_of(t0))
        rows[name] = (xs, what, fl)

    try:
        st, c = d.json("POST", "/contexts", {}, timeout=300)
        ctx = c["id"]
        run(d, ctx, SETUP)
        run(d, ctx)
        snaps, unresp, sizes, fl_snap, fl_unresp = [], [], [], [], []
        last = None
        for _ in range(n):
            time.sleep(0.5)
            probe = {}

            def second_client():  # runs `1` once the snapshot is under way
                time.sleep(0.05)
                run(d, ctx)
                probe["end"] = time.perf_counter()

            t = threading.Thread(target=second_client)
            t0 = time.perf_counter()
            t.start()
            st, s = d.json("POST", f"/contexts/{ctx}/snapshots", {}, timeout=300)
            t1 = time.perf_counter()
            t.join()
            time.sleep(0.3)
            if st != 201:
                raise RuntimeError(f"snapshot: {st} {s}")
            snaps.append((t1 - t0) * 1000)
            unresp.append((probe["end"] - t0) * 1000)
            cp_del = d.steps_since(t0, "runsc checkpoint") + d.steps_since(t0, "runsc delete")
            fl_snap.append(cp_del)
            fl_unresp.append(cp_del + d.steps_since(t0, "runsc restore"))
            sizes.append(s["bytes"])
            last = s["id"]
        rows["snapshot (201)"] = (snaps, "checkpoint + delete", fl_snap)
        rows["... context unresponsive meanwhile"] = (unresp, "checkpoint + delete + restore",
                                                     fl_unresp)

        def from_snapshot():
            st, k = d.json("POST", "/contexts", {"snapshot": last}, timeout=300)
            run(d, k["id"])
            return k["id"]

        made = []
        measure("new context from a snapshot, to its first result",
                lambda: made.append(from_snapshot()),
                lambda t0: d.steps_since(t0, "runsc restore"), "restore")
        for k in made:
            d.json("DELETE", "/contexts/" + k)

        def fork():
            st, k = d.json("POST", f"/contexts/{ctx}/fork", {}, timeout=300)
            run(d, k["id"])
            made.append(k["id"])

        made = []
        # The parent's resume and the child's restore run side by side.
        measure("fork, to the new context's first result", fork,
                lambda t0: d.steps_since(t0, "runsc checkpoint") +
                d.steps_since(t0, "runsc delete") + d.steps_since(t0, "runsc restore") / 2,
                "checkpoint + delete + restore")
        for k in made:
            d.json("DELETE", "/contexts/" + k)

        def roll_back():
            d.json("POST", f"/contexts/{ctx}/restore", {"snapshot": last}, timeout=300)
            run(d, ctx)

        measure("roll back, to the context's next result", roll_back,
                lambda t0: d.steps_since(t0, "runsc restore"), "restore")

        def eight():
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                made.extend(pool.map(lambda _: from_snapshot(), range(8)))
            for k in made:
                d.json("DELETE", "/contexts/" + k)
            made.clear()

        made = []
        # 8 restores share the machine's CPUs: the 8 restores of the round
        # as runsc took them (two at a time each takes longer than one
        # alone) divided by the CPUs; and, for comparison, 8 uncontended
        # ones (the restores above) divided by the CPUs.
        cpus = os.cpu_count() or 1
        one = statistics.median(rows["new context from a snapshot, to its first result"][2])
        measure("8 contexts from one snapshot, all answering", eight,
                lambda t0: d.steps_since(t0, "runsc restore") / cpus,
                f"the 8 restores / {cpus} CPUs")
    finally:
        d.stop()

    print(f"Snapshots — {time.strftime('%Y-%m-%d')}, runsc --platform ptrace, an idle numpy "
          f"session (np.arange(10**6) and a 10^6-element list), {n} rounds; ms, median "
          f"(min-max). The floor is runsc's own time on the operation's path, on the very "
          f"sandboxes, from sandgate's debug log in the same run.\n")
    # sandgate's own share: each round's time less its own floor (steadier
    # than the medians' difference on a machine whose load changes).
    print("| operation | sandgate | runsc on its path | floor | vs floor | sandgate's share |")
    print("|---|---|---|---|---|---|")
    for name, (xs, what, fl) in rows.items():
        print(f"| {name} | {stats(xs)} | {what} | {stats(fl)} | "
              f"{statistics.median(xs) / statistics.median(fl):.2f}x | "
              f"{stats([x - f for x, f in zip(xs, fl)])} |")
    eight = statistics.median(rows["8 contexts from one snapshot, all answering"][0])
    print(f"\n8 uncontended restores / {cpus} CPUs: {8 * one / cpus:.0f} ms "
          f"(8 at once: {eight / (8 * one / cpus):.2f}x)")
    print(f"\nbytes per snapshot {statistics.median(sizes) / 2**20:.1f} MiB "
          f"(memory image and the workspace's data)")


if __name__ == "__main__":
    main()
