// LangChain tools over a sandgate client: `execute_python` (stateful Python
// in a sandboxed kernel; executeCodeTool's `execute_<language>` for another
// kernel) and `run_command` (a shell command in the same sandbox). Needs the
// peer dependencies @langchain/core and zod.
import { tool } from '@langchain/core/tools'
import { z } from 'zod'
import { NotFoundError } from './index.js'

const DEFAULT_MAX_CHARS = 20000
const IMAGE_TYPES = [['png', 'image/png'], ['jpeg', 'image/jpeg']]

/**
 * The contexts a set of tools runs in: one per conversation (the LangGraph
 * thread id of the call), or one for calls without a thread id. Tools that
 * share a registry share their sandboxes, so the shell sees what Python wrote.
 */
export class ContextRegistry {
  constructor({ client, contextOptions = {}, perThread = true } = {}) {
    if (!client) throw new TypeError('ContextRegistry needs { client }')
    this.client = client
    this.contextOptions = contextOptions
    this.perThread = perThread
    /** key (thread id, or '' without one) → Promise of the context id */
    this.contexts = new Map()
    /** context id → its notebookUrl (a server with --notebook-url) */
    this.links = new Map()
  }

  key(runtime) {
    const thread = this.perThread ? runtime?.configurable?.thread_id : undefined
    return thread == null ? '' : String(thread)
  }

  /** The context id for this call's conversation, created on first use. */
  get(runtime) {
    const key = this.key(runtime)
    let p = this.contexts.get(key)
    if (!p) {
      p = this.client.createContext(this.contextOptions).then((c) => {
        if (c.notebookUrl) this.links.set(c.id, c.notebookUrl)
        return c.id
      })
      // A failed creation is not remembered: the next call tries again.
      p.catch(() => { if (this.contexts.get(key) === p) this.contexts.delete(key) })
      this.contexts.set(key, p)
    }
    return p
  }

  /** Forgets a context that is gone (deleted, culled); the next get makes a new one. */
  async forget(runtime, id) {
    const key = this.key(runtime)
    const p = this.contexts.get(key)
    if (p && (await p.catch(() => null)) === id && this.contexts.get(key) === p) this.contexts.delete(key)
  }

  /** Removes every context the tools made. */
  async close() {
    const ids = await Promise.allSettled([...this.contexts.values()])
    this.contexts.clear()
    await Promise.allSettled(ids.filter((r) => r.status === 'fulfilled')
      .map((r) => this.client.removeContext(r.value)))
  }
}

// ipykernel colours its tracebacks; a model reads them better plain.
const ANSI = /\x1b\[[0-9;?]*[ -\/]*[@-~]/g
export function stripAnsi(s) {
  return String(s ?? '').replace(ANSI, '')
}

/** Keeps the head and the tail of a long text, with a marker saying how much went. */
export function truncate(text, max) {
  if (!(max > 0) || text.length <= max) return text
  const marker = (n) => `\n[... ${n} characters truncated ...]\n`
  const keep = Math.max(0, max - marker(text.length).length)
  const head = Math.ceil(keep * 0.6)
  const tail = keep - head
  return text.slice(0, head) + marker(text.length - keep) + (tail ? text.slice(-tail) : '')
}

function section(label, text) {
  return text ? `${label}:\n${text.endsWith('\n') ? text : text + '\n'}` : ''
}

// An axis as its label, which holds its unit ("Time (s)"), or the unit alone.
const axis = (label, unit) => label || (unit ? `(${unit})` : '')
// Python's '{:g}': six significant digits, no trailing zeros.
const g = (n) => typeof n === 'number' ? String(Number(n.toPrecision(6))) : String(n)

/**
 * A figure's chart data (result.chart, docs/api.md) as lines a model can
 * read: `[chart: bar "Title"; x: label; y: label (unit)]`, then one line per
 * series, bar, slice or box (a superchart's charts indented under it), as
 * the Python tool writes it.
 */
export function formatChart(chart, indent = '') {
  let head = `${indent}[chart: ${chart.type}`
  if (chart.title) head += ` "${chart.title}"`
  for (const a of ['x', 'y']) {
    const label = chart[`${a}_label`], unit = chart[`${a}_unit`]
    if (label || unit) head += `; ${a}: ${axis(label, unit)}`
  }
  const lines = [head + ']']
  for (const e of chart.elements ?? []) {
    if (!e || typeof e !== 'object') continue
    if (chart.type === 'superchart') lines.push(formatChart(e, indent + '  '))
    else if ('points' in e) {
      lines.push(`${indent}${e.label || 'series'}: ` + e.points.map(([x, y]) => `(${x}, ${y})`).join(', '))
    } else if ('angle' in e) lines.push(`${indent}${e.label}: ${g(e.angle)} degrees`)
    else if ('median' in e) {
      lines.push(`${indent}${e.label}: min ${e.min}, q1 ${e.first_quartile}, median ${e.median}, ` +
        `q3 ${e.third_quartile}, max ${e.max}, outliers [${(e.outliers ?? []).join(', ')}]`)
    } else if ('value' in e) lines.push(`${indent}${e.label}${e.group ? ` (${e.group})` : ''}: ${e.value}`)
  }
  return lines.join('\n')
}

const chartSection = (r) => r?.chart && typeof r.chart === 'object' ? formatChart(r.chart) + '\n' : ''

/** The model-facing text of an Execution (stdout, stderr, value, charts, error). */
export function formatExecution(ex, { maxChars = DEFAULT_MAX_CHARS } = {}) {
  const parts = []
  if (ex.stdout) parts.push(section('stdout', ex.stdout))
  if (ex.stderr) parts.push(section('stderr', stripAnsi(ex.stderr)))
  const main = ex.results.find((r) => r.isMainResult)
  if (main?.text !== undefined) parts.push(section('result', main.text))
  parts.push(chartSection(main))
  const others = ex.results.filter((r) => !r.isMainResult)
  for (const r of others) {
    const img = IMAGE_TYPES.find(([k]) => r[k])
    if (img) parts.push(`[image ${img[1]} attached]\n`)
    else if (r.text !== undefined) parts.push(section('display', r.text))
    parts.push(chartSection(r))
  }
  if (ex.artifacts.length) {
    parts.push(section('files written', ex.artifacts
      .map((a) => `${a.path} (${a.mime}, ${a.size} bytes)`).join('\n')))
  }
  if (ex.error) {
    parts.push(section('error', `${ex.error.name}: ${ex.error.value}\n` +
      stripAnsi(ex.error.traceback)))
  }
  const text = parts.join('').trimEnd()
  return truncate(text || '(no output)', maxChars)
}

function imagesOf(ex) {
  const out = []
  for (const r of ex.results) {
    for (const [k, mime] of IMAGE_TYPES) {
      if (typeof r[k] === 'string') out.push({ type: 'image', mimeType: mime, data: r[k] })
    }
  }
  return out
}

function failure(e) {
  const kind = e?.name ?? 'Error'
  const status = e?.status ? ` (HTTP ${e.status})` : ''
  return `error: sandgate could not run this: ${kind}${status}: ${e?.message ?? e}`
}

/**
 * Runs `fn(contextId)` in this call's context; if the context is gone
 * (deleted or culled), makes a new one, runs again, and says so.
 */
async function inContext(registry, runtime, fn) {
  let id = await registry.get(runtime)
  try {
    return { value: await fn(id), id, note: '' }
  } catch (e) {
    if (!(e instanceof NotFoundError)) throw e
    await registry.forget(runtime, id)
    id = await registry.get(runtime)
    return { value: await fn(id), id,
      note: 'note: the previous session was gone; this ran in a new one (variables were lost)\n' }
  }
}

/**
 * A tool whose calls run `call(input, contextId)` in the call's context and
 * answer `render(value, contextId, note)` = [content, artifact]; any error
 * becomes the content, for the model to read, instead of being thrown.
 */
function sandgateTool(registry, fields, call, render) {
  const t = tool(async (input, runtime) => {
    try {
      const { value, id, note } = await inContext(registry, runtime, (context) => call(input, context))
      return render(value, id, note)
    } catch (e) {
      return [failure(e), { error: { name: e?.name ?? 'Error', value: e?.message ?? String(e), status: e?.status } }]
    }
  }, { ...fields, responseFormat: 'content_and_artifact' })
  t.registry = registry
  return t
}

// A context's language (as createContext takes it) → [the name in
// execute_<name>, how it reads].
const LANGUAGES = {
  python: ['python', 'Python'], javascript: ['javascript', 'JavaScript'], js: ['javascript', 'JavaScript'],
  typescript: ['typescript', 'TypeScript'], ts: ['typescript', 'TypeScript'], r: ['r', 'R'], bash: ['bash', 'Bash']
}

function codeDescription(key, title) {
  if (key === 'python') {
    return 'Runs Python code in a persistent, sandboxed Jupyter kernel. ' +
      'Variables, imports and files persist between calls. Returns stdout, stderr, the value ' +
      'of the last expression and any error with its traceback; matplotlib plots come back ' +
      'as images. The working directory is /home/user; files written under output/ are listed.'
  }
  return `Runs ${title} code in a persistent, sandboxed Jupyter kernel. Variables, functions ` +
    'and imports persist between calls. Returns stdout, stderr, the value of the last ' +
    'expression and any error with its trace; images come back as images. The working ' +
    'directory is /home/user; files written under output/ are listed.' +
    (key === 'typescript' ? " Type annotations are accepted (Deno's kernel) but not checked." : '')
}

/**
 * A tool that runs code of `language` (python by default; javascript,
 * typescript, js, ts, r, bash, or any installed kernel's) in a sandboxed
 * kernel that keeps its state across calls (one per tool, or per LangGraph
 * thread id): named `execute_<language>` (execute_javascript for js) and
 * described for that language unless `name`/`description` say otherwise.
 * New contexts get `language` (contextOptions may add cwd, internet…).
 * Returns [content, artifact]: content is text (stdout, stderr, the value,
 * the error with its traceback), plus image blocks for plots; the artifact
 * is the whole Execution. Errors come back to the model, never thrown.
 */
export function executeCodeTool({ client, registry, contextOptions, perThread, language = 'python',
  name, description, timeout, maxChars = DEFAULT_MAX_CHARS } = {}) {
  const [key, title] = LANGUAGES[String(language).toLowerCase()] ?? [language, language]
  if (!registry) {
    const options = { ...contextOptions }
    if (options.template === undefined && options.snapshot === undefined) options.language ??= language
    registry = new ContextRegistry({ client, contextOptions: options, perThread })
  }
  return sandgateTool(registry, {
    name: name ?? `execute_${key}`,
    description: description ?? codeDescription(key, title),
    schema: z.object({ code: z.string().describe(`${title} code to run`) }),
  }, ({ code }, context) => registry.client.execute(code, { context, timeout }), (ex, id, note) => {
    // The link goes to the model too, so that it can hand the session to a person.
    const notebookUrl = registry.links.get(id)
    const text = note + formatExecution(ex, { maxChars }) +
      (notebookUrl ? `\nOpen this session in JupyterLab: ${notebookUrl}` : '')
    const images = imagesOf(ex)
    const content = images.length ? [{ type: 'text', text }, ...images] : text
    return [content, { contextId: id, ...(notebookUrl && { notebookUrl }), ...ex.toJSON(),
      images: images.map(({ mimeType, data }) => ({ mimeType, data })) }]
  })
}

/**
 * The `execute_python` tool: executeCodeTool for Python (a `language`, or
 * contextOptions' language, for another kernel keeps the name).
 */
export function executePythonTool({ name = 'execute_python', ...opts } = {}) {
  return executeCodeTool({ ...opts, language: opts.language ?? 'python', name,
    description: opts.description ?? codeDescription('python') })
}

/**
 * The `run_command` tool: a shell command (/bin/sh -c) in the same kind of
 * sandbox, in its workspace. A non-zero exit is reported, not thrown.
 */
export function runCommandTool({ client, registry, contextOptions, perThread,
  name = 'run_command', description, timeout, maxChars = DEFAULT_MAX_CHARS } = {}) {
  registry ??= new ContextRegistry({ client, contextOptions, perThread })
  return sandgateTool(registry, {
    name,
    description: description ?? 'Runs a shell command (/bin/sh -c) in a persistent sandbox, ' +
      'in its working directory /home/user. Returns stdout, stderr and the exit code.',
    schema: z.object({ command: z.string().describe('the shell command') }),
  }, ({ command }, context) => registry.client.runCommand(command, { context, timeout }), (r, id, note) => {
    let text = section('stdout', r.stdout) + section('stderr', r.stderr)
    if (r.error) text += `error: ${r.error.name}: ${r.error.value}\n`
    text += `exit code: ${r.exitCode}`
    return [truncate(note + text, maxChars), { contextId: id, ...r }]
  })
}

/** Both tools, sharing their sandboxes: [execute_python, run_command]. */
export function sandgateTools({ client, contextOptions, perThread, timeout, maxChars } = {}) {
  const registry = new ContextRegistry({ client, contextOptions, perThread })
  return [executePythonTool({ registry, timeout, maxChars }),
    runCommandTool({ registry, timeout, maxChars })]
}
