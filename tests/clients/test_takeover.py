"""A person takes over an agent's live session: sandgate (real runsc) and
JupyterLab 4 with --gateway-url.  The agent, clients/python's Sandgate,
makes a context and a pandas DataFrame df (columns a, b) in it.  Jupyter
Server lists only the kernels it started or has a session on, so the
browser (jupyterlab_browser.mjs, step attach=ID, in headless Chromium)
first gives JupyterLab's server a session on the agent's kernel (POST
/api/sessions with its id, what docs/jupyter.md's curl does); then a new
notebook attaches to that kernel through the Select Kernel dialog
("Connect to Existing Kernel"), df.head() renders as an HTML table
and a cell adds
df['total'], which the agent's next execution sees.  Then both at once:
while the notebook's cell prints nb 0..5 over 3 s, the agent sends three
executions printing their own markers; all complete, each agent's response
holds its own lines only, the cell's output the nb lines only.  While the
agent's time.sleep(4) runs, the page shows the kernel busy (the app's
kernel status and the toolbar's indicator), idle after.  The kernel is the
agent's context throughout (GET /contexts/{id}: running) under gVisor.

SG_SCREENSHOT=path keeps the screenshot (docs/jupyterlab-takeover.png is
made so)."""
import os
import shutil
import sys
import tempfile
import threading
import time

from jlab import Lab, VENV, Browsing, keep_screenshot
from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
sys.path.insert(0, os.path.join(SRC, "clients", "python", "src"))
from sandgate import Sandgate  # noqa: E402

if not os.access(os.path.join(VENV, "bin", "jupyter-lab"), os.X_OK):
    ok(False, "tests/.venv-jupyterlab has JupyterLab (run scripts/venv.sh)")
    done()
    raise SystemExit

AGENTS = 3


def agents_at_once(d, ctx):
    """Three executions sent at once, each printing its own markers; returns
    [(marker, Execution or the exception, time sent)]."""
    out = [None] * AGENTS

    def one(i):
        marker, sent = f"agent{i}", time.time()
        try:
            ex = Sandgate(d.url, api_key=TOKEN, timeout=120).execute(
                f"import time\nfor j in range(3): print('{marker}', j, flush=True); "
                "time.sleep(0.1)", context=ctx)
        except Exception as e:  # reported by the checks
            ex = e
        out[i] = (marker, ex, sent)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(AGENTS)]
    for t in threads:
        t.start()
    return threads, out


tmp = tempfile.mkdtemp(prefix="sg-takeover-", dir="/tmp")
d = lab = browser = None
started = time.time()
try:
    d = Daemon("--pool-size", "1")
    agent = Sandgate(d.url, api_key=TOKEN, timeout=180)
    ctx = agent.create_context()
    ex = agent.execute("import os, platform\nimport pandas as pd\n"
                       "df = pd.DataFrame({'a': [1, 2, 3, 4], 'b': [10, 20, 30, 40]})\n"
                       "print(platform.release(), list(df.columns), len(df))", context=ctx)
    ok(ex.ok and ex.stdout.strip() == "4.19.0-gvisor ['a', 'b'] 4",
       f"the agent (clients/python) makes context {ctx.id} and a DataFrame df in it, "
       "under gVisor (kernel release 4.19.0-gvisor)", ex.to_dict())
    st, kernels = d.json("GET", "/api/kernels")
    ok(st == 200 and {"id": ctx.id, "name": "python3"}.items() <= next(
        (k for k in kernels if k.get("id") == ctx.id), {}).items(),
       "sandgate's GET /api/kernels lists the agent's context as a python3 kernel", kernels)
    lab = Lab(tmp, f"--gateway-url={d.url}", f"--GatewayClient.auth_token={TOKEN}",
              "--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60")
    ok(lab.up, "JupyterLab starts with sandgate as its kernel gateway", lab.output()[-3000:])

    shot = os.path.join(tmp, "takeover.png")
    browser = Browsing(lab, shot, f"attach={ctx.id}")
    ok(browser.until("column-added") is not None,
       "the notebook attached to the agent's kernel, rendered df and added a column")
    ex = agent.execute("print(list(df.columns), df['total'].tolist())", context=ctx)
    ok(ex.ok and ex.stdout.strip() == "['a', 'b', 'total'] [11, 22, 33, 44]",
       "the agent's next execution sees the column the notebook added", ex.to_dict())
    browser.send("next")

    ok(browser.until("nb-running") is not None, "the notebook's cell runs")
    threads, results = agents_at_once(d, ctx)
    nb_done = browser.until("nb-done") is not None and time.time()
    for t in threads:
        t.join(timeout=180)
    ok(nb_done and all(r and r[2] < nb_done for r in results),
       f"the agent sent its {AGENTS} executions while the notebook's cell ran",
       [(r and r[2], nb_done) for r in results])
    for marker, ex, _ in (r or ("?", None, 0) for r in results):
        want = "".join(f"{marker} {j}\n" for j in range(3))
        ok(hasattr(ex, "stdout") and ex.ok and ex.stdout == want,
           f"the agent's execution {marker} completes with its own output only (no nb line)",
           ex.to_dict() if hasattr(ex, "to_dict") else ex)

    browser.send("slow-start")
    ex = agent.execute("import time\ntime.sleep(4)\nprint('slept')", context=ctx)
    browser.send("slow-done")
    ok(ex.ok and ex.stdout == "slept\n", "the agent's slow execution (time.sleep(4)) completes",
       ex.to_dict())
    run, info = browser.finish(12)
    browser = None
    diag(f"the browser done after {time.time() - started:.1f} s")

    st, c = d.json("GET", f"/contexts/{ctx.id}")
    ok(st == 200 and c.get("state") == "running" and info.get("kernel-attach") == ctx.id,
       "the notebook's kernel is the agent's context, still running (GET /contexts/{id})", c)
    keep_screenshot(shot, "SG_SCREENSHOT")
    if run.returncode != 0:
        diag(lab.output()[-3000:])
    lab.stop()
    st, c = d.json("GET", f"/contexts/{ctx.id}")
    diag(f"after JupyterLab's shutdown, GET /contexts/{ctx.id}: {st} {c}")
    diag(f"{time.time() - started:.1f} s in all")
finally:
    for running in (browser, lab, d):  # each one this test started and did not stop yet
        if running:
            running.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
