"""@jupyterlab/services (npm), the library JupyterLab is built on, against
sandgate's Jupyter Server API: once offering no WebSocket subprotocol (the
default JSON format) and once with the library's own choice (v1)."""
import os
import subprocess

from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
d = Daemon("--pool-size", "1")
try:
    for mode in ("default", "v1"):
        r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/jlab_services.mjs"), d.url,
                            TOKEN, mode], capture_output=True, text=True, timeout=400)
        checks = [l for l in r.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
        ok(r.returncode == 0 and len(checks) >= 24,
           f"{mode}: the client ran {len(checks)} checks, all passed", r.stderr[-2000:])
        for line in checks:
            passed = line.startswith("ok ")
            name = line.split(" - ", 1)[1] if " - " in line else line
            ok(passed, f"{mode}: {name}")
        for line in r.stdout.splitlines():
            if line.startswith("#"):
                diag(line[1:])
finally:
    d.stop()
done()
