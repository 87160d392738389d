"""The sandgate daemon as a user meets it: --help, bad options, a config file,
startup, GET /health, error bodies, and a clean exit on SIGTERM."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from sgd import Daemon, stdout, wait_for
from tap import ok, diag, done, skip

SANDGATE = os.path.join(os.environ.get("SG_BUILDDIR", "."), "sandgate")

r = subprocess.run([SANDGATE, "--help"], capture_output=True, text=True)
ok(r.returncode == 0 and "--listen" in r.stdout, "--help exits 0 and documents --listen")
r = subprocess.run([SANDGATE, "--version"], capture_output=True, text=True)
ok(r.returncode == 0 and r.stdout.startswith("sandgate "), "--version")
r = subprocess.run([SANDGATE, "--listen", "nonsense"], capture_output=True, text=True)
ok(r.returncode == 2 and "HOST:PORT" in r.stderr, "bad --listen is a usage error", r.stderr)
r = subprocess.run([SANDGATE, "--bogus"], capture_output=True, text=True)
ok(r.returncode == 2 and "--help" in r.stderr, "unknown option is a usage error")
r = subprocess.run([SANDGATE, "--no-auth", "--listen", "0.0.0.0:0"], capture_output=True,
                   text=True)
ok(r.returncode == 2 and "loopback" in r.stderr, "--no-auth is refused off loopback", r.stderr)
r = subprocess.run([SANDGATE, "--sandbox", "docker"], capture_output=True, text=True)
ok(r.returncode == 2 and "runsc or none" in r.stderr, "bad --sandbox is a usage error", r.stderr)
r = subprocess.run([SANDGATE], capture_output=True, text=True,
                   env=dict(os.environ, SANDGATE_MEMORY="lots"))
ok(r.returncode == 2 and "SANDGATE_MEMORY" in r.stderr, "bad environment value names the variable",
   r.stderr)

tmp = tempfile.mkdtemp(prefix="sg-daemon-")
r = subprocess.run([SANDGATE, "--listen", "999.1.1.1:80", "--state-dir", tmp, "--pool-size", "0"],
                   capture_output=True, text=True)
ok(r.returncode == 1 and "not an IPv4 address" in r.stderr, "unusable address fails clearly",
   r.stderr)

# stdout not the test's: its banner, once ready, would land inside the TAP stream
r = subprocess.Popen([SANDGATE, "--listen", "127.0.0.1:0", "--sandbox", "none", "--state-dir",
                      tmp + "/none", "--pool-size", "0"], stderr=subprocess.PIPE,
                     stdout=subprocess.DEVNULL, text=True)
line = r.stderr.readline()
ok("--sandbox=none" in line and "development only" in line.lower(),
   "--sandbox=none prints a loud warning first", line)
r.terminate()
r.wait(timeout=10)

proc = subprocess.Popen([SANDGATE, "--listen", "127.0.0.1:0", "--state-dir", tmp, "--pool-size",
                         "1"], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
url = None
deadline = time.time() + 10
while url is None and time.time() < deadline:
    line = proc.stderr.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if m:
        url = m.group(1)
ok(url is not None, "daemon logs the URL it listens on")
banner = proc.stdout.readline() + proc.stdout.readline()
m = re.search(r"^  ([0-9a-f]{48})$", banner, re.M)
ok(m is not None, "without --token, a generated token is printed on stdout", banner)
token = m.group(1) if m else ""


def get(path, method="GET"):
    req = urllib.request.Request(url + path, method=method,
                                 headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type"), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), json.loads(e.read())


if url:
    status, ctype, body = get("/health")
    ok(status == 200 and ctype == "application/json" and body.get("status") == "ok",
       "GET /health is 200 JSON {status: ok}", body)
    deadline = time.time() + 60
    while time.time() < deadline and body.get("kernels", {}).get("pool_ready") != 1:
        time.sleep(0.5)
        status, ctype, body = get("/health")
    ok(body.get("kernels", {}).get("pool_ready") == 1, "the warm pool kernel becomes ready",
       body)
    status, _, body = get("/health", "POST")
    ok(status == 405 and body.get("error") == "method_not_allowed", "POST /health is 405", body)
    status, _, body = get("/no/such/thing")
    ok(status == 404 and body.get("error") == "not_found" and "/no/such/thing" in body["message"],
       "unknown route is a 404 with a JSON error naming it", body)

proc.send_signal(signal.SIGTERM)
try:
    rc = proc.wait(timeout=5)
except subprocess.TimeoutExpired:
    proc.kill()
    rc = None
ok(rc == 0, "SIGTERM stops the daemon cleanly", rc)
log = proc.stderr.read()
ok(token and token not in log, "the token never appears in the log")
r = subprocess.run(["runsc", "--root", tmp + "/runsc", "list", "-quiet"], capture_output=True,
                   text=True)
ok(r.returncode == 0 and r.stdout.strip() == "", "pool kernels are removed at shutdown", r.stdout)
subprocess.run(["rm", "-rf", tmp])

# --- the config file ------------------------------------------------------------
cfg = tempfile.mkdtemp(prefix="sg-config-")
# Should a broken build ignore the file, these keep the daemon it starts quick and harmless.
QUICK = ["--sandbox", "none", "--pool-size", "0"]


def conf(name, text, mode=0o600):
    path = os.path.join(cfg, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def refused(args, env=None):
    """Runs sandgate expecting it to refuse to start; returns (rc, stderr)."""
    try:
        r = subprocess.run([SANDGATE, *args, *QUICK, "--state-dir", cfg + "/state"],
                           capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, **(env or {})))
        return r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        return None, e.stderr


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Started(Daemon):
    """sgd's Daemon without the --listen and --token it passes, which these tests
    leave to the config file; log holds what it logged, stdout is kept."""

    def __init__(self, args, env=None):
        self.dir = tempfile.mkdtemp(prefix="sg-config-", dir="/tmp")
        self.proc = subprocess.Popen([SANDGATE, "--state-dir", self.dir, *args],
                                     stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **(env or {})))
        self.log = []
        self.url = None
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        self.watch_log()

    def status(self, token):
        return self.request("GET", "/contexts", token=token, timeout=5)[0]


# Options from the file: its port and (quoted) token are used; comments, blank
# lines and spaces are ignored; a world-readable file holding the token is warned about.
port = free_port()
path = conf("sandgate.conf", f"""# sandgate
listen = 127.0.0.1:{port}

   token   =  "file-token-0123456789"
log-level = info
""", 0o644)
d = Started(["--config", path, *QUICK])
ok(d.url == f"http://127.0.0.1:{port}", "the config file's listen address is used", d.url)
if d.url:
    ok(d.status("file-token-0123456789") == 200,
       "a request with the config file's token succeeds")
    ok(d.status("wrong-token-0123456789") == 401, "a wrong token is 401")
d.stop()
out = d.proc.stdout.read()
ok("Token" not in out, "no token is generated when the file sets one", out)
ok(any(path in l and "0600" in l for l in d.log),
   "a world-readable file holding the token is warned about", "".join(d.log))

# The command line overrides the file (listen), the environment overrides it too
# (token); what neither sets still comes from the file (sandbox).
port2 = free_port()
path = conf("override.conf", f"listen = 127.0.0.1:{port}\ntoken = file-token-0123456789\n"
            "sandbox = none\n")
d = Started(["-c", path, "--listen", f"127.0.0.1:{port2}", "--pool-size", "0"],
            env={"SANDGATE_TOKEN": "env-token-0123456789"})
ok(d.url == f"http://127.0.0.1:{port2}" and any("--sandbox=none" in l for l in d.log),
   "the command line overrides the config file", "".join(d.log))
if d.url:
    ok(d.status("env-token-0123456789") == 200 and
       d.status("file-token-0123456789") == 401,
       "the environment overrides the config file")
d.stop()
ok(not any("0600" in l for l in d.log), "no warning for a mode 0600 file", "".join(d.log))

# Files that stop sandgate: exit status 2 and a message that says where.
path = conf("env.conf", "listen = 10.0.0.1:0\nno-auth = yes\n")
rc, err = refused([], {"SANDGATE_CONFIG": path})
ok(rc == 2 and "(10.0.0.1)" in err, "SANDGATE_CONFIG names the config file", err)
rc, err = refused(["--config", path], {"SANDGATE_CONFIG": cfg + "/missing.conf"})
ok(rc == 2 and "(10.0.0.1)" in err, "--config wins over SANDGATE_CONFIG", err)
path = conf("unknown.conf", "# a comment\nfoo = 1\n")
rc, err = refused(["-c", path, "--listen", "127.0.0.1:0"])
ok(rc == 2 and f"{path}:2: unknown option 'foo'" in err,
   "an unknown option in the file names file:line", err)
path = conf("bad.conf", "memory = 512\nmemory = lots\n")
rc, err = refused(["-c", path, "--listen", "127.0.0.1:0"])
ok(rc == 2 and f"{path}:2: --memory wants" in err and "'lots'" in err,
   "a bad value in the file names file:line", err)
path = conf("syntax.conf", "listen 127.0.0.1:0\n")
rc, err = refused(["-c", path, "--listen", "127.0.0.1:0"])
ok(rc == 2 and f"{path}:1: expected 'name = value'" in err, "a line without '='", err)
path = conf("help.conf", "\nhelp = true\n")
rc, err = refused(["-c", path, "--listen", "127.0.0.1:0"])
ok(rc == 2 and f"{path}:2: 'help' is not allowed" in err, "'help' is refused in the file", err)
rc, err = refused(["-c", cfg + "/missing.conf", "--listen", "127.0.0.1:0"])
ok(rc == 2 and f"{cfg}/missing.conf: No such file or directory" in err,
   "a missing --config file is an error naming it", err)
rc, err = refused(["--listen", "127.0.0.1:0"], {"SANDGATE_CONFIG": cfg + "/missing.conf"})
ok(rc == 2 and f"{cfg}/missing.conf" in err, "a missing SANDGATE_CONFIG file is an error", err)
shutil.rmtree(cfg, ignore_errors=True)

# Connection limits: per client address, and idle connections closed.
d = Daemon("--sandbox", "none", "--pool-size", "0", "--max-connections-per-ip", "2",
           "--connection-timeout", "2")
try:
    port = int(d.url.rsplit(":", 1)[1])

    def closed_within(sock, seconds):
        sock.settimeout(seconds)
        try:
            return sock.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            return False

    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    third = socket.create_connection(("127.0.0.1", port))
    ok(closed_within(third, 2), "a third connection from one address is closed at once "
                                "(--max-connections-per-ip 2)")
    ok(not closed_within(held[0], 0.5), "the first two stay open")
    ok(closed_within(held[0], 5) and closed_within(held[1], 1),
       "idle connections are closed after --connection-timeout 2")
    for c in held + [third]:
        c.close()

    # The server forgets a closed connection's address slot when its loop
    # next cleans up, a moment after the FIN; a new client may be refused
    # in that moment and retries, as a real one would.
    def health():
        try:
            return d.json("GET", "/health")[0]
        except OSError as e:
            return repr(e)

    status = None
    for _ in range(20):
        status = health()
        if status == 200:
            break
        time.sleep(0.1)
    ok(status == 200, "and the daemon serves the next client", status)
finally:
    d.stop()

# Clients that half-close after their request (shutdown(SHUT_WR)) are
# answered, and their connections do not linger in CLOSE-WAIT until the
# (default, 300 s) connection timeout (found by fuzz_http).
d = Daemon("--sandbox", "none", "--pool-size", "0")
try:
    port = int(d.url.rsplit(":", 1)[1])

    def close_wait():
        out = subprocess.run(["ss", "-tn", "state", "close-wait", f"( sport = :{port} )"],
                             capture_output=True, text=True).stdout
        return len(out.splitlines()) - 1
    def whole_response(s):
        """Reads one response to its end: unread bytes would make close() a RST,
        which libmicrohttpd notices on its own."""
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(4096)
        head, _, body = got.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))
        while len(body) < length:
            body += s.recv(4096)
        return head + b"\r\n\r\n" + body
    answers = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        answers.append(whole_response(s))
        s.close()
    wait_for(lambda: close_wait() == 0)  # sandgate closes its side once the reply is out
    ok(all(a.startswith(b"HTTP/1.1 200") for a in answers) and close_wait() == 0,
       "half-closing clients are answered and their connections closed", (answers, close_wait()))
finally:
    d.stop()

# SANDGATE_INIT relative to the daemon's working directory (as a build
# directory gives it): kernels still start.  The daemon makes the path
# absolute; runsc resolved a relative bind mount's source against the
# bundle and the sandbox died with "cannot read client sync file".
init = os.environ.get("SANDGATE_INIT")
rel = os.path.relpath(init) if init and os.path.exists(init) else None
for mode in ("none", "runsc"):
    what = f"a relative SANDGATE_INIT ({rel}) starts a kernel (--sandbox {mode})"
    if rel is None:
        skip(what, "no SANDGATE_INIT to make relative")
    elif mode == "runsc" and (os.geteuid() != 0 or not shutil.which("runsc")):
        skip(what, "needs root and runsc")
    else:
        d = Daemon("--sandbox", mode, "--pool-size", "0", env={"SANDGATE_INIT": rel})
        try:
            lines = d.execute("print(6 * 7)")
            ok(stdout(lines) == "42\n", what, lines)
        finally:
            d.stop()
done()
