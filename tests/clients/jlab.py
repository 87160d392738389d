"""JupyterLab 4 from tests/.venv-jupyterlab, as the tests start it (Lab), and
jupyterlab_browser.mjs's steps run on it in headless Chromium (browse)."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from tap import diag, relay

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


def browse(lab, shot, least, *steps, timeout=300):
    """Runs jupyterlab_browser.mjs's steps on lab and relays its checks;
    returns the run and its "# KEY VALUE" lines as {KEY: VALUE}."""
    diag(f"the browser's steps: {' '.join(steps)}")
    r = subprocess.run(["node", os.path.join(SRC, "tests/clients/jupyterlab_browser.mjs"),
                        lab.url, LAB_TOKEN, shot, *steps],
                       capture_output=True, text=True, timeout=timeout)
    return r, relay(r, least)
