"""A minimal TAP producer for sandgate's Python tests (automake's tap-driver reads it)."""
import sys

_n = 0
_failed = 0


def ok(cond, name, detail=None):
    global _n, _failed
    _n += 1
    print(("ok" if cond else "not ok"), _n, "-", name, flush=True)
    if not cond:
        _failed += 1
        if detail is not None:
            for line in str(detail).splitlines():
                print("#  ", line, flush=True)
    return cond


def diag(msg):
    for line in str(msg).splitlines():
        print("#", line, flush=True)


def done():
    print(f"1..{_n}", flush=True)
    sys.exit(1 if _failed else 0)


def skip(name, reason):
    """A check not made, and why (TAP's SKIP directive)."""
    global _n
    _n += 1
    print("ok", _n, "-", name, "# SKIP", reason, flush=True)


def relay(run, least, who="browser"):
    """Relays the TAP a script printed (run: its subprocess.run, output
    captured as text): one check that it ran at least `least` checks and
    exited 0, then one for each of its checks; its "# KEY VALUE" lines are
    diagnostics, returned as {KEY: VALUE}."""
    checks = [l for l in run.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
    ok(run.returncode == 0 and len(checks) >= least,
       f"the {who} ran {len(checks)} checks, all passed", run.stdout[-3000:] + run.stderr[-2000:])
    for line in checks:
        ok(line.startswith("ok "), f"{who}: " + line.split(" - ", 1)[-1])
    info = {}
    for line in run.stdout.splitlines():
        if line.startswith("#"):
            diag(line[1:].strip())
            key, _, value = line[1:].strip().partition(" ")
            info[key] = value
    return info


def relay_checks(run, count, who):
    """Relays the checks a client script printed as JSON lines ({ok, name,
    detail}: checks.py, check() in the .mjs scripts; run: its
    subprocess.run, output captured as text): one check that it ran exactly
    `count` of them, then one for each; its "#KEY VALUE" lines are returned
    as {KEY: VALUE}."""
    import json
    lines = run.stdout.splitlines()
    checks = [json.loads(l) for l in lines if l.startswith("{")]
    ok(len(checks) == count, f"{who} ran its {count} checks ({len(checks)})",
       run.stdout[-1500:] + run.stderr[-3000:])
    for c in checks:
        ok(c["ok"], f"{who}: {c['name']}", c.get("detail"))
    return dict(l[1:].partition(" ")[::2] for l in lines if l.startswith("#"))
