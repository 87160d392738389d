#!/usr/bin/python3
"""REST benchmark: warm POST /execute round trip (JSON and NDJSON) against a
direct ZeroMQ client (jupyter_client) to the same sandboxed kernel, and first
result for a new context with and without the warm pool.

usage: bench/rest.py [--runs N] [--new-runs M] [--preload-runs K]   (needs a build in build/)
Prints a Markdown table of medians (min..max) and the ratios.
"""
import argparse
import json
import os
import statistics
import sys
import time
import http.client
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
from sgd import Daemon, TOKEN  # noqa: E402

PRELOAD = "import pandas, matplotlib.pyplot"
from jupyter_client import BlockingKernelClient  # noqa: E402


def stats(xs):
    return statistics.median(xs), min(xs), max(xs), len(xs)


def row(name, s):
    print(f"| {name:<46} | {s[0]:9.2f} | {s[1]:9.2f} | {s[2]:9.2f} | {s[3]:5d} |", flush=True)


class Client:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    def post(self, path, body, accept=None):
        h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
        if accept:
            h["Accept"] = accept
        self.c.request("POST", path, json.dumps(body), h)
        r = self.c.getresponse()
        data = r.read()
        return r.status, data


def timed(fn, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--new-runs", type=int, default=200)
    ap.add_argument("--preload-runs", type=int, default=0)
    a = ap.parse_args()

    d = Daemon("--pool-size", "1", "--max-kernels", "8")
    try:
        cl = Client(d.url)
        st, data = cl.post("/contexts", {})
        ctx = json.loads(data)["id"]
        cl.post("/execute", {"code": "1+1", "context_id": ctx}, "application/json")

        # A second, direct client on the same kernel's ZeroMQ sockets.
        rec = json.load(open(f"{d.dir}/sessions/{ctx}.json"))
        conn_dir = f"{d.dir}/kernels/{rec['sandbox_id']}/conn"
        info = json.load(open(f"{conn_dir}/kernel.json"))
        info["ip"] = f"{conn_dir}/kernel"
        kc = BlockingKernelClient()
        kc.load_connection_info(info)
        kc.start_channels()
        kc.wait_for_ready(timeout=30)

        def direct():
            kc.execute_interactive("1+1", timeout=30, output_hook=lambda m: None)

        print(f"sandgate REST benchmark — {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; "
              f"medians of {a.runs} warm runs, {a.new_runs} new-context runs (ms)\n")
        print(f"| {'measure':<46} | {'median':>9} | {'min':>9} | {'max':>9} | {'runs':>5} |")
        print(f"|{'-' * 48}|{'-' * 11}|{'-' * 11}|{'-' * 11}|{'-' * 7}|")
        floor = stats(timed(direct, a.runs))
        row("direct ZeroMQ (jupyter_client), gVisor kernel", floor)
        js = stats(timed(lambda: cl.post("/execute", {"code": "1+1", "context_id": ctx},
                                         "application/json"), a.runs))
        row("POST /execute, JSON", js)
        nd = stats(timed(lambda: cl.post("/execute", {"code": "1+1", "context_id": ctx}),
                         a.runs))
        row("POST /execute, NDJSON stream", nd)
        from peers import NotebookKernel  # tornado's WebSocket client
        wsk = NotebookKernel(d.url, TOKEN, ctx)
        wsk.execute()
        ws = stats(timed(wsk.execute, a.runs))
        row("WebSocket /api/kernels/{id}/channels", ws)
        wsk.close()
        kc.stop_channels()

    finally:
        d.stop()

    # New context to first result, with and without the pool, interleaved so
    # that both see the same machine; each waits until the pooled daemon has
    # refilled, so no pool start runs behind a measurement but its own.
    # With --preload-runs, a third daemon's pool imports pandas and
    # matplotlib before a kernel is claimable; the pooled daemon's first
    # execution of the same imports is its counterpart.
    pooled = Daemon("--pool-size", "1", "--max-kernels", "8")
    cold_d = Daemon("--pool-size", "0", "--max-kernels", "8")
    preload_d = Daemon("--pool-size", "1", "--max-kernels", "8", "--preload", PRELOAD) \
        if a.preload_runs else None
    try:
        def pool_ready(daemon):
            deadline = time.time() + 180
            while daemon and time.time() < deadline:
                st, h = daemon.json("GET", "/health")
                if h["kernels"]["pool_ready"] >= 1 and h["kernels"]["pool_starting"] == 0:
                    return
                time.sleep(0.1)

        def new_context(daemon, code="1+1"):
            pool_ready(pooled)
            pool_ready(preload_d)
            cl = Client(daemon.url)
            t0 = time.perf_counter()
            st, data = cl.post("/contexts", {})
            cid = json.loads(data)["id"]
            cl.post("/execute", {"code": code, "context_id": cid}, "application/json")
            took = (time.perf_counter() - t0) * 1000
            daemon.json("DELETE", "/contexts/" + cid)
            return took

        warm_t, cold_t, imp_t, pre_t = [], [], [], []
        for i in range(max(a.new_runs, a.preload_runs)):
            if i < a.new_runs:
                warm_t.append(new_context(pooled))
                cold_t.append(new_context(cold_d))
            if i < a.preload_runs:
                imp_t.append(new_context(pooled, PRELOAD + "; 1+1"))
                pre_t.append(new_context(preload_d, PRELOAD + "; 1+1"))
            if (i + 1) % 20 == 0:
                print(f"  ({i + 1} new-context rounds)", file=sys.stderr, flush=True)
        warm, cold = stats(warm_t), stats(cold_t)
        row("new context to first result, warm pool", warm)
        row("new context to first result, no pool (cold)", cold)
        if a.preload_runs:
            row("same, first result of pandas+matplotlib, pool", stats(imp_t))
            row("same, pool with them preloaded (--preload)", stats(pre_t))
    finally:
        pooled.stop()
        cold_d.stop()
        if preload_d:
            preload_d.stop()
    print(f"\nratios: JSON / direct {js[0] / floor[0]:.2f}x, NDJSON / direct "
          f"{nd[0] / floor[0]:.2f}x, WebSocket / direct {ws[0] / floor[0]:.2f}x, warm pool / cold {warm[0] / cold[0]:.3f}")


if __name__ == "__main__":
    main()
