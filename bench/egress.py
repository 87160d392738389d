#!/usr/bin/python3
"""Does network egress cost the sessions that do not use it?

Two sandgate daemons on the same build, both runsc: one without
--egress-allow (no nftables table, no namespaces) and one with
--egress-allow 0.0.0.0/0 (the table installed, IPv4 forwarding on) that
also holds an opted-in session.  One session *without* a network in each
runs `1+1` over one keep-alive connection (Accept: application/json), in
--rounds alternating rounds of --runs executes, so a drifting machine
biases neither; then the opted-in session runs the same, for reference.
Reports p50/p90 of each and the ratio egress / no egress for the sessions
without a network (target: 1.0, within noise).

usage: bench/egress.py [--runs N] [--rounds N] [--out FILE]
  Run as root (runsc, nftables).  SG_BUILDDIR selects the build.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
from sgd import Daemon, TOKEN  # noqa: E402


def context(d, internet):
    st, c = d.json("POST", "/contexts", {"internet": internet})
    if st != 201:
        raise SystemExit(f"POST /contexts: {st} {c}")
    return c["id"]


def executes(d, cid, n):
    u = urllib.parse.urlparse(d.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    body = json.dumps({"code": "1+1", "context_id": cid})
    hdr = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
           "Accept": "application/json"}
    times = []
    for i in range(n + 5):
        t0 = time.perf_counter()
        conn.request("POST", "/execute", body, hdr)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200 or b'"2"' not in data:
            raise SystemExit(f"execute: {r.status} {data[:200]!r}")
        if i >= 5:  # warm-up
            times.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return times


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    common = ["--pool-size", "0", "--pause-after", "0", "--idle-timeout", "0"]
    plain = Daemon(*common)
    egress = Daemon(*common, "--egress-allow", "0.0.0.0/0")
    try:
        c0, c1, c2 = context(plain, False), context(egress, False), context(egress, True)
        r0, r1, r2 = [], [], []
        for rnd in range(a.rounds):
            r0 += executes(plain, c0, a.runs)
            r1 += executes(egress, c1, a.runs)
            r2 += executes(egress, c2, a.runs)
            print(f"egress: round {rnd + 1}/{a.rounds} done", file=sys.stderr)
        rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        lines = [f"# sandgate egress cost — {time.strftime('%Y-%m-%d')}", "",
                 f"Build {rev}; runsc, ptrace; `1+1` over one keep-alive connection, "
                 f"{a.rounds} alternating rounds of {a.runs} per session.", "",
                 "| daemon | session | p50 ms | p90 ms | executes |", "|---|---|---|---|---|"]
        for name, sess, r in (("no --egress-allow", "no network", r0),
                              ("--egress-allow 0.0.0.0/0", "no network", r1),
                              ("--egress-allow 0.0.0.0/0", "internet: true", r2)):
            lines.append(f"| {name} | {sess} | {statistics.median(r):.2f} | {pct(r, .9):.2f} | "
                         f"{len(r)} |")
        ratio = statistics.median(r1) / statistics.median(r0)
        lines += ["", f"Sessions without a network, with egress on / off: **{ratio:.2f}x** "
                      "at p50 (target: unchanged, 1.0 within noise)."]
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
    finally:
        for d in (plain, egress):
            for c in (d.json("GET", "/contexts")[1] or []):
                d.json("DELETE", f"/contexts/{c['id']}")
            d.stop()


main()
