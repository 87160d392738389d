"""Templates on real runsc, side by side: "deb", an OCI image this test
builds (mmdebstrap makes a Debian 12 root with ipykernel, buildah turns it
into an OCI image layout with a marker file of its own), and "pd", the
host's /usr with `import pandas as pd` preloaded.  A context of each sees
its own root; the pool serves both; a pd context answers pd.__version__ as
its first result; with the pool empty, a pd context restores from the
template's own snapshot (taken once, after the preload) instead of starting
fresh; the Jupyter API offers both as kernelspecs; a snapshot and a fork of
a template's context keep its root; a restart keeps contexts' templates and
the unpacked image; the same image as an archive, and an unpacked root as a
root=DIR template, work too; every refusal has its status and message;
another tenant sees the same templates and none of the first one's
contexts."""
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from sgd import SANDGATE, Daemon, add_key, wait_for
from tap import ok, diag, done

tmp = tempfile.mkdtemp(prefix="sg-templates-", dir="/tmp")
os.chmod(tmp, 0o711)
KEYS = os.path.join(tmp, "keys")
ALICE = add_key(KEYS, "alice")
BOB = add_key(KEYS, "bob")
MARKER = "made-by-test-templates"
ROOT_CHECK = ("import os\n"
              "m = '/IMAGE-MARKER'\n"
              "print(open(m).read().strip() if os.path.exists(m) else 'no-marker', "
              "os.path.exists('/usr/local/bin/runsc'))")


def sh(cmd, timeout=600):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def build_image():
    """(an OCI image layout (tag v1), "", the seconds it took) or (None, why, 0)."""
    rootfs_tar = os.path.join(tmp, "root.tar")
    layout = os.path.join(tmp, "layout")
    marker = os.path.join(tmp, "IMAGE-MARKER")
    with open(marker, "w") as f:
        f.write(MARKER + "\n")
    t0 = time.time()
    rc, out = sh(f"mmdebstrap --variant=minbase --include=python3-ipykernel bookworm {rootfs_tar}")
    if rc != 0:
        return None, out[-3000:], 0
    rc, out = sh(f"set -e; c=$(buildah from scratch); buildah add $c {rootfs_tar} /; "
                 f"buildah copy $c {marker} /IMAGE-MARKER; "
                 f"buildah commit --format oci $c oci:{layout}:v1; buildah rm $c")
    os.unlink(rootfs_tar)
    if rc != 0:
        return None, out[-3000:], 0
    return layout, "", time.time() - t0


def run(d, ctx, code, key=ALICE):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": ctx},
                   headers={"Accept": "application/json"}, timeout=240, token=key)
    if st != 200 or r.get("error"):
        return (st, r)
    return r.get("stdout") or (r["results"][0]["text"] if r.get("results") else "")


def new_context(d, body, key=ALICE):
    return d.json("POST", "/contexts", body, token=key, timeout=240)


def templates(d, key=ALICE):
    st, ts = d.json("GET", "/templates", token=key)
    return {t["name"]: t for t in ts} if st == 200 else {}


def wait_pools(d, want_snapshot, timeout=400):
    deadline = time.time() + timeout
    ts = {}
    while time.time() < deadline:
        ts = templates(d)
        if all(t.get("pool_ready") == t.get("pool_size") for t in ts.values()) and \
                (not want_snapshot or ts.get("pd", {}).get("snapshot_bytes", 0) > 0):
            return ts
        time.sleep(0.5)
    return ts


def claimed(d, ctx):
    return any(f"session {ctx} claimed from the pool" in l for l in d.log)


def refused(args, want):
    """sandgate started with args exits at once with status 2 or 1 saying want."""
    state = tempfile.mkdtemp(prefix="state-", dir=tmp)
    r = subprocess.run([SANDGATE, "--listen", "127.0.0.1:0", "--state-dir", state, "--token",
                        "x" * 24, *args], capture_output=True, text=True, timeout=120)
    ok(r.returncode != 0 and want in r.stderr,
       f"sandgate {' '.join(args)[:70]} is refused: {want}", r.stderr[-1500:])


# The image builds (~2 min, mostly mmdebstrap) while sandgate refuses what
# needs no image: start-up refusals, each naming what is wrong.
built = {}
builder = threading.Thread(target=lambda: built.update(r=build_image()))
builder.start()
refused(["--template", "nameonly"], "NAME=SPEC")
refused(["--template", "x=colour=blue"], "root=/DIR, image=/PATH[:TAG]")
refused(["--template", "x=root=/nonexistent"], "root /nonexistent is not a directory")
refused(["--template", f"x=root={tmp}"], "lacks mount points sandboxes need")
refused(["--template", f"x=image={tmp}/none"], "image")
refused(["--template", "x=root=/a,image=/b"], "root= or image=, not both")
refused(["--pool-size", "ghost=1"], "no template, kernelspec or language 'ghost'")
refused(["--template", "python3=preload=1"], "a kernelspec has that name")
refused(["--template", "x=kernelspec=nosuch"], "no kernelspec named 'nosuch'")
builder.join()
layout, why, took = built["r"]
if layout:
    diag(f"image built in {took:.0f} s")
ok(layout is not None, "the test image is built (mmdebstrap + buildah, OCI layout)", why)
if layout is None:
    done()
    raise SystemExit

d = None
try:
    d = Daemon("--keys-file", KEYS, "--pool-size", "0", "--pause-after", "0",
               "--template", f"deb=image={layout}:v1",
               "--template", "pd=preload=import pandas as pd",
               "--pool-size", "deb=1", "--pool-size", "pd=1", start_timeout=600)
    ok(any("template deb: image unpacked" in l for l in d.log),
       "the image is unpacked at start-up", "".join(d.log[-10:]))
    ts = wait_pools(d, True)
    ok(ts.get("deb", {}).get("root") == "image" and ts.get("pd", {}).get("root") == "host" and
       ts["pd"].get("preload") is True and ts["deb"].get("preload") is False and
       all(t.get("kernelspec") == "python3" and t.get("language") == "python"
           for t in ts.values()),
       "GET /templates lists both, with their roots, preload and kernelspec", ts)
    ok(ts.get("deb", {}).get("pool_ready") == 1 and ts.get("pd", {}).get("pool_ready") == 1,
       "the pool holds a ready kernel of each template", ts)
    ok(ts.get("pd", {}).get("snapshot_bytes", 0) > 1 << 20 and
       ts.get("deb", {}).get("snapshot_bytes") == 0,
       "the template with preload code has its own snapshot; the other none", ts)
    tsid = next((m.group(1) for l in d.log
                 for m in [re.search(r"template pd snapshotted after its preload \((\S+),", l)]
                 if m), None)

    # Side by side: each context sees its own root, and both came from the pool.
    st, deb = new_context(d, {"template": "deb"})
    st2, pdc = new_context(d, {"template": "pd"})
    ok(st == 201 and deb.get("template") == "deb" and st2 == 201 and
       pdc.get("template") == "pd", "POST /contexts {template} makes a context of each",
       (deb, pdc))
    first = run(d, pdc["id"], "pd.__version__")
    ok(isinstance(first, str) and re.fullmatch(r"'\d+\.\d+\.\d+'", first),
       "a pd context's first execution, pd.__version__, answers (pandas preloaded)", first)
    ok(run(d, deb["id"], ROOT_CHECK) == f"{MARKER} False\n",
       "the deb context sees the image's root (its marker, not the host's /usr)",
       run(d, deb["id"], ROOT_CHECK))
    ok(run(d, pdc["id"], ROOT_CHECK) == "no-marker True\n",
       "the pd context sees the host's /usr, not the image", run(d, pdc["id"], ROOT_CHECK))
    got = run(d, deb["id"], "import numpy")
    ok(isinstance(got, tuple) and "ModuleNotFoundError" in str(got),
       "the image has no numpy: what a template's code imports is its root's", got)
    ok(claimed(d, deb["id"]) and claimed(d, pdc["id"]),
       "the pool served both contexts (claimed, not started)", "".join(d.log[-15:]))

    # The pool is empty now: a pd context restores from the template's snapshot.
    st, pd2 = new_context(d, {"template": "pd"})
    out = run(d, pd2["id"], "pd.__version__") if st == 201 else (st, pd2)
    # The log is read by a thread of its own: its line may come after the answer.
    restored = st == 201 and wait_for(lambda: any(
        f"kernel {pd2['id']} ready" in l and f"restored from snapshot {tsid}" in l
        for l in d.log), 10)
    ok(st == 201 and out == first and not claimed(d, pd2["id"]) and restored,
       "with its pool empty, a pd context restores from the template's snapshot (pandas there)",
       (out, "".join(d.log[-12:])))
    ok("parent" not in pd2, "a template's own snapshot is no context's parent", pd2)
    st, snaps = d.json("GET", "/snapshots", token=ALICE)
    st2, _ = d.json("GET", f"/snapshots/{tsid}", token=ALICE)
    ok(tsid and st == 200 and all(s["id"] != tsid for s in snaps) and st2 == 404,
       "the template's own snapshot is not the API's (not listed, 404)", (tsid, snaps, st2))
    st, _ = d.json("DELETE", f"/snapshots/{tsid}", token=ALICE)
    ok(st == 404, "nor can it be deleted through the API", st)

    # Snapshots and forks keep the template's root.
    run(d, deb["id"], "x = 'deb state'")
    st, child = d.json("POST", f"/contexts/{deb['id']}/fork", {}, token=ALICE, timeout=240)
    ok(st == 201 and child.get("template") == "deb" and
       run(d, child["id"], ROOT_CHECK + "\nprint(x)") == f"{MARKER} False\ndeb state\n",
       "a fork of a deb context has the image's root and the state", child)

    # The Jupyter API: a kernelspec per template.
    st, specs = d.json("GET", "/api/kernelspecs", token=ALICE)
    ks = (specs or {}).get("kernelspecs", {})
    ok(st == 200 and "deb" in ks and "pd" in ks and
       ks["pd"]["spec"]["display_name"].endswith("(pd)") and
       ks["pd"]["spec"]["metadata"]["sandgate"] == {"template": "pd", "kernelspec": "python3"},
       "GET /api/kernelspecs offers each template as a kernelspec", sorted(ks))
    st, kern = d.json("POST", "/api/kernels", {"name": "deb"}, token=ALICE, timeout=240)
    st2, kctx = d.json("GET", f"/contexts/{(kern or {}).get('id')}", token=ALICE)
    ok(st == 201 and kern.get("name") == "deb" and kctx.get("template") == "deb" and
       run(d, kern["id"], ROOT_CHECK) == f"{MARKER} False\n",
       "POST /api/kernels {name: deb} starts a kernel of the template", (kern, kctx))

    # Refusals.
    st, r = new_context(d, {"template": "nope"})
    ok(st == 404 and r.get("error") == "not_found" and "no template 'nope'" in r.get("message"),
       "an unknown template: 404", r)
    st, r = new_context(d, {"template": "pd", "language": "python"})
    ok(st == 400 and "not both" in r.get("message", ""), "template with language: 400", r)
    st, r = new_context(d, {"template": 5})
    ok(st == 400 and "template" in r.get("message", ""), "a template that is no string: 400", r)
    st, s = d.json("POST", f"/contexts/{deb['id']}/snapshots", {}, token=ALICE, timeout=240)
    st2, r = new_context(d, {"snapshot": s.get("id"), "template": "pd"})
    ok(st == 201 and st2 == 400 and "alone" in r.get("message", ""),
       "snapshot with template: 400 (the snapshot's template is its own)", r)
    st, r = new_context(d, {"snapshot": s.get("id")})
    ok(st == 201 and r.get("template") == "deb",
       "a context from a snapshot of a deb context has the template", r)

    # Another tenant: the same templates, none of alice's contexts.
    ok(set(templates(d, BOB)) == {"deb", "pd"}, "bob sees the same templates", templates(d, BOB))
    st, bc = new_context(d, {"template": "pd"}, key=BOB)
    ok(st == 201 and run(d, bc["id"], "pd.__version__", key=BOB) == first,
       "bob makes a pd context of his own", bc)
    st, _ = d.json("GET", f"/contexts/{deb['id']}", token=BOB)
    ok(st == 404, "bob does not see alice's deb context", st)

    # A restart: contexts keep their templates, the image is not unpacked
    # again, the template's snapshot is kept.  The unpacked root serves as a
    # root=DIR template too, and the image as an archive (unpacked anew).
    unpacked = next(iter(
        os.path.join(d.dir, "templates", "deb", k, "rootfs")
        for k in os.listdir(os.path.join(d.dir, "templates", "deb"))))
    archive = os.path.join(tmp, "image.tar")
    sh(f"tar -C {layout} -cf {archive} .")
    d.cmd += ["--template", f"dir=root={unpacked}", "--template", f"arc=image={archive}"]
    deadline = time.time() + 120  # the last snapshot's resume over
    while d.json("GET", f"/contexts/{deb['id']}", token=ALICE)[1].get("state") != "running" \
            and time.time() < deadline:
        time.sleep(0.2)
    d.restart()
    ok(not any("template deb: unpacking" in l for l in d.log) and
       any("template arc: image unpacked" in l for l in d.log),
       "after a restart the image is not unpacked again (the archive is, once)",
       "".join(d.log[-20:]))
    # Its state once it answered: a re-adopted context is "starting" first.
    got = run(d, deb["id"], ROOT_CHECK + "\nprint(x)")
    st, again = d.json("GET", f"/contexts/{deb['id']}", token=ALICE)
    ok(st == 200 and again.get("template") == "deb" and again.get("state") == "running" and
       got == f"{MARKER} False\ndeb state\n",
       "a deb context re-adopted after the restart keeps its template, root and state",
       (again, got, "".join(d.log[-20:])))
    ok(templates(d).get("pd", {}).get("snapshot_bytes", 0) > 0 and
       not any("template pd changed" in l for l in d.log),
       "the template's snapshot is kept across the restart", templates(d))
    for name in ("dir", "arc"):
        st, c = new_context(d, {"template": name})
        ok(st == 201 and run(d, c["id"], ROOT_CHECK) == f"{MARKER} False\n",
           f"a context of template {name} ({'root=DIR' if name == 'dir' else 'image archive'}) "
           "sees that root", (c, run(d, c.get("id", ""), ROOT_CHECK)))
finally:
    if d:
        d.stop()

# The refusal that needs the image (the others ran while it was built).
refused(["--template", f"x=image={layout}:v2"], "no image tagged 'v2'")
shutil.rmtree(tmp, ignore_errors=True)
done()
