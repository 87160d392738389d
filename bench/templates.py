#!/usr/bin/python3
"""A template with preload code (`import pandas as pd`): POST /contexts
{"template"} to the first result of `pd.__version__`, three ways, --rounds
times each:
  pool claim     a warm kernel of the template is ready (--pool-size pd=1):
                 the preload ran before the request
  from snapshot  no pool kernel: the template's own snapshot (taken once,
                 after the preload) is restored
  fresh          no pool kernel and no snapshot (a second template, same
                 preload, never pooled): a kernel starts and runs the preload
The first is measured with the pool refilled between rounds (the context
deleted, the pool ready again); the other two alternate on one daemon
restarted on the same state directory with --pool-size pd=0, so the
snapshot taken before is there.

usage: bench/templates.py [--rounds N]   (root, a build in build/ or SG_BUILDDIR)
Prints a Markdown table.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
from sgd import Daemon  # noqa: E402

PRELOAD = "import pandas as pd"


def first_result(d, template):
    """Seconds from POST /contexts to pd.__version__'s result, and the id."""
    t0 = time.perf_counter()
    st, c = d.json("POST", "/contexts", {"template": template}, timeout=300)
    if st != 201:
        raise RuntimeError(f"POST /contexts: {st} {c}")
    st, r = d.json("POST", "/execute", {"code": "pd.__version__", "context_id": c["id"]},
                   headers={"Accept": "application/json"}, timeout=300)
    took = time.perf_counter() - t0
    if st != 200 or not r.get("results"):
        raise RuntimeError(f"execute: {st} {r}")
    return took, c["id"]


def template(d, name):
    st, ts = d.json("GET", "/templates")
    return next((t for t in ts if t["name"] == name), {}) if st == 200 else {}


def wait(d, pred, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for the pool")


def p50(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    d = Daemon("--pool-size", "0", "--pause-after", "0", "--max-kernels", "200",
               "--template", f"pd=preload={PRELOAD}", "--pool-size", "pd=1",
               "--template", f"fresh=preload={PRELOAD}")
    claim, snap, fresh = [], [], []
    try:
        ready = lambda: template(d, "pd").get("pool_ready") == 1  # noqa: E731
        wait(d, lambda: ready() and template(d, "pd").get("snapshot_bytes", 0) > 0)
        snap_bytes = template(d, "pd")["snapshot_bytes"]
        for _ in range(a.rounds):
            wait(d, ready)
            took, ctx = first_result(d, "pd")
            claim.append(took)
            d.json("DELETE", f"/contexts/{ctx}")
        wait(d, ready)
        d.cmd = [x if x != "pd=1" else "pd=0" for x in d.cmd]
        d.restart()
        for _ in range(a.rounds):
            for name, into in (("pd", snap), ("fresh", fresh)):
                took, ctx = first_result(d, name)
                into.append(took)
                d.json("DELETE", f"/contexts/{ctx}")
    finally:
        d.stop()
    base = p50(claim)
    print(f"template `pd=preload={PRELOAD}`, {a.rounds} rounds each, POST /contexts to the "
          "first result of `pd.__version__`; its snapshot "
          f"{snap_bytes / 2**20:.1f} MiB\n")
    print("| start | p50 | min | max | × pool claim |")
    print("| --- | --- | --- | --- | --- |")
    for name, xs in (("pool claim", claim), ("from the template's snapshot", snap),
                     ("fresh start + preload", fresh)):
        print(f"| {name} | {p50(xs) * 1000:.0f} ms | {min(xs) * 1000:.0f} ms | "
              f"{max(xs) * 1000:.0f} ms | {p50(xs) / base:.1f}x |")


if __name__ == "__main__":
    main()
