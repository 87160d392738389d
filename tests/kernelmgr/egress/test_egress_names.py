"""Host names in a sandbox's egress rules (allowOut/denyOut: api.example.test,
*.cdn.example.test), decided by the egress proxy (HAProxy and proxy.lua,
kernelmgr/egress/proxy.c) from the TLS SNI and the HTTP Host of each
connection to ports 80 and 443, an allowed name going where the sandboxes'
DNS server says.

The test builds its own "internet": a network namespace with a DNS server
(dnsmasq, 198.51.100.53), web servers on ports 80 and 443 (TLS, with a test
CA) at 198.51.100.10 and 198.51.100.20 answering who they are, a package
index, and a private address (10.99.0.10) a name resolves to.  Real runsc;
in the sandbox real curl, pip, urllib, requests and Node's fetch."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import inet
import sgd
from inet import sh, wheel
from sgd import Daemon
from tap import ok, done, relay_checks

HERE = os.path.dirname(os.path.abspath(__file__))
E2B_PY = os.path.join(HERE, "..", "..", ".venv-e2b", "bin", "python")

TAG = str(os.getpid() % 100000)
NS = f"sgtnames{TAG}"
VETH = f"sgtn{TAG}"
API, CDN, DNS, PRIVATE = "198.51.100.10", "198.51.100.20", "198.51.100.53", "10.99.0.10"
HOST_SIDE = "198.51.100.1"
ROUTES = ["10.99.0.0/24"]
NAMES = {"api.example.test": API, "pypi.example.test": API, "cdn.example.test": CDN,
         "other.example.test": CDN, "inside.example.test": PRIVATE}

# Each address and port answers with who it is, the Host it was asked for and
# the headers it got; /simple/ is a package index (inet.wheel).
SERVER = r'''
import http.server, json, os, socketserver, ssl, sys, threading
http.server.HTTPServer.server_bind = socketserver.TCPServer.server_bind  # no reverse DNS
root, cert, key = sys.argv[1:4]
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps a connection open for the next request
    disable_nagle_algorithm = True  # as servers do: no write waits for an ACK
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def do_GET(self):
        if self.path.startswith(("/simple", "/big")):
            return super().do_GET()
        b = json.dumps({"me": self.server.server_address[0], "host": self.headers.get("Host"),
                        "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
def serve(addr, port, tls):
    s = http.server.ThreadingHTTPServer((addr, port), H)
    if tls:
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        c.load_cert_chain(cert, key)
        s.socket = c.wrap_socket(s.socket, server_side=True)
    s.serve_forever()
for addr in sys.argv[4:]:
    for port, tls in ((80, False), (443, True)):
        threading.Thread(target=serve, args=(addr, port, tls), daemon=True).start()
threading.Event().wait()
'''


def make_ca(tmp):
    """A test CA and a certificate for every test name; the CA's path."""
    san = ",".join(f"DNS:{n}" for n in NAMES) + ",DNS:*.cdn.example.test"
    steps = [
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
         f"{tmp}/ca.key", "-out", f"{tmp}/ca.pem", "-subj", "/CN=sandgate test CA"],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{tmp}/srv.key",
         "-out", f"{tmp}/srv.csr", "-subj", "/CN=api.example.test"],
    ]
    for s in steps:
        sh(*s)
    with open(f"{tmp}/ext", "w") as f:
        f.write(f"subjectAltName={san}\n")
    sh("openssl", "x509", "-req", "-in", f"{tmp}/srv.csr", "-CA", f"{tmp}/ca.pem", "-CAkey",
       f"{tmp}/ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{tmp}/ext", "-out",
       f"{tmp}/srv.pem")
    return f"{tmp}/ca.pem"


def internet_up(tmp):
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS)
    sh("ip", "addr", "add", f"{HOST_SIDE}/24", "dev", VETH)
    sh("ip", "link", "set", VETH, "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    for a in (f"{API}/24", f"{CDN}/24", f"{DNS}/24", f"{PRIVATE}/24"):
        sh("ip", "-n", NS, "addr", "add", a, "dev", "eth0")
    sh("ip", "-n", NS, "link", "set", "eth0", "up")
    sh("ip", "-n", NS, "route", "add", "default", "via", HOST_SIDE)
    for r in ROUTES:
        sh("ip", "route", "add", r, "via", API)
    root = f"{tmp}/www"
    os.makedirs(root)
    wheel(root)
    with open(f"{tmp}/server.py", "w") as f:
        f.write(SERVER)
    dns = ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--bind-interfaces",
           f"--listen-address={DNS}", "--pid-file=", "--user=root"]
    dns += [f"--address=/{name}/{addr}" for name, addr in NAMES.items()]
    return [subprocess.Popen(["ip", "netns", "exec", NS, *cmd], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            for cmd in (["python3", f"{tmp}/server.py", root, f"{tmp}/srv.pem", f"{tmp}/srv.key",
                         API, CDN, PRIVATE], dns)]


def internet_down(procs):
    for p in procs or ():
        p.kill()
        p.wait()
    for r in ROUTES:
        sh("ip", "route", "del", r, check=False)
    sh("ip", "link", "del", VETH, check=False)
    sh("ip", "netns", "del", NS, check=False)
    sh("nft", "delete", "table", "inet", "sandgate", check=False)  # what sandgate leaves


def execute(d, cid, code, token=None):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, "timeout": 120},
                   headers={"Accept": "application/json"}, token=token)
    return r.get("stdout", "") if st == 200 else f"HTTP {st}: {r}"


def shell(d, cid, cmd, token=None):
    """cmd's exit code and output (stdout and stderr), run in the sandbox."""
    out = execute(d, cid, "import json, subprocess\n"
                          f"r = subprocess.run({cmd!r}, shell=True, capture_output=True, "
                          "text=True)\n"
                          "print(json.dumps([r.returncode, r.stdout + r.stderr]))\n", token)
    try:
        return tuple(json.loads(out))
    except ValueError:
        return (None, out)


def served(out):
    """Who answered (the server's address), from its JSON; None if not it."""
    try:
        return json.loads(out)["me"]
    except (ValueError, KeyError, TypeError):
        return None


CURL = "curl -sS --max-time 20 --cacert /tmp/ca.pem "


def tenant_limit(d, keys_file, carol, ca):
    """A tenant's limit (its keys-file line's egress=): what its contexts reach
    at most, whatever their own rules say; changed by SIGHUP."""
    st, c = d.json("POST", "/contexts", {"internet": True, "network": {
        "allowOut": ["other.example.test"]}}, token=carol)
    cid = c.get("id")
    execute(d, cid, f"open('/tmp/ca.pem', 'w').write({ca!r})", carol)
    got = [shell(d, cid, CURL + u, carol) for u in (
        "https://api.example.test/", f"--resolve api.example.test:443:{CDN} "
        "https://api.example.test/", "https://other.example.test/", "http://other.example.test/",
        f"http://{API}:8080/")]
    ok(st == 201 and served(got[0][1]) == API and served(got[1][1]) == API,
       "a tenant limited to a name reaches it, at the name's own address", got[:2])
    ok(got[2][0] not in (0, 28, None) and "refused by the tenant's limit" in got[3][1]
       and got[4][0] not in (0, 28, None),
       "and nothing else, its context's allowOut notwithstanding (TLS, HTTP, other ports)",
       got[2:])
    with open(keys_file) as f:
        text = f.read()
    with open(keys_file, "w") as f:
        f.write(text.replace("egress=api.example.test", "egress=api.example.test,"
                                                        "other.example.test"))
    d.proc.send_signal(signal.SIGHUP)
    ok(sgd.wait_for(lambda: served(shell(d, cid, CURL + "https://other.example.test/",
                                         carol)[1]) == CDN, 20),
       "a new limit (the keys file, SIGHUP) applies to its running contexts")
    d.json("DELETE", f"/contexts/{cid}", token=carol)


SECRET = "sk-test-51f0c0ffee-do-not-leak"


DENO = "/usr/local/lib/sandgate/deno/deno"


def headers(d, alice, bob, ca):
    """Rules' header transforms: a secret's value put into the requests to one
    host by the proxy, over HTTP and over HTTPS (opened with sandgate's CA,
    which the sandbox trusts), never inside the sandbox."""
    st, _ = d.json("POST", "/secrets", {"name": "api-key", "value": SECRET}, token=alice)
    st2, _ = d.json("POST", "/secrets", {"name": "bob-key", "value": "bob's"}, token=bob)
    ok(st == 201 and st2 == 201, "two tenants' secrets", (st, st2))
    bearer = {"Authorization": "Bearer ${e2b.secrets.api-key}", "X-Plain": "plain"}
    net = {"rules": {"api.example.test": [{"transform": {"headers": bearer}}]}}
    st, e = d.json("POST", "/contexts", {"internet": True, "network": {
        "rules": {"api.example.test": [{"transform": {"headers": {
            "Authorization": "${e2b.secrets.bob-key}"}}}]}}}, token=alice)
    ok(st == 400 and "bob-key" in e.get("message", ""),
       "another tenant's secret is not one of mine: 400 naming it", (st, e))
    st, c = d.json("POST", "/contexts", {"internet": True, "network": net}, token=alice)
    cid = c.get("id")
    ok(st == 201 and c.get("network", {}).get("rules") == net["rules"],
       "a context's rules may set headers for a host", (st, c))
    execute(d, cid, f"open('/tmp/test-ca.pem', 'w').write({ca!r})", alice)
    got = {}
    for scheme in ("https", "http"):
        rc, out = shell(d, cid, f"curl -sS --max-time 20 {scheme}://api.example.test/h", alice)
        try:
            got[scheme] = json.loads(out)["headers"]
        except (ValueError, KeyError):
            got[scheme] = (rc, out)
    ok(all(isinstance(h, dict) and h.get("Authorization", h.get("authorization")) ==
           f"Bearer {SECRET}" for h in got.values()),
       "the server gets the secret in the header, over HTTPS and HTTP", got)
    ok(all(isinstance(h, dict) and "plain" in (h.get("X-Plain"), h.get("x-plain"))
           for h in got.values()), "and a plain header", got)
    # Node and Deno, whose CA stores are their own, are told of sandgate's CA.
    js = ("fetch('https://api.example.test/h').then(r => r.json())"
          ".then(j => console.log(j.headers.Authorization || j.headers.authorization))")
    seen = [shell(d, cid, f"{run} \"{js}\"", alice)
            for run in ("node -e", DENO + " eval --quiet")]
    ok(seen == [(0, f"Bearer {SECRET}\n")] * 2,
       "Node's fetch and Deno's trust the CA by the sandbox's environment", seen)
    # A new value reaches the proxy at once; a deleted secret's header goes.
    st, _ = d.json("POST", "/secrets/api-key", {"value": SECRET + "-2"}, token=alice)
    rc, out = shell(d, cid, "curl -sS --max-time 20 https://api.example.test/h", alice)
    st2 = d.json("DELETE", "/secrets/api-key", token=alice)[0]
    rc2, out2 = shell(d, cid, "curl -sS --max-time 20 https://api.example.test/h", alice)
    ok(st == 200 and f"Bearer {SECRET}-2" in out and st2 == 204 and rc2 == 0
       and "Authorization" not in out2 and "plain" in out2,
       "an updated secret's new value is used, a deleted one's header is left out",
       (st, out, st2, out2))
    # Another host's TLS is not opened: only the server's own CA verifies it.
    rc, out = shell(d, cid, CURL.replace("--cacert /tmp/ca.pem", "--cacert /tmp/test-ca.pem")
                    + "https://other.example.test/", alice)
    ok(rc == 0 and served(out) == CDN and "Authorization" not in out,
       "TLS to a host without rules passes through untouched", (rc, out))
    # What the sandbox can see: its environment, files, processes, what it sends.
    # (the pattern is made at run time: this command's own line holds no value)
    look = ("env; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; "
            "p=sk-; grep -rs -l \"${p}test\" /etc /tmp /home /conn /run 2>/dev/null; "
            "curl -sS --max-time 20 --trace-ascii - -o /dev/null https://api.example.test/ "
            "| sed -n '/=> Send header/,/<= Recv header/p'")
    rc, out = shell(d, cid, look, alice)
    ok(rc == 0 and "GET / HTTP/1.1" in out and SECRET not in out and "sk-test" not in out
       and "Authorization" not in out,
       "the sandbox's environment, files, processes and the bytes it sends hold no value",
       (rc, out[-1500:]))
    d.json("DELETE", f"/contexts/{cid}", token=alice)


def main():
    held = inet.ready(["nft", "haproxy", "dnsmasq", "openssl"], HOST_SIDE, ROUTES)
    if not held:
        return
    tmp = tempfile.mkdtemp(prefix="sgt-names-")
    keys_dir, keys_file, (bob,) = sgd.tenants("sgt-names-", "bob")
    alice = sgd.add_key(keys_file, "alice", "--internet")
    carol = sgd.add_key(keys_file, "carol", "--internet", "--egress", "api.example.test")
    procs = d = None
    try:
        with open(make_ca(tmp)) as f:
            ca = f.read()
        procs = internet_up(tmp)
        time.sleep(0.5)

        # Without --egress-dns nothing resolves a name: a rule naming one is refused.
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow", "198.51.100.0/24")
        st, e = d.json("POST", "/contexts", {"internet": True,
                                             "network": {"allowOut": ["api.example.test"]}})
        ok(st == 400 and "--egress-dns" in e.get("message", ""),
           "without --egress-dns, a rule naming a host is 400 saying why", (st, e))
        d.stop()
        d = None

        audit = f"{tmp}/audit.log"
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow", "198.51.100.0/24",
                   "--egress-dns", DNS, "--keys-file", keys_file, "--egress-ca-file",
                   f"{tmp}/ca.pem", "--audit-log", audit)
        ok(d.wait_log("egress: the proxy for host names runs"), "the egress proxy starts")
        # Its ports take what the table redirects from sandboxes, nothing else.
        r = sh("ip", "netns", "exec", NS, "curl", "-sS", "--max-time", "3",
               f"http://{HOST_SIDE}:49080/", check=False)
        ok(r.returncode != 0, "the proxy's ports are not open to the network", r)
        rules = {"allowOut": ["api.example.test", "*.cdn.example.test", "pypi.example.test",
                              "inside.example.test", "missing.example.test"],
                 "denyOut": ["0.0.0.0/0"]}
        st, c = d.json("POST", "/contexts", {"internet": True, "network": rules}, token=alice)
        cid = c.get("id")
        ok(st == 201 and c.get("network") == rules, "a context's rules may name hosts", (st, c))
        execute(d, cid, f"open('/tmp/ca.pem', 'w').write({ca!r})", alice)

        # --- allowed names, by TLS SNI and by HTTP Host ---------------------------------
        rc, out = shell(d, cid, CURL + "https://api.example.test/", alice)
        ok(rc == 0 and served(out) == API, "curl https://api.example.test: allowed by name",
           (rc, out))
        rc, out = shell(d, cid, CURL + "http://api.example.test/", alice)
        ok(rc == 0 and served(out) == API, "curl http://api.example.test: allowed by Host",
           (rc, out))
        rc, out = shell(d, cid, CURL + "https://www.cdn.example.test/", alice)
        ok(rc == 0 and served(out) == CDN, "*.cdn.example.test allows www.cdn.example.test",
           (rc, out))
        rc, out = shell(d, cid, CURL + "https://cdn.example.test/", alice)
        ok(rc != 0, "but not cdn.example.test itself (denied by 0.0.0.0/0)", (rc, out))
        # A forged address: the connection goes where the name resolves.
        rc, out = shell(d, cid, CURL + f"--resolve api.example.test:443:{CDN} "
                        "https://api.example.test/", alice)
        ok(rc == 0 and served(out) == API,
           "an allowed name sent to another address reaches the name's own address",
           (rc, out))

        # --- refused, quickly and plainly ------------------------------------------------
        rc, out = shell(d, cid, CURL + f"-k https://{CDN}/", alice)
        ok(rc not in (0, 28, None), "TLS to an address denyOut covers fails at once (not a "
           "timeout)", (rc, out))
        rc, out = shell(d, cid, CURL + "https://other.example.test/", alice)
        ok(rc not in (0, 28, None), "TLS to a name no rule allows fails", (rc, out))
        rc, out = shell(d, cid, CURL + "http://other.example.test/", alice)
        ok(rc == 0 and "refused by denyOut 0.0.0.0/0" in out and "other.example.test" in out,
           "HTTP to it is a 403 that names the host and the rule", (rc, out))
        rc, out = shell(d, cid, CURL + "https://inside.example.test/", alice)
        ok(rc not in (0, 28, None),
           "an allowed name that resolves to a private address stays blocked (the operator's "
           "policy)", (rc, out))
        rc, out = shell(d, cid, f"curl -sS --max-time 20 http://{API}:8080/", alice)
        ok(rc not in (0, 28, None), "other ports still meet the address rules (denyOut all)",
           (rc, out))
        rc, out = shell(d, cid, CURL + f"--resolve missing.example.test:80:{API} "
                        "http://missing.example.test/", alice)
        ok(rc == 0 and "missing.example.test does not resolve" in out,
           "an allowed name the DNS server does not know: 502 saying so", (rc, out))
        page = d.request("GET", "/metrics")[2].decode()
        mine = {l.split('rule="')[1].split('"')[0]: l.rsplit(" ", 1)[1]
                for l in page.splitlines()
                if l.startswith(f'sandgate_egress_proxy_refused_total{{context="{cid}"')}
        ok(mine == {"denyOut 0.0.0.0/0": "4", "unresolved allowOut missing.example.test": "1"},
           "/metrics counts the proxy's refusals per context and rule", (mine, page[-800:]))
        def refused_events():
            with open(audit) as f:
                events = [json.loads(line) for line in f if '"egress.refused"' in line]
            return {(e.get("rule"), e.get("tenant")): sum(
                x["count"] for x in events if x.get("rule") == e.get("rule")
                and x.get("context") == cid) for e in events if e.get("context") == cid}
        ok(sgd.wait_for(lambda: refused_events().get(("denyOut 0.0.0.0/0", "alice")) == 4 and
                        refused_events().get(("addresses", "alice"), 0) >= 1, 30),
           "the audit log counts them per context and rule, in the tenant's name",
           refused_events())
        rc, out = shell(d, cid, "getent hosts api.example.test", alice)
        ok(rc == 0 and API in out, "the sandbox resolves names with the allowed DNS server",
           (rc, out))

        # --- real clients ----------------------------------------------------------------
        out = execute(d, cid, "import json, urllib.request, ssl\n"
                              "c = ssl.create_default_context(cafile='/tmp/ca.pem')\n"
                              "print(json.load(urllib.request.urlopen("
                              "'https://api.example.test/', context=c))['me'])\n", alice)
        ok(out.strip() == API, "Python's urllib", out)
        out = execute(d, cid, "import requests\n"
                              "r = requests.get('https://api.example.test/x', "
                              "verify='/tmp/ca.pem', timeout=20)\n"
                              "print(r.status_code, r.json()['me'])\n", alice)
        ok(out.strip() == f"200 {API}", "Python's requests", out)
        rc, out = shell(d, cid, "NODE_EXTRA_CA_CERTS=/tmp/ca.pem node -e \"fetch("
                        "'https://api.example.test/').then(r => r.json())"
                        ".then(j => console.log(j.me))\"", alice)
        ok(rc == 0 and out.strip() == API, "Node's fetch", (rc, out))
        rc, out = shell(d, cid, "python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -q "
                        "--disable-pip-version-check --cert /tmp/ca.pem --index-url "
                        "https://pypi.example.test/simple sgdemo && /tmp/venv/bin/python -c "
                        "'import sgdemo; print(sgdemo.VALUE)'", alice)
        ok(rc == 0 and out.strip().endswith("42"), "pip install from an index allowed by name",
           (rc, out[-400:]))

        # --- a change applies to the next connection; open ones go on --------------------
        keep = ("import http.client, ssl, json\n"
                "c = ssl.create_default_context(cafile='/tmp/ca.pem')\n"
                "conn = http.client.HTTPSConnection('api.example.test', context=c, timeout=20)\n"
                "conn.request('GET', '/'); print(json.load(conn.getresponse())['me'])\n")
        out = execute(d, cid, keep, alice)
        st, _ = d.json("PUT", f"/contexts/{cid}/network",
                       {"allowOut": ["other.example.test"], "denyOut": ["0.0.0.0/0"]},
                       token=alice)
        again = execute(d, cid, "conn.request('GET', '/'); "
                                "print(json.load(conn.getresponse())['me'])\n", alice)
        rc1, out1 = shell(d, cid, CURL + "https://api.example.test/", alice)
        rc2, out2 = shell(d, cid, CURL + "https://other.example.test/", alice)
        ok(st == 204 and rc1 not in (0, None) and rc2 == 0 and served(out2) == CDN,
           "PUT /contexts/{id}/network: the next connection meets the new rules at once",
           (st, rc1, out1, rc2, out2))
        ok(out.strip() == API and again.strip() == API,
           "a connection opened before the change goes on", (out, again))

        # --- E2B's dnsServers: reachable when allowOut names a host ---------------------
        dns = {"allowOut": ["api.example.test"], "denyOut": ["0.0.0.0/0"], "dnsServers": [CDN]}
        st, dc = d.json("POST", "/contexts", {"internet": True, "network": dns}, token=alice)
        bad, e = d.json("POST", "/contexts", {"internet": True, "network": dict(
            dns, dnsServers=["dns.example.test"])}, token=alice)
        rc, out = shell(d, dc.get("id"), f"curl -sS --max-time 20 http://{CDN}/", alice)
        ok(st == 201 and served(out) == CDN and bad == 400 and "dnsServers" in e.get("message", ""),
           "dnsServers: the servers are reached (an address only: 400)", (st, dc, out, bad, e))
        d.json("DELETE", f"/contexts/{dc.get('id')}", token=alice)

        # --- another tenant; a restart -------------------------------------------------
        st, e = d.json("PUT", f"/contexts/{cid}/network", {"allowOut": ["api.example.test"]},
                       token=bob)
        ok(st == 404, "another tenant's PUT on the context: unknown id", (st, e))
        d.restart()
        rc, out = shell(d, cid, CURL + "https://other.example.test/", alice)
        rc1, out1 = shell(d, cid, CURL + "https://api.example.test/", alice)
        ok(rc == 0 and served(out) == CDN and rc1 not in (0, None),
           "after a restart, the re-adopted sandbox's names are the proxy's again",
           (rc, out, rc1, out1))
        st, _ = d.json("POST", f"/contexts/{cid}/pause", token=alice, timeout=120)
        rc, out = shell(d, cid, CURL + "https://other.example.test/", alice)
        ok(st == 200 and rc == 0 and served(out) == CDN,
           "and after a pause and resume", (st, rc, out))

        tenant_limit(d, keys_file, carol, ca)
        headers(d, alice, bob, ca)
        d.json("POST", "/secrets", {"name": "api-key", "value": SECRET}, token=alice)

        # --- E2B's SDK, unchanged -------------------------------------------------------
        if not os.access(E2B_PY, os.X_OK):
            ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
        else:
            env = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=alice)
            r = subprocess.run([E2B_PY, os.path.join(HERE, "e2b_names.py"), API, CDN],
                               input=ca, env=env, capture_output=True, text=True, timeout=600)
            relay_checks(r, 4, "the Python SDK's e2b_names.py")

        # --- no leftovers ---------------------------------------------------------------
        st, _ = d.json("DELETE", f"/contexts/{cid}", token=alice)
        proxy = subprocess.run(["pgrep", "-f", f"{d.dir}/egress-proxy/"], capture_output=True,
                               text=True).stdout.split()
        d.stop()
        d = None
        gone = sgd.wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in proxy), 10)
        ok(st == 204 and proxy and gone, "the proxy stops with sandgate", proxy)
    finally:
        if d:
            d.stop()
        internet_down(procs)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(keys_dir, ignore_errors=True)
        held.close()


if __name__ == "__main__":
    main()
    done()
