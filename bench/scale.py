#!/usr/bin/python3
"""Scaling benchmark: N sessions executing at once, and what idle sessions cost.

For each level N (default 1, 8, 32, 64) wrk runs N connections, one per
context, each posting `1+1` (POST /execute, JSON mode) in a closed loop for
--duration seconds.  Reported per level: executes/s, latency p50 and p99
(wrk's), errors, and sandgate's own CPU (its utime+stime over the run, as a
share of one core) and RSS.  Before the loads, the contexts are created and
left idle: MemAvailable's drop and sandgate's RSS growth, divided by their
number, are the memory of one idle session (sandbox + kernel) and
sandgate's own bytes per session.

usage: bench/scale.py [--sandbox runsc|none] [--levels 1,8,32,64] [--duration S]
                      [--plot FILE.png]
wrk, sandgate and the sandboxes share the machine's cores; so does the load.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
from sgd import Daemon, TOKEN  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def mem_available():
    with open("/proc/meminfo") as f:
        return int(re.search(r"MemAvailable:\s+(\d+) kB", f.read()).group(1)) * 1024


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(field + r":\s+(\d+) kB", f.read()).group(1)) * 1024


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def machine_busy(seconds):
    """The machine's CPU busy in a window, in cores (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return (1 - (i1 - i0) / max(1, t1 - t0)) * os.cpu_count()


def ms(text):
    """wrk's durations ("812.00us", "12.5ms", "1.2s") in milliseconds."""
    m = re.match(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[m.group(2)]


def run_wrk(url, contexts, duration):
    n = len(contexts)
    cmd = ["wrk", "-t", str(n), "-c", str(n), "-d", f"{duration}s", "--latency",
           "--timeout", "60s", "-s", os.path.join(HERE, "execute.lua"), url, "--", TOKEN,
           *contexts]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lat = dict(re.findall(r"^\s*(50|99)%\s+([\d.]+[a-z]+)", out, re.M))
    if "99" not in lat:
        raise RuntimeError("unexpected wrk output:\n" + out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: (.*)$", out, re.M)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": ms(lat["50"]), "p99": ms(lat["99"]),
            "errors": int(errors.group(1)) if errors else 0,
            "socket_errors": sock.group(1) if sock else "", "raw": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandbox", default="runsc")
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--profile", default=None,
                    help="after the levels, one more run at 8 sessions under perf record "
                         "-g on sandgate; its report (symbols by self time) goes to this file")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    top = max(levels)

    d = Daemon("--sandbox", a.sandbox, "--pool-size", "0", "--max-kernels", str(top + 8),
               "--idle-timeout", "0")
    pid = d.proc.pid
    contexts = []
    try:
        time.sleep(1)
        mem0, rss0 = mem_available(), proc_status(pid, "VmRSS")

        def new_context(_):
            st, ctx = d.json("POST", "/contexts", {})
            st, r = d.json("POST", "/execute", {"code": "1+1", "context_id": ctx["id"]},
                           headers={"Accept": "application/json"}, timeout=600)
            assert r["results"][0]["text"] == "2", r
            return ctx["id"]

        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            contexts = list(ex.map(new_context, range(top)))
        started = time.time() - t0
        time.sleep(3)  # let start-up garbage settle
        mem1, rss1 = mem_available(), proc_status(pid, "VmRSS")
        per_session = (mem0 - mem1) / top
        own = (rss1 - rss0) / top
        idle_cores = machine_busy(10)

        print(f"sandgate scaling benchmark — {time.strftime('%Y-%m-%d')}, "
              f"{os.cpu_count()} cores, sandbox {a.sandbox}; wrk closed loop, "
              f"{a.duration} s per level, POST /execute `1+1` (JSON), one context per "
              f"connection; wrk shares the cores with sandgate and the kernels\n")
        print(f"{top} idle sessions (started in {started:.1f} s): "
              f"{per_session / 2**20:.1f} MiB each of machine memory (MemAvailable), "
              f"{own / 1024:.1f} KiB each in sandgate's RSS; at that rate the "
              f"{mem0 / 2**30:.1f} GiB available hold ~{int(mem0 / per_session)} idle "
              f"sessions. While they idle, the machine's CPU is {idle_cores:.2f} cores busy "
              f"(/proc/stat over 10 s; every level below runs with all {top} alive)\n")
        print("| sessions | executes/s | p50 ms | p99 ms | errors | sandgate CPU (% of a core) "
              "| sandgate RSS MiB |")
        print("|---|---|---|---|---|---|---|")
        rows = []
        for n in levels:
            c0, w0 = cpu_seconds(pid), time.time()
            r = run_wrk(d.url, contexts[:n], a.duration)
            cpu = (cpu_seconds(pid) - c0) / (time.time() - w0) * 100
            r.update(n=n, cpu=cpu, rss=proc_status(pid, "VmRSS") / 2**20)
            rows.append(r)
            print(f"| {n} | {r['rps']:.1f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                  f"{r['errors']}{' ' + r['socket_errors'] if r['socket_errors'] else ''} | "
                  f"{cpu:.1f} | {r['rss']:.1f} |", flush=True)
        print(f"\nsandgate peak RSS {proc_status(pid, 'VmHWM') / 2**20:.1f} MiB")
        if a.plot:
            plot(rows, a.plot, a.sandbox)
        if a.profile:
            profile(d, pid, contexts[:min(8, top)], a.duration, a.profile)
    finally:
        for c in contexts:  # sessions outlive the daemon by design
            d.json("DELETE", "/contexts/" + c)
        d.stop()


def profile(d, pid, contexts, duration, path):
    """sandgate's own CPU, by function, under load (perf, call graphs)."""
    data = path + ".data"
    perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-o", data, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    r = run_wrk(d.url, contexts, duration)
    perf.send_signal(2)
    perf.wait()
    report = ""
    for sort in ("dso", "dso,symbol"):  # by library, then by function
        report += subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                                  "--sort", sort, "-g", "none", "--percent-limit", "0.5"],
                                 capture_output=True, text=True).stdout
    os.unlink(data)
    with open(path, "w") as f:
        f.write(f"# sandgate under wrk, {len(contexts)} sessions, {duration} s: "
                f"{r['rps']:.1f} executes/s\n")
        f.write("\n".join(l for l in report.splitlines()
                          if l.strip() and not l.startswith(("# To display", "# (Tip"))) + "\n")


def plot(rows, path, sandbox):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = [r["n"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(n, [r["rps"] for r in rows], "o-")
    left.set(xlabel="concurrent sessions", ylabel="executes/s", xscale="log",
             title=f"throughput ({sandbox})")
    right.plot(n, [r["p50"] for r in rows], "o-", label="p50")
    right.plot(n, [r["p99"] for r in rows], "s-", label="p99")
    right.set(xlabel="concurrent sessions", ylabel="latency (ms)", xscale="log", yscale="log",
              title="POST /execute latency")
    right.legend()
    for ax in (left, right):
        ax.set_xticks(n, [str(x) for x in n])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
