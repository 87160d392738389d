// A Deep Agents (npm `deepagents`, 1.9.0 or later) sandbox backend on one
// sandgate context: `execute` runs a shell command in the context's sandbox;
// uploadFiles/downloadFiles move bytes through sandgate's files API anywhere
// in the sandbox (streamed, never through a command line). ls, read, write,
// edit, grep and glob come from deepagents' BaseSandbox, built on these.
//
// The file contract is Deep Agents' (FileOperationError): paths are absolute
// paths inside the sandbox (/home/user/..., /tmp/...); anything else is
// 'invalid_path', answered before any request. Failures are the protocol's
// strings ('file_not_found', 'is_directory', 'permission_denied',
// 'invalid_path'), one per file, never thrown.
import { BaseSandbox } from 'deepagents'
import { ForbiddenError, InvalidRequestError, NotFoundError, SandgateError } from './index.js'

const MARKER = '[sandgate: output limit of '

/** Deep Agents' contract: an absolute path, without NUL. */
function validPath(path) {
  return typeof path === 'string' && path.startsWith('/') && !path.includes('\0')
}

// sandgate's codes (docs/api.md) as Deep Agents' FileOperationError strings
const CODES = {
  not_found: 'file_not_found',
  is_directory: 'is_directory',
  permission_denied: 'permission_denied',
  not_regular: 'permission_denied',
  invalid_path: 'invalid_path',
}

/**
 * The protocol's string for a files request's failure (sandgate's message
 * for what the protocol has no string for: a full /tmp, say).
 */
function fileError(e, upload) {
  if (e instanceof SandgateError && e.status === 0) throw e // no server: not a file's fault
  if (e?.code === 'not_directory') return upload ? 'invalid_path' : 'file_not_found' // a file as a parent
  if (CODES[e?.code]) return CODES[e.code]
  if (e instanceof NotFoundError) return 'file_not_found'
  if (e instanceof ForbiddenError) return 'permission_denied'
  if (e instanceof InvalidRequestError) return 'invalid_path'
  return `${e?.name ?? 'Error'}: ${e?.message ?? e}`
}

export class SandgateSandbox extends BaseSandbox {
  /**
   * A backend on an existing context. See SandgateSandbox.create for one
   * that makes (and on close() removes) its own.
   * @param {object} opts
   * @param {import('./index.js').Sandgate} opts.client
   * @param {string|{id: string}} opts.context
   * @param {number} [opts.timeout]    seconds per command (sandgate's default otherwise)
   * @param {number} [opts.maxOutput]  characters of a command's output kept (default:
   *   all that sandgate keeps, its --max-output)
   */
  constructor({ client, context, timeout, maxOutput = null, owned = false } = {}) {
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
   * Runs a shell command in the context's sandbox (in its working
   * directory). Output is stdout then stderr; a non-zero exit (or a
   * timeout: 124) is in exitCode, never thrown. `options.timeout` (seconds)
   * overrides the backend's for this command.
   */
  async execute(command, options) {
    let r
    try {
      r = await this.client.runCommand(command,
        { context: this.contextId, timeout: options?.timeout ?? this.timeout })
    } catch (e) {
      return { output: `sandgate: ${e?.name ?? 'Error'}: ${e?.message ?? e}`, exitCode: null, truncated: false }
    }
    let output = r.stdout
    if (r.stderr) output += (output && !output.endsWith('\n') ? '\n' : '') + r.stderr
    if (r.error) output += `${output && !output.endsWith('\n') ? '\n' : ''}${r.error.name}: ${r.error.value}\n`
    let truncated = r.stdout.includes(MARKER) || r.stderr.includes(MARKER)
    if (this.maxOutput != null && output.length > this.maxOutput) {
      output = output.slice(0, this.maxOutput) + `\n[... output truncated at ${this.maxOutput} characters ...]\n`
      truncated = true
    }
    return { output, exitCode: r.exitCode ?? null, truncated }
  }

  // Every path goes through sandgate's files anywhere in the sandbox
  // (docs/api.md, "?path="): streamed both ways, resolved inside the sandbox
  // as its user, the workspace (/home/user) included.
  async uploadFiles(files) {
    const out = []
    for (const [path, content] of files) {
      let error = 'invalid_path'
      if (validPath(path)) {
        try {
          await this.client.writePath(this.contextId, path, content)
          error = null
        } catch (e) {
          error = fileError(e, true)
        }
      }
      out.push({ path, error })
    }
    return out
  }

  async downloadFiles(paths) {
    const out = []
    for (const path of paths) {
      let content = null
      let error = 'invalid_path'
      if (validPath(path)) {
        try {
          content = await this.client.readPath(this.contextId, path)
          error = null
        } catch (e) {
          error = fileError(e, false)
        }
      }
      out.push({ path, content, error })
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
