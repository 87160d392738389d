"""The @e2b/code-interpreter SDK's files.* and commands.* (E2B's envd
protocol) against sandgate with real runsc: tests/lib/e2b_envd.mjs, with
two tenants' keys; then the audit log has its file writes, deletes and
commands, each with its tenant.  Directory watches with both SDKs, unchanged
and configured by environment only: e2b_watch.py (Python: polled) and
e2b_watch.mjs (JavaScript: WatchDir's stream); terminals with both:
e2b_pty.py, e2b_pty.mjs."""
import json
import os
import subprocess
import tempfile

from sgd import Daemon, add_key, audit_read
from tap import ok, done, relay_checks

SRC = os.environ.get("SG_SRCDIR", ".")
tmp = tempfile.mkdtemp(prefix="sg-envd-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice, bob = add_key(keys, "alice"), add_key(keys, "bob")
carol = add_key(keys, "carol", "--max-queued", "3")
log = os.path.join(tmp, "audit.log")
d = Daemon("--pool-size", "1", "--keys-file", keys, "--audit-log", log)
try:
    r = subprocess.run(["node", os.path.join(SRC, "tests/lib/e2b_envd.mjs"), d.url, alice, bob],
                       capture_output=True, text=True, timeout=900)
    checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    ok(len(checks) >= 45, f"the SDK script ran its checks ({len(checks)})", r.stderr[-2000:])
    for c in checks:
        ok(c["ok"], c["name"], c.get("detail"))
    events = [e for e in audit_read(log) if e.get("frontend") == "envd"]
    def seen(event, **fields):
        return any(e["event"] == event and e.get("tenant") == "alice" and
                   all(e.get(k) == v for k, v in fields.items()) for e in events)
    ok(seen("file.write", path="/tmp/a.csv", size=8), "audit: files.write is a file.write",
       [e for e in events if e["event"] == "file.write"][:3])
    ok(seen("file.delete", path="/tmp/d"), "audit: files.remove is a file.delete")
    ok(seen("command.start"), "audit: commands.run is a command.start",
       sorted({e["event"] for e in events}))

    env = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=carol)
    py = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")
    if not os.access(py, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
    else:
        r = subprocess.run([py, os.path.join(SRC, "tests/gateway/envd/e2b_watch.py"), bob],
                           env=env, capture_output=True, text=True, timeout=600)
        relay_checks(r, 11, "the Python SDK's e2b_watch.py")
        r = subprocess.run([py, os.path.join(SRC, "tests/gateway/envd/e2b_pty.py"), bob],
                           env=env, capture_output=True, text=True, timeout=600)
        relay_checks(r, 7, "the Python SDK's e2b_pty.py")
    r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/envd/e2b_watch.mjs")], env=env,
                       capture_output=True, text=True, timeout=600)
    relay_checks(r, 4, "the JS SDK's e2b_watch.mjs")
    r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/envd/e2b_pty.mjs")], env=env,
                       capture_output=True, text=True, timeout=600)
    relay_checks(r, 1, "the JS SDK's e2b_pty.mjs")
finally:
    d.stop()
done()
