"""A minimal Jupyter kernel that binds its stdin socket last, --delay seconds
after the others (as a slow or loaded kernel may get to it late).

It answers kernel_info at once, so a client that calls the kernel ready on
shell and iopub alone would send it work before stdin is there; the
kernel's input_request then goes to a ROUTER with no such peer, which
drops it, and the client waits forever.  Every execute_request asks for
input (input_request on stdin, to the shell request's routing identity)
and prints 'hi VALUE' with the reply; without a reply within 30 s it
prints 'no input_reply'.  Uses Debian's python3-zmq and jupyter_client's
Session for signing.

  late_stdin_kernel.py [--delay SEC] -f CONNECTION_FILE
"""
import json
import sys
import time

import zmq
from jupyter_client.session import Session

args = sys.argv[1:]
delay = float(args[args.index("--delay") + 1]) if "--delay" in args else 1.5
conn = json.load(open(args[args.index("-f") + 1]))
session = Session(key=conn["key"].encode(), signature_scheme=conn["signature_scheme"])


def endpoint(port):
    if conn["transport"] == "ipc":
        return f"ipc://{conn['ip']}-{conn[port]}"
    return f"tcp://{conn['ip']}:{conn[port]}"


ctx = zmq.Context()
shell, control, iopub, hb = (ctx.socket(t) for t in (zmq.ROUTER, zmq.ROUTER, zmq.PUB, zmq.REP))
for sock, port in ((shell, "shell_port"), (control, "control_port"), (iopub, "iopub_port"),
                   (hb, "hb_port")):
    sock.bind(endpoint(port))
stdin = None
started = time.monotonic()
poller = zmq.Poller()
for sock in (shell, control, hb):
    poller.register(sock, zmq.POLLIN)


def status(parent, state):
    session.send(iopub, "status", {"execution_state": state}, parent=parent)


def ask(ident, parent):
    """input('name? ') as ipykernel does it; the value or None."""
    session.send(stdin, "input_request", {"prompt": "name? ", "password": False},
                 parent=parent, ident=ident)
    if stdin.poll(30000):
        _, reply = session.recv(stdin)
        return reply["content"]["value"]
    return None


count = 0
while True:
    if stdin is None and time.monotonic() - started >= delay:
        stdin = ctx.socket(zmq.ROUTER)
        stdin.bind(endpoint("stdin_port"))
    for sock, _ in poller.poll(50):
        if sock is hb:
            hb.send(hb.recv())
            continue
        ident, msg = session.recv(sock)
        kind, parent = msg["header"]["msg_type"], msg["header"]
        status(parent, "busy")
        if kind == "kernel_info_request":
            session.send(sock, "kernel_info_reply", {
                "status": "ok", "protocol_version": "5.3", "implementation": "late-stdin",
                "implementation_version": "1", "banner": "",
                "language_info": {"name": "python", "version": "3", "mimetype": "text/x-python",
                                  "file_extension": ".py"}}, parent=parent, ident=ident)
        elif kind == "execute_request":
            count += 1
            session.send(iopub, "execute_input", {"code": msg["content"]["code"],
                                                  "execution_count": count}, parent=parent)
            value = ask(ident, parent) if stdin is not None else None
            text = f"hi {value}\n" if value is not None else "no input_reply\n"
            session.send(iopub, "stream", {"name": "stdout", "text": text}, parent=parent)
            session.send(sock, "execute_reply", {"status": "ok", "execution_count": count,
                                                 "user_expressions": {}},
                         parent=parent, ident=ident)
        elif kind == "shutdown_request":
            session.send(sock, "shutdown_reply", msg["content"], parent=parent, ident=ident)
            status(parent, "idle")
            sys.exit(0)
        elif kind == "interrupt_request":
            session.send(sock, "interrupt_reply", {"status": "ok"}, parent=parent, ident=ident)
        status(parent, "idle")
