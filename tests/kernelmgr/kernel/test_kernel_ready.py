"""A kernel is ready only once every channel a kernel sends on unasked is
connected, stdin included.

The kernel's input_request goes out on its stdin ROUTER socket, which
drops a message for a peer that has not connected yet; sandgate's stdin
socket connects (and reconnects while the kernel has not bound it) on its
own schedule, so a kernel called ready on its kernel_info reply and iopub
alone could be sent an input() before stdin was there: its input_request
was lost and the execution hung (about 1 in 12 fresh kernels here, without
a sandbox; a Jupyter client then waited forever for the prompt).

late_stdin_kernel.py binds stdin 1.5 s after its other sockets and answers
kernel_info at once: every kernel of it is in that window.  Without a
sandbox (the race is on sandgate's side of the sockets), no runsc needed."""
import json
import os
import shutil
import tempfile
import threading
import time

from sgd import Daemon, TOKEN
from tap import ok, done
from wsclient import WS

HERE = os.path.dirname(os.path.abspath(__file__))
DELAY = 1.5

jp = tempfile.mkdtemp(prefix="sg-kspec-", dir="/tmp")
os.chmod(jp, 0o755)
for name, delay in (("latestdin", DELAY), ("nostdin", 3600)):
    os.makedirs(os.path.join(jp, "kernels", name))
    with open(os.path.join(jp, "kernels", name, "kernel.json"), "w") as f:
        json.dump({"argv": ["/usr/bin/python3", os.path.join(HERE, "late_stdin_kernel.py"),
                            "--delay", str(delay), "-f", "{connection_file}"],
                   "display_name": f"stdin bound after {delay} s", "language": name}, f)
d = Daemon("--sandbox", "none", "--pool-size", "0", env={"JUPYTER_PATH": jp})
try:
    # The Jupyter API: a frontend answers the prompt.
    t0 = time.monotonic()
    st, k = d.json("POST", "/api/kernels", {"name": "latestdin"})
    waited = time.monotonic() - t0
    ok(st == 201 and k["execution_state"] == "idle", "POST /api/kernels: a ready kernel", (st, k))
    ok(waited >= DELAY - 0.2, f"ready only once its stdin is connected (after {waited:.2f} s; "
       f"the kernel binds stdin at {DELAY} s)", waited)
    ws = WS(d.url, k["id"], TOKEN, session="sess-stdin", timeout=15)
    mid = ws.send("shell", "execute_request",
                  {"code": "print('hi', input('name? '))", "silent": False,
                   "store_history": True, "user_expressions": {}, "allow_stdin": True,
                   "stop_on_error": False})
    try:
        req = ws.until(lambda m: m["channel"] == "stdin")[-1]
    except OSError as e:
        req = {"error": repr(e)}
    ok(req.get("header", {}).get("msg_type") == "input_request" and
       req["parent_header"]["msg_id"] == mid,
       "the first execute's input_request reaches the frontend", req)
    if "header" in req:
        ws.send("stdin", "input_reply", {"value": "sandgate"}, parent=req["header"])
        text = "".join(m["content"].get("text", "") for m in ws.until_done(mid)
                       if m["header"]["msg_type"] == "stream")
        ok(text == "hi sandgate\n", "and the kernel gets the frontend's answer", text)
    ws.sock.close()

    # The E2B API: no one can type, so sandgate answers EOF itself.
    st, c = d.json("POST", "/contexts", {"language": "latestdin"})
    ok(st == 201, "a context of the same kernelspec", (st, c))
    st, r = d.json("POST", "/execute", {"code": "input()", "context_id": c.get("id")},
                   headers={"Accept": "application/json"}, timeout=60)
    out = "".join(r.get("stdout", [])) if st == 200 else r
    ok(st == 200 and out == "hi \x04\n",
       "its first execute's input_request is answered (EOF) at once, not lost", (st, r))
    st, h = d.json("GET", "/health")
    ok(st == 200 and h["status"] == "ok", "the daemon serves on", h)
finally:
    d.stop()

# A kernel that never binds stdin fails its start with the reason; one that
# binds it in time starts meanwhile.  The timeout leaves a loaded machine
# room for the 1.5 s kernel's own start.
d = Daemon("--sandbox", "none", "--pool-size", "0", "--start-timeout", "8",
           env={"JUPYTER_PATH": jp})
try:
    beside = {}
    t = threading.Thread(target=lambda: beside.update(
        r=d.json("POST", "/api/kernels", {"name": "latestdin"}, timeout=30)))
    t.start()
    st, k = d.json("POST", "/api/kernels", {"name": "nostdin"}, timeout=30)
    ok(st == 504 and "kernel answered, but its stdin channel did not accept a connection "
       "within 8000 ms of starting (kernelspec 'nostdin')" in k.get("message", ""),
       "a kernel whose stdin never connects: 504 that says so", (st, k))
    t.join(timeout=30)
    st, k = beside.get("r", (None, None))
    ok(st == 201, "a kernel that binds stdin in time starts beside it", (st, k))
finally:
    d.stop()
    shutil.rmtree(jp, ignore_errors=True)
done()
