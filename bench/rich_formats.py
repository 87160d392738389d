#!/usr/bin/python3
"""What E2B's rich formats (e2b/chart, e2b/data; kernelmgr/guest/kernel.py)
cost: POST /execute round trip of a plot cell and a DataFrame cell in one
context (gVisor, --pool-size 2), with "rich_formats": true (on, the
default) and false (off, the switch: the kernel's formatters do nothing).
Interleaved: each round runs every (cell, on/off) once, so a busy spell of
the machine falls on all alike.  Each execute is checked: `chart` or `data`
present when on, absent when off.

usage: bench/rich_formats.py [--runs N] [--warm-up N]
       (root, a build in build/ or SG_BUILDDIR)
Prints a Markdown table.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
from sgd import Daemon, TOKEN  # noqa: E402

CELLS = {
    "plot (line, 3 series x 200 points)":
        ("import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 10, 200)\n"
         "fig, ax = plt.subplots()\nfor k in range(3):\n    ax.plot(x, np.sin(x + k), label=str(k))\n"
         "ax.set_title('t')\nplt.show()", "chart"),
    "DataFrame (1000 rows x 5 columns)":
        ("import pandas as pd\nimport numpy as np\n"
         "pd.DataFrame(np.arange(5000.0).reshape(1000, 5), columns=list('abcde'))", "data"),
}


def run(conn, ctx, code, rich):
    body = json.dumps({"code": code, "context_id": ctx, "rich_formats": rich})
    t0 = time.perf_counter()
    conn.request("POST", "/execute", body, {"Authorization": "Bearer " + TOKEN,
                                            "Content-Type": "application/json"})
    data = conn.getresponse().read()
    took = time.perf_counter() - t0
    lines = [json.loads(l) for l in data.decode().splitlines() if l.strip()]
    return took, [l for l in lines if l.get("type") == "result"], lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warm-up", type=int, default=3)
    args = ap.parse_args()
    d = Daemon("--pool-size", "2")
    try:
        u = urllib.parse.urlparse(d.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        _, c = d.json("POST", "/contexts", {"language": "python"}, timeout=120)
        modes = ("on", "off")
        times = {(name, mode): [] for name in CELLS for mode in modes}
        for i in range(args.warm_up + args.runs):
            for name, (code, key) in CELLS.items():
                for mode in modes:
                    took, results, lines = run(conn, c["id"], code, mode == "on")
                    has = any(key in r for r in results)
                    if has != (mode == "on"):
                        sys.exit(f"{name}, {mode}: {key} {'missing' if not has else 'present'}: "
                                 f"{str(lines)[:500]}")
                    if i >= args.warm_up:
                        times[(name, mode)].append(took * 1000)
        print(f"runs: {args.runs} per cell and mode (after {args.warm_up} warm-up), gVisor\n")
        print("| cell | formats on: median ms (p90) | off: median ms (p90) | cost (median) |")
        print("| --- | --- | --- | --- |")
        for name in CELLS:
            row = []
            for mode in modes:
                t = sorted(times[(name, mode)])
                row.append((statistics.median(t), t[int(len(t) * 0.9) - 1]))
            print(f"| {name} | {row[0][0]:.1f} ({row[0][1]:.1f}) | {row[1][0]:.1f} "
                  f"({row[1][1]:.1f}) | {row[0][0] - row[1][0]:+.1f} ms |")
    finally:
        d.stop()


main()
