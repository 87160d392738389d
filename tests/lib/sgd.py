"""Starts a sandgate daemon for a test and talks to it."""
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

SANDGATE = os.path.join(os.environ.get("SG_BUILDDIR", "."), "sandgate")
TOKEN = "test-token-0123456789abcdef"


def sandbox_pids(ctx):
    """The runsc-sandbox processes of a context, by its id in their command line."""
    pids = []
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = open(p, "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"runsc-sandbox") and any(ctx.encode() in a for a in argv):
            pids.append(int(p.split("/")[2]))
    return pids


def sandbox_cgroups(ctx):
    """{hierarchy: path} of the cgroups of a context's running sandbox (its
    runsc-sandbox process's /proc/PID/cgroup); {} when none runs."""
    pids = sandbox_pids(ctx)
    out = {}
    if pids:
        with open(f"/proc/{pids[0]}/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                for n in names.split(","):
                    out[n] = path
    return out


def read_int(path):
    """The number a file (a cgroup's) starts with, or None."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port():
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout=10, step=0.05):
    """Polls pred() until it is true or timeout seconds pass; returns its
    last value. What a test waits for, instead of sleeping."""
    deadline = time.monotonic() + timeout
    while not (got := pred()) and time.monotonic() < deadline:
        time.sleep(step)
    return got


@contextlib.contextmanager
def small_disk(size):
    """A tmpfs of size (e.g. "400m") on a new directory under /tmp, for a
    state directory whose disk fills: yields its path; unmounted after."""
    mnt = tempfile.mkdtemp(prefix="sg-small-", dir="/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", mnt],
                   check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)


def fill_disk(path, leave):
    """Fills path's file system to leave bytes free (a file "filler" in
    path, made of non-zero bytes: no holes); returns its path."""
    st = os.statvfs(path)
    filler = os.path.join(path, "filler")
    with open(filler, "wb") as f:
        chunk = b"\1" * (1 << 20)
        for _ in range(max(0, (st.f_bavail * st.f_frsize - leave) >> 20)):
            f.write(chunk)
    return filler


def never_ready_kernelspec():
    """A JUPYTER_PATH directory with the kernelspec "sleepy", whose kernel
    never answers (its argv sleeps): the caller removes it."""
    jp = tempfile.mkdtemp(prefix="sg-kspec-", dir="/tmp")
    os.chmod(jp, 0o755)
    os.makedirs(os.path.join(jp, "kernels", "sleepy"))
    with open(os.path.join(jp, "kernels", "sleepy", "kernel.json"), "w") as f:
        json.dump({"argv": ["/bin/sh", "-c", "exec sleep infinity", "{connection_file}"],
                   "display_name": "never ready", "language": "sleepy"}, f)
    return jp


class Daemon:
    def __init__(self, *args, port=0, env=None, parent="/tmp", token_args=None, state_dir=None,
                 start_timeout=30):
        self.start_timeout = start_timeout  # until "listening" (images unpack before it)
        self.env = dict(os.environ, **(env or {}))
        self.dir = state_dir or tempfile.mkdtemp(prefix="sg-api-", dir=parent)
        os.chmod(self.dir, 0o711)
        self.cmd = [SANDGATE, "--listen", f"127.0.0.1:{port}", "--state-dir", self.dir,
                    *(token_args or ["--token", TOKEN]), *args]
        self._start()

    def _start(self):
        self.proc = subprocess.Popen(self.cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=self.env)
        self.url = None
        self.log = []
        deadline = time.time() + self.start_timeout
        while self.url is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
        if self.url is None:
            raise RuntimeError("sandgate did not start:\n" + "".join(self.log[-20:]))
        self.watch_log()

    def restart(self):
        """Stops the daemon (its sandboxes keep running) and starts a new one
        on the same state directory, which re-adopts them."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.drain.join(timeout=30)
        if self.sanitizer:
            raise RuntimeError(sanitizer_report(self.sanitizer))
        self._start()

    def wait_log(self, text, timeout=10):
        """Waits until a line of the log holds text; whether one does."""
        return wait_for(lambda: any(text in l for l in self.log), timeout)

    def watch_log(self):
        """Keeps reading the log, or the daemon blocks once the pipe is full;
        keeps any sanitizer report whole for stop()."""
        self.sanitizer = []
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self):
        reporting = False
        for line in self.proc.stderr:
            self.log.append(line)
            del self.log[:-200]
            if re.search(r"(Address|Leak|UndefinedBehavior)Sanitizer|runtime error:", line):
                reporting = True
            if reporting:
                self.sanitizer.append(line)

    def request(self, method, path, body=None, headers=None, token=TOKEN, raw=None, timeout=120):
        h = {"Content-Type": "application/json"}
        if token:
            h["Authorization"] = "Bearer " + token
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def json(self, method, path, body=None, **kw):
        status, headers, data = self.request(method, path, body, **kw)
        return status, (json.loads(data) if data.strip() else None)

    def execute(self, code, **fields):
        """Runs code; returns the NDJSON lines as dicts."""
        status, _, data = self.request("POST", "/execute", dict(code=code, **fields))
        if status != 200:
            raise RuntimeError(f"execute: {status} {data!r}")
        return [json.loads(l) for l in data.decode().splitlines() if l.strip()]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        # Sessions outlive a stopped daemon by design; remove them for the test.
        subprocess.run(f"for c in $(runsc --root {self.dir}/runsc list -quiet); do "
                       f"runsc --root {self.dir}/runsc delete -force $c; done; "
                       # (runsc's null-netns pin may be stacked)
                       f"for i in 1 2 3; do grep -o '{self.dir}[^ ]*' /proc/mounts | "
                       f"xargs -r umount -l; done; "
                       # --sandbox none: the kernels are plain processes
                       f"pkill -9 -f -- '{self.dir}/kernels/'; "
                       # the egress proxy (haproxy), when a kill left it
                       f"pkill -9 -f -- '{self.dir}/egress-proxy/'",
                       shell=True, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        # A sanitizer build reports leaks and errors on stderr at exit: fail
        # the test that ran the daemon.
        self.drain.join(timeout=30)
        if self.sanitizer:
            raise RuntimeError(sanitizer_report(self.sanitizer))


def sanitizer_report(lines):
    """A sanitizer report with a summary first: each finding's own frames
    (allocator and libc left out) on one line, so a CI log that keeps only
    a report's first lines still says where."""
    summary, frames, keep = [], [], False
    for line in lines + ["ERROR"]:
        if re.search(r"ERROR|Direct leak|Indirect leak|SUMMARY", line):
            if frames:
                summary.append(" < ".join(frames[:8]))
            frames, keep = [], False
        if re.search(r"Direct leak|ERROR: AddressSanitizer|runtime error", line):
            summary.append(line.strip().lstrip("#= 0123456789"))
            keep = True
        m = keep and re.search(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+\.[ch]:\d+)", line)
        if m and "sanitizer" not in line:
            frames.append(m.group(1) + " " + m.group(2).rsplit("/", 1)[-1])
    return ("sandgate's sanitizer report:\n" + "\n".join(summary[:12]) + "\n--- whole:\n"
            + "".join(lines[:200]))


def add_key(keys_file, name, *opts):
    """A new tenant NAME in keys_file (`sandgate keys add`, which creates the
    file mode 0600; opts such as --max-contexts N); returns its key."""
    r = subprocess.run([SANDGATE, "keys", "add", name, "--keys-file", keys_file, *opts],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"sandgate keys add {name}: {r.stderr}")
    return r.stdout.strip().splitlines()[-1]


def audit_read(path):
    """The events of an audit log (--audit-log), as dicts."""
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


def audit_wait(path, pred, timeout=20):
    """The events of an audit log that satisfy pred, once there is one."""
    deadline = time.time() + timeout
    while True:
        found = [e for e in audit_read(path) if pred(e)]
        if found or time.time() > deadline:
            return found
        time.sleep(0.1)


def of_type(lines, t):
    return [l for l in lines if l.get("type") == t]


def stdout(lines):
    return "".join(l["text"] for l in of_type(lines, "stdout"))


def rss_kib(pid):
    """A process's resident set size, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tenants(prefix, *names):
    """A new directory under /tmp (mode 0711, for the sandboxes' uid) holding
    a keys file with a tenant per name: returns (directory, keys file, their
    keys in order).  The caller removes the directory."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(tmp, 0o711)
    keys_file = os.path.join(tmp, "keys")
    return tmp, keys_file, [add_key(keys_file, n) for n in names]
