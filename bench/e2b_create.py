#!/usr/bin/env python3
"""E2B's SDK against sandgate's own API, same daemon, same run: from
nothing to the first result, with the warm pool.

  raw        POST /contexts, then POST /execute `1+1` (http.client, one
             connection per round): the server's time, with the leanest client
  sandgate   the same through sandgate's own Python client (clients/python:
             Sandgate().create_context(), .execute())
  E2B SDK    Sandbox.create() then run_code("1+1") (e2b-code-interpreter,
             configured only by E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY)

Rounds take turns; before each, the pool is full again (GET /health), and
after it the context is deleted.  Run by tests/.venv-e2b's python (it has
the SDK): tests/.venv-e2b/bin/python bench/e2b_create.py [--rounds N] [--pool N]
Sandgate's client and E2B's SDK are both Python, so their own costs
(building a client, parsing) are in both; the bare HTTP calls show the
server's part.
Needs root and a build in build/ (or SG_BUILDDIR).  Prints Markdown.
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
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib"),
                os.path.join(HERE, "..", "clients", "python", "src")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
from sgd import Daemon, TOKEN  # noqa: E402


def call(url, method, path, body=None, conn=None):
    u = urllib.parse.urlparse(url)
    c = conn or http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
               "Accept": "application/json"})
    r = c.getresponse()
    data = r.read()
    return r.status, json.loads(data) if data.strip() else None, c


def sandgate_round(url):
    t = time.perf_counter()
    st, ctx, c = call(url, "POST", "/contexts", {})
    st2, r, _ = call(url, "POST", "/execute", {"code": "1+1", "context_id": ctx["id"]}, c)
    took = (time.perf_counter() - t) * 1000
    if st != 201 or st2 != 200 or r["results"][0]["text"] != "2":
        raise RuntimeError(f"sandgate: {st} {st2} {r}")
    c.close()
    return took, ctx["id"]


def client_round(url):
    from sandgate import Sandgate
    t = time.perf_counter()
    sg = Sandgate(url, TOKEN)
    ctx = sg.create_context()
    r = sg.execute("1+1", context=ctx)
    took = (time.perf_counter() - t) * 1000
    if r.text != "2":
        raise RuntimeError(f"sandgate's client: {r}")
    return took, ctx.id


def e2b_round():
    from e2b_code_interpreter import Sandbox
    t = time.perf_counter()
    sbx = Sandbox.create()
    r = sbx.run_code("1+1")
    took = (time.perf_counter() - t) * 1000
    if r.results[0].text != "2":
        raise RuntimeError(f"E2B SDK: {r}")
    return took, sbx.sandbox_id


def wait_pool(url, n):
    deadline = time.time() + 120
    while time.time() < deadline:
        st, h, _ = call(url, "GET", "/health")
        if h["kernels"]["pool_ready"] >= n:
            return
        time.sleep(0.05)
    raise RuntimeError("the pool did not fill")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--pool", type=int, default=2)
    a = ap.parse_args()
    d = Daemon("--pool-size", str(a.pool), "--pause-after", "0")
    os.environ.update(E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=TOKEN)
    rounds = {"raw": lambda: sandgate_round(d.url), "sandgate": lambda: client_round(d.url),
              "e2b": e2b_round}
    xs = {k: [] for k in rounds}
    try:
        for f in rounds.values():  # imports, once
            call(d.url, "DELETE", "/contexts/" + f()[1])
        for _ in range(a.rounds):
            for name, f in rounds.items():
                wait_pool(d.url, a.pool)
                took, cid = f()
                xs[name].append(took)
                call(d.url, "DELETE", "/contexts/" + cid)
    finally:
        d.stop()
    med = {k: statistics.median(v) for k, v in xs.items()}
    print(f"# E2B's SDK against sandgate's API, new sandbox to first result — "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    print(f"Machine: {os.cpu_count()} cores; warm pool of {a.pool}; {a.rounds} rounds each, "
          "in turns. ms.\n")
    print("| path | p50 | min | max |")
    print("|---|---|---|---|")
    for k, label in (("raw", "POST /contexts + POST /execute (http.client)"),
                     ("sandgate", "the same with sandgate's Python client"),
                     ("e2b", "Sandbox.create() + run_code (E2B SDK)")):
        print(f"| {label} | {med[k]:.1f} | {min(xs[k]):.1f} | {max(xs[k]):.1f} |")
    print(f"\nE2B SDK ÷ sandgate's client: {med['e2b'] / med['sandgate']:.2f}x (target ≤ 1.2x); "
          f"÷ the bare HTTP calls: {med['e2b'] / med['raw']:.2f}x.")


if __name__ == "__main__":
    main()
