"""JupyterLab 4 from tests/.venv-jupyterlab, as the tests start it (Lab), and
jupyterlab_browser.mjs's steps run on it in headless Chromium (browse, or
Browsing for steps that hand-shake with the test on stdin and stdout)."""
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import types
import urllib.error
import urllib.request

from tap import ok, diag, relay

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


def keep_screenshot(path, env):
    """Checks that the browser's screenshot is a PNG; copies it to $env when set."""
    ok(os.path.exists(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
       f"the screenshot {os.path.basename(path)} is a PNG")
    keep = os.environ.get(env)
    if keep and os.path.exists(path):
        shutil.copy(path, keep)
        diag(f"screenshot kept in {keep}")


class Browsing:
    """jupyterlab_browser.mjs's steps on lab, running while the test reads
    its "# KEY VALUE" lines as they come (until) and answers on its stdin
    (send); finish relays its checks as browse does."""

    def __init__(self, lab, shot, *steps):
        diag(f"the browser's steps: {' '.join(steps)}")
        self.err = open(shot + ".stderr", "w+")
        self.proc = subprocess.Popen(
            ["node", os.path.join(SRC, "tests/clients/jupyterlab_browser.mjs"), lab.url,
             LAB_TOKEN, shot, *steps], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.err, text=True, bufsize=1)
        self.out, self.lines = [], queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def until(self, key, timeout=180):
        """Waits for the line "# KEY ..."; returns its value, or None when
        the browser ended or timeout passed first."""
        deadline = time.time() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                return None
            if line is None:
                self.lines.put(None)
                return None
            got, _, value = line[1:].strip().partition(" ")
            if line.startswith("#") and got == key:
                return value.strip()
            if time.time() > deadline:
                return None

    def send(self, line):
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def stop(self):
        """Ends a browser still running (the test failed before finish)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()

    def finish(self, least, timeout=120):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)
        self.err.seek(0)
        run = types.SimpleNamespace(stdout="".join(self.out), stderr=self.err.read(),
                                    returncode=self.proc.returncode)
        self.err.close()
        return run, relay(run, least)
