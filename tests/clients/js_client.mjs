// sandgate's JS client (clients/js, npm `sandgate`) against a real daemon.
// usage: node js_client.mjs URL TOKEN KEY_A KEY_B NOTEBOOK_URL — prints one JSON line per check: {ok, name, detail}
// The daemon runs with --max-upload 400000 (for a 413), --template
// pd=preload=import pandas as pd, and a keys file whose
// tenants have the keys KEY_A (alice) and KEY_B (bob, --max-contexts 1);
// TOKEN is the admin's --token; NOTEBOOK_URL the daemon's --notebook-url.
import * as sg from 'sandgate'

const { Sandgate } = sg
const [url, token, keyA, keyB, notebookTemplate] = process.argv.slice(2)
const linkOf = (id) => notebookTemplate.replaceAll('{kernel_id}', id)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const str = (v) => { try { return JSON.stringify(v) } catch { return String(v) } }
async function rejects(p) {
  try { await p } catch (e) { return e }
  return null
}
const isErr = (e, cls, status, kind) =>
  e instanceof cls && e instanceof sg.SandgateError && e.status === status && e.kind === kind &&
  typeof e.message === 'string' && e.message.length > 0

try {
  // The environment gives the defaults.
  process.env.SANDGATE_URL = url
  process.env.SANDGATE_TOKEN = token
  delete process.env.SANDGATE_API_KEY
  const c = new Sandgate()
  check(c.url === url && c.apiKey === token && c.token === token,
    'SANDGATE_URL and SANDGATE_TOKEN are the defaults (apiKey, and token its older name)', [c.url])
  const h = await c.health()
  check(h.status === 'ok', 'health', h)

  // --- streaming execution with callbacks -------------------------------------
  const events = []
  const t0 = Date.now()
  let ex = await c.execute(
    "import sys, time\nx = 41\nprint('hello', flush=True)\nprint('oops', file=sys.stderr, flush=True)\n" +
    "time.sleep(1.5)\nprint('late')\nx + 1", {
      onStdout: (text) => events.push(['stdout', text, Date.now() - t0]),
      onStderr: (text) => events.push(['stderr', text, Date.now() - t0]),
      onResult: (r) => events.push(['result', r.text, Date.now() - t0]),
    })
  const end = Date.now() - t0
  check(ex.stdout === 'hello\nlate\n' && ex.stderr === 'oops\n', 'execute collects stdout and stderr', ex)
  check(ex.text === '42' && ex.results.length === 1 && ex.results[0].isMainResult,
    'the main result is 42', ex.results)
  check(Number.isInteger(ex.executionCount) && ex.executionCount > 0, 'executionCount is set', ex.executionCount)
  check(ex.error === null, 'no error', ex.error)
  const first = events.find((e) => e[0] === 'stdout')
  check(first && first[1] === 'hello\n' && first[2] < end - 1000,
    'onStdout sees output while the code still runs (streamed)', { events, end })
  check(events.some((e) => e[0] === 'stderr' && e[1] === 'oops\n'), 'onStderr receives stderr', events)
  check(events.at(-1)?.[0] === 'result' && events.at(-1)[1] === '42', 'onResult receives the main result', events)

  ex = await c.execute('x')
  check(ex.text === '41', 'variables persist in the default context', ex.results)

  ex = await c.execute('1/0')
  check(ex.error?.name === 'ZeroDivisionError' && ex.error.value === 'division by zero' &&
    ex.error.traceback.includes('ZeroDivisionError'), 'an exception is error {name, value, traceback}', ex.error)

  ex = await c.execute(
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
  const png = ex.results.find((r) => r.png)
  check(png && !png.isMainResult && Buffer.from(png.png, 'base64').subarray(1, 4).toString() === 'PNG' &&
    png.formats().includes('png'), 'a matplotlib plot is a PNG result', ex.results.map((r) => r.formats()))
  const line = png?.chart
  check(line?.type === 'line' && str(line.elements.map((e) => e.points)) === str([[[0, 1], [1, 3], [2, 2]]]) &&
    png.formats().includes('chart'), "and its data is result.chart: a line chart with the plot's points",
  ex.results.map((r) => r.chart))

  // --- charts (e2b/chart) and DataFrames (e2b/data) -----------------------------------
  ex = await c.execute("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n" +
    "ax.plot([0, 1, 2], [1, 4, 9], label='squares')\nax.plot([0, 1, 2], [0, 1, 2], label='same')\n" +
    "ax.set_title('Growth')\nax.set_xlabel('Step [s]')\nax.set_ylabel('Size')\nplt.show()")
  const lc = ex.results.find((r) => r.chart)?.chart
  check(lc?.type === 'line' && lc.title === 'Growth' && lc.x_label === 'Step [s]' && lc.x_unit === 's' &&
    lc.y_label === 'Size' && lc.y_unit === null &&
    str(lc.elements.map((e) => [e.label, e.points])) ===
      str([['squares', [[0, 1], [1, 4], [2, 9]]], ['same', [[0, 0], [1, 1], [2, 2]]]]),
  'a line plot: result.chart has its type, title, labels and units, each series with its points', lc)
  check(lc && lc.x_scale === 'linear' && lc.y_scale === 'linear' && lc.x_ticks.length > 1 &&
    lc.x_ticks.length === lc.x_tick_labels.length && lc.x_ticks.every((t) => typeof t === 'number'),
  "a line chart's ticks, tick labels and scales", lc)
  ex = await c.execute("import matplotlib.pyplot as plt\n" +
    "plt.bar(['apples', 'pears', 'plums'], [3, 5, 2.5], label='stock')\n" +
    "plt.title('Fruit')\nplt.xlabel('Kind')\nplt.ylabel('Weight (kg)')\nplt.show()")
  const barResult = ex.results.find((r) => r.chart)
  const bc = barResult?.chart
  check(bc?.type === 'bar' && bc.title === 'Fruit' && bc.x_label === 'Kind' && bc.x_unit === null &&
    bc.y_label === 'Weight (kg)' && bc.y_unit === 'kg' && barResult.png && !barResult.isMainResult,
  'a bar chart: result.chart (type, title, axis labels, unit) beside its png', barResult && { ...barResult, png: undefined })
  check(str(bc?.elements.map((e) => [e.label, e.group, e.value])) ===
    str([['apples', 'stock', 3], ['pears', 'stock', 5], ['plums', 'stock', 2.5]]),
  "a bar chart's elements: each bar's label, group and value", bc?.elements)
  ex = await c.execute("plt.bar(['a'], [1]); plt.show()", { richFormats: false })
  check(ex.results.length === 1 && ex.results[0].png && ex.results[0].chart === undefined,
    'richFormats: false: the image, no chart', ex.results.map((r) => r.formats()))
  ex = await c.execute("import pandas as pd\n" +
    "pd.DataFrame({'name': ['a', 'b'], 'n': [1, 2], 'x': [0.5, float('nan')]})")
  const frame = ex.results[0]
  check(ex.results.length === 1 && frame.isMainResult &&
    str(frame.data) === str({ name: ['a', 'b'], n: [1, 2], x: [0.5, null] }) &&
    frame.formats().includes('data') && frame.html?.includes('<table') && frame.chart === undefined,
  "a DataFrame: result.data is its columns (NaN as null), beside its html", ex.results)
  ex = await c.execute("{'k': 1}")
  check(ex.results.length === 1 && ex.results[0].data === undefined && ex.results[0].chart === undefined,
    'other results have neither chart nor data', ex.results)

  ex = await c.execute("import os\nos.environ.get('SG_ENV')", { envVars: { SG_ENV: 'from-js' } })
  check(ex.text === "'from-js'", 'envVars reach the code', ex.results)

  ex = await c.execute("import time\ntime.sleep(30)", { timeout: 1 })
  check(ex.error?.name === 'TimeoutError', 'timeout stops the execution with TimeoutError', ex.error)

  ex = await c.execute("import os\nos.makedirs('output', exist_ok=True)\nopen('output/a.txt', 'w').write('art')")
  check(ex.artifacts.length === 1 && ex.artifacts[0].path === 'output/a.txt' && ex.artifacts[0].size === 3,
    'files written under output/ are artifacts', ex.artifacts)

  ex = await c.execute("print('r')", { language: 'python' })
  check(ex.stdout === 'r\n', 'language picks a default context', ex)

  // --- other languages: JavaScript and TypeScript contexts ------------------------
  const jsCtx = await c.createContext({ language: 'js' })
  check(jsCtx.language === 'javascript', "createContext({language: 'js'}) is a javascript context", jsCtx)
  await c.execute('const counts = new Map()\nconst bump = (k) => counts.set(k, (counts.get(k) ?? 0) + 1).get(k)', { context: jsCtx })
  await c.execute("bump('a')", { context: jsCtx })
  ex = await c.execute("bump('a') * 21", { context: jsCtx })
  check(ex.text === '42' && !ex.error, 'a JavaScript context keeps its state between calls', ex.results)
  ex = await c.execute("throw new RangeError('too far')", { context: jsCtx })
  check(ex.error?.name === 'RangeError' && /too far/.test(ex.error.value), 'a JavaScript exception is ex.error', ex.error)
  await c.removeContext(jsCtx)
  const tsCtx = await c.createContext({ language: 'typescript' })
  ex = await c.execute('enum Unit { One = 1, Two }\n' +
    'function scale(u: Unit, n: number): number { return u * n }\nscale(Unit.Two, 21)', { context: tsCtx })
  check(tsCtx.language === 'typescript' && ex.text === '42' && !ex.error,
    'a TypeScript context runs typed code (an enum, a typed function)', [tsCtx.language, ex.results, ex.error])
  ex = await c.execute('scale(Unit.One, 5) satisfies number', { context: tsCtx })
  check(ex.text === '5', 'and keeps them for the next call', ex.results)
  await c.removeContext(tsCtx)
  ex = await c.execute("let viaDefault: string = 'ts'; viaDefault.length", { language: 'ts' })
  check(ex.text === '2', "execute({language: 'ts'}) runs in the default TypeScript context", [ex.results, ex.error])

  // --- contexts -------------------------------------------------------------
  const ctx = await c.createContext({ cwd: '/home/user' })
  check(typeof ctx.id === 'string' && ctx.language === 'python' && ctx.cwd === '/home/user' &&
    ctx.internet === false, 'createContext', ctx)
  await c.execute('in_ctx = 7', { context: ctx })
  ex = await c.execute('in_ctx * 6', { context: ctx.id })
  check(ex.text === '42', 'code runs in the created context (object or id)', ex.results)
  ex = await c.execute("'in_ctx' in dir()")
  check(ex.text === 'False', 'the default context is separate', ex.results)
  const list = await c.listContexts()
  check(Array.isArray(list) && list.some((x) => x.id === ctx.id), 'listContexts includes it', list)
  const got = await c.getContext(ctx)
  check(got.id === ctx.id && typeof got.state === 'string', 'getContext', got)
  check(ctx.notebookUrl === linkOf(ctx.id) && ctx.notebook_url === ctx.notebookUrl &&
    got.notebookUrl === linkOf(ctx.id),
  "createContext's and getContext's notebookUrl: the server's --notebook-url for the context", [ctx, got])
  check(list.filter((x) => x.id === ctx.id).map((x) => x.notebookUrl).join() === linkOf(ctx.id),
    'listContexts gives each its notebookUrl', list)

  const paused = await c.pauseContext(ctx)
  check(paused.state === 'paused' && paused.checkpoint_bytes > 0 && paused.notebookUrl === linkOf(ctx.id),
    'pauseContext', paused)
  const resumed = await c.resumeContext(ctx)
  check(resumed.state === 'running', 'resumeContext', resumed)
  ex = await c.execute('in_ctx', { context: ctx })
  check(ex.text === '7', 'variables survive pause and resume', ex.results)

  await c.restartContext(ctx)
  ex = await c.execute("'in_ctx' in dir()", { context: ctx })
  check(ex.text === 'False', 'restartContext gives a fresh kernel', ex.results)

  // --- snapshots, fork, roll-back ----------------------------------------------
  await c.execute("snap_v = 'saved'\nopen('s.txt', 'w').write('saved')", { context: ctx })
  const snap = await c.snapshotContext(ctx, { name: 'js' })
  check(typeof snap.id === 'string' && snap.context_id === ctx.id && snap.name === 'js' && snap.bytes > 0 &&
    typeof snap.created === 'string', 'snapshotContext: {id, context_id, name, created, bytes}', snap)
  const fromSnap = await c.createContext({ snapshot: snap })
  ex = await c.execute("snap_v + open('s.txt').read()", { context: fromSnap })
  check(ex.text === "'savedsaved'" && fromSnap.parent === ctx.id,
    'createContext({snapshot}): its variables and files, parent set', [ex.results, fromSnap])
  const fork = await c.forkContext(ctx)
  check(typeof fork.id === 'string' && fork.id !== ctx.id && fork.snapshot_id === null, 'forkContext', fork)
  await c.execute("snap_v = 'fork'", { context: fork })
  await c.execute("snap_v = 'changed'", { context: ctx })
  ex = await c.execute('snap_v', { context: fork })
  const exCtx = await c.execute('snap_v', { context: ctx })
  check(ex.text === "'fork'" && exCtx.text === "'changed'", 'a fork changes apart from its origin',
    [ex.results, exCtx.results])
  const rolled = await c.restoreContext(ctx, snap.id)
  ex = await c.execute('snap_v', { context: ctx })
  check(rolled.id === ctx.id && ex.text === "'saved'", 'restoreContext brings the variable back', [rolled, ex.results])
  check((await c.listSnapshots(ctx)).map((x) => x.id).join() === snap.id &&
    (await c.listSnapshots()).some((x) => x.id === snap.id), 'listSnapshots (of a context, of the tenant)', null)
  check((await c.getSnapshot(snap)).id === snap.id, 'getSnapshot', null)
  await c.deleteSnapshot(snap)
  let se = await rejects(c.getSnapshot(snap.id))
  check(isErr(se, sg.NotFoundError, 404, 'not_found'), 'deleteSnapshot; getSnapshot then is NotFoundError', `${se}`)
  se = await rejects(c.restoreContext(ctx, snap))
  check(isErr(se, sg.NotFoundError, 404, 'not_found'), 'restoring a deleted snapshot is NotFoundError', `${se}`)
  await c.removeContext(fromSnap)
  await c.removeContext(fork)

  // --- templates ------------------------------------------------------------------
  const tpls = await c.listTemplates()
  check(str(tpls) === str([{ name: 'pd', kernelspec: 'python3', language: 'python', root: 'host', preload: true,
    pool_size: 0, pool_ready: 0, snapshot_bytes: 0 }]), 'listTemplates: the daemon\'s --template with its fields', tpls)
  const tc = await c.createContext({ template: 'pd' })
  check(tc.template === 'pd' && tc.language === 'python' && (await c.getContext(tc)).template === 'pd',
    'createContext({template}): the context names its template', tc)
  ex = await c.execute('pd.__version__', { context: tc })
  check(ex.error === null && /^'\d/.test(ex.text ?? ''), 'a context from the template has its preload (pd without an import)',
    ex)
  await c.removeContext(tc)
  let te = await rejects(c.createContext({ template: 'no-such-template' }))
  check(isErr(te, sg.NotFoundError, 404, 'not_found') && te.message.includes('no-such-template'),
    'an unknown template is NotFoundError naming it', `${te}`)
  te = await rejects(c.createContext({ template: 'pd', language: 'python' }))
  check(isErr(te, sg.InvalidRequestError, 400, 'invalid'), 'template with language is InvalidRequestError', `${te}`)

  // --- commands -------------------------------------------------------------
  let r = await c.runCommand('echo hi; echo err >&2; exit 3', { context: ctx })
  check(r.stdout === 'hi\n' && r.stderr === 'err\n' && r.exitCode === 3 && r.error === null &&
    typeof r.durationMs === 'number', 'runCommand: stdout, stderr, a non-zero exit not thrown', r)
  r = await c.runCommand('echo "$SG_V" && pwd', { context: ctx, envVars: { SG_V: 'v1' } })
  check(r.stdout === 'v1\n/home/user\n' && r.exitCode === 0, 'runCommand: envVars, the workspace as cwd', r)
  r = await c.runCommand('sleep 30', { context: ctx, timeout: 1 })
  check(r.exitCode === 124 && r.error?.name === 'TimeoutError', 'runCommand: a timeout is exit 124', r)

  // --- files ----------------------------------------------------------------
  const up = await c.uploadFile(ctx, 'data/in.txt', 'hello file\n')
  check(up.path === 'data/in.txt' && up.size === 11, 'uploadFile (a string, parents created)', up)
  const bin = new Uint8Array(256).map((_, i) => i)
  await c.uploadFile(ctx, '/data/bin.dat', bin)
  const back = await c.downloadFile(ctx, 'data/bin.dat')
  check(back instanceof Uint8Array && Buffer.compare(Buffer.from(back), Buffer.from(bin)) === 0,
    'binary bytes round-trip', back.length)
  check(await c.readFile(ctx, 'data/in.txt') === 'hello file\n', 'readFile', null)
  const entries = await c.listFiles(ctx, 'data')
  check(str(entries.map((e) => [e.name, e.type, e.size])) === str([['bin.dat', 'file', 256], ['in.txt', 'file', 11]]),
    'listFiles', entries)
  const root = await c.listFiles(ctx)
  check(root.some((e) => e.name === 'data' && e.type === 'dir'), 'listFiles at the root', root)
  ex = await c.execute("open('data/in.txt').read()", { context: ctx })
  check(ex.text === "'hello file\\n'", 'the kernel sees the uploaded file', ex.results)
  r = await c.runCommand('wc -c < data/bin.dat', { context: ctx })
  check(r.stdout.trim() === '256', 'a command sees the uploaded file', r)
  await c.uploadFile(ctx, 'sp ace/ü?#.txt', 'odd')
  check(await c.readFile(ctx, 'sp ace/ü?#.txt') === 'odd', 'names with spaces, ?, # and non-ASCII', null)
  await c.deleteFile(ctx, 'data/in.txt')
  let e = await rejects(c.readFile(ctx, 'data/in.txt'))
  check(isErr(e, sg.NotFoundError, 404, 'not_found'), 'deleteFile; a missing file is NotFoundError 404', `${e}`)

  // --- errors, one class per kind ------------------------------------------------
  e = await rejects(new Sandgate({ url, token: 'wrong-token-0123456789' }).listContexts())
  check(isErr(e, sg.UnauthorizedError, 401, 'unauthorized'), 'a wrong token is UnauthorizedError 401', `${e}`)
  e = await rejects(c.execute('1', { context: ctx, language: 'python' }))
  check(isErr(e, sg.InvalidRequestError, 400, 'invalid'), 'context with language is InvalidRequestError 400', `${e}`)
  e = await rejects(c.execute('1', { language: 'cobol' }))
  check(isErr(e, sg.InvalidRequestError, 400, 'invalid') && /cobol|language/i.test(e.message),
    'an unknown language is InvalidRequestError with the server\'s message', `${e}`)
  e = await rejects(c.readFile(ctx, 'data/../../etc/passwd'))
  check(isErr(e, sg.InvalidRequestError, 400, 'invalid'), 'a path with .. is InvalidRequestError', `${e}`)
  await c.runCommand('ln -s /etc link', { context: ctx })
  e = await rejects(c.readFile(ctx, 'link/passwd'))
  check(isErr(e, sg.ForbiddenError, 403, 'forbidden'), 'a path through a symlink is ForbiddenError 403', `${e}`)
  e = await rejects(c.request('GET', '/execute'))
  check(isErr(e, sg.MethodNotAllowedError, 405, 'method_not_allowed'), 'GET /execute is MethodNotAllowedError 405', `${e}`)
  e = await rejects(c.uploadFile(ctx, 'data', 'x'))
  check(isErr(e, sg.ConflictError, 409, 'conflict'), 'an upload onto a directory is ConflictError 409', `${e}`)
  e = await rejects(c.uploadFile(ctx, 'big.bin', new Uint8Array(500000)))
  check(isErr(e, sg.LimitExceededError, 413, 'limit_exceeded'), 'an upload past --max-upload is LimitExceededError 413', `${e}`)
  e = await rejects(new Sandgate({ url: 'http://127.0.0.1:1', token }).listContexts())
  check(e instanceof sg.SandgateError && e.status === 0 && e.kind === 'connection',
    'no server is a SandgateError with status 0', `${e}`)
  const kinds = [['invalid', 400, sg.InvalidRequestError], ['unauthorized', 401, sg.UnauthorizedError],
    ['forbidden', 403, sg.ForbiddenError], ['not_found', 404, sg.NotFoundError],
    ['method_not_allowed', 405, sg.MethodNotAllowedError], ['conflict', 409, sg.ConflictError],
    ['limit_exceeded', 413, sg.LimitExceededError], ['insufficient_storage', 507, sg.InsufficientStorageError],
    ['quota_exceeded', 429, sg.QuotaExceededError], ['too_many_requests', 429, sg.TooManyRequestsError],
    ['unavailable', 503, sg.UnavailableError], ['timeout', 504, sg.GatewayTimeoutError]]
  const wrong = kinds.filter(([kind, status, cls]) => {
    const x = sg.errorFromResponse(status, JSON.stringify({ error: kind, message: 'm' }))
    return !isErr(x, cls, status, kind) || x.name !== cls.name
  })
  check(wrong.length === 0, "every kind in docs/api.md's table has its class", wrong)
  const proxy = sg.errorFromResponse(502, '<html>bad gateway</html>')
  check(proxy instanceof sg.SandgateError && proxy.status === 502 && /bad gateway/.test(proxy.message),
    'a non-JSON error (a proxy\'s) is a SandgateError with its status', `${proxy}`)
  const limited = sg.errorFromResponse(429, 'slow down')
  check(limited instanceof sg.TooManyRequestsError && !(limited instanceof sg.QuotaExceededError),
    'a 429 without sandgate\'s body (a proxy\'s rate limit) is TooManyRequestsError', `${limited}`)

  await c.removeContext(ctx)
  e = await rejects(c.getContext(ctx))
  check(isErr(e, sg.NotFoundError, 404, 'not_found'), 'removeContext; getContext then is NotFoundError 404', `${e}`)
  e = await rejects(c.execute('1', { context: ctx }))
  check(isErr(e, sg.NotFoundError, 404, 'not_found'), 'executing in a removed context is NotFoundError', `${e}`)

  // --- tenants: a key each ----------------------------------------------------------
  const alice = new Sandgate({ url, apiKey: keyA })
  const bob = new Sandgate({ url, token: keyB }) // the older name still works
  check(alice.apiKey === keyA && alice.token === keyA && bob.apiKey === keyB,
    'apiKey and its older name token set the key', null)
  check(new Sandgate({ url, apiKey: keyA, token: keyB }).apiKey === keyA, 'apiKey wins over token', null)
  const ca = await alice.createContext()
  await alice.uploadFile(ca, 'mine.txt', "alice's")
  ex = await alice.execute("who = 'alice'\nwho", { context: ca })
  check(ex.text === "'alice'", "a tenant's key creates and runs its context", ex.results)
  const mine = await alice.listContexts()
  check(mine.some((x) => x.id === ca.id) && mine.every((x) => x.tenant === 'alice'),
    'its list has its own contexts, marked with its tenant', mine)
  check(!(await bob.listContexts()).some((x) => x.id === ca.id), "another tenant's list does not have it", null)
  const unknown = '00000000-0000-4000-8000-000000000000'
  const eu = await rejects(bob.getContext(unknown))
  for (const [what, call] of [['getContext', () => bob.getContext(ca)],
    ['execute', () => bob.execute('who', { context: ca })], ['readFile', () => bob.readFile(ca, 'mine.txt')],
    ['removeContext', () => bob.removeContext(ca)], ['runCommand', () => bob.runCommand('ls', { context: ca })]]) {
    e = await rejects(call())
    check(isErr(e, sg.NotFoundError, 404, 'not_found'),
      `another tenant's context: ${what} is NotFoundError 404`, `${e}`)
    if (what === 'getContext') {
      check(eu && e.message.replace(ca.id, 'ID') === eu.message.replace(unknown, 'ID'),
        '... the same error as an id that does not exist', [`${e}`, `${eu}`])
    }
  }
  ex = await alice.execute('who', { context: ca })
  check(ex.text === "'alice'" && await alice.readFile(ca, 'mine.txt') === "alice's",
    "the owner's context is untouched", ex.results)
  check((await c.listContexts()).some((x) => x.id === ca.id && x.tenant === 'alice'),
    "the admin's token sees it, with its tenant", null)

  check(str(await bob.listTemplates()) === str(await alice.listTemplates()) &&
    (await bob.listTemplates()).map((x) => x.name).join() === 'pd', 'every tenant sees the same templates', null)
  const tb = await bob.createContext({ template: 'pd' })
  ex = await bob.execute('pd.__name__', { context: tb })
  check(tb.template === 'pd' && tb.tenant === 'bob' && ex.text === "'pandas'",
    'another tenant makes a context from the template, with its preload', [tb, ex.results])
  await bob.removeContext(tb)
  const cb = await bob.createContext()
  ex = await bob.execute('6 * 7', { context: cb })
  check(ex.text === '42', 'the other tenant works with its key', ex.results)
  e = await rejects(bob.createContext())
  check(e instanceof sg.QuotaExceededError && isErr(e, sg.QuotaExceededError, 429, 'quota_exceeded') &&
    e.quota === 'max-contexts' && e.limit === 1 && e.message.includes('max-contexts') &&
    e.name === 'QuotaExceededError',
    'past max-contexts: QuotaExceededError (a SandgateError, 429) naming max-contexts and its limit',
    [`${e}`, e?.quota, e?.limit])
  const ca2 = await alice.createContext()
  check(ca2.id, 'the other tenant is not held by that quota', ca2)

  process.env.SANDGATE_API_KEY = keyB
  const ids = (await new Sandgate().listContexts()).map((x) => x.id)
  check(ids.includes(cb.id) && !ids.includes(ca.id), 'SANDGATE_API_KEY is used before SANDGATE_TOKEN', ids)
  delete process.env.SANDGATE_API_KEY

  // --- too many failed authentications: TooManyRequestsError ------------------------------
  const names = []
  for (let i = 0; i < 12; i++) {
    names.push((await rejects(new Sandgate({ url, apiKey: `sgk_wrong${i}` }).listContexts()))?.name)
  }
  check(names.slice(0, 3).every((n) => n === 'UnauthorizedError') && names.at(-1) === 'TooManyRequestsError',
    'wrong keys past --auth-fail-limit: TooManyRequestsError', names)
  e = await rejects(alice.listContexts())
  check(isErr(e, sg.TooManyRequestsError, 429, 'too_many_requests'),
    'while blocked, a right key gets TooManyRequestsError 429', `${e}`)
  await new Promise((resolve) => setTimeout(resolve, 2500))
  const left = (await rejects(alice.listContexts())) ?? [...await alice.listContexts(), ...await bob.listContexts()]
  check(Array.isArray(left) && left.length === 3, 'after --auth-block, the right keys work again', `${left}`)
  for (const x of Array.isArray(left) ? left : []) await c.removeContext(x)
} catch (e) {
  check(false, 'the client script completes', `${e?.stack || e}`)
}
