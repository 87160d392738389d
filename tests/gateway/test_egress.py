"""Network egress (--egress-allow, {"internet": true}): off by default, opt-in
per context, with the host, other sandboxes, private, link-local (metadata)
and other reserved ranges always blocked unless the operator names a range
inside them.

The test builds its own "internet": a network namespace behind a veth pair,
with a "public" web server and package index on 203.0.113.10, a private
address (10.99.0.10), an allowed private range (10.213.0.10) and a metadata
address (169.254.169.254), the host routing to them.  Real runsc, real pip."""
import base64
import fcntl
import glob
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile

import sgd
from sgd import Daemon
from tap import ok, diag, done

TAG = str(os.getpid() % 100000)
NS = f"sgtinet{TAG}"
VETH = f"sgti{TAG}"
PUBLIC, PRIVATE, ALLOWED, METADATA = "203.0.113.10", "10.99.0.10", "10.213.0.10", "169.254.169.254"
HOST_SIDE = "203.0.113.1"
ROUTES = ["10.213.0.0/24", "10.99.0.0/24", "169.254.169.254/32"]
FAKE_NS = "sandgate-00000000-0000-4000-8000-000000000000-1"


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def wheel(root):
    """A minimal pure-Python wheel, sgdemo 1.0 (VALUE = 42), in a PEP 503 index."""
    files = {"sgdemo/__init__.py": b"VALUE = 42\n",
             "sgdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sgdemo\nVersion: 1.0\n",
             "sgdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandgate-test\n"
                                            b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "sgdemo-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("sgdemo-1.0.dist-info/RECORD", record)
    os.makedirs(f"{root}/simple/sgdemo")
    whl = "sgdemo-1.0-py3-none-any.whl"
    with open(f"{root}/simple/sgdemo/{whl}", "wb") as f:
        f.write(buf.getvalue())
    with open(f"{root}/simple/sgdemo/index.html", "w") as f:
        f.write(f'<html><body><a href="{whl}">{whl}</a></body></html>\n')
    with open(f"{root}/simple/index.html", "w") as f:
        f.write('<html><body><a href="sgdemo/">sgdemo</a></body></html>\n')


def internet_up(root):
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS)
    sh("ip", "addr", "add", f"{HOST_SIDE}/24", "dev", VETH)
    sh("ip", "link", "set", VETH, "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    for a in (f"{PUBLIC}/24", f"{ALLOWED}/24", f"{PRIVATE}/24", f"{METADATA}/16"):
        sh("ip", "-n", NS, "addr", "add", a, "dev", "eth0")
    sh("ip", "-n", NS, "link", "set", "eth0", "up")
    sh("ip", "-n", NS, "route", "add", "default", "via", HOST_SIDE)
    for r in ROUTES:
        sh("ip", "route", "add", r, "via", PUBLIC)
    wheel(root)
    return subprocess.Popen(["ip", "netns", "exec", NS, "python3", "-m", "http.server", "8080",
                             "--directory", root], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def internet_down(server):
    if server:
        server.kill()
        server.wait()
    for r in ROUTES:
        sh("ip", "route", "del", r, check=False)
    sh("ip", "link", "del", VETH, check=False)
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "netns", "del", FAKE_NS, check=False)
    sh("ip", "link", "del", "sgh16000", check=False)


PROBE = r'''
import json, socket
def tcp(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "open"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", (host, port))
        return "sent"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
def icmp(host):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        return type(e).__name__
    s.settimeout(3)
    try:
        s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (host, 0))  # echo request
        s.recvfrom(64)
        return "reply"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
print(json.dumps({t: tcp(h, p) for t, (h, p) in TARGETS.items()} |
                 {"udp": udp("%s", 9), "icmp": icmp("%s"), "icmp-metadata": icmp("%s")}))
'''


def probe(d, cid, targets):
    code = f"TARGETS = {json.dumps(targets)}\n" + PROBE % (PUBLIC, PUBLIC, METADATA)
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, "timeout": 120},
                   headers={"Accept": "application/json"})
    try:
        return json.loads(r["stdout"])
    except Exception:
        return {"error": r}


def run(d, cid, code, timeout=120):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, "timeout": timeout},
                   headers={"Accept": "application/json"})
    return r if st == 200 else {"status": st, "body": r, "stdout": ""}


def netns_names():
    return sorted(n for n in os.listdir("/var/run/netns") if n.startswith("sandgate-")) \
        if os.path.isdir("/var/run/netns") else []


def nft_table():
    return sh("nft", "list", "table", "inet", "sandgate", check=False).returncode == 0


def host_addrs():
    out = sh("ip", "-4", "-o", "addr", "show").stdout
    return [a for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
            if not a.startswith("127.") and not a.startswith("100.127.") and a != HOST_SIDE]


def main():
    if os.geteuid() != 0 or not shutil.which("nft"):
        ok(False, "runs as root with nft installed (scripts/deps.sh installs nftables)")
        return
    # The table, the sandgate-* namespaces and the sgh* veths are machine-wide
    # names: two runs of this test at once would take each other's away.
    lock = open("/run/sandgate-test-egress.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    root = tempfile.mkdtemp(prefix="sgt-index-")
    server = d = None
    try:
        server = internet_up(root)
        time.sleep(0.5)

        # --- default: no network for anyone -------------------------------------------
        d = Daemon("--pool-size", "0", "--pause-after", "0")
        st, e = d.json("POST", "/contexts", {"internet": True})
        ok(st == 400 and "--egress-allow" in e.get("message", ""),
           "without --egress-allow, {\"internet\": true} is refused with the reason", (st, e))
        d.stop()
        d = None

        # --- --egress-allow 0.0.0.0/0 ---------------------------------------------------
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow", "0.0.0.0/0",
                   "--egress-dns", PUBLIC)
        ok(nft_table(), "with --egress-allow, table inet sandgate is installed")
        st, e = d.json("POST", "/contexts", {"internet": "yes"})
        ok(st == 400 and "boolean" in e.get("message", ""), "'internet' must be a boolean",
           (st, e))
        st, a = d.json("POST", "/contexts", {"internet": True})
        ok(st == 201 and a.get("internet") is True, "POST /contexts {\"internet\": true}", a)
        st, b = d.json("POST", "/contexts", {"internet": True})
        st, plain = d.json("POST", "/contexts", {})
        ok(st == 201 and plain.get("internet") is False, "a context is without network by default",
           plain)
        st, g = d.json("GET", f"/contexts/{a['id']}")
        ok(g.get("internet") is True, "GET /contexts/{id} shows internet", g)

        port = int(d.url.rsplit(":", 1)[1].rstrip("/"))
        targets = {"public": [PUBLIC, 8080], "metadata": [METADATA, 8080],
                   "private": [PRIVATE, 8080], "allowed-private": [ALLOWED, 8080],
                   "host-veth": [HOST_SIDE, 8080], "gateway-port": [HOST_SIDE, port]}
        for i, h in enumerate(host_addrs()):
            targets[f"host-{i}"] = [h, 22]
            targets[f"host-{i}-gateway"] = [h, port]
        r = probe(d, a["id"], targets)
        diag(f"opted in: {r}")
        ok(r.get("public") == "open", f"an opted-in context reaches {PUBLIC} (a public address)", r)
        ok(r.get("icmp") == "reply" and r.get("icmp-metadata") != "reply",
           "ICMP too: echo from the public address, none from the metadata one", r)
        for t in targets:
            if t != "public":
                ok(r.get(t) not in (None, "open"), f"but not {t} {targets[t][0]}:{targets[t][1]}",
                   r)
        body = run(d, a["id"], "import urllib.request\n"
                   f"print(urllib.request.urlopen('http://{PUBLIC}:8080/simple/', timeout=10)"
                   ".read().decode()[:40])")
        ok("sgdemo" in body.get("stdout", ""), "and fetches a page over HTTP", body)
        conf = run(d, a["id"], "print(open('/etc/resolv.conf').read())")
        ok(f"nameserver {PUBLIC}" in conf.get("stdout", ""),
           "--egress-dns is the sandbox's resolver", conf)

        r = probe(d, plain["id"], {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        diag(f"not opted in: {r}")
        ok(r.get("public") not in (None, "open") and r.get("private") not in (None, "open") and
           r.get("udp") != "sent" and r.get("icmp") not in (None, "reply"),
           "a context that did not opt in reaches nothing (TCP, UDP, ICMP)", r)

        pip = (f"import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', "
               f"'install', '--disable-pip-version-check', '--no-cache-dir', '--target', "
               f"'/home/user/pkgs', '--index-url', 'http://{PUBLIC}:8080/simple/', "
               f"'--trusted-host', '{PUBLIC}', 'sgdemo'], "
               "capture_output=True, text=True, timeout=90)\n"
               "print(r.returncode)\nprint(r.stdout[-300:], r.stderr[-300:])")
        r = run(d, a["id"], pip + "\nsys.path.insert(0, '/home/user/pkgs')\n"
                "import sgdemo\nprint('VALUE', sgdemo.VALUE)")
        ok(r.get("stdout", "").startswith("0\n") and "VALUE 42" in r.get("stdout", ""),
           "pip install from a package index works in an opted-in context", r)
        r = run(d, plain["id"], pip)
        ok(not r.get("stdout", "").startswith("0\n"),
           "and fails in a context that did not opt in", r.get("stdout", "")[-300:])

        # Two opted-in contexts cannot reach each other.
        serve = ("import socket, threading\nsrv = socket.socket()\n"
                 "srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                 "srv.bind(('0.0.0.0', 8000)); srv.listen()\n"
                 "threading.Thread(target=lambda: [srv.accept()[0].close() for _ in iter(int, 1)],"
                 " daemon=True).start()\n"
                 f"u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(('{PUBLIC}', 9))\n"
                 "print(u.getsockname()[0])")
        baddr = run(d, b["id"], serve).get("stdout", "").strip()
        self_ok = probe(d, b["id"], {"self": [baddr, 8000]}).get("self")
        r = probe(d, a["id"], {"other": [baddr, 8000]})
        ok(baddr.startswith("100.127.") and self_ok == "open" and r.get("other") != "open",
           f"two opted-in contexts cannot reach each other ({baddr}:8000 open for itself, "
           f"{r.get('other')} for the other)", (baddr, self_ok, r))

        st, e = d.json("POST", f"/contexts/{a['id']}/pause")
        ok(st == 409 and "network" in e.get("message", ""),
           "pausing a context with a network: 409, with the reason", (st, e))

        # Deleting a context removes its namespace and veth.
        names = netns_names()
        ok(len(names) == 2, "one namespace per opted-in sandbox", names)
        links = sorted(os.path.basename(p) for p in glob.glob("/sys/class/net/sgh*"))
        st, _ = d.json("DELETE", f"/contexts/{b['id']}")
        time.sleep(1.5)
        left = [n for n in netns_names() if b["id"] in n]
        links2 = sorted(os.path.basename(p) for p in glob.glob("/sys/class/net/sgh*"))
        ok(st == 204 and not left and len(links2) == len(links) - 1,
           "deleting a context removes its namespace and its veth", (left, links, links2))

        # A restart re-adopts the opted-in session with its network.
        d.restart()
        r = probe(d, a["id"], {"public": [PUBLIC, 8080], "private": [PRIVATE, 8080]})
        st, g = d.json("GET", f"/contexts/{a['id']}")
        ok(r.get("public") == "open" and r.get("private") != "open" and g.get("internet") is True,
           "after a restart the re-adopted session has its network and its rules", (r, g))

        # A crash leaves the table and the namespace; the next start takes them over.
        for p in sh("pgrep", "-f", "--", f"--state-dir {d.dir}", check=False).stdout.split():
            os.kill(int(p), signal.SIGKILL)
        d.proc.wait()
        d.drain.join(timeout=10)
        veths = glob.glob("/sys/class/net/sgh*")
        ok(nft_table() and veths, "after a crash the rules and the running session's veth are left",
           veths)
        d._start()
        r = probe(d, a["id"], {"public": [PUBLIC, 8080], "metadata": [METADATA, 8080]})
        ok(r.get("public") == "open" and r.get("metadata") != "open",
           "the next start installs the rules again and the session works", r)
        d.stop()
        d = None
        ok(not nft_table() and not netns_names(),
           "after sandgate stops, its table and namespaces are gone", netns_names())

        # --- --egress-allow 10.213.0.0/24 only; a crash's leftovers go at start ------------
        sh("ip", "netns", "add", FAKE_NS)
        sh("ip", "link", "add", "sgh16000", "type", "veth", "peer", "name", "sgs16000")
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow", "10.213.0.0/24")
        ok(FAKE_NS not in netns_names() and not os.path.exists("/sys/class/net/sgh16000"),
           "at start, a namespace and a veth no sandbox claims (a crash's leftovers) are removed",
           (netns_names(), os.path.exists("/sys/class/net/sgh16000")))
        st, c = d.json("POST", "/contexts", {"internet": True})
        r = probe(d, c["id"], {"allowed": [ALLOWED, 8080], "public": [PUBLIC, 8080],
                                "private": [PRIVATE, 8080], "metadata": [METADATA, 8080]})
        diag(f"10.213.0.0/24 only: {r}")
        ok(r.get("allowed") == "open" and all(r.get(t) not in (None, "open") for t in
                                              ("public", "private", "metadata")),
           "--egress-allow 10.213.0.0/24: that private range is reachable, nothing else", r)
        d.stop()
        d = None

        for bad, want in (("10.0.0.0/33", "not CIDR"), ("10.1.2.3/8", "not CIDR"),
                          ("::/0", "IPv6"), ("203.0.113.0/24:0", "not CIDR")):
            r = subprocess.run([sgd.SANDGATE, "--egress-allow", bad, "--state-dir", root],
                               capture_output=True, text=True, timeout=30)
            ok(r.returncode != 0 and want in r.stderr,
               f"--egress-allow {bad}: refused at start ({r.stderr.strip()[:90]})", r.stderr)
    except Exception as e:
        ok(False, "egress", f"{type(e).__name__}: {e}\n" + ("".join(d.log[-30:]) if d else ""))
    finally:
        if d:
            d.stop()
        internet_down(server)
        shutil.rmtree(root, ignore_errors=True)


signal.alarm(900)  # never hang the suite
main()
done()
