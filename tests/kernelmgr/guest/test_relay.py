"""sandgate-init's relay (SANDGATE_RELAY, kernelmgr/guest/init.c), outside
gVisor: the real build/sandgate-init as a plain process, its host sockets in a
temporary directory and the kernel's in the abstract namespace under a unique
name.  First with a small Python "kernel" (echo, checksummed bulk transfers
both ways, a port it binds only when told), then with ipykernel and
jupyter_client: the kernel keeps its state across detach (SIGUSR1) and attach
(SIGUSR2), which is what pausing a session with `runsc checkpoint` relies on."""
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tap import ok, diag, done

INIT = os.environ.get("SANDGATE_INIT") or os.path.join(
    os.environ.get("SG_BUILDDIR", "build"), "sandgate-init")
PY = sys.executable
BIG = 4 << 20

# The stand-in kernel: binds NAME-PORT (abstract) for each PORT and serves
# one command per connection: "echo", "both N" (sends N bytes of
# Random(1) while reading N bytes, then the sha256 of what it read),
# "bind P" (binds one more port), "exit S".
FAKE_KERNEL = r'''
import hashlib, json, os, random, signal, socket, sys, threading, time
name, tmp, ports = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
with open(tmp + "/env.json.new", "w") as f:
    json.dump(dict(os.environ), f)
os.rename(tmp + "/env.json.new", tmp + "/env.json")
signal.signal(signal.SIGUSR1, lambda *a: print("got USR1", flush=True))

def handle(c):
    f = c.makefile("rb")
    cmd = f.readline().split()
    if not cmd:
        return
    if cmd[0] == b"echo":
        while True:
            d = f.read1(65536)
            if not d:
                break
            c.sendall(d)
    elif cmd[0] == b"both":
        n = int(cmd[1])
        t = threading.Thread(target=c.sendall, args=(random.Random(1).randbytes(n),))
        t.start()
        got = f.read(n)
        t.join()
        c.sendall(hashlib.sha256(got).hexdigest().encode())
    elif cmd[0] == b"bind":
        bind(int(cmd[1]))
        c.sendall(b"ok\n")
    elif cmd[0] == b"exit":
        os._exit(int(cmd[1]))
    c.close()

def serve(l):
    while True:
        c, _ = l.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()

def bind(port):
    l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    l.bind("\0%s-%d" % (name, port))
    l.listen(128)
    threading.Thread(target=serve, args=(l,), daemon=True).start()

for p in ports:
    bind(p)
print("ready", flush=True)
while True:
    try:
        time.sleep(3600)
    except KeyboardInterrupt:
        print("got KeyboardInterrupt", flush=True)
'''


def wait_for(cond, timeout=10.0, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def read_file(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def connect(path, timeout=10):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def recv_exactly(s, n):
    buf = bytearray()
    while len(buf) < n:
        d = s.recv(min(1 << 20, n - len(buf)))
        if not d:
            break
        buf += d
    return bytes(buf)


def echo_ok(path, payload):
    try:
        with connect(path) as s:
            s.sendall(b"echo\n" + payload)
            return recv_exactly(s, len(payload)) == payload
    except OSError as e:
        diag(f"{path}: {e}")
        return False


def echo_ok_quiet(path):
    try:
        return echo_ok(path, b"q")
    except OSError:
        return False


def closed_at_once(s, timeout=3):
    """True when the peer closes s (EOF or reset) within timeout."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except OSError:
        return False


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def start_init(argv, relay, log, **kw):
    env = dict(os.environ)
    env.pop("SANDGATE_RELAY", None)
    if relay is not None:
        env["SANDGATE_RELAY"] = relay
    # A network namespace of its own, as in a sandbox: init refuses to detach
    # while TCP/UDP sockets exist, and would otherwise see the host's.
    return subprocess.Popen(["unshare", "--net", INIT] + argv, env=env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kw)


def stop(p):
    if p and p.poll() is None:
        for c in children(p.pid):  # the kernel leads its own process group
            try:
                os.killpg(c, signal.SIGKILL)
            except OSError:
                pass
        p.kill()
        p.wait()


def fake_kernel_part(tmp):
    name = f"sgrelay-test-{os.getpid()}-{random.randrange(1 << 30)}"
    host = os.path.join(tmp, "k")
    ports = [1, 2, 3, 9]  # the kernel binds 9 only when told
    paths = [f"{host}-{p}" for p in ports]
    with open(paths[1], "w") as f:  # a stale file where a socket goes
        f.write("stale")
    kernel = os.path.join(tmp, "kernel.py")
    with open(kernel, "w") as f:
        f.write(FAKE_KERNEL)
    log_path = os.path.join(tmp, "init.log")
    log = open(log_path, "w")
    p = start_init([PY, kernel, name, tmp, "1", "2", "3"], f"{host}=@{name}:1,2,3,9", log)
    try:
        ok(wait_for(lambda: "ready" in read_file(log_path)), "the kernel starts under init",
           read_file(log_path))
        ok(all(os.path.exists(x) for x in paths), "a host socket for every port",
           os.listdir(tmp))
        ok(all((os.stat(x).st_mode & 0o777) == 0o770 for x in paths),
           "host sockets are owner and group rw (umask 007), the stale file replaced",
           [oct(os.stat(x).st_mode) for x in paths])
        env = json.loads(read_file(os.path.join(tmp, "env.json")))
        ok("SANDGATE_RELAY" not in env, "SANDGATE_RELAY is not in the kernel's environment")

        ok(all(echo_ok(paths[i], f"hello {i} ".encode() * 1000) for i in range(3)),
           "bytes both ways on ports 1, 2 and 3")

        # The kernel has not bound port 9: the relay closes at once.
        s = connect(paths[3])
        ok(closed_at_once(s), "a connection to a port the kernel has not bound is closed at once")
        s.close()
        with connect(paths[0]) as s:
            s.sendall(b"bind 9\n")
            ok(s.recv(3) == b"ok\n", "the kernel binds port 9 later")
        ok(echo_ok(paths[3], b"late" * 10), "and port 9 then relays, without a new attach")

        # 4 MiB each way at once, checksummed on both ends.
        with connect(paths[1], timeout=120) as s:  # a loaded machine is slow, not wrong
            s.sendall(b"both %d\n" % BIG)
            up = random.Random(2).randbytes(BIG)
            t = threading.Thread(target=s.sendall, args=(up,))
            t.start()
            down = recv_exactly(s, BIG)
            t.join()
            digest = recv_exactly(s, 64)
        ok(hashlib.sha256(down).digest() == hashlib.sha256(random.Random(1).randbytes(BIG)).digest(),
           "4 MiB from the kernel arrive intact", len(down))
        ok(digest == hashlib.sha256(up).hexdigest().encode(),
           "while 4 MiB to the kernel arrive intact too", digest)

        # 50 connections open at once.
        conns = [connect(paths[i % 3]) for i in range(50)]
        for i, s in enumerate(conns):
            s.sendall(b"echo\n" + b"conn %d;" % i * 50)
        good = sum(recv_exactly(s, len(b"conn %d;" % i * 50)) == b"conn %d;" % i * 50
                   for i, s in enumerate(conns))
        for s in conns:
            s.close()
        ok(good == 50, "50 concurrent connections each get their own bytes back", good)

        # Idle: blocked in epoll_wait, no CPU.
        time.sleep(0.3)
        t0 = cpu_ticks(p.pid)
        time.sleep(1.5)
        ok(cpu_ticks(p.pid) == t0, "init uses no CPU while idle")

        # System calls per message: recv and send each way, nothing else.
        if shutil.which("strace"):
            out = os.path.join(tmp, "strace.out")
            st = subprocess.Popen(["strace", "-c", "-o", out, "-p", str(p.pid)],
                                  stderr=subprocess.PIPE, text=True)
            st.stderr.readline()  # "attached"
            time.sleep(0.2)
            with connect(paths[0]) as s:
                s.sendall(b"echo\n")
                time.sleep(0.2)
                for i in range(200):
                    s.sendall(b"x" * 100)
                    recv_exactly(s, 100)
            time.sleep(0.2)
            st.send_signal(signal.SIGINT)
            st.wait()
            calls = {}
            for line in read_file(out).splitlines():
                f = line.split()
                if len(f) >= 5 and f[-1].isidentifier() and f[3].isdigit():
                    calls[f[-1]] = int(f[3])
            calls.pop("total", None)
            diag(f"init's system calls for 200 echo round trips on one connection: {calls}")
            # Besides: accept4, socket, connect, 2 epoll_ctl to watch the two
            # ends and 2 to stop watching them before they close (a kernel
            # being started holds a copy of every fd for a moment), the
            # "echo" line (3), EOF (2), 2 close.  One more call per message
            # would be 200.
            ok(sum(calls.values()) <= 200 * 6 + 20 and calls.get("epoll_ctl", 0) <= 4,
               "6 system calls per round trip (epoll_wait, recvfrom, sendto each way)", calls)
        else:
            diag("no strace: system calls not counted")

        # Detach: open connections close, the listeners close and their
        # files go (a restore walks again every file the sandbox knew), then
        # the marker says so.  (Where the sandbox cannot remove them, the
        # launcher does, after the marker.)
        marker = host + ".detached"
        held = [connect(x) for x in paths[:3]]
        for s in held:
            s.sendall(b"echo\nping")
            recv_exactly(s, 4)
        p.send_signal(signal.SIGUSR1)
        ok(wait_for(lambda: os.path.exists(marker), 5),
           "SIGUSR1: init says it detached (HOST.detached)", os.listdir(tmp))
        ok(all(closed_at_once(s) for s in held), "and closes every relayed connection")
        for s in held:
            s.close()
        try:
            connect(paths[0]).close()
            refused = False
        except OSError:
            refused = True
        ok(refused, "connecting after a detach fails")
        ok(not any(os.path.exists(x) for x in paths),
           "init removed its socket files itself", os.listdir(tmp))
        ok(p.poll() is None and "got USR1" not in read_file(log_path),
           "SIGUSR1 is init's own, not the kernel's")

        for x in paths + [marker]:  # what the launcher does before a restore
            if os.path.exists(x):
                os.unlink(x)
        p.send_signal(signal.SIGUSR2)
        ok(wait_for(lambda: all(os.path.exists(x) for x in paths), 5),
           "SIGUSR2 brings every host socket back")
        ok(all(echo_ok(x, b"again" * 100) for x in paths), "and traffic flows on every port")

        for sig in (signal.SIGUSR1, signal.SIGUSR1):
            p.send_signal(sig)
            time.sleep(0.2)
        ok(os.path.exists(marker) and not any(echo_ok_quiet(x) for x in paths),
           "a second SIGUSR1 is harmless")
        for sig in (signal.SIGUSR2, signal.SIGUSR2):
            p.send_signal(sig)
            time.sleep(0.2)
        ok(all(os.path.exists(x) for x in paths) and all(echo_ok(x, b"z" * 10) for x in paths),
           "a second SIGUSR2 is harmless, traffic flows")
        ok("sandgate-init:" not in read_file(log_path), "init logged no problem",
           read_file(log_path))

        p.send_signal(signal.SIGINT)
        ok(wait_for(lambda: "got KeyboardInterrupt" in read_file(log_path), 5),
           "SIGINT reaches the kernel as KeyboardInterrupt (init resets what it inherited: "
           "this test may run with SIGINT ignored)")

        with connect(paths[2]) as s:
            s.sendall(b"exit 7\n")
            try:
                rc = p.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
        ok(rc == 7, "init exits with the kernel's status", rc)
    finally:
        stop(p)
        log.close()


def other_cases(tmp):
    log_path = os.path.join(tmp, "plain.log")
    with open(log_path, "w") as log:
        p = start_init([PY, os.path.join(tmp, "kernel.py"), "unused", tmp], None, log)
        try:
            ok(wait_for(lambda: "ready" in read_file(log_path)), "without SANDGATE_RELAY")
            p.send_signal(signal.SIGUSR1)
            ok(wait_for(lambda: "got USR1" in read_file(log_path), 5),
               "SIGUSR1 is forwarded to the kernel as before")
            p.send_signal(signal.SIGTERM)
            ok(p.wait(10) == 128 + signal.SIGTERM, "a kernel killed by SIGTERM: 143")
        finally:
            stop(p)
    r = subprocess.run([INIT, "/bin/true"], env=dict(os.environ, SANDGATE_RELAY="/x=@y"),
                       capture_output=True, text=True, timeout=10)
    ok(r.returncode == 127 and "sandgate-init: bad SANDGATE_RELAY" in r.stderr,
       "a malformed SANDGATE_RELAY is refused", (r.returncode, r.stderr))


def run_code(client, code, timeout=30):
    """The stream text a cell prints, '' on timeout."""
    msg_id = client.execute(code)
    text = ""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            msg = client.get_iopub_msg(timeout=max(0.1, end - time.monotonic()))
        except Exception:
            break
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    return text


def ipykernel_part(tmp):
    try:
        from jupyter_client import BlockingKernelClient
    except ImportError as e:
        ok(False, "jupyter_client is installed (python3-jupyter-client)", e)
        return
    name = f"sgrelay-ipk-{os.getpid()}-{random.randrange(1 << 30)}"
    host = os.path.join(tmp, "ipk")
    key = os.urandom(16).hex()
    ports = dict(shell_port=1, iopub_port=2, stdin_port=3, control_port=4, hb_port=5)
    conn = dict(ports, transport="ipc", ip="@" + name, key=key, signature_scheme="hmac-sha256",
                kernel_name="")
    cf = os.path.join(tmp, "conn.json")
    with open(cf, "w") as f:
        json.dump(conn, f)
    for d in ("ipython", "rt", "mpl"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    log_path = os.path.join(tmp, "ipk.log")
    log = open(log_path, "w")
    os.environ.update(IPYTHONDIR=tmp + "/ipython", JUPYTER_RUNTIME_DIR=tmp + "/rt",
                      MPLCONFIGDIR=tmp + "/mpl", PYDEVD_DISABLE_FILE_VALIDATION="1")
    # As sandgate starts it: through sandgate-kernel.py, whose subprocess
    # pipe is an abstract socket (stock ipykernel listens on loopback TCP,
    # and init would rightly refuse to detach).
    launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                            "kernelmgr", "guest", "kernel.py")
    p = start_init([PY, launcher, "-f", cf],
                   f"{host}=@{name}:1,2,3,4,5", log)
    paths = [f"{host}-{n}" for n in range(1, 6)]

    def client():
        c = BlockingKernelClient()
        c.load_connection_info(dict(conn, ip=host))
        # No heartbeat channel: under load its 1 s deadline calls a slow
        # kernel dead ("Kernel died before replying to kernel_info").
        c.start_channels(hb=False)
        c.wait_for_ready(timeout=60)
        return c

    c = None
    try:
        c = client()
        info = c.kernel_info(reply=True, timeout=30)
        ok(info["content"]["status"] == "ok", "ipykernel answers kernel_info through the relay")
        ok(run_code(c, "x = 6*7; print(x)").strip() == "42", "and runs x = 6*7; print(x)")

        kpid = children(p.pid)[0]
        if shutil.which("strace"):
            r = subprocess.run(["timeout", "2", "strace", "-f", "-e", "trace=connect", "-p",
                                str(kpid)], capture_output=True, text=True)
            n = r.stderr.count("connect(")
            diag(f"the kernel's connect calls over 2 s while idle: {n}")
            ok(n < 3, "ipykernel does not keep reconnecting (its debug shell socket connects)",
               r.stderr[-2000:])
        c.stop_channels()
        c = None

        marker = host + ".detached"
        p.send_signal(signal.SIGUSR1)
        ok(wait_for(lambda: os.path.exists(marker), 5), "SIGUSR1: detached")
        for x in paths + [marker]:
            if os.path.exists(x):  # init removes its sockets itself
                os.unlink(x)
        p.send_signal(signal.SIGUSR2)
        ok(wait_for(lambda: all(os.path.exists(x) for x in paths), 5),
           "SIGUSR2: back")
        c = client()
        ok(run_code(c, "print(x)").strip() == "42",
           "a fresh client finds the kernel's state (x is still 42)")
    except Exception as e:
        ok(False, "ipykernel through the relay", f"{type(e).__name__}: {e}\n" +
           read_file(log_path)[-3000:])
    finally:
        if c:
            c.stop_channels()
        stop(p)
        log.close()


signal.alarm(300)  # never hang the suite
tmp = tempfile.mkdtemp(prefix="sgrelay-")
try:
    fake_kernel_part(tmp)
    other_cases(tmp)
    ipykernel_part(tmp)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done()
