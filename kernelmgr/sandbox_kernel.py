"""sandgate-kernel.py: how sandgate starts ipykernel inside a gVisor sandbox.

The kernelspec's `python3 -m ipykernel_launcher -f FILE` becomes
`python3 /sandgate-kernel.py -f FILE`: this file adjusts ipykernel for a
sandbox that can be paused (`runsc checkpoint`), then runs
ipykernel_launcher exactly as `-m` would.

ipykernel listens on a loopback TCP port for the output of forked
subprocesses (IOPubThread's "pipe").  runsc cannot save a listening TCP
socket that is being polled, and a failed checkpoint ends the sandbox; the
same pipe over an abstract Unix socket (the sandbox's own, like the
kernel's channels) is saved and restored like any other.  Nothing else
changes: forked children's output still reaches the notebook.

Everything here is guarded: with an ipykernel whose internals differ, the
kernel runs unchanged (and a pause then fails cleanly before the
checkpoint: sandgate-init refuses to detach while TCP sockets exist).
"""
import os
import runpy
import sys


def _abstract_pipe():
    try:
        from ipykernel import iostream
    except Exception:  # no ipykernel: runpy below reports it
        return
    thread = getattr(iostream, "IOPubThread", None)
    if thread is None or not hasattr(thread, "_setup_pipe_in") or \
            not hasattr(thread, "_setup_pipe_out") or not hasattr(thread, "_handle_pipe_msg"):
        return
    zmq, stream = iostream.zmq, iostream.ZMQStream

    def _setup_pipe_in(self):
        ctx = self.socket.context
        self._pipe_uuid = os.urandom(16)
        pipe_in = ctx.socket(zmq.PULL)
        pipe_in.linger = 0
        self._pipe_endpoint = "ipc://@sandgate-iopub-pipe-%d-%s" % (os.getpid(),
                                                                   os.urandom(6).hex())
        try:
            pipe_in.bind(self._pipe_endpoint)
        except zmq.ZMQError as e:
            print("sandgate-kernel: no pipe for subprocess output: %s" % e, file=sys.__stderr__)
            self._pipe_flag = False
            pipe_in.close()
            return
        self._pipe_in = stream(pipe_in, self.io_loop)
        self._pipe_in.on_recv(self._handle_pipe_msg)

    def _setup_pipe_out(self):
        ctx = zmq.Context()  # a new context after fork
        pipe_out = ctx.socket(zmq.PUSH)
        pipe_out.linger = 3000
        pipe_out.connect(self._pipe_endpoint)
        return ctx, pipe_out

    thread._setup_pipe_in = _setup_pipe_in
    thread._setup_pipe_out = _setup_pipe_out


_abstract_pipe()
sys.argv[0] = "ipykernel_launcher"
runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
