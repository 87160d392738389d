#!/usr/bin/python3
"""Languages side by side: per language (python, r, bash, javascript,
typescript), sandboxed (gVisor, runsc) and plain (`--sandbox none`), in one
run, two daemons side by side (both --pool-size 0, --pause-after 0):
  cold start   POST /contexts {"language"} to the first result of a trivial
               statement (a fresh kernel: no pool), --rounds times; the
               context is deleted after each
  round trip   POST /execute of the same statement on a warm context of each
               language, one keep-alive connection per daemon, --runs times
               after --warm-up executes
Both are interleaved: each round goes through every (sandbox, language) once,
so a busy spell of the machine falls on all of them alike. The ratios are
against baselines measured in the same run: each language against Python
under the same sandbox, and gVisor against plain per language.

The statement is `1+1` (its result `2`), `echo $((1+1))` in Bash (stdout:
bash_kernel has no results). javascript and typescript both run on Deno's
kernel (kernelspec deno). A language that fails in a sandbox is reported
under the tables (and measured no further there); an execute answered
without its `2` is counted there, and timed all the same.

usage: bench/languages.py [--rounds N] [--runs N] [--warm-up N]
       (root, a build in build/ or SG_BUILDDIR)
Prints a Markdown table per measurement.
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
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
# sandgate-init, and sandgate-preload.so beside it (Deno's kernel speaks TCP)
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
from sgd import Daemon, TOKEN  # noqa: E402

LANGUAGES = ["python", "r", "bash", "javascript", "typescript"]
CODE = {"bash": "echo $((1+1))"}  # the others: 1+1
SANDBOXES = [("runsc", "gVisor"), ("none", "plain")]


def code_of(lang):
    return CODE.get(lang, "1+1")


class Client:
    """One keep-alive connection to a daemon."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        self.executes, self.empty = {}, {}  # by language

    def call(self, method, path, body=None, accept="application/json"):
        h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
             "Accept": accept}
        try:
            self.conn.request(method, path, json.dumps(body) if body is not None else None, h)
            r = self.conn.getresponse()
            data = r.read()
        except Exception:
            self.conn.close()  # the next request opens a new connection
            raise
        return r.status, (json.loads(data) if data.strip() else None)

    def execute(self, ctx, lang):
        """One execute of the language's statement; an answer without its
        `2` is counted in self.empty (timed all the same)."""
        st, r = self.call("POST", "/execute", {"code": code_of(lang), "context_id": ctx})
        if st != 200 or r.get("error"):
            err = (r or {}).get("error")
            raise RuntimeError(f"execute: {st} " + (f"{err.get('name')}: {err.get('value')}"
                                                    if isinstance(err, dict) else str(r)))
        got = "".join(x.get("text", "") for x in r.get("results", [])) + r.get("stdout", "")
        self.executes[lang] = self.executes.get(lang, 0) + 1
        if "2" not in got:
            self.empty[lang] = self.empty.get(lang, 0) + 1

    def create(self, lang):
        st, c = self.call("POST", "/contexts", {"language": lang})
        if st != 201:
            raise RuntimeError(f"POST /contexts: {st} {c}")
        return c["id"]

    def delete(self, ctx):
        self.call("DELETE", f"/contexts/{ctx}")


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def pct(xs, q):
    """The q-th percentile, nearest rank."""
    v = sorted(xs)
    return v[max(0, min(len(v) - 1, -(-q * len(v) // 100) - 1))]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def version(cmd, pick=lambda s: s.split("\n")[0]):
    try:
        return pick(subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def cold_start(cl, lang):
    """POST /contexts to the first result, in ms; the context deleted after."""
    ctx = None

    def go():
        nonlocal ctx
        ctx = cl.create(lang)
        cl.execute(ctx, lang)
    try:
        return timed(go)
    finally:
        if ctx:
            cl.delete(ctx)


def table(title, data, cols, failed):
    """data[(sandbox, lang)] = list of ms; cols: [(label, fn(xs))]; ratios
    of medians; a (sandbox, language) in failed has none."""
    print(f"{title}\n")
    head = ["language"]
    for _, name in SANDBOXES:
        head += [f"{name} {label}".strip() for label, _ in cols]
    head += ["gVisor ÷ plain"] + [f"× Python, {name}" for _, name in SANDBOXES]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    p50 = {k: statistics.median(xs) for k, xs in data.items() if xs and k not in failed}

    def ratio(a, b):
        return f"{p50[a] / p50[b]:.2f}x" if a in p50 and b in p50 else "—"
    for lang in LANGUAGES:
        row = [lang]
        for sb, _ in SANDBOXES:
            if (sb, lang) in p50:
                row += [fn(data[sb, lang]) for _, fn in cols]
            else:
                row += ["failed¹"] * len(cols)
        row.append(ratio(("runsc", lang), ("none", lang)))
        for sb, _ in SANDBOXES:
            row.append(ratio((sb, lang), (sb, "python")))
        print("| " + " | ".join(row) + " |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="cold starts per language and sandbox")
    ap.add_argument("--runs", type=int, default=30,
                    help="timed round trips per language and sandbox")
    ap.add_argument("--warm-up", type=int, default=10, help="untimed round trips before them")
    a = ap.parse_args()
    load0 = loadavg()
    daemons, clients = {}, {}
    cold = {(sb, lang): [] for sb, _ in SANDBOXES for lang in LANGUAGES}
    warm = {(sb, lang): [] for sb, _ in SANDBOXES for lang in LANGUAGES}
    failed = {}  # (sandbox, language): why; not measured from then on
    t0 = time.time()

    def attempt(sb, lang, fn, when):
        if (sb, lang) in failed:
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001  (a timeout, a dead kernel: reported)
            failed[sb, lang] = f"{when}: {' '.join(str(e).split())[:300]}"
            print(f"languages: {sb} {lang}: {when}: {e}", file=sys.stderr, flush=True)
            return None
    try:
        for sb, _ in SANDBOXES:
            daemons[sb] = Daemon("--sandbox", sb, "--pool-size", "0", "--pause-after", "0",
                                 "--max-kernels", "32")
            clients[sb] = Client(daemons[sb].url)
        # Every language starts once in each sandbox before anything is
        # timed (page cache, Deno's and R's first loads from disk).
        for sb, _ in SANDBOXES:
            for lang in LANGUAGES:
                attempt(sb, lang, lambda: cold_start(clients[sb], lang), "first start")
        for i in range(a.rounds):
            for sb, _ in SANDBOXES:
                for lang in LANGUAGES:
                    ms = attempt(sb, lang, lambda: cold_start(clients[sb], lang),
                                 f"cold start, round {i + 1}")
                    if ms is not None:
                        cold[sb, lang].append(ms)
                        time.sleep(0.5)  # the deleted sandbox's teardown
            print(f"languages: cold start round {i + 1}/{a.rounds}", file=sys.stderr, flush=True)
        ctxs = {}
        for sb, _ in SANDBOXES:
            for lang in LANGUAGES:
                ctx = attempt(sb, lang, lambda: clients[sb].create(lang), "warm context")
                if ctx:
                    ctxs[sb, lang] = ctx
        for i in range(a.warm_up + a.runs):
            for (sb, lang), ctx in ctxs.items():
                ms = attempt(sb, lang, lambda: timed(lambda: clients[sb].execute(ctx, lang)),
                             f"round trip {i + 1}")
                if ms is not None and i >= a.warm_up:
                    warm[sb, lang].append(ms)
    finally:
        for d in daemons.values():
            d.stop()
    took = time.time() - t0

    print(f"bench/languages.py, {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores; "
          f"load average {load0} before, {loadavg()} after; {took / 60:.1f} min")
    py = "/usr/bin/python3"
    print("kernels: ipykernel "
          + version([py, "-c", "import ipykernel; print(ipykernel.__version__)"])
          + ", IRkernel on " + version(["R", "--version"], lambda s: " ".join(s.split()[:3]))
          + ", bash_kernel "
          + version(["env", "PYTHONPATH=/usr/local/lib/sandgate/bash_kernel", py, "-c",
                     "import bash_kernel; print(bash_kernel.__version__)"])
          + ", " + version(["/usr/local/lib/sandgate/deno/deno", "--version"])
          + " (javascript and typescript); " + version(["runsc", "--version"]))
    print("statement: `1+1`, in Bash `echo $((1+1))`; ms\n")

    table(f"Cold start: POST /contexts to the first result, --pool-size 0, {a.rounds} rounds, "
          "p50 (min-max)", cold,
          [("", lambda xs: f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})")], failed)
    table(f"Round trip: POST /execute on a warm context, {a.runs} runs after {a.warm_up}, "
          "p50 / p95", warm,
          [("p50", lambda xs: f"{statistics.median(xs):.1f}"),
           ("p95", lambda xs: f"{pct(xs, 95):.1f}")], failed)
    print("Ratios of p50s.")
    for (sb, lang), why in failed.items():
        print(f"\n¹ {lang}, --sandbox {sb}: {why}".rstrip())
    for sb, name in SANDBOXES:
        for lang, n in clients[sb].empty.items():
            print(f"\n{name}, {lang}: {n} of {clients[sb].executes[lang]} executes answered "
                  "without their result (no error; timed all the same)")

if __name__ == "__main__":
    main()
