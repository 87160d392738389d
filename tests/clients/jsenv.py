"""Where the JS client tests run: the package as a user installs it, beside
the pinned npm packages of tests/package-lock.json."""
import json
import os
import shutil
import subprocess
import tempfile
import time

from tap import ok, diag

SRC = os.environ.get("SG_SRCDIR", ".")
PKG = os.path.join(SRC, "clients/js")
NODE_MODULES = os.path.join(SRC, "tests/node_modules")


def project(scripts=(), aliases=None):
    """A temporary directory whose node_modules holds a copy of clients/js as
    `sandgate` (what `npm install` of its tarball gives) and links to each
    package tests/ installed, so its peer dependencies resolve as in a
    user's project; `scripts` (paths under tests/clients) are copied in.
    `aliases` maps a package's name to another one tests/ installed, e.g.
    {"deepagents": "deepagents-oldest"} (an npm alias of an older version):
    the project imports that one under the name."""
    d = tempfile.mkdtemp(prefix="sg-js-")
    nm = os.path.join(d, "node_modules")
    os.mkdir(nm)
    for name in os.listdir(NODE_MODULES):
        if not name.startswith("."):
            target = (aliases or {}).get(name, name)
            os.symlink(os.path.join(os.path.abspath(NODE_MODULES), target), os.path.join(nm, name))
    dest = os.path.join(nm, "sandgate")
    os.mkdir(dest)
    with open(os.path.join(PKG, "package.json")) as f:
        files = json.load(f)["files"] + ["package.json"]
    for name in files:
        s = os.path.join(PKG, name)
        if os.path.isdir(s):
            shutil.copytree(s, os.path.join(dest, name))
        elif os.path.exists(s):
            shutil.copy(s, dest)
    for s in scripts:
        shutil.copy(os.path.join(SRC, "tests/clients", s), d)
    return d


def run_checks(cwd, script, *args, timeout=300):
    """Runs a check script (one JSON line per check); returns (checks, stderr)."""
    r = subprocess.run(["node", script, *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    return checks, r.stderr


def run_suite(daemon, script, token, min_checks, *args):
    """Runs tests/clients/SCRIPT against the daemon in a fresh project()
    (arguments: the daemon's URL, token, then args) and reports each of its
    checks as a TAP line."""
    work = project([script])
    try:
        t = time.time()
        checks, err = run_checks(work, script, daemon.url, token, *args)
        diag(f"{script}: {time.time() - t:.1f} s")
        ok(len(checks) >= min_checks, f"{script} ran its checks ({len(checks)})", err[-3000:])
        for c in checks:
            ok(c["ok"], c["name"], c.get("detail"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
