"""E2B's Python SDK, unchanged (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY),
and a sandbox's own server reached at Sandbox.get_host(port), as E2B's
test_ping_server does — the host name's DNS step done by hand: the request
goes to sandgate's address with that Host.  Run by tests/.venv-e2b's python.
usage: e2b_ports.py OTHER_TENANTS_KEY — one JSON line per check."""
import os
import sys

import httpx
from e2b import Sandbox
from e2b.exceptions import SandboxException
from checks import check, fails

other = sys.argv[1]
url = os.environ["E2B_SANDBOX_URL"]


def get(sbx, port, **headers):
    """GET / of port in sbx, as https://{get_host(port)} would reach it."""
    return httpx.get(url, headers={"Host": sbx.get_host(port), **headers}, timeout=60)


def serve(sbx, port, server=None):
    """`python3 -m http.server PORT` (or server) in the background, until it answers."""
    cmd = sbx.commands.run(server or f"cd /tmp && python3 -m http.server {port}",
                           background=True)
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
check(r.status_code == 403 and "E2B-Traffic-Access-Token" in r.json().get("message", ""),
      "allow_public_traffic=False: no credential, no way in (403 naming it, as E2B answers)",
      (r.status_code, r.text))
r = get(private, 8002, **{"X-API-Key": other})
check(r.status_code == 404, "... another tenant's key: an unknown sandbox", r.status_code)
r = get(private, 8002, **{"E2B-Traffic-Access-Token": private.traffic_access_token or ""})
check(private.traffic_access_token and r.status_code == 200,
      "... its traffic access token lets the request in", (r.status_code, r.text[:200]))
net = private.get_info().network
check((net or {}).get("allow_public_traffic") is False,
      "get_info().network.allow_public_traffic is False", net)

# E2B's test_mask_request_host: the sandbox's server gets the mask as its Host.
HOST_ECHO = """import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
masked = Sandbox.create(timeout=120,
                        network={"mask_request_host": "custom-host.example.com:${PORT}"})
for sbx in (public, masked):
    sbx.files.write("/tmp/host.py", HOST_ECHO)
    serve(sbx, 8003, "python3 /tmp/host.py 8003")
r = get(masked, 8003)
check(r.text == "custom-host.example.com:8003",
      "mask_request_host: the server gets the mask, ${PORT} the port", (r.status_code, r.text))
r = get(public, 8003)
check(r.text == public.get_host(8003), "without one: the client's Host", (r.status_code, r.text))
net = masked.get_info().network or {}
check(net.get("mask_request_host") == "custom-host.example.com:${PORT}",
      "get_info().network.mask_request_host", net)
e = fails(Sandbox.create, timeout=60, network={"mask_request_host": "a b\r\nX-Evil: 1"})
check(isinstance(e, SandboxException) and "400: network.maskRequestHost" in str(e),
      "a mask that is no host: 400 naming it, raised by the SDK", e)
public.kill()
private.kill()
masked.kill()
