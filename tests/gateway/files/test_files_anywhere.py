"""Files anywhere in a context's sandbox over the REST API (?path=, absolute),
against real runsc: round trips under /tmp and /home/user, listing, stat,
mkdir, move, delete; a 256 MiB upload to /tmp with sandgate's RSS flat; and
escapes to the host through every new path, each refused or contained.

Attacks (each must fail to reach the host):
  * a symlink planted by sandboxed code at /tmp/esc -> /proc/1/root: read
    through it, sandgate must see the sandbox's root (gVisor's /proc/1 is the
    sandbox's init), never the host's;
  * /proc/1/root/... named directly, and '..' runs climbing above /;
  * the host's state directory and another context's workspace, by their
    host paths: they do not exist inside the sandbox;
  * a symlink in the workspace pointing at the host state dir;
  * writes to those paths: nothing appears on the host.
"""
import hashlib
import http.client
import json
import os
import socket
import tempfile
import threading
import time
import urllib.parse

from sgd import Daemon, TOKEN, add_key, rss_kib, stdout
from tap import ok, diag, done

MiB = 1 << 20
BIG = 256 * MiB
tmp = tempfile.mkdtemp(prefix="sg-anywhere-")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")
ALICE = add_key(KEYS, "alice")
BOB = add_key(KEYS, "bob")
# /tmp is a tmpfs of --tmp-size MiB (256 by default): room for the big file.
d = Daemon("--keys-file", KEYS, "--pool-size", "0", "--tmp-size", "640",
           "--max-upload", str(BIG + MiB))
host = urllib.parse.urlparse(d.url)


def req(method, path, body=None, token=ALICE, headers=None):
    """method path as given; returns (status, headers, bytes)."""
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=300)
    h = {"Authorization": "Bearer " + token}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.headers, data


def q(p):
    return urllib.parse.quote(p, safe="/")


def js(data):
    try:
        return json.loads(data)
    except ValueError:
        return None


def code_of(data):
    return (js(data) or {}).get("code")


def run(code, cid):
    return stdout(d.execute(code, context_id=cid))


try:
    status, ctx = d.json("POST", "/contexts", {}, token=ALICE)
    cid = ctx["id"]
    F = f"/contexts/{cid}/files"
    status, other = d.json("POST", "/contexts", {}, token=ALICE)
    oid = other["id"]
    ws_other = os.path.join(d.dir, "workspaces", oid)
    ok(os.path.isdir(ws_other), "the other context's workspace is a host directory", ws_other)

    # --- round trips --------------------------------------------------------------------
    text = "héllo from the host\n".encode()
    s, _, body = req("PUT", F + "?path=/tmp/a/b/hello.txt", text)
    e = js(body) or {}
    ok(s == 201 and e.get("path") == "/tmp/a/b/hello.txt" and e.get("type") == "file"
       and e.get("size") == len(text) and e.get("owner") == "user",
       "PUT ?path=/tmp/... writes a file (parents made), 201 with its entry, owned by the "
       "sandbox user", (s, body))
    ok(run("print(open('/tmp/a/b/hello.txt', encoding='utf-8').read(), end='')", cid)
       == text.decode(), "the kernel sees the file in its own /tmp")
    s, h, body = req("GET", F + "?path=/tmp/a/b/hello.txt")
    ok(s == 200 and body == text and h["Content-Type"].startswith("text/plain"),
       "GET ?path= reads it back, typed by extension", (s, body))
    allbytes = bytes(range(256)) * 4
    s, _, body = req("PUT", F + "?path=/tmp/bin/all.bin", allbytes)
    s2, _, back = req("GET", F + "?path=/tmp/bin/all.bin")
    ok(s == 201 and s2 == 200 and back == allbytes, "binary (all 256 byte values) round trip",
       (s, s2, len(back)))
    ok(run("import hashlib; print(hashlib.sha256(open('/tmp/bin/all.bin','rb').read())"
           ".hexdigest())", cid).strip() == hashlib.sha256(allbytes).hexdigest(),
       "and the sandbox holds exactly those bytes")
    s, _, body = req("PUT", F + "?path=/home/user/from-abs.txt", b"abs")
    s2, _, back = req("GET", F + "/from-abs.txt")
    ok(s == 201 and s2 == 200 and back == b"abs",
       "/home/user/x written by path is the workspace's x", (s, s2, back))
    req("PUT", F + "/from-rel.txt", b"rel")
    s, _, back = req("GET", F + "?path=/home/user/from-rel.txt")
    ok(s == 200 and back == b"rel", "and the reverse", (s, back))
    ten = os.urandom(10 * MiB)
    s, _, body = req("PUT", F + "?path=/tmp/ten.bin", ten)
    s2, _, back = req("GET", F + "?path=/tmp/ten.bin")
    ok(s == 201 and s2 == 200 and back == ten, "a 10 MiB file round trip", (s, s2, len(back)))
    s, _, body = req("PUT", F + "?path=/tmp/empty", b"")
    s2, _, back = req("GET", F + "?path=/tmp/empty")
    ok(s == 201 and s2 == 200 and back == b"", "an empty file", (s, s2, back))

    # --- listing, stat, mkdir, move, delete ---------------------------------------------
    s, _, body = req("GET", F + "?path=/tmp/a")
    lst = js(body) or {}
    ok(s == 200 and lst.get("path") == "/tmp/a"
       and [x["path"] for x in lst.get("entries", [])] == ["/tmp/a/b"],
       "GET ?path=DIR lists it (depth 1)", (s, body))
    s, _, body = req("GET", F + "?path=/tmp/a&depth=2")
    ok(s == 200 and [x["path"] for x in (js(body) or {}).get("entries", [])]
       == ["/tmp/a/b", "/tmp/a/b/hello.txt"], "depth=2 lists a level deeper", (s, body))
    s, _, body = req("GET", F + "?path=/tmp/a/b/hello.txt&stat=1")
    e = js(body) or {}
    ok(s == 200 and e.get("type") == "file" and e.get("size") == len(text)
       and e.get("name") == "hello.txt" and e.get("permissions", "").startswith("rw"),
       "?stat=1 gives a file's entry", (s, body))
    s, _, body = req("GET", F + "?path=/tmp/nope&stat=1")
    ok(s == 404 and code_of(body) == "not_found", "stat of nothing: 404 not_found", (s, body))
    s, _, body = req("POST", F + "/mkdir", json.dumps({"path": "/tmp/m/n/o"}).encode())
    ok(s == 201 and (js(body) or {}).get("type") == "dir", "mkdir makes a directory and its "
       "parents: 201 with its entry", (s, body))
    s, _, body = req("POST", F + "/mkdir", json.dumps({"path": "/tmp/a/b/hello.txt"}).encode())
    ok(s == 409 and code_of(body) == "exists", "mkdir onto a file: 409 exists", (s, body))
    req("POST", F + "/mkdir", json.dumps({"path": "/tmp/dir-to-move"}).encode())
    s, _, body = req("POST", F + "/move", json.dumps({"from": "/tmp/dir-to-move",
                                                      "to": "/home/user/d"}).encode())
    ok(s == 409 and code_of(body) == "cross_device",
       "a directory does not move across file systems: 409 cross_device", (s, body))
    s, _, body = req("POST", F + "/move", json.dumps({"from": "/tmp/dir-to-move",
                                                      "to": "/tmp/moved-dir"}).encode())
    ok(s == 200 and (js(body) or {}).get("type") == "dir", "but within one it does", (s, body))
    s, _, body = req("POST", F + "/move", json.dumps({"from": "/tmp/a/b/hello.txt",
                                                      "to": "/home/user/moved/h.txt"}).encode())
    ok(s == 200 and (js(body) or {}).get("path") == "/home/user/moved/h.txt",
       "move (across /tmp and the workspace) answers the new entry", (s, body))
    s, _, back = req("GET", F + "/moved/h.txt")
    s2, _, _ = req("GET", F + "?path=/tmp/a/b/hello.txt")
    ok(s == 200 and back == text and s2 == 404, "the file is at its new path only", (s, s2))
    s, _, body = req("GET", F + "?path=/tmp/a/b/hello.txt")
    ok(code_of(body) == "not_found", "a 404 carries code not_found", body)
    s, _, body = req("GET", F + "?path=/tmp/m")
    s2, _, body2 = req("PUT", F + "?path=/tmp/m", b"x")
    ok(s == 200 and s2 == 409 and code_of(body2) == "is_directory",
       "PUT onto a directory: 409 is_directory", (s, s2, body2))
    s, _, body = req("DELETE", F + "?path=/tmp/m")
    s2, _, _ = req("GET", F + "?path=/tmp/m&stat=1")
    ok(s == 204 and s2 == 404, "DELETE removes a directory with everything in it", (s, s2))
    s, _, body = req("DELETE", F + "?path=/tmp/m")
    ok(s == 404 and code_of(body) == "not_found", "DELETE of nothing: 404", (s, body))
    s, _, body = req("GET", F + "?path=/etc/shadow")
    ok(s in (403, 404) and code_of(body) in ("permission_denied", "not_found"),
       "what the sandbox user may not read is refused", (s, body))
    s, _, body = req("PUT", F + "?path=/usr/evil", b"x")
    ok(s == 403 and code_of(body) == "permission_denied",
       "the read-only root cannot be written: 403 permission_denied", (s, body))
    s, _, body = req("HEAD", F + "?path=/tmp/ten.bin")
    ok(s == 200 and body == b"", "HEAD answers the headers only", s)
    # A directory whose entries come and go while it is listed: the helper
    # stat'ed each entry twice, and one gone by the second left a dangling
    # comma in the listing (503 for about a third of these before).
    churn = ("import os\nos.makedirs('/tmp/churn', exist_ok=True)\nwhile True:\n"
             "    open('/tmp/churn/f', 'w').close()\n    os.remove('/tmp/churn/f')\n")
    s, _, body = req("POST", f"/contexts/{cid}/commands",
                     json.dumps({"argv": ["python3", "-c", churn], "background": True}).encode())
    churner = (js(body) or {}).get("id")
    deadline = time.time() + 30
    while req("GET", F + "?path=/tmp/churn&stat=1")[0] != 200 and time.time() < deadline:
        time.sleep(0.2)
    statuses = [req("GET", F + "?path=/tmp/churn")[0] for _ in range(30)]
    req("DELETE", f"/contexts/{cid}/commands/{churner}")
    ok(s == 201 and statuses == [200] * 30,
       "30 listings of a directory whose file is created and removed meanwhile all answer 200",
       (s, statuses))

    # --- escapes --------------------------------------------------------------------------
    sandbox_passwd = run("print(open('/etc/passwd').read(), end='')", cid)
    host_passwd = open("/etc/passwd").read()
    ok(sandbox_passwd and sandbox_passwd != host_passwd,
       "(the sandbox's /etc/passwd differs from the host's)")
    run("import os; os.symlink('/proc/1/root', '/tmp/esc'); "
        "os.symlink('/proc/self/root', '/tmp/esc-self'); "
        f"os.symlink({d.dir!r}, '/home/user/state-link')", cid)
    s, _, body = req("GET", F + "?path=/tmp/esc/etc/passwd")
    ok((s == 200 and body.decode() == sandbox_passwd)
       or (s == 403 and code_of(body) == "permission_denied"),
       "a symlink planted at /tmp/esc -> /proc/1/root is followed inside the sandbox: its "
       "init's root, which the sandbox user may not enter (403), never the host's", (s, body[:200]))
    s, _, body = req("GET", F + "?path=/tmp/esc-self/etc/passwd")
    ok(s == 200 and body.decode() == sandbox_passwd,
       "one to /proc/self/root leads to the sandbox's root, not the host's", (s, body[:200]))
    s, _, body = req("GET", F + "?path=/proc/1/root/etc/passwd")
    ok(s in (200, 403, 404) and body.decode(errors="replace") != host_passwd,
       "/proc/1/root named directly is the sandbox's (or refused)", (s, body[:200]))
    s, _, body = req("GET", F + "?path=/tmp/../../../../../etc/passwd")
    ok(s == 200 and body.decode() == sandbox_passwd, "'..' above / stays at the sandbox's root",
       (s, body[:200]))
    for path in (d.dir, os.path.join(d.dir, "contexts"), ws_other,
                 "/home/user/../../.." + ws_other, "/home/user/state-link/workspaces"):
        s, _, body = req("GET", F + "?path=" + q(path))
        ok(s == 404 and code_of(body) == "not_found",
           f"the host path {path} does not exist inside the sandbox", (s, body))
    secret = b"the other context's secret"
    req("PUT", f"/contexts/{oid}/files/secret.txt", secret)
    s, _, body = req("GET", F + "?path=" + q(ws_other + "/secret.txt"))
    s2, _, body2 = req("GET", F + "?path=/tmp/esc-self" + q(ws_other) + "/secret.txt")
    s3, _, body3 = req("GET", F + "?path=/tmp/esc" + q(ws_other) + "/secret.txt")
    ok(s == 404 and s2 == 404 and s3 in (403, 404) and secret not in body + body2 + body3,
       "another context's workspace is not reachable by its host path", (s, s2))
    marker = f"/tmp/sg-anywhere-{os.getpid()}"
    for path in (d.dir + "/pwned", marker, "/tmp/esc" + marker, "/tmp/esc-self" + d.dir + "/pwned",
                 "/home/user/../../.." + marker,
                 "/home/user/state-link/pwned"):
        s, _, body = req("PUT", F + "?path=" + q(path), b"pwned")
        hostpath = marker if marker in path else d.dir + "/pwned"
        ok(not os.path.exists(hostpath), f"PUT {path}: nothing on the host", (s, body))
    ok(run(f"import os; print(os.path.exists({marker!r}))", cid).strip() == "True",
       "(a PUT to a /tmp path lands in the sandbox's /tmp)")
    s, _, body = req("DELETE", F + "?path=/home/user/state-link")
    ok(s == 204 and os.path.isdir(d.dir), "DELETE of a link removes the link, not its target",
       (s, body))

    # --- who may, and bad input ------------------------------------------------------------
    s, _, body = req("GET", F + "?path=/tmp", token=BOB)
    s2, _, _ = req("PUT", F + "?path=/tmp/bob", b"x", token=BOB)
    s3, _, _ = req("POST", F + "/mkdir", json.dumps({"path": "/tmp/bob"}).encode(), token=BOB)
    ok(s == 404 and s2 == 404 and s3 == 404, "another tenant's key sees 404 for the context",
       (s, s2, s3))
    for name, path in (("relative", "tmp/a"), ("empty", ""), ("NUL", "/tmp/a%00b"),
                       ("huge", "/" + "a" * 5000)):
        for method in ("GET", "PUT", "DELETE"):
            s, _, body = req(method, F + "?path=" + (path if "%" in path else q(path)),
                             b"x" if method == "PUT" else None)
            # A %00 anywhere in a URL is refused by the HTTP layer itself,
            # before any route (libmicrohttpd would cut the path there).
            code = "NUL" if name == "NUL" else "invalid_path"
            ok(s == 400 and (js(body) or {}).get("error") == "invalid"
               and (code_of(body) == code if code != "NUL" else
                    "NUL" in js(body).get("message", "")) and js(body).get("message"),
               f"{method} with a {name} path: 400 ({code}) with a message", (s, body))
    s, _, body = req("GET", F + "/x.txt?path=/tmp/a")
    ok(s == 400 and code_of(body) == "invalid_path", "a URL path and ?path= together: 400",
       (s, body))
    s, _, body = req("POST", F + "/move", json.dumps({"from": "/tmp/a"}).encode())
    ok(s == 400 and "to" in (js(body) or {}).get("message", ""), "move without 'to': 400",
       (s, body))
    s, _, body = req("POST", F + "/mkdir", json.dumps({"path": "rel"}).encode())
    ok(s == 400 and code_of(body) == "invalid_path", "mkdir of a relative path: 400", (s, body))
    s, _, body = req("GET", F + "?path=/tmp&depth=0")
    ok(s == 400, "depth out of range: 400", (s, body))

    # --- a paused context is resumed first ------------------------------------------------
    s, _, body = req("POST", f"/contexts/{oid}/pause")
    st, info = d.json("GET", f"/contexts/{oid}", token=ALICE)
    ok(s == 200 and info.get("state") == "paused", "(the other context is paused)", (s, body, info))
    s, _, body = req("GET", f"/contexts/{oid}/files?path=/home/user/secret.txt")
    st, info = d.json("GET", f"/contexts/{oid}", token=ALICE)
    ok(s == 200 and body == secret and info.get("state") == "running",
       "a files request on a paused context resumes it and answers", (s, body, info))

    # --- python, in a command ---------------------------------------------------------------
    s, _, body = req("POST", "/execute", json.dumps(
        {"context_id": cid, "command": "python -c 'print(1)'"}).encode(),
        headers={"Content-Type": "application/json"})
    ok(s == 200 and (js(body) or {}).get("stdout") == "1\n"
       and js(body).get("exit_code") == 0, "`python -c 'print(1)'` works in a command",
       (s, body))

    # --- 256 MiB to /tmp, sandgate's RSS flat ----------------------------------------------
    pid = d.proc.pid
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(rss_kib(pid))
            time.sleep(0.05)

    chunk = hashlib.sha256(b"sandgate").digest() * (MiB // 32)

    def body_chunks():
        for _ in range(BIG // MiB):
            yield chunk
    start_rss = rss_kib(pid)
    t = threading.Thread(target=sample)
    t.start()
    s, _, body = req("PUT", F + "?path=/tmp/big.bin", body_chunks(),
                     headers={"Content-Length": str(BIG)})
    stop.set()
    t.join()
    peak = max(samples + [start_rss])
    diag(f"256 MiB upload to /tmp: sandgate RSS {start_rss} KiB before, peak {peak} KiB "
         f"(+{(peak - start_rss) // 1024} MiB), {len(samples)} samples")
    ok(s == 201 and (js(body) or {}).get("size") == BIG, "a 256 MiB upload to /tmp", (s, body))
    ok(peak < start_rss + 32 * 1024, "sandgate's RSS stays flat (under +32 MiB) during it",
       (start_rss, peak))
    want = hashlib.sha256(chunk * (BIG // MiB)).hexdigest()
    got = run("import hashlib\nh = hashlib.sha256()\nf = open('/tmp/big.bin', 'rb')\n"
              "while b := f.read(1 << 20):\n    h.update(b)\nprint(h.hexdigest())", cid).strip()
    ok(got == want, "the sandbox holds the 256 MiB exactly", (got, want))
    samples.clear()
    stop.clear()
    start_rss = rss_kib(pid)
    t = threading.Thread(target=sample)
    t.start()
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=300)
    c.request("GET", F + "?path=/tmp/big.bin", headers={"Authorization": "Bearer " + ALICE})
    r = c.getresponse()
    h = hashlib.sha256()
    n = 0
    while b := r.read(MiB):
        h.update(b)
        n += len(b)
    c.close()
    stop.set()
    t.join()
    peak = max(samples + [start_rss])
    diag(f"256 MiB download from /tmp: sandgate RSS {start_rss} KiB before, peak {peak} KiB")
    ok(r.status == 200 and n == BIG and h.hexdigest() == want,
       "and downloads it whole and intact", (r.status, n))
    ok(peak < start_rss + 32 * 1024, "with sandgate's RSS flat", (start_rss, peak))
    s, _, body = req("PUT", F + "?path=/tmp/over.bin", b"x" * (BIG + MiB + 1))
    s2, _, _ = req("GET", F + "?path=/tmp/over.bin&stat=1")
    ok(s == 413 and code_of(body) == "too_large" and s2 == 404,
       "over --max-upload: 413 too_large, nothing stored", (s, body, s2))
    # An upload broken off by its client stores nothing and leaves nothing.
    sock = socket.create_connection((host.hostname, host.port))
    sock.sendall((f"PUT {F}?path=/tmp/broken.bin HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer {ALICE}\r\nContent-Length: {10 * MiB}\r\n\r\n"
                  ).encode() + b"y" * (2 * MiB))
    time.sleep(1)
    sock.close()
    for _ in range(100):
        left = run("import os; print(sorted(n for n in os.listdir('/tmp') if 'sandgate' in n "
                   "or n == 'broken.bin'))", cid).strip()
        if left == "[]":
            break
        time.sleep(0.2)
    ok(left == "[]", "an upload the client breaks off stores nothing and leaves no temporary "
       "file; nor does one over --max-upload", left)

    # A client that has a whole file finds its read ended in the sandbox: a
    # pause right after it is not refused for a file operation still running.
    paused = []
    req("PUT", f"{F}?path=/tmp/small.bin", body=b"z" * 1000)
    for _ in range(5):
        s, _, body = req("GET", f"{F}?path=/tmp/small.bin")
        st, _, p = req("POST", f"/contexts/{cid}/pause")
        paused.append((s, len(body), st, p[:120]))
        req("POST", f"/contexts/{cid}/resume")
    ok(all(s == 200 and st == 200 for s, _, st, _ in paused),
       "a pause right after a download is never refused for the download's helper", paused)

    # The daemon and the neighbour context still answer.
    ok(run("print(6 * 7)", oid).strip() == "42", "the neighbour context still runs code")
finally:
    d.stop()

# --sandbox none: an absolute path would be the host's, so it is refused.
n = Daemon("--sandbox", "none", "--pool-size", "0")
try:
    status, ctx = n.json("POST", "/contexts", {})
    s, _, body = n.request("GET", f"/contexts/{ctx['id']}/files?path=/etc/passwd")
    ok(s == 403 and b"sandbox none" in body, "--sandbox none refuses absolute paths", (s, body))
    s, _, body = n.request("PUT", f"/contexts/{ctx['id']}/files?path=/tmp/x", raw=b"x")
    ok(s == 403, "writes too", (s, body))
finally:
    n.stop()
done()
