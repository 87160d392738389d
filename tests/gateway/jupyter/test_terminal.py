"""A context's terminal over a WebSocket (GET /contexts/{id}/terminal:
gateway/jupyter/terminal.c): xterm.js in headless Chromium types into a
login shell in the sandbox, resizes it and reconnects to it
(terminal_browser.mjs); the shell is one of the context's commands; a plain
GET is 400, another tenant's key and none see an unknown context."""
import os
import subprocess
import tempfile

from sgd import Daemon, add_key
from tap import ok, done, relay_checks
from wsclient import handshake

SRC = os.environ.get("SG_SRCDIR", ".")
tmp = tempfile.mkdtemp(prefix="sg-term-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice, bob = add_key(keys, "alice"), add_key(keys, "bob")
d = Daemon("--pool-size", "0", "--keys-file", keys)
try:
    st, ctx = d.json("POST", "/contexts", {}, token=alice)
    cid = ctx.get("id")
    path = f"/contexts/{cid}/terminal"
    st, _, body = d.request("GET", path, token=alice)
    ok(st == 400 and b"WebSocket" in body, "a plain GET: 400, a terminal is a WebSocket", st)
    codes = [handshake(d.url, f"{path}?token={t}")[1] for t in (bob, "")]
    ok(codes == [404, 401], "another tenant's key: an unknown context; no key: 401", codes)
    s, code, hdrs, _ = handshake(d.url, f"{path}?token={alice}&name=probe")
    s.close()
    ok(code == 101, "the owner's key: 101, the WebSocket", (code, hdrs))
    st, cmds = d.json("GET", f"/contexts/{cid}/commands", token=alice)
    shells = [c for c in cmds if isinstance(c, dict) and c.get("cmd", "").startswith("/bin/bash")]
    ok(st == 200 and len(shells) == 1 and shells[0].get("state") in ("starting", "running"),
       "the terminal's shell is one of the context's commands, running after its socket closed",
       cmds)
    if not os.path.isdir(os.path.join(SRC, "tests", "node_modules", "@xterm")):
        ok(False, "tests/node_modules has @xterm/xterm (npm ci in tests/)")
    else:
        r = subprocess.run(["node", os.path.join(SRC, "tests/gateway/jupyter/terminal_browser.mjs"),
                            d.url, cid, alice], capture_output=True, text=True, timeout=300)
        relay_checks(r, 4, "xterm.js in Chromium")
finally:
    d.stop()
done()
