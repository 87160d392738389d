"""clients/python's CLI (`python -m sandgate`, run with the package on
PYTHONPATH as a user's install would have it) against a real daemon: every
subcommand — run FILE and -, exec, ctx new/list/show/pause/resume/restart/rm,
files put/get/ls/rm — its output, --json, and its exit codes (0 success, 1 the
code or command failed, 2 usage, 3 unreachable, 4 unauthorized, 5 not found,
6 invalid, 7 conflict or limit)."""
import json
import os
import subprocess
import sys
import tempfile
import time

from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
PKG = os.path.join(SRC, "clients", "python", "src")

d = Daemon("--pool-size", "1", "--max-upload", "100000")
tmp = tempfile.mkdtemp(prefix="sgt-pycli-")
env = dict(os.environ, PYTHONPATH=PKG, SANDGATE_URL=d.url, SANDGATE_TOKEN=TOKEN)
env.pop("SANDGATE_CONTEXT", None)


def cli(*args, stdin=None, extra_env=None, timeout=120):
    e = dict(env, **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "sandgate", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=e, cwd=tmp)


def check(r, code, name, out=None, err=None):
    good = r.returncode == code and (out is None or out(r.stdout)) and \
        (err is None or err(r.stderr))
    ok(good, f"{name}: exit {code}", f"exit {r.returncode}\nstdout: {r.stdout[-1500:]}\n"
                                     f"stderr: {r.stderr[-1500:]}")
    return r


try:
    # --- help and usage ---------------------------------------------------------------
    r = check(cli("--help"), 0, "--help", out=lambda o: "run" in o and "exit codes" in o)
    check(cli(), 2, "no subcommand is a usage error", err=lambda e: "usage" in e)
    check(cli("frobnicate"), 2, "an unknown subcommand is a usage error")
    check(cli("run", os.path.join(tmp, "missing.py")), 2, "run of a missing file",
          err=lambda e: "cannot read" in e)
    check(cli("run", "-", "--env", "NOEQUALS", stdin="1"), 2, "--env without = is a usage error")
    check(cli("files", "ls"), 2, "files without a context is a usage error",
          err=lambda e: "context" in e)

    # --- run: streamed, values, errors ----------------------------------------------------
    prog = os.path.join(tmp, "prog.py")
    with open(prog, "w") as f:
        f.write("import sys, time\nfor i in range(3):\n    print('tick', i, flush=True)\n"
                "    time.sleep(0.6)\nprint('to stderr', file=sys.stderr)\nvalue = 6 * 7\nvalue\n")
    p = subprocess.Popen([sys.executable, "-m", "sandgate", "run", prog], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
    t0 = time.time()
    first = p.stdout.readline()
    t_first = time.time() - t0
    rest, err = p.communicate(timeout=120)
    t_all = time.time() - t0
    ok(first == "tick 0\n" and t_all - t_first > 0.9,
       f"run FILE streams its output (first line after {t_first:.1f} s, the end after "
       f"{t_all:.1f} s)", (first, rest, err))
    ok(p.returncode == 0 and rest == "tick 1\ntick 2\n42\n" and "to stderr" in err,
       "run FILE: stdout, the value, stderr; exit 0", (p.returncode, rest, err))
    check(cli("run", "-", stdin="value + 1\n"), 0, "run - reads stdin; state persists",
          out=lambda o: o == "43\n")
    check(cli("run", "-", stdin="def f():\n    raise ValueError('bad thing')\nf()\n"), 1,
          "an exception exits 1 with the traceback on stderr",
          err=lambda e: "ValueError: bad thing" in e and "f()" in e and "\x1b[" not in e)
    check(cli("run", "-", "--env", "SG_A=b", stdin="import os; os.environ['SG_A']"), 0,
          "run --env", out=lambda o: o == "'b'\n")
    check(cli("run", "-", "--timeout", "1", stdin="import time; time.sleep(30)"), 1,
          "run --timeout: a timeout exits 1", err=lambda e: "TimeoutError" in e)
    r = check(cli("--json", "run", "-", stdin="print('x')\n1/0"), 1, "--json run of failing code")
    try:
        doc = json.loads(r.stdout)
        ok(doc["stdout"] == "x\n" and doc["error"]["name"] == "ZeroDivisionError",
           "--json run prints the execution as JSON", doc)
    except ValueError:
        ok(False, "--json run prints JSON", r.stdout)
    check(cli("run", "-", "--language", "cobol", stdin="1"), 6, "an unknown language: exit 6",
          err=lambda e: "invalid" in e)

    # --- ctx -------------------------------------------------------------------------------
    r = check(cli("ctx", "new", "--cwd", "/home/user/w"), 0, "ctx new prints the id",
              out=lambda o: len(o.strip()) == 36)
    cid = r.stdout.strip()
    r = check(cli("--json", "ctx", "new"), 0, "ctx new --json",
              out=lambda o: json.loads(o)["language"] == "python")
    cid2 = json.loads(r.stdout)["id"]
    check(cli("ctx", "list"), 0, "ctx list shows both, with language, state and cwd",
          out=lambda o: cid in o and cid2 in o and "/home/user/w" in o and "python" in o)
    check(cli("--json", "ctx", "list"), 0, "ctx list --json",
          out=lambda o: {cid, cid2} <= {c["id"] for c in json.loads(o)})
    check(cli("ctx", "show", cid), 0, "ctx show", out=lambda o: o.startswith(cid))
    check(cli("run", "-", "-c", cid, stdin="import os; os.getcwd()"), 0,
          "run -c ID runs in that context", out=lambda o: o == "'/home/user/w'\n")
    check(cli("run", "-", stdin="import os; os.getcwd()", extra_env={"SANDGATE_CONTEXT": cid}), 0,
          "SANDGATE_CONTEXT picks the context", out=lambda o: o == "'/home/user/w'\n")
    cli("run", "-", "-c", cid, stdin="kept = 5")
    check(cli("--json", "ctx", "pause", cid), 0, "ctx pause",
          out=lambda o: json.loads(o)["state"] == "paused")
    check(cli("ctx", "resume", cid), 0, "ctx resume")
    check(cli("run", "-", "-c", cid, stdin="kept"), 0, "variables survive pause and resume",
          out=lambda o: o == "5\n")
    check(cli("ctx", "restart", cid), 0, "ctx restart")
    check(cli("run", "-", "-c", cid, stdin="kept"), 1, "restart lost the variables",
          err=lambda e: "NameError" in e)
    check(cli("ctx", "rm", cid2), 0, "ctx rm")
    check(cli("ctx", "show", cid2), 5, "a deleted context is not found: exit 5",
          err=lambda e: "not_found" in e)
    check(cli("run", "-", "-c", "no-such-context", stdin="1"), 5, "run in an unknown context: 5")
    check(cli("ctx", "rm", "no-such-context"), 5, "ctx rm of an unknown context: 5")

    # --- exec ------------------------------------------------------------------------------
    check(cli("exec", "-c", cid, "echo", "hello;", "pwd"), 0, "exec CMD: its output, exit 0",
          out=lambda o: o.startswith("hello\n/home/user"))
    check(cli("exec", "-c", cid, "echo oops >&2; exit 3"), 1, "a failing command exits 1",
          err=lambda e: "oops" in e)
    check(cli("--json", "exec", "-c", cid, "exit 3"), 1, "exec --json",
          out=lambda o: json.loads(o)["exit_code"] == 3)
    check(cli("exec", "-c", cid, "-e", "SG_V=w", "echo $SG_V"), 0, "exec --env",
          out=lambda o: o == "w\n")
    check(cli("exec", "-c", cid, "--timeout", "1", "sleep 20"), 1, "exec --timeout exits 1",
          err=lambda e: "TimeoutError" in e)

    # --- files ------------------------------------------------------------------------------
    local = os.path.join(tmp, "in.bin")
    with open(local, "wb") as f:
        f.write(bytes(range(256)) * 4)
    check(cli("files", "put", "-c", cid, local, "data/in.bin"), 0, "files put LOCAL REMOTE")
    check(cli("--json", "files", "put", "-c", cid, "-", "data/t.txt", stdin="from stdin\n"), 0,
          "files put - REMOTE (stdin), --json", out=lambda o: json.loads(o)["size"] == 11)
    check(cli("files", "ls", "-c", cid, "data"), 0, "files ls DIR",
          out=lambda o: "data/in.bin" in o and "1024" in o and "data/t.txt" in o)
    check(cli("--json", "files", "ls", "-c", cid), 0, "files ls --json",
          out=lambda o: "data" in [e["name"] for e in json.loads(o)])
    out = os.path.join(tmp, "out.bin")
    check(cli("files", "get", "-c", cid, "data/in.bin", out), 0, "files get REMOTE LOCAL")
    with open(out, "rb") as f:
        ok(f.read() == bytes(range(256)) * 4, "the bytes came back unchanged")
    check(cli("files", "get", "-c", cid, "data/t.txt"), 0, "files get to stdout",
          out=lambda o: o == "from stdin\n")
    check(cli("exec", "-c", cid, "cat data/t.txt"), 0, "the sandbox sees the uploaded file",
          out=lambda o: o == "from stdin\n")
    check(cli("files", "rm", "-c", cid, "data/t.txt"), 0, "files rm")
    check(cli("files", "get", "-c", cid, "data/t.txt"), 5, "a missing file: exit 5")
    check(cli("files", "put", "-c", cid, local, "../x"), 6, "a path with ..: exit 6")
    check(cli("files", "put", "-c", cid, local, "data"), 7, "an upload onto a directory: exit 7")
    big = os.path.join(tmp, "big.bin")
    with open(big, "wb") as f:
        f.write(b"x" * 200000)
    check(cli("files", "put", "-c", cid, big, "big.bin"), 7, "an upload past --max-upload: exit 7")
    check(cli("files", "put", "-c", cid, os.path.join(tmp, "nope"), "n"), 2,
          "files put of a missing local file: exit 2")

    # --- auth and reachability ---------------------------------------------------------------
    check(cli("--token", "wrong-token-abcdefghi", "ctx", "list"), 4, "a wrong token: exit 4",
          err=lambda e: "unauthorized" in e)
    check(cli("ctx", "list", extra_env={"SANDGATE_TOKEN": ""}), 4, "no token: exit 4")
    check(cli("--url", "http://127.0.0.1:1", "ctx", "list"), 3, "sandgate unreachable: exit 3",
          err=lambda e: "cannot reach" in e)
    check(cli("ctx", "rm", cid), 0, "ctx rm the last context")
finally:
    d.stop()
done()
