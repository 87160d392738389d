#!/usr/bin/python3
"""runsc's own cost on an execute's path, without sandgate: the floor that
sandgate's sandboxed execute is measured against.

The same kernel sandgate starts (`python3 sandgate-kernel.py`, ipykernel),
driven by a lean ZeroMQ client (a shell DEALER and an IOPub SUB; one execute
is its request until both its reply and its idle status arrived), run four
ways, interleaved:
  plain     a host process binding host Unix sockets (ipc://)
  runsc     in a bare `runsc run` (the pinned runsc, systrap, --network=none,
            --host-uds=all): the kernel binds the host's Unix sockets itself,
            so nothing but runsc is between client and kernel
  relay     the same sandbox as sandgate lays it out: sandgate-init as PID 1
            relaying host sockets (--host-uds=create) to the kernel's
            abstract ones, sandgate-preload.so loaded
and reports `1+1`'s p50 for each, and executes/s of --kernels kernels kept
busy by one client process (one execute in flight per kernel) for plain and
runsc.

With --state N, only the floor of the state operations (StateFloor).

usage: bench/runsc_floor.py [--runs N] [--kernels N] [--duration S] [--runsc PATH]
                            [--state ROUNDS]
Needs root and a build in build/ (or SG_BUILDDIR).
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import zmq
from jupyter_client.session import Session

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
CHANNELS = ["shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"]
MODES = ("plain", "runsc", "relay")


def _mount(dest, source, *opts, kind="bind"):
    return {"destination": dest, "type": kind, "source": source, "options": list(opts)}


class Kernel:
    """One kernel, started one of MODES' ways; .client is its host-side
    connection file.  From=(kernel, image): a relay kernel restored from
    that kernel's checkpoint image into a sandbox of its own (its own
    conn/ directory, like a sandgate context made from a snapshot)."""

    def __init__(self, mode, runsc, work, From=None):
        self.mode, self.runsc, self.cid, self.proc = mode, runsc, None, None
        self.dir = tempfile.mkdtemp(prefix=f"{mode}-", dir=work)
        os.chmod(self.dir, 0o777)
        if From:
            with open(f"{From[0].dir}/kernel.json") as f:
                conn = json.load(f)
        else:
            inner = {"plain": f"{self.dir}/k", "runsc": "/conn/k",
                     "relay": "@sandgate-kernel"}[mode]
            conn = {"transport": "ipc", "ip": inner, "key": uuid.uuid4().hex,
                    "signature_scheme": "hmac-sha256", "kernel_name": "",
                    **{c: i + 1 for i, c in enumerate(CHANNELS)}}
        with open(f"{self.dir}/kernel.json", "w") as f:
            json.dump(conn, f)
        self.client = f"{self.dir}/client.json"
        with open(self.client, "w") as f:
            json.dump(dict(conn, ip=f"{self.dir}/k"), f)
        kpy = os.path.abspath(os.path.join(BUILD, "sandgate-kernel.py"))
        if mode == "plain":
            self.proc = subprocess.Popen(
                ["/usr/bin/python3", kpy, "-f", f"{self.dir}/kernel.json"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            return
        argv = ["/usr/bin/python3", "/sandgate-kernel.py", "-f", "/conn/kernel.json"]
        env = ["PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8",
               "PYDEVD_DISABLE_FILE_VALIDATION=1"]
        mounts = [_mount("/usr", "/usr", "rbind", "ro"), _mount("/etc", "/etc", "rbind", "ro"),
                  _mount("/tmp", "tmpfs", kind="tmpfs"),
                  _mount("/usr/lib/python3/dist-packages/debugpy", "tmpfs", "ro", "size=4k",
                         kind="tmpfs"),
                  _mount("/sandgate-kernel.py", kpy, "bind", "ro"),
                  _mount("/conn", self.dir, "rbind", "rw")]
        if mode == "relay":
            argv = ["/sandgate-init"] + argv
            env += ["SANDGATE_RELAY=/conn/k=@sandgate-kernel:1,2,3,4,5",
                    "SANDGATE_PRELOAD=/sandgate-preload.so"]
            mounts += [_mount("/sandgate-init", os.path.join(BUILD, "sandgate-init"), "bind", "ro"),
                       _mount("/sandgate-preload.so", os.path.join(BUILD, "sandgate-preload.so"),
                              "bind", "ro")]
        bundle = f"{self.dir}/bundle"
        rootfs = f"{bundle}/rootfs"
        for d in ("usr", "etc", "proc", "dev", "tmp", "conn"):
            os.makedirs(f"{rootfs}/{d}")
        for link in ("bin", "lib", "lib64", "sbin"):
            os.symlink(f"usr/{link}", f"{rootfs}/{link}")
        for f in ("/sandgate-kernel.py", "/sandgate-init", "/sandgate-preload.so"):
            open(rootfs + f, "w").close()
        subprocess.run([runsc, "spec", "--bundle", bundle, "--"] + argv, check=True)
        with open(f"{bundle}/config.json") as f:
            spec = json.load(f)
        spec["root"] = {"path": "rootfs", "readonly": True}
        spec["process"].update(terminal=False, env=env)
        spec["mounts"] = [m for m in spec["mounts"] if m["destination"] == "/proc"] + mounts
        with open(f"{bundle}/config.json", "w") as f:
            json.dump(spec, f)
        self.cid = "floor-" + uuid.uuid4().hex[:12]
        self.bundle = bundle
        uds = "--host-uds=create" if mode == "relay" else "--host-uds=all"
        self.flags = [runsc, "--platform=systrap", "--network=none", uds]
        if From:  # the image was made detached: its marker is in conn/
            open(f"{self.dir}/k.detached", "w").close()
            self.restore(From[1])
            return
        self.proc = subprocess.Popen(self.flags + ["run", "--bundle", bundle, self.cid],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # What sandgate does on a relay kernel's pause, snapshot and resume
    # (kernelmgr/sandbox/pause.c), with nothing else: runsc's own floor.
    def detach(self):
        """sandgate-init lets go of its host sockets (SIGUSR1) and says so."""
        subprocess.run([self.runsc, "kill", self.cid, "USR1"], check=True)
        while not os.path.exists(f"{self.dir}/k.detached"):
            time.sleep(0.002)
        for i in range(1, 6):
            try:
                os.unlink(f"{self.dir}/k-{i}")
            except FileNotFoundError:
                pass

    def checkpoint(self, image, leave_running):
        os.makedirs(image, exist_ok=True)
        subprocess.run([self.runsc, "checkpoint", "--image-path", image,
                        "--exclude-committed-zero-pages"] +
                       (["--leave-running"] if leave_running else []) + [self.cid],
                       check=True, stdout=subprocess.DEVNULL)
        if leave_running:
            return
        if self.proc:  # `runsc run` deletes the container as it exits
            self.proc.wait()
        else:
            subprocess.run([self.runsc, "delete", "-force", self.cid], check=True)

    def attach(self):
        """The marker's removal makes sandgate-init listen again."""
        os.unlink(f"{self.dir}/k.detached")
        while not all(os.path.exists(f"{self.dir}/k-{i}") for i in range(1, 6)):
            time.sleep(0.002)

    def restore(self, image):
        """runsc restore of image into this sandbox, listening again."""
        subprocess.run(self.flags + ["restore", "-detach", "-bundle", self.bundle,
                                     "--image-path", image, "--background", self.cid],
                       check=True, stdout=subprocess.DEVNULL)
        self.proc = None
        self.attach()

    def stop(self):
        if self.cid:
            subprocess.run([self.runsc, "kill", self.cid, "KILL"], stderr=subprocess.DEVNULL)
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()
        if self.cid:
            subprocess.run([self.runsc, "delete", "-force", self.cid], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


class Client:
    """A shell DEALER and an IOPub SUB on one kernel; send() starts an
    execute, on_message() says when it is done (reply and idle both seen)."""

    def __init__(self, conn_file, ctx):
        with open(conn_file) as f:
            c = json.load(f)
        self.session = Session(key=c["key"].encode(), signature_scheme=c["signature_scheme"])
        self.shell = ctx.socket(zmq.DEALER)
        self.shell.connect(f"ipc://{c['ip']}-{c['shell_port']}")
        self.iopub = ctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(f"ipc://{c['ip']}-{c['iopub_port']}")
        self.pending, self.seen = None, set()

    def send(self, kind="execute_request", code="1+1"):
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": True} if kind == "execute_request" else {}
        self.pending = self.session.send(self.shell, kind, content)["header"]["msg_id"]
        self.seen = set()

    def on_message(self, sock):
        """True when the pending request is done."""
        m = self.session.recv(sock, mode=zmq.NOBLOCK)[1]
        if m is None or m["parent_header"].get("msg_id") != self.pending:
            return False
        if sock is self.shell:
            self.seen.add("reply")
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            self.seen.add("idle")
        return len(self.seen) == 2

    def wait(self, timeout):
        poller = zmq.Poller()
        poller.register(self.shell, zmq.POLLIN)
        poller.register(self.iopub, zmq.POLLIN)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for sock, _ in poller.poll(50):
                if self.on_message(sock):
                    return True
        return False

    def ready(self, timeout=120, step=1):
        """Until a kernel_info round trip also shows on IOPub (subscribed)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.send("kernel_info_request")
            if self.wait(step):
                return
        raise RuntimeError("kernel did not answer")

    def close(self):
        self.shell.close(0)
        self.iopub.close(0)


def start(mode, n, runsc, work):
    """n kernels of one mode, answering, with their clients."""
    ctx = zmq.Context.instance()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        kernels = list(pool.map(lambda _: Kernel(mode, runsc, work), range(n)))
    clients = [Client(k.client, ctx) for k in kernels]
    for c in clients:
        c.ready()
    return kernels, clients


def stop(kernels, clients):
    for c in clients:
        c.close()
    for k in kernels:
        k.stop()


def p50_of(mode, runs, runsc, work):
    kernels, clients = start(mode, 1, runsc, work)
    try:
        c, xs = clients[0], []
        for i in range(runs + 20):
            t = time.perf_counter()
            c.send()
            if not c.wait(30):
                raise RuntimeError(f"{mode}: an execute did not finish")
            if i >= 20:
                xs.append((time.perf_counter() - t) * 1000)
        return xs
    finally:
        stop(kernels, clients)


def busy(mode, n, duration, runsc, work):
    """Executes/s of n kernels, one execute in flight on each."""
    kernels, clients = start(mode, n, runsc, work)
    try:
        poller, owner = zmq.Poller(), {}
        for c in clients:
            for s in (c.shell, c.iopub):
                poller.register(s, zmq.POLLIN)
                owner[s] = c
            c.send()
        done, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < duration:
            for sock, _ in poller.poll(100):
                c = owner[sock]
                while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    if c.on_message(sock):
                        done += 1
                        c.send()
        return done / (time.monotonic() - t0)
    finally:
        stop(kernels, clients)


class StateFloor:
    """runsc's own time on the paths of sandgate's state operations: a relay
    kernel laid out as sandgate's, an idle session made by setup, and what
    kernelmgr/sandbox/pause.c does to it with nothing of sandgate around —
    sandgate-init's detach, `runsc checkpoint` (zero pages excluded),
    `runsc restore --background` into the same or a new sandbox, the
    relay's attach, then a fresh lean client's first result (a kernel_info
    handshake for IOPub, then `1`).  round() gives one of each, in ms:
      pause              detach, checkpoint, delete
      resume             restore into the same sandbox to the first result
      snapshot           detach, checkpoint --leave-running, attach
      from snapshot      a new sandbox restored from it to its first result
                         (a roll back is the same path: sandgate removes
                         the old sandbox in the background)
      fork               snapshot + from snapshot, one after the other
      8 from one         8 new sandboxes from one image at once, all answering
    """

    def __init__(self, runsc, setup):
        self.runsc, self.ctx = runsc, zmq.Context.instance()
        self.work = tempfile.mkdtemp(prefix="sg-floor-", dir="/var/tmp")
        os.chmod(self.work, 0o755)
        self.kernel = Kernel("relay", runsc, self.work)
        self.result(self.kernel, setup, step=1)
        self.n = 0

    def result(self, k, code="1", step=0.02):
        c = Client(k.client, self.ctx)
        try:
            c.ready(step=step)
            c.send(code=code)
            if not c.wait(120):
                raise RuntimeError("no result")
        finally:
            c.close()

    def restored(self, image):
        k = Kernel("relay", self.runsc, self.work, From=(self.kernel, image))
        self.result(k)
        return k

    def round(self):
        k, out = self.kernel, {}
        self.n += 1
        image = f"{self.work}/image-{self.n}"

        def timed(name, fn):
            t = time.perf_counter()
            got = fn()
            out[name] = (time.perf_counter() - t) * 1000
            return got

        def pause():
            k.detach()
            k.checkpoint(image + "p", leave_running=False)

        def snapshot(to=image):
            k.detach()
            k.checkpoint(to, leave_running=True)
            k.attach()

        timed("pause", pause)
        timed("resume", lambda: (k.restore(image + "p"), self.result(k)))
        timed("snapshot", snapshot)
        made = [timed("from snapshot", lambda: self.restored(image))]
        made.append(timed("roll back", lambda: self.restored(image)))
        made.append(timed("fork", lambda: (snapshot(image + "f"), self.restored(image + "f"))[1]))
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            made += timed("8 from one", lambda: list(pool.map(
                lambda _: self.restored(image), range(8))))
        for m in made:
            m.stop()
        for i in ("", "p", "f"):
            shutil.rmtree(image + i, ignore_errors=True)
        return out

    def close(self):
        self.kernel.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def measure(runsc, runs=200, kernels=32, duration=15, rounds=2):
    """{"p50": {mode: [ms...]}, "busy": {mode: executes/s}}, interleaved."""
    work = tempfile.mkdtemp(prefix="sg-floor-", dir="/var/tmp")
    os.chmod(work, 0o755)
    try:
        p50 = {m: [] for m in MODES}
        for _ in range(rounds):
            for m in MODES:
                p50[m] += p50_of(m, runs, runsc, work)
        rps = {m: busy(m, kernels, duration, runsc, work) for m in ("plain", "runsc")}
        return {"p50": p50, "busy": rps}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--kernels", type=int, default=32)
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--runsc", default="/usr/local/bin/runsc")
    ap.add_argument("--state", type=int, default=0, metavar="ROUNDS",
                    help="only the state operations' floor, this many rounds")
    a = ap.parse_args()
    if a.state:
        f = StateFloor(a.runsc, "import numpy as np\narr = np.arange(10**6)\n"
                       "big = list(range(10**6))")
        try:
            rows = [f.round() for _ in range(a.state)]
        finally:
            f.close()
        for op in rows[0]:
            xs = [r[op] for r in rows]
            print(f"{op:14} {statistics.median(xs):7.1f} ms ({min(xs):.1f}-{max(xs):.1f})")
        return
    r = measure(a.runsc, a.runs, a.kernels, a.duration)
    plain = statistics.median(r["p50"]["plain"])
    for m in MODES:
        x = statistics.median(r["p50"][m])
        print(f"{m:6} `1+1` p50 {x:.2f} ms ({x / plain:.2f}x plain)")
    for m, v in r["busy"].items():
        print(f"{m:6} {a.kernels} busy: {v:.0f} executes/s ({v / r['busy']['plain']:.2f}x plain)")


if __name__ == "__main__":
    main()
