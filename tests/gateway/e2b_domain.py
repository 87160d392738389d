"""E2B's Python SDK, unchanged, configured by E2B_DOMAIN and E2B_API_KEY alone
(no E2B_API_URL, no E2B_SANDBOX_URL, no debug mode): it calls
https://api.DOMAIN and https://PORT-ID.DOMAIN, which the TLS proxy in front
of three replicas routes (test_cluster.py runs this in a network namespace
whose DNS answers DOMAIN's names with the proxy's address, and trusts the
test CA through SSL_CERT_FILE).  Run by tests/.venv-e2b's python.
usage: e2b_domain.py OTHER_TENANTS_KEY UNKNOWN_ID — prints one JSON line per
check ({ok, name, detail}) and "#SANDBOXES ID..."."""
import os
import sys

import httpx

from e2b import SandboxQuery
from e2b.exceptions import NotFoundException
from e2b_code_interpreter import Sandbox
from checks import check, fails

other, unknown = sys.argv[1], sys.argv[2]
run = {"run": "domain"}


def text(execution):
    return [r.text for r in execution.results] or execution.error


def ids(query=None, **kw):
    return [s.sandbox_id for s in Sandbox.list(query=query, **kw).next_items()]


check(os.environ.get("E2B_DOMAIN") and not any(
    os.environ.get(v) for v in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG")),
    "configured by E2B_DOMAIN and E2B_API_KEY only")
boxes = [Sandbox.create(metadata=run, timeout=300) for _ in range(3)]
print("#SANDBOXES", *(b.sandbox_id for b in boxes), flush=True)
for i, b in enumerate(boxes):
    b.run_code(f"n = {i}")
    b.files.write(f"/tmp/n{i}.txt", f"file {i}")
seen = [(text(b.run_code("n")), b.commands.run(f"cat /tmp/n{i}.txt").stdout,
         b.files.read(f"/tmp/n{i}.txt")) for i, b in enumerate(boxes)]
check(seen == [([str(i)], f"file {i}", f"file {i}") for i in range(3)],
      "each sandbox: run_code, commands.run and files.* reach it, with its own state", seen)

# E2B's test_ping_server: a server in the sandbox at https://get_host(port).
cmd = boxes[2].commands.run("cd /tmp && python3 -m http.server 8001", background=True)
boxes[2].commands.run("for i in $(seq 500); do python3 -c 'import socket; socket.create_connection("
                      "(\"127.0.0.1\", 8001))' 2>/dev/null && exit 0; sleep 0.02; done; exit 1")
r = httpx.get(f"https://{boxes[2].get_host(8001)}", timeout=60)
check(r.status_code == 200 and "Directory listing" in r.text,
      "https://get_host(8001): the sandbox's own server, through the proxy to its replica",
      (boxes[2].get_host(8001), r.status_code, r.text[:300]))
cmd.kill()

newest = ids(SandboxQuery(metadata=run))
started = sorted(boxes, key=lambda b: (b.get_info().started_at, b.sandbox_id), reverse=True)
check(newest == [b.sandbox_id for b in started],
      "Sandbox.list(): the three, from all replicas, newest first", newest)
check(ids(SandboxQuery(metadata=run), order="asc") == newest[::-1], "order='asc': oldest first")
page = Sandbox.list(query=SandboxQuery(metadata=run), limit=2)
first, second = page.next_items(), page.next_items()
check([s.sandbox_id for s in first + second] == newest and len(first) == 2
      and not page.has_next, "pages of two over the replicas: 2, then 1, then the end",
      (first, second))
again = Sandbox.connect(boxes[1].sandbox_id)
check(text(again.run_code("n")) == ["1"], "connect() from a new object: the same sandbox")

e = fails(Sandbox.get_info, boxes[0].sandbox_id, api_key=other)
check(isinstance(e, NotFoundException), "another tenant: the sandbox is not found", e)
check(ids(SandboxQuery(metadata=run), api_key=other) == [], "another tenant lists none of them")
e = fails(Sandbox.connect, unknown)
check(isinstance(e, NotFoundException), "an id no replica handed out: not found", e)

check([Sandbox.kill(b.sandbox_id) for b in boxes] == [True] * 3, "Sandbox.kill each")
check(ids(SandboxQuery(metadata=run)) == [], "then none is listed")
