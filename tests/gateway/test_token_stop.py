"""Two things a local operator sees of a running sandgate: its command line
and its log.

A token given with --token must not stay in /proc/PID/cmdline (every local
user can read it, `ps` shows it) of either process: the daemon and the root
launcher it forks.  And a clean stop (SIGTERM, sessions left running for
the next start, the warm pool removed) logs no warning or error: the
launcher used to answer the daemon's last requests after the daemon had
closed their link, and logged "cannot answer: Broken pipe" for each."""
import os
import re
import subprocess
import time

from sgd import Daemon, TOKEN, stdout
from tap import ok, diag, done

NOISE = re.compile(r"^\S+Z (warn|error) ")


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    return out


def wait_for(pred, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return pred()


# Every way getopt accepts the option, on the daemon without a launcher.
for label, spelling in (("--token T", ["--token", TOKEN]), ("--token=T", [f"--token={TOKEN}"]),
                        ("-tT", [f"-t{TOKEN}"]), ("--tok=T", [f"--tok={TOKEN}"])):
    d = Daemon("--sandbox", "none", "--pool-size", "0", token_args=spelling)
    try:
        argv = cmdline(d.proc.pid)
        ok(TOKEN.encode() not in b"\0".join(argv) and b"x" * len(TOKEN) in b"\0".join(argv),
           f"{label}: the token is blanked in the daemon's cmdline", argv)
        status, _, _ = d.request("GET", "/contexts")
        ok(status == 200, "and the daemon still takes it", status)
        status, _, _ = d.request("GET", "/contexts", token="x" * len(TOKEN))
        ok(status == 401, "but not the blanks", status)
    finally:
        d.stop()

# The real thing: root, runsc, the launcher forked after the options are read.
d = Daemon("--pool-size", "1")
try:
    launchers = [c for c in children(d.proc.pid) if comm(c) == "sandgate-priv"]
    ok(len(launchers) == 1, "the daemon has forked its launcher", children(d.proc.pid))
    for name, pid in (("daemon", d.proc.pid), ("launcher", launchers[0] if launchers else None)):
        argv = cmdline(pid) if pid else []
        ok(pid and TOKEN.encode() not in b"\0".join(argv) and b"--token" in argv,
           f"the {name}'s /proc/PID/cmdline has --token but not the token", argv)
    lines = d.execute("x = 6 * 7\nprint(x)")
    ok(stdout(lines) == "42\n", "an execution works (a session to leave running at the stop)",
       lines)
    ok(wait_for(lambda: d.json("GET", "/health")[1]["kernels"]["pool_ready"] >= 1, 60),
       "the pool has a kernel again (one to remove at the stop)", d.json("GET", "/health"))
finally:
    d.stop()
noisy = [l for l in d.log if NOISE.match(l)]
ok(not noisy and any("shutting down" in l for l in d.log),
   "a clean stop logs no warning or error", "".join(noisy or d.log[-20:]))
done()
