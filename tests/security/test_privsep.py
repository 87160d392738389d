"""Privilege separation: the process that parses HTTP, JSON and kernel
messages holds no privilege; a root launcher only runs sandboxes.

Checks the two processes' credentials, the state directory's ownership,
that everything still works through the launcher (executions, uploads,
files the kernel writes, restarts), and that the launcher never outlives
the daemon, however the daemon ends."""
import os
import subprocess
import time

from sgd import Daemon, SANDGATE
from tap import ok, diag, done


ASAN = b"libasan" in subprocess.run(["ldd", SANDGATE], capture_output=True).stdout


def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.split()
    return fields


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(status(p)["PPid"][0]) == pid:
                    out.append(int(p))
            except (OSError, KeyError):
                pass
    return out


def alive(pid):
    try:
        return status(pid)["State"][0] != "Z"
    except OSError:
        return False


d = Daemon("--pool-size", "1")
try:
    st = status(d.proc.pid)
    ok(st["Uid"] == ["64122"] * 4, "the HTTP daemon runs as uid 64122 (real, effective, saved, fs)",
       st["Uid"])
    ok(st["Gid"] == ["64123"] * 4 and st["Groups"] == ["64123"],
       "its only group is the sandbox group", (st["Gid"], st["Groups"]))
    ok(st["CapEff"] == ["0000000000000000"] and st["CapPrm"] == ["0000000000000000"],
       "it has no capabilities", st["CapEff"])
    launchers = [c for c in children(d.proc.pid) if status(c)["Name"] == ["sandgate-priv"]]
    ok(len(launchers) == 1, "one launcher, a child of the daemon", children(d.proc.pid))
    launcher = launchers[0] if launchers else None
    ok(launcher and status(launcher)["Uid"][0] == "0", "the launcher keeps root")
    ok(any("serving as uid 64122" in l for l in d.log), "the log says so")

    s = os.stat(f"{d.dir}/sessions")
    ok(s.st_uid == 64122 and s.st_mode & 0o777 == 0o700, "sessions/ is the daemon's, 0700")
    s = os.stat(f"{d.dir}/secrets")
    key = os.stat(f"{d.dir}/secrets/e2b-token-key")
    ok(s.st_uid == 64122 and s.st_mode & 0o777 == 0o700 and key.st_uid == 64122 and
       key.st_mode & 0o777 == 0o600 and key.st_size == 32,
       "secrets/ (the key of E2B sandboxes' tokens) is the daemon's, 0700, its key 0600")
    s = os.stat(f"{d.dir}/runsc")
    ok(s.st_uid == 0 and s.st_mode & 0o777 == 0o700, "runsc's state stays root's, 0700")
    if not ASAN:  # LeakSanitizer's exit check needs a dumpable process
        ok(os.stat(f"/proc/{d.proc.pid}/environ").st_uid == 0,
           "the daemon is not dumpable (its /proc files are root's): no process of its uid "
           "can read its memory or environment")

    lines = d.execute("import os\nopen('k.txt', 'w').write('from the kernel')\nos.getuid()")
    ok([l.get("text") for l in lines if l["type"] == "result"] == ["64123"],
       "code runs as the sandbox user")
    status_, ctxs = d.json("GET", "/contexts")
    cid = ctxs[0]["id"]
    st_, _, body = d.request("GET", f"/contexts/{cid}/files/k.txt")
    ok(st_ == 200 and body == b"from the kernel", "the daemon reads a file the kernel wrote")
    st_, _, body = d.request("PUT", f"/contexts/{cid}/files/up/u.txt", raw=b"uploaded")
    lines = d.execute("p = 'up/u.txt'\nopen(p, 'a').write('+kernel')\nopen(p).read()")
    ok(st_ == 201 and [l.get("text") for l in lines if l["type"] == "result"] ==
       ["'uploaded+kernel'"], "the kernel changes a file the daemon uploaded")
    st_, _ = d.json("POST", f"/contexts/{cid}/restart")
    lines = d.execute("1 + 1")
    ok(st_ == 204 and [l.get("text") for l in lines if l["type"] == "result"] == ["2"],
       "a restart goes through the launcher")
    st_, ctx = d.json("POST", "/contexts", {})
    made = os.path.isdir(f"{d.dir}/workspaces/{ctx['id']}")
    st2, _ = d.json("DELETE", f"/contexts/{ctx['id']}")
    # The removal is the launcher's, in the background: DELETE does not wait.
    deadline = time.time() + 10
    while os.path.exists(f"{d.dir}/workspaces/{ctx['id']}") and time.time() < deadline:
        time.sleep(0.05)
    ok(st_ == 201 and made and st2 == 204 and
       not os.path.exists(f"{d.dir}/workspaces/{ctx['id']}"),
       "create and delete a context: the workspace exists when POST answers, and the "
       "launcher removes it")

    # A restart of the daemon re-adopts through a new launcher.
    old_launcher = launcher
    d.restart()
    time.sleep(0.5)
    ok(not alive(old_launcher), "the old launcher ended with the old daemon (SIGTERM)")
    lines = d.execute("open('k.txt').read()", context_id=cid)
    ok([l.get("text") for l in lines if l["type"] == "result"] == ["'from the kernel'"],
       "the new daemon re-adopted the session through its launcher")

    # SIGKILL: the daemon cannot say goodbye; the launcher notices the closed link.
    launcher = [c for c in children(d.proc.pid) if status(c)["Name"] == ["sandgate-priv"]][0]
    d.proc.kill()
    d.proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and alive(launcher):
        time.sleep(0.1)
    ok(not alive(launcher), "a killed daemon's launcher exits too")
    d._start()
    lines = d.execute("'back'")
    ok([l.get("text") for l in lines if l["type"] == "result"] == ["'back'"],
       "a new daemon starts on the same state directory")
finally:
    d.stop()
done()
