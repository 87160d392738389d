#!/usr/bin/python3
"""File transfer throughput: a 256 MiB file up and down through sandgate,
beside curl to a plain static file server on loopback.

Through sandgate (one context, real runsc):
  * /tmp, by ?path=/tmp/big.bin: streamed through a `runsc exec` of
    sandgate-init --fs inside the sandbox (gateway/files/sbfs.c);
  * the workspace by ?path=/home/user/big.bin: the same path, into the
    workspace's file system;
  * the workspace by its URL path (files/big.bin): the host-side API
    (gateway/files/files.c, openat2 beneath the workspace; downloads by sendfile).
The floor: the same file by curl to a static server on 127.0.0.1 — python3's
http.server for GET, and the same server with a PUT handler that streams
the body to disk for uploads.  Every transfer is curl's, timed by curl
(time_total); each sandgate transfer comes right after the floor's same
transfer, and the table gives the medians of --runs pairs, so a ratio
compares measurements taken moments apart.

usage: bench/files.py [--runs N] [--mib 256] [--out FILE]
"""
import argparse
import http.server
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "lib")]
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
os.environ.setdefault("SANDGATE_INIT", os.path.join(os.environ["SG_BUILDDIR"], "sandgate-init"))
from sgd import Daemon, TOKEN  # noqa: E402


class PutHandler(http.server.SimpleHTTPRequestHandler):
    """GET from the directory (http.server's own); PUT streams to a file."""

    def do_PUT(self):
        left = int(self.headers["Content-Length"])
        with open(os.path.join(self.directory, "put.bin"), "wb") as f:
            while left:
                b = self.rfile.read(min(left, 1 << 20))
                if not b:
                    break
                f.write(b)
                left -= len(b)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(directory, port):
    handler = lambda *a, **kw: PutHandler(*a, directory=directory, **kw)  # noqa: E731
    http.server.ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(*args):
    """curl's time_total for one transfer (seconds); fails on an HTTP error."""
    r = subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{time_total}",
                        *args], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"curl {' '.join(args)}: {r.stderr}")
    return float(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--out")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve[0], int(a.serve[1]))
        return
    size = a.mib << 20
    tmp = tempfile.mkdtemp(prefix="sg-bench-files-")
    os.chmod(tmp, 0o711)
    big = os.path.join(tmp, "big.bin")
    with open(big, "wb") as f:
        for _ in range(a.mib):
            f.write(os.urandom(1 << 20))
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", tmp, str(port)])
    d = Daemon("--pool-size", "0", "--tmp-size", str(a.mib * 2 + 64),
               "--workspace-size", str(a.mib * 8 + 256), "--max-upload", str(size + (1 << 20)))
    rows = []
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        status, ctx = d.json("POST", "/contexts", {})
        base = f"{d.url}/contexts/{ctx['id']}/files"
        auth = ["-H", "Authorization: Bearer " + TOKEN]
        static = f"http://127.0.0.1:{port}"
        targets = [("/tmp, ?path=/tmp/big.bin", base + "?path=/tmp/big.bin"),
                   ("workspace, ?path=/home/user/big.bin", base + "?path=/home/user/big.bin"),
                   ("workspace, files/big.bin (host side)", base + "/big.bin")]
        for name, url in targets:
            # Each transfer right after the floor's: on a shared machine
            # the load drifts, and a pair sees the same.
            t = {"up": [], "down": [], "up_floor": [], "down_floor": []}
            for _ in range(a.runs):
                t["up_floor"].append(curl("-T", big, static + "/put.bin"))
                t["up"].append(curl(*auth, "-T", big, url))
                t["down_floor"].append(curl(static + "/big.bin"))
                t["down"].append(curl(*auth, url))
            rows.append((name, {k: statistics.median(v) for k, v in t.items()}))
    finally:
        d.stop()
        server.kill()
        server.wait()
        os.unlink(big)
        for n in os.listdir(tmp):
            os.unlink(os.path.join(tmp, n))
        os.rmdir(tmp)

    mb = size / 1e6
    lines = [f"{a.mib} MiB, median of {a.runs} curl runs each, each run right after the "
             "static server's; MB/s (10^6 bytes); ratio = sandgate's throughput / the static "
             "server's in the same runs", "",
             "| transfer | upload MB/s | floor | ratio | download MB/s | floor | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, m in rows:
        lines.append(f"| sandgate: {name} | {mb / m['up']:.0f} | {mb / m['up_floor']:.0f} | "
                     f"{m['up_floor'] / m['up']:.2f} | {mb / m['down']:.0f} | "
                     f"{mb / m['down_floor']:.0f} | {m['down_floor'] / m['down']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
