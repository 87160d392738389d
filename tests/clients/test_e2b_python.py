"""The official Python E2B SDK (PyPI e2b-code-interpreter, pinned in
tests/requirements-e2b.txt) against sandgate: tests/clients/e2b_sdk.py, run by
tests/.venv-e2b's python (scripts/venv.sh makes it), makes the checks
tests/lib/e2b_sdk.mjs makes with the JS SDK."""
import json
import os
import subprocess

from sgd import Daemon, TOKEN
from tap import ok, done

SRC = os.environ.get("SG_SRCDIR", ".")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")

if not os.access(PY, os.X_OK):
    ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
else:
    d = Daemon("--pool-size", "1")
    try:
        r = subprocess.run([PY, os.path.join(SRC, "tests/clients/e2b_sdk.py"), d.url, TOKEN],
                           capture_output=True, text=True, timeout=600)
        checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        ok(len(checks) >= 37, f"the SDK script ran its checks ({len(checks)})",
           r.stderr[-2000:])
        for c in checks:
            ok(c["ok"], c["name"], c.get("detail"))
    finally:
        d.stop()
done()
