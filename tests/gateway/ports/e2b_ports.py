"""E2B's Python SDK, unchanged (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY),
and a sandbox's own server reached at Sandbox.get_host(port), as E2B's
test_ping_server does — the host name's DNS step done by hand: the request
goes to sandgate's address with that Host.  Run by tests/.venv-e2b's python.
usage: e2b_ports.py OTHER_TENANTS_KEY — one JSON line per check."""
import os
import sys

import httpx
from e2b import Sandbox
from checks import check

other = sys.argv[1]
url = os.environ["E2B_SANDBOX_URL"]


def get(sbx, port, **headers):
    """GET / of port in sbx, as https://{get_host(port)} would reach it."""
    return httpx.get(url, headers={"Host": sbx.get_host(port), **headers}, timeout=60)


def serve(sbx, port):
    """`python3 -m http.server PORT` in the background, until it answers."""
    cmd = sbx.commands.run(f"cd /tmp && python3 -m http.server {port}", background=True)
    sbx.commands.run(f"for i in $(seq 500); do python3 -c 'import socket; "
                     f"socket.create_connection((\"127.0.0.1\", {port}))' 2>/dev/null && "
                     "exit 0; sleep 0.02; done; exit 1")
    return cmd


public = Sandbox.create(timeout=120)
cmd = serve(public, 8001)
r = get(public, 8001)
check(r.status_code == 200 and "Directory listing" in r.text,
      "get_host(8001): the sandbox's server answers anyone (allowPublicTraffic's default)",
      (public.get_host(8001), r.status_code, r.text[:200]))
r = get(public, 8001, **{"X-API-Key": other})
check(r.status_code == 404, "another tenant's key: an unknown sandbox", r.status_code)
cmd.kill()
r = get(public, 8001)
check(r.status_code == 502 and r.json().get("port") == 8001,
      "its server stopped: 502 naming the port", (r.status_code, r.text))

private = Sandbox.create(timeout=120, network={"allow_public_traffic": False})
serve(private, 8002)
r = get(private, 8002)
check(r.status_code == 404, "allow_public_traffic=False: no credential, no way in",
      (r.status_code, r.text))
r = get(private, 8002, **{"E2B-Traffic-Access-Token": private.traffic_access_token or ""})
check(private.traffic_access_token and r.status_code == 200,
      "... its traffic access token lets the request in", (r.status_code, r.text[:200]))
net = private.get_info().network
check((net or {}).get("allow_public_traffic") is False,
      "get_info().network.allow_public_traffic is False", net)
public.kill()
private.kill()
