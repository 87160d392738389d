"""The @e2b/code-interpreter SDK's files.* and commands.* (E2B's envd
protocol) against sandgate with real runsc: tests/gateway/e2b_envd.mjs, with
two tenants' keys."""
import json
import os
import subprocess
import tempfile

from sgd import Daemon, add_key
from tap import ok, done

SRC = os.environ.get("SG_SRCDIR", ".")
tmp = tempfile.mkdtemp(prefix="sg-envd-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice, bob = add_key(keys, "alice"), add_key(keys, "bob")
d = Daemon("--pool-size", "1", "--keys-file", keys)
try:
    r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/e2b_envd.mjs"), d.url, alice, bob],
                       capture_output=True, text=True, timeout=900)
    checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    ok(len(checks) >= 45, f"the SDK script ran its checks ({len(checks)})", r.stderr[-2000:])
    for c in checks:
        ok(c["ok"], c["name"], c.get("detail"))
finally:
    d.stop()
done()
