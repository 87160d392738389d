"""@jupyterlab/services (npm), the library JupyterLab is built on, against
sandgate's Jupyter Server API (jlab_services.mjs): once offering no WebSocket
subprotocol (the default JSON format) and once with the library's own choice
(v1.kernel.websocket.jupyter.org, which sandgate must select).

SG_REFERENCE=notebook checks the script itself against the reference: a plain
Notebook 6 server the test starts (Debian's). Notebook 6 does not offer the v1
subprotocol, so there the v1 run expects the library's fallback (the refused
socket, then a reconnection offering nothing)."""
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
REFERENCE = os.environ.get("SG_REFERENCE", "")
SCRIPT = os.path.join(SRC, "tests/lib/jlab_services.mjs")
CHECKS = 34  # what jlab_services.mjs checks when it runs to the end
NB_TOKEN = "nb-jlab-token-7c2e"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Notebook:
    """The reference: a Notebook 6 server with its own runtime, config and data dirs."""
    name = "the reference Notebook server"
    flags = {"v1": ["--server-without-v1"]}

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sg-jlab-nb-", dir="/tmp")
        self.token = NB_TOKEN
        env = dict(os.environ)
        for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
            env[var] = os.path.join(self.dir, sub)
            os.makedirs(env[var])
        os.mkdir(os.path.join(self.dir, "notebooks"))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(self.dir, "notebook.log"), "w+")
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
             f"--port={port}", "--NotebookApp.port_retries=0", f"--NotebookApp.token={NB_TOKEN}",
             f"--NotebookApp.notebook_dir={os.path.join(self.dir, 'notebooks')}"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=self.dir, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={NB_TOKEN}",
                                            timeout=30):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("Notebook did not start:\n" + self.output()[-3000:])

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # Notebook shuts its kernels down
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Sandgate:
    name = "sandgate"
    flags = {}

    def __init__(self):
        self.daemon = Daemon("--pool-size", "1")
        self.url, self.token = self.daemon.url, TOKEN

    def output(self):
        return "".join(self.daemon.log)

    def stop(self):
        self.daemon.stop()


server = (Notebook if REFERENCE == "notebook" else Sandgate)()
try:
    diag(f"server: {server.name} at {server.url}")
    for mode in ("default", "v1"):
        try:
            r = subprocess.run(["node", SCRIPT, server.url, server.token, mode,
                                *server.flags.get(mode, [])],
                               capture_output=True, text=True, timeout=400)
            out, err, rc = r.stdout, r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = (e.stdout or b"").decode(), (e.stderr or b"").decode(), "timeout"
        lines = out.splitlines()
        checks = [l for l in lines if l.startswith(("ok ", "not ok "))]
        for line in checks:
            ok(line.startswith("ok "), f"{mode}: " + line.split(" - ", 1)[-1])
            # the script's details of a failed check follow it as "#   " lines
            i = lines.index(line) + 1
            while i < len(lines) and lines[i].startswith("#   "):
                diag("  " + lines[i][4:])
                i += 1
        for line in lines:
            if line.startswith("# ") and not line.startswith("#   "):
                diag(f"{mode}: {line[2:]}")
        ok(rc == 0 and len(checks) == CHECKS,
           f"{mode}: the client ran {len(checks)} of {CHECKS} checks, all passed (exit {rc})",
           err[-3000:] + ("\n--- server log:\n" + server.output()[-3000:] if rc != 0 else ""))
finally:
    server.stop()
done()
