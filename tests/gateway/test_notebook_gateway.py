"""Debian's Jupyter Notebook started with --gateway-url pointing at sandgate:
a notebook is opened in headless Chromium, cells run in a sandgate kernel,
and the rendered outputs are checked.  SG_SCREENSHOT=path keeps the
screenshot (docs/notebook-gateway.png is made so)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
NB_TOKEN = "nb-test-token-5f1c"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


d = Daemon("--pool-size", "1")
tmp = tempfile.mkdtemp(prefix="sg-nb-", dir="/tmp")
nb = None
try:
    env = dict(os.environ)
    for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                     ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
        env[var] = os.path.join(tmp, sub)
        os.mkdir(env[var])
    os.mkdir(os.path.join(tmp, "notebooks"))
    port = free_port()
    log = open(os.path.join(tmp, "notebook.log"), "w+")
    nb = subprocess.Popen(
        ["/usr/bin/python3", "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", "--NotebookApp.port_retries=0", f"--NotebookApp.token={NB_TOKEN}",
         f"--NotebookApp.notebook_dir={os.path.join(tmp, 'notebooks')}",
         f"--gateway-url={d.url}", f"--GatewayClient.auth_token={TOKEN}",
         "--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={NB_TOKEN}", timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    log.seek(0)
    ok("gateway" in log.read().lower() and nb.poll() is None,
       "Notebook starts with sandgate as its kernel gateway")

    shot = os.path.join(tmp, "notebook.png")
    r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/notebook_browser.mjs"), url,
                        NB_TOKEN, shot], capture_output=True, text=True, timeout=400)
    checks = [l for l in r.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
    ok(r.returncode == 0 and len(checks) >= 7,
       f"the browser ran {len(checks)} checks, all passed", r.stderr[-2000:])
    for line in checks:
        ok(line.startswith("ok "), "browser: " + line.split(" - ", 1)[-1])
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            diag(line[1:])

    ok(any("runs in sandgate's workspace" in l and l.endswith(" 4.4.0") for l in checks),
       "the cell ran under gVisor (the kernel release it reports is gVisor's 4.4.0)")
    st, kernels = d.json("GET", "/api/kernels")
    ok(st == 200 and len(kernels) == 1 and kernels[0]["name"] == "python3",
       "the notebook's kernel is a sandgate kernel", kernels)
    st, ctxs = d.json("GET", "/contexts")
    ok(kernels and kernels[0]["id"] in [c["id"] for c in ctxs],
       "and a sandgate session like any other", ctxs)
    keep = os.environ.get("SG_SCREENSHOT")
    if keep and os.path.exists(shot):
        shutil.copy(shot, keep)
        diag(f"screenshot kept in {keep}")
    if r.returncode != 0:
        log.seek(0)
        diag(log.read()[-3000:])
finally:
    if nb and nb.poll() is None:
        nb.send_signal(signal.SIGTERM)  # Notebook shuts its (gateway) kernels down
        try:
            nb.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(nb.pid, signal.SIGKILL)
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
