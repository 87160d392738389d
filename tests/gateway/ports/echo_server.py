"""A server for test_ports.py to reach inside a sandbox.
usage: echo_server.py PORT [HOST]   (HOST 127.0.0.1; "::1" for IPv6 only)
  ANY /echo...   200 JSON {method, path (as received), headers, body}
  /status/N      status N
  /big           5 MiB: bytes 0..255 over and over
  /stream        "first\\n", then "second\\n" once /tmp/go exists (POST /go)
  /go            creates /tmp/go
  /hold          "released" once /tmp/release exists"""
import json
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo", "yes")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        p = self.path
        if p.startswith("/status/"):
            self.reply(int(p.split("/")[2]), b"status", "text/plain")
        elif p == "/big":
            self.reply(200, bytes(range(256)) * 20480, "application/octet-stream")
        elif p == "/go":
            open("/tmp/go", "w").close()
            self.reply(200, b"go", "text/plain")
        elif p == "/hold":
            for _ in range(6000):
                if os.path.exists("/tmp/release"):
                    break
                time.sleep(0.01)
            self.reply(200, b"released", "text/plain")
        elif p == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"first\n")
            self.wfile.flush()
            for _ in range(6000):
                if os.path.exists("/tmp/go"):
                    break
                time.sleep(0.01)
            self.wfile.write(b"second\n")
        else:
            doc = {"method": self.command, "path": p, "headers": dict(self.headers.items()),
                   "body": body.decode("latin-1")}
            self.reply(200, json.dumps(doc).encode(), extra=[("Set-Cookie", "a=1")])

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6 if sys.argv[2:] == ["::1"] else socket.AF_INET


where = (sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1", int(sys.argv[1]))
Server(where, Handler).serve_forever()
