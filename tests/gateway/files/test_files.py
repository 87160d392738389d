"""A context's workspace over the REST API, against real sandboxed kernels:
upload, download, list, delete; '..' and symlinks planted by sandboxed code
never lead outside the workspace; artifacts under output/; shell commands;
GET /metrics."""
import http.client
import json
import os
import re
import secrets
import time
import urllib.parse

from sgd import Daemon, TOKEN, of_type, stdout
from tap import ok, diag, done

d = Daemon("--pool-size", "0", "--max-body", "20000", "--max-upload", "400000",
           "--max-output", "100000")
host = urllib.parse.urlparse(d.url)


def raw(method, path, body=None, token=TOKEN):
    """A request whose path goes out exactly as given (no normalising)."""
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
    h = {"Authorization": "Bearer " + token} if token else {}
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), data


def err_name(data):
    try:
        return json.loads(data)["error"]
    except (ValueError, KeyError):
        return None


try:
    status, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    files = f"/contexts/{cid}/files"
    ws = os.path.join(d.dir, "workspaces", cid)  # the workspace on the host
    ok(os.path.isdir(ws), "the workspace is a host directory under the state dir", ws)
    st = os.stat(os.path.join(ws, "output"))
    ok(st.st_uid == 64123, "a new workspace has an output/ directory owned by the sandbox user")

    # --- upload, download, list -------------------------------------------------------
    s, _, body = raw("PUT", files + "/data/in.txt", b"hello from the host\n")
    ok(s == 201 and json.loads(body) == {"path": "data/in.txt", "size": 20},
       "PUT creates a file (and its parent) and answers 201 {path, size}", (s, body))
    lines = d.execute("import os\nprint(open('data/in.txt').read(), end='')\n"
                      "st = os.stat('data/in.txt')\nprint(st.st_uid == os.getuid())\n"
                      "open('data/in.txt', 'a').write('appended by the code\\n')",
                      context_id=cid)
    ok(stdout(lines) == "hello from the host\nTrue\n",
       "the sandboxed code reads the upload, owns it and may write it", lines)
    s, ctype, body = raw("GET", files + "/data/in.txt")
    ok(s == 200 and body == b"hello from the host\nappended by the code\n"
       and ctype.startswith("text/plain"),
       "GET returns the file as the code left it, with a MIME type", (s, ctype, body))

    blob = secrets.token_bytes(300_000)  # well over --max-body: uploads are streamed
    s, _, body = raw("PUT", files + "/pics/x.png", blob)
    ok(s == 201, "an upload larger than --max-body is accepted (streamed to disk)", (s, body))
    s, ctype, body = raw("GET", files + "/pics/x.png")
    ok(s == 200 and body == blob and ctype == "image/png",
       "a binary download is byte-identical, typed by extension", (s, ctype, len(body)))
    s, _, body = raw("PUT", files + "/pics/x.png", b"replaced")
    s2, _, body2 = raw("GET", files + "/pics/x.png")
    ok(s == 201 and body2 == b"replaced", "PUT replaces an existing file", (s, body2))

    s, _, body = raw("PUT", files + "/big.bin", secrets.token_bytes(500_000))
    ok(s == 413 and err_name(body) == "limit_exceeded",
       "an upload over --max-upload gets 413", (s, body))
    leftovers = [n for n in os.listdir(ws) if n.startswith(".sandgate-upload")]
    ok(not leftovers and not os.path.exists(os.path.join(ws, "big.bin")),
       "and leaves nothing behind", leftovers)

    status, listing = d.json("GET", files)
    names = [e["name"] for e in listing["entries"]]
    ok(status == 200 and names == ["data", "output", "pics"],
       "GET /files lists the workspace root, sorted", listing)
    status, listing = d.json("GET", files + "/data")
    e = listing["entries"][0]
    ok(e["name"] == "in.txt" and e["path"] == "data/in.txt" and e["type"] == "file"
       and e["size"] == 41 and e["modified"].endswith("Z"),
       "GET on a directory lists it with name, path, type, size, modified", listing)
    d.execute("open('made_by_code.txt', 'w').write('x' * 10)", context_id=cid)
    s, _, body = raw("GET", files + "/made_by_code.txt")
    ok(s == 200 and body == b"x" * 10, "a file the code wrote is downloadable at once", (s, body))

    s, _, body = raw("PUT", files + "/data", b"not a directory")
    ok(s == 409, "PUT onto a directory is a 409 conflict", (s, body))
    s, _, body = raw("PUT", files, b"x")
    ok(s == 400, "PUT without a file path is a 400", (s, body))
    s, _, body = raw("GET", files + "/nope.txt")
    ok(s == 404 and err_name(body) == "not_found", "a missing file is a 404", (s, body))
    s, _, body = raw("GET", "/contexts/00000000-0000-0000-0000-000000000000/files/x")
    ok(s == 404, "files of an unknown context are a 404", (s, body))
    s, _, body = raw("PUT", files + "/sneaky.txt", b"x", token="wrong")
    ok(s == 401 and not os.path.exists(os.path.join(ws, "sneaky.txt")),
       "an upload with a wrong token gets 401 and writes nothing", (s, body))
    s, h, body = d.request("PATCH", files + "/data/in.txt")
    ok(s == 405 and h.get("Allow") == "GET, HEAD, PUT, DELETE" and
       json.loads(body)["error"] == "method_not_allowed",
       "other methods on files get 405, with Allow", (s, dict(h), body))

    # --- '..' -------------------------------------------------------------------------
    for path in ["/../../../../etc/passwd", "/data/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                 "/data/%2E%2E/%2E%2E/%2E%2E/etc/passwd"]:
        s, _, body = raw("GET", files + path)
        ok(s == 400 and b"root:" not in body, f"GET {path} is refused with 400", (s, body))
    outside = os.path.join(d.dir, "workspaces", "escaped.txt")
    s, _, body = raw("PUT", files + "/../escaped.txt", b"x")
    s2, _, _ = raw("PUT", files + "/%2e%2e/escaped.txt", b"x")
    ok(s == 400 and s2 == 400 and not os.path.exists(outside),
       "PUT with '..' is refused and writes nothing outside", (s, s2))
    s, _, body = raw("DELETE", files + "/../" + cid)
    ok(s == 400 and os.path.isdir(ws), "DELETE with '..' is refused", (s, body))

    # --- a NUL, a component no file system takes ----------------------------------------
    # libmicrohttpd hands sandgate the decoded path as a C string: "nul%00x"
    # would be "nul" if sandgate took it.
    s, _, body = raw("PUT", files + "/nul%00x", b"x")
    s2, _, body2 = raw("PUT", files + "/nul%00x", b"x", token=None)
    ok(s == 400 and s2 == 400 and err_name(body) == "invalid" and
       not os.path.exists(os.path.join(ws, "nul")),
       "a path with %00 is refused with 400 (with or without a token) and writes nothing",
       (s, body, s2, body2))
    # --- modes the sandbox's code set: the client's 403, not sandgate's 500 ---------------
    st, _, _ = d.request("POST", "/execute", {"context_id": cid, "command":
                         "echo s > shut; chmod 000 shut; mkdir -p shutdir/sub rodir; "
                         "echo x > shutdir/sub/f; chmod 000 shutdir; echo y > rodir/f; "
                         "chmod 555 rodir"})
    for method, path in [("GET", "/shut"), ("GET", "/shutdir"), ("GET", "/shutdir/sub/f"),
                         ("PUT", "/shutdir/new"), ("PUT", "/rodir/new"), ("DELETE", "/rodir/f"),
                         ("DELETE", "/shutdir")]:
        s, _, body = raw(method, files + path, b"x" if method == "PUT" else None)
        ok(s == 403 and err_name(body) == "forbidden",
           f"{method} {path}, which the sandbox's code made inaccessible: 403", (st, s, body))
    long_name = "n" * 256
    for method in ("PUT", "GET", "DELETE"):
        s, _, body = raw(method, files + "/" + long_name, b"x" if method == "PUT" else None)
        ok(s == 400 and err_name(body) == "invalid",
           f"{method} of a name over 255 bytes is 400 (not an I/O error)", (s, body))

    # --- symlinks planted by the sandboxed code ---------------------------------------
    victim = f"/tmp/sg-victim-{secrets.token_hex(4)}"
    with open(victim, "w") as f:
        f.write("host secret\n")
    target_dir = f"/tmp/sg-target-{secrets.token_hex(4)}"
    os.mkdir(target_dir)
    d.execute(f"import os\nos.symlink('/etc/passwd', 'passwd')\nos.symlink('/', 'root')\n"
              f"os.symlink({victim!r}, 'victim')\nos.symlink({target_dir!r}, 'outdir')\n"
              f"os.symlink('data', 'datalink')", context_id=cid)
    ok(os.path.islink(os.path.join(ws, "passwd")), "the code planted symlinks in its workspace")
    s, _, body = raw("GET", files + "/passwd")
    ok(s == 403 and b"root:" not in body, "GET of a symlink to /etc/passwd: 403", (s, body))
    s, _, body = raw("GET", files + "/root/etc/passwd")
    ok(s == 403 and b"root:" not in body, "GET through a symlink to /: 403", (s, body))
    s, _, body = raw("GET", files + "/victim")
    ok(s == 403 and b"host secret" not in body, "GET of a symlink to a host file: 403", (s, body))
    s, _, body = raw("GET", files + "/datalink/in.txt")
    ok(s == 403, "even a symlink that stays inside is not followed", (s, body))
    s, _, body = raw("PUT", files + "/outdir/planted.txt", b"x")
    ok(s == 403 and os.listdir(target_dir) == [],
       "PUT through a symlinked directory: 403, nothing written on the host", (s, body))
    s, _, body = raw("PUT", files + "/victim", b"overwritten")
    ok(s == 201 and open(victim).read() == "host secret\n"
       and not os.path.islink(os.path.join(ws, "victim")),
       "PUT onto a symlink replaces the link, never the host file it points to", (s, body))
    d.execute(f"import os\nos.symlink({victim!r}, 'victim2')", context_id=cid)
    s, _, body = raw("DELETE", files + "/victim2")
    ok(s == 204 and os.path.exists(victim), "DELETE of a symlink removes the link only", s)
    s, _, body = raw("DELETE", files + "/outdir/x")
    ok(s == 403 and os.path.isdir(target_dir), "DELETE through a symlink: 403", (s, body))
    status, listing = d.json("GET", files)
    types = {e["name"]: e["type"] for e in listing["entries"]}
    ok(types.get("passwd") == "symlink" and types.get("root") == "symlink",
       "listings show symlinks as such without following them", types)

    # A FIFO in the workspace (gVisor keeps the code's FIFOs to itself; one made on the
    # host side stands for a filesystem that would not): refused, never opened for a read.
    os.mkfifo(os.path.join(ws, "pipe"))
    t0 = time.time()
    s, _, body = raw("GET", files + "/pipe")
    ok(s == 403 and time.time() - t0 < 10, "GET of a FIFO is refused without blocking", (s, body))
    ok(d.json("GET", "/health")[0] == 200, "the daemon still serves")

    # --- delete ----------------------------------------------------------------------
    s, _, _ = raw("DELETE", files + "/data/in.txt")
    s2, _, _ = raw("GET", files + "/data/in.txt")
    ok(s == 204 and s2 == 404, "DELETE removes a file", (s, s2))
    d.execute("import os\nos.makedirs('tree/a/b', exist_ok=True)\n"
              "open('tree/a/b/f', 'w').write('x')\nos.symlink('/etc', 'tree/a/etc')",
              context_id=cid)
    s, _, _ = raw("DELETE", files + "/tree")
    ok(s == 204 and not os.path.exists(os.path.join(ws, "tree")) and os.path.exists("/etc/passwd"),
       "DELETE removes a directory tree (links inside removed, not followed)", s)
    s, _, _ = raw("DELETE", files + "/tree")
    ok(s == 404, "DELETE of a missing path is a 404", s)
    s, _, body = raw("DELETE", files)
    ok(s == 400 and os.path.isdir(ws), "the workspace root cannot be deleted", (s, body))

    # --- artifacts -------------------------------------------------------------------
    lines = d.execute(
        "import os, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "os.makedirs('output/plots', exist_ok=True)\nplt.plot([1, 2, 3])\n"
        "plt.savefig('output/plots/line.png')\nopen('output/table.csv', 'w').write('a,b\\n1,2\\n')\n"
        "print('saved')", context_id=cid)
    arts = of_type(lines, "artifact")
    paths = [a["path"] for a in arts]
    ok(paths == ["output/plots/line.png", "output/table.csv"],
       "files written under output/ are announced as artifact lines", lines)
    types = [l["type"] for l in lines]
    ok(types[-1] == "end_of_execution" and types.index("artifact") > types.index("stdout"),
       "after the output, before end_of_execution", types)
    png = [a for a in arts if a["path"].endswith(".png")]
    ok(png and png[0]["mime"] == "image/png" and png[0]["size"] > 1000
       and png[0]["url"] == f"/contexts/{cid}/files/output/plots/line.png",
       "an artifact carries its size, MIME type and download URL", arts)
    s, ctype, body = raw("GET", png[0]["url"])
    ok(s == 200 and body[:8] == b"\x89PNG\r\n\x1a\n" and len(body) == png[0]["size"],
       "and downloads as the PNG the code drew", (s, ctype, len(body)))
    lines = d.execute("x = 1", context_id=cid)
    ok(not of_type(lines, "artifact"), "an execution that writes nothing announces nothing", lines)
    status, agg = d.json("POST", "/execute",
                         {"code": "open('output/table.csv', 'a').write('3,4\\n')",
                          "context_id": cid}, headers={"Accept": "application/json"})
    ok(status == 200 and [a["path"] for a in agg["artifacts"]] == ["output/table.csv"],
       "JSON mode lists artifacts; a changed file is announced again", agg)

    # --- shell commands --------------------------------------------------------------
    d.execute("kept = 'still here'", context_id=cid)
    status, r = d.json("POST", "/execute", {"command": "echo out; echo err >&2; pwd; exit 3",
                                            "context_id": cid})
    ok(status == 200 and r["stdout"] == "out\n/home/user\n" and r["stderr"] == "err\n"
       and r["exit_code"] == 3,
       "{command} answers {stdout, stderr, exit_code}, run in the workspace", r)
    status, r = d.json("POST", "/execute", {"command": "cat output/table.csv; id -u",
                                            "context_id": cid})
    ok(status == 200 and r["stdout"] == "a,b\n1,2\n3,4\n64123\n",
       "commands see the workspace and run as the sandbox user", r)
    status, r = d.json("POST", "/execute", {"command": "ls -l output && stat -c '%U %s' output/table.csv",
                                            "context_id": cid})
    ok(status == 200 and r["exit_code"] == 0 and "table.csv" in r["stdout"]
       and "user 12" in r["stdout"],
       "ls -l and stat work in the sandbox (statx without AT_NO_AUTOMOUNT)", r)
    status, r = d.json("POST", "/execute", {"command": "echo $GREETING",
                                            "env_vars": {"GREETING": "hej"}, "context_id": cid})
    ok(r.get("stdout") == "hej\n", "env_vars apply to commands", r)
    status, r = d.json("POST", "/execute", {"command": "cat /proc/1/cmdline | tr '\\0' ' '",
                                            "context_id": cid})
    ok(status == 200 and "sandgate-init" in r["stdout"],
       "commands run inside the sandbox (its PID 1 is sandgate-init)", r)
    status, r = d.json("POST", "/execute", {"command": "printf 'a\\0b\\n' && find output -print0",
                                            "context_id": cid})
    ok(status == 200 and r["stdout"].startswith("a\0b\n") and "table.csv\0" in r["stdout"],
       "output with NUL bytes (find -print0, grep -Z) comes back whole", r)
    status, r = d.json("POST", "/execute", {"command": "yes | head -c 300000",
                                            "context_id": cid})
    ok(status == 200 and len(r["stdout"]) < 100_200 and "output limit" in r["stdout"],
       "command output is cut at --max-output with a marker", len(r.get("stdout", "")))
    t0 = time.time()
    status, r = d.json("POST", "/execute", {"command": "sleep 60 & sleep 60", "timeout": 2,
                                            "context_id": cid})
    ok(status == 200 and r["exit_code"] == 124 and r["error"]["name"] == "TimeoutError"
       and time.time() - t0 < 30,
       "a command past its timeout ends with exit_code 124 and a TimeoutError", r)
    lines = d.execute("import os\nprint(sum(open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[0]\n"
                      "          .endswith(b'sleep')\n"
                      "          for p in os.listdir('/proc') if p.isdigit()))", context_id=cid)
    ok(stdout(lines) == "0\n", "the timed-out command's whole process group is gone", lines)
    lines = d.execute("kept", context_id=cid)
    ok(of_type(lines, "result") and of_type(lines, "result")[0]["text"] == "'still here'",
       "the context's variables survive commands and their timeouts", lines)
    for body, why in [({"command": "ls", "code": "1"}, "both code and command"),
                      ({}, "neither code nor command"), ({"command": 5}, "a non-string command")]:
        s, _, data = d.request("POST", "/execute", body)
        ok(s == 400, f"{why}: 400", (s, data))

    # --- metrics ---------------------------------------------------------------------
    s, _, body = raw("GET", "/metrics", token=None)
    ok(s == 401, "GET /metrics needs the token", s)
    s, ctype, body = raw("GET", "/metrics")
    text = body.decode()
    ok(s == 200 and ctype.startswith("text/plain; version=0.0.4"),
       "GET /metrics answers in the Prometheus text format", (s, ctype))

    def metric(name, labels=""):
        m = re.search(r"^" + re.escape(name + (("{" + labels + "}") if labels else "")) +
                      r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    ok(metric("sandgate_contexts") == 1, "contexts gauge", metric("sandgate_contexts"))
    ok(metric("sandgate_kernels", 'state="idle"') == 1, "kernels by state")
    ok(metric("sandgate_executions_total", 'kind="command",outcome="timeout"') == 1
       and metric("sandgate_executions_total", 'kind="command",outcome="error"') == 1
       and metric("sandgate_executions_total", 'kind="code",outcome="ok"') >= 10,
       "executions counted by kind and outcome")
    buckets = metric("sandgate_execution_duration_seconds_bucket", 'kind="command",le="+Inf"')
    count = metric("sandgate_execution_duration_seconds_count", 'kind="command"')
    ok(buckets == count and count >= 6, "the latency histogram's +Inf bucket equals its count",
       (buckets, count))
    ok(metric("sandgate_file_uploads_total") >= 4 and metric("sandgate_artifacts_total") == 3,
       "uploads and artifacts counted")
    ok(metric("sandgate_http_responses_total", 'code="403"') >= 6
       and metric("sandgate_http_auth_failures_total") >= 2,
       "responses by status and auth failures counted")
    ok(all(l.startswith("#") or re.match(r"^[a-z_]+(\{[^}]*\})? [-+0-9.eInf]+$", l)
           for l in text.splitlines() if l),
       "every line is a comment or a sample")
finally:
    d.stop()
done()
