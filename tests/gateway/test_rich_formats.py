"""E2B's rich formats: Python kernels register IPython formatters for
"e2b/chart" (a matplotlib Figure's data) and "e2b/data" (a pandas
DataFrame's columns) at start (kernelmgr/sandbox_kernel.py).  POST /execute
result lines carry them as `chart` and `data`; the Jupyter WebSocket passes
the MIME bundle through as the kernel sent it, image/png, text/plain and
text/html included; MCP's execute_python adds the chart as a text block."""
import base64
import json

import mcpraw

from sgd import Daemon, TOKEN, of_type
from tap import ok, done
from wsclient import WS

PLOT = ("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
        "ax.bar(['A', 'B'], [3, 7])\nax.set_title('Bars')\nplt.show()")
FRAME = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})"

d = Daemon("--pool-size", "1")
try:
    lines = d.execute("import sys\n[m for m in ('matplotlib', 'pandas') if m in sys.modules]")
    res = of_type(lines, "result")
    ok(res and res[0].get("text") == "[]",
       "the formatters import neither matplotlib nor pandas until one of their objects shows",
       lines)

    res = of_type(d.execute(PLOT), "result")
    r = res[0] if res else {}
    ok(r.get("chart", {}).get("type") == "bar" and r["chart"]["title"] == "Bars" and
       [e["value"] for e in r["chart"]["elements"]] == [3, 7] and
       base64.b64decode(r.get("png", ""))[:4] == b"\x89PNG" and "text" in r and
       "extra" not in r, "REST: a figure's result line has png, text and chart", res)

    res = of_type(d.execute(FRAME), "result")
    r = res[0] if res else {}
    ok(r.get("data") == {"a": [1, 2], "b": ["x", None]} and "<table" in r.get("html", "") and
       r.get("is_main_result") is True, "REST: a DataFrame's result line has data and html",
       res)

    status, sid, _ = mcpraw.initialize(d)
    status, answer = mcpraw.call(d, sid, "execute_python", {"code": PLOT})
    content = (answer or {}).get("result", {}).get("content", [])
    texts = [b["text"] for b in content if b["type"] == "text" and b["text"].startswith("[chart] ")]
    chart = json.loads(texts[0][len("[chart] "):]) if texts else {}
    ok(any(b["type"] == "image" for b in content) and chart.get("type") == "bar" and
       chart.get("title") == "Bars" and [e["label"] for e in chart["elements"]] == ["A", "B"],
       "MCP: execute_python returns the image and the chart's data as a text block", content)

    status, k = d.json("POST", "/api/kernels", {"name": "python3"}, timeout=120)
    ws = WS(d.url, k["id"], TOKEN)
    for code, want in ((PLOT, {"image/png", "text/plain", "e2b/chart"}),
                       (FRAME, {"text/html", "text/plain", "e2b/data"})):
        mid = ws.send("shell", "execute_request",
                      {"code": code, "silent": False, "store_history": True,
                       "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})
        seen = ws.until_done(mid)
        bundles = [m["content"]["data"] for m in seen
                   if m["parent_header"].get("msg_id") == mid and
                   m["header"]["msg_type"] in ("display_data", "execute_result")]
        b = bundles[0] if bundles else {}
        ok(len(bundles) == 1 and set(b) == want and
           (b.get("image/png", "").startswith("iVBOR") or "<table" in b.get("text/html", "")),
           f"WebSocket: the MIME bundle arrives as the kernel sent it ({', '.join(sorted(want))})",
           bundles)
    ws.close()
finally:
    d.stop()
done()
