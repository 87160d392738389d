"""E2B's Python SDK, unchanged (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY),
with terminals (sandbox.pty: envd's Start with a pty, SendInput's pty,
Update, SendSignal, Connect; gateway/envd/process.c over
kernelmgr/guest/pty.c): a login shell that answers typed input, a resize
the shell sees, a reconnect, a kill; another tenant cannot type into it.
Run by tests/.venv-e2b's python.
usage: e2b_pty.py OTHER_TENANTS_KEY — one JSON line per check."""
import base64
import json
import os
import sys
import urllib.error
import urllib.request

from e2b import CommandExitException, Sandbox
from e2b.sandbox.commands.command_handle import PtySize
from checks import check, fails

other = sys.argv[1]
url = os.environ["E2B_SANDBOX_URL"]

sbx = Sandbox.create(timeout=300)
out = []
term = sbx.pty.create(PtySize(rows=24, cols=80), envs={"ABC": "123"}, cwd="/tmp")
sbx.pty.send_stdin(term.pid, b"echo $((6*7)) $ABC; pwd; tty; stty size\n")
for _, _, chunk in term:  # its answer, before the resize
    out.append(chunk.decode())
    if "24 80" in "".join(out):
        break
sbx.pty.resize(term.pid, PtySize(rows=40, cols=132))
sbx.pty.send_stdin(term.pid, b"stty size; exit 3\n")
e = fails(term.wait, on_pty=lambda b: out.append(b.decode()))
text = "".join(out)
check("42 123" in text and "/tmp" in text and "/dev/pts/" in text and "24 80" in text and
      "40 132" in text, "a login shell on a terminal: typed input runs, its cwd and envs, "
      "a tty, the size given, then the size resized to", text[-800:])
check(isinstance(e, CommandExitException) and e.exit_code == 3,
      "its exit code is the shell's", e)

term = sbx.pty.create(PtySize(rows=24, cols=80))
sbx.pty.send_stdin(term.pid, b"x=kept\n")
term.disconnect()
again = sbx.pty.connect(term.pid)
sbx.pty.send_stdin(term.pid, b"echo $x; exit\n")
seen = []
r = again.wait(on_pty=lambda b: seen.append(b.decode()))
check(again.pid == term.pid and r.exit_code == 0 and "kept" in "".join(seen),
      "disconnect, connect again: the same shell, its state kept", "".join(seen)[-400:])

term = sbx.pty.create(PtySize(rows=24, cols=80))
req = urllib.request.Request(f"{url}/process.Process/SendInput", method="POST",
                             data=json.dumps({"process": {"pid": term.pid}, "input": {
                                 "pty": base64.b64encode(b"echo hi\n").decode()}}).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": f"Bearer {other}",
                                      "E2b-Sandbox-Id": sbx.sandbox_id})
try:
    status = urllib.request.urlopen(req, timeout=30).status
except urllib.error.HTTPError as err:
    status = err.code
check(status == 404, "another tenant's key: the sandbox is unknown, nothing typed", status)
check(sbx.pty.kill(term.pid), "pty.kill")
# gone once the kill is delivered and it is reaped (asynchronous): asked until it
# is, 30 s at most (an ASan build under CI's load once took more than 10)
e = fails(sbx.commands.run, f"for i in $(seq 1500); do kill -0 {term.pid} 2>/dev/null || "
          "exit 0; sleep 0.02; done; exit 1", timeout=60)
check(e is None, "then its process is gone", e)
check(not sbx.pty.kill(999999), "killing a pid that is no terminal: false")
sbx.kill()
