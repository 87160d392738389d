// Compiled (not run) by test_js_client.py with tsc --noEmit --strict: the
// package's type declarations as a TypeScript user (an ES module) sees them.
import { Sandgate, NotFoundError, QuotaExceededError, SandgateError, TooManyRequestsError, type Execution, type Context, type Snapshot, type Template, type Chart } from 'sandgate'
import { executeCodeTool, executePythonTool, formatChart, runCommandTool, sandgateTools } from 'sandgate/langchain'
import { SandgateSandbox } from 'sandgate/deepagents'
import { createAgent } from 'langchain'
import { createDeepAgent } from 'deepagents'
import { fakeModel } from '@langchain/core/testing'

export async function use(): Promise<number> {
  const sg = new Sandgate({ url: 'http://127.0.0.1:49999', apiKey: 'k' })
  const old = new Sandgate({ token: 't' })
  const key: string | undefined = old.apiKey ?? old.token
  const ctx: Context = await sg.createContext({ language: 'python', internet: false })
  const ex: Execution = await sg.execute('1', {
    context: ctx, onStdout: (t: string) => t.length, onResult: (r) => r.png, timeout: 5, envVars: { A: 'b' },
  })
  const main: string | undefined = ex.text
  // a chart narrows by its type; a DataFrame's data is its columns
  const chart: Chart | undefined = ex.results[0]?.chart
  const described: string = chart ? formatChart(chart) : ''
  let charted = 0
  if (chart?.type === 'bar') charted = chart.elements.reduce((n, e) => n + (e.value ?? 0), chart.y_unit?.length ?? 0)
  if (chart?.type === 'superchart') {
    for (const sub of chart.elements) {
      if (sub.type === 'line' || sub.type === 'scatter') charted += sub.elements[0].points.length + sub.x_ticks.length
      if (sub.type === 'pie') charted += sub.elements[0].angle
      if (sub.type === 'box_and_whisker') charted += sub.elements[0].outliers.length + (sub.elements[0].median ?? 0)
    }
  }
  const columns: Record<string, unknown[]> | undefined = ex.results[0]?.data
  void described; void charted; void columns
  const err: string | undefined = ex.error?.traceback
  const cmd = await sg.runCommand('ls', { context: ctx.id })
  const bytes: Uint8Array = await sg.downloadFile(ctx, 'a')
  const entries = await sg.listFiles(ctx)
  const entry = await sg.writePath(ctx, '/tmp/a', new Uint8Array(1))
  const anywhere: Uint8Array = await sg.readPath(ctx, '/tmp/a')
  const perms: string = (await sg.statPath(ctx, '/tmp')).permissions
  const deeper = await sg.listPath(ctx, '/tmp', { depth: 2 })
  await sg.movePath(ctx, entry.path, '/tmp/b')
  await sg.makeDir(ctx, '/tmp/d')
  await sg.removePath(ctx, '/tmp/d')
  try { await sg.getContext(ctx) } catch (e) {
    if (e instanceof NotFoundError) { const s: number = e.status; void s }
    if (e instanceof SandgateError) { const k: string = e.kind; const c: string | undefined = e.code; void k; void c }
    if (e instanceof QuotaExceededError) { const q: string | undefined = e.quota; const n: number | undefined = e.limit; void q; void n }
    if (e instanceof TooManyRequestsError) { const s: number = e.status; void s }
  }
  void key
  const snap: Snapshot = await sg.snapshotContext(ctx, { name: 'n' })
  const forked = await sg.forkContext(ctx, { keepSnapshot: true })
  const kept: string | null = forked.snapshot_id
  const fromSnap: Context = await sg.createContext({ snapshot: snap })
  const rolled: Context = await sg.restoreContext(fromSnap, snap.id)
  const snaps: Snapshot[] = await sg.listSnapshots(ctx)
  await sg.deleteSnapshot((await sg.getSnapshot(snap)).id)
  void kept; void rolled; void snaps
  const templates: Template[] = await sg.listTemplates()
  const fromTemplate: Context = await sg.createContext({ template: templates[0].name, cwd: '/home/user' })
  const tplName: string | undefined = fromTemplate.template
  const warm: number = templates[0].pool_ready
  const onTemplate = executePythonTool({ client: sg, contextOptions: { template: 'pd' } })
  const onTs = executeCodeTool({ client: sg, language: 'typescript', contextOptions: { cwd: '/home/user' } })
  void tplName; void warm; void onTemplate; void onTs
  const python = executePythonTool({ client: sg, timeout: 10 })
  const [py, sh] = sandgateTools({ client: sg })
  const agent = createAgent({ model: fakeModel(), tools: [python, runCommandTool({ client: sg }), py, sh] })
  void agent
  await python.registry.close()
  const backend = await SandgateSandbox.create({ client: sg })
  const deep = createDeepAgent({ model: fakeModel(), backend })
  void deep
  const r = await backend.execute('true', { timeout: 5 })
  return anywhere.length + perms.length + deeper.length + entry.mode + (main?.length ?? 0) + (err?.length ?? 0) + cmd.exitCode + bytes.length + entries.length + (r.exitCode ?? 0)
}
