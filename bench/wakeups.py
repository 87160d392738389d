#!/usr/bin/python3
"""Counts sandgate's event-loop wake-ups per execution: `--sandbox none`, one
session executing `1+1` in a closed loop (wrk, bench/execute.lua), while
`perf stat` counts sandgate's poll, epoll_wait, getpid and read/recvfrom
system calls.  A loop that wakes only for work makes a handful of polls per
execution (one per message it receives); many more means it spins.

usage: bench/wakeups.py [--duration S] [--sessions N]
Needs perf (linux-perf) and wrk; run as root.
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import run_wrk, cpu_seconds  # noqa: E402
from sgd import Daemon  # noqa: E402

EVENTS = ["syscalls:sys_enter_poll", "syscalls:sys_enter_epoll_wait",
          "syscalls:sys_enter_getpid", "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_read",
          "syscalls:sys_enter_write", "syscalls:sys_enter_sendto"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=1)
    a = ap.parse_args()
    d = Daemon("--sandbox", "none", "--pool-size", "0", "--idle-timeout", "0")
    contexts = []
    try:
        for _ in range(a.sessions):
            st, ctx = d.json("POST", "/contexts", {})
            contexts.append(ctx["id"])
            d.json("POST", "/execute", {"code": "1+1", "context_id": ctx["id"]},
                   headers={"Accept": "application/json"})
        pid = d.proc.pid
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(EVENTS), "-p", str(pid),
                                 "--", "sleep", str(a.duration + 1)],
                                stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        c0 = cpu_seconds(pid)
        r = run_wrk(d.url, contexts, a.duration)
        cpu = cpu_seconds(pid) - c0
        _, err = perf.communicate()
        counts = {}
        for line in err.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                counts[parts[2].split(":")[-1].replace("sys_enter_", "")] = int(parts[0])
        execs = r["rps"] * a.duration
        print(f"sandgate wake-ups — {time.strftime('%Y-%m-%d')}, --sandbox none, "
              f"{a.sessions} session(s), {a.duration} s of wrk: {r['rps']:.1f} executes/s, "
              f"sandgate CPU {cpu / a.duration * 100:.0f} % of a core, "
              f"{cpu / max(execs, 1) * 1000:.2f} ms CPU per execute\n")
        print("| system call | count | per execute |")
        print("|---|---|---|")
        for name, n in counts.items():
            print(f"| {name} | {n} | {n / max(execs, 1):.1f} |")
    finally:
        for c in contexts:
            d.json("DELETE", "/contexts/" + c)
        d.stop()


if __name__ == "__main__":
    main()
