"""The official Python E2B code-interpreter SDK (PyPI e2b-code-interpreter)
against sandgate: the checks tests/lib/e2b_sdk.mjs makes with the JS SDK,
plus the async client.  Run by tests/.venv-e2b's python.
usage: e2b_sdk.py URL TOKEN   — prints one JSON line per check: {ok, name, detail}"""
import asyncio
import base64
import re
import sys
import traceback

from e2b_code_interpreter import AsyncSandbox, Sandbox, charts
from e2b.exceptions import NotFoundException, SandboxException
from checks import check

url, token = sys.argv[1:3]



def connect(cls, token):
    """Debug mode talks to a local server instead of E2B's cloud (by default
    http://localhost:49999); sandbox_url says where.  The SDK takes its access
    tokens from E2B's API, which debug mode skips: set them as the JS SDK's
    users do (the Python SDK keeps them in private attributes)."""
    sbx = cls.create(debug=True, sandbox_url=url)
    sbx._SandboxBase__envd_access_token = token
    sbx._SandboxBase__traffic_access_token = token
    return sbx


def chart_of(sbx, code):
    ex = sbx.run_code("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n" + code +
                      "\nplt.show()")
    return next((r.chart for r in ex.results if r.chart is not None), None)


def chart_checks(sbx):
    """Charts ("e2b/chart") and DataFrames ("e2b/data") as E2B's own sandbox gives them."""
    c = chart_of(sbx, "ax.plot([1, 2, 3], [2, 4, 3], label='temp')\nax.set_title('Line')\n"
                 "ax.set_xlabel('Time (s)')\nax.set_ylabel('Heat [C]')")
    check(isinstance(c, charts.LineChart) and c.title == "Line" and
          (c.x_label, c.x_unit, c.y_label, c.y_unit) == ("Time (s)", "s", "Heat [C]", "C") and
          c.elements[0].label == "temp" and c.elements[0].points == [(1, 2), (2, 4), (3, 3)] and
          c.x_scale == charts.ScaleType.LINEAR and len(c.x_ticks) == len(c.x_tick_labels),
          "a line plot comes back as a LineChart; its labels keep their units", c and c.to_dict())
    c = chart_of(sbx, "ax.plot([1, 2, 3, 4, 5], [2, 4, 3, 5, 1])")
    check(isinstance(c, charts.LineChart) and c.title is None and
          (c.x_label, c.x_unit, c.y_label, c.y_unit) == (None,) * 4 and
          c.elements[0].label == "Line 0" and len(c.elements[0].points) == 5,
          "a 5-point line is a LineChart, not a box; a missing title or label is None, an "
          "unlabelled line 'Line 0'", c and c.to_dict())
    c = chart_of(sbx, "ax.plot([1, 2, 3, 4, 5], ['A', 'B', 'C', 'D', 'E'])")
    check(isinstance(c, charts.LineChart) and c.x_scale == charts.ScaleType.LINEAR and
          c.y_scale == charts.ScaleType.CATEGORICAL and c.y_tick_labels == list("ABCDE") and
          c.elements[0].points == [(1, "A"), (2, "B"), (3, "C"), (4, "D"), (5, "E")],
          "a line of strings: y_scale 'categorical', its points the strings", c and c.to_dict())
    c = chart_of(sbx, "import datetime\n"
                 "ax.plot([datetime.date(2024, 1, d) for d in (1, 2, 3)], [1, 3, 2])")
    iso = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
    check(isinstance(c, charts.LineChart) and c.x_scale == charts.ScaleType.DATETIME and
          c.y_scale == charts.ScaleType.LINEAR and c.x_ticks and
          all(isinstance(t, str) and iso.match(t) for t in c.x_ticks) and
          c.elements[0].points == [("2024-01-01", 1), ("2024-01-02", 3), ("2024-01-03", 2)],
          "a line over dates: x_scale 'datetime', ticks and points as ISO strings",
          c and c.to_dict())
    c = chart_of(sbx, "ax.scatter([1, 2], [5, 6], label='pts')\nax.set_title('Scatter')")
    check(isinstance(c, charts.ScatterChart) and c.title == "Scatter" and
          c.elements[0].label == "pts" and c.elements[0].points == [(1, 5), (2, 6)],
          "a scatter plot comes back as a ScatterChart", c and c.to_dict())
    c = chart_of(sbx, "ax.bar(['A', 'B'], [3, 7], label='sales')\nax.set_title('Bars')\n"
                 "ax.set_ylabel('Sold (units)')")
    check(isinstance(c, charts.BarChart) and c.title == "Bars" and
          (c.y_label, c.y_unit) == ("Sold (units)", "units") and
          [(e.label, e.group, e.value) for e in c.elements] == [("A", "sales", 3),
                                                                ("B", "sales", 7)],
          "a bar chart comes back as a BarChart", c and c.to_dict())
    c = chart_of(sbx, "ax.pie([1, 3], labels=['x', 'y'])\nax.set_title('Pie')")
    check(isinstance(c, charts.PieChart) and c.title == "Pie" and
          [(e.label, e.angle, e.radius) for e in c.elements] == [("x", 90, 1), ("y", 270, 1)],
          "a pie chart comes back as a PieChart", c and c.to_dict())
    c = chart_of(sbx, "ax.pie([90, 10], labels=['No', 'Yes'], startangle=90)")
    check(isinstance(c, charts.PieChart) and c.title is None and
          [(e.label, e.angle) for e in c.elements] == [("No", 324), ("Yes", 36)],
          "a pie's angles are rounded as E2B rounds them (324, not 323.99999…)",
          c and c.to_dict())
    c = chart_of(sbx, "ax.add_artist(plt.Circle((0, 0), 1, fill=False))\n"
                 "ax.set_title('Circle')")
    check(isinstance(c, charts.Chart) and c.type == charts.ChartType.UNKNOWN and
          c.title == "Circle" and c.elements == [],
          "a figure of other artists (a circle) is a chart of type 'unknown' with its title",
          c and c.to_dict())
    c = chart_of(sbx, "ax.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=['A', 'B'])\n"
                 "ax.set_title('Box')")
    b = c.elements[0] if isinstance(c, charts.BoxAndWhiskerChart) and c.elements else None
    check(b and c.title == "Box" and len(c.elements) == 2 and
          (b.label, b.min, b.first_quartile, b.median, b.third_quartile, b.max, b.outliers) ==
          ("A", 1, 2.25, 3.5, 4.75, 5, [20]) and c.elements[1].median == 3,
          "a box plot comes back as a BoxAndWhiskerChart", c and c.to_dict())
    ex = sbx.run_code("import matplotlib.pyplot as plt\nfig, (a, b) = plt.subplots(1, 2)\n"
                      "a.plot([1, 2])\na.set_title('left')\nb.bar(['q'], [1])\n"
                      "b.set_title('right')\nfig.suptitle('Both')\nplt.show()")
    c = next((r.chart for r in ex.results if r.chart is not None), None)
    check(isinstance(c, charts.SuperChart) and c.title == "Both" and
          [(type(e), e.title) for e in c.elements] == [(charts.LineChart, "left"),
                                                       (charts.BarChart, "right")],
          "a figure of two subplots comes back as a SuperChart", c and c.to_dict())
    ex = sbx.run_code("import pandas as pd\n"
                      "pd.DataFrame({'a': [1, 2], 'b': [1.5, float('nan')], 'c': ['x', 'y']})")
    r = ex.results[0] if ex.results else None
    check(r and r.data == {"a": [1, 2], "b": [1.5, None], "c": ["x", "y"]} and r.html and
          "data" in r.formats(), "a DataFrame result has its columns in data (NaN as None)",
          ex.results)
    image = ("from PIL import Image\n"
             "image = Image.new('RGBA', (16, 16), (255, 0, 0, 255))\n")
    for how in ("image.show()", "image.save('shown.png')"):
        ex = sbx.run_code(image + how + "\nprint('done')")
        pngs = [r.png for r in ex.results if r.png]
        check(ex.error is None and ex.logs.stdout == ["done\n"] and len(pngs) == 1 and
              base64.b64decode(pngs[0])[1:4] == b"PNG",
              f"a PIL image's {how} displays it as a PNG result", (ex.error, ex.results))
    ex = sbx.run_code('{"k": 1}')
    r = ex.results[0] if ex.results else None
    check(r and r.chart is None and r.data is None, "other results have neither chart nor data",
          ex.results)


def sync_checks():
    sbx = connect(Sandbox, token)
    out, err, results = [], [], []
    ex = sbx.run_code("x = 41\nprint('hello')\nimport sys\nprint('oops', file=sys.stderr)\nx + 1",
                      on_stdout=lambda m: out.append(m.line),
                      on_stderr=lambda m: err.append(m.line),
                      on_result=results.append)
    check(len(ex.results) == 1 and ex.results[0].text == "42", "run_code returns the result 42",
          ex.results)
    check("".join(out) == "hello\n", "on_stdout receives stdout", out)
    check("".join(err) == "oops\n", "on_stderr receives stderr", err)
    check(ex.logs.stdout == ["hello\n"] and ex.logs.stderr == ["oops\n"],
          "the execution's logs hold stdout and stderr", ex.logs)
    check(len(results) == 1 and results[0].is_main_result, "on_result receives the main result",
          results)
    check((ex.execution_count or 0) > 0, "execution_count is set", ex.execution_count)

    ex = sbx.run_code("x")
    check(ex.results and ex.results[0].text == "41", "variables persist across run_code calls",
          ex.results)

    ex = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\n"
                      "plt.title('sandgate')\nplt.show()")
    png = next((r for r in ex.results if r.png), None)
    check(png and base64.b64decode(png.png)[1:4] == b"PNG",
          "a matplotlib plot comes back as a PNG result", [r.formats() for r in ex.results])

    chart_checks(sbx)

    ex = sbx.run_code("1/0")
    e = ex.error
    check(e and e.name == "ZeroDivisionError" and e.value == "division by zero"
          and "ZeroDivisionError" in e.traceback,
          "an error comes with name, value and traceback", e)

    ex = sbx.run_code("import os\nos.environ['SG_ENV']", envs={"SG_ENV": "from-sdk"})
    check(ex.results and ex.results[0].text == "from-sdk", "envs are visible to the code",
          ex.results)

    ctx = sbx.create_code_context(cwd="/home/user")
    check(ctx and isinstance(ctx.id, str) and ctx.language == "python", "create_code_context",
          ctx)
    sbx.run_code("in_ctx = 1", context=ctx)
    ex = sbx.run_code("'in_ctx' in dir()", context=ctx)
    check(ex.results and ex.results[0].text == "True", "code runs in the created context",
          ex.results)
    ex = sbx.run_code("'in_ctx' in dir()")
    check(ex.results and ex.results[0].text == "False", "the default context is separate",
          ex.results)
    listed = sbx.list_code_contexts()
    check(any(c.id == ctx.id for c in listed), "list_code_contexts includes it", listed)
    sbx.restart_code_context(ctx)
    ex = sbx.run_code("'in_ctx' in dir()", context=ctx)
    check(ex.results and ex.results[0].text == "False",
          "restart_code_context gives a fresh kernel", ex.results)
    sbx.remove_code_context(ctx)
    after = sbx.list_code_contexts()
    check(not any(c.id == ctx.id for c in after), "remove_code_context removes it", after)
    threw = None
    try:
        sbx.run_code("1", context=ctx)
    except Exception as e:  # noqa: BLE001 — which one is the check
        threw = e
    check(isinstance(threw, NotFoundException),
          "running in a removed context raises NotFoundException", repr(threw))

    ex = sbx.run_code("cat(6 * 7)", language="r")
    check(ex.logs.stdout == ["42"] and ex.error is None, "language='r' runs R code", ex)
    ex = sbx.run_code("echo $((6 * 7))", language="bash")
    check("".join(ex.logs.stdout) == "42\n" and ex.error is None, "language='bash' runs Bash code", ex)

    # JavaScript and TypeScript run on Deno's kernel: js and ts are the SDK's
    # names, javascript and typescript the contexts' languages.
    out = []
    ex = sbx.run_code('let n = 6\nfunction twice(v) { return v * 2 }\nconsole.log("hello from js")\nn * 7',
                      language="js", on_stdout=lambda m: out.append(m.line))
    check(len(ex.results) == 1 and ex.results[0].text == "42" and ex.results[0].is_main_result
          and ex.error is None, "language='js' runs JavaScript and returns its value", ex)
    check(ex.logs.stdout == ["hello from js\n"] and out == ["hello from js\n"],
          "console.log is stdout (logs and on_stdout)", (ex.logs, out))
    ex = sbx.run_code("twice(n) + 30", language="js")
    check(ex.results and ex.results[0].text == "42" and ex.error is None,
          "a JavaScript variable and function persist across run_code calls", ex)
    ex = sbx.run_code('function boom() { throw new TypeError("bad thing") }\nboom()', language="js")
    e = ex.error
    check(e and e.name == "TypeError" and e.value == "bad thing"
          and re.match(r"TypeError: bad thing\n\s+at boom ", e.traceback),
          "a JavaScript exception is an error with name, value and traceback", e)
    ex = sbx.run_code('Deno.jupyter.html`<b id="sg">sandgate</b>`', language="js")
    check(len(ex.results) == 1 and ex.results[0].html == '<b id="sg">sandgate</b>'
          and ex.error is None, "Deno.jupyter.html comes back as a result with .html", ex)
    tctx = sbx.create_code_context(language="ts")
    ex = sbx.run_code("function f(a: number): number { return a * 7 }\nf(6)", context=tctx)
    check(tctx.language == "typescript" and ex.results and ex.results[0].text == "42"
          and ex.error is None,
          "create_code_context(language='ts') is a typescript context that runs typed code",
          (tctx, ex))
    jctx = sbx.create_code_context(language="js")
    check(jctx.language == "javascript", "create_code_context(language='js') is a javascript "
          "context", jctx)
    langs = {c.id: c.language for c in sbx.list_code_contexts()}
    check(langs.get(tctx.id) == "typescript" and langs.get(jctx.id) == "javascript",
          "list_code_contexts reports their languages", langs)
    sbx.remove_code_context(tctx)
    sbx.remove_code_context(jctx)

    bad = connect(Sandbox, "wrong-token-0123456789")
    threw = None
    try:
        bad.run_code("1")
    except Exception as e:  # noqa: BLE001
        threw = e
    check(isinstance(threw, SandboxException) and "401" in str(threw),
          "a wrong token is refused with 401", repr(threw))


async def async_checks():
    sbx = await AsyncSandbox.create(debug=True, sandbox_url=url)
    sbx._SandboxBase__envd_access_token = token
    sbx._SandboxBase__traffic_access_token = token
    ctx = await sbx.create_code_context()
    await sbx.run_code("y = 6 * 7", context=ctx)
    out = []
    ex = await sbx.run_code("print(y)", context=ctx, on_stdout=lambda m: out.append(m.line))
    check(out == ["42\n"] and ex.error is None,
          "AsyncSandbox: a context keeps its state, on_stdout streams", (out, ex))
    await sbx.remove_code_context(ctx)


try:
    sync_checks()
    asyncio.run(async_checks())
except Exception:  # noqa: BLE001 — reported as a failed check
    check(False, "the SDK run completes", traceback.format_exc())
