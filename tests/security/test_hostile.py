"""Hostile code through sandgate's public API.

Each case is an attack a user of a code sandbox would try, submitted as code
to POST /execute (and, where the attack goes through them, the files API or
a restart of the daemon).  Every case asserts containment *on the host* —
the secret is not in the output, the host file was not created, the host
listener saw no connection — and, after it, that sandgate and a neighbour
session still answer correctly (the neighbour's variable is intact).

SG_SECURITY_REPORT=FILE writes each case's area, attack and observed outcome
as JSON lines, from which docs/security.md's table is made.
"""
import glob
import hashlib
import json
import os
import secrets
import socket
import subprocess
import tempfile
import threading
import time

from sgd import Daemon, SANDGATE, TOKEN, rss_kib
from tap import ok, diag, done

ASAN = b"libasan" in subprocess.run(["ldd", SANDGATE], capture_output=True).stdout
MEMORY_MIB = 512
WORKSPACE_MIB = 64
TMP_MIB = 32
MAX_OUTPUT = 1 << 20

# --- host-side bait and observers -----------------------------------------------------

SECRET = "host-secret-" + secrets.token_hex(16)
SECRET_DIR = tempfile.mkdtemp(prefix="sg-host-secret-", dir="/tmp")
os.chmod(SECRET_DIR, 0o755)
SECRET_PATH = os.path.join(SECRET_DIR, "secret.txt")
with open(SECRET_PATH, "w") as f:
    f.write(SECRET + "\n")
os.chmod(SECRET_PATH, 0o644)
MARKER = "host-env-marker-" + secrets.token_hex(12)  # in the daemon's environment
PWN = "sg-pwned-" + secrets.token_hex(6)               # a file name no one else uses


def host_ip():
    """The host's own non-loopback address (the sandbox must not reach it)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True).stdout.split()
    for i, w in enumerate(out):
        if w == "inet":
            return out[i + 1].split("/")[0]
    return None


class Listener:
    """A TCP or UDP listener on the host that counts who reached it."""

    def __init__(self, kind, addr):
        self.hits = 0
        self.sock = socket.socket(socket.AF_INET if kind != "unix" else socket.AF_UNIX,
                                  socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
        self.sock.bind(addr)
        if kind != "udp":
            self.sock.listen(16)
        self.addr = self.sock.getsockname()
        self.kind = kind
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                if self.kind == "udp":
                    self.sock.recvfrom(65536)
                else:
                    c, _ = self.sock.accept()
                    c.close()
                self.hits += 1
            except OSError:
                return


HOST_IP = host_ip()
tcp_lo = Listener("tcp", ("127.0.0.1", 0))
tcp_host = Listener("tcp", (HOST_IP or "127.0.0.1", 0))
udp_lo = Listener("udp", ("127.0.0.1", 0))
unix_abstract = Listener("unix", "\0sg-host-abstract-" + secrets.token_hex(6))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --- running code ------------------------------------------------------------------------

class Run:
    """One execution's NDJSON lines, and what a test asks of them."""

    def __init__(self, status, lines):
        self.status = status
        self.lines = lines
        self.stdout = "".join(l["text"] for l in lines if l.get("type") == "stdout")
        self.stderr = "".join(l["text"] for l in lines if l.get("type") == "stderr")
        self.results = [l for l in lines if l.get("type") == "result"]
        self.errors = [l for l in lines if l.get("type") == "error"]
        self.text = json.dumps(lines)

    @property
    def value(self):
        return self.results[0].get("text") if self.results else None

    def outcome(self):
        if self.errors:
            e = self.errors[-1]
            return f"{e['name']}: {e['value']}"[:160]
        return (self.stdout.strip() or str(self.value))[:160]


def execute(d, code, ctx, timeout=60):
    status, _, data = d.request("POST", "/execute",
                                {"code": code, "context_id": ctx, "timeout": timeout},
                                timeout=timeout + 120)
    lines = []
    for l in data.decode(errors="replace").split("\n"):  # NDJSON: only \n ends a line
        if not l.strip():
            continue
        try:
            lines.append(json.loads(l))
        except ValueError:
            lines.append({"type": "unparsable", "text": l[:200]})
    return Run(status, lines)


REPORT = []


def record(area, name, attack, passed, outcome, detail=None):
    REPORT.append({"area": area, "case": name, "attack": attack, "outcome": outcome,
                   "contained": bool(passed)})
    ok(passed, f"[{area}] {name}", detail if detail is not None else outcome)


d = Daemon("--pool-size", "2", "--memory", str(MEMORY_MIB), "--processes", "64",
           "--workspace-size", str(WORKSPACE_MIB), "--tmp-size", str(TMP_MIB),
           "--max-output", str(MAX_OUTPUT), "--idle-timeout", "0",
           env={"SG_HOST_MARKER": MARKER})
PORT = int(d.url.rsplit(":", 1)[1])
try:
    status, ctx = d.json("POST", "/contexts", {})
    A = ctx["id"]  # the attacker
    status, ctx = d.json("POST", "/contexts", {})
    N = ctx["id"]  # the neighbour
    CANARY = "alive-" + secrets.token_hex(8)
    execute(d, f"canary = {CANARY!r}", N)
    NEIGHBOUR_CONN = glob.glob(f"{d.dir}/kernels/{N}*/conn")[0]
    with open(f"{NEIGHBOUR_CONN}/kernel.json") as f:
        NEIGHBOUR_KEY = json.load(f)["key"]
    INIT_HASH = sha256(f"{os.environ.get('SG_BUILDDIR', '.')}/sandgate-init")

    def attacker_usable():
        """After a case: the attacker's own session comes back (restarted if
        the attack killed its kernel)."""
        r = execute(d, "'ok'", A, timeout=30)
        if r.value == "'ok'":
            return True
        d.request("POST", f"/contexts/{A}/restart")
        for _ in range(60):
            if execute(d, "'ok'", A, timeout=30).value == "'ok'":
                return True
            time.sleep(1)
        return False

    def after(name):
        """sandgate and the neighbour still answer; the attacker's session is usable."""
        status, health = d.json("GET", "/health")
        r = execute(d, "canary", N, timeout=30)
        fine = status == 200 and r.value == repr(CANARY) and attacker_usable()
        ok(fine, f"  after '{name}': sandgate, the neighbour and the attacker's session answer",
           (status, r.outcome()))

    def case(area, name, attack, code, contained, timeout=60, outcome=None):
        r = execute(d, code, A, timeout=timeout)
        passed = r.status == 200 and contained(r)
        record(area, name, attack, passed, outcome(r) if outcome else r.outcome(),
               r.text[-1500:])
        after(name)
        return r

    # --- escape and host access ----------------------------------------------------------
    case("escape", "read a host file by its absolute path",
         "open() of a file that exists on the host",
         f"print(open({SECRET_PATH!r}).read())",
         lambda r: SECRET not in r.text and r.errors)
    case("escape", "list the host's /tmp, /root and /home",
         "os.listdir on host directories",
         "import os\nfor p in ['/tmp', '/root', '/home', '/']:\n"
         "    try: print(p, sorted(os.listdir(p)))\n"
         "    except OSError as e: print(p, e)",
         lambda r: os.path.basename(SECRET_DIR) not in r.text and "sg-api-" not in r.text,
         outcome=lambda r: "only the sandbox's own files: " + r.stdout.splitlines()[-1][:100])
    case("escape", "host processes through /proc",
         "read /proc/1/cmdline and list /proc for host processes",
         "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
         "print(open('/proc/1/cmdline').read().replace('\\0', ' '))\n"
         "print(len(pids), 'processes')\n"
         "print(any('sandgate --listen' in open(f'/proc/{p}/cmdline').read().replace('\\0', ' ') "
         "for p in pids))",
         lambda r: r.stdout.startswith("/sandgate-init") and r.stdout.strip().endswith("False")
         and int(r.stdout.split("\n")[1].split()[0]) < 20,
         outcome=lambda r: "PID 1 is sandgate-init; only the sandbox's processes: " +
         r.stdout.split("\n")[1])
    case("escape", "the daemon's process by its host pid",
         "read /proc/<sandgate's host pid>/environ and ptrace it",
         f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         f"try: print(open('/proc/{d.proc.pid}/environ').read())\n"
         f"except OSError as e: print(e)\n"
         f"print('ptrace', libc.ptrace(16, {d.proc.pid}, 0, 0), ctypes.get_errno())",
         lambda r: TOKEN not in r.text and MARKER not in r.text and "ptrace -1" in r.stdout)
    case("escape", "write into /usr and /etc",
         "create files in the read-only system directories",
         f"import os\nfor p in ['/usr/{PWN}', '/etc/{PWN}', '/{PWN}']:\n"
         f"    try: open(p, 'w').write('x'); print('WROTE', p)\n"
         f"    except OSError as e: print(p, e.strerror)",
         lambda r: "WROTE" not in r.stdout and not os.path.exists(f"/usr/{PWN}") and
         not os.path.exists(f"/etc/{PWN}") and not os.path.exists(f"/{PWN}") and
         not os.path.exists(f"{d.dir}/sandbox/rootfs/{PWN}"),
         outcome=lambda r: "refused: " + r.stdout.splitlines()[0].split(" ", 1)[1])
    case("escape", "climb out of the workspace with ..",
         "write /home/user/../../tmp/FILE and /home/user/../../../../FILE",
         f"import os\nfor p in ['/home/user/../../tmp/{PWN}', '/home/user/../../../../{PWN}']:\n"
         f"    try: open(p, 'w').write('x'); print('wrote', os.path.realpath(p))\n"
         f"    except OSError as e: print(p, e.strerror)",
         lambda r: not os.path.exists(f"/tmp/{PWN}") and not os.path.exists(f"/{PWN}"),
         outcome=lambda r: ".. ends at the sandbox's own / (its /tmp is a private tmpfs)")
    case("escape", "overwrite sandgate-init and the preload library",
         "write to the read-only binaries sandgate mounts into every sandbox",
         "for p in ['/sandgate-init', '/sandgate-preload.so']:\n"
         "    try: open(p, 'r+b').write(b'\\0' * 16); print('WROTE', p)\n"
         "    except OSError as e: print(p, e.strerror)",
         lambda r: "WROTE" not in r.stdout and sha256(
             f"{os.environ.get('SG_BUILDDIR', '.')}/sandgate-init") == INIT_HASH)
    case("escape", "/proc/self/root and /proc/1/root",
         "reach the host's / through the magic links of /proc",
         f"import os\nfor p in ['/proc/self/root{SECRET_PATH}', '/proc/1/root{SECRET_PATH}',\n"
         f"          '/proc/self/cwd/../../..{SECRET_PATH}']:\n"
         f"    try: print(open(p).read())\n"
         f"    except OSError as e: print(p, e.strerror)",
         lambda r: SECRET not in r.text)
    case("escape", "/proc/self/mountinfo names no host path",
         "learn the host's layout (state directory, workspace image) from mountinfo",
         "print(open('/proc/self/mountinfo').read())",
         lambda r: d.dir not in r.text and "/var/lib" not in r.text and "/dev/loop" not in r.text,
         outcome=lambda r: "mount sources are shown as 'none' (9p, tmpfs)")
    case("escape", "device nodes",
         "mknod a block device (8:0), /dev/mem (1:1) and /dev/kmem (1:2) and read them",
         "import os\nfor maj, mi in [(8, 0), (1, 1), (1, 2)]:\n"
         "    p = f'/tmp/dev{maj}_{mi}'\n"
         "    try:\n"
         "        os.mknod(p, 0o20666 if maj == 1 else 0o60666, os.makedev(maj, mi))\n"
         "        print('READ', os.read(os.open(p, os.O_RDONLY), 16))\n"
         "    except OSError as e: print(p, e.strerror)",
         lambda r: "READ" not in r.stdout,
         outcome=lambda r: "no host device behind them: " + r.stdout.splitlines()[0])
    case("escape", "mount a filesystem",
         "mount(2) a tmpfs and a proc over /tmp",
         "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
         "print(libc.mount(b'proc', b'/tmp', b'proc', 0, None), ctypes.get_errno())",
         lambda r: r.stdout.split() == ["-1", "1", "-1", "1"],
         outcome=lambda r: "EPERM")
    case("escape", "chroot and new namespaces",
         "chroot(2), unshare(CLONE_NEWNS | CLONE_NEWNET), setns",
         "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print('chroot', libc.chroot(b'/tmp'), ctypes.get_errno())\n"
         "print('unshare', libc.unshare(0x00020000 | 0x40000000), ctypes.get_errno())",
         lambda r: "chroot -1" in r.stdout and "unshare -1" in r.stdout,
         outcome=lambda r: "EPERM for both")
    case("escape", "setuid binaries and setuid(0)",
         "run su, and call setuid(0)/setgid(0); capabilities and NoNewPrivs",
         "import os, subprocess\n"
         "r = subprocess.run(['su', '-c', 'id -u'], input='\\n', capture_output=True, text=True)\n"
         "print('su', r.returncode)\n"
         "for f in (os.setuid, os.setgid):\n"
         "    try: f(0); print('ROOT')\n"
         "    except OSError as e: print(e.strerror)\n"
         "print(os.getuid(), os.geteuid())\n"
         "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])",
         lambda r: "ROOT" not in r.stdout and "su 0" not in r.stdout and
         "64123 64123" in r.stdout and r.stdout.strip().endswith("0000000000000000"),
         outcome=lambda r: "su fails, setuid(0) EPERM, uid 64123, no capabilities")
    case("escape", "ptrace",
         "PTRACE_ATTACH to PID 1 of the sandbox and PTRACE_TRACEME games",
         "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())",
         lambda r: r.stdout.startswith("-1"),
         outcome=lambda r: "refused (errno " + r.stdout.split()[-1] + ")")
    case("escape", "kernel keyrings",
         "add_key(2) and keyctl(2) to reach the host kernel's keyrings",
         "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print(libc.syscall(248, b'user', b'sg', b'v', 1, -2), ctypes.get_errno())\n"
         "print(libc.syscall(250, 0, -2, 0, 0, 0), ctypes.get_errno())",
         lambda r: all(l.startswith("-1") for l in r.stdout.splitlines()),
         outcome=lambda r: "not implemented by gVisor (errno " + r.stdout.split()[1] + ")")
    case("escape", "bpf and perf_event_open",
         "load BPF or open perf events on the host kernel",
         "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print(libc.syscall(321, 0, None, 0), ctypes.get_errno())\n"
         "print(libc.syscall(298, None, 0, -1, -1, 0), ctypes.get_errno())",
         lambda r: all(l.startswith("-1") for l in r.stdout.splitlines()))
    case("escape", "hard link to a file outside the workspace",
         "os.link('/etc/passwd', 'pw') and os.link('/sandgate-init', 'init')",
         "import os\nfor src, dst in [('/etc/passwd', 'pw'), ('/sandgate-init', 'init')]:\n"
         "    try: os.link(src, dst); print('LINKED', dst)\n"
         "    except OSError as e: print(dst, e.strerror)",
         lambda r: "LINKED" not in r.stdout,
         outcome=lambda r: "EXDEV: the workspace is its own filesystem")

    # symlinks planted in the workspace, then followed by sandgate's files API
    r = case("escape", "symlink to a host file, read through the files API",
             "plant ws/leak -> host secret path, then GET /contexts/ID/files/leak",
             f"import os\nos.symlink({SECRET_PATH!r}, 'leak')\nos.symlink('/', 'rootlink')",
             lambda r: not r.errors,  # planted: the next checks follow them
             outcome=lambda r: "planted")
    status, _, body = d.request("GET", f"/contexts/{A}/files/leak")
    status2, _, body2 = d.request("GET", f"/contexts/{A}/files/rootlink{SECRET_PATH}")
    record("escape", "the files API does not follow planted symlinks",
           "GET the symlink, and a path through a symlink to /",
           status == 403 and status2 == 403 and SECRET.encode() not in body + body2,
           f"403 forbidden ({json.loads(body).get('message', '')[:60]})", (status, body, status2))
    status, _, body = d.request("PUT", f"/contexts/{A}/files/rootlink{SECRET_DIR}/{PWN}",
                                raw=b"overwritten")
    record("escape", "upload through a planted symlink",
           "PUT /contexts/ID/files/rootlink/<host dir>/FILE",
           status == 403 and not os.path.exists(f"{SECRET_DIR}/{PWN}"),
           f"{status} forbidden; nothing written on the host", (status, body))
    case("escape", "symlink race on an artifact",
         "write output/a.txt, then swap it for a symlink to the host secret while sandgate "
         "announces it",
         f"import os\nopen('output/a.txt', 'w').write('x')\nos.remove('output/a.txt')\n"
         f"os.symlink({SECRET_PATH!r}, 'output/a.txt')",
         lambda r: SECRET not in r.text)
    status, _, body = d.request("GET", f"/contexts/{A}/files/output/a.txt")
    record("escape", "the artifact symlink is not served", "GET the swapped artifact",
           status == 403 and SECRET.encode() not in body, f"{status}", (status, body))
    execute(d, "import os\nfor p in ['leak', 'rootlink', 'output/a.txt']: os.remove(p)", A)

    # --- secrets -------------------------------------------------------------------------
    case("secrets", "the environment",
         "look for the API token, the daemon's environment, host variables",
         "import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ').read())\n"
         "print(open('/proc/self/environ').read())",
         lambda r: TOKEN not in r.text and MARKER not in r.text and "SG_HOST_MARKER" not in r.text
         and "sg-api-" not in r.text,
         outcome=lambda r: "only the kernel's own variables: " + r.stdout.splitlines()[0][:90])
    case("secrets", "search the filesystem for the token and a neighbour's key",
         "walk every readable file outside /usr and /sys for the token, the neighbour's HMAC "
         "key and the host marker",
         # reversed in the code, so that the code's own history does not hold them
         f"import os\nneedles = [x[::-1].encode() for x in "
         f"[{TOKEN[::-1]!r}, {NEIGHBOUR_KEY[::-1]!r}, {MARKER[::-1]!r}]]\n"
         "found, n = [], 0\n"
         "paths = [f'/proc/{p}/{f}' for p in os.listdir('/proc') if p.isdigit()\n"
         "         for f in ('environ', 'cmdline')]\n"
         "for top in ['/etc', '/tmp', '/conn', '/home', '/dev/shm', '/sys/fs/cgroup']:\n"
         "    for root, dirs, files in os.walk(top):\n"
         "        paths += [os.path.join(root, f) for f in files]\n"
         "for p in paths:\n"
         "    try: data = open(p, 'rb').read(1 << 20)\n"
         "    except Exception: continue\n"
         "    n += 1\n"
         "    found += [p for x in needles if x in data]\n"
         "print(n, 'files read', found)",
         lambda r: r.stdout.strip().endswith("[]") and NEIGHBOUR_KEY not in r.text,
         outcome=lambda r: r.stdout.strip()[:80])
    case("secrets", "another session's connection file",
         "open the neighbour's connection file and sockets by their host path",
         f"import os, socket\ntry: print(open({NEIGHBOUR_CONN + '/kernel.json'!r}).read())\n"
         f"except OSError as e: print(e.strerror)\n"
         f"s = socket.socket(socket.AF_UNIX)\n"
         f"try: s.connect({NEIGHBOUR_CONN + '/kernel-1'!r}); print('CONNECTED')\n"
         f"except OSError as e: print(e.strerror)",
         lambda r: NEIGHBOUR_KEY not in r.text and "CONNECTED" not in r.text)
    case("secrets", "the host's identity",
         "hostname, /etc/passwd, /etc/shadow, /etc/hosts of the host",
         "import socket, os\nprint(socket.gethostname())\nprint(open('/etc/passwd').read())\n"
         "print(os.path.exists('/etc/shadow'))",
         lambda r: socket.gethostname() not in r.stdout.splitlines()[0] and
         "False" in r.stdout.splitlines()[-1] and len(r.stdout.splitlines()) < 12,
         outcome=lambda r: "a generated /etc: hostname " + r.stdout.splitlines()[0] +
         ", no shadow file")

    # --- network -----------------------------------------------------------------------
    def connect_code(host, port, kind="tcp"):
        if kind == "udp":
            return (f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                    f"try: s.sendto(b'x', ({host!r}, {port})); print('SENT')\n"
                    f"except OSError as e: print(e.strerror)")
        return (f"import socket\ntry: socket.create_connection(({host!r}, {port}), timeout=3); "
                f"print('CONNECTED')\nexcept OSError as e: print(e.strerror or e)")

    case("network", "TCP to a host service on 127.0.0.1",
         "connect to a listener on the host's loopback",
         connect_code("127.0.0.1", tcp_lo.addr[1]),
         lambda r: "CONNECTED" not in r.stdout and tcp_lo.hits == 0)
    case("network", "TCP to the host's own address",
         f"connect to a listener on the host's address ({HOST_IP})",
         connect_code(HOST_IP or "127.0.0.1", tcp_host.addr[1]),
         lambda r: "CONNECTED" not in r.stdout and tcp_host.hits == 0)
    case("network", "sandgate's own HTTP port",
         "connect to 127.0.0.1:<sandgate's port> and call the API from inside",
         connect_code("127.0.0.1", PORT),
         lambda r: "CONNECTED" not in r.stdout)
    case("network", "UDP out",
         "sendto() a host UDP listener and a public DNS server",
         connect_code("127.0.0.1", udp_lo.addr[1], "udp") + "\n" +
         connect_code("8.8.8.8", 53, "udp"),
         lambda r: udp_lo.hits == 0 and r.stdout.count("SENT") <= 1,
         outcome=lambda r: "no route; the host listener received nothing")
    case("network", "DNS",
         "resolve a public name",
         "import socket\ntry: print(socket.gethostbyname('example.com'))\n"
         "except OSError as e: print(e)",
         lambda r: "Name or service not known" in r.stdout or "Temporary failure" in r.stdout)
    case("network", "raw sockets and ICMP",
         "open SOCK_RAW/IPPROTO_ICMP and a packet socket",
         "import socket\nfor fam, typ, proto in [(socket.AF_INET, socket.SOCK_RAW, 1),\n"
         "                        (socket.AF_PACKET, socket.SOCK_RAW, 3)]:\n"
         "    try: socket.socket(fam, typ, proto); print('OPEN')\n"
         "    except OSError as e: print(e.strerror)",
         lambda r: "OPEN" not in r.stdout)
    case("network", "the cloud metadata address",
         "connect to 169.254.169.254:80",
         connect_code("169.254.169.254", 80),
         lambda r: "CONNECTED" not in r.stdout)
    case("network", "a host abstract Unix socket",
         "connect to an abstract-namespace socket the host listens on",
         f"import socket\ns = socket.socket(socket.AF_UNIX)\n"
         f"try: s.connect({unix_abstract.addr!r}); print('CONNECTED')\n"
         f"except OSError as e: print(e.strerror)",
         lambda r: "CONNECTED" not in r.stdout and unix_abstract.hits == 0)

    # --- resource abuse ------------------------------------------------------------------
    case("resources", "fork bomb",
         "fork until something gives",
         "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
         "            import time; time.sleep(30); os._exit(0)\n        n += 1\n"
         "except OSError as e: print('stopped after', n, 'forks:', e.strerror)",
         lambda r: "stopped after" in r.stdout or (r.errors and "out of memory" in
                                                   r.errors[-1]["value"]), timeout=60)
    case("resources", "memory bomb",
         f"allocate far past --memory ({MEMORY_MIB} MiB)",
         "chunks = []\nwhile True: chunks.append(bytearray(64 << 20))",
         lambda r: r.errors and (r.errors[-1]["name"] in ("MemoryError", "KernelError")),
         timeout=60)
    used_before = os.statvfs(d.dir).f_bfree
    case("resources", "fill the workspace",
         f"write until the disk is full (workspace limit {WORKSPACE_MIB} MiB)",
         "import os\nn = 0\ntry:\n    with open('big', 'wb') as f:\n        while True:\n"
         "            f.write(b'x' * (1 << 20)); f.flush(); n += 1\n"
         "except OSError as e: print(n, 'MiB then', e.strerror)",
         lambda r: "No space left" in r.stdout and int(r.stdout.split()[0]) <= WORKSPACE_MIB,
         outcome=lambda r: r.stdout.strip())
    host_used = (used_before - os.statvfs(d.dir).f_bfree) * os.statvfs(d.dir).f_frsize
    record("resources", "the host disk pays at most the workspace size",
           "measure the host filesystem around the workspace fill",
           host_used <= (WORKSPACE_MIB + 8) << 20, f"{host_used >> 20} MiB used on the host")
    execute(d, "import os; os.remove('big')", A)
    case("resources", "fill /tmp",
         f"write to /tmp until it is full (--tmp-size {TMP_MIB} MiB)",
         "n = 0\ntry:\n    with open('/tmp/big', 'wb') as f:\n        while True:\n"
         "            f.write(b'x' * (1 << 20)); f.flush(); n += 1\n"
         "except OSError as e: print(n, 'MiB then', e.strerror)\n"
         "import os; os.remove('/tmp/big')",
         lambda r: "No space left" in r.stdout and int(r.stdout.split()[0]) <= TMP_MIB,
         outcome=lambda r: r.stdout.strip())

    # a CPU spin past its timeout, with the neighbour executing meanwhile
    neighbour_during = {}
    t = threading.Thread(target=lambda: neighbour_during.update(
        r=execute(d, "sum(range(1000))", N, timeout=30)))
    t.start()
    case("resources", "CPU spin past the timeout",
         "while True: pass, with timeout=3; the neighbour executes meanwhile",
         "while True: pass",
         lambda r: r.errors and r.errors[-1]["name"] == "TimeoutError", timeout=3)
    t.join()
    record("resources", "the neighbour runs during the spin",
           "execute in the neighbour while the attacker spins",
           neighbour_during.get("r") and neighbour_during["r"].value == "499500",
           "answered")

    rss0 = rss_kib(d.proc.pid)
    r = case("resources", "output flood",
             f"print 64 MiB as fast as possible (--max-output {MAX_OUTPUT >> 20} MiB)",
             "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(65536): sys.stdout.write(line)",
             lambda r: len(r.stdout) + len(r.stderr) <= MAX_OUTPUT + 4096 and
             "output limit" in r.stderr, timeout=120,
             outcome=lambda r: f"{len(r.stdout) >> 10} KiB kept, then the limit marker")
    rss1 = rss_kib(d.proc.pid)
    # The same flood again: memory stays bounded however many floods come.
    # What the allocator keeps varies with how fast the reader reads (a
    # loaded machine: 26 MiB, then 31; idle: 28, then 0), but two floods
    # that each kept their 64 MiB would add 128.
    execute(d, "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(65536): "
            "sys.stdout.write(line)", A, timeout=120)
    rss2 = rss_kib(d.proc.pid)
    record("resources", "sandgate's memory after the flood",
           "RSS of the daemon before and after the flood, and after a second one",
           ASAN or rss2 - rss0 < 96 * 1024,
           f"RSS grew by {(rss1 - rss0) >> 10} MiB with the first flood (buffers the allocator "
           f"keeps) and by {(rss2 - rss1) >> 10} MiB with the second")
    case("resources", "one huge line",
         "print a 32 MiB string with no newline",
         "print('y' * (32 << 20), end='')",
         lambda r: len(r.stdout) <= MAX_OUTPUT and "output limit" in r.stderr, timeout=120,
         outcome=lambda r: f"{len(r.stdout) >> 10} KiB kept, then the limit marker")
    case("resources", "binary garbage on stdout",
         "write control characters, NULs and random bytes to stdout and to fd 1",
         "import os, sys\nsys.stdout.write(''.join(map(chr, range(0, 0x800))))\n"
         "sys.stdout.flush()\nos.write(1, os.urandom(65536))\nprint('\\nEND')",
         lambda r: all(l.get("type") != "unparsable" for l in r.lines) and "END" in r.stdout and
         "\x00" in r.stdout,
         outcome=lambda r: "valid NDJSON; NULs and every character kept")
    case("resources", "many tiny files",
         "create small files until stopped (inodes, the artifact scan, listings)",
         "import os\nos.makedirs('output/many', exist_ok=True)\nn = 0\ntry:\n"
         "    while True:\n        open(f'output/many/{n}', 'w').close(); n += 1\n"
         "except OSError as e: print(n, e.strerror)",
         lambda r: "No space left" in r.stdout or (r.errors and r.errors[-1]["name"] == "TimeoutError"),
         timeout=20,
         outcome=lambda r: r.outcome())
    status, _, body = d.request("GET", f"/contexts/{A}/files/output/many")
    listing = json.loads(body) if status == 200 else {}
    record("resources", "a directory of many files still lists",
           "GET the directory the previous case filled",
           status == 200 and len(listing.get("entries", [])) > 0,
           f"{len(listing.get('entries', []))} entries" +
           (" (truncated)" if listing.get("truncated") else ""), (status, body[:300]))
    execute(d, "import shutil; shutil.rmtree('output/many')", A, timeout=120)
    case("resources", "ignore the interrupt",
         "SIGINT ignored and a blocking loop: the timeout's interrupt does nothing",
         "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
         "while True: time.sleep(1)",
         lambda r: r.errors and r.errors[-1]["name"] == "TimeoutError" and
         "restart" in r.errors[-1]["value"], timeout=2)

    # --- protocol abuse from inside the kernel ------------------------------------------
    K = ("k = get_ipython().kernel\nparent = k.get_parent('shell')\n"
         "from jupyter_client.session import Session\n")
    case("protocol", "forged signature",
         "publish a stream message on iopub signed with a wrong key",
         K + "bad = Session(key=b'wrong-key')\n"
         "bad.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'FORGED\\n'}, parent=parent)\n"
         "import time; time.sleep(0.5); print('real')",
         lambda r: "FORGED" not in r.stdout and "real" in r.stdout,
         outcome=lambda r: "dropped; only the real output arrives")
    case("protocol", "unsigned message",
         "publish on iopub with an empty signature",
         K + "msg = k.session.msg('stream', {'name': 'stdout', 'text': 'UNSIGNED\\n'}, parent=parent)\n"
         "parts = k.session.serialize(msg)\nparts[1] = b''\nk.iopub_socket.send_multipart(parts)\n"
         "import time; time.sleep(0.5); print('real')",
         lambda r: "UNSIGNED" not in r.stdout and "real" in r.stdout,
         outcome=lambda r: "dropped; only the real output arrives")
    case("protocol", "replayed message",
         "send one correctly signed stream message three times",
         K + "msg = k.session.msg('stream', {'name': 'stdout', 'text': 'ONCE\\n'}, parent=parent)\n"
         "parts = k.session.serialize(msg)\n"
         "for _ in range(3): k.iopub_socket.send_multipart(parts)\n"
         "import time; time.sleep(0.5); print('real')",
         lambda r: r.stdout.count("ONCE") == 1,
         outcome=lambda r: f"delivered {r.stdout.count('ONCE')} time(s)")
    case("protocol", "malformed frames with a valid signature",
         "sign non-JSON frames and frames of the wrong types with the real key",
         K + "for frames in ([b'not json', b'{}', b'{}', b'{}'], [b'[]', b'{}', b'{}', b'{}'],\n"
         "               [b'{\"msg_id\": 1}', b'{}', b'{}', b'{}'], [b'{}'] * 3):\n"
         "    k.iopub_socket.send_multipart([b'<IDS|MSG>', k.session.sign(frames)] + frames)\n"
         "import time; time.sleep(0.5); print('real')",
         lambda r: r.stdout.strip() == "real",
         outcome=lambda r: "all four dropped; only the real output arrives")
    case("protocol", "oversized message",
         "publish a 80 MiB message on iopub (the limit is 64 MiB)",
         K + "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'z' * (80 << 20)},"
         " parent=parent)\nimport time; time.sleep(1); print('after')",
         lambda r: "zzzz" not in r.stdout, timeout=30,
         outcome=lambda r: "dropped (the kernel's iopub connection is reset, so this "
         "execution ends at its timeout); " + r.outcome()[:40])
    case("protocol", "forged end of execution",
         "send execute_reply and status idle early, then print LATE; the next request must "
         "not get LATE",
         K + "k.session.send(k.shell_stream.socket, 'execute_reply', {'status': 'ok', "
         "'execution_count': 1, 'user_expressions': {}, 'payload': []}, parent=parent, "
         "ident=k._parent_ident['shell'])\n"
         "k.session.send(k.iopub_socket, 'status', {'execution_state': 'idle'}, parent=parent)\n"
         "import time; time.sleep(2); print('LATE')",
         lambda r: "LATE" not in r.stdout,
         outcome=lambda r: "the execution ends at the forged reply")
    r2 = execute(d, "print('NEXT')", A)
    record("protocol", "late output is not given to the next request",
           "the request after the forged end", "LATE" not in r2.stdout and "NEXT" in r2.stdout,
           r2.stdout.strip())
    case("protocol", "messages for requests that do not exist",
         "publish 2 000 stream messages whose parent is a made-up msg_id",
         K + "fake = dict(parent['header']); fake['msg_id'] = 'not-a-request'\n"
         "for i in range(2000): k.session.send(k.iopub_socket, 'stream', "
         "{'name': 'stdout', 'text': 'ORPHAN\\n'}, parent=fake)\nprint('real')",
         lambda r: "ORPHAN" not in r.stdout and "real" in r.stdout, timeout=120,
         outcome=lambda r: "all 2 000 dropped; only the real output arrives")
    case("protocol", "input() with no one to answer",
         "call input() in a loop (allow_stdin is false for the REST API)",
         "for i in range(100):\n    try: input('?')\n    except Exception as e: err = e\n"
         "print(type(err).__name__)",
         lambda r: "StdinNotImplementedError" in r.stdout)
    case("protocol", "tamper with the connection file, then restart sandgate",
         "rewrite /conn/kernel.json (key, transport, address) so a restarted sandgate "
         "connects elsewhere",
         "import json\nc = json.load(open('/conn/kernel.json'))\n"
         "c.update(key='attacker-key', transport='tcp', ip='169.254.169.254')\n"
         "open('/conn/kernel.json', 'w').write(json.dumps(c))\nkept = 'still here'",
         lambda r: not r.errors,  # rewritten: the check after the restart means something
         outcome=lambda r: "the file in /conn was rewritten")
    d.restart()
    r = execute(d, "kept", A, timeout=60)
    record("protocol", "a restarted sandgate ignores the tampered file",
           "execute in the session after the restart",
           r.value == "'still here'", "re-adopted with the key sandgate recorded; variables "
           "intact" if r.value == "'still here'" else r.outcome(), r.text[-800:])
    after("restart")

    # --- the daemon survived it all ------------------------------------------------------
    status, _, body = d.request("GET", "/metrics")
    ok(status == 200, "metrics still served")
    ok(d.proc.poll() is None, "sandgate is still running")
finally:
    d.stop()
    for l in (tcp_lo, tcp_host, udp_lo, unix_abstract):
        l.sock.close()
    subprocess.run(["rm", "-rf", SECRET_DIR])
    if os.environ.get("SG_SECURITY_REPORT"):
        with open(os.environ["SG_SECURITY_REPORT"], "w") as f:
            for row in REPORT:
                f.write(json.dumps(row) + "\n")
done()
