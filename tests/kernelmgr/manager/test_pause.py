"""Pause and resume: a session saved to disk (runsc checkpoint) keeps its
variables, imports and files through an explicit pause, an automatic one
(--pause-after), and a pause followed by a restart of sandgate; a paused
session leaves no process; an execute or a Jupyter client wakes it; a pause
the disk cannot hold is refused and the session runs on."""
import glob
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import mcpraw
from sgd import Daemon, TOKEN, fill_disk, of_type, small_disk, stdout, wait_for
from tap import ok, diag, done

SETUP = ("import json, numpy as np\n"
         "big = list(range(10**6))\n"
         "arr = np.arange(1000)\n"
         "open('notes.txt', 'w').write('kept')\n"
         "state = {'n': 41}")
CHECK = ("import os\n"
         "print(len(big), sum(big) == (10**6 - 1) * 10**6 // 2, int(arr.sum()), "
         "open('notes.txt').read(), state['n'] + 1, 'np' in dir(), os.getcwd())")
EXPECTED = "1000000 True 499500 kept 42 True /home/user\n"


def runsc_version():
    out = subprocess.run(["/usr/local/bin/runsc", "--version"], capture_output=True, text=True)
    return out.stdout.split()[2] if out.returncode == 0 else "?"


def runsc_processes(kernel_id):
    """runsc processes (sandbox, gofer) of a kernel, by its id in their command line."""
    found = []
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            cmd = open(p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if kernel_id in cmd and "runsc" in cmd:
            found.append(cmd[:80])
    return found


def cpu_quotas(cid):
    """cpu.cfs_quota_us (cgroup v1) or cpu.max's quota (v2) of each live
    sandbox cgroup of the context."""
    out = {}
    for f in glob.glob(f"/sys/fs/cgroup/cpu*/sandgate/{cid}-*/cpu.cfs_quota_us") + \
            glob.glob(f"/sys/fs/cgroup/cpu*/sandgate/t-*/{cid}-*/cpu.cfs_quota_us") + \
            glob.glob(f"/sys/fs/cgroup/sandgate/{cid}-*/cpu.max") + \
            glob.glob(f"/sys/fs/cgroup/sandgate/t-*/{cid}-*/cpu.max"):
        with open(os.path.join(os.path.dirname(f), "cgroup.procs")) as p:
            if not p.read().strip():
                continue  # an empty one, not the running sandbox's
        with open(f) as q:
            out[f] = int(q.read().split()[0])
    return out


def run(d, ctx, code):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": ctx},
                   headers={"Accept": "application/json"}, timeout=180)
    return st, r


def wait_state(d, ctx, want, seconds=60):
    deadline = time.time() + seconds
    st, c = d.json("GET", "/contexts/" + ctx)
    while time.time() < deadline and (st != 200 or c.get("state") != want):
        time.sleep(0.2)
        st, c = d.json("GET", "/contexts/" + ctx)
    return c


d = Daemon("--pool-size", "0", "--pause-after", "0")
try:
    st, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    ok(st == 201 and ctx.get("state") in ("starting", "running"), "a new context has a state",
       ctx)
    st, r = run(d, cid, SETUP)
    ok(st == 200 and r["error"] is None, "the session holds a 10^6-element list, numpy, a file", r)
    ok(wait_state(d, cid, "running").get("state") == "running", "GET shows it running")

    # --- explicit pause, transparent resume ---------------------------------------
    t0 = time.time()
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    took = time.time() - t0
    ok(st == 200 and p.get("state") == "paused" and p.get("checkpoint_bytes", 0) > 0,
       f"POST /contexts/{{id}}/pause answers 200 when it is paused ({took:.2f} s, "
       f"{p.get('checkpoint_bytes', 0) >> 20} MiB checkpoint)", p)
    ok(runsc_processes(cid) == [], "no runsc process is left for the paused session",
       runsc_processes(cid))
    st, lst = d.json("GET", "/contexts")
    ok(any(c["id"] == cid and c["state"] == "paused" for c in lst), "GET /contexts lists it paused")
    st, p2 = d.json("POST", f"/contexts/{cid}/pause")
    ok(st == 200 and p2["state"] == "paused", "pausing a paused session is harmless")
    st, k = d.json("GET", f"/api/kernels/{cid}")
    ok(st == 200 and k.get("execution_state") == "paused",
       "the Jupyter kernels API shows execution_state paused", k)
    st, _, body = d.request("GET", f"/contexts/{cid}/files/notes.txt")
    ok(st == 200 and body == b"kept", "the files API works on a paused session", (st, body))
    st, c = d.json("GET", f"/contexts/{cid}")
    ok(c["state"] == "paused", "without waking it", c)
    t0 = time.time()
    st, r = run(d, cid, CHECK)
    ok(st == 200 and r["stdout"] == EXPECTED,
       f"an execute resumes it: variables, imports and files intact ({time.time() - t0:.2f} s)", r)
    ok(wait_state(d, cid, "running").get("state") == "running", "and it is running again")

    # --- explicit resume ------------------------------------------------------------
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    st, r1 = d.json("POST", f"/contexts/{cid}/resume", timeout=120)
    ok(st == 200 and r1.get("state") == "running", "POST /contexts/{id}/resume answers when it runs",
       r1)
    st, r = run(d, cid, CHECK)
    ok(st == 200 and r["stdout"] == EXPECTED, "state intact after pause + resume", r)
    # A restored sandbox writes where its first run did: kernel.log (a
    # process's output, echoed by ipykernel to its own stderr, and init's).
    run(d, cid, "import os; os.system('echo said-after-a-resume >&2')")

    def kernel_log():
        return "".join(open(p, errors="replace").read()
                       for p in glob.glob(f"{d.dir}/kernels/{cid}*/kernel.log"))
    wait_for(lambda: "said-after-a-resume" in kernel_log())
    ok("said-after-a-resume" in kernel_log(),
       "a resumed kernel's own output goes to its kernel.log", kernel_log()[-1500:])
    ok("sandgate-init:" not in kernel_log(), "where sandgate-init logs no error across resumes",
       kernel_log()[-1500:])
    st, r2 = d.json("POST", f"/contexts/{cid}/resume")
    ok(st == 200 and r2["state"] == "running", "resuming a running session is harmless")
    quotas = cpu_quotas(cid)
    ok(quotas and all(q == 100000 for q in quotas.values()),
       "the resumed sandbox has its CPU limit again (restore runs without it)", quotas)

    # --- a busy session is not paused; errors ------------------------------------------
    import threading
    th = threading.Thread(target=run, args=(d, cid, "import time; time.sleep(3)"))
    th.start()
    time.sleep(1.0)
    st, e = d.json("POST", f"/contexts/{cid}/pause")
    ok(st == 409 and "idle" in e.get("message", ""), "pausing a busy session: 409", (st, e))
    th.join()
    st, e = d.json("POST", "/contexts/00000000-0000-4000-8000-000000000000/pause")
    ok(st == 404, "pausing an unknown context: 404", (st, e))

    # --- a server in the session: its sockets are saved with it ------------------------
    # runsc saves the sandbox's network stack: a listening socket listens
    # again after the resume, and a connection inside the sandbox (both
    # ends in it) carries on.
    st, r = run(d, cid, "import socket\nsrv = socket.socket()\n"
                        "srv.bind(('127.0.0.1', 8765)); srv.listen()\n"
                        "cli = socket.create_connection(('127.0.0.1', 8765))\n"
                        "peer, _ = srv.accept(); print('up')")
    ok(st == 200 and r["stdout"] == "up\n", "a server and a connection to it in the session", r)
    st, e = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    ok(st == 200 and e.get("state") == "paused",
       "a session with a listening TCP socket and an open connection pauses", (st, e))
    st, r = run(d, cid, "peer.sendall(b'kept'); print(cli.recv(4).decode())\n"
                        "c2 = socket.create_connection(('127.0.0.1', 8765), timeout=10)\n"
                        "p2, _ = srv.accept(); p2.sendall(b'new'); print(c2.recv(3).decode())\n"
                        "for s in (cli, peer, c2, p2, srv): s.close()")
    ok(st == 200 and r["stdout"] == "kept\nnew\n",
       "after the resume the connection carries on and the socket listens again", r)
    st, r = run(d, cid, CHECK)
    ok(st == 200 and r["stdout"] == EXPECTED, "and it runs on with its state", r)

    # --- pause, then restart sandgate ------------------------------------------------
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    ok(st == 200 and p["state"] == "paused", "paused again before a restart")
    d.restart()
    st, lst = d.json("GET", "/contexts")
    ok(st == 200 and any(c["id"] == cid and c["state"] == "paused" for c in lst),
       "after a restart of sandgate the session is listed, paused", lst)
    ok(runsc_processes(cid) == [], "and still has no process")
    st, r = run(d, cid, CHECK)
    ok(st == 200 and r["stdout"] == EXPECTED, "it resumes on use with everything intact", r)

    # --- metrics ---------------------------------------------------------------------
    st, _, page = d.request("GET", "/metrics")
    text = page.decode()
    ok("sandgate_resumes_total 1\n" in text and "sandgate_pauses_total 0\n" in text
       and 'sandgate_kernels{state="paused"} 0' in text
       and "sandgate_resume_milliseconds_total" in text,
       "/metrics counts this daemon's resumes (one) and pauses (none yet), and paused kernels",
       [l for l in text.splitlines() if "paus" in l or "resum" in l])

    # --- an MCP session's kernel, paused, answers its next tool call --------------------
    st, sid, _ = mcpraw.initialize(d)
    st, a = mcpraw.call(d, sid, "execute_python", {"code": "mcp_value = 'still here'"})
    st, lst = d.json("GET", "/contexts")
    mk = [c["id"] for c in lst if c["id"] != cid]
    st, p = d.json("POST", f"/contexts/{mk[0]}/pause", timeout=120) if mk else (0, None)
    ok(st == 200 and p["state"] == "paused", "an MCP session's kernel pauses", (st, p))
    st, a = mcpraw.call(d, sid, "execute_python", {"code": "print(mcp_value)"}, rid=2)
    ok(st == 200 and mcpraw.text_of(a).strip() == "still here",
       "the next execute_python resumes it, variables intact", a)
    d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})

    # --- a dead kernel: resuming it says so at once (it waited for ever before) -----------
    run(d, cid, "import os; os._exit(1)")
    wait_state(d, cid, "dead", 30)
    try:
        st, e = d.json("POST", f"/contexts/{cid}/resume", timeout=20)
    except OSError as exc:  # the request timed out
        st, e = None, {"message": str(exc)}
    # A hang (as before) ends in the request's timeout: st None.
    ok(st == 409 and "restart" in e.get("message", ""),
       "resuming a session whose kernel died: 409 at once, saying to restart it", (st, e))
    st, _ = d.json("POST", f"/contexts/{cid}/restart")
    c = wait_state(d, cid, "running", 60)
    ok(st == 204 and c.get("state") == "running", "and a restart gives it a new kernel", c)

    # --- a checkpoint another runsc made: 409 naming both versions, kept paused ----------
    run(d, cid, "kept = 'made before the pause'")
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    stamps = glob.glob(f"{d.dir}/kernels/{cid}-*/checkpoint/runsc.version")
    ours = open(stamps[0]).read().strip() if stamps else ""
    ok(st == 200 and len(stamps) == 1 and ours == runsc_version(),
       "a checkpoint records the runsc version that made it", (st, stamps, ours))
    if stamps:
        open(stamps[0], "w").write("release-20221219.0\n")
    st, e = d.json("POST", f"/contexts/{cid}/resume", timeout=60)
    msg = e.get("message", "")
    ok(st == 409 and "release-20221219.0" in msg and ours in msg,
       "resuming it after a change of runsc: 409 naming both versions", (st, e))
    st, r = run(d, cid, "print(1)")
    ok(st == 409 and "release-20221219.0" in json.dumps(r),
       "an execute gets the same 409: no fresh kernel in its place", (st, r))
    st, c = d.json("GET", f"/contexts/{cid}")
    ok(st == 200 and c["state"] == "paused", "and it stays paused, its image kept", c)
    if stamps:
        open(stamps[0], "w").write(ours + "\n")
    st, r = run(d, cid, "print(kept)")
    ok(st == 200 and r["stdout"] == "made before the pause\n",
       "with its own version back it resumes intact", r)

    # --- delete a paused session ---------------------------------------------------------
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    kdirs = glob.glob(f"{d.dir}/kernels/{cid}-*")
    st, _ = d.json("DELETE", f"/contexts/{cid}")
    deadline = time.monotonic() + 30  # removed in the background
    while any(os.path.exists(k) for k in kdirs) and time.monotonic() < deadline:
        time.sleep(0.2)
    ok(st == 204 and not any(os.path.exists(k) for k in kdirs),
       "deleting a paused session removes its checkpoint", kdirs)
    left = glob.glob(f"/sys/fs/cgroup/*/sandgate/{cid}-*") + \
        glob.glob(f"/sys/fs/cgroup/*/sandgate/t-*/{cid}-*") + \
        glob.glob(f"/sys/fs/cgroup/sandgate/{cid}-*") + \
        glob.glob(f"/sys/fs/cgroup/sandgate/t-*/{cid}-*")
    ok(not left, "and no cgroup of any of its sandboxes is left", left)
finally:
    d.stop()

# --- automatic pause --------------------------------------------------------------------
d = Daemon("--pool-size", "0", "--pause-after", "2")
try:
    st, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    st, r = run(d, cid, SETUP)
    c = wait_state(d, cid, "paused", 60)
    ok(c.get("state") == "paused", "--pause-after 2: an idle session pauses by itself", c)
    ok(runsc_processes(cid) == [], "and leaves no process")
    st, r = run(d, cid, CHECK)
    ok(st == 200 and r["stdout"] == EXPECTED, "after an automatic pause everything is intact", r)
    st, _, page = d.request("GET", "/metrics")
    ok("sandgate_pauses_automatic_total 1" in page.decode(), "/metrics counts automatic pauses")
finally:
    d.stop()

# --- a disk that cannot hold the checkpoint -----------------------------------------------
with small_disk("400m") as mnt:
    d = Daemon("--pool-size", "0", "--pause-after", "0", "--workspace-size", "64", parent=mnt)
    try:
        st, ctx = d.json("POST", "/contexts", {})
        cid = ctx["id"]
        st, r = run(d, cid, SETUP)
        filler = fill_disk(mnt, 8 << 20)
        st, e = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
        ok(st == 507 and "free" in e.get("message", ""),
           "a pause the disk cannot hold: 507 with the reason", (st, e))
        c = wait_state(d, cid, "running", 30)
        ok(c.get("state") == "running", "the session runs on", c)
        st, r = run(d, cid, CHECK)
        ok(st == 200 and r["stdout"] == EXPECTED, "with its variables", r)
        os.unlink(filler)
        st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
        ok(st == 200 and p["state"] == "paused", "with room again it pauses", (st, p))
        st, _, page = d.request("GET", "/metrics")
        ok("sandgate_pause_failures_total 1" in page.decode(), "/metrics counts the failed pause")
    finally:
        d.stop()

# --- --pause-on-stop: what a container's restart needs ------------------------------------------
# A container's processes end with it, sandboxes included: a stop pauses every
# session first, and a new start that has only the state directory (no runsc
# state, no mounts: a new container on the same volume) resumes them.  An
# idle session pauses at once; a busy one finishes what it runs, takes no new
# work meanwhile (503, saying why) and then pauses — a rolling restart under
# load loses nothing.
d = Daemon("--pool-size", "1", "--pause-after", "0", "--pause-on-stop", "120")
try:
    ids = [d.json("POST", "/contexts", {})[1]["id"] for _ in range(3)]
    for cid in ids:
        run(d, cid, SETUP)
    busy = ids[2]
    slow = {}
    t = threading.Thread(target=lambda: slow.update(
        r=run(d, busy, "import time\ntime.sleep(4)\nafter = 'finished'\nprint(after)")))
    t.start()
    time.sleep(1.5)  # it runs
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    st, refused = run(d, busy, "print('too late')")
    ok(st == 503 and "stopping" in refused.get("message", ""),
       "while it stops, a new execution on the busy session is refused: 503, saying why",
       (st, refused))
    st, refused = run(d, ids[0], "print('too late')")
    ok(st == 503, "... and on a paused one (it is not resumed)", (st, refused))
    st, health = d.json("GET", "/health", token=None)
    ok(st == 503 and health.get("status") == "stopping",
       "GET /health answers 503 stopping meanwhile (a proxy takes the replica out)",
       (st, health))
    t.join(timeout=60)
    st, r = slow.get("r", (None, {}))
    ok(st == 200 and r.get("stdout") == "finished\n",
       "the execution running at SIGTERM runs to its end", slow)
    d.proc.wait(timeout=150)
    d.drain.join(timeout=30)
    log = "".join(d.log)
    ok("pausing 3 sessions before stopping" in log and
       "every session that could pause is paused; stopping" in log,
       "SIGTERM with --pause-on-stop pauses the 3 sessions, the busy one too, then stops",
       log[-1500:])
    left = [p for cid in ids for p in runsc_processes(cid)]
    ok(not left, "no sandbox process is left", left)
    subprocess.run(f"grep -o '{d.dir}[^ ]*' /proc/mounts | xargs -r umount -l", shell=True)
    subprocess.run(["rm", "-rf", f"{d.dir}/runsc"])
    d._start()
    for cid in ids:
        c = wait_state(d, cid, "paused", 30)
        st, r = run(d, cid, CHECK)
        ok(c.get("state") == "paused" and st == 200 and r["stdout"] == EXPECTED,
           f"a new start on the state directory alone resumes session …{cid[-12:]} intact", (c, r))
    st, r = run(d, busy, "print(after)")
    ok(st == 200 and r.get("stdout") == "finished\n",
       "the session that was busy kept what its last execution made", (st, r))
finally:
    d.stop()

# --- runsc replaced under a running sandgate: its own binary until the next start ------------
# What scripts/runsc.sh does on a new pin: a new version's directory, the
# link moved to it.  The "new" runsc here reports another version and cannot
# restore what the old one saved (runsc requires the same version); the
# rest it passes on to the real one.
tmp = tempfile.mkdtemp(prefix="sg-runsc-")
link, real = os.path.join(tmp, "runsc"), os.path.realpath("/usr/local/bin/runsc")
newer = os.path.join(tmp, "runsc-newer")
with open(newer, "w") as f:
    f.write('#!/bin/sh\n[ "$1" = --version ] && exec echo "runsc version release-20990101.0"\n'
            'for a; do [ "$a" = restore ] && echo "image of another version" >&2 && exit 1; done\n'
            f'exec {real} "$@"\n')
os.chmod(newer, 0o755)
os.chmod(tmp, 0o755)
os.symlink(real, link)
d = Daemon("--pool-size", "0", "--runsc", link)
try:
    st, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    run(d, cid, "kept = 'before the swap'")
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    os.symlink(newer, link + ".new")
    os.rename(link + ".new", link)
    st, r = run(d, cid, "print(kept)")
    ok(st == 200 and r["stdout"] == "before the swap\n",
       "runsc replaced while sandgate runs: a session paused before resumes intact "
       "(sandgate keeps the binary it started with)", (st, r))
    ok(f"runsc: {real}, version {runsc_version()}" in "".join(d.log),
       "the log names the binary and its version", "".join(d.log)[-800:])
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    d.restart()
    st, r = run(d, cid, "print(kept)")
    msg = json.dumps(r)
    ok(st == 409 and "release-20990101.0" in msg and runsc_version() in msg,
       "after a restart on the new runsc, its image is a 409 naming both versions", (st, r))
    st, c = d.json("GET", f"/contexts/{cid}")
    ok(st == 200 and c["state"] == "paused", "and the session stays paused, no fresh kernel", c)
finally:
    d.stop()
    subprocess.run(["rm", "-rf", tmp])

# --- without a sandbox there is nothing to pause ---------------------------------------------
d = Daemon("--sandbox", "none", "--pool-size", "0")
try:
    st, ctx = d.json("POST", "/contexts", {})
    run(d, ctx["id"], "1")
    st, e = d.json("POST", f"/contexts/{ctx['id']}/pause")
    ok(st == 409 and "sandbox" in e.get("message", ""), "--sandbox none: pause is 409", (st, e))
finally:
    d.stop()
done()
