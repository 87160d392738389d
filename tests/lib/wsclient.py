"""A small WebSocket client for tests: real frames on a plain socket, so a test
can also send what a well-behaved client never would (unmasked frames, bad
UTF-8, oversized lengths) and see exactly what the server answers."""
import base64
import hashlib
import json
import os
import socket
import struct
import uuid
from urllib.parse import urlparse

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
V1 = "v1.kernel.websocket.jupyter.org"


def handshake(url, path, headers=None, key=None):
    """Sends an upgrade request; returns (socket, status, response headers, leftover bytes)."""
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    key = key or base64.b64encode(os.urandom(16)).decode()
    h = {"Host": f"{u.hostname}:{u.port}", "Upgrade": "websocket", "Connection": "Upgrade",
         "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}
    h.update(headers or {})
    req = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()
                                               if v is not None) + "\r\n"
    s.sendall(req.encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if status == 101:
        expect = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        hdrs["_accept_ok"] = hdrs.get("sec-websocket-accept") == expect
    return s, status, hdrs, rest


def frame(opcode, payload, fin=True, mask=True, rsv=0, length=None):
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload) if length is None else length
    if n < 126:
        head = struct.pack("!BB", b0, (0x80 if mask else 0) | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, (0x80 if mask else 0) | 126, n)
    else:
        head = struct.pack("!BBQ", b0, (0x80 if mask else 0) | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


class Closed(Exception):
    def __init__(self, code, reason):
        super().__init__(f"closed {code} {reason!r}")
        self.code, self.reason = code, reason


class WS:
    def __init__(self, url, kernel_id, token, session=None, protocols=None, timeout=60):
        q = f"?session_id={session}" if session else "?"
        q += ("&" if session else "") + f"token={token}"
        h = {"Sec-WebSocket-Protocol": ", ".join(protocols) if protocols else None}
        self.sock, self.status, self.headers, self.buf = handshake(
            url, f"/api/kernels/{kernel_id}/channels{q}", h)
        if self.status != 101:
            raise RuntimeError(f"handshake: {self.status} {self.headers}")
        self.sock.settimeout(timeout)
        self.protocol = self.headers.get("sec-websocket-protocol", "")
        self.session = session or str(uuid.uuid4())
        self.closed = None

    # --- frames ---
    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self):
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        assert not b1 & 0x80, "server frames must not be masked"
        return b0 & 0x0F, bool(b0 & 0x80), self._read(n)

    def recv_message(self):
        """A data message (opcode, bytes); answers pings; raises Closed on close."""
        while True:
            op, fin, data = self.recv_frame()
            if op == 9:
                self.sock.sendall(frame(10, data))
                continue
            if op == 10:
                continue
            if op == 8:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                self.closed = code
                raise Closed(code, data[2:].decode(errors="replace"))
            assert fin, "sandgate sends whole messages"
            return op, data

    def send_raw(self, data):
        self.sock.sendall(data)

    # --- Jupyter messages ---
    def send(self, channel, msg_type, content, buffers=(), msg_id=None, parent=None,
             metadata=None):
        header = {"msg_id": msg_id or uuid.uuid4().hex, "msg_type": msg_type,
                  "session": self.session, "username": "test", "version": "5.3",
                  "date": "2026-11-22T00:00:00.000000Z"}
        if self.protocol == V1:
            meta = metadata or {}
            parts = [channel.encode()] + [json.dumps(p).encode() for p in
                                          (header, parent or {}, meta, content)] + list(buffers)
            n = len(parts) + 1
            offs, pos = [], 8 * (1 + n)
            for p in parts:
                offs.append(pos)
                pos += len(p)
            offs.append(pos)
            body = struct.pack("<Q", n) + b"".join(struct.pack("<Q", o) for o in offs)
            self.sock.sendall(frame(2, body + b"".join(parts)))
        elif buffers:
            j = json.dumps({"header": header, "parent_header": parent or {},
                            "metadata": metadata or {},
                            "content": content, "channel": channel}).encode()
            bufs = [j] + list(buffers)
            offs, pos = [], 4 * (len(bufs) + 1)
            for b in bufs:
                offs.append(pos)
                pos += len(b)
            body = struct.pack("!I", len(bufs)) + b"".join(struct.pack("!I", o) for o in offs)
            self.sock.sendall(frame(2, body + b"".join(bufs)))
        else:
            self.sock.sendall(frame(1, json.dumps(
                {"header": header, "parent_header": parent or {}, "metadata": metadata or {},
                 "content": content, "channel": channel}).encode()))
        return header["msg_id"]

    def recv(self):
        """The next Jupyter message as a dict with channel and buffers."""
        op, data = self.recv_message()
        if self.protocol == V1:
            assert op == 2, "v1 messages are binary"
            n = struct.unpack_from("<Q", data)[0]
            offs = list(struct.unpack_from(f"<{n}Q", data, 8))
            parts = [data[offs[i]:offs[i + 1]] for i in range(n - 1)]
            msg = {"channel": parts[0].decode(), "header": json.loads(parts[1]),
                   "parent_header": json.loads(parts[2]), "metadata": json.loads(parts[3]),
                   "content": json.loads(parts[4]), "buffers": parts[5:]}
            return msg
        if op == 1:
            return json.loads(data)
        n = struct.unpack_from("!I", data)[0]
        offs = list(struct.unpack_from(f"!{n}I", data, 4)) + [len(data)]
        msg = json.loads(data[offs[0]:offs[1]])
        msg["buffers"] = [data[offs[i]:offs[i + 1]] for i in range(1, n)]
        return msg

    def until(self, pred, limit=500):
        """Messages up to and including the first that satisfies pred."""
        seen = []
        for _ in range(limit):
            m = self.recv()
            seen.append(m)
            if pred(m):
                return seen
        raise AssertionError("no matching message in %d" % limit)

    def until_done(self, mid):
        """Messages up to both the shell reply to request mid and the kernel's
        idle status for it (shell and iopub are separate sockets: either can
        come first)."""
        seen, replied, idle = [], False, False
        while not (replied and idle):
            m = self.recv()
            seen.append(m)
            if m["parent_header"].get("msg_id") != mid:
                continue
            replied |= m["channel"] == "shell"
            idle |= (m["header"]["msg_type"] == "status" and
                     m["content"]["execution_state"] == "idle")
        return seen

    def execute(self, code, allow_stdin=False):
        """Runs code; returns (reply, iopub messages of this request).
        stop_on_error is off: with it, ipykernel answers "aborted" to a request
        that arrives just after one that failed (or was interrupted)."""
        mid = self.send("shell", "execute_request",
                        {"code": code, "silent": False, "store_history": True,
                         "user_expressions": {}, "allow_stdin": allow_stdin,
                         "stop_on_error": False})
        reply, iopub, idle = None, [], False
        while reply is None or not idle:
            m = self.recv()
            if m["parent_header"].get("msg_id") != mid:
                continue
            if m["channel"] == "shell":
                reply = m
            elif m["channel"] == "iopub":
                iopub.append(m)
                if m["header"]["msg_type"] == "status" and \
                        m["content"]["execution_state"] == "idle":
                    idle = True
        return reply, iopub

    def close(self, code=1000):
        try:
            self.sock.sendall(frame(8, struct.pack("!H", code)))
            while True:
                self.recv_frame()
        except Exception:
            pass
        self.sock.close()
