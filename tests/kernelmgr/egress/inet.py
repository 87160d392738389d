"""The egress tests' own "internet": what test_egress.py and
test_egress_names.py share."""
import base64
import fcntl
import hashlib
import io
import ipaddress
import os
import re
import shutil
import subprocess
import zipfile

from tap import ok


def ready(tools, host_side, routes):
    """Whether this machine can run an egress test — root, the tools, the
    test's ranges free (each failure a failed check) — as the lock the test
    holds, or None.  The table, the sandgate-* namespaces and the sgh* veths
    are machine-wide names, as are the test's address ranges: one egress
    test at a time (until the file is closed, or the process ends)."""
    missing = [t for t in tools if not shutil.which(t)]
    if os.geteuid() != 0 or missing:
        ok(False, f"runs as root with {', '.join(tools)} (scripts/deps.sh installs them)",
           missing)
        return None
    f = open("/run/sandgate-test-egress.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    busy = ranges_free(host_side, routes)
    if busy:
        ok(False, "the test's own internet does not collide with this machine's network", busy)
        f.close()
        return None
    return f


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


def ranges_free(host_side, routes):
    """None, or why the test's ranges (host_side's /24, routes) would shadow
    something this machine uses (a route of its own, its resolver)."""
    mine = [ipaddress.ip_network(f"{host_side}/24", strict=False)] + \
        [ipaddress.ip_network(r) for r in routes]
    for line in sh("ip", "-4", "route", "show").stdout.splitlines():
        dst = line.split()[0]
        if dst != "default" and any(ipaddress.ip_network(dst, strict=False).overlaps(m)
                                    for m in mine):
            return f"this machine routes {dst} already"
    with open("/etc/resolv.conf") as f:
        for ns in re.findall(r"^nameserver\s+(\S+)", f.read(), re.M):
            if ":" not in ns and any(ipaddress.ip_address(ns) in m for m in mine):
                return f"this machine's resolver {ns} is in the test's ranges"
    return None
