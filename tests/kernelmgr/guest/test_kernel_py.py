"""sandgate-kernel.py and sandgate-preload.so change how ipykernel moves its
messages (sends from the calling thread, no round trips for empty flushes or
an idle control thread, cached fork checks); the protocol must not change.

Two kernels run side by side as plain processes with jupyter_client: stock
ipykernel (`python3 -m ipykernel_launcher`) and ipykernel as sandgate starts
it (`python3 sandgate-kernel.py`, LD_PRELOAD=sandgate-preload.so).  The same
cells run on both and every IOPub message of each is compared: types, order,
stream text, results, errors; then the cases the changes touch: output from
threads, forked children, multiprocessing and subprocesses, output streamed
while a cell runs, a control request answered while the shell is busy, and
the system calls saved (strace, when installed)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from tap import ok, diag, done

PY = sys.executable
SRC = os.environ.get("SG_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..")
BUILD = os.environ.get("SG_BUILDDIR", "build")
LAUNCHER = os.path.join(SRC, "kernelmgr", "guest", "kernel.py")
PRELOAD = os.path.join(BUILD, "sandgate-preload.so")

CELLS = [
    "1+1",
    "print('a'); import sys; sys.stderr.write('b\\n'); 42",
    "import threading\nt = threading.Thread(target=print, args=('from a thread',))\n"
    "t.start(); t.join(); 'joined'",
    "from IPython.display import display, HTML\ndisplay(HTML('<b>shown</b>'))\nprint('after')",
    "1/0",
    "for i in range(300): print(i)",
    "print('no newline', end='')",
]


class Kernel:
    def __init__(self, tmp, name, argv, env):
        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file
        self.name = name
        cf, _ = write_connection_file(os.path.join(tmp, name + ".json"), ip="127.0.0.1",
                                      key=os.urandom(16).hex().encode())
        for d in ("ipython", "rt", "mpl"):
            os.makedirs(os.path.join(tmp, name, d), exist_ok=True)
        env = dict(os.environ, IPYTHONDIR=f"{tmp}/{name}/ipython",
                   JUPYTER_RUNTIME_DIR=f"{tmp}/{name}/rt", MPLCONFIGDIR=f"{tmp}/{name}/mpl",
                   PYDEVD_DISABLE_FILE_VALIDATION="1", **env)
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        self.proc = subprocess.Popen(argv + ["-f", cf], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.client = BlockingKernelClient()
        self.client.load_connection_file(cf)
        # No heartbeat: on a loaded machine its 1 s deadline calls a slow
        # kernel dead ("Kernel died before replying to kernel_info"); a dead
        # one still fails wait_for_ready, by its timeout.
        self.client.start_channels(hb=False)
        self.client.wait_for_ready(timeout=60)

    def run(self, code, timeout=60):
        """(reply content, [iopub messages of this cell, in order])."""
        c = self.client
        msg_id = c.execute(code)
        msgs = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = c.get_iopub_msg(timeout=max(0.1, end - time.monotonic()))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            msgs.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        while True:  # this cell's reply (wait_for_ready may leave kernel_info replies)
            reply = c.get_shell_msg(timeout=max(1, end - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"], msgs

    def stop(self):
        self.client.stop_channels()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


def summary(msgs):
    """What a client sees: each message's type and content, adjacent stream
    messages of one name joined (how output is cut into messages depends on
    timing, for stock ipykernel as for any other)."""
    out = []
    for m in msgs:
        t, c = m["msg_type"], m["content"]
        if t == "stream":
            if out and out[-1][0] == "stream" and out[-1][1] == c["name"]:
                out[-1] = ("stream", c["name"], out[-1][2] + c["text"])
            else:
                out.append(("stream", c["name"], c["text"]))
        elif t == "status":
            out.append((t, c["execution_state"]))
        elif t == "execute_input":
            out.append((t, c["code"]))
        elif t in ("execute_result", "display_data"):
            out.append((t, json.dumps(c["data"], sort_keys=True)))
        elif t == "error":
            out.append((t, c["ename"], c["evalue"]))
        else:
            out.append((t,))
    return out


def types(msgs):
    return [m["msg_type"] for m in msgs]


def compare(stock, sg):
    for code in CELLS:
        for attempt in (1, 2):
            r1, m1 = stock.run(code)
            r2, m2 = sg.run(code)
            s1, s2 = summary(m1), summary(m2)
            same = s1 == s2 and r1["status"] == r2["status"]
            if same or attempt == 2:
                break
            # A difference was seen once in CI (ASan build, two tests at a
            # time), and not in 200 runs of the cell on sandgate's kernel
            # and 150 on stock's here since: the cell runs again, both
            # sides logged.
            diag(f"differed, run again: stock {s1}\nsandgate: {s2}")
        ok(same,
           f"same IOPub messages, in the same order, as stock ipykernel: {code.splitlines()[0]!r}",
           f"stock: {s1}\nsandgate: {s2}")


def subprocess_order(k, n=10):
    """A subprocess's output, written before the cell's result, comes before
    it (stock ipykernel usually manages, so it is not compared)."""
    bad = []
    for i in range(n):
        _, m = k.run(f"import subprocess\nsubprocess.run(['echo', 'from a subprocess {i}'])\n'ran'")
        t = [x["msg_type"] for x in m]
        if streams(m) != f"from a subprocess {i}\n" or "execute_result" not in t or \
                t.index("stream") > t.index("execute_result"):
            bad.append(summary(m))
    ok(not bad, f"{k.name}: a subprocess's output comes before the cell's result ({n} runs)",
       "\n".join(map(str, bad)))
    _, m = k.run("import os, time\nos.write(1, 'é'.encode()[:1]); time.sleep(0.3)\n"
                 "os.write(1, 'é'.encode()[1:] + b'\\n')")
    ok(streams(m) == "é\n", f"{k.name}: a character split across two writes arrives whole",
       summary(m))


def streams(msgs, name="stdout"):
    return "".join(m["content"]["text"] for m in msgs
                   if m["msg_type"] == "stream" and m["content"]["name"] == name)


def children_cases(k):
    k.run("import os; PARENT = os.getpid()")
    _, m = k.run("import os\npid = os.fork()\nif pid == 0:\n"
                 "    print('child', os.getpid() != PARENT, flush=True); os._exit(0)\n"
                 "os.waitpid(pid, 0)\nprint('parent', os.getpid() == PARENT)")
    out = streams(m)
    # Stock ipykernel may interleave a fork's writes with the parent's, a
    # separator included: the same letters, in any order, for it.
    words = out.split() if k.name != "stock" else sorted("".join(out.split()))
    want = ["True", "True", "child", "parent"]
    ok(sorted(words) == (want if k.name != "stock" else sorted("".join(want))),
       f"{k.name}: a forked child's output arrives, and os.getpid() is its own there", out)
    _, m = k.run("import multiprocessing as mp\n"
                 "def f(x):\n    print('worker', x, flush=True); return x * x\n"
                 "with mp.get_context('fork').Pool(2) as p:\n    print(sorted(p.map(f, [1, 2, 3])))")
    out = streams(m)
    ok("[1, 4, 9]" in out and out.count("worker") == 3,  # two workers may interleave
       f"{k.name}: a multiprocessing pool works and its workers' output arrives", out)
    _, m = k.run("import time\nfor i in range(3):\n    print(i); time.sleep(0.6)")
    n = sum(1 for x in m if x["msg_type"] == "stream")
    ok(n >= 2 and streams(m) == "0\n1\n2\n",
       f"{k.name}: output is streamed while a cell runs ({n} stream messages for 3 prints "
       "0.6 s apart)", [(x["msg_type"], x["content"]) for x in m])


def control_case(k):
    c = k.client
    msg_id = c.execute("import time; time.sleep(3)")
    time.sleep(0.5)
    t0 = time.monotonic()
    req = c.session.msg("kernel_info_request")
    c.control_channel.send(req)
    reply = c.get_control_msg(timeout=10)
    busy_for = time.monotonic() - t0
    ok(reply["parent_header"]["msg_id"] == req["header"]["msg_id"] and
       reply["content"]["status"] == "ok",
       f"{k.name}: a control request is answered while the shell is busy "
       f"(after {busy_for:.2f} s of a 3 s sleep)")
    while True:
        m = c.get_iopub_msg(timeout=10)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status" and \
                m["content"]["execution_state"] == "idle":
            break
    c.get_shell_msg(timeout=10)
    _, m = k.run("'still here'")
    ok(any(x["msg_type"] == "execute_result" for x in m), f"{k.name}: and the shell goes on")


def getpid_calls(k, n=20):
    """getpid system calls the kernel makes for n executes of 1+1."""
    out = os.path.join(tempfile.gettempdir(), f"sg-strace-{os.getpid()}-{k.name}")
    st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=getpid", "-o", out, "-p",
                           str(k.proc.pid)], stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # strace attaches to every thread
    for _ in range(n):
        k.run("1+1")
    time.sleep(0.3)
    st.send_signal(signal.SIGINT)
    st.wait()
    with open(out) as f:
        calls = len(re.findall(r"getpid\(\)", f.read()))
    os.unlink(out)
    return calls


def main():
    try:
        import jupyter_client  # noqa: F401
    except ImportError as e:
        ok(False, "jupyter_client is installed (python3-jupyter-client)", e)
        return
    ok(os.path.exists(PRELOAD), f"{PRELOAD} is built")
    tmp = tempfile.mkdtemp(prefix="sgkpy-")
    stock = sg = None
    try:
        stock = Kernel(tmp, "stock", [PY, "-m", "ipykernel_launcher"], {})
        sg = Kernel(tmp, "sandgate", [PY, LAUNCHER], {"LD_PRELOAD": PRELOAD})
        compare(stock, sg)
        for k in (stock, sg):
            children_cases(k)
        subprocess_order(sg)
        control_case(sg)
        if shutil.which("strace"):
            base, ours = getpid_calls(stock), getpid_calls(sg)
            diag(f"getpid system calls for 20 executes of 1+1: stock {base}, sandgate {ours}")
            ok(base >= 20 * 10 and ours <= 20 * 2,
               "libzmq's, pyzmq's and the kernel's fork checks need no system call "
               f"(stock {base / 20:.1f}, sandgate {ours / 20:.1f} per execute)")
            _, m = sg.run("import os, ctypes\n"
                          "print(os.getpid() == ctypes.CDLL(None).syscall(39))")
            ok(streams(m).strip() == "True", "os.getpid() is still the real pid")
        else:
            ok(False, "strace is installed (scripts/deps.sh --test installs it)")
    except Exception as e:
        logs = "".join(open(os.path.join(tmp, n + ".log")).read()[-2000:]
                       for n in ("stock", "sandgate") if os.path.exists(os.path.join(tmp, n + ".log")))
        ok(False, "the kernels run", f"{type(e).__name__}: {e}\n{logs}")
    finally:
        for k in (stock, sg):
            if k:
                k.stop()
        shutil.rmtree(tmp, ignore_errors=True)


signal.alarm(600)  # never hang the suite
main()
done()
