/** Any error sandgate answered with: its HTTP status and error kind (docs/api.md). */
export class SandgateError extends Error {
  constructor(message: string, opts?: { status?: number; kind?: string; body?: unknown; code?: string })
  /** The HTTP status; 0 when sandgate could not be reached. */
  status: number
  /** sandgate's `error` field: invalid, unauthorized, not_found, conflict … ('connection' when unreachable). */
  kind: string
  /** The response body, parsed when it was JSON. */
  body: unknown
  /**
   * A files request anywhere in the sandbox: the stable reason (not_found, is_directory,
   * not_directory, permission_denied, not_regular, invalid_path, exists, cross_device,
   * too_large, no_space, unavailable); undefined otherwise.
   */
  code?: string
}
/** 400 `invalid` */
export class InvalidRequestError extends SandgateError {}
/** 401 `unauthorized` */
export class UnauthorizedError extends SandgateError {}
/** 403 `forbidden` */
export class ForbiddenError extends SandgateError {}
/** 404 `not_found` */
export class NotFoundError extends SandgateError {}
/** 405 `method_not_allowed` */
export class MethodNotAllowedError extends SandgateError {}
/** 409 `conflict` */
export class ConflictError extends SandgateError {}
/** 413 `limit_exceeded` */
export class LimitExceededError extends SandgateError {}
/** 429 `quota_exceeded`: the key's tenant is at one of its quotas. */
export class QuotaExceededError extends SandgateError {
  /** The quota reached: 'max-contexts', 'max-live', 'max-queued', 'internet'. */
  quota: string | undefined
  /** Its value for this tenant. */
  limit: number | undefined
}
/** 429 `too_many_requests`: too many failed authentications from this address. */
export class TooManyRequestsError extends SandgateError {}
/** 503 `unavailable` */
export class UnavailableError extends SandgateError {}
/** 504 `timeout` */
export class GatewayTimeoutError extends SandgateError {}
/** 507 `insufficient_storage` */
export class InsufficientStorageError extends SandgateError {}

/** The error class for a non-2xx response and its body text. */
export function errorFromResponse(status: number, text: string): SandgateError

export type ContextState = 'starting' | 'running' | 'pausing' | 'paused' | 'resuming' | 'dead'

export interface Context {
  id: string
  language: string
  cwd: string
  state: ContextState
  internet: boolean
  checkpoint_bytes?: number
  /** The context it was made from (a snapshot's or a fork's). */
  parent?: string
  /** The template it was made from (its own, or its snapshot's context's). */
  template?: string
  /**
   * A server started with --notebook-url: the JupyterLab that opens this
   * context's kernel, to hand the session to a person. notebookUrl is the same.
   */
  notebook_url?: string
  notebookUrl?: string
}

/** Sandgate#createContext's options. */
export interface ContextOptions {
  /** python (default), javascript, typescript (js, ts), r, bash, or any installed kernel's language. Not with `template`. */
  language?: string
  cwd?: string
  internet?: boolean
  /** Start with the snapshot's state (give no other option). */
  snapshot?: SnapshotRef
  /** Start from a server's template (Sandgate#listTemplates); not with `language`. */
  template?: string
}

/** A template the server was started with (--template), the same for every tenant. */
export interface Template {
  name: string
  kernelspec: string
  language: string
  /** Where its root file system comes from: the host's, a directory, an OCI image. */
  root: 'host' | 'directory' | 'image'
  /** Whether code runs in its kernels before the tenant's. */
  preload: boolean
  /** Warm kernels kept for it (--pool-size NAME=N), and how many are ready now. */
  pool_size: number
  pool_ready: number
  /** Its own snapshot, taken once after the preload ran (0: none): a start with its pool empty restores it. */
  snapshot_bytes: number
}

/** A context, or its id. */
export type ContextRef = string | { id: string }

/** A context's saved variables and workspace files. */
export interface Snapshot {
  id: string
  /** The context it was taken of. */
  context_id: string
  name?: string
  /** ISO 8601 */
  created: string
  /** On disk: the memory image and the workspace's data. */
  bytes: number
  tenant: string
}

/** A snapshot, or its id. */
export type SnapshotRef = string | { id: string }

export interface ExecutionError {
  name: string
  value: string
  /** Lines joined by "\n" (with the kernel's ANSI colours). */
  traceback: string
}

export interface Artifact {
  /** Workspace-relative, under output/. */
  path: string
  size: number
  mime: string
  /** Download it with GET (or Sandgate#downloadFile with `path`). */
  url: string
}

/** A value a chart carries: a number, or a string for what JSON has no number for (dates…), null for NaN. */
export type ChartValue = number | string | null

/** A line or scatter chart's series: its label ('' when it has none) and its [x, y] points. */
export interface PointData {
  label: string
  points: [ChartValue, ChartValue][]
}

/** One bar: its tick label, its series' label (group; '' when none) and its height. */
export interface BarData {
  label: string
  group: string
  value: number | null
}

/** One slice of a pie: its label, its angle in degrees and its radius. */
export interface PieData {
  label: string
  angle: number
  radius: number
}

/** One box of a box plot, by its tick label. */
export interface BoxAndWhiskerData {
  label: string
  min: number
  first_quartile: number
  median: number | null
  third_quartile: number
  max: number
  outliers: number[]
}

/** A chart drawn on axes: their labels (with their unit: "Time (s)"), and that unit ("s"), else null; a missing title or label is null. */
export interface AxesChart {
  title: string | null
  x_label: string | null
  y_label: string | null
  x_unit: string | null
  y_unit: string | null
}

/** Ticks and scale ('linear', 'log', …) of a line or scatter chart's axes. */
export interface TickedChart extends AxesChart {
  x_ticks: ChartValue[]
  x_tick_labels: string[]
  x_scale: string
  y_ticks: ChartValue[]
  y_tick_labels: string[]
  y_scale: string
}

export interface LineChart extends TickedChart {
  type: 'line'
  elements: PointData[]
}

export interface ScatterChart extends TickedChart {
  type: 'scatter'
  elements: PointData[]
}

export interface BarChart extends AxesChart {
  type: 'bar'
  elements: BarData[]
}

export interface PieChart {
  type: 'pie'
  title: string | null
  elements: PieData[]
}

export interface BoxAndWhiskerChart extends AxesChart {
  type: 'box_and_whisker'
  elements: BoxAndWhiskerData[]
}

/** A figure of several charted axes: its suptitle and one chart per axes. */
export interface SuperChart {
  type: 'superchart'
  title: string | null
  elements: Exclude<Chart, SuperChart>[]
}

/** Axes whose artists are of no one chart type (mixed, images, shapes): only the title. */
export interface UnknownChart {
  type: 'unknown'
  title: string | null
  elements: unknown[]
}

/** A matplotlib figure's data (e2b/chart, docs/api.md): narrow it by `type`. */
export type Chart =
  | LineChart
  | ScatterChart
  | BarChart
  | PieChart
  | BoxAndWhiskerChart
  | SuperChart
  | UnknownChart

/** One MIME bundle: the cell's value (isMainResult) or a display() output. */
export class Result {
  isMainResult: boolean
  text?: string
  html?: string
  markdown?: string
  svg?: string
  /** base64 */
  png?: string
  /** base64 */
  jpeg?: string
  pdf?: string
  latex?: string
  json?: unknown
  javascript?: string
  /** A pandas DataFrame's columns (e2b/data): {column: [values]}, NaN and infinities as null. */
  data?: Record<string, unknown[]>
  /** A matplotlib figure's data (e2b/chart), beside its png. */
  chart?: Chart
  /** Other MIME types, by type. */
  extra?: Record<string, unknown>
  formats(): string[]
}

export class Execution {
  stdout: string
  stderr: string
  results: Result[]
  error: ExecutionError | null
  executionCount: number | null
  artifacts: Artifact[]
  /** The main result's text/plain. */
  readonly text: string | undefined
  toJSON(): object
}

export interface OutputMessage {
  type: 'stdout' | 'stderr'
  text: string
  timestamp: string
}

export interface ExecuteOptions {
  /** Run in this context; without it, the default context of `language`. */
  context?: ContextRef
  /** python (default), javascript, typescript (js, ts), r, bash, or any installed kernel's language. Not with `context`. */
  language?: string
  /** Environment variables for this execution only. */
  envVars?: Record<string, string>
  /** Seconds (sandgate's --exec-timeout by default). */
  timeout?: number
  /** Whether results carry `chart` and `data` (default: the server's --rich-formats, on unless turned off). */
  richFormats?: boolean
  onStdout?: (text: string, msg: OutputMessage) => unknown
  onStderr?: (text: string, msg: OutputMessage) => unknown
  onResult?: (result: Result) => unknown
  onError?: (error: ExecutionError) => unknown
  onArtifact?: (artifact: Artifact) => unknown
  signal?: AbortSignal
}

export interface CommandOptions {
  context?: ContextRef
  language?: string
  envVars?: Record<string, string>
  timeout?: number
  signal?: AbortSignal
}

export interface CommandResult {
  stdout: string
  stderr: string
  /** 124 after a timeout; 128 + N when killed by signal N. */
  exitCode: number
  error: { name: string; value: string } | null
  artifacts: Artifact[]
  durationMs: number
}

export interface FileEntry {
  name: string
  path: string
  type: 'file' | 'dir' | 'symlink' | 'other'
  size: number
  modified: string
}

/** A file, directory or link anywhere in the sandbox (statPath, listPath, writePath …). */
export interface SandboxEntry extends FileEntry {
  /** Permission bits (0o644 is 420). */
  mode: number
  /** e.g. 'rw-r--r--' */
  permissions: string
  owner: string
  group: string
  /** A symlink's target (not followed). */
  symlink_target?: string
}

export interface SandgateOptions {
  /** Default: env SANDGATE_URL, else http://127.0.0.1:49999 */
  url?: string
  /** The tenant's key (or the admin's token). Default: env SANDGATE_API_KEY, else SANDGATE_TOKEN */
  apiKey?: string
  /** The older name of apiKey; apiKey wins when both are given. */
  token?: string
  /** Milliseconds for requests other than executions and file transfers (default 120000; 0: none). */
  requestTimeout?: number
  fetch?: typeof fetch
}

export type UploadData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>

export class Sandgate {
  constructor(opts?: SandgateOptions)
  readonly url: string
  apiKey: string | undefined
  /** The older name of apiKey. */
  token: string | undefined
  /** A raw request: the Response for 2xx, else throws the error class. */
  request(method: string, path: string, opts?: {
    json?: unknown; body?: BodyInit; headers?: Record<string, string>; signal?: AbortSignal; timeout?: number
  }): Promise<Response>
  /** `{status}` only, unless the key is an admin's: then version, replica and kernel counts too. */
  health(): Promise<{
    status: 'ok' | 'stopping'
    version?: string
    replica?: string
    replica_tag?: string
    kernels?: Record<'sessions' | 'starting' | 'idle' | 'busy' | 'pool_ready' | 'pool_starting', number>
    [k: string]: unknown
  }>

  /** With `snapshot`, the context starts with its state (give no other option). */
  createContext(opts?: ContextOptions): Promise<Context>
  listContexts(): Promise<Context[]>
  getContext(context: ContextRef): Promise<Context>
  removeContext(context: ContextRef): Promise<void>
  restartContext(context: ContextRef): Promise<void>
  pauseContext(context: ContextRef): Promise<Context>
  resumeContext(context: ContextRef): Promise<Context>

  /** The server's templates (createContext({ template: name }) starts from one). */
  listTemplates(): Promise<Template[]>

  /** Saves the context's variables and workspace files. */
  snapshotContext(context: ContextRef, opts?: { name?: string }): Promise<Snapshot>
  /** A new context with a copy of its state; `snapshot_id` is null unless keepSnapshot. */
  forkContext(context: ContextRef, opts?: { keepSnapshot?: boolean }): Promise<Context & { snapshot_id: string | null }>
  /** Rolls the context back to a snapshot of itself or of a context it was made from. */
  restoreContext(context: ContextRef, snapshot: SnapshotRef): Promise<Context>
  /** The tenant's snapshots; of one context when given. */
  listSnapshots(context?: ContextRef): Promise<Snapshot[]>
  getSnapshot(snapshot: SnapshotRef): Promise<Snapshot>
  deleteSnapshot(snapshot: SnapshotRef): Promise<void>

  /** Streams the output to the callbacks; an exception in the code is `error`, not thrown. */
  execute(code: string, opts?: ExecuteOptions): Promise<Execution>
  /** A shell command in the context's workspace; a non-zero exit is not thrown. */
  runCommand(command: string, opts?: CommandOptions): Promise<CommandResult>

  uploadFile(context: ContextRef, path: string, data: UploadData): Promise<{ path: string; size: number }>
  downloadFile(context: ContextRef, path: string): Promise<Uint8Array>
  readFile(context: ContextRef, path: string): Promise<string>
  listFiles(context: ContextRef, path?: string): Promise<FileEntry[]>
  deleteFile(context: ContextRef, path: string): Promise<void>
  /** Anywhere in the sandbox: `path` absolute (a relative one throws InvalidRequestError, code invalid_path). */
  writePath(context: ContextRef, path: string, data: UploadData): Promise<SandboxEntry>
  /** A file's bytes; a directory throws ConflictError (code is_directory). */
  readPath(context: ContextRef, path: string): Promise<Uint8Array>
  statPath(context: ContextRef, path: string): Promise<SandboxEntry>
  listPath(context: ContextRef, path: string, opts?: { depth?: number }): Promise<SandboxEntry[]>
  removePath(context: ContextRef, path: string): Promise<void>
  makeDir(context: ContextRef, path: string): Promise<SandboxEntry>
  movePath(context: ContextRef, from: string, to: string): Promise<SandboxEntry>
}

export default Sandgate
