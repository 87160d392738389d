"""The container image (docker/Dockerfile), built and run here.

- docker/build-image.sh builds it with buildah from a local Debian 12 base
  (mmdebstrap), or reuses the image built from the same source tree.
- Container A runs with the narrow privileges docker/README.md lists (every
  capability dropped but those, the loop devices, the cgroup tree): /health
  answers, `podman healthcheck run` passes, HTTP is served as uid 64122 while
  the launcher keeps root; the official E2B SDK runs its whole script
  (tests/lib/e2b_sdk.mjs) and imports pandas, numpy, matplotlib and scipy
  in a context it creates.
- `podman stop` + `podman start`: the stop pauses the idle sessions to the
  state volume (SANDGATE_PAUSE_ON_STOP), the start re-adopts them and the
  context has its variables.
- Container B, --privileged, a new container on the same volume (a pod
  replaced in Kubernetes): the context again has its variables.
- Everything started is removed (containers, the volume; the image stays for
  the next run); no loop device is left on the volume's files.

Runs once per CI run: the sanitizer build (configure --enable-sanitizers)
skips it, since the image does not depend on the build tree."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

from tap import ok, diag, done

SRC = os.path.abspath(os.environ.get("SG_SRCDIR", "."))
BUILD = os.path.abspath(os.environ.get("SG_BUILDDIR", "."))
TOKEN = "test-token-image-0123456789abcdef"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
NAME = f"sg-test-image-{os.getpid()}"
VOLUME = NAME + "-state"
# The narrow privileges docker/README.md documents for nested runsc.
NARROW = ["--cap-drop", "ALL",
          "--cap-add", "SYS_ADMIN,MKNOD,SYS_CHROOT,SETUID,SETGID,SETFCAP,CHOWN,FOWNER,"
          "DAC_OVERRIDE",
          "--device", "/dev/loop-control", "--device-cgroup-rule", "b 7:* rwm",
          "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]
# This machine's default limits are too low for podman's container start.
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]

# The SDK in a context: the data stack, then a variable to find after restarts.
SDK_CONTEXT = r"""
import { Sandbox } from '@e2b/code-interpreter'
const [url, token, ctxId] = process.argv.slice(1)
const sbx = await Sandbox.create({ debug: true, sandboxUrl: url })
sbx.trafficAccessToken = token
sbx.envdAccessToken = token
const out = {}
try {
  if (!ctxId) {
    const ctx = await sbx.createCodeContext()
    out.id = ctx.id
    const ex = await sbx.runCode(
      "import numpy, pandas, matplotlib, scipy\n" +
      "import matplotlib.pyplot as plt\n" +
      "df = pandas.DataFrame({'a': numpy.arange(4)})\n" +
      "kept = int(df.a.sum())\n" +
      "plt.plot(df.a); plt.show()\n" +
      "print(numpy.__version__, pandas.__version__, matplotlib.__version__, scipy.__version__)",
      { context: ctx })
    out.stdout = ex.logs.stdout.join('')
    out.error = ex.error ? `${ex.error.name}: ${ex.error.value}` : null
    out.png = ex.results.some((r) => r.png)
  } else {
    const ex = await sbx.runCode("print(kept, type(df).__name__)", { context: { id: ctxId } })
    out.stdout = ex.logs.stdout.join('')
    out.error = ex.error ? `${ex.error.name}: ${ex.error.value}` : null
  }
} catch (e) {
  out.error = `${e?.stack || e}`
}
console.log(JSON.stringify(out))
"""


def run(*cmd, timeout=120, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)


def podman(*args, timeout=120):
    return run("podman", "--runtime", RUNC, *args, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            time.sleep(0.5)
    return None


def sdk_context(url, ctx_id=""):
    r = run("node", "--input-type=module", "-e", SDK_CONTEXT, url, TOKEN, ctx_id,
            cwd=os.path.join(SRC, "tests"), timeout=300)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": r.stderr[-2000:]}


def start(name, url_port, privileges):
    # The longer stop budget docker/README.md recommends: on a loaded
    # machine two pauses can take longer than the default 8 s.
    r = podman("run", "-d", "--name", name, *ULIMITS, *privileges, "--stop-timeout", "60",
               "-e", "SANDGATE_PAUSE_ON_STOP=50",
               "-p", f"127.0.0.1:{url_port}:49999", "-e", f"SANDGATE_TOKEN={TOKEN}",
               "-v", f"{VOLUME}:/var/lib/sandgate", IMAGE)
    return r


def logs(name):
    r = podman("logs", name)
    return r.stdout + r.stderr


def came_back(name, r, url, ctx, started_what, resumed_what):
    """After a (re)start whose podman result is r: /health answers, and the
    context made before still has its variables."""
    ok(r.returncode == 0 and wait_health(url), started_what, r.stderr + logs(name)[-2000:])
    again = sdk_context(url, ctx or "")
    ok(again.get("stdout") == "6 DataFrame\n" and not again.get("error"), resumed_what, again)


def sanitizer_build():
    try:
        return "--enable-sanitizers" in open(os.path.join(BUILD, "config.status")).read()
    except OSError:
        return False


if sanitizer_build():
    print("1..0 # SKIP the image is built and tested once, in the build without sanitizers")
    raise SystemExit(0)
if os.geteuid() != 0:
    print("1..0 # SKIP needs root (podman and nested runsc); CI runs as root")
    raise SystemExit(0)

missing = [t for t in ("buildah", "podman", "mmdebstrap", "node") if not shutil.which(t)]
ok(not missing and os.path.exists(RUNC), "buildah, podman, mmdebstrap, runc and node are "
   "installed (scripts/deps.sh --test)", f"missing: {missing or RUNC}")
if missing:
    done()

t0 = time.time()
r = run(os.path.join(SRC, "docker/build-image.sh"), timeout=3000)
IMAGE = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None
ok(IMAGE is not None, "docker/build-image.sh builds the image", r.stderr[-3000:])
if IMAGE is None:
    done()
diag(f"{IMAGE}: {'reused' if 'reusing' in r.stderr else 'built'} in {time.time() - t0:.0f} s")

cfg = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
conf = cfg.get("Config", {})
env = dict(e.split("=", 1) for e in conf.get("Env", []))
ok(env.get("SANDGATE_LISTEN") == "0.0.0.0:49999" and
   env.get("SANDGATE_STATE_DIR") == "/var/lib/sandgate" and
   "/var/lib/sandgate" in (conf.get("Volumes") or {}) and
   "49999/tcp" in (conf.get("ExposedPorts") or {}),
   "the image listens on 0.0.0.0:49999 with its state in the volume /var/lib/sandgate", conf)
hc = cfg.get("Healthcheck") or conf.get("Healthcheck") or {}  # podman: beside Config
ok("/health" in " ".join(hc.get("Test") or []), "the image has a HEALTHCHECK on /health", hc)

port = free_port()
url = f"http://127.0.0.1:{port}"
started = []
try:
    # --- A: narrow privileges -------------------------------------------------
    t1 = time.time()
    r = start(NAME, port, NARROW)
    started.append(NAME)
    ok(r.returncode == 0, "podman run with the narrow privileges", r.stderr[-2000:])
    health = wait_health(url)
    ok(health and health.get("status") == "ok", f"/health answers ({time.time() - t1:.1f} s)",
       logs(NAME)[-3000:])
    r = podman("healthcheck", "run", NAME)
    ok(r.returncode == 0, "podman healthcheck run: healthy", r.stdout + r.stderr)

    top = podman("top", NAME, "user,comm").stdout
    procs = [l.split(None, 1) for l in top.splitlines()[1:] if l.strip()]
    users = {comm.strip(): user for user, comm in procs}
    ok(users.get("sandgate") == "64122", "HTTP is served as uid 64122 (sandgate, PID 1)", top)
    ok(users.get("sandgate-priv") == "root", "the launcher keeps root", top)

    r = run("node", os.path.join(SRC, "tests/lib/e2b_sdk.mjs"), url, TOKEN, timeout=600)
    checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    failed = [c for c in checks if not c["ok"]]
    ok(len(checks) >= 15 and not failed,
       f"the E2B SDK's script passes against the container ({len(checks)} checks)",
       json.dumps(failed)[:3000] + r.stderr[-2000:])

    first = sdk_context(url)
    ctx = first.get("id")
    ok(ctx and not first.get("error") and
       re.fullmatch(r"\d\S* \d\S* \d\S* \d\S*\n", first.get("stdout", "")) and first.get("png"),
       "E2B SDK, in a context: numpy, pandas, matplotlib, scipy import; a plot comes back "
       f"as PNG ({first.get('stdout', '').strip()})", first)

    # --- A, stopped and started: same container, same volume ------------------
    t1 = time.time()
    r = podman("stop", NAME, timeout=120)
    stop_s = time.time() - t1
    log = logs(NAME)
    ok(r.returncode == 0 and "every session that could pause is paused" in log,
       f"podman stop: the idle sessions pause to the volume first ({stop_s:.1f} s)", log[-3000:])
    came_back(NAME, podman("start", NAME), url, ctx, "podman start: /health answers again",
              "after the restart the context is re-adopted with its variables")
    ok(f"re-adopting paused session {ctx}" in logs(NAME), "the log says it re-adopted the context")

    # --- B: a new container, --privileged, on the same volume -----------------
    podman("stop", NAME, timeout=120)
    podman("rm", "-f", NAME)
    started.remove(NAME)
    name_b = NAME + "-b"
    r = start(name_b, port, ["--privileged"])
    started.append(name_b)
    came_back(name_b, r, url, ctx, "a new container (--privileged) on the same volume starts",
              "... and resumes the context with its variables")
finally:
    for name in started:
        podman("rm", "-f", "-v", "-t", "0", name)
    vol = podman("volume", "inspect", "--format", "{{.Mountpoint}}", VOLUME).stdout.strip()
    r = podman("volume", "rm", "-f", VOLUME)
    ok(r.returncode == 0, "the containers and the volume are removed", r.stderr)
    loops = run("losetup", "-a").stdout
    ok(not vol or vol not in loops, "no loop device is left on the volume's files",
       [l for l in loops.splitlines() if vol and vol in l])
done()
