"""clients/python: `pip install ./clients/python` into a fresh virtual
environment works and its core imports with no third-party module; then the
client (run from that venv, as a user would) against a real daemon with real
sandboxed kernels: streaming callbacks, rich results, errors in the code,
contexts (create, list, get, restart, pause, resume, delete, the throwaway
context manager), snapshots (a context from one, fork, roll-back, list, get,
delete; another tenant's are unknown), templates (templates() lists the
daemon's --template with its fields, a context from one has its preload, an
unknown name is a NotFoundError), commands, files, artifacts, and one
exception class per kind of HTTP error.  Then tenants (the daemon has a keys file from `sandgate
keys add`): each client works with its tenant's key (api_key=, token=,
SANDGATE_API_KEY over SANDGATE_TOKEN, sandgate-cli --api-key), one tenant's
context is a NotFoundError to the other, each sees the same templates and
makes contexts from them, a tenant at --max-contexts 1 gets
QuotaExceededError naming max-contexts (sandgate-cli: exit 7), and an address
past --auth-fail-limit gets TooManyRequestsError."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from sgd import Daemon, TOKEN, add_key
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
PKG = os.path.join(SRC, "clients", "python")

# The daemon's --notebook-url: each context's notebook_url is it, with its id.
NOTEBOOK_URL = "https://hub.example.org/user/alice/lab?kernel={kernel_id}"
venv = tempfile.mkdtemp(prefix="sgt-pyclient-")
py = os.path.join(venv, "bin", "python")
d = None
try:
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    # A copy: pip builds in the source tree, which may be read-only (distcheck).
    src = os.path.join(venv, "src")
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", src],
                       capture_output=True, text=True, timeout=300)
    ok(r.returncode == 0, "pip install ./clients/python into a fresh venv", r.stdout + r.stderr)
    r = subprocess.run([py, "-m", "pip", "list", "--format", "json"], capture_output=True,
                       text=True, timeout=60)
    names = {p["name"].lower() for p in json.loads(r.stdout)} - {"pip", "setuptools", "wheel"}
    ok(names == {"sandgate"}, "it installs nothing but itself (no dependencies)", names)
    probe = ("import sys, sysconfig\n"
             "before = set(sys.modules)\n"
             "import sandgate, sandgate.cli, sandgate.client, sandgate.errors\n"
             "from sandgate import Sandgate\n"
             "std = sysconfig.get_paths()['stdlib']\n"
             "site = sysconfig.get_paths()['purelib']\n"
             "third = sorted(n for n, m in list(sys.modules.items())\n"
             "    if n not in before and getattr(m, '__file__', None) and m.__file__.startswith(site)\n"
             "    and not n.startswith('sandgate'))\n"
             "print(third, 'langchain_core' in sys.modules or 'deepagents' in sys.modules)\n")
    r = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60, cwd=venv)
    ok(r.returncode == 0 and r.stdout.strip() == "[] False",
       "the core imports with the standard library alone (no third-party module loaded)",
       r.stdout + r.stderr)
    cli = os.path.join(venv, "bin", "sandgate-cli")
    ok(os.access(cli, os.X_OK), "the console script is sandgate-cli (the daemon is sandgate)")
    r = subprocess.run([py, "-c", "import sandgate.langchain"], capture_output=True, text=True,
                       timeout=60, cwd=venv)
    ok(r.returncode != 0 and "langchain" in r.stderr and "pip install" in r.stderr,
       "sandgate.langchain without LangChain says which extra to install", r.stderr[-500:])

    # Two tenants: alice, and bob with at most one context.  --token stays
    # the admin's key, which the checks before the tenants' use.
    keys_file = os.path.join(venv, "keys")
    key_a = add_key(keys_file, "alice")
    key_b = add_key(keys_file, "bob", "--max-contexts", "1")
    d = Daemon("--pool-size", "1", "--max-upload", "100000", "--keys-file", keys_file,
               "--auth-fail-limit", "10", "--auth-block", "2",
               "--template", "pd=preload=import pandas as pd", "--notebook-url", NOTEBOOK_URL)
    # The checks run inside the venv's Python: the package as installed.
    script = r'''
import base64, io, json, os, sys, time
from sandgate import *
from sandgate import Sandgate
import atexit
checks = []
atexit.register(lambda: print(json.dumps(checks)))
def check(cond, name, detail=None):
    checks.append([bool(cond), name, None if cond else repr(detail)[:2000]])

sg = Sandgate()  # SANDGATE_URL and SANDGATE_TOKEN from the environment
check(sg.health()["status"] == "ok", "Sandgate() takes url and token from the environment")

# --- execute: streaming callbacks ------------------------------------------------
got = []
t0 = time.time()
ex = sg.execute("import sys, time\nfor i in range(3):\n    print(i, flush=True)\n"
                "    time.sleep(0.5)\nprint('warn', file=sys.stderr)\n6*7",
                on_stdout=lambda t: got.append((time.time(), "out", t)),
                on_stderr=lambda t: got.append((time.time(), "err", t)),
                on_result=lambda r: got.append((time.time(), "res", r.text)))
outs = [g for g in got if g[1] == "out"]
check(ex.stdout == "0\n1\n2\n" and ex.stderr == "warn\n", "execute collects stdout and stderr",
      (ex.stdout, ex.stderr))
check(ex.text == "42" and ex.main_result.bundle["text/plain"] == "42",
      "the value is the main result (text/plain 42)", ex.results)
check(len(outs) >= 2 and outs[-1][0] - outs[0][0] > 0.7,
      "on_stdout is called as output arrives, not at the end", got)
check(("res" in [g[1] for g in got]) and ("err" in [g[1] for g in got]),
      "on_stderr and on_result are called", got)
check(isinstance(ex.execution_count, int) and ex.ok, "execution_count is set; ok",
      ex.execution_count)

# --- state, rich results, errors ---------------------------------------------------
sg.execute("kept = 'yes'")
check(sg.execute("kept").text == "'yes'", "variables persist in the default context")
ex = sg.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()")
imgs = [i for r in ex.results for i in r.images()]
check(imgs and imgs[0][0] == "image/png" and base64.b64decode(imgs[0][1])[:4] == b"\x89PNG",
      "a matplotlib figure is a result with a base64 PNG", ex.results)
charts = [r.chart for r in ex.results if r.chart]
check(charts and charts[0]["type"] == "line" and
      charts[0]["elements"][0]["points"] == [[0.0, 1], [1.0, 2], [2.0, 3]] and
      "e2b/chart" in ex.results[0].bundle, "and its data is Result.chart (e2b/chart)", charts)
r = sg.execute("__import__('pandas').DataFrame({'a': [1, 2]})").results
check(r and r[0].data == {"a": [1, 2]}, "a DataFrame's columns are Result.data (e2b/data)", r)
r = sg.execute("plt.plot([1, 2]); plt.show()", rich_formats=False).results
check(r and r[0].chart is None and r[0].png, "rich_formats=False: the image, no chart", r)
ex = sg.execute("def f():\n    return 1/0\nf()")
check(not ex.ok and ex.error.name == "ZeroDivisionError" and "division by zero" in ex.error.value,
      "an exception is Execution.error (name, value), not raised", ex.error)
check("f()" in ex.error.text and "\x1b[" not in ex.error.text and
      ex.error.text.endswith("ZeroDivisionError: division by zero"),
      "error.text is the traceback without colour codes", ex.error and ex.error.text)
ex = sg.execute("import os; os.environ['SG_X']", env_vars={"SG_X": "from-env"})
check(ex.text == "'from-env'", "env_vars", ex.text)
ex = sg.execute("import time; time.sleep(30)", timeout=1)
check(ex.error and ex.error.name == "TimeoutError", "timeout= ends with a TimeoutError", ex.error)

# --- contexts ------------------------------------------------------------------------
ctx = sg.create_context(language="python", cwd="/home/user/proj")
check(ctx.id and ctx.language == "python" and ctx.cwd == "/home/user/proj",
      "create_context(language, cwd)", ctx.info)
LINK = os.environ["SG_NOTEBOOK_URL"].replace("{kernel_id}", ctx.id)
check(ctx.notebook_url == LINK and sg.get_context(ctx.id).notebook_url == LINK and
      [c.notebook_url for c in sg.list_contexts() if c.id == ctx.id] == [LINK],
      "context.notebook_url: the server's --notebook-url for this context", ctx.info)
check(Context(sg, {"id": "x", "state": "running"}).notebook_url is None,
      "notebook_url is None when the server gives none")
check(ctx.execute("import os; os.getcwd()").text == "'/home/user/proj'", "it runs in its cwd")
ctx.execute("only_here = 1")
check(sg.execute("'only_here' in dir()").text == "False", "contexts share no variables")
check(ctx.id in [c.id for c in sg.list_contexts()], "list_contexts lists it")
check(sg.get_context(ctx.id).state in ("running", "starting"), "get_context", ctx.refresh().info)
ctx.pause()
check(ctx.state == "paused" and sg.get_context(ctx.id).state == "paused", "pause", ctx.info)
ctx.resume()
check(ctx.state == "running" and ctx.execute("only_here").text == "1",
      "resume: the variables are back", ctx.info)
ctx.restart()
check(ctx.execute("'only_here' in dir()").text == "False", "restart loses the variables")

# --- snapshots, fork, roll-back -----------------------------------------------------------
ctx.execute("snap_v = 'saved'\nopen('s.txt', 'w').write('saved')")
snap = ctx.snapshot("py")
check(isinstance(snap, Snapshot) and snap.context_id == ctx.id and snap.name == "py" and
      snap.bytes > 0 and snap.created, "Context.snapshot(name): a Snapshot", snap)
with sg.context(snapshot=snap) as child:
    check(child.execute("snap_v + open('s.txt').read()").text == "'savedsaved'" and
          child.info.get("parent") == ctx.id,
          "a context from the snapshot (context(snapshot=)) has its variables and files",
          child.info)
fork = ctx.fork()
check(fork.id != ctx.id and fork.info.get("snapshot_id") is None and
      fork.execute("snap_v").text == "'saved'", "Context.fork(): a copy", fork.info)
fork.execute("snap_v = 'fork'")
ctx.execute("snap_v = 'changed'")
check(fork.execute("snap_v").text == "'fork'" and ctx.execute("snap_v").text == "'changed'",
      "the fork and its origin change apart")
check(ctx.restore(snap.id) is ctx and ctx.execute("snap_v").text == "'saved'",
      "Context.restore(id) brings the variable back", ctx.info)
try:
    fork.restore(fork.snapshot())
    check(fork.execute("snap_v").text == "'fork'", "a fork restores its own snapshot")
except SandgateError as e:
    check(False, "a fork restores its own snapshot", e)
check([s.id for s in ctx.snapshots()] == [snap.id] and
      snap.id in [s.id for s in sg.snapshots()] and sg.snapshot(snap.id).name == "py",
      "Context.snapshots(), Sandgate.snapshots(), Sandgate.snapshot(id)")
for s in sg.snapshots():
    sg.delete_snapshot(s)
check(sg.snapshots() == [], "delete_snapshot")
try:
    sg.snapshot(snap)
    check(False, "a deleted snapshot raises NotFoundError")
except NotFoundError as e:
    check(e.status == 404, "a deleted snapshot raises NotFoundError")
fork.delete()
sg.delete_context(ctx)
check(ctx.id not in [c.id for c in sg.list_contexts()], "delete_context")

# --- other languages: JavaScript and TypeScript contexts ---------------------------------
with sg.context(language="js") as js:
    check(js.language == "javascript", "create_context(language='js'): a javascript context",
          js.info)
    js.execute("const seen = []\nfunction note(s) { seen.push(s); return seen.length }")
    js.execute("note('a')")
    ex = js.execute("note('b'); seen.join('+')")
    check(ex.ok and ex.text == '"a+b"', "a JavaScript context keeps its state between calls",
          (ex.text, ex.error))
    ex = js.execute("console.log('to stdout'); console.error('to stderr'); 6 * 7")
    check(ex.stdout == "to stdout\n" and ex.stderr == "to stderr\n" and ex.text == "42",
          "console.log and console.error are stdout and stderr", (ex.stdout, ex.stderr, ex.text))
    ex = js.execute("null.x")
    check(not ex.ok and ex.error.name == "TypeError", "a JavaScript exception is Execution.error",
          ex.error)
with sg.context(language="typescript") as ts:
    ex = ts.execute("type Pair = [string, number]\n"
                    "function show([k, v]: Pair): string { return `${k}:${v * 2}` }\n"
                    "show(['n', 21])")
    check(ts.language == "typescript" and ex.ok and ex.text == '"n:42"',
          "a TypeScript context runs a typed function", (ts.info, ex.text, ex.error))
    check(ts.execute("show(['m', 1] as Pair)").text == '"m:2"',
          "and keeps its type and function for the next call")
ex = sg.execute("const lang: string = 'ts default'; lang", language="ts")
check(ex.text == '"ts default"',
      "execute(language='ts') runs in the default TypeScript context", (ex.text, ex.error))
check(sg.execute("lang", language="typescript").text == '"ts default"',
      "which keeps its state (ts and typescript are one default context)")

# --- templates ----------------------------------------------------------------------------
tpls = sg.templates()
check([t.name for t in tpls] == ["pd"] and isinstance(tpls[0], Template) and
      (tpls[0].kernelspec, tpls[0].language, tpls[0].root, tpls[0].preload,
       tpls[0].pool_size) == ("python3", "python", "host", True, 0) and
      tpls[0].pool_ready == 0 and tpls[0].snapshot_bytes == 0 and sg.list_templates() == tpls,
      "templates(): the daemon's --template as Templates (kernelspec, language, root, preload, "
      "pool)", tpls)
with sg.context(template="pd") as tc:
    check(tc.template == "pd" and tc.language == "python" and
          sg.get_context(tc).template == "pd", "context(template=): its info names the template",
          tc.info)
    ex = tc.execute("pd.__version__")
    check(ex.ok and ex.text and ex.text.strip("'")[:1].isdigit(),
          "a context from the template has its preload (pd without an import)", ex.to_dict())
    ex = sg.execute("'pd' in dir()")
    check(ex.text == "False", "the default context has no preload", ex.text)
    tf = tc.fork()
    check(tf.template == "pd" and tf.execute("pd.__name__").text == "'pandas'",
          "a fork of it keeps the template (and pd)", tf.info)
    tf.delete()
try:
    sg.create_context(template="no-such-template")
    check(False, "an unknown template raises NotFoundError")
except NotFoundError as e:
    check(e.status == 404 and "no-such-template" in e.message and "/templates" in e.message,
          "an unknown template raises NotFoundError naming it", e.message)
try:
    sg.create_context(template="pd", language="python")
    check(False, "template with language raises InvalidError")
except InvalidError as e:
    check(e.status == 400, "template with language raises InvalidError", e.message)
with sg.context() as tmp:
    check(tmp.execute("1+1").text == "2", "with sg.context(): a throwaway context")
    tid = tmp.id
check(tid not in [c.id for c in sg.list_contexts()], "deleted when the block ends")

# --- commands ---------------------------------------------------------------------------
ctx = sg.create_context()
r = ctx.run_command("echo hi; echo oops >&2; exit 3")
check(r.stdout == "hi\n" and r.stderr == "oops\n" and r.exit_code == 3 and not r.ok,
      "run_command: stdout, stderr, exit code (a failure is not raised)", r)
r = sg.run_command("echo $GREETING", context=ctx.id, env_vars={"GREETING": "hello"})
check(r.ok and r.stdout == "hello\n", "run_command with env_vars", r)
r = ctx.run_command("sleep 20", timeout=1)
check(r.exit_code == 124 and r.error and r.error.name == "TimeoutError", "command timeout", r)

# --- files --------------------------------------------------------------------------------
info = ctx.upload("data/in.txt", b"line one\nline two\n")
check(info.get("size") == 18, "upload bytes (parents created)", info)
ctx.upload("data/s.txt", "text é")
ctx.upload("data/f.bin", io.BytesIO(bytes(range(256))))
check(ctx.download("data/f.bin") == bytes(range(256)), "upload a file object, download it")
check(ctx.download("data/s.txt") == "text é".encode(), "upload str is UTF-8")
names = [(e.name, e.type, e.size) for e in ctx.list_files("data")]
check(names == [("f.bin", "file", 256), ("in.txt", "file", 18), ("s.txt", "file", 7)],
      "list_files: names, types, sizes", names)
check("data" in [e.name for e in ctx.list_files()], "list_files of the root")
check(ctx.run_command("wc -l data/in.txt").stdout.split()[0] == "2",
      "the code sees uploaded files")
try:
    ctx.download("data")
    check(False, "download of a directory raises")
except IsADirectoryError:
    check(True, "download of a directory raises IsADirectoryError")
ctx.delete_file("data/s.txt")
check("s.txt" not in [e.name for e in ctx.list_files("data")], "delete_file")
ex = ctx.execute("open('output/r.csv', 'w').write('a,b\\n1,2\\n')")
arts = ex.artifacts
check(len(arts) == 1 and arts[0].path == "output/r.csv" and arts[0].size == 8,
      "artifacts of an execution", arts)
check(arts and sg.download_artifact(arts[0]) == b"a,b\n1,2\n", "download_artifact")

# --- errors: one class per kind -----------------------------------------------------------
def raises(cls, fn, name, status):
    try:
        fn()
        check(False, name + ": raises " + cls.__name__)
    except SandgateError as e:
        check(type(e) is cls and e.status == status and e.message,
              f"{name}: {cls.__name__} with status {status} and a message",
              (type(e), e.status, e.message))
raises(NotFoundError, lambda: sg.execute("1", context="no-such-context"), "unknown context", 404)
raises(NotFoundError, lambda: sg.get_context("no-such-context"), "get unknown context", 404)
raises(NotFoundError, lambda: ctx.download("nothing/here"), "missing file", 404)
raises(UnauthorizedError, lambda: Sandgate(token="wrong-token-xyzxyzxyz").list_contexts(),
       "bad token", 401)
raises(UnauthorizedError, lambda: Sandgate(token="").execute("1"), "no token", 401)
raises(InvalidError, lambda: sg.execute("1", language="cobol"), "unknown language", 400)
raises(InvalidError, lambda: sg.execute("1", timeout=-1), "bad timeout", 400)
raises(InvalidError, lambda: ctx.upload("a/../b", b"x"), "a path with ..", 400)
raises(ConflictError, lambda: ctx.upload("data", b"x"), "upload onto a directory", 409)
raises(LimitExceededError, lambda: ctx.upload("big", b"x" * 200000), "upload too large", 413)
ctx.run_command("ln -s /etc/passwd link")
raises(ForbiddenError, lambda: ctx.download("link"), "through a symlink", 403)
try:
    Sandgate("http://127.0.0.1:1", "t").list_contexts()
    check(False, "an unreachable server raises")
except SandgateConnectionError as e:
    check(e.status is None and "127.0.0.1:1" in str(e), "unreachable: SandgateConnectionError", e)
ctx.delete()

# --- tenants: a key each --------------------------------------------------------------------
import subprocess
KEY_A, KEY_B = os.environ["SG_KEY_A"], os.environ["SG_KEY_B"]
alice = Sandgate(api_key=KEY_A)
bob = Sandgate(token=KEY_B)  # the older name still works
check(alice.api_key == KEY_A and alice.token == KEY_A and bob.api_key == KEY_B,
      "api_key= and its older name token= set the key")
check(Sandgate(api_key=KEY_A, token=KEY_B).api_key == KEY_A, "api_key= wins over token=")
ca = alice.create_context()
alice.upload(ca, "mine.txt", b"alice's")
check(alice.execute("who = 'alice'; who", context=ca).text == "'alice'",
      "a tenant's key creates and runs its context")
check(ca.id in [c.id for c in alice.list_contexts()] and
      all(c.info.get("tenant") == "alice" for c in alice.list_contexts()),
      "its list has its own contexts, marked with its tenant",
      [c.info for c in alice.list_contexts()])
check(ca.id not in [c.id for c in bob.list_contexts()], "another tenant's list does not have it")
check(alice.get_context(ca.id).notebook_url ==
      os.environ["SG_NOTEBOOK_URL"].replace("{kernel_id}", ca.id),
      "a tenant's context has its notebook_url")
raises(NotFoundError, lambda: bob.get_context(ca.id), "another tenant's context", 404)
raises(NotFoundError, lambda: bob.execute("who", context=ca.id), "running in it", 404)
raises(NotFoundError, lambda: bob.download(ca.id, "mine.txt"), "reading its file", 404)
raises(NotFoundError, lambda: bob.delete_context(ca.id), "deleting it", 404)
try:
    bob.get_context(ca.id)
except NotFoundError as e:
    unknown = None
    try:
        bob.get_context("00000000-0000-4000-8000-000000000000")
    except NotFoundError as u:
        unknown = u
    check(unknown and e.message.replace(ca.id, "ID") == unknown.message.replace(
          "00000000-0000-4000-8000-000000000000", "ID"),
          "... the same error as an id that does not exist", (e.message, unknown))
check(alice.execute("who", context=ca).text == "'alice'" and
      alice.download(ca, "mine.txt") == b"alice's", "the owner's context is untouched")
check(ca.id in [c.id for c in Sandgate().list_contexts()], "the admin's --token sees it")

sa = ca.snapshot()
for what, fn in (("snapshot", lambda: bob.snapshot(sa)),
                 ("create_context(snapshot=)", lambda: bob.create_context(snapshot=sa.id)),
                 ("delete_snapshot", lambda: bob.delete_snapshot(sa))):
    raises(NotFoundError, fn, "another tenant's snapshot: " + what, 404)
check(sa.id not in [s.id for s in bob.snapshots()] and sa.tenant == "alice" and
      [s.id for s in alice.snapshots()] == [sa.id], "each tenant lists its own snapshots")
alice.delete_snapshot(sa)
check([(t.name, t.preload) for t in bob.templates()] == [("pd", True)] and
      bob.templates() == alice.templates(), "every tenant sees the same templates",
      (bob.templates(), alice.templates()))
tb = bob.create_context(template="pd")
check(tb.template == "pd" and tb.info.get("tenant") == "bob" and
      bob.execute("pd.__name__", context=tb).text == "'pandas'",
      "another tenant makes a context from the template, with its preload", tb.info)
tb.delete()
cb = bob.create_context()
check(bob.execute("6 * 7", context=cb).text == "42", "the other tenant works with its key")
try:
    bob.create_context()
    check(False, "a second context past --max-contexts 1 raises")
except QuotaExceededError as e:
    check(isinstance(e, SandgateError) and e.status == 429 and e.error == "quota_exceeded" and
          e.quota == "max-contexts" and e.limit == 1 and "max-contexts" in str(e),
          "past max-contexts: QuotaExceededError (a SandgateError, 429) naming max-contexts "
          "and its limit", (e.status, e.quota, e.limit, str(e)))
except SandgateError as e:
    check(False, "past max-contexts: QuotaExceededError", (type(e), e))
check(alice.create_context().id, "the other tenant is not held by that quota")

# The environment: SANDGATE_API_KEY wins over SANDGATE_TOKEN (the admin's here).
os.environ["SANDGATE_API_KEY"] = KEY_B
ids = [c.id for c in Sandgate().list_contexts()]
check(cb.id in ids and ca.id not in ids, "SANDGATE_API_KEY is used before SANDGATE_TOKEN", ids)
del os.environ["SANDGATE_API_KEY"]

cli = [os.path.join(os.path.dirname(sys.executable), "sandgate-cli")]
r = subprocess.run(cli + ["--api-key", KEY_B, "ctx", "list"], capture_output=True, text=True)
check(r.returncode == 0 and cb.id in r.stdout and ca.id not in r.stdout,
      "sandgate-cli --api-key lists that tenant's contexts", r.stdout + r.stderr)
r = subprocess.run(cli + ["--api-key", KEY_B, "--token", KEY_A, "ctx", "show", ca.id],
                   capture_output=True, text=True)
check(r.returncode == 5, "sandgate-cli: --api-key wins over --token; another tenant's id: exit 5",
      (r.returncode, r.stderr))
r = subprocess.run(cli + ["ctx", "new"], capture_output=True, text=True,
                   env=dict(os.environ, SANDGATE_API_KEY=KEY_B))
check(r.returncode == 7 and "max-contexts" in r.stderr and "429" in r.stderr,
      "sandgate-cli past the quota (SANDGATE_API_KEY): exit 7, naming max-contexts",
      (r.returncode, r.stderr))

# --- too many failed authentications: TooManyRequestsError ------------------------------------
got = []
for i in range(12):
    try:
        Sandgate(api_key="sgk_wrong%d" % i).list_contexts()
    except SandgateError as e:
        got.append(type(e).__name__)
check(got[:3] == ["UnauthorizedError"] * 3 and got[-1] == "TooManyRequestsError",
      "wrong keys past --auth-fail-limit: TooManyRequestsError", got)
try:
    alice.list_contexts()
    check(False, "while blocked, a right key raises too")
except TooManyRequestsError as e:
    check(e.status == 429 and e.error == "too_many_requests" and e.message,
          "while blocked, a right key gets TooManyRequestsError (429, its message)", e)
time.sleep(2.5)
try:
    left = alice.list_contexts() + bob.list_contexts()
    check(len(left) == 3, "after --auth-block, the right keys work again", left)
    for c in left:
        c.delete()
except SandgateError as e:
    check(False, "after --auth-block, the right keys work again", e)
'''
    env = dict(os.environ, SANDGATE_URL=d.url, SANDGATE_TOKEN=TOKEN, SG_KEY_A=key_a,
               SG_KEY_B=key_b, SG_NOTEBOOK_URL=NOTEBOOK_URL)
    env.pop("SANDGATE_API_KEY", None)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                       cwd=venv)
    try:
        checks = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        checks = []
        ok(False, "the client checks ran", r.stdout[-3000:] + r.stderr[-3000:])
    for good, name, detail in checks:
        ok(good, name, detail)
    if checks and r.returncode != 0:
        ok(False, "the client script exited cleanly", r.stderr[-3000:])
finally:
    if d:
        d.stop()
    shutil.rmtree(venv, ignore_errors=True)
done()
