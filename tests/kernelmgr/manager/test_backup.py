"""Backups of the state directory, as docs/operations.md ("Backups") says to
take and restore them: stop with --pause-on-stop, archive the directory with
tar --sparse, lose it, restore it.  At the same path every session comes
back with its variables and files; at another path the files come back and
a session's first execute says its variables are lost (a checkpoint holds
the paths it was taken at), and the session works on.  Needs root and runsc."""
import os
import shutil
import signal
import subprocess
import tempfile

from sgd import Daemon
from tap import ok, done


def execute(d, cid, code):
    lines = d.execute(code, context_id=cid)
    out = "".join(l.get("text", "") for l in lines if l.get("type") == "stdout")
    errors = [l for l in lines if l.get("type") == "error"]
    return out, errors


def stop_paused(d):
    d.proc.send_signal(signal.SIGTERM)
    d.proc.wait(timeout=150)
    d.drain.join(timeout=30)
    return "".join(d.log)


def unmount(path):
    subprocess.run(f"grep -o '{path}[^ ]*' /proc/mounts | xargs -r umount", shell=True)


backups = tempfile.mkdtemp(prefix="sg-backup-")
archive = os.path.join(backups, "state.tar")
d = Daemon("--pool-size", "0", "--pause-after", "0", "--pause-on-stop", "120")
state = d.dir
try:
    ids = [d.json("POST", "/contexts", {})[1]["id"] for _ in range(2)]
    for n, cid in enumerate(ids):
        execute(d, cid, f"x = {n + 41}")
        st, _, _ = d.request("PUT", f"/contexts/{cid}/files/kept.txt",
                             raw=f"file {n}".encode(), headers={})
    log = stop_paused(d)
    ok("every session that could pause is paused" in log, "the stop pauses every session",
       log[-800:])

    # The docs' commands: the workspaces' images are unmounted first (a
    # stopped sandgate leaves them mounted for its next start), then tar.
    unmount(state)
    r = subprocess.run(["tar", "--sparse", "-C", os.path.dirname(state), "-cf", archive,
                        os.path.basename(state)], capture_output=True, text=True)
    ok(r.returncode == 0, "tar --sparse archives the state directory", r.stderr)
    apparent = sum(os.lstat(os.path.join(p, f)).st_size for p, _, fs in os.walk(state)
                   for f in fs)
    ok(os.path.getsize(archive) < apparent / 4,
       "the archive keeps the workspaces sparse", (os.path.getsize(archive), apparent))

    # The disk is lost; the backup comes back at the same path.
    shutil.rmtree(state)
    subprocess.run(["tar", "--sparse", "-C", os.path.dirname(state), "-xpf", archive], check=True)
    d._start()
    for n, cid in enumerate(ids):
        out, errors = execute(d, cid, "print(x, open('kept.txt').read())")
        ok(out == f"{n + 41} file {n}\n" and not errors,
           f"restored at the same path: session {n + 1} has its variables and files",
           (out, errors))
    d.stop()

    # The same backup at another path: files yes, variables no, and it says so.
    other = tempfile.mkdtemp(prefix="sg-api-")
    subprocess.run(["tar", "--sparse", "-C", other, "--strip-components=1", "-xpf", archive],
                   check=True)
    d = Daemon("--pool-size", "0", "--pause-after", "0", state_dir=other)
    cid = ids[0]
    out, errors = execute(d, cid, "print(x)")
    ok(errors and "variables are lost" in errors[0].get("value", ""),
       "restored elsewhere: the first execute says the variables are lost", (out, errors))
    out, errors = execute(d, cid, "print(open('kept.txt').read())")
    ok(out == "file 0\n" and not errors, "…the workspace's files are there", (out, errors))
    out, errors = execute(d, ids[1], "y = 1; print(y + 1)")
    ok(not errors or "variables are lost" in errors[0].get("value", ""),
       "…the other session answers too", (out, errors))
    out, errors = execute(d, ids[1], "y = 1; print(y + 1, open('kept.txt').read())")
    ok(out == "2 file 1\n" and not errors, "…and works on", (out, errors))
finally:
    d.stop()
    shutil.rmtree(backups, ignore_errors=True)
done()
