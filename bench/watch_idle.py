#!/usr/bin/python3
"""What an idle directory watch costs (gateway/envd/watch.c; the helper
kernelmgr/guest/watch.c blocked in poll on inotify and its stdin).

One E2B sandbox under real runsc.  Windows of --window seconds alternate:
no watch, then --watches idle watches of /home/user (envd CreateWatcher,
as E2B's Python SDK makes them; nothing changes in the directory), for
--rounds pairs.  Each window reads the CPU time of the sandbox's processes
(runsc-sandbox and its children, and the host's `runsc exec` of each watch:
/proc/PID/task/*/schedstat) and of sandgate, and their memory (RSS).  Reported:
CPU ms a second in each, their ratio (watches / none, median of the pairs)
and the RSS a watch adds.  The baseline is the same sandbox without a watch,
in the same run.

usage: bench/watch_idle.py [--watches N] [--window S] [--rounds N]
  SG_BUILDDIR selects the build (default ./build).  Prints a Markdown table.
"""
import argparse
import json
import os
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
import sgd  # noqa: E402
from sgd import TOKEN  # noqa: E402

def tree(pid):
    """pid and its descendants."""
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def cpu_rss(pids):
    """CPU seconds of pids' threads (schedstat: ns) and their RSS bytes, summed."""
    cpu = rss = 0
    for p in pids:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                cpu += int(open(f"/proc/{p}/task/{t}/schedstat").read().split()[0]) / 1e9
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            rss += int(f[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    return cpu, rss


def execs(sid):
    """The host's `runsc exec` processes of sandbox sid (one a watch)."""
    out = []
    for p in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"exec" in argv and any(sid.encode() in x for x in argv) and \
                argv[0].endswith(b"runsc"):
            out.append(int(p))
    return out


def rpc(d, method, body, sid):
    req = urllib.request.Request(f"{d.url}/filesystem.Filesystem/{method}",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {TOKEN}",
                                          "E2b-Sandbox-Id": sid})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"{}")


def window(d, sid, seconds):
    """CPU ms a second of the sandbox (with its `runsc exec`s) and of
    sandgate, and their RSS."""
    sb = lambda: [q for p in sgd.sandbox_pids(sid) + execs(sid) for q in tree(p)]  # noqa: E731
    c0, _ = cpu_rss(sb())
    g0, _ = cpu_rss([d.proc.pid])
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    c1, rss = cpu_rss(sb())
    g1, _ = cpu_rss([d.proc.pid])
    return (c1 - c0) * 1000 / dt, (g1 - g0) * 1000 / dt, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--watches", type=int, default=10)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    d = sgd.Daemon("--pool-size", "0", "--pause-after", "0")
    try:
        st, _, body = d.request("POST", "/sandboxes", {"templateID": "base"},
                                headers={"X-API-Key": TOKEN}, token=None)
        sid = json.loads(body)["sandboxID"]
        d.request("POST", "/execute", {"code": "1"}, headers={"E2b-Sandbox-Id": sid})
        pairs = []
        for _ in range(a.rounds):
            none = window(d, sid, a.window)
            ids = [rpc(d, "CreateWatcher", {"path": "/home/user"}, sid)["watcherId"]
                   for _ in range(a.watches)]
            time.sleep(1)  # their start settles
            some = window(d, sid, a.window)
            for i in ids:
                rpc(d, "RemoveWatcher", {"watcherId": i}, sid)
            pairs.append((none, some))
    finally:
        d.stop()
    med = lambda xs: statistics.median(xs)  # noqa: E731
    sb0, sb1 = med([p[0][0] for p in pairs]), med([p[1][0] for p in pairs])
    gw0, gw1 = med([p[0][1] for p in pairs]), med([p[1][1] for p in pairs])
    rss = med([(p[1][2] - p[0][2]) / a.watches for p in pairs])
    ratio = lambda x, y: f"{y / x:.2f}x" if x > 0 else "-"  # noqa: E731
    print(f"{a.watches} idle watches of /home/user against none, one sandbox (runsc), "
          f"{a.rounds} alternating pairs of {a.window:.0f} s windows, medians\n")
    print("| | no watch | watches | ratio |\n|---|---|---|---|")
    print(f"| sandbox CPU ms/s | {sb0:.2f} | {sb1:.2f} | {ratio(sb0, sb1)} |")
    print(f"| sandgate CPU ms/s | {gw0:.2f} | {gw1:.2f} | {ratio(gw0, gw1)} |")
    print(f"\nRSS a watch adds (in the sandbox, and its host `runsc exec`): {rss / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
