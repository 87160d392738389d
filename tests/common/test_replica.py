"""--replica-id: every id a replica hands out begins with its tag (the first
8 hex digits of SHA-256 of the replica id), so a proxy routes by id; every
response says which replica answered.  Plain kernels: no sandbox needed."""
import hashlib
import json
import re
import socket
import subprocess

import mcpraw
import sgd
from sgd import Daemon
from tap import ok, done

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def tag(replica):
    return hashlib.sha256(replica.encode()).hexdigest()[:8]


d = Daemon("--sandbox", "none", "--pool-size", "1", "--replica-id", "sandgate-2")
try:
    want = tag("sandgate-2")
    st, h = d.json("GET", "/health")
    ok(st == 200 and h.get("replica") == "sandgate-2" and h.get("replica_tag") == want,
       "/health names the replica and its tag", h)

    ids = {}
    st, hdrs, body = d.request("POST", "/contexts", {})
    ids["context"] = json.loads(body).get("id", "")
    ok(st == 201 and hdrs.get("X-Sandgate-Replica") == "sandgate-2",
       "a response carries X-Sandgate-Replica", dict(hdrs))
    st, k = d.json("POST", "/api/kernels", {"name": "python3"})
    ids["jupyter kernel"] = k.get("id", "")
    st, s = d.json("POST", "/api/sessions", {"path": "a.ipynb", "type": "notebook",
                                              "kernel": {"name": "python3"}})
    ids["jupyter session"] = s.get("id", "")
    ids["jupyter session's kernel"] = s.get("kernel", {}).get("id", "")
    st, sid, _ = mcpraw.initialize(d)
    ids["MCP session"] = sid or ""
    st, hdrs, body = d.request("POST", "/execute", {"code": "1+1"},
                               headers={"Accept": "application/json"})
    st, ctxs = d.json("GET", "/contexts")
    ids["default context"] = next((c["id"] for c in ctxs if c["id"] not in ids.values()), "")
    for what, i in ids.items():
        ok(UUID.match(i) and i.startswith(want + "-"),
           f"the {what} id is a UUID that begins with the replica's tag ({i})", i)

    # A client that routes by id reaches its context again.
    st, r = d.json("POST", "/execute", {"code": "x = 41", "context_id": ids["context"]},
                   headers={"Accept": "application/json"})
    st, r = d.json("POST", "/execute", {"code": "x + 1", "context_id": ids["context"]},
                   headers={"Accept": "application/json"})
    ok(r.get("results", [{}])[0].get("text") == "42", "the context keeps its variables", r)

    for method, path, token in (("GET", "/contexts/00000000-0000-4000-8000-000000000000", sgd.TOKEN),
                                ("GET", "/contexts", "wrong-token-0123456789"),
                                ("GET", "/nowhere", sgd.TOKEN)):
        st, hdrs, _ = d.request(method, path, token=token)
        ok(st in (401, 404) and hdrs.get("X-Sandgate-Replica") == "sandgate-2",
           f"{method} {path} ({st}) carries the header too", dict(hdrs))
finally:
    d.stop()

# Default: the host name, up to its first dot.
host = socket.gethostname().split(".")[0][:63]
d = Daemon("--sandbox", "none", "--pool-size", "0")
try:
    st, h = d.json("GET", "/health")
    st, c = d.json("POST", "/contexts", {})
    ok(h.get("replica") == host and c.get("id", "").startswith(tag(host)),
       f"without --replica-id, the replica is the host name ({host})", (h, c))
finally:
    d.stop()

for bad in ("", "a/b", "x" * 64, "r 1"):
    r = subprocess.run([sgd.SANDGATE, "--replica-id", bad, "--sandbox", "none"],
                       capture_output=True, text=True, timeout=30)
    ok(r.returncode != 0 and "--replica-id" in r.stderr,
       f"--replica-id {bad[:20]!r} is refused at start", r.stderr)
done()
