"""One execution path: the REST API and MCP run code through the same
module (gateway/session/exec.c), so an output limit, a timeout, an artifact, a queue
limit and an exception come out the same through both — each case runs the
same code through POST /execute and MCP's execute_python and compares."""
import threading
import time

from mcpraw import initialize, call, text_of
from sgd import Daemon, of_type, stdout
from tap import ok, diag, done

LIMIT = 1000

d = Daemon("--pool-size", "1", "--max-output", str(LIMIT), "--max-kernels", "8")
try:
    st, ctx = d.json("POST", "/contexts", {})
    cid = ctx["id"]
    status, sid, _ = initialize(d)
    ok(status == 200 and sid, "an MCP session", status)

    def rest(code, **kw):
        return [l for l in d.execute(code, context_id=cid, **kw) if l["type"] != "keepalive"]

    def mcp(code, **kw):
        status, answer = call(d, sid, "execute_python", dict(code=code, **kw))
        return answer["result"]

    # --- output limit -------------------------------------------------------------
    code = "print('x' * 5000)\nprint('after')"
    lines = rest(code)
    r_out = stdout(lines)
    r_marker = "".join(l["text"] for l in of_type(lines, "stderr"))
    m = mcp(code)
    m_text = text_of({"result": m})
    ok(r_out == "x" * LIMIT, f"REST keeps exactly the first {LIMIT} bytes", len(r_out))
    ok(m_text.startswith("x" * LIMIT) and "x" * (LIMIT + 1) not in m_text,
       f"MCP keeps exactly the first {LIMIT} bytes", m_text[:80])
    ok(r_marker.strip() and r_marker.strip() in m_text,
       "both end with the same limit marker", (r_marker, m_text[-200:]))
    ok("after" not in r_out and "after" not in m_text, "nothing after the limit in either")

    # a rich result past the limit is dropped in both
    code = "from IPython.display import HTML, display\ndisplay(HTML('<b>' + 'y' * 3000 + '</b>'))\n1"
    lines = rest(code)
    m = mcp(code)
    ok(not [l for l in of_type(lines, "result") if "html" in l] and not any(
        "yyyy" in c.get("text", "") for c in m["content"]),
       "a result larger than the limit is dropped by both", (lines, m))

    # --- timeout ------------------------------------------------------------------
    lines = rest("import time\ntime.sleep(30)", timeout=1)
    # The interrupt's KeyboardInterrupt comes first, then sandgate's TimeoutError.
    errs = [e for e in of_type(lines, "error") if e["name"] == "TimeoutError"]
    m = mcp("import time\ntime.sleep(30)", timeout=1)
    m_text = text_of({"result": m})
    ok(errs and "timeout" in errs[0]["value"], "REST reports a TimeoutError", lines)
    ok(m["isError"] and errs and f"TimeoutError: {errs[0]['value']}" in m_text and
       "KeyboardInterrupt" in m_text, "MCP reports the same TimeoutError with the same message",
       (errs, m_text))

    # --- exception -------------------------------------------------------------------
    lines = rest("1/0")
    m = mcp("1/0")
    ok(of_type(lines, "error")[0]["name"] == "ZeroDivisionError" and m["isError"] and
       "ZeroDivisionError: division by zero" in text_of({"result": m}),
       "an exception: ZeroDivisionError through both", (lines, m))

    # --- artifacts ----------------------------------------------------------------------
    code = "open('output/a.txt', 'w').write('hello artifacts')"
    lines = rest(code)
    arts = of_type(lines, "artifact")
    m = mcp(code.replace("a.txt", "b.txt"))
    m_text = text_of({"result": m})
    ok(len(arts) == 1 and arts[0]["path"] == "output/a.txt" and arts[0]["size"] == 15,
       "REST announces the artifact with its path and size", arts)
    ok("output/b.txt (15 bytes)" in m_text and "output/a.txt" not in m_text,
       "MCP lists the same kind of artifact, with the same size, and only the new one", m_text)
    lines = rest("1")
    ok(not of_type(lines, "artifact"), "an execution that writes nothing announces nothing")

    # --- queue limit ---------------------------------------------------------------------
    # MCP's session has its own kernel; fill it with 9 (1 running + 8 waiting).
    status, answer = call(d, sid, "execute_python", {"code": "import time"})
    results = {}

    def slow(i):
        results[i] = call(d, sid, "execute_python", {"code": "time.sleep(3)", "timeout": 60},
                          rid=100 + i)

    threads = [threading.Thread(target=slow, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    time.sleep(0.5)
    status, over = call(d, sid, "execute_python", {"code": "1"}, rid=99)
    busy = []
    for i in range(9):
        busy.append(threading.Thread(target=lambda: d.execute("import time; time.sleep(3)",
                                                              context_id=cid, timeout=60)))
        busy[-1].start()
        time.sleep(0.05)
    time.sleep(0.5)
    st, _, body = d.request("POST", "/execute", {"code": "1", "context_id": cid})
    ok(st == 409 and b"executions waiting" in body, "REST refuses a 10th execution with 409",
       (st, body))
    ok(over["result"]["isError"] and "executions waiting" in text_of(over),
       "MCP refuses it too, with the same reason", over)
    for t in threads + busy:
        t.join(120)
finally:
    d.stop()
done()
