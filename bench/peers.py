#!/usr/bin/python3
"""Peer benchmark (issue 5): the round trip of executing `1+1` (until the
execute_reply and the kernel's idle status) through sandgate and through the
usual alternatives, all in one run and all with the same plain, unsandboxed
Debian ipykernel (the python3 kernelspec):

  floor     a direct ZeroMQ client (jupyter_client) to a kernel started by
            jupyter_client's KernelManager;
  sandgate  `--sandbox none`: POST /execute (JSON and NDJSON) on one warm
            context, and a direct ZeroMQ client to that same kernel;
  sandgate WebSocket: the Jupyter kernel channels of that same kernel
            (/api/kernels/{id}/channels, the default JSON frames);
  Notebook  Debian's Jupyter Notebook server: a kernel from POST /api/kernels,
            executed over its WebSocket /api/kernels/{id}/channels;
  Kernel Gateway  Jupyter Kernel Gateway (PyPI jupyter-kernel-gateway, pinned
            in tests/requirements-kg.txt, so tests/.venv-kg; made by
            scripts/venv.sh when missing), the server sandgate is the drop-in
            for, in its two modes: jupyter-websocket (a kernel from POST
            /api/kernels, executed over its WebSocket like Notebook's) and
            notebook-http (a notebook's cell `# POST /run` as an HTTP
            endpoint: each request runs `REQUEST = ...` and then the cell's
            `print(1+1)`, and answers with the cell's stdout); both start
            the same Debian kernelspec, put first in the run's data dir;
  FastAPI   bench/peers/fastapi_exec.py, the common tutorial design of a code
            execution service: a new kernel per request (so its round trip
            includes a kernel start and kill, by design).

usage: bench/peers.py [--runs N] [--fastapi-runs M] [--quick]
       (needs a build in build/, the Debian packages below and tests/.venv-kg)
Prints a Markdown table of medians (min, max) in ms and the ratios.

The warm measures run interleaved (one of each per round) so that all see the
same machine; the slow FastAPI runs follow. The client runs in this process
and shares the machine's cores with every server it measures.
"""
# Debian packages (besides python3-jupyter-client and python3-ipykernel,
# which sandgate's tests already need):
#   apt-get install -y python3-notebook python3-fastapi python3-uvicorn
import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

from rest import Client, stats  # bench/rest.py; also puts tests/lib on sys.path
from sgd import SANDGATE, TOKEN, Daemon
from jupyter_client import BlockingKernelClient, KernelManager
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

HERE = os.path.dirname(os.path.abspath(__file__))
KG_VENV = os.path.join(HERE, "..", "tests", ".venv-kg")
KG = os.path.join(KG_VENV, "bin", "jupyter-kernelgateway")
PY = "/usr/bin/python3"  # Debian's, whose packages the servers need
CODE, EXPECTED = "1+1", "2"
NB_TOKEN = uuid.uuid4().hex


def row(name, s):
    print(f"| {name:<58} | {s[0]:9.2f} | {s[1]:9.2f} | {s[2]:9.2f} | {s[3]:5d} |", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method, url, body=None, headers=None):
    """One request with urllib (setup and teardown only, never timed)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
        return json.loads(raw) if raw.strip() else None


class Server:
    """A peer server process in a session of its own, its output in a log
    file; ready once `ready_url` answers. stop() is safe to call twice."""

    def __init__(self, name, argv, ready_url, logdir, headers=None):
        self.name = name
        self.log = open(os.path.join(logdir, name + ".log"), "w+")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                tail = self.log.read()[-3000:]
                self.stop()
                raise RuntimeError(f"{name} did not start:\n{tail}")
            try:
                http_json("GET", ready_url, headers=headers)
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # the Notebook server shuts its kernels down on SIGTERM
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: see Popen
                self.proc.wait()
        self.log.close()


def zmq_execute(kc):
    """Runs CODE through a jupyter_client BlockingKernelClient: sends the
    execute_request, reads iopub until idle, then the execute_reply. Returns
    the result's text/plain."""
    out = []

    def hook(msg):
        if msg["msg_type"] == "execute_result":
            out.append(msg["content"]["data"]["text/plain"])

    reply = kc.execute_interactive(CODE, timeout=30, output_hook=hook)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"execute_reply: {reply['content']}")
    return "".join(out)


class NotebookKernel:
    """A kernel of a Jupyter-Server-API server (the Notebook server, or
    sandgate), driven over its WebSocket with the default JSON message frames,
    from an asyncio loop that runs only while a call of ours waits (so the
    timing loop itself stays synchronous). kernel_id: an existing kernel;
    otherwise one is started (and shut down by close())."""

    def __init__(self, base, token=NB_TOKEN, kernel_id=None):
        self.base, self.auth = base, {"Authorization": "token " + token}
        self.owned = kernel_id is None
        self.id = kernel_id or http_json("POST", f"{base}/api/kernels", {"name": "python3"},
                                         self.auth)["id"]
        self.session = uuid.uuid4().hex
        self.loop = asyncio.new_event_loop()
        ws_url = f"ws{base[4:]}/api/kernels/{self.id}/channels?session_id={self.session}"
        self.ws = self.loop.run_until_complete(
            self._connect(HTTPRequest(ws_url, headers=self.auth)))

    @staticmethod
    async def _connect(req):
        return await websocket_connect(req)

    def execute(self):
        return self.loop.run_until_complete(asyncio.wait_for(self._execute(), 60))

    async def _execute(self):
        msg_id = uuid.uuid4().hex
        await self.ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "session": self.session, "username": "bench",
                       "msg_type": "execute_request", "version": "5.3",
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
            "content": {"code": CODE, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))
        out, replied, idle = [], False, False
        while not (replied and idle):
            raw = await self.ws.read_message()
            if raw is None:
                raise RuntimeError("the Notebook server closed the WebSocket")
            msg = json.loads(raw)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue  # e.g. the server's own kernel_info_request
            kind, content = msg["msg_type"], msg["content"]
            if kind == "execute_result":
                out.append(content["data"]["text/plain"])
            elif kind == "execute_reply":
                if content["status"] != "ok":
                    raise RuntimeError(f"execute_reply: {content}")
                replied = True
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        return "".join(out)

    def close(self):
        self.ws.close()
        self.loop.run_until_complete(asyncio.sleep(0.1))  # let the close go out
        self.loop.close()
        if self.owned:
            http_json("DELETE", f"{self.base}/api/kernels/{self.id}", headers=self.auth)


def sandgate_json(cl, ctx):
    st, data = cl.post("/execute", {"code": CODE, "context_id": ctx}, "application/json")
    if st != 200:
        raise RuntimeError(f"sandgate: {st} {data!r}")
    return "".join(r.get("text", "") for r in json.loads(data)["results"])


def sandgate_ndjson(cl, ctx):
    st, data = cl.post("/execute", {"code": CODE, "context_id": ctx})
    if st != 200:
        raise RuntimeError(f"sandgate: {st} {data!r}")
    lines = [json.loads(line) for line in data.splitlines() if line.strip()]
    return "".join(line.get("text", "") for line in lines if line["type"] == "result")


def kg_http_execute(cl):
    """One request to the Kernel Gateway's notebook-http endpoint, on a
    kept-alive connection like Client's (KG wants `Authorization: token`)."""
    cl.c.request("POST", "/run", "{}", {"Authorization": "token " + NB_TOKEN,
                                          "Content-Type": "application/json"})
    r = cl.c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"Kernel Gateway notebook-http: {r.status} {data!r}")
    return data.decode().strip()


def fastapi_execute(cl):
    st, data = cl.post("/execute", {"code": CODE})
    if st != 200:
        raise RuntimeError(f"FastAPI service: {st} {data!r}")
    return "".join(r.get("text/plain", "") for r in json.loads(data)["results"])


def measure(fns, runs, warmup=3):
    """Calls each of fns (name -> function) `warmup` times, then `runs`
    rounds of one call each, in turn; returns name -> times in ms. Checks
    every result outside the clock."""
    for name, fn in fns.items():
        for _ in range(warmup):
            if fn() != EXPECTED:
                raise RuntimeError(f"{name}: wrong result")
    times = {name: [] for name in fns}
    for i in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            got = fn()
            times[name].append((time.perf_counter() - t0) * 1000)
            if got != EXPECTED:
                raise RuntimeError(f"{name}: result {got!r}, not {EXPECTED!r}")
        if (i + 1) % 50 == 0:
            print(f"  ({i + 1}/{runs} rounds)", file=sys.stderr, flush=True)
    return times


def versions():
    v = {p: importlib.metadata.version(p) for p in
         ("ipykernel", "jupyter_client", "pyzmq", "notebook", "tornado", "fastapi", "uvicorn")}
    kg = subprocess.run([KG, "--version"], capture_output=True, text=True)
    v["jupyter-kernel-gateway"] = (kg.stdout or kg.stderr).strip().split()[-1]
    sg = subprocess.run([SANDGATE, "--version"], capture_output=True, text=True)
    v["sandgate"] = (sg.stdout or sg.stderr).strip().split()[-1]
    return v


def start_sandgate(stack):
    """A `--sandbox none` daemon with one warm context; returns the REST
    client, the context id and a ZeroMQ client to the context's kernel."""
    d = Daemon("--sandbox", "none", "--pool-size", "0")
    stack.callback(d.stop)
    cl = Client(d.url)
    st, data = cl.post("/contexts", {})
    if st != 201:
        raise RuntimeError(f"sandgate: POST /contexts: {st} {data!r}")
    ctx = json.loads(data)["id"]
    # Plain processes outlive a stopped daemon like sandboxes do: delete the
    # context (and so its kernel) first.
    stack.callback(d.json, "DELETE", "/contexts/" + ctx)
    sandgate_json(cl, ctx)  # the kernel's first execution is slow: keep it out
    # In mode none the connection file already names the host's socket path.
    rec = json.load(open(f"{d.dir}/sessions/{ctx}.json"))
    kc = BlockingKernelClient()
    kc.load_connection_file(f"{d.dir}/kernels/{rec['sandbox_id']}/conn/kernel.json")
    kc.start_channels()
    stack.callback(kc.stop_channels)
    kc.wait_for_ready(timeout=30)
    ws = NotebookKernel(d.url, TOKEN, ctx)  # the same kernel, through its WebSocket
    stack.callback(ws.close)
    return cl, ctx, kc, ws


def start_kernel_gateways(stack, tmp):
    """The Kernel Gateway in its two modes, each a server of its own; returns
    a WebSocket client to a kernel of the first and an HTTP client of the
    second."""
    if not os.access(KG, os.X_OK):
        subprocess.run([os.path.join(HERE, "..", "scripts", "venv.sh")], check=True,
                       stdout=sys.stderr)
    auth = {"Authorization": "token " + NB_TOKEN}
    common = ["--KernelGatewayApp.ip=127.0.0.1", "--KernelGatewayApp.port_retries=0",
              f"--KernelGatewayApp.auth_token={NB_TOKEN}"]
    port = free_port()
    ws = Server("kg-websocket",
                [KG, "--KernelGatewayApp.api=kernel_gateway.jupyter_websocket",
                 f"--KernelGatewayApp.port={port}", *common],
                f"http://127.0.0.1:{port}/api/kernelspecs", tmp, auth)
    stack.callback(ws.stop)
    # The same plain kernel as every other peer: the venv's own ipykernel
    # would otherwise be its python3.
    spec = http_json("GET", f"http://127.0.0.1:{port}/api/kernelspecs/python3",
                     headers=auth)["spec"]
    if spec["argv"][0] != PY:
        raise RuntimeError(f"Kernel Gateway's python3 kernel is not Debian's: {spec}")
    kg_ws = NotebookKernel(f"http://127.0.0.1:{port}")
    stack.callback(kg_ws.close)

    seed = os.path.join(tmp, "kg-api.ipynb")
    with open(seed, "w") as f:
        json.dump({"nbformat": 4, "nbformat_minor": 5, "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": f"# POST /run\nprint({CODE})"}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}}}, f)
    port = free_port()
    http = Server("kg-notebook-http",
                  [KG, "--KernelGatewayApp.api=kernel_gateway.notebook_http",
                   f"--KernelGatewayApp.seed_uri={seed}", "--KernelGatewayApp.prespawn_count=1",
                   f"--KernelGatewayApp.port={port}", *common],
                  f"http://127.0.0.1:{port}/_api/spec/swagger.json", tmp, auth)
    stack.callback(http.stop)
    return kg_ws, Client(f"http://127.0.0.1:{port}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200, help="warm runs of each measure")
    ap.add_argument("--fastapi-runs", type=int, default=30,
                    help="runs of the per-request-kernel FastAPI service (each starts a kernel)")
    ap.add_argument("--quick", action="store_true", help="30 runs, 10 FastAPI runs")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.fastapi_runs = 30, min(a.fastapi_runs, 10)
    # Stop every server and remove every temp dir on SIGTERM too (a timeout
    # in a run script), not only on errors and ^C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    with contextlib.ExitStack() as stack:
        # Every Jupyter file of this run (connection files, the servers'
        # runtime and data files, IPython profiles) goes under one temp dir,
        # which also keeps user kernelspecs and config out: all peers start
        # Debian's python3 kernelspec (copied into the data dir, which comes
        # first, so that the Kernel Gateway's venv does not bring its own).
        tmp = tempfile.mkdtemp(prefix="sg-peers-", dir="/tmp")
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
            os.environ[var] = os.path.join(tmp, sub)
            os.mkdir(os.environ[var])
        shutil.copytree("/usr/share/jupyter/kernels/python3",
                        os.path.join(tmp, "data", "kernels", "python3"))

        # 1. The floor: jupyter_client's own kernel, over TCP as it defaults to.
        km = KernelManager(kernel_name="python3")
        km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(km.shutdown_kernel, now=True)
        floor_kc = km.client()
        floor_kc.start_channels()
        stack.callback(floor_kc.stop_channels)
        floor_kc.wait_for_ready(timeout=60)

        # 2. sandgate, unsandboxed.
        sg, ctx, sg_kc, sg_ws = start_sandgate(stack)

        # 3. The Notebook server.
        port = free_port()
        nb_dir = os.path.join(tmp, "notebooks")
        os.mkdir(nb_dir)
        nb = Server("notebook",
                    [PY, "-m", "notebook", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                     "--NotebookApp.port_retries=0", f"--NotebookApp.token={NB_TOKEN}",
                     f"--NotebookApp.notebook_dir={nb_dir}"]
                    + (["--allow-root"] if os.geteuid() == 0 else []),
                    f"http://127.0.0.1:{port}/api/status", tmp,
                    {"Authorization": "token " + NB_TOKEN})
        stack.callback(nb.stop)
        nbk = NotebookKernel(f"http://127.0.0.1:{port}")
        stack.callback(nbk.close)

        # 4. Jupyter Kernel Gateway, both modes.
        kg_ws, kg_http = start_kernel_gateways(stack, tmp)

        # 5. The per-request-kernel FastAPI service.
        port = free_port()
        fa = Server("fastapi",
                    [PY, "-m", "uvicorn", "fastapi_exec:app", "--app-dir",
                     os.path.join(HERE, "peers"), "--host", "127.0.0.1", "--port", str(port),
                     "--log-level", "warning"],
                    f"http://127.0.0.1:{port}/openapi.json", tmp)
        stack.callback(fa.stop)
        fa_cl = Client(f"http://127.0.0.1:{port}")

        v = versions()
        cores = os.cpu_count()
        print(f"sandgate peer benchmark — {time.strftime('%Y-%m-%d')}\n\n"
              f"machine: {cores} cores, Linux {platform.release()}, Python "
              f"{platform.python_version()}; client and all servers share these "
              f"{cores} cores\n"
              f"versions: " + ", ".join(f"{k} {x}" for k, x in v.items()) + "\n\n"
              f"execute `{CODE}` until execute_reply and idle, same plain (unsandboxed) "
              f"Debian python3 kernel everywhere; ms; the warm measures interleaved, "
              f"{a.runs} rounds; the FastAPI service {a.fastapi_runs} runs, each "
              f"including a kernel start by design\n", flush=True)

        # key: (table row, short name for the ratios)
        names = {
            "floor": ("direct ZeroMQ (jupyter_client) to a KernelManager kernel", "floor"),
            "sg_json": ("sandgate --sandbox none: POST /execute, JSON", "sandgate JSON"),
            "sg_ndjson": ("sandgate --sandbox none: POST /execute, NDJSON stream",
                          "sandgate NDJSON"),
            "sg_ws": ("sandgate --sandbox none: WebSocket channels, same kernel",
                      "sandgate WebSocket"),
            "sg_zmq": ("direct ZeroMQ to sandgate's kernel (ipc)", "sandgate's kernel direct"),
            "notebook": (f"Notebook {v['notebook']}: WebSocket /api/kernels/{{id}}/channels",
                         "Notebook"),
            "kg_ws": (f"Kernel Gateway {v['jupyter-kernel-gateway']}: jupyter-websocket, "
                      "WebSocket", "Kernel Gateway WebSocket"),
            "kg_http": (f"Kernel Gateway {v['jupyter-kernel-gateway']}: notebook-http, "
                        "POST /run", "Kernel Gateway notebook-http"),
            "fastapi": ("FastAPI, a new kernel per request (incl. its start)",
                        "FastAPI per-request kernel"),
        }
        times = measure({
            "floor": lambda: zmq_execute(floor_kc),
            "sg_json": lambda: sandgate_json(sg, ctx),
            "sg_ndjson": lambda: sandgate_ndjson(sg, ctx),
            "sg_ws": sg_ws.execute,
            "sg_zmq": lambda: zmq_execute(sg_kc),
            "notebook": nbk.execute,
            "kg_ws": kg_ws.execute,
            "kg_http": lambda: kg_http_execute(kg_http),
        }, a.runs)
        times.update(measure({"fastapi": lambda: fastapi_execute(fa_cl)}, a.fastapi_runs,
                             warmup=1))

        print(f"| {'measure':<58} | {'median':>9} | {'min':>9} | {'max':>9} | {'runs':>5} |")
        print(f"|{'-' * 60}|{'-' * 11}|{'-' * 11}|{'-' * 11}|{'-' * 7}|")
        s = {k: stats(t) for k, t in times.items()}
        for k, (name, _) in names.items():
            row(name, s[k])

        med = {k: x[0] for k, x in s.items()}
        print("\nratios of medians over the floor: " + ", ".join(
            f"{short} {med[k] / med['floor']:.2f}x" for k, (_, short) in names.items()
            if k != "floor"))
        print(f"Notebook's WebSocket over sandgate's: {med['notebook'] / med['sg_ws']:.2f}x")
        print(f"Kernel Gateway over sandgate: jupyter-websocket over sandgate's WebSocket "
              f"{med['kg_ws'] / med['sg_ws']:.2f}x, notebook-http over sandgate's POST /execute "
              f"(JSON) {med['kg_http'] / med['sg_json']:.2f}x")
        print(f"over sandgate's (JSON): Notebook {med['notebook'] / med['sg_json']:.2f}x, "
              f"FastAPI per-request kernel {med['fastapi'] / med['sg_json']:.1f}x")


if __name__ == "__main__":
    main()
