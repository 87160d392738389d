#!/usr/bin/python3
"""What the egress proxy costs an HTTPS request, and whether one tenant's
heavy egress slows another's.

One sandgate (runsc) with --egress-allow, --egress-dns and the test
"internet" of tests/kernelmgr/egress/test_egress_names.py (a DNS server, web
servers with a test CA, in a network namespace).  Three contexts fetch
https://api.example.test/ from inside their sandboxes with curl:

  direct    no rules of their own: nftables forwards the connection;
  names     allowOut the name, denyOut all: the proxy reads the SNI and
            passes the TLS through to where the name resolves;
  headers   a rule sets a header: the proxy opens the TLS (sandgate's CA),
            sets it, and opens its own to the server.

Each does --requests new connections (curl's time_total: connect, TLS,
request, answer) and downloads --mib MiB three times (curl's
speed_download); reported as medians and as ratios to direct, measured in
the same run.  Then a second tenant's context runs 4 downloads at once
through the proxy (the headers path, the costliest) in a loop while the
first tenant's headers context measures its requests again: the ratio
during / before is what the noisy tenant costs the quiet one.

usage: bench/egress_proxy.py [--requests N] [--mib M] [--out FILE]
  Run as root (runsc, nftables, namespaces).  SG_BUILDDIR selects the build.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "kernelmgr", "egress"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
import inet  # noqa: E402
import sgd  # noqa: E402
import test_egress_names as net  # noqa: E402
from sgd import Daemon  # noqa: E402

URL = "https://api.example.test/"


def context(d, token, rules, ca):
    st, c = d.json("POST", "/contexts", {"internet": True, "network": rules}, token=token)
    if st != 201:
        raise SystemExit(f"POST /contexts: {st} {c}")
    # The system's CAs and the test's: every path's curl reads a bundle of
    # the same size (the headers path's is the system's and sandgate's).
    net.execute(d, c["id"], f"open('/tmp/all.pem', 'w').write(open('/etc/ssl/certs/"
                            f"ca-certificates.crt').read() + {ca!r})", token)
    return c["id"]


def curl(cacert):
    return f"curl -sS --max-time 60 {'--cacert /tmp/all.pem ' if cacert else ''}"


def latencies(d, token, cid, cacert, n):
    """n new connections' time_total, in ms."""
    rc, out = net.shell(d, cid, f"for i in $(seq {n + 3}); do {curl(cacert)} -o /dev/null "
                                f"-w '%{{time_total}}\\n' {URL}; done", token)
    times = [float(x) * 1000 for x in out.split()[3:]]  # the first three warm up
    if rc != 0 or len(times) != n:
        raise SystemExit(f"latency run failed: {rc} {out[-400:]}")
    return times


def throughput(d, token, cid, cacert):
    """MiB/s of three downloads of /big."""
    rc, out = net.shell(d, cid, f"for i in 1 2 3; do {curl(cacert)} -o /dev/null "
                                f"-w '%{{speed_download}}\\n' {URL}big; done", token)
    speeds = [float(x) / (1 << 20) for x in out.split()]
    if rc != 0 or len(speeds) != 3:
        raise SystemExit(f"throughput run failed: {rc} {out[-400:]}")
    return speeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--out")
    args = ap.parse_args()
    held = inet.ready(["nft", "haproxy", "dnsmasq", "openssl"], net.HOST_SIDE, net.ROUTES)
    if not held:
        raise SystemExit("this machine cannot run the egress test network")
    tmp = tempfile.mkdtemp(prefix="sgb-egress-")
    keys_dir, keys_file, _ = sgd.tenants("sgb-egress-")
    keys = {name: sgd.add_key(keys_file, name, "--internet") for name in ("quiet", "noisy")}
    procs = d = None
    try:
        with open(net.make_ca(tmp)) as f:
            ca = f.read()
        procs = net.internet_up(tmp)
        with open(f"{tmp}/www/big", "wb") as f:
            f.write(os.urandom(args.mib << 20))
        time.sleep(0.5)
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--egress-allow",
                   "198.51.100.0/24", "--egress-dns", net.DNS, "--egress-ca-file",
                   f"{tmp}/ca.pem", "--keys-file", keys_file)
        q = keys["quiet"]
        header = {"api.example.test": [{"transform": {"headers": {"X-Bench": "1"}}}]}
        paths = {
            "direct": (context(d, q, None, ca), True),
            "names": (context(d, q, {"allowOut": ["api.example.test"],
                                     "denyOut": ["0.0.0.0/0"]}, ca), True),
            "headers": (context(d, q, {"rules": header}, ca), False),
        }
        lat, thr = {}, {}
        for name, (cid, cacert) in paths.items():
            lat[name] = latencies(d, q, cid, cacert, args.requests)
            thr[name] = throughput(d, q, cid, cacert)
        # A noisy neighbour: 4 downloads at once, in a loop, through the proxy.
        loud = context(d, keys["noisy"], {"rules": header}, ca)
        loop = (f"for j in 1 2 3 4; do (while [ ! -e /tmp/stop ]; do curl -sS -o /dev/null "
                f"{URL}big; done) & done; wait")
        st, _ = d.json("POST", f"/contexts/{loud}/commands",
                       {"cmd": loop, "background": True}, token=keys["noisy"])
        if st not in (200, 201):
            raise SystemExit(f"the noisy tenant's command: {st}")
        time.sleep(3)
        during = latencies(d, q, paths["headers"][0], False, args.requests)
        net.execute(d, loud, "open('/tmp/stop', 'w')", keys["noisy"])
    finally:
        if d:
            d.stop()
        net.internet_down(procs)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(keys_dir, ignore_errors=True)
        held.close()

    med = {k: statistics.median(v) for k, v in lat.items()}
    mbs = {k: statistics.median(v) for k, v in thr.items()}
    day = datetime.date.today().isoformat()
    lines = [f"# Egress proxy: HTTPS through it, against a direct connection ({day})", "",
             f"`bench/egress_proxy.py --requests {args.requests} --mib {args.mib}` on "
             f"{os.uname().nodename} ({os.cpu_count()} CPUs), runsc, real curl in the sandbox.",
             "", "| path | request p50 (ms) | p90 (ms) | vs direct | download MiB/s | vs direct |",
             "| --- | --- | --- | --- | --- | --- |"]
    for k in lat:
        p90 = statistics.quantiles(lat[k], n=10)[-1]
        lines.append(f"| {k} | {med[k]:.1f} | {p90:.1f} | {med[k] / med['direct']:.2f} | "
                     f"{mbs[k]:.0f} | {mbs[k] / mbs['direct']:.2f} |")
    m_during = statistics.median(during)
    lines += ["", "A second tenant downloading 4 files at once through the proxy, in a loop:",
              "", "| the first tenant's headers path | request p50 (ms) | vs alone |",
              "| --- | --- | --- |",
              f"| alone | {med['headers']:.1f} | 1.00 |",
              f"| beside the noisy tenant | {m_during:.1f} | {m_during / med['headers']:.2f} |",
              "",
              "Each request is a new curl and a new TLS connection; every path's curl reads a "
              "CA bundle of the same size (the system's, about 140 certificates: most of a "
              "request's time is that, in gVisor). `names`: the proxy reads the SNI and copies "
              "the TLS through; `headers`: it terminates TLS with sandgate's CA, sets the "
              "header and opens TLS to the server (a second handshake). The noisy tenant's "
              "four downloads keep this machine's CPUs busy (TLS on both sides of the proxy, "
              "curl, the server): what the quiet tenant loses is CPU, which the proxy shares "
              "with everything else here (one HAProxy, two threads).", ""]
    text = "\n".join(lines)
    print(text)
    out = args.out or os.path.join(HERE, "results", f"{day}-egress-proxy.md")
    with open(out, "w") as f:
        f.write(text)
    print(json.dumps({"written": out}))


if __name__ == "__main__":
    main()
