#!/usr/bin/python3
"""Streaming and large-output benchmark.

Streaming delay: the code prints its clock (time.time()) 100 times, 20 ms
apart; for every line the client notes when it arrived.  arrival - printed
is the delay from the kernel writing output to the client having it:
through sandgate's NDJSON stream, and, as the floor, for a direct ZeroMQ
client (jupyter_client) on the same kernel's iopub.

Large outputs: 10 MB of stdout and a 5 MB PNG (display_data, base64 on the
wire), each through POST /execute as a stream and as one JSON document,
against the direct ZeroMQ client: wall time, throughput, and sandgate's
peak RSS during the transfer (VmHWM, reset before each run through
/proc/PID/clear_refs).

usage: bench/stream.py [--sandbox runsc|none] [--runs N]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
from sgd import Daemon, TOKEN  # noqa: E402
from jupyter_client import BlockingKernelClient  # noqa: E402

TICKS = ("import time\nfor _ in range(100):\n    print(repr(time.time()), flush=True)\n"
         "    time.sleep(0.02)\n")
BIG_STDOUT = "import sys\nsys.stdout.write('x' * 10_000_000)\nsys.stdout.flush()"
BIG_PNG = ("import os\nfrom IPython.display import Image, display\n"
           "display(Image(data=b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(5_000_000), format='png'))")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


class Conn:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)

    def execute(self, body, accept=None, on_line=None):
        h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
        if accept:
            h["Accept"] = accept
        self.c.request("POST", "/execute", json.dumps(body), h)
        r = self.c.getresponse()
        if on_line is None:
            return r.read()
        n = 0
        while True:
            line = r.readline()
            if not line:
                return n
            n += len(line)
            on_line(json.loads(line))


def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandbox", default="runsc")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()

    d = Daemon("--sandbox", a.sandbox, "--pool-size", "0", "--max-output", str(64 << 20))
    try:
        st, ctx = d.json("POST", "/contexts", {})
        cid = ctx["id"]
        conn = Conn(d.url)
        conn.execute({"code": "1+1", "context_id": cid}, "application/json")
        rec = json.load(open(f"{d.dir}/sessions/{cid}.json"))
        conn_dir = f"{d.dir}/kernels/{rec['sandbox_id']}/conn"
        info = json.load(open(f"{conn_dir}/kernel.json"))
        if a.sandbox == "runsc":
            info["ip"] = f"{conn_dir}/kernel"
        kc = BlockingKernelClient()
        kc.load_connection_info(info)
        kc.start_channels()
        kc.wait_for_ready(timeout=60)

        print(f"sandgate streaming and large-output benchmark — {time.strftime('%Y-%m-%d')}, "
              f"{os.cpu_count()} cores, sandbox {a.sandbox}; client and daemon share the "
              f"cores\n")

        # --- streaming delay ---------------------------------------------------------
        def delays_sandgate():
            out = []

            def on_line(l):
                if l["type"] == "stdout":
                    now = time.time()
                    out.extend(now - float(t) for t in l["text"].split())
            conn.execute({"code": TICKS, "context_id": cid}, on_line=on_line)
            return out

        def delays_direct():
            out = []

            def hook(m):
                if m["msg_type"] == "stream":
                    now = time.time()
                    out.extend(now - float(t) for t in m["content"]["text"].split())
            kc.execute_interactive(TICKS, timeout=120, output_hook=hook)
            return out

        sg, direct = [], []
        for _ in range(a.runs):  # interleaved
            sg += delays_sandgate()
            direct += delays_direct()
        print("Streaming delay, printed → received (ms), "
              f"{len(sg)} lines each\n")
        print("| path | median | p90 | p99 | max |")
        print("|---|---|---|---|---|")
        for name, xs in [("direct ZeroMQ (iopub)", direct), ("sandgate NDJSON", sg)]:
            ms = [x * 1000 for x in xs]
            print(f"| {name} | {statistics.median(ms):.2f} | {pct(ms, 90):.2f} | "
                  f"{pct(ms, 99):.2f} | {max(ms):.2f} |")
        print(f"\nsandgate adds {(statistics.median(sg) - statistics.median(direct)) * 1000:.2f} "
              f"ms at the median\n")

        # --- large outputs ------------------------------------------------------------
        pid = d.proc.pid
        print(f"Large outputs: medians of {a.runs} runs\n")
        print("| output | path | seconds | MB/s (payload) | sandgate peak RSS MiB |")
        print("|---|---|---|---|---|")
        for label, code, size in [("10 MB stdout", BIG_STDOUT, 10e6),
                                  ("5 MB PNG", BIG_PNG, 5e6)]:
            def direct_run():
                kc.execute_interactive(code, timeout=600, output_hook=lambda m: None)

            def ndjson_run():
                conn.execute({"code": code, "context_id": cid}, on_line=lambda l: None)

            def json_run():
                body = conn.execute({"code": code, "context_id": cid}, "application/json")
                assert len(body) > size, len(body)

            for path, fn in [("direct ZeroMQ", direct_run), ("sandgate NDJSON", ndjson_run),
                             ("sandgate JSON", json_run)]:
                times, peaks = [], []
                for _ in range(a.runs):
                    reset_peak(pid)
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
                    peaks.append(peak_rss(pid))
                t = statistics.median(times)
                print(f"| {label} | {path} | {t:.3f} | {size / t / 1e6:.1f} | "
                      f"{max(peaks) / 2**20:.1f} |", flush=True)
        kc.stop_channels()
    finally:
        for c in d.json("GET", "/contexts")[1] or []:  # sessions outlive the daemon by design
            d.json("DELETE", "/contexts/" + c["id"])
        d.stop()


if __name__ == "__main__":
    main()
