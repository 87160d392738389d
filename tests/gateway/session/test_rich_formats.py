"""E2B's rich formats: Python kernels register IPython formatters for
"e2b/chart" (a matplotlib Figure's data) and "e2b/data" (a pandas
DataFrame's columns) at start (kernelmgr/guest/kernel.py), which run only
for an execute_request whose metadata asks ({"sandgate": {"rich_formats":
true}}).  POST /execute asks unless the request says "rich_formats": false
or the daemon runs with --rich-formats no (then a request's true asks);
its result lines carry them as `chart` and `data`; MCP's execute_python
adds the chart as a text block.  A Jupyter frontend's execute_request gets
the MIME bundle it always got (image/png, text/plain, text/html) unless its
metadata asks too; the same request decides whether a PIL image that the
code saves (or shows) is displayed, as E2B's sandbox displays it."""
import base64
import json

import mcpraw

from sgd import Daemon, TOKEN, of_type
from tap import ok, done
from wsclient import WS

PLOT = ("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
        "ax.bar(['A', 'B'], [3, 7])\nax.set_title('Bars')\nplt.show()")
FRAME = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})"
BARH = ("fig, ax = plt.subplots()\nax.barh(['a', 'b'], [3, 1])\n"
        "ax.set_xlabel('Count (n)'); ax.set_ylabel('Letter')\nplt.show()")
SAVE = "from PIL import Image\nImage.new('RGB', (8, 8), (0, 0, 255)).save('saved.png')"
BOXES = ("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
         "ax.boxplot([[1, 2, 3, 4, 5], [10, 12, 14, 16, 18, 40]], patch_artist=True,\n"
         "           labels=['low', 'high'])\nplt.show()")

d = Daemon("--pool-size", "1")
try:
    lines = d.execute("import sys\n"
                      "[m for m in ('matplotlib', 'pandas', 'PIL') if m in sys.modules]")
    res = of_type(lines, "result")
    ok(res and res[0].get("text") == "[]",
       "the formatters import neither matplotlib nor pandas until one of their objects shows, "
       "nor PIL until the code imports it", lines)

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

    res = of_type(d.execute(PLOT, rich_formats=False), "result")
    r = res[0] if res else {}
    ok("chart" not in r and base64.b64decode(r.get("png", ""))[:4] == b"\x89PNG",
       "REST: \"rich_formats\": false leaves the chart out, the image in", res)
    res = of_type(d.execute(FRAME, rich_formats=False), "result")
    r = res[0] if res else {}
    ok("data" not in r and "<table" in r.get("html", ""),
       "REST: \"rich_formats\": false leaves a DataFrame's data out", res)
    status, _, body = d.request("POST", "/execute", {"code": "1", "rich_formats": "yes"})
    ok(status == 400 and b"'rich_formats' must be a boolean" in body,
       "REST: a rich_formats that is not a boolean is 400", (status, body))

    res = of_type(d.execute(BARH), "result")
    c = res[0].get("chart", {}) if res else {}
    ok(c.get("type") == "bar" and c.get("x_label") == "Letter" and
       (c.get("y_label"), c.get("y_unit")) == ("Count (n)", "n") and
       [(e["label"], e["value"], e["group"]) for e in c.get("elements", [])] ==
       [("a", 3, "Group 0"), ("b", 1, "Group 0")],
       "REST: horizontal bars are charted as E2B does: x the categories' axis, values the "
       "bars' widths, an unlabelled series 'Group 0'", res)

    res = of_type(d.execute(BOXES), "result")
    c = res[0].get("chart", {}) if res else {}
    boxes = c.get("elements", [])
    ok(c.get("type") == "box_and_whisker" and [b["label"] for b in boxes] == ["low", "high"] and
       [(b["min"], b["first_quartile"], b["median"], b["third_quartile"], b["max"])
        for b in boxes] == [(1, 2, 3, 4, 5), (10, 12.5, 15, 17.5, 18)] and
       boxes[0]["outliers"] == [] and boxes[1]["outliers"] == [40],
       "REST: a box plot drawn with patch_artist=True (filled boxes) is a box_and_whisker "
       "chart with each box's quartiles and outliers", res)

    status, k = d.json("POST", "/api/kernels", {"name": "python3"}, timeout=120)
    ws = WS(d.url, k["id"], TOKEN)

    def bundles_of(code, metadata=None):
        mid = ws.send("shell", "execute_request",
                      {"code": code, "silent": False, "store_history": True,
                       "user_expressions": {}, "allow_stdin": False, "stop_on_error": False},
                      metadata=metadata)
        return [m["content"]["data"] for m in ws.until_done(mid)
                if m["parent_header"].get("msg_id") == mid and
                m["header"]["msg_type"] in ("display_data", "execute_result")]

    for code, want in ((PLOT, {"image/png", "text/plain"}),
                       (FRAME, {"text/html", "text/plain"})):
        bundles = bundles_of(code)
        b = bundles[0] if bundles else {}
        ok(len(bundles) == 1 and set(b) == want and
           (b.get("image/png", "").startswith("iVBOR") or "<table" in b.get("text/html", "")),
           f"WebSocket: a frontend's result is the bundle it always was "
           f"({', '.join(sorted(want))}), no e2b types", bundles)
    bundles = bundles_of(PLOT, {"sandgate": {"rich_formats": True}})
    b = bundles[0] if bundles else {}
    ok(len(bundles) == 1 and set(b) == {"image/png", "text/plain", "e2b/chart"} and
       b["e2b/chart"]["title"] == "Bars",
       "WebSocket: an execute_request whose metadata asks gets e2b/chart too", bundles)
    bundles = bundles_of(SAVE)
    ok(bundles == [], "WebSocket: a frontend's PIL Image.save('f.png') displays nothing, as "
       "before", bundles)
    bundles = bundles_of(SAVE, {"sandgate": {"rich_formats": True}})
    ok(len(bundles) == 1 and bundles[0].get("image/png", "").startswith("iVBOR"),
       "WebSocket: with the metadata asking, it displays the image, as E2B's sandbox does",
       bundles)
    ws.close()
finally:
    d.stop()

# --rich-formats no: nothing unless a request asks.
d = Daemon("--pool-size", "1", "--rich-formats", "no")
try:
    res = of_type(d.execute(PLOT), "result")
    r = res[0] if res else {}
    ok("chart" not in r and "png" in r, "--rich-formats no: no chart by default", res)
    res = of_type(d.execute(PLOT, rich_formats=True), "result")
    r = res[0] if res else {}
    ok(r.get("chart", {}).get("title") == "Bars",
       "--rich-formats no: a request's \"rich_formats\": true gets it", res)
    status, sid, _ = mcpraw.initialize(d)
    status, answer = mcpraw.call(d, sid, "execute_python", {"code": PLOT})
    content = (answer or {}).get("result", {}).get("content", [])
    ok(any(b["type"] == "image" for b in content) and
       not any(b["type"] == "text" and b["text"].startswith("[chart] ") for b in content),
       "--rich-formats no: MCP's execute_python gives the image without the chart", content)
finally:
    d.stop()
done()
