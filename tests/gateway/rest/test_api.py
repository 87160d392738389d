"""sandgate's REST API over plain HTTP against real sandboxed kernels:
streaming, JSON mode, contexts, env_vars, timeouts, disconnects, output
limits, bad input of every kind, and 20 contexts at once."""
import http.client
import json
import threading
import time
import urllib.parse

from sgd import Daemon, TOKEN, of_type, stdout
from tap import ok, diag, done

d = Daemon("--pool-size", "1", "--max-body", "20000", "--max-output", "200000",
           "--max-kernels", "30", "--max-timeout", "600")
try:
    # --- streaming ------------------------------------------------------------
    host = urllib.parse.urlparse(d.url)
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
    c.request("POST", "/execute", json.dumps({
        "code": "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.7)\n6*7"}),
        {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    r = c.getresponse()
    ok(r.status == 200 and r.getheader("Content-Type") == "application/x-ndjson",
       "POST /execute answers 200 application/x-ndjson")
    arrivals = []
    while True:
        line = r.readline()
        if not line:
            break
        arrivals.append((time.time(), json.loads(line)))
    c.close()
    lines = [l for _, l in arrivals]
    types = [l["type"] for l in lines if l["type"] != "keepalive"]
    ok(types[-1] == "end_of_execution", "end_of_execution comes last", types)
    ok(stdout(lines) == "0\n1\n2\n", "stdout lines in order", stdout(lines))
    res = of_type(lines, "result")
    ok(res and res[0]["text"] == "42" and res[0]["is_main_result"] is True,
       "the value is a main result with text 42", res)
    ok(of_type(lines, "number_of_executions"), "number_of_executions is sent")
    first = [t for t, l in arrivals if l["type"] == "stdout"][0]
    last = arrivals[-1][0]
    ok(last - first > 1.0, f"output is streamed as produced ({last - first:.2f} s between first "
                           "stdout and the end)")
    ok(all("timestamp" in l for l in of_type(lines, "stdout")), "stdout lines carry timestamps")

    # --- state, JSON mode, rich output ------------------------------------------------
    d.execute("secret = 'persisted'")
    ok(of_type(d.execute("secret"), "result")[0]["text"] == "'persisted'",
       "variables persist in the default context")
    status, agg = d.json("POST", "/execute", {"code": "print('a')\nimport sys\n"
                                                      "print('b', file=sys.stderr)\n1/0"},
                         headers={"Accept": "application/json"})
    ok(status == 200 and agg["stdout"] == "a\n" and agg["stderr"] == "b\n",
       "Accept: application/json aggregates stdout and stderr", agg)
    ok(agg["error"]["name"] == "ZeroDivisionError" and "division by zero" in agg["error"]["traceback"],
       "and the error with its traceback")
    ok(isinstance(agg["execution_count"], int) and agg["duration_ms"] >= 0,
       "and execution_count and duration")
    lines = d.execute("from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))")
    res = of_type(lines, "result")
    ok(res and res[0]["html"] == "<b>hi</b>" and res[0]["is_main_result"] is False,
       "display_data is a result with html, not main", res)
    lines = d.execute("from IPython.display import display\n"
                      "display({'application/x-custom': 'v', 'text/plain': 'p'}, raw=True)")
    res = of_type(lines, "result")
    ok(res and res[0].get("extra", {}).get("application/x-custom") == "v",
       "unknown MIME types go under extra", res)

    # --- env_vars ----------------------------------------------------------------------
    lines = d.execute("import os; os.environ['SG_FOO']", env_vars={"SG_FOO": "bar"})
    ok(of_type(lines, "result") and of_type(lines, "result")[0]["text"] == "'bar'",
       "env_vars are set for the execution")
    lines = d.execute("import os; os.environ.get('SG_FOO', 'unset')")
    ok(of_type(lines, "result")[0]["text"] == "'unset'", "and only for that execution")

    # --- contexts -----------------------------------------------------------------------
    status, ctx = d.json("POST", "/contexts", {"language": "python", "cwd": "/home/user/proj"})
    ok(status == 201 and ctx["language"] == "python" and ctx["cwd"] == "/home/user/proj",
       "POST /contexts creates a context", ctx)
    cid = ctx["id"]
    lines = d.execute("import os; os.getcwd()", context_id=cid)
    ok(of_type(lines, "result")[0]["text"] == "'/home/user/proj'", "the context starts in its cwd")
    d.execute("only_here = 1", context_id=cid)
    lines = d.execute("'only_here' in dir()")
    ok(of_type(lines, "result")[0]["text"] == "False", "contexts do not share variables")
    status, lst = d.json("GET", "/contexts")
    ok(status == 200 and cid in [x["id"] for x in lst], "GET /contexts lists it")
    status, one = d.json("GET", "/contexts/" + cid)
    ok(status == 200 and one["id"] == cid, "GET /contexts/{id}")
    status, _ = d.json("POST", f"/contexts/{cid}/restart")
    ok(status == 204, "POST /contexts/{id}/restart is 204")
    lines = d.execute("'only_here' in dir()", context_id=cid)
    ok(of_type(lines, "result")[0]["text"] == "False", "restart loses the variables")
    status, _ = d.json("DELETE", "/contexts/" + cid)
    ok(status == 204, "DELETE /contexts/{id} is 204")
    status, body = d.json("POST", "/execute", {"code": "1", "context_id": cid})
    ok(status == 404 and body["error"] == "not_found", "a deleted context is 404", body)

    # --- bad input -------------------------------------------------------------------
    def err(status_want, name, *a, **kw):
        status, body = d.json(*a, **kw)
        good = status == status_want and isinstance(body, dict) and "error" in body and \
            "message" in body
        ok(good, f"{name}: {status_want} with a JSON error", (status, body))

    err(400, "malformed JSON", "POST", "/execute", raw=b'{"code": ')
    err(400, "body not an object", "POST", "/execute", raw=b'[1, 2]')
    err(400, "code of the wrong type", "POST", "/execute", {"code": 5})
    err(400, "missing code", "POST", "/execute", {})
    err(400, "env_vars not strings", "POST", "/execute", {"code": "1", "env_vars": {"A": 1}})
    for bad in ("A B", "1A", "", "A;rm", "A=B"):
        err(400, f"env_vars name {bad!r} (not a variable name)", "POST", "/execute",
            {"code": "1", "env_vars": {bad: "x"}})
    err(400, "context_id with language", "POST", "/execute",
        {"code": "1", "context_id": "x", "language": "python"})
    err(400, "unknown language", "POST", "/execute", {"code": "1", "language": "cobol"})
    err(400, "timeout out of range", "POST", "/execute", {"code": "1", "timeout": -3})
    err(404, "unknown context", "POST", "/execute", {"code": "1", "context_id": "nope"})
    err(413, "oversized body", "POST", "/execute", raw=json.dumps({"code": "x" * 50000}).encode())
    err(401, "missing token", "POST", "/execute", {"code": "1"}, token=None)
    err(401, "wrong token", "POST", "/execute", {"code": "1"}, token="wrong-token-abcdefghij")
    err(404, "unknown route", "GET", "/nothing/here")
    err(405, "GET /execute", "GET", "/execute")
    err(404, "DELETE unknown context", "DELETE", "/contexts/nope")
    status, body = d.json("DELETE", "/contexts/nope")
    ok(body["message"] == "no context 'nope'", "an unknown context is named in the message", body)
    status, hdrs, _ = d.request("GET", "/execute")
    ok(hdrs.get("Allow") == "POST", "GET /execute's 405 says Allow: POST", dict(hdrs))
    status, hdrs, data = d.request("PUT", f"/contexts/{cid}/restart")
    ok(status == 405 and hdrs.get("Allow") == "POST" and b"method_not_allowed" in data,
       "a wrong method on a context's route: 405 with Allow", (status, dict(hdrs), data))
    status, hdrs, data = d.request("POST", "/metrics")
    ok(status == 405 and hdrs.get("Allow") == "GET, HEAD", "POST /metrics: 405 with Allow",
       (status, dict(hdrs), data))
    for hdr in ({"Authorization": "token " + TOKEN}, {"X-Access-Token": TOKEN},
                {"E2B-Traffic-Access-Token": TOKEN}):
        status, _, _ = d.request("GET", "/contexts", token=None, headers=hdr)
        ok(status == 200, f"token accepted in {list(hdr)[0]}")

    # --- timeout, disconnect, output limit -----------------------------------------------
    d.execute("kept = 'yes'")
    t0 = time.time()
    lines = d.execute("while True: pass", timeout=2)
    errs = of_type(lines, "error")
    # The kernel's own KeyboardInterrupt (where the code was stopped) may come
    # first; the last error says why.
    ok(errs and errs[-1]["name"] == "TimeoutError" and lines[-1]["type"] == "end_of_execution",
       f"timeout ends the stream with a TimeoutError ({time.time() - t0:.1f} s)", lines[-3:])
    ok(of_type(d.execute("kept"), "result")[0]["text"] == "'yes'",
       "the context keeps working (and its state) after a timeout")

    c = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
    c.request("POST", "/execute", json.dumps({"code": "import time\ntime.sleep(60)"}),
              {"Authorization": "Bearer " + TOKEN})
    r = c.getresponse()
    time.sleep(1.5)
    c.close()
    t0 = time.time()
    lines = d.execute("'after disconnect'")
    took = time.time() - t0
    ok(of_type(lines, "result") and took < 20,
       f"a client that disconnects gets its execution interrupted (next one took {took:.1f} s)")

    lines = d.execute("print('x' * 1000000)")
    text = stdout(lines)
    marker = [l for l in of_type(lines, "stderr") if "output limit" in l["text"]]
    ok(len(text) <= 200000 and marker, f"output past --max-output is dropped with a marker "
                                       f"({len(text)} bytes kept)")

    # --- 20 contexts at once ------------------------------------------------------------
    ids = []
    for i in range(20):
        status, ctx = d.json("POST", "/contexts", {})
        ids.append(ctx["id"])
    outs = {}

    def run(i, cid):
      try:
        lines = d.execute(f"import time\nme = {i}\nfor k in range(3):\n"
                          f"    print('ctx{i}-', k, sep='', flush=True); time.sleep(0.2)\nme",
                          context_id=cid, timeout=300)
        outs[i] = lines
      except Exception as e:  # reported below
        outs[i] = [{"type": "exception", "text": repr(e)}]

    threads = [threading.Thread(target=run, args=(i, cid)) for i, cid in enumerate(ids)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    diag(f"20 contexts, first executions at once: {time.time() - t0:.1f} s")
    apart = all(stdout(outs.get(i, [])) == f"ctx{i}-0\nctx{i}-1\nctx{i}-2\n" and
                of_type(outs[i], "result")[0]["text"] == str(i) for i in range(20))
    bad = {i: [l for l in outs.get(i, []) if l["type"] != "keepalive"] for i in range(20)
           if stdout(outs.get(i, [])) != f"ctx{i}-0\nctx{i}-1\nctx{i}-2\n"
           or not of_type(outs[i], "result") or of_type(outs[i], "result")[0]["text"] != str(i)}
    ok(apart, "20 contexts executing at once keep their outputs apart", bad)
    for cid in ids:
        d.json("DELETE", "/contexts/" + cid)

    # --- a restart keeps the default context and what contexts were made with ------
    d.execute("survivor = 'kept'\nimport os")
    status, named = d.json("POST", "/contexts", {"language": "python", "cwd": "/home/user/sub"})
    d.execute("sub_var = 7", context_id=named["id"])
    status, before = d.json("GET", "/contexts")
    d.restart()
    lines = d.execute("print(survivor, os.getcwd())")
    ok(stdout(lines) == "kept /home/user\n",
       "after a restart, POST /execute without context_id runs in the same default context",
       [l for l in lines if l["type"] != "keepalive"])
    status, after = d.json("GET", "/contexts")
    ok(status == 200 and sorted(c["id"] for c in after) == sorted(c["id"] for c in before),
       "the restart made no new context", (before, after))
    status, got = d.json("GET", "/contexts/" + named["id"])
    ok(status == 200 and got["cwd"] == "/home/user/sub" and got["language"] == "python",
       "a context keeps its cwd and language over a restart", got)
    lines = d.execute("import os; print(sub_var, os.getcwd())", context_id=named["id"])
    ok(stdout(lines) == "7 /home/user/sub\n", "and its variables", lines)
    d.json("DELETE", "/contexts/" + named["id"])
    d.restart()
    status, got = d.json("GET", "/contexts/" + named["id"])
    ok(status == 404, "a deleted context stays deleted over a restart", status)
    lines = d.execute("print(survivor)")
    ok(stdout(lines) == "kept\n", "the default context survives a second restart", lines)

    status, h = d.json("GET", "/health", token=None)
    ok(status == 200 and h["status"] == "ok", "the daemon still serves after all that")
finally:
    d.stop()
done()
