"""The sandgate daemon as a user meets it: --help, bad options, startup,
GET /health, error bodies, and a clean exit on SIGTERM."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from tap import ok, diag, done

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

r = subprocess.Popen([SANDGATE, "--listen", "127.0.0.1:0", "--sandbox", "none", "--state-dir",
                      tmp + "/none", "--pool-size", "0"], stderr=subprocess.PIPE, text=True)
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
done()
