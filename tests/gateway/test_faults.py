"""Faults end in clear, specific errors and lose nothing else (issue 20).

Each part breaks one thing sandgate depends on and asserts what a client
sees (status and message), what the log says, and that a neighbour session
keeps its variables:

1. a session's sandbox killed (SIGKILL of its runsc-sandbox process);
2. the state directory's disk full (a small tmpfs as its parent);
3. runsc missing (--runsc /nonexistent) or failing (a wrapper that exits 1);
4. the privileged launcher killed (SIGKILL of sandgate-priv);
5. a kernel that never becomes ready (a kernelspec whose argv sleeps);
6. a client that opens 1,000 connections and sends nothing.

docs/operations.md, "Faults", says what each looks like and what the
operator does.  Needs root and runsc.  FAULTS=1,3 runs only those parts."""
import json
import os
import resource
import signal
import socket
import subprocess
import tempfile
import threading
import time

from sgd import Daemon, SANDGATE, TOKEN, never_ready_kernelspec, sandbox_pids
from tap import ok, diag, done

PARTS = {int(p) for p in os.environ.get("FAULTS", "1,2,3,4,5,6").split(",") if p}


def run(d, ctx, code, timeout=120):
    """One execution as a JSON document: (status, body, seconds)."""
    t0 = time.monotonic()
    st, r = d.json("POST", "/execute", {"code": code, "context_id": ctx},
                   headers={"Accept": "application/json"}, timeout=timeout)
    return st, r, time.monotonic() - t0


def context(d, code):
    """A new context that ran code."""
    st, c = d.json("POST", "/contexts", {})
    if st != 201:
        raise RuntimeError(f"POST /contexts: {st} {c}")
    st, r, _ = run(d, c["id"], code)
    if st != 200 or r.get("error"):
        raise RuntimeError(f"execute: {st} {r}")
    return c["id"]


def neighbours(d):
    """Two contexts holding a variable each: a = 'kept-a', b = 'kept-b'."""
    return context(d, "a = 'kept-a'"), context(d, "b = 'kept-b'")


def failure(st, r):
    """An execution's failure: a KernelError or TimeoutError in its body (the
    kernel failed while it waited) or an HTTP error (it was already dead)."""
    if st == 200:
        err = (r or {}).get("error") or {}
        return err.get("name"), err.get("value", "")
    return st, (r or {}).get("message", "")


def fails_dead(d, ctx, kinds, texts, what, seconds):
    """The context's next execution fails as kinds, its message holding every
    one of texts, within seconds; the context is dead after it."""
    st, r, took = run(d, ctx, "1+1", timeout=60)
    diag(f"execute: {st} {r} ({took:.2f} s)")
    kind, msg = failure(st, r)
    ok(kind in kinds and all(t in msg for t in texts), what, (st, r))
    ok(took < seconds, f"within {seconds} s ({took:.1f} s)")
    st, c = d.json("GET", "/contexts/" + ctx)
    ok(st == 200 and c["state"] == "dead", "the context is reported dead", (st, c))


def keeps(d, ctx, expr, want, what):
    st, r, _ = run(d, ctx, f"print({expr})")
    ok(st == 200 and r.get("stdout") == want + "\n", what, (st, r))


def logged(d, text, seconds=5):
    return d.wait_log(text, seconds)


def launcher_pid(d):
    out = subprocess.run(["pgrep", "-P", str(d.proc.pid), "-x", "sandgate-priv"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


# --- 1. a session's sandbox killed ---------------------------------------------------------
if 1 in PARTS:
    d = Daemon("--pool-size", "0")
    try:
        a, b = neighbours(d)
        pids = sandbox_pids(a)
        ok(len(pids) == 1, "context A has one runsc-sandbox process", pids)
        for p in pids:
            os.kill(p, signal.SIGKILL)
        st, r, took = run(d, a, "print(a)")
        diag(f"execute on the killed sandbox: {st} {r} ({took:.2f} s)")
        ok(took < 5, f"the next execute on it answers within 5 s ({took:.2f} s)")
        kind, msg = failure(st, r)
        ok(kind in ("KernelError", 503) and "the kernel's sandbox exited" in msg,
           "with a KernelError (or 503) saying its sandbox exited", (st, r))
        st, r, took = run(d, a, "print(a)")
        diag(f"the execute after: {st} {r} ({took:.2f} s)")
        ok(st == 503 and "is dead" in r.get("message", "")
           and "the kernel's sandbox exited" in r.get("message", "")
           and "restart" in r.get("message", ""),
           "the next one: 503, dead, why, and that a restart gives it a new kernel", (st, r))
        st, c = d.json("GET", "/contexts/" + a)
        ok(st == 200 and c["state"] == "dead", "GET /contexts/A reports it dead", (st, c))
        ok(logged(d, f"kernel {a} died"), "the log says the kernel died")
        keeps(d, b, "b", "kept-b", "context B keeps its variables")
        st, c = d.json("POST", f"/contexts/{a}/restart")
        ok(st == 204, "restarting A gives it a new kernel", (st, c))
        st, r, _ = run(d, a, "print('fresh')")
        ok(st == 200 and r.get("stdout") == "fresh\n", "which runs code", (st, r))
    finally:
        d.stop()

# --- 2. the state directory's disk full ----------------------------------------------------
if 2 in PARTS:
    mnt = tempfile.mkdtemp(prefix="sg-full-", dir="/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300m,mode=0755", "tmpfs", mnt],
                   check=True)
    filler = os.path.join(mnt, "filler")
    try:
        d = Daemon("--pool-size", "0", "--pause-after", "0", "--workspace-size", "64",
                   parent=mnt)
        try:
            a = context(d, "import os; a = 'kept-a'")
            st, _, _ = d.request("PUT", f"/contexts/{a}/files/before.txt", raw=b"before",
                                 headers={"Content-Type": "application/octet-stream"})
            ok(st in (200, 201), "an upload works before the disk fills", st)
            sv = os.statvfs(mnt)
            with open(filler, "wb") as f:  # until the tmpfs says no
                chunk = b"\1" * (1 << 20)
                try:
                    while True:
                        f.write(chunk)
                        f.flush()
                except OSError:
                    pass
            sv = os.statvfs(mnt)
            diag(f"free on the state dir's disk: {sv.f_bavail * sv.f_frsize} bytes")
            st, e = d.json("POST", "/contexts", {})
            diag(f"POST /contexts: {st} {e}")
            ok(st == 507 and "the state directory's disk has 0 MiB free" in e.get("message", ""),
               "POST /contexts: 507 naming the disk", (st, e))
            st, cs = d.json("GET", "/contexts")
            ok(st == 200 and [c["id"] for c in cs] == [a], "and no context is left behind", cs)
            ok(logged(d, "its workspace could not be prepared: the state directory's disk"),
               "the log says why", "".join(d.log[-5:]))
            st, _, body = d.request("PUT", f"/contexts/{a}/files/up.bin", raw=b"x" * (4 << 20),
                                    headers={"Content-Type": "application/octet-stream"})
            e = json.loads(body) if body.strip().startswith(b"{") else {}
            diag(f"PUT a file: {st} {body[:300]!r}")
            ok(st == 507 and "the state directory's disk has 0 MiB free" in e.get("message", ""),
               "an upload: 507 naming the disk", (st, body[:300]))
            keeps(d, a, "os.path.exists('up.bin')", "False", "and leaves no file")
            st, e = d.json("POST", f"/contexts/{a}/pause", timeout=120)
            diag(f"pause: {st} {e}")
            ok(st == 507 and "the state directory's disk has 0 MiB free" in e.get("message", ""),
               "a checkpoint (pause): 507 naming the disk", (st, e))
            keeps(d, a, "a", "kept-a", "the existing session keeps working with its variables")
            os.unlink(filler)
            st, c = d.json("POST", "/contexts", {})
            ok(st == 201, "with space freed, contexts are created again", (st, c))
            st, _, _ = d.request("PUT", f"/contexts/{a}/files/up.bin", raw=b"x" * (4 << 20),
                                 headers={"Content-Type": "application/octet-stream"})
            ok(st in (200, 201), "uploads work again", st)
            keeps(d, a, "open('up.bin').read() == 'x' * (4 << 20), open('before.txt').read()",
                  "True before", "and the session sees both files")
            st, p = d.json("POST", f"/contexts/{a}/pause", timeout=120)
            ok(st == 200 and p.get("state") == "paused", "and it pauses", (st, p))
            keeps(d, a, "a", "kept-a", "and resumes with its variables")
        finally:
            d.stop()
    finally:
        if os.path.exists(filler):
            os.unlink(filler)
        subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)

# --- 3. runsc missing or failing -----------------------------------------------------------
if 3 in PARTS:
    state = tempfile.mkdtemp(prefix="sg-api-", dir="/tmp")
    try:
        p = subprocess.run([SANDGATE, "--listen", "127.0.0.1:0", "--state-dir", state, "--token",
                            TOKEN, "--runsc", "/nonexistent/runsc"],
                           capture_output=True, text=True, timeout=60)
        diag(p.stderr.strip())
        ok(p.returncode == 1 and "runsc not found at /nonexistent/runsc" in p.stderr
           and "listening" not in p.stderr,
           "--runsc /nonexistent: sandgate does not start (status 1) and says runsc is not "
           "found there", (p.returncode, p.stderr))
    finally:
        subprocess.run(["rm", "-rf", state])
    wrapdir = tempfile.mkdtemp(prefix="sg-runsc-", dir="/tmp")
    os.chmod(wrapdir, 0o755)
    wrapper = os.path.join(wrapdir, "runsc")
    with open(wrapper, "w") as f:
        # runsc that works for everything but starting a sandbox
        f.write("#!/bin/sh\nfor a; do [ \"$a\" = run ] && { echo 'runsc: boom: cannot start' >&2;"
                " exit 1; }; done\nexec /usr/local/bin/runsc \"$@\"\n")
    os.chmod(wrapper, 0o755)
    d = Daemon("--pool-size", "0", "--runsc", wrapper)
    try:
        st, c = d.json("POST", "/contexts", {})
        ok(st == 201, "with a runsc that cannot run sandboxes, POST /contexts still answers",
           (st, c))
        fails_dead(d, c["id"], ("KernelError", 503),
                   ("runsc run exited with status 1; kernel log:", "runsc: boom: cannot start"),
                   "the first execute: a KernelError (or 503) with runsc's exit status and its "
                   "message", 30)
        st, h = d.json("GET", "/health")
        ok(st == 200, "the daemon keeps serving", (st, h))
    finally:
        d.stop()
        os.unlink(wrapper)
        os.rmdir(wrapdir)

# --- 4. the launcher killed ------------------------------------------------------------------
# The daemon has dropped root and cannot start another launcher: it refuses
# what needs one (503 naming it), lets the executions under way end, and exits
# with status 70 for its supervisor (systemd's Restart=on-failure) to restart
# it; the sessions' sandboxes keep running and the new sandgate re-adopts them.
if 4 in PARTS:
    # fresh: the daemon loses its launcher and exits with status 70
    d = Daemon("--pool-size", "0")
    try:
        a, b = neighbours(d)
        lp = launcher_pid(d)
        ok(lp is not None, "the daemon runs a launcher", lp)
        running = {}
        code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(1)"
        t = threading.Thread(target=lambda: running.update(zip(("st", "r", "took"),
                                                                run(d, a, code))))
        t.start()
        time.sleep(1)
        os.kill(lp, signal.SIGKILL)
        st, e = d.json("POST", "/contexts", {})
        diag(f"POST /contexts: {st} {e}")
        ok(st == 503 and "launcher is gone" in e.get("message", ""),
           "a new sandbox: 503 saying the launcher is gone", (st, e))
        t.join(60)
        ok(running.get("st") == 200 and running["r"].get("stdout") == "0\n1\n2\n",
           "the execution under way ends with all its output", running)
        try:
            rc = d.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        ok(rc == 70, "then the daemon exits with status 70 for its supervisor", rc)
        d.drain.join(timeout=10)
        ok(not d.sanitizer, "it stops cleanly (no sanitizer report in a sanitizer build)",
           "".join(d.sanitizer[:50]))
        ok(any("the privileged launcher is gone" in l for l in d.log)
           and any("stopping with status 70" in l for l in d.log),
           "its log says the launcher is gone and why it stops", "".join(d.log[-20:]))
        ok(sandbox_pids(a) != [] and sandbox_pids(b) != [], "the sessions' sandboxes keep running")
        d._start()  # what the supervisor does
        keeps(d, a, "a", "kept-a", "a restarted sandgate re-adopts session A with its variables")
        keeps(d, b, "b", "kept-b", "and session B with its")
        st, c = d.json("POST", "/contexts", {})
        ok(st == 201, "and makes new sandboxes again", (st, c))
    finally:
        d.stop()

# --- 5. a kernel that never becomes ready --------------------------------------------------
if 5 in PARTS:
    jp = never_ready_kernelspec()
    env = {"JUPYTER_PATH": jp}
    # Long enough for a real kernel to start on a loaded machine under
    # AddressSanitizer (context A's), short enough to wait out for 'sleepy'.
    d = Daemon("--pool-size", "0", "--start-timeout", "15", env=env)
    try:
        a = context(d, "a = 'kept-a'")
        st, c = d.json("POST", "/contexts", {"language": "sleepy"})
        ok(st == 201, "a context of the kernelspec that never answers is created", (st, c))
        fails_dead(d, c["id"], ("TimeoutError",),
                   ("did not answer within 15000 ms of starting (kernelspec 'sleepy')",),
                   "its first execute: a TimeoutError, the kernel did not answer in "
                   "--start-timeout (15 s)", 30)
        deadline = time.monotonic() + 15  # runsc kill and delete, in the background
        while sandbox_pids(c["id"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        ok(sandbox_pids(c["id"]) == [], "and its sandbox is removed", sandbox_pids(c["id"]))
        keeps(d, a, "a", "kept-a", "the other session keeps its variables")
        st, h = d.json("GET", "/health")
        ok(st == 200, "the daemon keeps serving", (st, h))
    finally:
        d.stop()
        subprocess.run(["rm", "-rf", jp])

# --- 6. 1,000 idle connections ----------------------------------------------------------------
if 6 in PARTS:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), max(hard, 4096)))
    d = Daemon("--pool-size", "0", "--sandbox", "none", "--connection-timeout", "3")
    try:
        host, port = d.url[len("http://"):].split(":")
        ctx = context(d, "x = 1")  # its kernel's sockets are counted before
        time.sleep(0.5)
        before = fds(d.proc.pid)
        idle, refused = [], 0
        for i in range(1000):  # from another loopback address than the clients below
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            try:
                s.connect((host, int(port)))
                idle.append(s)
            except OSError:
                refused += 1
                s.close()
        t0 = time.monotonic()
        st, h = d.json("GET", "/health", timeout=5)
        took = time.monotonic() - t0
        ok(st == 200 and took < 1, f"with 1,000 idle connections open, /health answers at once "
           f"({took * 1000:.0f} ms)", (st, h))
        st, r, took = run(d, ctx, "print(x)")
        ok(st == 200 and r["stdout"] == "1\n", f"and code runs ({took:.2f} s)", (st, r))
        during = fds(d.proc.pid)
        diag(f"fds: {before} before, {during} with the idle connections ({refused} refused "
             "at connect; sandgate closes those past --max-connections-per-ip at once)")
        closed, deadline = 0, time.monotonic() + 15  # --connection-timeout is 3 s
        for s in idle:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if s.recv(1) == b"":
                    closed += 1
            except OSError:
                closed += 1
            s.close()
        ok(closed == len(idle), f"every idle connection is closed after the timeout "
           f"({closed} of {len(idle)})")
        time.sleep(0.5)
        after = fds(d.proc.pid)
        diag(f"fds: {after} after")
        ok(after <= before + 2, f"no descriptor leaks ({before} before, {after} after)")
        st, h = d.json("GET", "/health")
        ok(st == 200, "and the daemon serves on", (st, h))
    finally:
        d.stop()
done()
