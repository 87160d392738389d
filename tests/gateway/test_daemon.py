"""The sandgate daemon as a user meets it: --help, bad options, startup,
GET /health, error bodies, and a clean exit on SIGTERM."""
import json
import os
import re
import signal
import subprocess
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
r = subprocess.run([SANDGATE, "--listen", "999.1.1.1:80"], capture_output=True, text=True)
ok(r.returncode == 1 and "not an IPv4 address" in r.stderr, "unusable address fails clearly",
   r.stderr)

proc = subprocess.Popen([SANDGATE, "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
url = None
deadline = time.time() + 10
while url is None and time.time() < deadline:
    line = proc.stderr.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if m:
        url = m.group(1)
ok(url is not None, "daemon logs the URL it listens on")


def get(path, method="GET"):
    req = urllib.request.Request(url + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type"), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), json.loads(e.read())


if url:
    status, ctype, body = get("/health")
    ok(status == 200 and ctype == "application/json" and body.get("status") == "ok",
       "GET /health is 200 JSON {status: ok}", body)
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
done()
