"""Debian's Jupyter Notebook 6 started with --gateway-url pointing at sandgate:
a notebook is created and opened in headless Chromium (notebook_browser.mjs),
cells run in a sandgate kernel, and the rendered outputs are checked; then the
gateway must list the page's kernel, and no longer list it once Notebook has
stopped (Notebook deletes its gateway kernels on shutdown).

SG_REFERENCE=notebook checks the test itself: the gateway is then a second,
plain Notebook server the test starts (what --gateway-url was made for), and
the kernel must be that server's child process.
SG_SCREENSHOT=path keeps the screenshot (docs/notebook-gateway.png is made so)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from sgd import Daemon, TOKEN
from tap import ok, diag, done, relay

SRC = os.environ.get("SG_SRCDIR", ".")
REFERENCE = os.environ.get("SG_REFERENCE", "")
NB_TOKEN = "nb-test-token-5f1c"
REF_TOKEN = "nb-gateway-token-93ad"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, auth):
    req = urllib.request.Request(url, headers={"Authorization": auth})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Notebook:
    """A Notebook 6 server of its own (own runtime, config and data dirs) in dir."""

    def __init__(self, dir, token, *args):
        self.dir, self.token = dir, token
        env = dict(os.environ)
        for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
            env[var] = os.path.join(dir, sub)
            os.makedirs(env[var])
        os.mkdir(os.path.join(dir, "notebooks"))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(dir, "notebook.log"), "w+")
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
             f"--port={port}", "--NotebookApp.port_retries=0", f"--NotebookApp.token={token}",
             f"--NotebookApp.notebook_dir={os.path.join(dir, 'notebooks')}", *args]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=dir, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        # /api/status answers 200 once the server runs (and, with a gateway,
        # once the gateway answers Notebook's GET /api/kernels).
        self.status = None
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={token}",
                                            timeout=30) as r:
                    self.status = r.status
                break
            except urllib.error.HTTPError as e:
                self.status = e.code
                break
            except OSError:
                time.sleep(0.2)
        self.up = self.status == 200

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def kernels(self):
        return get_json(f"{self.url}/api/kernels", f"token {self.token}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # Notebook shuts its kernels down
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Sandgate:
    """sandgate as the gateway (the test's purpose)."""
    name = "sandgate"

    def __init__(self, dir):
        self.daemon = Daemon("--pool-size", "1")
        self.url, self.token = self.daemon.url, TOKEN

    def kernels(self):
        return self.daemon.json("GET", "/api/kernels")

    def check_kernel(self, kernel, where):
        cwd, release, pid = where
        ok(cwd.startswith("/home/user") and release == "4.19.0-gvisor",
           "the cell ran in sandgate's workspace under gVisor (its kernel release is "
           "4.19.0-gvisor)",
           where)
        st, ctxs = self.daemon.json("GET", "/contexts")
        ok(st == 200 and kernel in [c["id"] for c in ctxs],
           "the kernel is a sandgate session like any other (GET /contexts)", ctxs)

    def stop(self):
        self.daemon.stop()


class NotebookGateway(Notebook):
    """The reference gateway: a plain Notebook server."""
    name = "the reference Notebook gateway"

    def __init__(self, dir):
        os.mkdir(dir)
        super().__init__(dir, REF_TOKEN)
        if not self.up:
            raise RuntimeError("the reference gateway did not start:\n" + self.output()[-3000:])

    def check_kernel(self, kernel, where):
        cwd, release, pid = where
        try:
            with open(f"/proc/{pid}/status") as f:
                ppid = int(next(l for l in f if l.startswith("PPid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            ppid = None
        ok(cwd == self.dir and ppid == self.proc.pid,
           f"the kernel (pid {pid}) is the reference gateway's child, in its directory",
           f"{where}; parent {ppid}, gateway {self.proc.pid} in {self.dir}")


tmp = tempfile.mkdtemp(prefix="sg-nb-", dir="/tmp")
gw = nb = None
try:
    gw = (NotebookGateway if REFERENCE == "notebook" else Sandgate)(os.path.join(tmp, "gateway"))
    diag(f"gateway: {gw.name} at {gw.url}")
    os.mkdir(os.path.join(tmp, "notebook"))
    nb = Notebook(os.path.join(tmp, "notebook"), NB_TOKEN,
                  f"--gateway-url={gw.url}", f"--GatewayClient.auth_token={gw.token}",
                  "--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60")
    ok(nb.up and f"Kernels will be managed by the Gateway server running at:\n{gw.url}\n" in
       "".join(l.split("] ", 1)[-1] + "\n" for l in nb.output().splitlines()),
       f"Notebook starts with {gw.name} as its kernel gateway (and its /api/status, "
       "which lists the gateway's kernels, answers 200)",
       f"/api/status: {nb.status}\n" + nb.output()[-3000:])

    shot = os.path.join(tmp, "notebook.png")
    r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/jupyter/notebook_browser.mjs"),
                        f"{nb.url}/?token={NB_TOKEN}", shot],
                       capture_output=True, text=True, timeout=240)
    info = relay(r, 8)
    kernel, where = info.get("kernel", ""), info.get("where", "").split()

    st, kernels = gw.kernels()
    ok(st == 200 and kernel in [k["id"] for k in kernels],
       f"{gw.name} lists the page's kernel {kernel} (GET /api/kernels)", kernels)
    if len(where) == 3:
        gw.check_kernel(kernel, where)
    else:
        ok(False, "the page reported where the kernel runs", info)

    ok(os.path.exists(shot) and open(shot, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
       "the screenshot is a PNG")
    keep = os.environ.get("SG_SCREENSHOT")
    if keep and os.path.exists(shot):
        shutil.copy(shot, keep)
        diag(f"screenshot kept in {keep}")

    nb.stop()
    st, kernels = gw.kernels()
    ok(st == 200 and kernel and kernel not in [k["id"] for k in kernels],
       f"Notebook's shutdown deletes its kernel in {gw.name}", kernels)
    if r.returncode != 0:
        diag(nb.output()[-3000:])
finally:
    if nb:
        nb.stop()
    if gw:
        gw.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
