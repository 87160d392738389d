"""JupyterLab 4 (PyPI, pinned in tests/requirements-jupyterlab.txt, installed
in tests/.venv-jupyterlab by scripts/venv.sh) started with --gateway-url
pointing at sandgate: in headless Chromium (jupyterlab_browser.mjs) a Python
notebook and an R notebook (kernelspec ir) run cells in sandgate kernels and
their rendered outputs are checked (text, a PNG figure, an error); the
kernels must be sandgate sessions (GET /contexts) running under gVisor, and
be gone once JupyterLab has stopped (it deletes its gateway kernels on
shutdown).  A second JupyterLab server, with KERNEL_SNAPSHOT in its
environment, starts its kernels from that snapshot.

SG_SCREENSHOT=path keeps the screenshot (docs/jupyterlab-gateway.png is made so)."""
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
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
VENV = os.path.join(SRC, "tests", ".venv-jupyterlab")
LAB_TOKEN = "lab-test-token-7d2e"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """JupyterLab from the venv, with runtime, config and data dirs of its own
    in dir (so no user settings, workspaces or kernelspecs come in)."""

    def __init__(self, dir, *args):
        env = dict(os.environ)
        for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
            env[var] = os.path.join(dir, sub)
            os.makedirs(env[var])
        env.pop("PYTHONPATH", None)  # the venv's packages, not the tests' helpers
        # Neither the news nor the update check: no pop-ups, no requests out.
        os.makedirs(os.path.join(env["JUPYTER_CONFIG_DIR"], "labconfig"))
        with open(os.path.join(env["JUPYTER_CONFIG_DIR"], "labconfig", "page_config.json"),
                  "w") as f:
            json.dump({"disabledExtensions":
                       {"@jupyterlab/apputils-extension:announcements": True}}, f)
        root = os.path.join(dir, "notebooks")
        os.mkdir(root)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(dir, "lab.log"), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(VENV, "bin", "jupyter-lab"), "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={LAB_TOKEN}", f"--ServerApp.root_dir={root}",
             "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None", *args]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=dir, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        # /api/status answers 200 once the server runs and the gateway has
        # answered its GET /api/kernels.
        self.status = None
        deadline = time.time() + 90
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={LAB_TOKEN}",
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

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # Jupyter Server shuts its kernels down
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


if not os.access(os.path.join(VENV, "bin", "jupyter-lab"), os.X_OK):
    ok(False, "tests/.venv-jupyterlab has JupyterLab (run scripts/venv.sh)")
    done()
    raise SystemExit

tmp = tempfile.mkdtemp(prefix="sg-lab-", dir="/tmp")
d = lab = None
started = time.time()
try:
    d = Daemon("--pool-size", "1")
    diag(f"sandgate at {d.url}")
    lab = Lab(tmp, f"--gateway-url={d.url}", f"--GatewayClient.auth_token={TOKEN}",
              "--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60")
    version = subprocess.run([os.path.join(VENV, "bin", "jupyter-lab"), "--version"],
                             capture_output=True, text=True).stdout.strip()
    ok(lab.up and version.startswith("4.") and
       f"Kernels will be managed by the Gateway server running at:\n{d.url}\n" in
       "".join(l.split("] ", 1)[-1] + "\n" for l in lab.output().splitlines()),
       f"JupyterLab {version} starts with sandgate as its kernel gateway (and its "
       "/api/status, which lists the gateway's kernels, answers 200)",
       f"/api/status: {lab.status}\n" + lab.output()[-3000:])
    diag(f"JupyterLab up after {time.time() - started:.1f} s")

    shot = os.path.join(tmp, "lab.png")
    r = subprocess.run(["node", os.path.join(SRC, "tests/clients/jupyterlab_browser.mjs"),
                        lab.url, LAB_TOKEN, shot], capture_output=True, text=True, timeout=240)
    checks = [l for l in r.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
    ok(r.returncode == 0 and len(checks) >= 16,
       f"the browser ran {len(checks)} checks, all passed", r.stdout[-3000:] + r.stderr[-2000:])
    for line in checks:
        ok(line.startswith("ok "), "browser: " + line.split(" - ", 1)[-1])
    info = {}
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            diag(line[1:].strip())
            key, _, value = line[1:].strip().partition(" ")
            info[key] = value
    diag(f"the browser done after {time.time() - started:.1f} s")

    st, kernels = d.json("GET", "/api/kernels")
    st2, ctxs = d.json("GET", "/contexts")
    for lang, home in (("python", "/home/user"), ("r", "/home/user")):
        kernel, where = info.get(f"kernel-{lang}", ""), info.get(f"where-{lang}", "").split()
        ok(st == 200 and kernel and kernel in [k["id"] for k in kernels],
           f"sandgate lists the {lang} notebook's kernel {kernel} (GET /api/kernels)", kernels)
        ctx = next((c for c in ctxs or [] if c["id"] == kernel), None)
        ok(st2 == 200 and ctx and ctx.get("language", "").lower() == lang,
           f"the {lang} kernel is a sandgate session like any other (GET /contexts)", ctxs)
        ok(len(where) == 3 and where[0].startswith(home) and where[1] == "4.4.0",
           f"the {lang} cells ran in sandgate's workspace under gVisor (kernel release 4.4.0)",
           where)

    ok(os.path.exists(shot) and open(shot, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
       "the screenshot is a PNG")
    keep = os.environ.get("SG_SCREENSHOT")
    if keep and os.path.exists(shot):
        shutil.copy(shot, keep)
        diag(f"screenshot kept in {keep}")

    # A kernel from a snapshot: a JupyterLab server with KERNEL_SNAPSHOT in
    # its environment forwards it (with its other KERNEL_* variables) in
    # every kernel start it sends the gateway.
    st, c = d.json("POST", "/contexts", {}, timeout=180)
    d.json("POST", "/execute", {"code": "snapvar = 'from the snapshot'", "context_id": c["id"]},
           headers={"Accept": "application/json"}, timeout=180)
    st, snap = d.json("POST", f"/contexts/{c['id']}/snapshots", {}, timeout=180)
    os.environ["KERNEL_SNAPSHOT"] = snap.get("id", "")
    try:
        lab2 = Lab(os.path.join(tmp, "snap"), f"--gateway-url={d.url}",
                   f"--GatewayClient.auth_token={TOKEN}", "--GatewayClient.request_timeout=120")
    finally:
        del os.environ["KERNEL_SNAPSHOT"]
    try:
        req = urllib.request.Request(f"{lab2.url}/api/kernels?token={LAB_TOKEN}",
                                     data=json.dumps({"name": "python3"}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=180) as answer:
            kid2 = json.load(answer)["id"]
        st, res = d.json("POST", "/execute", {"code": "print(snapvar)", "context_id": kid2},
                         headers={"Accept": "application/json"}, timeout=180)
        ok(st == 200 and res.get("stdout") == "from the snapshot\n",
           "JupyterLab with KERNEL_SNAPSHOT set starts its kernels from that snapshot", res)
    except (OSError, KeyError) as e:
        ok(False, "JupyterLab with KERNEL_SNAPSHOT set starts its kernels from that snapshot",
           repr(e) + lab2.output()[-2000:])
    finally:
        lab2.stop()

    lab.stop()
    st, after = d.json("GET", "/api/kernels")
    ids = [k["id"] for k in after or []]
    ok(st == 200 and info.get("kernel-python") and not any(
        info.get(f"kernel-{lang}") in ids for lang in ("python", "r")),
       "JupyterLab's shutdown deletes its kernels in sandgate", after)
    if r.returncode != 0:
        diag(lab.output()[-3000:])
    diag(f"{time.time() - started:.1f} s in all")
finally:
    if lab:
        lab.stop()
    if d:
        d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
