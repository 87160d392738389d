"""jupyter_client's BlockingKernelClient against sandgate's kernel-side
wire protocol (tests/proto/mini_kernel.c), over tcp and ipc.

The connection file is written by jupyter_client and read by sandgate, the
requests are signed by jupyter_client and verified by sandgate, and the
replies and iopub messages go the other way.
"""
import os
import queue
import subprocess
import tempfile
import time
import uuid

from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from tap import ok, diag, done

BUILD = os.environ.get("SG_BUILDDIR", ".")
KERNEL = os.path.join(BUILD, "tests/proto/mini_kernel")


def iopub_for(client, msg_id, timeout=10):
    msgs = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            m = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        msgs.append(m)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    return msgs


def run(transport, tmp):
    ip = "127.0.0.1" if transport == "tcp" else os.path.join(tmp, "mk")
    path = os.path.join(tmp, f"conn-{transport}.json")
    write_connection_file(path, ip=ip, transport=transport, key=uuid.uuid4().hex.encode())
    log = open(os.path.join(tmp, f"mini-{transport}.log"), "w+")
    proc = subprocess.Popen([KERNEL, path], stderr=log)
    kc = BlockingKernelClient()
    kc.load_connection_file(path)
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=20)
        ready = True
    except RuntimeError as e:
        ready = False
        diag(e)
    ok(ready, f"{transport}: wait_for_ready succeeds (kernel_info round trip)")

    msg_id = kc.kernel_info()
    reply = kc.get_shell_msg(timeout=5)
    ok(reply["parent_header"]["msg_id"] == msg_id, f"{transport}: kernel_info_reply parent linked")
    ok(reply["content"]["implementation"] == "sandgate-mini"
       and reply["content"]["protocol_version"] == "5.3", f"{transport}: kernel_info content",
       reply["content"])
    ok(reply["header"]["version"] == "5.3", f"{transport}: header version 5.3")

    code = "print('h\u00e9llo \U0001f600')"
    msg_id = kc.execute(code)
    reply = kc.get_shell_msg(timeout=5)
    ok(reply["msg_type"] == "execute_reply" and reply["content"]["status"] == "ok"
       and reply["parent_header"]["msg_id"] == msg_id, f"{transport}: execute_reply ok")
    msgs = iopub_for(kc, msg_id)
    types = [m["msg_type"] for m in msgs]
    ok(types == ["status", "execute_input", "stream", "execute_result", "status"],
       f"{transport}: iopub sequence busy/input/stream/result/idle", types)
    res = [m for m in msgs if m["msg_type"] == "execute_result"]
    ok(res and res[0]["content"]["data"]["text/plain"] == code,
       f"{transport}: execute_result carries the unicode code back")
    stream = [m for m in msgs if m["msg_type"] == "stream"]
    ok(stream and stream[0]["content"]["text"] == code + "\n", f"{transport}: stream text")

    msg_id = kc.execute("error")
    reply = kc.get_shell_msg(timeout=5)
    ok(reply["content"]["status"] == "error" and reply["content"]["ename"] == "EchoError",
       f"{transport}: error reply")
    err = [m for m in iopub_for(kc, msg_id) if m["msg_type"] == "error"]
    ok(err and err[0]["content"]["evalue"] == "asked for an error", f"{transport}: error on iopub")

    # A client holding the wrong key is ignored; the right one keeps working.
    evil = BlockingKernelClient()
    evil.load_connection_file(path)
    evil.session.key = b"wrong-key"
    evil.start_channels()
    evil.kernel_info()
    try:
        evil.get_shell_msg(timeout=1.5)
        answered = True
    except queue.Empty:
        answered = False
    ok(not answered, f"{transport}: a request signed with the wrong key gets no reply")
    evil.stop_channels()
    kc.kernel_info()
    ok(kc.get_shell_msg(timeout=5)["msg_type"] == "kernel_info_reply",
       f"{transport}: correctly signed requests still answered")

    kc.shutdown()
    reply = kc.get_control_msg(timeout=5)
    ok(reply["msg_type"] == "shutdown_reply", f"{transport}: shutdown_reply on control")
    try:
        rc = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = None
    ok(rc == 0, f"{transport}: mini kernel exits cleanly after shutdown")
    kc.stop_channels()
    log.seek(0)
    text = log.read()
    ok("refused 1" in text, f"{transport}: the kernel counted the one refused message", text)


with tempfile.TemporaryDirectory(prefix="sg-mini-") as tmp:
    # jupyter_client writes an empty key unless told otherwise; sandgate refuses it.
    path = os.path.join(tmp, "nokey.json")
    write_connection_file(path, ip="127.0.0.1", transport="tcp")
    r = subprocess.run([KERNEL, path], capture_output=True, text=True, timeout=10)
    ok(r.returncode != 0 and "empty HMAC key is refused" in r.stderr,
       "a connection file with an empty key is refused", r.stderr)
    run("tcp", tmp)
    run("ipc", tmp)
done()
