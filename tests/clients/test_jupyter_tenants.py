"""Several users, one sandgate: two real Jupyter Servers, each with its own key.

A keys file made with `sandgate keys add` holds two tenants, alice and bob.
alice runs Debian's Notebook 6 (`jupyter notebook`), configured on its
command line (--gateway-url, --GatewayClient.auth_token=her key); bob runs
JupyterLab 4's Jupyter Server from tests/.venv-jupyterlab, configured only
by its environment, as a JupyterHub spawner would configure a user's server
(JUPYTER_GATEWAY_URL, JUPYTER_GATEWAY_AUTH_TOKEN=his key); each server has
KERNEL_USERNAME, the user's name, in its environment.

Through each server's own REST API (its token in the Authorization header)
each user starts a kernel, runs code in it over the server's kernel
WebSocket (the server proxies it to sandgate), and lists kernels: each sees
only their own. (Both servers also list only the kernels they started
themselves, whatever the gateway lists; Notebook 6 asks the gateway for a
kernel by id, and sandgate answers alice's key 404 for bob's. What keeps a
user who has their key — a terminal on their server can read it — from
another's kernels is sandgate's check of the key, tested directly below.)
The ids the servers report are sandgate's, of the right tenant, and carry
the user's KERNEL_USERNAME (GET /contexts, the audit log's kernel.create,
the session records). Directly against sandgate with bob's key, alice's
kernel is unknown — GET /api/kernels/{id} and the WebSocket handshake answer
404, exactly as for an id that does not exist — and bob's GET /contexts does
not show it. A KERNEL_USERNAME that is not a plain string is refused. Then
both servers die without cleaning up and sandgate restarts: the kernels come
back with their tenant and username. Needs root and runsc, Notebook 6 and
tests/.venv-jupyterlab."""
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
import uuid

from sgd import Daemon, SANDGATE, audit_wait
from tap import ok, diag, done
from wsclient import WS, V1, handshake

SRC = os.environ.get("SG_SRCDIR", ".")
VENV = os.path.join(SRC, "tests", ".venv-jupyterlab")
NB_TOKEN = "nb-alice-token-41c7"
LAB_TOKEN = "lab-bob-token-9e02"
CODE = "import os\nprint(os.environ.get('KERNEL_USERNAME'), os.uname().release, 6 * 7)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, method="GET", body=None, auth=None):
    """(status, JSON or bytes) of a request."""
    h = {"Content-Type": "application/json"}
    if auth:
        h["Authorization"] = auth
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=150) as r:
            st, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        st, raw = e.code, e.read()
    try:
        return st, json.loads(raw) if raw.strip() else None
    except ValueError:
        return st, raw


class Server:
    """A Jupyter server of a user's: its own runtime, config and data dirs in
    dir, argv and extra environment as given; up once /api/status answers."""

    def __init__(self, name, dir, argv, token, env):
        self.name, self.token = name, token
        os.makedirs(dir)
        e = dict(os.environ)
        for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
            e[var] = os.path.join(dir, sub)
            os.makedirs(e[var])
        for k, v in env.items():  # None: not inherited
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        root = os.path.join(dir, "notebooks")
        os.mkdir(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(dir, "server.log"), "w+")
        self.proc = subprocess.Popen(
            argv(self.port, root) + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=dir, env=e, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_up(self, timeout=90):
        status, deadline = None, time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}",
                                            timeout=30) as r:
                    status = r.status
                break
            except urllib.error.HTTPError as e:
                status = e.code
                break
            except OSError:
                time.sleep(0.2)
        return status == 200

    def api(self, method, path, body=None):
        return http(self.url + path, method, body, f"token {self.token}")

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def gateway_line(self, url):
        """Whether its log says its kernels are url's."""
        text = "".join(l.split("] ", 1)[-1] + "\n" for l in self.output().splitlines())
        return f"Kernels will be managed by the Gateway server running at:\n{url}\n" in text

    def kill(self):
        """Dies without deleting its kernels (as a crashed or killed server)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def metric(d, name):
    """A value of sandgate's /metrics (the admin's), 0 when absent."""
    st, _, data = d.request("GET", "/metrics")
    for line in data.decode().splitlines() if st == 200 else []:
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0


if not os.access(os.path.join(VENV, "bin", "jupyter-lab"), os.X_OK):
    ok(False, "tests/.venv-jupyterlab has JupyterLab (run scripts/venv.sh)")
    done()
    raise SystemExit

tmp = tempfile.mkdtemp(prefix="sg-jtenants-", dir="/tmp")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")
AUDIT = os.path.join(tmp, "audit.log")
keys = {}
for who in ("alice", "bob"):
    r = subprocess.run([SANDGATE, "keys", "add", who, "--keys-file", KEYS], capture_output=True,
                       text=True)
    keys[who] = r.stdout.strip().splitlines()[-1] if r.returncode == 0 else ""
ok(all(k.startswith("sgk_") for k in keys.values()),
   "sandgate keys add makes a key for alice and one for bob", keys)

d = nb = lab = None
started = time.time()
try:
    d = Daemon("--keys-file", KEYS, "--pool-size", "1", "--audit-log", AUDIT)
    diag(f"sandgate at {d.url}")
    # alice: Notebook 6, configured on its command line.
    nb = Server("alice's Notebook 6", os.path.join(tmp, "alice"), lambda port, root: [
        "/usr/bin/python3", "-m", "notebook", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--NotebookApp.port_retries=0", f"--NotebookApp.token={NB_TOKEN}",
        f"--NotebookApp.notebook_dir={root}", f"--gateway-url={d.url}",
        f"--GatewayClient.auth_token={keys['alice']}", "--GatewayClient.request_timeout=120",
        "--GatewayClient.connect_timeout=60"], NB_TOKEN, {"KERNEL_USERNAME": "alice"})
    # bob: JupyterLab 4's Jupyter Server, configured by its environment alone
    # (what a JupyterHub spawner's environment gives a user's server).
    lab_env = {"JUPYTER_GATEWAY_URL": d.url, "JUPYTER_GATEWAY_AUTH_TOKEN": keys["bob"],
               "JUPYTER_GATEWAY_REQUEST_TIMEOUT": "120",
               "JUPYTER_GATEWAY_CONNECT_TIMEOUT": "60", "KERNEL_USERNAME": "bob"}
    lab = Server("bob's JupyterLab 4", os.path.join(tmp, "bob"), lambda port, root: [
        os.path.join(VENV, "bin", "jupyter-lab"), "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={LAB_TOKEN}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None"], LAB_TOKEN, dict(lab_env, PYTHONPATH=None))  # the venv's packages, not the tests' helpers
    for srv in (nb, lab):
        up = srv.wait_up(150)
        diag(f"{srv.name} up after {time.time() - started:.1f} s")
        ok(up and srv.gateway_line(d.url),
           f"{srv.name} starts with sandgate as its kernel gateway, with its user's key "
           "(and its /api/status, which lists the gateway's kernels, answers 200)",
           srv.output()[-3000:])

    # The servers' kernelspecs come from sandgate (Jupyter Server asks for them
    # with ?user=KERNEL_USERNAME, which sandgate ignores).
    for srv in (nb, lab):
        st, specs = srv.api("GET", "/api/kernelspecs")
        ok(st == 200 and "python3" in (specs or {}).get("kernelspecs", {}),
           f"{srv.name} offers sandgate's kernelspecs", (st, specs))

    # --- each starts a kernel and runs code in it over its own WebSocket ---------------
    # alice's kernel is the warm pool's (claimed: its record, written before
    # the username is known, is written again); bob's, started next, most
    # likely a fresh one (written once ready).
    deadline = time.time() + 120
    while metric(d, 'sandgate_pool_kernels{state="ready"}') < 1 and time.time() < deadline:
        time.sleep(0.2)
    kid = {}
    for who, srv in (("alice", nb), ("bob", lab)):
        claims = metric(d, "sandgate_pool_claims_total")
        st, model = srv.api("POST", "/api/kernels", {"name": "python3"})
        kid[who] = model.get("id", "") if st in (200, 201) and isinstance(model, dict) else ""
        ok(kid[who], f"{who} starts a kernel through {srv.name}'s POST /api/kernels",
           (st, model, srv.output()[-2000:]))
        pooled = metric(d, "sandgate_pool_claims_total") > claims
        diag(f"{who}'s kernel: {kid[who]} ({'from the pool' if pooled else 'a fresh start'})")
        if who == "alice":
            ok(pooled, "alice's kernel is claimed from the warm pool")
    for who, srv, protocols in (("alice", nb, None), ("bob", lab, [V1])):
        try:
            ws = WS(srv.url, kid[who], srv.token, session=str(uuid.uuid4()), protocols=protocols,
                    timeout=120)
            reply, iopub = ws.execute(CODE)
            out = "".join(m["content"].get("text", "") for m in iopub
                          if m["header"]["msg_type"] == "stream")
            ws.close()
        except Exception as e:  # noqa: BLE001 - reported below
            reply, out = None, f"{type(e).__name__}: {e}"
        ok(reply and reply["content"]["status"] == "ok" and out == f"{who} 4.19.0-gvisor 42\n",
           f"{who}'s code runs in their sandgate kernel over {srv.name}'s kernel WebSocket "
           "(under gVisor, KERNEL_USERNAME in its environment)", out)

    # --- each server lists only its user's kernel -----------------------------------------
    for who, srv, other in (("alice", nb, "bob"), ("bob", lab, "alice")):
        st, lst = srv.api("GET", "/api/kernels")
        ids = [k.get("id") for k in lst] if st == 200 and isinstance(lst, list) else None
        ok(ids == [kid[who]], f"{srv.name}'s GET /api/kernels lists {who}'s kernel and not "
           f"{other}'s", (st, lst))
        # Notebook 6 asks the gateway for an id it did not start (with its
        # user's key: sandgate answers 404, and Notebook a null model);
        # Jupyter Server 2 answers 404 itself for a kernel it did not start.
        st, m = srv.api("GET", f"/api/kernels/{kid[other]}")
        asked = f"Kernel not found at: {d.url}/api/kernels/{kid[other]}" in srv.output()
        ok((st, m) == (200, None) and asked if srv is nb else st == 404,
           f"{srv.name} has no model of {other}'s kernel" +
           (" (sandgate answered its GET with 404: it logs 'Kernel not found')"
            if srv is nb else " (404)"), (st, m, srv.output()[-1500:]))

    # --- sandgate's view: tenants and usernames -----------------------------------------
    st, ctxs = d.json("GET", "/contexts")
    by_id = {c["id"]: c for c in ctxs} if st == 200 else {}
    for who in ("alice", "bob"):
        c = by_id.get(kid[who], {})
        ok(c.get("tenant") == who and c.get("username") == who,
           f"the admin's GET /contexts shows {who}'s kernel as tenant {who}, username {who}",
           ctxs)
        st, c = http(f"{d.url}/contexts/{kid[who]}", auth=f"Bearer {keys[who]}")
        ok(st == 200 and c.get("username") == who and c.get("tenant") == who,
           f"{who}'s own GET /contexts/{{id}} carries \"username\": \"{who}\"", (st, c))
        ev = audit_wait(AUDIT, lambda e, who=who: e.get("event") == "kernel.create" and
                        e.get("context") == kid[who])
        ok(len(ev) == 1 and ev[0].get("username") == who and ev[0].get("tenant") == who and
           ev[0].get("frontend") == "jupyter",
           f"the audit log's kernel.create of {who}'s kernel names tenant and username {who}", ev)
        rec, deadline = {}, time.time() + 20
        while rec.get("username") != who and time.time() < deadline:
            try:
                rec = json.load(open(os.path.join(d.dir, "sessions", kid[who] + ".json")))
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        ok(rec.get("username") == who and rec.get("tenant") == who,
           f"{who}'s kernel's session record holds their tenant and username", rec)

    # --- bob's key, directly against sandgate: alice's kernel does not exist -------------
    bob = f"Bearer {keys['bob']}"
    unknown = str(uuid.uuid4())
    st, body = http(f"{d.url}/api/kernels/{kid['alice']}", auth=bob)
    st2, body2 = http(f"{d.url}/api/kernels/{unknown}", auth=bob)
    ok(st == 404 and (st2, json.dumps(body2).replace(unknown, "ID")) ==
       (st, json.dumps(body).replace(kid["alice"], "ID")),
       "with bob's key, GET /api/kernels/{alice's id} is 404, as for an id that does not exist",
       (st, body, st2, body2))
    answers = []
    for k in (kid["alice"], unknown):
        s, status, hdrs, rest = handshake(d.url, f"/api/kernels/{k}/channels?token={keys['bob']}")
        s.close()
        answers.append(status)
    ok(answers == [404, 404],
       "with bob's key, the WebSocket handshake for alice's kernel is refused 404, as for an "
       "unknown id", answers)
    st, lst = http(f"{d.url}/contexts", auth=bob)
    ok(st == 200 and [c["id"] for c in lst] == [kid["bob"]],
       "bob's GET /contexts (the REST and E2B view) shows his kernel, not alice's", lst)
    st, lst = http(f"{d.url}/api/kernels", auth=bob)
    ok(st == 200 and [k["id"] for k in lst] == [kid["bob"]],
       "bob's GET /api/kernels, straight to sandgate, lists only his", lst)

    # --- KERNEL_USERNAME must be a plain string ------------------------------------------
    for bad, what in (("a\nb", "a control character"), (7, "a number"), ("x" * 257, "257 bytes")):
        st, body = http(f"{d.url}/api/kernels", "POST", {"env": {"KERNEL_USERNAME": bad}}, bob)
        ok(st == 400 and "KERNEL_USERNAME" in (body or {}).get("message", ""),
           f"a KERNEL_USERNAME of {what} is refused (400, naming it)", (st, body))
    st, m = http(f"{d.url}/api/kernels", "POST", {"env": {"KERNEL_USERNAME": ""}}, bob)
    st2, c = http(f"{d.url}/contexts/{(m or {}).get('id')}", auth=bob) if st == 201 else (0, {})
    ok(st == 201 and st2 == 200 and "username" not in c,
       "an empty KERNEL_USERNAME is none: the context has no username", (st, m, c))
    if st == 201:
        http(f"{d.url}/api/kernels/{m['id']}", "DELETE", auth=bob)

    # --- the servers die without cleaning up; sandgate restarts --------------------------
    nb.kill()
    lab.kill()
    d.restart()
    diag(f"sandgate restarted at {d.url}")
    st, ctxs = d.json("GET", "/contexts")
    by_id = {c["id"]: c for c in ctxs} if st == 200 else {}
    ok(all(by_id.get(kid[w], {}).get("tenant") == w and by_id.get(kid[w], {}).get("username") == w
           for w in ("alice", "bob")),
       "after a restart both kernels are back with their tenant and username", ctxs)
    st, lst = http(f"{d.url}/api/kernels", auth=f"Bearer {keys['alice']}")
    ok(st == 200 and [k["id"] for k in lst] == [kid["alice"]],
       "and alice's key still lists only hers", lst)
    for w in ("alice", "bob"):
        http(f"{d.url}/api/kernels/{kid[w]}", "DELETE", auth=f"Bearer {keys[w]}")
    diag(f"{time.time() - started:.1f} s in all")
finally:
    for srv in (nb, lab):
        if srv:
            srv.kill()
    if d:
        d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
