"""The official @e2b/code-interpreter SDK (npm) against sandgate."""
import json
import os
import subprocess

from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
d = Daemon("--pool-size", "1")
try:
    r = subprocess.run(["node", os.path.join(SRC, "tests/lib/e2b_sdk.mjs"), d.url, TOKEN],
                       capture_output=True, text=True, timeout=600)
    checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    ok(len(checks) >= 36, f"the SDK script ran its checks ({len(checks)})", r.stderr[-2000:])
    for c in checks:
        ok(c["ok"], c["name"], c.get("detail"))
finally:
    d.stop()
done()
