"""A tenant's memory= and cpus= are its sandboxes' ceilings, on real runsc.

A keys file holds carol (`sandgate keys add carol --memory 256 --cpus 0.5`)
and dan (no ceilings); the daemon runs with its defaults (--memory 1024,
--cpus 1).  Attack: carol, whose line allows 256 MiB and half a CPU,
allocates 400 MB and spins a CPU as if the server's limits were hers.

- The OCI spec each sandbox was started with (its bundle's config.json)
  and the cgroup it runs in say 256 MiB and 50000 us per 100 ms for
  carol, the server's 1024 MiB and 100000 us for dan.
- dan allocates 400 MB and keeps it; carol's 400 MB ends her kernel with
  the error `out of memory (limit 256 MiB)`; she restarts her context and
  allocates 100 MB; dan's 400 MB is still there.
- A busy loop in carol's sandbox gets at most half a CPU, measured from
  its cgroup's cpuacct.usage over 3 s, and the kernel throttled it
  (cpu.stat's nr_throttled grew); dan's figure is shown beside it, not
  asserted: on a shared machine what an unthrottled loop gets depends on
  the neighbours.
- The daemon and dan's session answer throughout.

Needs root, runsc and cgroup v1 (cpu, cpuacct and memory hierarchies)."""
import glob
import json
import os
import shutil
import tempfile
import threading
import time

from sgd import Daemon, add_key, read_int as num, sandbox_cgroups as cgroups
from tap import ok, diag, done, skip

CG = "/sys/fs/cgroup"
if not all(os.path.isdir(f"{CG}/{h}") for h in ("cpu", "cpuacct", "memory")):
    skip("a tenant's memory and CPU ceilings", "no cgroup v1 cpu, cpuacct and memory here")
    done()

tmp = tempfile.mkdtemp(prefix="sg-limits-", dir="/tmp")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")
CAROL = add_key(KEYS, "carol", "--memory", "256", "--cpus", "0.5")
DAN = add_key(KEYS, "dan")
ok("memory=256" in open(KEYS).read() and "cpus=0.5" in open(KEYS).read(),
   "sandgate keys add --memory 256 --cpus 0.5 writes memory= and cpus= to carol's line")


def oci_resources(d, ctx):
    """linux.resources of the bundle whose cgroupsPath names ctx."""
    for path in glob.glob(f"{d.dir}/**/bundle/config.json", recursive=True):
        try:
            spec = json.load(open(path))
        except (OSError, ValueError):
            continue
        linux = spec.get("linux", {})
        if ctx in linux.get("cgroupsPath", ""):
            return linux.get("resources", {})
    return {}


def run(d, key, ctx, code, timeout=120):
    return d.json("POST", "/execute", {"code": code, "context_id": ctx}, token=key,
                  headers={"Accept": "application/json"}, timeout=timeout)


def context(d, key):
    st, c = d.json("POST", "/contexts", {}, token=key)
    assert st == 201, (st, c)
    st, r = run(d, key, c["id"], "1+1")
    assert st == 200 and r["results"][0]["text"] == "2", (st, r)
    return c["id"]


GRAB = "b = b'x' * ({mb} << 20)\nprint(len(b) >> 20)"
SPIN = "import time\nt = time.time()\nwhile time.time() - t < 4.5: pass"


def throttled(cg):
    try:
        with open(f"{CG}/cpu{cg.get('cpu', '/-')}/cpu.stat") as f:
            return dict(l.split() for l in f).get("nr_throttled")
    except OSError:
        return None


def cpu_share(d, key, ctx):
    """(the CPUs ctx's sandbox used on average over 3 s of a busy loop in it,
    the periods the kernel throttled it meanwhile)."""
    cg = cgroups(ctx)
    usage = f"{CG}/cpuacct{cg.get('cpuacct', '/-')}/cpuacct.usage"
    t = threading.Thread(target=run, args=(d, key, ctx, SPIN))
    t.start()
    time.sleep(1)
    u0, n0, w0 = num(usage), throttled(cg), time.monotonic()
    time.sleep(3)
    u1, n1, w1 = num(usage), throttled(cg), time.monotonic()
    t.join()
    if None in (u0, u1, n0, n1):
        return None, None
    return (u1 - u0) / 1e9 / (w1 - w0), int(n1) - int(n0)


d = Daemon("--keys-file", KEYS, "--pool-size", "0", "--pause-after", "0")
try:
    carol, dan = context(d, CAROL), context(d, DAN)

    # --- what the sandboxes were given -----------------------------------------------------
    for who, ctx, mib, quota in (("carol", carol, 256, 50000), ("dan", dan, 1024, 100000)):
        res = oci_resources(d, ctx)
        ok(res.get("memory", {}).get("limit") == mib << 20 and
           res.get("cpu", {}).get("quota") == quota and res.get("cpu", {}).get("period") == 100000,
           f"{who}'s OCI spec: memory limit {mib} MiB, CPU quota {quota} us per 100 ms", res)
        cg = cgroups(ctx)
        ok(num(f"{CG}/memory{cg.get('memory')}/memory.limit_in_bytes") == mib << 20 and
           num(f"{CG}/cpu{cg.get('cpu')}/cpu.cfs_quota_us") == quota,
           f"{who}'s sandbox cgroup has the same limits", cg)

    # --- memory: 400 MB -------------------------------------------------------------------
    st, r = run(d, DAN, dan, GRAB.format(mb=400))
    ok(st == 200 and r.get("error") is None and r.get("stdout") == "400\n",
       "dan (the server's 1024 MiB) allocates 400 MB", (st, r))
    st, r = run(d, CAROL, carol, GRAB.format(mb=400))
    err = (r or {}).get("error") or {}
    ok(st == 200 and err.get("name") == "KernelError" and
       "out of memory (limit 256 MiB)" in err.get("value", ""),
       "carol's 400 MB: KernelError 'out of memory (limit 256 MiB)'", (st, r))
    diag(f"carol's error: {err.get('value', '')[:200]}")
    st, evs = d.json("GET", f"/events?types=oom&sandbox={carol}", token=CAROL)
    ok(st == 200 and [e.get("type") for e in evs.get("events", [])] == ["sandbox.lifecycle.oom"],
       "carol's GET /events has her sandbox's out-of-memory event", evs)
    st, c = d.json("GET", f"/contexts/{carol}", token=CAROL)
    diag(f"carol's context after: {st} {c.get('state') if isinstance(c, dict) else c}")
    st, _ = d.json("POST", f"/contexts/{carol}/restart", token=CAROL)
    st, r = run(d, CAROL, carol, GRAB.format(mb=100))
    ok(st == 200 and r.get("error") is None and r.get("stdout") == "100\n",
       "after a restart of her context carol allocates 100 MB (below her ceiling)", (st, r))
    res = oci_resources(d, carol)
    ok(res.get("memory", {}).get("limit") == 256 << 20,
       "her restarted sandbox has her ceiling again", res)
    st, r = run(d, DAN, dan, "len(b) >> 20")
    ok(st == 200 and r.get("results") and r["results"][0].get("text") == "400",
       "dan's session kept its 400 MB throughout", (st, r))
    st, h = d.json("GET", "/health")
    ok(st == 200 and h.get("status") == "ok", "the daemon answers", (st, h))

    # --- CPU: a busy loop -----------------------------------------------------------------
    share_carol, thr_carol = cpu_share(d, CAROL, carol)
    share_dan, thr_dan = cpu_share(d, DAN, dan)
    diag(f"CPUs used by a busy loop over 3 s: carol {share_carol:.2f} (throttled {thr_carol} "
         f"periods), dan {share_dan:.2f} (throttled {thr_dan}); {os.cpu_count()} cores, "
         f"load average {os.getloadavg()[0]:.1f}")
    ok(share_carol is not None and share_carol <= 0.55 and thr_carol > 0,
       "carol's busy loop gets at most half a CPU: the kernel throttles it (cpus=0.5)",
       (share_carol, thr_carol))
    st, r = run(d, DAN, dan, "1+1")
    ok(st == 200 and r["results"][0]["text"] == "2", "dan's session answers after", (st, r))
finally:
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)

done()
