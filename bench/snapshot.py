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
and the bytes per snapshot.  The floor: `runsc checkpoint` and `runsc
restore` of a bare sandbox running the same Python state (no sandgate),
timed directly: a snapshot cannot be cheaper than both, a start from one
or a roll-back than a restore.

usage: bench/snapshot.py [--rounds N]   (root, a build in build/ or SG_BUILDDIR)
Prints a Markdown table.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "gateway")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
from sgd import Daemon  # noqa: E402

SETUP = "import numpy as np\narr = np.arange(10**6)\nbig = list(range(10**6))"
PY_STATE = SETUP + "\nimport time\nwhile True: time.sleep(3600)"


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


def runsc_floor(rounds):
    """runsc checkpoint and restore of a bare sandbox holding the same
    Python state: (checkpoint ms list, restore ms list)."""
    tmp = tempfile.mkdtemp(prefix="sg-bench-floor-")
    root = os.path.join(tmp, "state")
    bundle = os.path.join(tmp, "bundle")
    os.makedirs(bundle)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.0",
                   "process": {"user": {"uid": 0, "gid": 0}, "cwd": "/",
                               "args": ["/usr/bin/python3", "-c", PY_STATE],
                               "env": ["PATH=/usr/bin:/bin"]},
                   "root": {"path": "/", "readonly": True}, "hostname": "floor",
                   "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                              {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}],
                   "linux": {"namespaces": [{"type": t} for t in
                                            ("pid", "ipc", "uts", "mount", "network")]}}, f)
    runsc = ["runsc", "--root", root, "--network=none", "--platform", "ptrace"]
    cps, rss = [], []
    try:
        subprocess.run(runsc + ["run", "-detach", "-bundle", bundle, "floor"], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
        time.sleep(3)  # numpy imported, the list made
        for i in range(rounds):
            img = os.path.join(tmp, f"img{i}")
            os.makedirs(img)
            cps.append(timed(lambda: subprocess.run(
                runsc + ["checkpoint", "--image-path", img, "floor"], check=True,
                stdin=subprocess.DEVNULL, capture_output=True, timeout=120)))
            subprocess.run(runsc + ["delete", "-force", "floor"], capture_output=True)
            rss.append(timed(lambda: subprocess.run(
                runsc + ["restore", "-detach", "-bundle", bundle, "--image-path", img, "floor"],
                check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=120)))
            shutil.rmtree(img)
    finally:
        subprocess.run(runsc + ["delete", "-force", "floor"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return cps, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    n = a.rounds
    floor_cp, floor_rs = runsc_floor(n)
    d = Daemon("--pool-size", "0", "--pause-after", "0", "--max-snapshots", "0",
               "--max-kernels", "64")
    rows = {}
    try:
        st, c = d.json("POST", "/contexts", {}, timeout=300)
        ctx = c["id"]
        run(d, ctx, SETUP)
        run(d, ctx)
        snaps, unresp, sizes = [], [], []
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
            if st != 201:
                raise RuntimeError(f"snapshot: {st} {s}")
            snaps.append((t1 - t0) * 1000)
            unresp.append((probe["end"] - t0) * 1000)
            sizes.append(s["bytes"])
            last = s["id"]
        rows["snapshot (201)"] = (snaps, "checkpoint + restore", [
            c + r for c, r in zip(floor_cp, floor_rs)])
        rows["... context unresponsive meanwhile"] = (unresp, "checkpoint + restore", [
            c + r for c, r in zip(floor_cp, floor_rs)])

        def from_snapshot():
            st, k = d.json("POST", "/contexts", {"snapshot": last}, timeout=300)
            run(d, k["id"])
            return k["id"]

        made = []
        rows["new context from a snapshot, to its first result"] = (
            [timed(lambda: made.append(from_snapshot())) for _ in range(n)], "restore", floor_rs)
        for k in made:
            d.json("DELETE", "/contexts/" + k)

        def fork():
            st, k = d.json("POST", f"/contexts/{ctx}/fork", {}, timeout=300)
            run(d, k["id"])
            made.append(k["id"])

        made = []
        rows["fork, to the new context's first result"] = (
            [timed(fork) for _ in range(n)], "checkpoint + 2 restores",
            [c + 2 * r for c, r in zip(floor_cp, floor_rs)])
        for k in made:
            d.json("DELETE", "/contexts/" + k)

        def roll_back():
            d.json("POST", f"/contexts/{ctx}/restore", {"snapshot": last}, timeout=300)
            run(d, ctx)

        rows["roll back, to the context's next result"] = (
            [timed(roll_back) for _ in range(n)], "restore", floor_rs)

        def eight():
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                ids = list(pool.map(lambda _: from_snapshot(), range(8)))
            made.extend(ids)

        made = []
        eights = []
        for _ in range(max(3, n // 3)):
            eights.append(timed(eight))
            for k in made:
                d.json("DELETE", "/contexts/" + k)
            made = []
        rows["8 contexts from one snapshot, all answering"] = (eights, "restore", floor_rs)
    finally:
        d.stop()

    print(f"Snapshots — {time.strftime('%Y-%m-%d')}, runsc --platform ptrace, an idle numpy "
          f"session (np.arange(10**6) and a 10^6-element list), {n} rounds; ms, median "
          f"(min-max)\n")
    print("| operation | sandgate | runsc floor | floor | vs floor |")
    print("|---|---|---|---|---|")
    for name, (xs, what, fl) in rows.items():
        print(f"| {name} | {stats(xs)} | {what} | {stats(fl)} | "
              f"{statistics.median(xs) / statistics.median(fl):.2f}x |")
    print(f"\nrunsc checkpoint alone {stats(floor_cp)} ms, restore alone {stats(floor_rs)} ms; "
          f"bytes per snapshot {statistics.median(sizes) / 2**20:.1f} MiB "
          f"(memory image and the workspace's data)")


if __name__ == "__main__":
    main()
