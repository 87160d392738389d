// sandgate's JavaScript client: contexts (stateful sandboxed kernels),
// streaming executions, shell commands and workspace files over sandgate's
// REST API (docs/api.md). Node 20's global fetch; no dependencies.

const DEFAULT_URL = 'http://127.0.0.1:49999'

/** Any error sandgate answered with (a JSON body {error, message} and a status). */
export class SandgateError extends Error {
  constructor(message, { status = 0, kind = 'unknown', body, code } = {}) {
    super(message)
    this.name = 'SandgateError'
    /** The HTTP status (0 when no answer came). */
    this.status = status
    /** sandgate's error kind: docs/api.md's `error` field. */
    this.kind = kind
    this.body = body
    /**
     * The stable reason of a files request anywhere in the sandbox
     * (`not_found`, `is_directory`, `permission_denied`, `invalid_path`, …), else undefined.
     */
    this.code = code ?? (body && typeof body === 'object' && typeof body.code === 'string' ? body.code : undefined)
  }
}

function errorClass(name, kind, status) {
  const cls = class extends SandgateError {
    constructor(message, opts = {}) {
      super(message, { status, kind, ...opts })
      this.name = name
    }
  }
  Object.defineProperty(cls, 'name', { value: name })
  return cls
}

/** 400: a malformed request, an unknown language, a path with `..` … */
export const InvalidRequestError = errorClass('InvalidRequestError', 'invalid', 400)
/** 401: a missing or wrong API key. */
export const UnauthorizedError = errorClass('UnauthorizedError', 'unauthorized', 401)
/** 403: a file path through a symbolic link or to something not a file or directory. */
export const ForbiddenError = errorClass('ForbiddenError', 'forbidden', 403)
/** 404: unknown context, file or route. */
export const NotFoundError = errorClass('NotFoundError', 'not_found', 404)
/** 405: a method the route does not take. */
export const MethodNotAllowedError = errorClass('MethodNotAllowedError', 'method_not_allowed', 405)
/** 409: a busy context, a full queue, an upload onto a directory … */
export const ConflictError = errorClass('ConflictError', 'conflict', 409)
/** 413: a body, upload or workspace past its limit; too many kernels. */
export const LimitExceededError = errorClass('LimitExceededError', 'limit_exceeded', 413)
/**
 * 429 `quota_exceeded`: the key's tenant is at one of its quotas. `quota`
 * names it (max-contexts, max-live, max-queued, internet) and `limit` is its
 * value; deleting or pausing one of the tenant's contexts makes room (for
 * max-queued: one of its executions ending).
 */
export class QuotaExceededError extends errorClass('QuotaExceededError', 'quota_exceeded', 429) {
  constructor(message, opts = {}) {
    const body = opts.body && typeof opts.body === 'object' ? opts.body : {}
    const quota = typeof body.quota === 'string' ? body.quota : undefined
    super(quota && !message.includes(quota) ? `${message} (quota ${quota}, limit ${body.limit})` : message, opts)
    this.name = 'QuotaExceededError'
    /** The quota reached: 'max-contexts', 'max-live', 'max-queued', 'internet'. */
    this.quota = quota
    /** Its value for this tenant. */
    this.limit = typeof body.limit === 'number' ? body.limit : undefined
  }
}
/**
 * 429 `too_many_requests`: too many failed authentications from this
 * address; sandgate refuses it for a while (--auth-block), even with a right
 * key. Waiting helps. A 429 without sandgate's body (a proxy's) is this too.
 */
export const TooManyRequestsError = errorClass('TooManyRequestsError', 'too_many_requests', 429)
/** 503: a kernel could not start; a pause or resume failed. */
export const UnavailableError = errorClass('UnavailableError', 'unavailable', 503)
/** 504: the privileged launcher did not answer in time. */
export const GatewayTimeoutError = errorClass('GatewayTimeoutError', 'timeout', 504)
/** 507: the disk could not hold a pause's checkpoint. */
export const InsufficientStorageError = errorClass('InsufficientStorageError', 'insufficient_storage', 507)

const BY_KIND = {
  invalid: InvalidRequestError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  conflict: ConflictError,
  limit_exceeded: LimitExceededError,
  quota_exceeded: QuotaExceededError,
  too_many_requests: TooManyRequestsError,
  unavailable: UnavailableError,
  timeout: GatewayTimeoutError,
  insufficient_storage: InsufficientStorageError,
}
const BY_STATUS = Object.fromEntries(
  Object.values(BY_KIND).filter((cls) => cls !== QuotaExceededError)
    .map((cls) => [new cls('').status, cls]))

/** The error for a non-2xx response (its body already read as text). */
export function errorFromResponse(status, text) {
  let body = null
  try { body = JSON.parse(text) } catch { /* a proxy's HTML page, say */ }
  const kind = body && typeof body.error === 'string' ? body.error : undefined
  const message = (body && typeof body.message === 'string' && body.message) ||
    (text && text.trim().slice(0, 500)) || `HTTP ${status}`
  const cls = (kind && BY_KIND[kind]) || BY_STATUS[status]
  if (cls) return new cls(message, { status, body: body ?? text })
  return new SandgateError(message, { status, kind: kind ?? 'unknown', body: body ?? text })
}

/**
 * One result of an execution: a MIME bundle (the cell's value or a display()),
 * one field per format as the server names it. Besides text, html, png … a
 * matplotlib figure has `chart` (its data: type, title, axes, elements) and a
 * pandas DataFrame `data` ({column: [values]}), as docs/api.md describes them.
 */
export class Result {
  constructor(raw) {
    const { type: _t, is_main_result: main, ...formats } = raw
    /** True for the cell's value, false for display() output. */
    this.isMainResult = !!main
    for (const k of ['text', 'html', 'markdown', 'svg', 'png', 'jpeg', 'pdf', 'latex',
      'json', 'javascript', 'data', 'chart', 'extra']) {
      if (formats[k] !== undefined) this[k] = formats[k]
    }
  }

  /** The MIME formats present, e.g. ['text', 'png']. */
  formats() {
    return Object.keys(this).filter((k) => k !== 'isMainResult' && k !== 'extra')
      .concat(this.extra ? Object.keys(this.extra) : [])
  }
}

/** What one execution produced. */
export class Execution {
  constructor() {
    this.stdout = ''
    this.stderr = ''
    /** @type {Result[]} */
    this.results = []
    /** {name, value, traceback} when the code raised (or sandgate stopped it), else null. */
    this.error = null
    this.executionCount = null
    /** Files the execution wrote under output/: {path, size, mime, url}. */
    this.artifacts = []
  }

  /** The main result's text/plain, if the cell had a value. */
  get text() {
    return this.results.find((r) => r.isMainResult)?.text
  }

  toJSON() {
    return { stdout: this.stdout, stderr: this.stderr, results: this.results,
      error: this.error, executionCount: this.executionCount, artifacts: this.artifacts }
  }
}

function contextId(context, what = 'context') {
  if (context == null) return undefined
  if (typeof context === 'string') return context
  if (typeof context.id === 'string') return context.id
  throw new TypeError(`${what} must be a ${what} id or an object with an id`)
}

/** The id of a snapshot (or a snapshot object). */
const snapshotId = (snapshot) => contextId(snapshot, 'snapshot')

/**
 * A context as the server describes it, with `notebookUrl` beside
 * `notebook_url` (a server started with --notebook-url: the JupyterLab that
 * opens the context's kernel, for a person to take over or watch).
 */
function withLinks(context) {
  if (context && typeof context.notebook_url === 'string') context.notebookUrl = context.notebook_url
  return context
}

/**
 * A workspace path as URL segments: each part percent-encoded, a leading /
 * ignored. `.` and `..` are refused here as sandgate would (400): fetch's
 * URL parser would otherwise resolve them (even as %2e) before sending.
 */
function filePath(path) {
  const parts = String(path ?? '').split('/').filter((p) => p !== '')
  if (parts.some((p) => p === '.' || p === '..')) {
    throw new InvalidRequestError(`a file path must not contain '.' or '..' segments: ${path}`)
  }
  return parts.map(encodeURIComponent).join('/')
}

/** `?path=` for an absolute path in the sandbox; a relative one is refused here. */
function sandboxPath(path) {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0')) {
    throw new InvalidRequestError(`not an absolute path: ${path}`, { code: 'invalid_path' })
  }
  return encodeURIComponent(path).replace(/%2F/g, '/')
}

/** POST /execute's body: `what` ({code} or {command}) and the options set. */
function executeBody(what, { context, language, envVars, timeout, richFormats }) {
  const json = { ...what }
  const id = contextId(context)
  if (id !== undefined) json.context_id = id
  if (language !== undefined) json.language = language
  if (envVars !== undefined) json.env_vars = envVars
  if (timeout !== undefined) json.timeout = timeout
  if (richFormats !== undefined) json.rich_formats = Boolean(richFormats)
  return json
}

/** The client. Methods throw a SandgateError subclass on an HTTP error. */
export class Sandgate {
  /**
   * @param {object} [opts]
   * @param {string} [opts.url]    default: env SANDGATE_URL, else http://127.0.0.1:49999
   * @param {string} [opts.apiKey] the tenant's key (or the admin's token);
   *   default: env SANDGATE_API_KEY
   * @param {string} [opts.token]  the older name of apiKey (env SANDGATE_TOKEN);
   *   apiKey wins when both are given, and either beats the environment
   * @param {number} [opts.requestTimeout] ms for requests other than executions (default 120000)
   * @param {typeof fetch} [opts.fetch]
   */
  constructor({ url, apiKey, token, requestTimeout = 120000, fetch: fetchImpl } = {}) {
    const env = globalThis.process?.env ?? {}
    this.url = String(url ?? env.SANDGATE_URL ?? DEFAULT_URL).replace(/\/+$/, '')
    /** The key sent as `Authorization: Bearer`. */
    this.apiKey = apiKey ?? token ?? env.SANDGATE_API_KEY ?? env.SANDGATE_TOKEN ?? undefined
    this.requestTimeout = requestTimeout
    this._fetch = fetchImpl ?? globalThis.fetch
    if (typeof this._fetch !== 'function') throw new Error('sandgate needs a global fetch (Node 20)')
  }

  /**
   * One request; returns the Response for 2xx, throws the error class of
   * anything else. `signal` aborts it; `timeout` (ms, 0: none) gives up.
   */
  async request(method, path, { json, body, headers = {}, signal, timeout } = {}) {
    const h = { ...headers }
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`
    if (json !== undefined) {
      h['Content-Type'] = 'application/json'
      body = JSON.stringify(json)
    }
    const limit = timeout ?? this.requestTimeout
    const signals = [signal, limit ? AbortSignal.timeout(limit) : null].filter(Boolean)
    let res
    try {
      res = await this._fetch(this.url + path, {
        method, headers: h, body,
        signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
        ...(body && typeof body.getReader === 'function' ? { duplex: 'half' } : {}),
      })
    } catch (e) {
      if (e?.name === 'AbortError' || e?.name === 'TimeoutError') throw e
      throw new SandgateError(`cannot reach sandgate at ${this.url}: ${e?.cause?.message ?? e?.message ?? e}`,
        { status: 0, kind: 'connection' })
    }
    if (!res.ok) throw errorFromResponse(res.status, await res.text().catch(() => ''))
    return res
  }

  /** The older name of apiKey. */
  get token() { return this.apiKey }
  set token(value) { this.apiKey = value }

  async _json(method, path, opts) {
    const res = await this.request(method, path, opts)
    const text = await res.text()
    return text.trim() ? JSON.parse(text) : null
  }

  /** GET /health: {status}, and for an admin's key version, replica and kernel counts. */
  async health() {
    return this._json('GET', '/health')
  }

  // --- contexts -------------------------------------------------------------

  /**
   * A new context: its own sandboxed kernel and workspace. With `snapshot`
   * (a snapshot or its id) it starts with the snapshot's variables and
   * files, and its context's language, cwd, template and network (give none
   * of those). With `template` (a name from listTemplates()) it starts from
   * the template's root, kernel and preload (not with `language`; an
   * unknown name is NotFoundError).
   */
  async createContext({ language, cwd, internet, snapshot, template } = {}) {
    const json = {}
    if (language !== undefined) json.language = language
    if (cwd !== undefined) json.cwd = cwd
    if (internet !== undefined) json.internet = internet
    if (snapshot !== undefined) json.snapshot = snapshotId(snapshot)
    if (template !== undefined) json.template = template
    return withLinks(await this._json('POST', '/contexts', { json }))
  }

  async listContexts() {
    return (await this._json('GET', '/contexts')).map(withLinks)
  }

  async getContext(context) {
    return withLinks(await this._json('GET', `/contexts/${encodeURIComponent(contextId(context))}`))
  }

  /** Removes the context: its kernel, workspace and any checkpoint. */
  async removeContext(context) {
    await this.request('DELETE', `/contexts/${encodeURIComponent(contextId(context))}`)
  }

  /** A fresh kernel on the same workspace (variables lost, files kept). */
  async restartContext(context) {
    await this.request('POST', `/contexts/${encodeURIComponent(contextId(context))}/restart`)
  }

  /** Saves the context to disk and ends its sandbox; using it resumes it. */
  async pauseContext(context) {
    return withLinks(await this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/pause`))
  }

  async resumeContext(context) {
    return withLinks(await this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/resume`))
  }

  // --- templates ------------------------------------------------------------

  /**
   * The server's templates, the same for every tenant: {name, kernelspec,
   * language, root ('host', 'directory' or 'image'), preload, pool_size,
   * pool_ready}. createContext({template: name}) starts a context from one.
   */
  async listTemplates() {
    return this._json('GET', '/templates')
  }

  // --- snapshots, fork, roll-back --------------------------------------------

  /**
   * Saves the context's variables and workspace files: {id, context_id,
   * name?, created, bytes, tenant}. ConflictError while it runs code (or has
   * a network); QuotaExceededError past the server's --max-snapshots.
   */
  async snapshotContext(context, { name } = {}) {
    return this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/snapshots`,
      { json: name !== undefined ? { name } : {} })
  }

  /**
   * A new context with a copy of the context's state. The snapshot it is
   * made from is deleted unless `keepSnapshot` (then its id is `snapshot_id`).
   */
  async forkContext(context, { keepSnapshot = false } = {}) {
    return withLinks(await this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/fork`,
      { json: keepSnapshot ? { keep_snapshot: true } : {} }))
  }

  /**
   * Rolls the context back to a snapshot of itself or of a context it was
   * made from (else InvalidRequestError); resolves to the context.
   */
  async restoreContext(context, snapshot) {
    return withLinks(await this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/restore`,
      { json: { snapshot: snapshotId(snapshot) } }))
  }

  /** The tenant's snapshots; of one context when given. */
  async listSnapshots(context) {
    const id = contextId(context)
    return this._json('GET', id === undefined ? '/snapshots' : `/contexts/${encodeURIComponent(id)}/snapshots`)
  }

  /** One snapshot (NotFoundError when unknown or deleted). */
  async getSnapshot(snapshot) {
    return this._json('GET', `/snapshots/${encodeURIComponent(snapshotId(snapshot))}`)
  }

  /** Deletes a snapshot; contexts made from it keep their state. */
  async deleteSnapshot(snapshot) {
    await this.request('DELETE', `/snapshots/${encodeURIComponent(snapshotId(snapshot))}`)
  }

  // --- executions -----------------------------------------------------------

  /**
   * Runs code, streaming its output to the callbacks as the kernel produces
   * it; resolves to the whole Execution. An exception in the code is not
   * thrown: it is `execution.error`. HTTP errors are thrown.
   */
  async execute(code, { context, language, envVars, timeout, richFormats, onStdout, onStderr,
    onResult, onError, onArtifact, signal } = {}) {
    const json = executeBody({ code }, { context, language, envVars, timeout, richFormats })
    const res = await this.request('POST', '/execute',
      { json, signal, timeout: 0, headers: { Accept: 'application/x-ndjson' } })
    const ex = new Execution()
    for await (const msg of ndjson(res.body)) {
      switch (msg.type) {
        case 'number_of_executions':
          ex.executionCount = msg.execution_count
          break
        case 'stdout':
          ex.stdout += msg.text
          await onStdout?.(msg.text, msg)
          break
        case 'stderr':
          ex.stderr += msg.text
          await onStderr?.(msg.text, msg)
          break
        case 'result': {
          const r = new Result(msg)
          ex.results.push(r)
          await onResult?.(r)
          break
        }
        case 'error':
          // sandgate's own TimeoutError/KernelError follows the kernel's
          // KeyboardInterrupt: the last one says what happened.
          ex.error = { name: msg.name, value: msg.value, traceback: msg.traceback ?? '' }
          await onError?.(ex.error)
          break
        case 'artifact': {
          const a = { path: msg.path, size: msg.size, mime: msg.mime, url: msg.url }
          ex.artifacts.push(a)
          await onArtifact?.(a)
          break
        }
        default: // keepalive, end_of_execution, and types to come
      }
    }
    return ex
  }

  /**
   * Runs a shell command (/bin/sh -c) in the context's sandbox, in its
   * workspace. A non-zero exit is not thrown: see `exitCode`.
   * @returns {Promise<{stdout: string, stderr: string, exitCode: number,
   *   error: object|null, artifacts: object[], durationMs: number}>}
   */
  async runCommand(command, { context, language, envVars, timeout, signal } = {}) {
    const json = executeBody({ command }, { context, language, envVars, timeout })
    const r = await this._json('POST', '/execute',
      { json, signal, timeout: 0, headers: { Accept: 'application/json' } })
    return {
      stdout: r.stdout ?? '', stderr: r.stderr ?? '', exitCode: r.exit_code,
      error: r.error ?? null, artifacts: r.artifacts ?? [], durationMs: r.duration_ms,
    }
  }

  // --- files ----------------------------------------------------------------

  /**
   * Writes a file in the context's workspace (parents created, replaced
   * atomically). `data`: a string (UTF-8), Uint8Array/Buffer, ArrayBuffer,
   * Blob or ReadableStream.
   */
  async uploadFile(context, path, data) {
    return this._json('PUT', `/contexts/${encodeURIComponent(contextId(context))}/files/${filePath(path)}`,
      { body: data, headers: { 'Content-Type': 'application/octet-stream' }, timeout: 0 })
  }

  /** A file's bytes. */
  async downloadFile(context, path) {
    const res = await this.request('GET',
      `/contexts/${encodeURIComponent(contextId(context))}/files/${filePath(path)}`, { timeout: 0 })
    return new Uint8Array(await res.arrayBuffer())
  }

  /** A file's text (UTF-8). */
  async readFile(context, path) {
    return new TextDecoder().decode(await this.downloadFile(context, path))
  }

  /** A directory's entries: [{name, path, type, size, modified}]. */
  async listFiles(context, path = '') {
    const p = filePath(path)
    const r = await this._json('GET',
      `/contexts/${encodeURIComponent(contextId(context))}/files${p ? '/' + p : ''}`)
    return r.entries
  }

  /** Removes a file, or a directory with everything in it. */
  async deleteFile(context, path) {
    await this.request('DELETE',
      `/contexts/${encodeURIComponent(contextId(context))}/files/${filePath(path)}`)
  }

  // --- files anywhere in the sandbox (absolute paths) -------------------------
  // Each path is absolute and resolved inside the context's sandbox, as its
  // user (/tmp/…, /home/user/…, /etc/…); a relative one throws
  // InvalidRequestError (code 'invalid_path') before any request. Failures
  // throw the error's class with `code`: not_found (NotFoundError),
  // is_directory, not_directory, exists, cross_device (ConflictError),
  // permission_denied, not_regular (ForbiddenError), too_large, no_space
  // (LimitExceededError). Entries: {name, path, type, size, mode,
  // permissions, owner, group, modified, symlink_target?}.

  _anywhere(context, path, query = '') {
    return `/contexts/${encodeURIComponent(contextId(context))}/files?path=${sandboxPath(path)}${query}`
  }

  /** Writes a file anywhere in the sandbox (parents created, replaced atomically); its entry. */
  async writePath(context, path, data) {
    return this._json('PUT', this._anywhere(context, path),
      { body: data, headers: { 'Content-Type': 'application/octet-stream' }, timeout: 0 })
  }

  /** A file's bytes from anywhere in the sandbox; a directory throws ConflictError (code is_directory). */
  async readPath(context, path) {
    const res = await this.request('GET', this._anywhere(context, path), { timeout: 0 })
    const bytes = new Uint8Array(await res.arrayBuffer())
    if ((res.headers.get('content-type') ?? '').startsWith('application/json')) {
      let doc = null
      try { doc = JSON.parse(new TextDecoder().decode(bytes)) } catch { /* a JSON file's bytes */ }
      if (doc && doc.path === path && Array.isArray(doc.entries)) {
        throw new ConflictError(`${path} is a directory`, { code: 'is_directory' })
      }
    }
    return bytes
  }

  /** A path's entry (a symlink is described, not followed). */
  async statPath(context, path) {
    return this._json('GET', this._anywhere(context, path, '&stat=1'))
  }

  /** A directory's entries, `depth` levels (1 to 64), sorted by path. */
  async listPath(context, path, { depth = 1 } = {}) {
    const r = await this._json('GET', this._anywhere(context, path, `&depth=${Number(depth)}`))
    if (!r || !Array.isArray(r.entries)) {
      throw new ConflictError(`${path} is not a directory`, { code: 'not_directory' })
    }
    return r.entries
  }

  /** Removes a file, a link, or a directory with everything in it. */
  async removePath(context, path) {
    await this.request('DELETE', this._anywhere(context, path))
  }

  /** Creates a directory and its parents (an existing one is fine); its entry. */
  async makeDir(context, path) {
    sandboxPath(path)
    return this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/files/mkdir`,
      { json: { path } })
  }

  /** Renames `from` to `to` (what was there replaced, parents created); the entry at `to`. */
  async movePath(context, from, to) {
    sandboxPath(from)
    sandboxPath(to)
    return this._json('POST', `/contexts/${encodeURIComponent(contextId(context))}/files/move`,
      { json: { from, to } })
  }
}

/** The JSON objects of an NDJSON byte stream, one a line. */
async function* ndjson(body) {
  const decoder = new TextDecoder()
  let buf = ''
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true })
    let nl
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim()
      buf = buf.slice(nl + 1)
      if (line) yield JSON.parse(line)
    }
  }
  buf += decoder.decode()
  if (buf.trim()) yield JSON.parse(buf)
}

export default Sandgate
