"""The Deep Agents backends (clients/python's sandgate.deepagents, clients/js's
sandgate/deepagents) against Deep Agents' backend contract, for the oldest
and the newest deepagents each package claims: Python 0.2.8
(tests/.venv-deepagents-old, tests/requirements-deepagents-old.txt) and the
newest pinned (tests/.venv-langchain); JS 1.9.0 (tests/package.json's npm
alias deepagents-oldest, imported as `deepagents`) and the newest pinned.
One daemon with real runsc; each run is deepagents_contract.py or .mjs (its
checks: files under /tmp and /home/user with a 100 KiB binary and 10 MiB,
relative paths, the protocol's error strings, 500 KiB of `python -c`
output, Deep Agents' own file methods, a deep agent driven by a fake model)
and prints one JSON line per check, reported here with its version."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jsenv import project, run_checks  # noqa: E402
from sgd import Daemon, TOKEN  # noqa: E402
from tap import ok, diag, done  # noqa: E402

SRC = os.environ.get("SG_SRCDIR", ".")
PKG = os.path.join(SRC, "clients", "python", "src")
PYTHONS = [("deepagents-old", "Python deepagents 0.2.8"),
           ("langchain", "Python deepagents (newest pinned)")]
NODES = [({"deepagents": "deepagents-oldest"}, "JS deepagents 1.9.0"),
         (None, "JS deepagents (newest pinned)")]
MIN_CHECKS = 40


def report(label, checks, err):
    ok(len(checks) >= MIN_CHECKS, f"{label}: the contract script ran its checks ({len(checks)})",
       err[-3000:])
    for c in checks:
        ok(c["ok"], f"{label}: {c['name']}", c.get("detail"))


def run_python(d, venv, label):
    py = os.path.join(SRC, "tests", f".venv-{venv}", "bin", "python")
    if not os.path.exists(py):
        ok(False, f"{label}: tests/.venv-{venv} exists (run scripts/venv.sh)")
        return
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.path.join(SRC, "tests", "lib"))
    t = time.time()
    r = subprocess.run([py, os.path.join(SRC, "tests/clients/deepagents_contract.py"), d.url, TOKEN],
                       capture_output=True, text=True, timeout=600, env=env)
    diag(f"{label}: {time.time() - t:.1f} s")
    checks = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    report(label, checks, r.stderr)
    if r.returncode != 0:
        ok(False, f"{label}: the contract script exited cleanly", r.stderr[-3000:])


def run_node(d, aliases, label):
    work = project(["deepagents_contract.mjs"], aliases)
    try:
        t = time.time()
        checks, err = run_checks(work, "deepagents_contract.mjs", d.url, TOKEN, timeout=600)
        diag(f"{label}: {time.time() - t:.1f} s ({err.strip().splitlines()[0] if err.strip() else ''})")
        report(label, checks, err)
    finally:
        shutil.rmtree(work, ignore_errors=True)


d = Daemon("--pool-size", "1")
try:
    for venv, label in PYTHONS:
        run_python(d, venv, label)
    for aliases, label in NODES:
        run_node(d, aliases, label)
    status, contexts = d.json("GET", "/contexts")
    ok(status == 200 and contexts == [], "every run's context is gone at its end", contexts)
finally:
    d.stop()
done()
