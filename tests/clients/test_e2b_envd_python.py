"""The Python E2B SDK's files.* and commands.* (E2B's envd protocol) against
sandgate with real runsc: tests/clients/e2b_envd.py, run by tests/.venv-e2b's
python, with two tenants' keys."""
import json
import os
import subprocess
import tempfile

from sgd import Daemon, add_key
from tap import ok, done

SRC = os.environ.get("SG_SRCDIR", ".")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")

if not os.access(PY, os.X_OK):
    ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
else:
    tmp = tempfile.mkdtemp(prefix="sg-envd-", dir="/tmp")
    keys = os.path.join(tmp, "keys")
    alice, bob = add_key(keys, "alice"), add_key(keys, "bob")
    d = Daemon("--pool-size", "1", "--keys-file", keys)
    try:
        r = subprocess.run([PY, os.path.join(SRC, "tests/clients/e2b_envd.py"), d.url, alice, bob],
                           capture_output=True, text=True, timeout=900)
        checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        ok(len(checks) >= 40, f"the SDK script ran its checks ({len(checks)})", r.stderr[-2000:])
        for c in checks:
            ok(c["ok"], c["name"], c.get("detail"))
    finally:
        d.stop()
done()
