// A Deep Agents (npm `deepagents`) sandbox backend on one sandgate context:
// `execute` runs a shell command in the context's sandbox; files go through
// sandgate's files API when they are in the workspace (/home/user) and
// through the shell elsewhere (e.g. /tmp). ls, read, write, edit, grep and
// glob come from deepagents' BaseSandbox, built on these.
import { BaseSandbox } from 'deepagents'
import {
  ConflictError, ForbiddenError, InvalidRequestError, NotFoundError, SandgateError,
} from './index.js'

const WORKSPACE = '/home/user'
const DEFAULT_MAX_OUTPUT = 100000

function shellQuote(s) {
  return "'" + String(s).replace(/'/g, "'\\''") + "'"
}

function fileError(e) {
  if (e instanceof NotFoundError) return 'file_not_found'
  if (e instanceof ForbiddenError) return 'permission_denied'
  if (e instanceof ConflictError) return 'is_directory'
  if (e instanceof InvalidRequestError) return 'invalid_path'
  if (e instanceof SandgateError && e.status === 0) throw e // no server: not a file's fault
  return 'permission_denied'
}

export class SandgateSandbox extends BaseSandbox {
  /**
   * A backend on an existing context. See SandgateSandbox.create for one
   * that makes (and on close() removes) its own.
   * @param {object} opts
   * @param {import('./index.js').Sandgate} opts.client
   * @param {string|{id: string}} opts.context
   * @param {number} [opts.timeout]    seconds per command (sandgate's default otherwise)
   * @param {number} [opts.maxOutput]  characters of a command's output kept
   */
  constructor({ client, context, timeout, maxOutput = DEFAULT_MAX_OUTPUT, owned = false } = {}) {
    super()
    if (!client) throw new TypeError('SandgateSandbox needs { client }')
    const id = typeof context === 'string' ? context : context?.id
    if (!id) throw new TypeError('SandgateSandbox needs { context } (or use SandgateSandbox.create)')
    this.client = client
    this.contextId = id
    this.timeout = timeout
    this.maxOutput = maxOutput
    this.owned = owned
  }

  /** A backend on a new context (options as Sandgate#createContext). */
  static async create({ client, language, cwd, internet, ...opts } = {}) {
    if (!client) throw new TypeError('SandgateSandbox.create needs { client }')
    const ctx = await client.createContext({ language, cwd, internet })
    return new SandgateSandbox({ client, context: ctx.id, owned: true, ...opts })
  }

  /** The context's id. */
  get id() {
    return this.contextId
  }

  /**
   * Runs a shell command in the workspace. Output is stdout then stderr;
   * a non-zero exit (or a timeout: 124) is in exitCode, never thrown.
   */
  async execute(command) {
    let r
    try {
      r = await this.client.runCommand(command, { context: this.contextId, timeout: this.timeout })
    } catch (e) {
      return { output: `sandgate: ${e?.name ?? 'Error'}: ${e?.message ?? e}`, exitCode: null, truncated: false }
    }
    let output = r.stdout
    if (r.stderr) output += (output && !output.endsWith('\n') ? '\n' : '') + r.stderr
    if (r.error) output += `${output && !output.endsWith('\n') ? '\n' : ''}${r.error.name}: ${r.error.value}\n`
    let truncated = false
    if (output.length > this.maxOutput) {
      output = output.slice(0, this.maxOutput) + `\n[... output truncated at ${this.maxOutput} characters ...]\n`
      truncated = true
    }
    return { output, exitCode: r.exitCode ?? null, truncated }
  }

  /** The workspace-relative path, or null for a path outside the workspace. */
  _relative(path) {
    if (!path.startsWith('/')) return path
    if (path === WORKSPACE) return ''
    if (path.startsWith(WORKSPACE + '/')) return path.slice(WORKSPACE.length + 1)
    return null
  }

  async uploadFiles(files) {
    const out = []
    for (const [path, content] of files) {
      const rel = this._relative(path)
      if (rel === '' || path.split('/').includes('..')) {
        out.push({ path, error: 'invalid_path' })
        continue
      }
      try {
        if (rel !== null) {
          await this.client.uploadFile(this.contextId, rel, content)
        } else {
          // Outside the workspace (e.g. /tmp): through the shell, base64 in the command.
          const b64 = Buffer.from(content).toString('base64')
          const dir = path.slice(0, path.lastIndexOf('/')) || '/'
          const r = await this.client.runCommand(
            `mkdir -p ${shellQuote(dir)} && printf %s ${shellQuote(b64)} | base64 -d > ${shellQuote(path)}`,
            { context: this.contextId })
          if (r.exitCode !== 0) {
            out.push({ path, error: /Is a directory/.test(r.stderr) ? 'is_directory' : 'permission_denied' })
            continue
          }
        }
        out.push({ path, error: null })
      } catch (e) {
        out.push({ path, error: fileError(e) })
      }
    }
    return out
  }

  async downloadFiles(paths) {
    const out = []
    for (const path of paths) {
      const rel = this._relative(path)
      if (path.split('/').includes('..')) {
        out.push({ path, content: null, error: 'invalid_path' })
        continue
      }
      try {
        if (rel !== null) {
          // GET on a directory answers its listing, which is no file's
          // content: look the name up in its parent's listing first.
          const parts = rel.split('/').filter(Boolean)
          const name = parts.pop()
          const entries = name === undefined ? [] : await this.client.listFiles(this.contextId, parts.join('/'))
          const entry = name === undefined ? { type: 'dir' } : entries.find((e) => e.name === name)
          if (!entry || entry.type !== 'file') {
            const error = !entry ? 'file_not_found' : entry.type === 'dir' ? 'is_directory' : 'permission_denied'
            out.push({ path, content: null, error })
            continue
          }
          out.push({ path, content: await this.client.downloadFile(this.contextId, rel), error: null })
        } else {
          const q = shellQuote(path)
          const r = await this.client.runCommand(
            `if [ -d ${q} ]; then exit 3; elif [ ! -e ${q} ]; then exit 2; fi; base64 ${q}`,
            { context: this.contextId })
          const error = r.exitCode === 0 ? null
            : { 2: 'file_not_found', 3: 'is_directory' }[r.exitCode] ?? 'permission_denied'
          out.push({ path, content: error ? null : new Uint8Array(Buffer.from(r.stdout, 'base64')), error })
        }
      } catch (e) {
        out.push({ path, content: null, error: fileError(e) })
      }
    }
    return out
  }

  /** Removes the context if this backend created it. */
  async close() {
    if (this.owned) {
      this.owned = false
      await this.client.removeContext(this.contextId)
    }
  }
}
