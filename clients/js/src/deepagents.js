// A Deep Agents (npm `deepagents`, 1.9.0 or later) sandbox backend on one
// sandgate context: `execute` runs a shell command in the context's sandbox;
// uploadFiles/downloadFiles move bytes through sandgate's files API, never
// through a command line. ls, read, write, edit, grep and glob come from
// deepagents' BaseSandbox, built on these.
//
// The file contract is Deep Agents' (FileOperationError): paths are absolute
// paths inside the sandbox (/home/user/..., /tmp/...); anything else is
// 'invalid_path', answered before any request. Failures are the protocol's
// strings ('file_not_found', 'is_directory', 'permission_denied',
// 'invalid_path'), one per file, never thrown.
import { randomUUID } from 'node:crypto'
import { BaseSandbox } from 'deepagents'
import {
  ConflictError, ForbiddenError, InvalidRequestError, NotFoundError, SandgateError,
} from './index.js'

const WORKSPACE = '/home/user'
// A file outside the workspace passes through the workspace's root on its
// way in or out, as a hidden file of its own per transfer, removed after it.
const STAGING = '.sandgate-transfer-'
const MARKER = '[sandgate: output limit of '

function shellQuote(s) {
  return "'" + String(s).replace(/'/g, "'\\''") + "'"
}

/** Deep Agents' contract: an absolute path, without NUL. */
function validPath(path) {
  return typeof path === 'string' && path.startsWith('/') && !path.includes('\0')
}

/**
 * The workspace-relative path of an absolute path that sandgate's files API
 * takes as it is ('' for the workspace itself), or null for a path elsewhere
 * or one with '.', '..' or '//' in it (resolved inside the sandbox).
 */
function inWorkspace(path) {
  const parts = path.split('/').slice(1)
  if (parts.at(-1) === '') parts.pop()
  if (parts.some((p) => p === '' || p === '.' || p === '..')) return null
  const norm = '/' + parts.join('/')
  if (norm === WORKSPACE) return ''
  if (norm.startsWith(WORKSPACE + '/')) return norm.slice(WORKSPACE.length + 1)
  return null
}

function fileError(e) {
  if (e instanceof NotFoundError) return 'file_not_found'
  if (e instanceof ForbiddenError) return 'permission_denied'
  if (e instanceof ConflictError) return 'is_directory'
  if (e instanceof InvalidRequestError) return 'invalid_path'
  if (e instanceof SandgateError && e.status === 0) throw e // no server: not a file's fault
  if (/permission denied/i.test(e?.message ?? '')) return 'permission_denied'
  return `${e?.name ?? 'Error'}: ${e?.message ?? e}`
}

/** The protocol's string for a failed command's stderr. */
function commandError(stderr) {
  if (/no such file/i.test(stderr)) return 'file_not_found'
  if (/permission denied|read-only|operation not permitted/i.test(stderr)) return 'permission_denied'
  if (/is a directory/i.test(stderr)) return 'is_directory'
  if (/not a directory/i.test(stderr)) return 'invalid_path'
  return stderr.trim().slice(0, 200) || 'failed'
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

  async uploadFiles(files) {
    const out = []
    for (const [path, content] of files) {
      if (!validPath(path)) {
        out.push({ path, error: 'invalid_path' })
        continue
      }
      let error = null
      try {
        const rel = inWorkspace(path)
        if (rel === null) error = await this._uploadElsewhere(path, content)
        else if (rel === '') error = 'is_directory'
        else await this.client.uploadFile(this.contextId, rel, content)
      } catch (e) {
        error = fileError(e)
      }
      out.push({ path, error })
    }
    return out
  }

  async downloadFiles(paths) {
    const out = []
    for (const path of paths) {
      if (!validPath(path)) {
        out.push({ path, content: null, error: 'invalid_path' })
        continue
      }
      let content = null
      let error = null
      try {
        const rel = inWorkspace(path)
        if (rel === null) [content, error] = await this._downloadElsewhere(path)
        else if (rel === '') error = 'is_directory'
        else [content, error] = await this._downloadWorkspace(rel)
      } catch (e) {
        error = fileError(e)
      }
      out.push({ path, content, error })
    }
    return out
  }

  async _downloadWorkspace(rel) {
    // GET on a directory answers its listing, which is no file's content:
    // look the name up in its parent's listing first.
    const parts = rel.split('/')
    const name = parts.pop()
    const entry = (await this.client.listFiles(this.contextId, parts.join('/'))).find((e) => e.name === name)
    if (!entry) return [null, 'file_not_found']
    if (entry.type === 'dir') return [null, 'is_directory']
    if (entry.type !== 'file') return [null, 'permission_denied']
    return [await this.client.downloadFile(this.contextId, rel), null]
  }

  // Outside the workspace (e.g. /tmp), the bytes pass through a file in the
  // workspace (the files API, streamed) and one short command copies them
  // across, inside the sandbox and as its user: the path is resolved there,
  // with that user's permissions.
  async _uploadElsewhere(path, content) {
    const stage = STAGING + randomUUID().replaceAll('-', '')
    await this.client.uploadFile(this.contextId, stage, content)
    const s = shellQuote(`${WORKSPACE}/${stage}`)
    const p = shellQuote(path)
    const r = await this.client.runCommand(
      `if [ -d ${p} ]; then rm -f ${s}; exit 3; fi\n` +
      `mkdir -p -- "$(dirname -- ${p})" && cp -- ${s} ${p}\n` +
      `rc=$?; rm -f -- ${s}; exit $rc`, { context: this.contextId })
    if (r.exitCode === 0) return null
    return r.exitCode === 3 ? 'is_directory' : commandError(r.stderr)
  }

  async _downloadElsewhere(path) {
    const stage = STAGING + randomUUID().replaceAll('-', '')
    const s = shellQuote(`${WORKSPACE}/${stage}`)
    const p = shellQuote(path)
    const r = await this.client.runCommand(
      `if [ -d ${p} ]; then exit 3; elif [ ! -e ${p} ]; then exit 2; ` +
      `elif [ ! -r ${p} ] || [ ! -f ${p} ]; then exit 4; fi\n` +
      `cp -- ${p} ${s} || { rc=$?; rm -f -- ${s}; exit $rc; }`, { context: this.contextId })
    if (r.exitCode !== 0) {
      return [null, { 2: 'file_not_found', 3: 'is_directory', 4: 'permission_denied' }[r.exitCode] ??
        commandError(r.stderr)]
    }
    try {
      return [await this.client.downloadFile(this.contextId, stage), null]
    } finally {
      await this.client.deleteFile(this.contextId, stage).catch(() => {})
    }
  }

  /** Removes the context if this backend created it. */
  async close() {
    if (this.owned) {
      this.owned = false
      await this.client.removeContext(this.contextId)
    }
  }
}
