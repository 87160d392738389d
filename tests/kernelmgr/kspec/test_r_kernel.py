"""The R kernel (Debian's r-cran-irkernel, kernelspec ir) in a gVisor sandbox:
listed, started from the REST and Jupyter APIs, state kept between calls, a
plot written to output/ comes back as an artifact, an R error comes back
with its message and traceback, a paused R session resumes intact, and R
runs without a sandbox too."""
import json

from sgd import Daemon
from tap import ok, done


def run(d, cid, code):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid},
                   headers={"Accept": "application/json"}, timeout=180)
    return r if st == 200 else {"status": st, "body": r}


d = Daemon("--pool-size", "0", "--pause-after", "0")
try:
    st, specs = d.json("GET", "/api/kernelspecs")
    ir = specs.get("kernelspecs", {}).get("ir", {})
    ok(st == 200 and ir.get("spec", {}).get("language") == "R",
       "GET /api/kernelspecs lists ir, language R", specs.get("kernelspecs", {}).keys())

    st, c = d.json("POST", "/contexts", {"language": "r"})
    ok(st == 201 and c.get("language") == "r", "POST /contexts {\"language\": \"r\"}", (st, c))
    cid = c.get("id")
    r = run(d, cid, "x <- 6 * 7\ncat(x, '\\n')\nR.version$major")
    ok(r.get("stdout") == "42 \n" and r.get("error") is None,
       "R code runs: cat() is stdout", r)
    ok(any('"4"' in (res.get("text") or "") for res in r.get("results", [])),
       "the last value is a result (R.version$major)", r.get("results"))
    r = run(d, cid, "cat(x + 1, '\\n')")
    ok(r.get("stdout") == "43 \n", "variables persist between calls", r)
    r = run(d, cid, "dir.create('output', showWarnings = FALSE)\n"
                    "png('output/plot.png'); plot(1:10); invisible(dev.off())")
    arts = [a for a in r.get("artifacts", []) if a.get("path") == "output/plot.png"]
    ok(arts and arts[0].get("mime") == "image/png" and arts[0].get("size", 0) > 1000,
       "a plot saved under output/ comes back as a PNG artifact", r.get("artifacts"))
    r = run(d, cid, "f <- function() stop('boom')\nf()")
    err = r.get("error") or {}
    ok("boom" in err.get("value", "") and "f()" in err.get("traceback", ""),
       "an R error comes back with its message and traceback", err)
    r = run(d, cid, "Sys.getenv('HOME')")
    ok(any("/home/user" in (res.get("text") or "") for res in r.get("results", [])),
       "it runs in the session's workspace home", r.get("results"))

    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    r = run(d, cid, "cat(x * 10, '\\n')")
    ok(st == 200 and p.get("state") == "paused" and r.get("stdout") == "420 \n",
       "a paused R session resumes with its variables", (st, p, r))

    st, k = d.json("POST", "/api/kernels", {"name": "ir"})
    st2, m = d.json("GET", f"/api/kernels/{k.get('id')}")
    ok(st == 201 and m.get("name") == "ir", "POST /api/kernels {\"name\": \"ir\"} starts one",
       (st, k, m))
finally:
    d.stop()

# Without a sandbox too: the kernelspec names its program "R", found by PATH.
d = Daemon("--sandbox", "none", "--pool-size", "0")
try:
    st, c = d.json("POST", "/contexts", {"language": "r"})
    r = run(d, c.get("id"), "x <- 6; cat(x * 7, '\\n')")
    ok(st == 201 and r.get("stdout") == "42 \n",
       "--sandbox none: an R context runs (its program found by PATH)", (st, r))
finally:
    d.stop()
done()
