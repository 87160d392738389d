"""The Jupyter Server kernels API and WebSocket channels, at the wire level:
REST models and errors, both WebSocket formats, routing with several
clients, stdin, binary buffers, replay after a reconnect, interrupt, restart,
sessions, and bad input (handshakes, frames, messages) that must close only
the offending connection."""
import json
import re
import socket
import struct
import time

from sgd import Daemon, TOKEN, wait_for
from tap import ok, diag, done
from wsclient import WS, V1, Closed, frame, handshake

MAX_WS = 65536
d = Daemon("--pool-size", "1", "--max-ws-message", str(MAX_WS))
AUTH = {"Authorization": "token " + TOKEN}


def jget(path, **kw):
    return d.json("GET", path, **kw)


def msg_types(msgs):
    return [m["header"]["msg_type"] for m in msgs]


def stream_text(msgs):
    return "".join(m["content"]["text"] for m in msgs if m["header"]["msg_type"] == "stream")


def result_text(msgs):
    for m in msgs:
        if m["header"]["msg_type"] == "execute_result":
            return m["content"]["data"]["text/plain"]
    return None


def still_serving(what):
    st, body = jget("/health")
    ok(st == 200 and body["status"] == "ok", f"the daemon still serves after {what}")


try:
    # --- REST -----------------------------------------------------------------------
    st, api = jget("/api")
    ok(st == 200 and "version" in api, "GET /api gives a version", api)
    st, specs = jget("/api/kernelspecs")
    py = specs.get("kernelspecs", {}).get("python3", {}) if st == 200 else {}
    ok(st == 200 and specs["default"] == "python3" and py["spec"]["language"] == "python"
       and py["spec"]["display_name"], "GET /api/kernelspecs: python3 is the default", specs)
    logos = {k: v for k, v in py.get("resources", {}).items() if k.startswith("logo-")}
    ok(len(logos) > 0, "kernelspec resources list the logos", py.get("resources"))
    for name, url in list(logos.items())[:1]:
        st, h, body = d.request("GET", url)
        ok(st == 200 and h["Content-Type"].startswith("image/") and len(body) > 100,
           f"the {name} resource is served ({len(body)} bytes)", (st, dict(h)))
    st, h, _ = d.request("GET", "/kernelspecs/python3/kernel.json")
    ok(st == 404, "only resource files are served from a kernelspec directory", st)
    st, h, _ = d.request("GET", "/kernelspecs/python3/..%2F..%2F..%2Fetc%2Fpasswd")
    ok(st == 404, "no path traversal through kernelspec resources", st)
    st, body = jget("/api/kernelspecs/python3")
    ok(st == 200 and body["name"] == "python3", "GET /api/kernelspecs/python3", body)
    st, body = jget("/api/kernelspecs/cobol")
    ok(st == 404 and "cobol" in body["message"] and body["reason"] == "Not Found",
       "an unknown kernelspec is 404 with jupyter_server's error body", body)

    st, body = jget("/api/kernels", token=None)
    ok(st == 401, "no token: 401", (st, body))
    st, _, _ = d.request("GET", "/api/kernels", token=None, headers=AUTH)
    ok(st == 200, "'Authorization: token T' is accepted", st)
    st, _, _ = d.request("GET", "/api/kernels?token=" + TOKEN, token=None)
    ok(st == 200, "?token=T is accepted", st)
    st, _, _ = d.request("GET", "/api/kernels?token=wrong", token=None)
    ok(st == 401, "a wrong ?token= is refused", st)

    st, h, raw = d.request("POST", "/api/kernels", {"name": "python3"})
    k = json.loads(raw) if st == 201 else {}
    kid = k.get("id", "")
    ok(st == 201 and re.fullmatch(r"[0-9a-f-]{36}", kid) and k["name"] == "python3"
       and k["execution_state"] == "idle" and k["connections"] == 0
       and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", k["last_activity"]),
       "POST /api/kernels: 201 with a ready kernel's model", (st, raw))
    ok(h.get("Location") == f"/api/kernels/{kid}", "with its Location", dict(h))
    st, body = d.json("POST", "/api/kernels", {"name": "cobol"})
    ok(st == 404 and "cobol" in body["message"], "an unknown kernel name: 404", body)
    st, body = d.json("POST", "/api/kernels", raw=b"{nope")
    ok(st == 400 and "JSON" in body["message"], "a malformed body: 400", body)
    st, body = d.json("POST", "/api/kernels", {"name": 3})
    ok(st == 400, "a name that is not a string: 400", body)
    st, h, data = d.request("PUT", "/api/kernels", {})
    body = json.loads(data)
    ok(st == 405 and h.get("Allow") == "GET, HEAD, POST" and
       body.get("reason") == "Method Not Allowed" and body.get("error") == "method_not_allowed",
       "PUT /api/kernels: 405 with Allow, in jupyter_server's error shape", (st, dict(h), body))
    st, body = jget("/api/kernels/" + "0" * 36)
    ok(st == 404 and body["message"] == "Kernel does not exist: " + "0" * 36 and
       body["reason"] == "Not Found", "an unknown kernel: 404 with jupyter_server's message", body)
    st, body = d.json("POST", "/api/kernels/" + "0" * 36 + "/restart")
    ok(st == 404 and body["message"] == "Kernel does not exist: " + "0" * 36,
       "restarting an unknown kernel: the same 404", body)
    st, lst = jget("/api/kernels")
    ok(st == 200 and kid in [x["id"] for x in lst], "GET /api/kernels lists it", lst)
    st, ctxs = jget("/contexts")
    ok(kid in [c["id"] for c in ctxs], "the same session is a context of the E2B API", ctxs)
    st, res = d.json("POST", "/execute", {"code": "kernel_var = 5; kernel_var * 2",
                                          "context_id": kid},
                     headers={"Accept": "application/json"})
    ok(st == 200 and res["results"][0]["text"] == "10", "POST /execute runs in that kernel", res)

    # --- WebSocket, default format ------------------------------------------------------
    ws = WS(d.url, kid, TOKEN, session="sess-a")
    ok(ws.headers.get("_accept_ok") and ws.protocol == "",
       "handshake: correct Sec-WebSocket-Accept, default format without a subprotocol",
       ws.headers)
    st, model = jget("/api/kernels/" + kid)
    ok(model["connections"] == 1, "the kernel model counts the connection", model)
    mid = ws.send("shell", "kernel_info_request", {})
    msgs = ws.until(lambda m: m["channel"] == "shell")
    rep = msgs[-1]
    ok(rep["header"]["msg_type"] == "kernel_info_reply" and rep["parent_header"]["msg_id"] == mid
       and rep["content"]["language_info"]["name"] == "python" and rep["msg_type"] ==
       "kernel_info_reply", "kernel_info_request -> kernel_info_reply with its parent", rep)
    reply, io = ws.execute("print('hello')")
    ok(reply["content"]["status"] == "ok" and stream_text(io) == "hello\n",
       "execute: stream output on iopub, reply on shell", msg_types(io))
    ok(msg_types(io)[0] == "status" and "execute_input" in msg_types(io),
       "iopub carries status busy, execute_input, ..., idle", msg_types(io))
    reply, io = ws.execute("kernel_var * 7")
    ok(result_text(io) == "35", "variables set through POST /execute are there", result_text(io))
    reply, io = ws.execute("1/0")
    errs = [m for m in io if m["header"]["msg_type"] == "error"]
    ok(reply["content"]["status"] == "error" and errs and errs[0]["content"]["ename"] ==
       "ZeroDivisionError", "an exception: error on iopub, status error on shell")
    reply, io = ws.execute("from IPython.display import display, HTML\n"
                           "display(HTML('<b>hi</b>'))")
    disp = [m for m in io if m["header"]["msg_type"] == "display_data"]
    ok(disp and disp[0]["content"]["data"]["text/html"] == "<b>hi</b>",
       "display_data with text/html", msg_types(io))

    # stdin
    mid = ws.send("shell", "execute_request",
                  {"code": "name = input('name? '); print('hi', name)", "silent": False,
                   "store_history": True, "user_expressions": {}, "allow_stdin": True,
                   "stop_on_error": False})
    msgs = ws.until(lambda m: m["channel"] == "stdin")
    req = msgs[-1]
    ok(req["header"]["msg_type"] == "input_request" and req["content"]["prompt"] == "name? "
       and req["parent_header"]["msg_id"] == mid, "input() reaches the client on stdin", req)
    ws.send("stdin", "input_reply", {"value": "sandgate"}, parent=req["header"])
    msgs = ws.until_done(mid)
    rep = [m for m in msgs if m["channel"] == "shell"][-1]
    ok("hi sandgate\n" in stream_text(msgs) and rep["content"]["status"] == "ok",
       "the input_reply is the value input() returns", stream_text(msgs))

    # binary buffers, both directions, through a comm that echoes them
    reply, io = ws.execute(
        "def _echo(comm, msg):\n"
        "    @comm.on_msg\n"
        "    def _r(m):\n"
        "        comm.send({'echo': m['content']['data']}, buffers=m['buffers'])\n"
        "get_ipython().kernel.comm_manager.register_target('echo', _echo)")
    ok(reply["content"]["status"] == "ok", "a comm target that echoes buffers", reply["content"])

    def comm_echo(w, comm_id):
        w.send("shell", "comm_open", {"comm_id": comm_id, "target_name": "echo", "data": {}})
        blob = bytes(range(256)) * 40
        w.send("shell", "comm_msg", {"comm_id": comm_id, "data": {"x": 1}},
               buffers=[b"\x00\x01binary", blob])
        msgs = w.until(lambda m: m["channel"] == "iopub" and m["header"]["msg_type"] ==
                       "comm_msg" and m["content"]["comm_id"] == comm_id)
        m = msgs[-1]
        return m["content"]["data"] == {"echo": {"x": 1}} and \
            [bytes(b) for b in m["buffers"]] == [b"\x00\x01binary", blob], m

    good, m = comm_echo(ws, "c-default")
    ok(good, "default format: binary buffers go to the kernel and come back",
       {k: v for k, v in m.items() if k != "buffers"})

    # --- v1 subprotocol --------------------------------------------------------------
    v1 = WS(d.url, kid, TOKEN, session="sess-v1", protocols=["foo", V1])
    ok(v1.protocol == V1, "a client offering v1.kernel.websocket.jupyter.org gets it",
       v1.headers)
    reply, io = v1.execute("6 * 7")
    ok(result_text(io) == "42" and reply["channel"] == "shell",
       "v1: execute_result and reply decoded from binary frames", msg_types(io))
    good, m = comm_echo(v1, "c-v1")
    ok(good, "v1: binary buffers both ways", {k: v for k, v in m.items() if k != "buffers"})
    other = WS(d.url, kid, TOKEN, session="sess-other", protocols=["foo.bar"])
    ok(other.protocol == "", "an unknown subprotocol only: the default format", other.headers)
    other.close()

    # --- two clients on one kernel -----------------------------------------------------
    mid_a = ws.send("shell", "execute_request",
                    {"code": "print('from a')", "silent": False, "store_history": True,
                     "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})
    got_a = ws.until(lambda m: m["channel"] == "shell")
    ok(got_a[-1]["parent_header"]["msg_id"] == mid_a, "client A gets its own reply")
    seen_b = v1.until(lambda m: m["channel"] == "iopub" and m["header"]["msg_type"] == "status"
                      and m["content"]["execution_state"] == "idle"
                      and m["parent_header"].get("msg_id") == mid_a)
    ok("from a\n" in stream_text(seen_b) and all(m["channel"] == "iopub" for m in seen_b),
       "client B sees A's iopub (a broadcast) but not A's reply", msg_types(seen_b))
    reply_b, _ = v1.execute("'from b'")
    ok(reply_b["content"]["status"] == "ok", "client B gets its own reply")
    v1.close()

    # --- interrupt ------------------------------------------------------------------
    mid = ws.send("shell", "execute_request",
                  {"code": "import time\nwhile True: time.sleep(0.1)", "silent": False,
                   "store_history": True, "user_expressions": {}, "allow_stdin": False,
                   "stop_on_error": False})
    ws.until(lambda m: m["parent_header"].get("msg_id") == mid and
             m["header"]["msg_type"] == "execute_input")  # the kernel runs the cell
    st, _, _ = d.request("POST", f"/api/kernels/{kid}/interrupt")
    msgs = ws.until(lambda m: m["channel"] == "shell" and m["parent_header"]["msg_id"] == mid)
    ok(st == 204 and msgs[-1]["content"]["status"] == "error" and
       msgs[-1]["content"]["ename"] == "KeyboardInterrupt",
       "POST .../interrupt stops a running loop (KeyboardInterrupt)", msgs[-1]["content"])

    # --- replay after a reconnect --------------------------------------------------------
    mid = ws.send("shell", "execute_request",
                  {"code": "import time; time.sleep(5); print('while away')", "silent": False,
                   "store_history": True, "user_expressions": {}, "allow_stdin": False,
                   "stop_on_error": False})
    ws.until(lambda m: m["parent_header"].get("msg_id") == mid and
             m["header"]["msg_type"] == "execute_input")  # it runs: sandgate has it
    ws.sock.close()  # abrupt: no close frame
    for _ in range(40):  # the server notices long before the output comes
        if jget("/api/kernels/" + kid)[1]["connections"] == 0:
            break
        time.sleep(0.1)
    ok(jget("/api/kernels/" + kid)[1]["connections"] == 0,
       "an abrupt disconnect is noticed at once")
    # the cell ends while nobody listens
    wait_for(lambda: jget("/api/kernels/" + kid)[1]["execution_state"] == "idle", 30)
    ws = WS(d.url, kid, TOKEN, session="sess-a")
    msgs = ws.until_done(mid)
    ok("while away\n" in stream_text(msgs),
       "output made while disconnected is replayed to the same session_id", msg_types(msgs))
    ws.sock.close()
    d.request("POST", "/execute", {"code": "print('for nobody')", "context_id": kid})
    time.sleep(1)
    ws = WS(d.url, kid, TOKEN, session="sess-new")
    reply, io = ws.execute("print('fresh')")
    ok(stream_text(io) == "fresh\n", "another session_id gets no replay of someone else's")

    # --- restart -------------------------------------------------------------------
    st, body = d.json("POST", f"/api/kernels/{kid}/restart")
    ok(st == 200 and body["id"] == kid and body["execution_state"] in ("idle", "busy"),
       "POST .../restart: 200 with the model once the new kernel is ready", (st, body))
    msgs = ws.until(lambda m: m["header"]["msg_type"] == "status" and
                    m["content"]["execution_state"] == "restarting")
    ok(True, "the connected client is told 'restarting'")
    reply, io = ws.execute("kernel_var")
    errs = [m["content"]["ename"] for m in io if m["header"]["msg_type"] == "error"]
    ok(errs == ["NameError"], "after restart the variables are gone (same connection)", errs)

    # --- sessions ----------------------------------------------------------------------
    st, s = d.json("POST", "/api/sessions", {"path": "work/nb.ipynb", "name": "nb.ipynb",
                                             "type": "notebook", "kernel": {"name": "python3"}})
    sid = s.get("id") if st == 201 else None
    ok(st == 201 and s["kernel"]["name"] == "python3" and s["path"] == "work/nb.ipynb"
       and s["notebook"]["path"] == "work/nb.ipynb", "POST /api/sessions starts a kernel", s)
    st, again = d.json("POST", "/api/sessions", {"path": "work/nb.ipynb", "type": "notebook",
                                                 "kernel": {"name": "python3"}})
    ok(st == 201 and again["id"] == sid, "the same path gives the same session", again)
    st, lst = jget("/api/sessions")
    ok([x["id"] for x in lst] == [sid], "GET /api/sessions lists it", lst)
    st, s2 = d.json("PATCH", f"/api/sessions/{sid}", {"path": "work/renamed.ipynb"})
    ok(st == 200 and s2["path"] == "work/renamed.ipynb" and s2["kernel"]["id"] ==
       s["kernel"]["id"], "PATCH renames, same kernel", s2)
    st, s3 = d.json("PATCH", f"/api/sessions/{sid}", {"kernel": {"id": kid}})
    ok(st == 200 and s3["kernel"]["id"] == kid, "PATCH switches to an existing kernel", s3)
    st, body = d.json("PATCH", f"/api/sessions/{sid}", {"kernel": "python3"})
    ok(st == 400, "a kernel that is not an object: 400", body)
    st, body = d.json("POST", "/api/sessions", {"path": "x.ipynb", "kernel": {"id": "nope"}})
    ok(st == 404, "a session on an unknown kernel id: 404", body)
    st, body = jget("/api/sessions/nope")
    ok(st == 404 and "nope" in body["message"], "an unknown session: 404", body)

    # --- bad input on the WebSocket endpoint --------------------------------------------
    path = f"/api/kernels/{kid}/channels?token={TOKEN}"
    st, h, body = d.request("GET", f"/api/kernels/{kid}/channels")
    ok(st == 400 and b"Upgrade" in body, "a plain GET of the channels: 400, says why", body)
    s_, st, h, _ = handshake(d.url, path, {"Sec-WebSocket-Version": "8"})
    ok(st == 426 and h.get("sec-websocket-version") == "13",
       "an old WebSocket version: 426 naming 13", (st, h))
    s_.close()
    s_, st, h, _ = handshake(d.url, path, key="c2hvcnQ=")
    ok(st == 400, "a malformed Sec-WebSocket-Key: 400", st)
    s_.close()
    s_, st, h, _ = handshake(d.url, path.replace(kid, "0" * 36))
    ok(st == 404, "the channels of an unknown kernel: 404", st)
    s_.close()
    s_, st, h, _ = handshake(d.url, f"/api/kernels/{kid}/channels")
    ok(st == 401, "the channels need the token too", st)
    s_.close()

    def expect_close(send, code, what):
        w = WS(d.url, kid, TOKEN)
        w.send_raw(send)
        try:
            while True:
                w.recv_message()
        except Closed as c:
            ok(c.code == code, f"{what}: closed with {code}", (c.code, c.reason))
        except Exception as e:  # noqa: BLE001 - report what happened instead
            ok(False, f"{what}: closed with {code}", repr(e))
        w.sock.close()

    expect_close(frame(1, b'{"a": 1}', mask=False), 1002, "an unmasked client frame")
    expect_close(frame(1, b"x", rsv=4), 1002, "a frame with an RSV bit")
    expect_close(frame(3, b"x"), 1002, "an unknown opcode")
    expect_close(frame(9, b"p" * 126), 1002, "a control frame over 125 bytes")
    expect_close(frame(1, b"", length=1 << 40)[:14], 1009, "a frame announcing 1 TiB")
    expect_close(frame(1, b"x" * (MAX_WS + 1)), 1009, "a message over --max-ws-message")
    expect_close(frame(1, b"x" * 40000, fin=False) + frame(0, b"x" * 40000), 1009,
                 "fragments adding up to more than --max-ws-message")
    expect_close(frame(1, b'{"bad": "\xff\xfe"}'), 1007, "invalid UTF-8 in a text frame")
    expect_close(frame(0, b"x"), 1002, "a continuation with nothing to continue")
    still_serving("frame errors")

    # fragmented, with a ping in the middle: fine
    w = WS(d.url, kid, TOKEN)
    body = json.dumps({"header": {"msg_id": "frag-1", "msg_type": "execute_request",
                                  "session": "s", "username": "u", "version": "5.3"},
                       "parent_header": {}, "metadata": {}, "channel": "shell",
                       "content": {"code": "'frag' * 2", "silent": False,
                                   "store_history": False, "user_expressions": {},
                                   "allow_stdin": False}}).encode()
    w.send_raw(frame(1, body[:10], fin=False) + frame(9, b"are you there") +
               frame(0, body[10:30], fin=False) + frame(0, body[30:]))
    op, fin, data = w.recv_frame()
    ok(op == 10 and data == b"are you there", "a ping mid-message gets its pong", (op, data))
    msgs = w.until_done("frag-1")
    reply = [m for m in msgs if m["channel"] == "shell"][-1]
    ok(reply["parent_header"]["msg_id"] == "frag-1" and result_text(msgs) == "'fragfrag'",
       "a message in three fragments is one message", reply["content"])
    # bad messages inside good frames: dropped, the connection stays
    w.send_raw(frame(1, b"not json at all"))
    w.send_raw(frame(1, b'{"header": {"msg_id": "x", "msg_type": "execute_request"}, '
                        b'"channel": "iopub", "content": {"code": "1"}}'))
    w.send_raw(frame(1, b'{"header": "nope", "channel": "shell"}'))
    w.send_raw(frame(2, b"\x00\x00\x00\x09garbage"))
    reply, io = w.execute("'still here'")
    ok(result_text(io) == "'still here'",
       "malformed messages are dropped; the connection keeps working")
    w.close()
    st, log = True, "".join(d.log)
    ok("message from a frontend dropped" in log, "the log says why a message was dropped")

    # abrupt disconnects
    for n in range(3):
        w = WS(d.url, kid, TOKEN)
        w.send_raw(frame(1, b"x" * 1000)[:200])  # half a frame, then gone
        w.sock.close()
    raw = socket.create_connection(("127.0.0.1", int(d.url.rsplit(":", 1)[1])))
    raw.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n".encode())
    raw.close()  # gone mid-handshake
    time.sleep(0.5)
    still_serving("abrupt disconnects")
    reply, io = ws.execute("'other client fine'")
    ok(result_text(io) == "'other client fine'", "the other client on the kernel still works")
    st, res = d.json("POST", "/execute", {"code": "21*2"}, headers={"Accept": "application/json"})
    ok(st == 200 and res["results"][0]["text"] == "42", "and so does the REST API", res)

    # --- shutdown ----------------------------------------------------------------------
    st, _, _ = d.request("DELETE", "/api/kernels/" + kid)
    ok(st == 204, "DELETE /api/kernels/{id}: 204", st)
    try:
        while True:
            ws.recv_message()
    except Closed as c:
        ok(c.code == 1000, "its WebSocket clients are closed normally", c.code)
    except Exception as e:  # noqa: BLE001
        ok(False, "its WebSocket clients are closed normally", repr(e))
    st, body = jget("/api/kernels/" + kid)
    ok(st == 404, "the kernel is gone", body)
    st, lst = jget("/api/sessions")
    ok(sid not in [x["id"] for x in lst] or all(x["kernel"]["id"] != kid for x in lst),
       "no session points at the gone kernel", lst)
    st, _, _ = d.request("DELETE", f"/api/sessions/{sid}")
    st, _, page = d.request("GET", "/metrics")
    ok(b"sandgate_websocket_connections_total" in page and
       b"sandgate_websocket_protocol_errors_total" in page, "WebSocket metrics are exported")
finally:
    if any("ERROR" in l or "AddressSanitizer" in l for l in d.log):
        diag("".join(d.log[-40:]))
    d.stop()

# --- the same timeouts and culling as every session ----------------------------------
d = Daemon("--pool-size", "1", "--exec-timeout", "3", "--idle-timeout", "6")
try:
    st, a = d.json("POST", "/api/kernels", {})
    ws = WS(d.url, a["id"], TOKEN, session="timeouts")
    st, b = d.json("POST", "/api/kernels", {})
    t0 = time.time()
    reply, io = ws.execute("import time\nwhile True: time.sleep(0.1)")
    took = time.time() - t0
    ok(reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
       and took < 30, f"a WebSocket execution past --exec-timeout is interrupted ({took:.1f} s)",
       reply["content"])
    ok(any("execution timed out; interrupting" in l for l in d.log),
       "the log says why it was interrupted")
    ok(any(m["header"]["msg_type"] == "stream" and m["content"]["name"] == "stderr" and
           m["content"]["text"].startswith("TimeoutError: execution exceeded its 3000 ms")
           for m in io), "the frontend reads why on stderr", io)
    reply, io = ws.execute("'still alive'")
    ok(result_text(io) == "'still alive'", "the kernel keeps working after the timeout")
    time.sleep(10)
    st, body = jget("/api/kernels/" + b["id"])
    ok(st == 404, "an idle kernel with no frontend is culled (--idle-timeout)", (st, body))
    st, body = jget("/api/kernels/" + a["id"])
    ok(st == 200 and body["connections"] == 1,
       "an idle kernel with a frontend connected is not culled", (st, body))
    ws.close()
finally:
    d.stop()
done()
