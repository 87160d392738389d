"""The Python E2B SDK, unchanged, against sandgate's E2B sandbox API:
configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (alice's
key), no debug mode.  Run by tests/.venv-e2b's python.
usage: e2b_sandboxes.py BOBS_KEY  — prints one JSON line per check: {ok, name, detail}"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

from e2b import PtySize, SandboxQuery, SandboxState, Template
from e2b.exceptions import NotFoundException, SandboxException, TimeoutException
from e2b_code_interpreter import Sandbox
from checks import check, fails

bob = sys.argv[1]




def text(execution):
    return [r.text for r in execution.results] or execution.error


check(os.environ.get("E2B_DEBUG") is None and os.environ["E2B_API_URL"].startswith("http"),
      "no debug mode: the three variables only")
sbx = Sandbox.create(metadata={"job": "py"}, envs={"GREETING": "hi"}, timeout=120)
check(len(sbx.sandbox_id) > 30, "Sandbox.create() makes a sandbox", sbx.sandbox_id)
r = sbx.run_code("import os; x = 41; os.environ.get('GREETING')")
check(text(r) == ["hi"], "run_code runs in it, with the envs given at creation", text(r))
sbx.files.write("/tmp/py.txt", "written by files.write")
check(text(sbx.run_code("open('/tmp/py.txt').read()")) == ["written by files.write"],
      "files.write and run_code see one sandbox's files")
check(sbx.commands.run("cat /tmp/py.txt").stdout == "written by files.write",
      "and so do commands.run")

# E2B's modes for what its envd makes: files 0644, directories 0755 (parents too).
sbx.files.make_dir("made/inner")
sbx.files.write("made/inner/f.txt", "f")
sbx.files.write("top.txt", "t")
modes = [(i.mode, i.permissions) for i in map(sbx.files.get_info, (
    "made", "made/inner", "made/inner/f.txt", "top.txt", "/home/user"))]
check(modes == [(0o755, "drwxr-xr-x")] * 2 + [(0o644, "-rw-r--r--")] * 2
      + [(0o2770, "dgrwxrwx---")], "files.make_dir and files.write: E2B's modes, 0755 and 0644 "
      "(the workspace itself the sandbox group's, as Go prints it)", modes)
own = f"{os.environ['E2B_API_URL']}/contexts/{sbx.sandbox_id}/files/"
auth = {"Authorization": "Bearer " + os.environ["E2B_API_KEY"]}
got = urllib.request.urlopen(urllib.request.Request(own + "made/inner/f.txt", headers=auth))
try:
    urllib.request.urlopen(urllib.request.Request(own + "made/inner/f.txt", data=b"x",
                                                  headers=auth, method="PUT"))
    put = None
except urllib.error.HTTPError as e:
    put = (e.code, json.loads(e.read()).get("message", ""))
check(got.read() == b"f" and put and put[0] == 403 and "permission denied" in put[1],
      "sandgate's own files API reads them; writing into a 0755 directory: 403 saying why", put)

# Signed file URLs: no header, no key; the signature names the sandbox.
def fetch(url, data=None):
    req = urllib.request.Request(url, data=data, headers={"Content-Type": CTYPE} if data else {})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


CTYPE = "multipart/form-data; boundary=sg"
got = fetch(sbx.download_url("/tmp/py.txt")), fetch(sbx.download_url("/tmp/py.txt", None, 60))
check(got == ((200, "written by files.write"),) * 2,
      "download_url: the file, signed (and with an expiration)", got)
got = fetch(sbx.download_url("/tmp/py.txt", use_signature_expiration=-60))
check(got == (401, {"code": 401, "message": "signature is already expired"}),
      "an expired signature: 401, as E2B's envd says it", got)
got = fetch(sbx.download_url("/tmp/py.txt").replace("py.txt", "other.txt"))
check(got[0] == 401, "a signed URL for another path: 401", got)
body = (b'--sg\r\nContent-Disposition: form-data; name="file"; filename="up.txt"\r\n\r\n'
        b'uploaded by url\r\n--sg--\r\n')
got = fetch(sbx.upload_url("/tmp/up.txt"), body)
check(got[0] == 200 and sbx.files.read("/tmp/up.txt") == "uploaded by url",
      "upload_url: a POST to it writes the file", got)
got = fetch(sbx.download_url("/tmp/up.txt"), body), fetch(sbx.upload_url("/tmp/up.txt"))
check([g[0] for g in got] == [401, 401],
      "a download URL does not upload, nor the reverse (the operation is signed)", got)
# File metadata: X-Metadata-* headers, kept as the file's user.e2b.* attributes.
w = sbx.files.write("meta.txt", "m", metadata={"author": "ada", "Stage": "draft"})
meta = {"author": "ada", "stage": "draft"}
check(w.metadata == meta and sbx.files.get_info("meta.txt").metadata == meta,
      "files.write(metadata=): the upload and get_info give it back (keys lowercased)", w)
listed = {e.name: e.metadata for e in sbx.files.list("/home/user")}
renamed = sbx.files.rename("meta.txt", "meta2.txt")
check(listed.get("meta.txt") == meta and renamed.metadata == meta,
      "files.list and files.rename give it too", (listed, renamed))
check(sbx.files.write("meta2.txt", "again").metadata is None and
      sbx.files.get_info("meta2.txt").metadata is None,
      "a write without metadata clears what the file had", sbx.files.get_info("meta2.txt"))
sbx.files.write("/tmp/mv.txt", "m", metadata={"a": "b"})
moved = sbx.files.rename("/tmp/mv.txt", "/home/user/mv.txt")
check(moved.metadata == {"a": "b"}, "so does a move from /tmp to /home/user (a copy)", moved)
sbx.commands.run("python3 -c \"import os; os.setxattr('/tmp/py.txt', 'user.e2b.by', b'cmd')\"")
check(sbx.files.get_info("/tmp/py.txt").metadata == {"by": "cmd"},
      "a user.e2b.* attribute set inside the sandbox is metadata", sbx.files.get_info("/tmp/py.txt"))
info = sbx.get_info()
check(info.state.value == "running" and info.metadata == {"job": "py"} and
      info.template_id == "code-interpreter-v1" and info.sandbox_id == sbx.sandbox_id,
      "get_info: running, its metadata and template", info)
left = (info.end_at - info.started_at).total_seconds()
check(115 <= left <= 125, f"its end is its timeout after its start ({left:.0f} s)", info)
sbx.set_timeout(600)
left = (sbx.get_info().end_at - info.started_at).total_seconds()
check(595 <= left <= 700, f"set_timeout moves its end ({left:.0f} s)", left)
other = Sandbox.create(metadata={"job": "other"})
listed = [s.sandbox_id for s in Sandbox.list().next_items()]
check(sbx.sandbox_id in listed and other.sandbox_id in listed, "Sandbox.list() lists both",
      listed)
newest = [s.sandbox_id for s in Sandbox.list().next_items()]
oldest = [s.sandbox_id for s in Sandbox.list(order="asc").next_items()]
check(newest == [other.sandbox_id, sbx.sandbox_id] and oldest == newest[::-1],
      "the newest first, or the oldest with order asc", (newest, oldest))
since = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(
    started_after=info.started_at + (other.get_info().started_at - info.started_at) / 2))
    .next_items()]
check(since == [other.sandbox_id], "started_after keeps the later one", since)
at = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(
    started_after=other.get_info().started_at)).next_items()]
check(at == [other.sandbox_id], "started_after its own start time keeps it", at)
none = Sandbox.list(query=SandboxQuery(template="no-such-template")).next_items()
check(none == [], "a template filter that matches none", none)
mine = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"job": "py"})).next_items()]
check(mine == [sbx.sandbox_id], "a metadata filter keeps the one that matches", mine)
page = Sandbox.list(limit=1)
first = page.next_items()
second = page.next_items()
check(len(first) == 1 and len(second) == 1 and first[0].sandbox_id != second[0].sandbox_id
      and not page.has_next, "pages of one, in turn, end", (first, second))

check(sbx.pause() is not None, "pause()")
states = {s.sandbox_id: s.state.value
          for s in Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()}
check(states == {sbx.sandbox_id: "paused"}, "the state filter: only the paused one", states)
check(sbx.is_running() is False, "is_running(): False while paused")
again = Sandbox.connect(sbx.sandbox_id)
check(text(again.run_code("x + 1")) == ["42"], "connect() resumes it with its variables")
check(again.is_running() is True, "is_running(): True once connected")
check(again.files.read("/tmp/py.txt") == "written by files.write", "and its files")


# Another tenant's key: alice's sandboxes do not exist for bob.
as_bob = {"api_key": bob}
e = fails(Sandbox.get_info, sbx.sandbox_id, **as_bob)
check(isinstance(e, NotFoundException), "bob: alice's sandbox is not found (get_info)", e)
e = fails(Sandbox.connect, sbx.sandbox_id, **as_bob)
check(isinstance(e, NotFoundException), "bob: connect to it: not found", e)
check(Sandbox.kill(sbx.sandbox_id, **as_bob) is False, "bob: kill of it: False, and it lives")
check(Sandbox.list(**as_bob).next_items() == [], "bob lists none of alice's")
check(text(again.run_code("x")) == ["41"], "alice's sandbox is untouched")

# The quota: alice has max-contexts 2 (two sandboxes now).
e = fails(Sandbox.create)
check(isinstance(e, SandboxException) and "max-contexts" in str(e),
      "a third sandbox past alice's max-contexts: refused, naming the quota", e)

check(Sandbox.kill(other.sandbox_id) is True, "Sandbox.kill")
e = fails(Sandbox.get_info, other.sandbox_id)
check(isinstance(e, NotFoundException), "a killed sandbox is not found", e)
check(Sandbox.kill(other.sandbox_id) is False, "killing it again: False")

# Fork: a child from a snapshot of the running sandbox, which runs on.
again.run_code("x = 'parent'")
forks = again.fork(timeout=60)
child = forks[0] if len(forks) == 1 else None
check(isinstance(child, Sandbox) and child.sandbox_id != sbx.sandbox_id,
      "fork() gives a new sandbox", forks)
check(text(child.run_code("x")) == ["parent"] and
      child.files.read("/tmp/py.txt") == "written by files.write",
      "the child has the parent's variables and files")
child.run_code("x = 'child'")
check(text(again.run_code("x")) == ["parent"], "and the parent runs on, apart from it")
info = child.get_info()
check(info.metadata == {"job": "py"} and 55 <= (info.end_at - info.started_at).total_seconds()
      <= 65, "the child has the parent's metadata and its own timeout", info)
e = fails(again.fork, count=2)
check(isinstance(e, SandboxException) and "max-contexts" in str(e),
      "forks past alice's max-contexts are refused, naming the quota", e)
child.kill()

# Snapshots: taken of the running sandbox, listed, a sandbox made from one
# (by id or by name), deleted.
snap = again.create_snapshot(name="py-snap")
check(snap.snapshot_id and snap.names == ["py-snap"], "create_snapshot names it", snap)
listed = [(i.snapshot_id, i.names) for i in again.list_snapshots().next_items()]
check(listed == [(snap.snapshot_id, ["py-snap"])], "list_snapshots of the sandbox: that one",
      listed)
again.run_code("x = 'after the snapshot'")
from_snap = Sandbox.create(snap.snapshot_id)
check(text(from_snap.run_code("x")) == ["parent"] and
      from_snap.get_info().template_id == snap.snapshot_id,
      "Sandbox.create(snapshot id): a sandbox with the snapshot's variables", from_snap)
from_snap.kill()
by_name = Sandbox.create("py-snap")
check(text(by_name.run_code("x")) == ["parent"], "Sandbox.create(its name) too")
by_name.kill()
got = [Template.exists(n) for n in ("base", "code-interpreter-v1", "py-snap", "no-such-thing")]
check(got == [True, True, True, False] and Template.exists("py-snap", api_key=bob) is False,
      "Template.exists: the defaults, the caller's snapshot by name (not another tenant's)", got)
e = fails(Sandbox.create, snap.snapshot_id, api_key=bob)
check(e is not None and "not found" in str(e), "bob cannot start one from alice's snapshot", e)
check(Sandbox.delete_snapshot(snap.snapshot_id, api_key=bob) is False,
      "nor delete it (not found)")
check(Sandbox.delete_snapshot(snap.snapshot_id) is True, "delete_snapshot")
check(again.list_snapshots().next_items() == [], "and it is gone")

# Timeouts: a sandbox's end kills it, or pauses it (on_timeout pause).
sbx.kill()
short = Sandbox.create(timeout=2)
paused = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
paused.run_code("y = 'kept'")
deadline = time.time() + 30  # sandgate looks once a second
while time.time() < deadline:
    if (fails(Sandbox.get_info, short.sandbox_id) and
            paused.get_info().state.value == "paused"):
        break
    time.sleep(0.2)
check(isinstance(fails(Sandbox.get_info, short.sandbox_id), NotFoundException),
      "a sandbox past its timeout is killed")
check(paused.get_info().state.value == "paused", "one with on_timeout 'pause' is paused")
back = Sandbox.connect(paused.sandbox_id, timeout=60)
check(text(back.run_code("y")) == ["kept"], "and connect() resumes it with its state")
back.kill()

# A pause without memory (E2B's filesystem-only): files kept, a cold boot's state.
BOOT = "/proc/sys/kernel/random/boot_id"
cold = Sandbox.create()
cold.files.write("/home/user/kept.txt", "kept")
cold.run_code("lost = 1")
boot = cold.files.read(BOOT)
cold.pause(mode="filesystem")
back = Sandbox.connect(cold.sandbox_id)
r = back.run_code("lost")
check(r.error is not None and r.error.name == "NameError" and
      back.files.read("/home/user/kept.txt") == "kept" and back.files.read(BOOT) != boot,
      "pause(mode='filesystem'): files kept, variables gone, a new boot", (r.error, boot))
back.kill()

# A terminal in a sandbox made by create (tests/gateway/envd/e2b_pty.py has the rest).
pt = Sandbox.create()
term = pt.pty.create(PtySize(rows=24, cols=80))
pt.pty.send_stdin(term.pid, b"echo $((6*7)); exit\n")
seen = []
term.wait(on_pty=lambda b: seen.append(b.decode()))
check("42" in "".join(seen), "pty.create: a shell on a terminal answers", "".join(seen)[-300:])
pt.kill()

# allow_internet_access=True on a server that
# gives no network (no --egress-allow): made, and it reaches nothing.
net = Sandbox.create(allow_internet_access=True)
r = net.commands.run("python3 -c \"import socket; socket.create_connection(('198.51.100.7', 80), "
                     "timeout=2)\" 2>&1; echo rc=$?")
check("rc=1" in r.stdout, "allow_internet_access=True on a server without a network: the "
      "sandbox is made, and reaches nothing", r.stdout[-300:])
net.kill()

# A sandbox killed while a command runs: the SDK's own "killed" error, not an exit.
victim = Sandbox.create()
cmd = victim.commands.run("sleep 60", background=True)
victim.kill()
e = fails(cmd.wait)
check(isinstance(e, TimeoutException) and "killed or reached its end of life" in str(e),
      "a command whose sandbox is killed: TimeoutException, the sandbox killed", repr(e))
