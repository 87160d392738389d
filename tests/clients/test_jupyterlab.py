"""JupyterLab 4 (PyPI, pinned in tests/requirements-jupyterlab.txt, installed
in tests/.venv-jupyterlab by scripts/venv.sh) started with --gateway-url
pointing at sandgate: in headless Chromium (jupyterlab_browser.mjs) a Python
notebook and an R notebook (kernelspec ir) run cells in sandgate kernels and
their rendered outputs are checked (text, a PNG figure, an error), and a
JavaScript notebook (kernelspec deno) a value and an HTML table from
Deno.jupyter.html; the kernels must be sandgate sessions (GET /contexts)
running under gVisor, and be gone once JupyterLab has stopped (it deletes its gateway kernels on
shutdown).  A third Python notebook shows that E2B's types (e2b/chart,
e2b/data) change nothing on the page: a bundle displayed raw with them
renders the same HTML as without, a matplotlib figure one PNG, a DataFrame
one HTML table.  sandgate runs with a template, pd (--template
'pd=preload=import pandas as pd'): the browser opens a New Launcher, clicks
the template's kernelspec's card ("Python 3 (ipykernel) (pd)") and runs
pd.__version__ with no import, which renders pandas' version; its kernel is
a sandgate session of template pd (GET /contexts/{id}).  A second
JupyterLab server, with KERNEL_SNAPSHOT in its environment, starts its
kernels from that snapshot: in the browser a Python notebook's
print(snapvar) renders the value the snapshotted context had set.

SG_SCREENSHOT=path keeps the screenshot (docs/jupyterlab-gateway.png is made
so), SG_SCREENSHOT_DENO=path the JavaScript notebook's (docs/jupyterlab-deno.png)."""
import os
import shutil
import subprocess
import tempfile
import time

from jlab import Lab, VENV, browse, keep_screenshot
from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")

if not os.access(os.path.join(VENV, "bin", "jupyter-lab"), os.X_OK):
    ok(False, "tests/.venv-jupyterlab has JupyterLab (run scripts/venv.sh)")
    done()
    raise SystemExit

tmp = tempfile.mkdtemp(prefix="sg-lab-", dir="/tmp")
d = lab = None
started = time.time()
try:
    d = Daemon("--pool-size", "1", "--template", "pd=preload=import pandas as pd")
    diag(f"sandgate at {d.url}")
    lab = Lab(tmp, f"--gateway-url={d.url}", f"--GatewayClient.auth_token={TOKEN}",
              "--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60")
    version = subprocess.run([os.path.join(VENV, "bin", "jupyter-lab"), "--version"],
                             capture_output=True, text=True).stdout.strip()
    ok(lab.up and version.startswith("4.") and
       f"Kernels will be managed by the Gateway server running at:\n{d.url}\n" in
       "".join(l.split("] ", 1)[-1] + "\n" for l in lab.output().splitlines()),
       f"JupyterLab {version} starts with sandgate as its kernel gateway (and its "
       "/api/status, which lists the gateway's kernels, answers 200)",
       f"/api/status: {lab.status}\n" + lab.output()[-3000:])
    diag(f"JupyterLab up after {time.time() - started:.1f} s")

    shot = os.path.join(tmp, "lab.png")
    r, info = browse(lab, shot, 34, "python", "template=pd", "r", "deno", "rich")
    diag(f"the browser done after {time.time() - started:.1f} s")

    st, kernels = d.json("GET", "/api/kernels")
    st2, ctxs = d.json("GET", "/contexts")
    for step, lang in (("python", "python"), ("r", "r"), ("deno", "typescript")):
        kernel, where = info.get(f"kernel-{step}", ""), info.get(f"where-{step}", "").split()
        ok(st == 200 and kernel and kernel in [k["id"] for k in kernels],
           f"sandgate lists the {step} notebook's kernel {kernel} (GET /api/kernels)", kernels)
        ctx = next((c for c in ctxs or [] if c["id"] == kernel), None)
        ok(st2 == 200 and ctx and ctx.get("language", "").lower() == lang,
           f"the {step} kernel is a sandgate session like any other, language {lang} "
           "(GET /contexts)", ctxs)
        ok(len(where) == 3 and where[0].startswith("/home/user") and where[1] == "4.19.0-gvisor",
           f"the {step} cells ran in sandgate's workspace under gVisor "
           "(kernel release 4.19.0-gvisor)",
           where)

    kernel = info.get("kernel-template", "")
    st, ctx = d.json("GET", f"/contexts/{kernel}") if kernel else (None, None)
    ok(st == 200 and ctx.get("template") == "pd" and ctx.get("language") == "python",
       f"the notebook from the template's card has a kernel of template pd ({kernel}, "
       "GET /contexts/{id})", ctx)

    deno_shot = os.path.join(tmp, "lab-deno.png")
    for path, env in ((shot, "SG_SCREENSHOT"), (deno_shot, "SG_SCREENSHOT_DENO")):
        keep_screenshot(path, env)

    # A kernel from a snapshot: a JupyterLab server with KERNEL_SNAPSHOT in
    # its environment forwards it (with its other KERNEL_* variables) in
    # every kernel start it sends the gateway.
    st, c = d.json("POST", "/contexts", {}, timeout=180)
    d.json("POST", "/execute", {"code": "snapvar = 'from the snapshot'", "context_id": c["id"]},
           headers={"Accept": "application/json"}, timeout=180)
    st, snap = d.json("POST", f"/contexts/{c['id']}/snapshots", {}, timeout=180)
    os.environ["KERNEL_SNAPSHOT"] = snap.get("id", "")
    try:
        lab2 = Lab(os.path.join(tmp, "snap"), f"--gateway-url={d.url}",
                   f"--GatewayClient.auth_token={TOKEN}", "--GatewayClient.request_timeout=120")
    finally:
        del os.environ["KERNEL_SNAPSHOT"]
    try:
        ok(lab2.up, "a second JupyterLab starts with KERNEL_SNAPSHOT in its environment",
           lab2.output()[-3000:])
        r2, info2 = browse(lab2, os.path.join(tmp, "snap.png"), 5, "snapshot")
        kernel = info2.get("kernel-snapshot", "")
        st, ctx = d.json("GET", f"/contexts/{kernel}") if kernel else (None, None)
        ok(st == 200 and ctx.get("language") == "python",
           f"its notebook's kernel {kernel} is a sandgate session (GET /contexts/{{id}})", ctx)
        if r2.returncode != 0:
            diag(lab2.output()[-3000:])
    finally:
        lab2.stop()

    lab.stop()
    st, after = d.json("GET", "/api/kernels")
    ids = [k["id"] for k in after or []]
    ok(st == 200 and info.get("kernel-python") and not any(
        info.get(f"kernel-{step}") in ids for step in ("python", "r", "deno", "template", "rich")),
       "JupyterLab's shutdown deletes its kernels in sandgate", after)
    if r.returncode != 0:
        diag(lab.output()[-3000:])
    diag(f"{time.time() - started:.1f} s in all")
finally:
    if lab:
        lab.stop()
    if d:
        d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
