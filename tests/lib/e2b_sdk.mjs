// The official E2B code-interpreter SDK against sandgate.
// usage: node e2b_sdk.mjs URL TOKEN   — prints one JSON line per check: {ok, name, detail}
import { Sandbox } from '@e2b/code-interpreter'

const [url, token] = process.argv.slice(2)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))

try {
  // Debug mode talks to a local server instead of E2B's cloud; sandboxUrl says where.
  const sbx = await Sandbox.create({ debug: true, sandboxUrl: url })
  sbx.trafficAccessToken = token
  sbx.envdAccessToken = token

  const out = [], err = [], results = []
  let ex = await sbx.runCode("x = 41\nprint('hello')\nimport sys\nprint('oops', file=sys.stderr)\nx + 1", {
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => err.push(m.line),
    onResult: (r) => results.push(r),
  })
  check(ex.results.length === 1 && ex.results[0].text === '42', 'runCode returns the result 42', ex.results)
  check(out.join('') === 'hello\n', 'onStdout receives stdout', out)
  check(err.join('') === 'oops\n', 'onStderr receives stderr', err)
  check(results.length === 1 && results[0].isMainResult, 'onResult receives the main result', results)
  check(ex.executionCount > 0, 'executionCount is set', ex.executionCount)

  ex = await sbx.runCode('x')
  check(ex.results[0]?.text === '41', 'variables persist across runCode calls', ex.results)

  ex = await sbx.runCode(
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('sandgate')\nplt.show()")
  const png = ex.results.find((r) => r.png)
  check(png && Buffer.from(png.png, 'base64').subarray(1, 4).toString() === 'PNG',
    'a matplotlib plot comes back as a PNG result', ex.results.map((r) => r.formats?.()))

  // Charts ("e2b/chart") and DataFrames ("e2b/data") as E2B's own sandbox gives them.
  const chartOf = async (code) => (await sbx.runCode(
    'import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n' + code + '\nplt.show()')).results.find((r) => r.chart)?.chart
  let c = await chartOf("ax.plot([1, 2, 3], [2, 4, 3], label='temp')\nax.set_title('Line')\nax.set_xlabel('Time (s)')\nax.set_ylabel('Heat [C]')")
  check(c?.type === 'line' && c.title === 'Line' && c.x_label === 'Time (s)' && c.x_unit === 's' &&
    c.y_label === 'Heat [C]' && c.y_unit === 'C' && c.elements[0]?.label === 'temp' &&
    JSON.stringify(c.elements[0].points) === '[[1,2],[2,4],[3,3]]' && c.x_scale === 'linear' &&
    c.x_ticks.length === c.x_tick_labels.length, 'a line plot comes back as a LineChart', c)
  c = await chartOf("ax.scatter([1, 2], [5, 6], label='pts')\nax.set_title('Scatter')")
  check(c?.type === 'scatter' && c.title === 'Scatter' && c.elements[0]?.label === 'pts' &&
    JSON.stringify(c.elements[0].points) === '[[1,5],[2,6]]', 'a scatter plot comes back as a ScatterChart', c)
  c = await chartOf("ax.bar(['A', 'B'], [3, 7], label='sales')\nax.set_title('Bars')\nax.set_ylabel('Sold (units)')")
  check(c?.type === 'bar' && c.title === 'Bars' && c.y_label === 'Sold (units)' && c.y_unit === 'units' &&
    JSON.stringify(c.elements.map((e) => [e.label, e.group, e.value])) === '[["A","sales",3],["B","sales",7]]',
    'a bar chart comes back as a BarChart', c)
  c = await chartOf("ax.pie([1, 3], labels=['x', 'y'])\nax.set_title('Pie')")
  check(c?.type === 'pie' && c.title === 'Pie' &&
    JSON.stringify(c.elements.map((e) => [e.label, e.angle, e.radius])) === '[["x",90,1],["y",270,1]]',
    'a pie chart comes back as a PieChart', c)
  c = await chartOf("ax.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=['A', 'B'])\nax.set_title('Box')")
  const b0 = c?.elements?.[0]
  check(c?.type === 'box_and_whisker' && c.title === 'Box' && c.elements.length === 2 && b0.label === 'A' &&
    b0.min === 1 && b0.first_quartile === 2.25 && b0.median === 3.5 && b0.third_quartile === 4.75 &&
    b0.max === 5 && JSON.stringify(b0.outliers) === '[20]' && c.elements[1].median === 3,
    'a box plot comes back as a BoxAndWhiskerChart', c)
  c = (await sbx.runCode("import matplotlib.pyplot as plt\nfig, (a, b) = plt.subplots(1, 2)\na.plot([1, 2])\n" +
    "a.set_title('left')\nb.bar(['q'], [1])\nb.set_title('right')\nfig.suptitle('Both')\nplt.show()")).results.find((r) => r.chart)?.chart
  check(c?.type === 'superchart' && c.title === 'Both' &&
    JSON.stringify(c.elements.map((e) => [e.type, e.title])) === '[["line","left"],["bar","right"]]',
    'a figure of two subplots comes back as a SuperChart', c)
  ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [1.5, float('nan')], 'c': ['x', 'y']})")
  check(JSON.stringify(ex.results[0]?.data) === '{"a":[1,2],"b":[1.5,null],"c":["x","y"]}' && ex.results[0].html,
    'a DataFrame result has its columns in data (NaN as null) and its HTML', ex.results)
  ex = await sbx.runCode('{"k": 1}')
  check(ex.results[0] && ex.results[0].chart === undefined && ex.results[0].data === undefined,
    'other results have neither chart nor data', ex.results)

  ex = await sbx.runCode('1/0')
  check(ex.error && ex.error.name === 'ZeroDivisionError' && ex.error.value === 'division by zero' &&
    ex.error.traceback.includes('ZeroDivisionError'), 'an error comes with name, value and traceback', ex.error)

  ex = await sbx.runCode("import os\nos.environ['SG_ENV']", { envs: { SG_ENV: 'from-sdk' } })
  check(ex.results[0]?.text === 'from-sdk', 'envs are visible to the code', ex.results)

  ex = await sbx.runCode('n=6; echo $((n * 7))', { language: 'bash' })
  check(ex.logs.stdout.join('') === '42\n' && !ex.error, "runCode(code, { language: 'bash' }) runs Bash", [ex.logs, ex.error])
  ex = await sbx.runCode('false', { language: 'bash' })
  check(ex.error && ex.error.value === '1', 'a failing Bash command is an error with its exit status', ex.error)
  const bctx = await sbx.createCodeContext({ language: 'bash' })
  ex = await sbx.runCode('echo ${n:-unset}', { context: bctx })
  check(bctx.language === 'bash' && ex.logs.stdout.join('') === 'unset\n',
    "createCodeContext({ language: 'bash' }) is a Bash context of its own", [bctx, ex.logs])
  await sbx.removeCodeContext(bctx)

  // JavaScript and TypeScript run on Deno's kernel: js and ts are the SDK's
  // names, javascript and typescript the contexts' languages.
  const jsOut = []
  ex = await sbx.runCode('let n = 6\nfunction twice(v) { return v * 2 }\nconsole.log("hello from js")\nn * 7',
    { language: 'js', onStdout: (m) => jsOut.push(m.line) })
  check(ex.results.length === 1 && ex.results[0].text === '42' && ex.results[0].isMainResult && !ex.error,
    "runCode(code, { language: 'js' }) runs JavaScript and returns its value", [ex.results, ex.error])
  check(ex.logs.stdout.join('') === 'hello from js\n' && jsOut.join('') === 'hello from js\n',
    'console.log is stdout (logs and onStdout)', [ex.logs, jsOut])
  ex = await sbx.runCode('twice(n) + 30', { language: 'js' })
  check(ex.results[0]?.text === '42' && !ex.error,
    'a JavaScript variable and function persist across runCode calls', [ex.results, ex.error])
  ex = await sbx.runCode('function boom() { throw new TypeError("bad thing") }\nboom()', { language: 'js' })
  check(ex.error && ex.error.name === 'TypeError' && ex.error.value === 'bad thing' &&
    /^TypeError: bad thing\n\s+at boom /.test(ex.error.traceback),
    'a JavaScript exception is an error with name, value and traceback', ex.error)
  ex = await sbx.runCode('Deno.jupyter.html`<b id="sg">sandgate</b>`', { language: 'js' })
  check(ex.results.length === 1 && ex.results[0].html === '<b id="sg">sandgate</b>' && !ex.error,
    'Deno.jupyter.html comes back as a result with .html', [ex.results, ex.error])
  const tctx = await sbx.createCodeContext({ language: 'ts' })
  ex = await sbx.runCode('function f(a: number): number { return a * 7 }\nf(6)', { context: tctx })
  check(tctx.language === 'typescript' && ex.results[0]?.text === '42' && !ex.error,
    "createCodeContext({ language: 'ts' }) is a typescript context that runs typed code",
    [tctx, ex.results, ex.error])
  const jctx = await sbx.createCodeContext({ language: 'js' })
  check(jctx.language === 'javascript', "createCodeContext({ language: 'js' }) is a javascript context", jctx)
  const langs = Object.fromEntries((await sbx.listCodeContexts()).map((c) => [c.id, c.language]))
  check(langs[tctx.id] === 'typescript' && langs[jctx.id] === 'javascript',
    'listCodeContexts reports their languages', langs)
  await sbx.removeCodeContext(tctx)
  await sbx.removeCodeContext(jctx)

  const ctx = await sbx.createCodeContext({ cwd: '/home/user' })
  check(ctx && typeof ctx.id === 'string' && ctx.language === 'python', 'createCodeContext', ctx)
  await sbx.runCode('in_ctx = 1', { context: ctx })
  ex = await sbx.runCode("'in_ctx' in dir()", { context: ctx })
  check(ex.results[0]?.text === 'True', 'code runs in the created context', ex.results)
  ex = await sbx.runCode("'in_ctx' in dir()")
  check(ex.results[0]?.text === 'False', 'the default context is separate', ex.results)
  const list = await sbx.listCodeContexts()
  check(list.some((c) => c.id === ctx.id), 'listCodeContexts includes it', list)
  await sbx.restartCodeContext(ctx)
  ex = await sbx.runCode("'in_ctx' in dir()", { context: ctx })
  check(ex.results[0]?.text === 'False', 'restartCodeContext gives a fresh kernel', ex.results)
  await sbx.removeCodeContext(ctx)
  const after = await sbx.listCodeContexts()
  check(!after.some((c) => c.id === ctx.id), 'removeCodeContext removes it', after)
  let threw = null
  try { await sbx.runCode('1', { context: ctx }) } catch (e) { threw = e }
  check(threw && /404|not/i.test(`${threw.name} ${threw.message}`), 'running in a removed context fails with not found', `${threw}`)

  const bad = await Sandbox.create({ debug: true, sandboxUrl: url })
  bad.envdAccessToken = 'wrong-token-0123456789'
  threw = null
  try { await bad.runCode('1') } catch (e) { threw = e }
  check(threw && /401/.test(`${threw.message}`), 'a wrong token is refused with 401', `${threw}`)
} catch (e) {
  check(false, 'the SDK run completes', `${e?.stack || e}`)
}
