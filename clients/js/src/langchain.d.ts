import type { DynamicStructuredTool } from '@langchain/core/tools'
import type { Sandgate, Context, ContextOptions, Execution, CommandResult, Chart } from './index.js'

/** The contexts tools run in: one per LangGraph thread id (or one without). */
export class ContextRegistry {
  constructor(opts: {
    client: Sandgate
    /** Options for each new context (language, cwd, internet, snapshot, template). */
    contextOptions?: ContextOptions
    /** One context per runtime.configurable.thread_id (default true). */
    perThread?: boolean
  })
  client: Sandgate
  contexts: Map<string, Promise<string>>
  /** Context id → its notebookUrl, for a server started with --notebook-url. */
  links: Map<string, string>
  get(runtime?: { configurable?: { thread_id?: unknown } }): Promise<string>
  forget(runtime: unknown, id: string): Promise<void>
  /** Removes every context these tools made. */
  close(): Promise<void>
}

export interface ToolOptions {
  client?: Sandgate
  /** Share sandboxes between tools (then `client` is the registry's). */
  registry?: ContextRegistry
  /** As Sandgate#createContext's: { template: 'pd' } starts each conversation there. */
  contextOptions?: ContextOptions
  perThread?: boolean
  name?: string
  description?: string
  /** Seconds per call. */
  timeout?: number
  /** Characters of text content kept (default 20000); the rest is cut with a marker. */
  maxChars?: number
}

export interface PythonArtifact {
  contextId?: string
  /** The JupyterLab that opens the context's kernel (a server with --notebook-url). */
  notebookUrl?: string
  stdout?: string
  stderr?: string
  results?: Execution['results']
  error?: { name: string; value: string; traceback?: string; status?: number } | null
  executionCount?: number | null
  artifacts?: Execution['artifacts']
  images?: { mimeType: string; data: string }[]
}

export type SandgateTool = DynamicStructuredTool & { registry: ContextRegistry }

export interface CodeToolOptions extends ToolOptions {
  /**
   * The kernel's language: python (default), javascript, typescript (js, ts),
   * r, bash, or any installed kernel's. New contexts get it; the tool is named
   * `execute_<language>` (execute_javascript for js) and described for it.
   */
  language?: string
}

/** `execute_<language>`: stateful code of that language; content text + image blocks, artifact the execution. */
export function executeCodeTool(opts: CodeToolOptions): SandgateTool
/** `execute_python`: stateful Python; content text + image blocks, artifact the execution. */
export function executePythonTool(opts: CodeToolOptions): SandgateTool
/** `run_command`: a shell command in the sandbox; content stdout, stderr, exit code. */
export function runCommandTool(opts: ToolOptions): SandgateTool
/** Both, sharing one registry: [execute_python, run_command]. */
export function sandgateTools(opts: Omit<ToolOptions, 'registry' | 'name' | 'description'>): [SandgateTool, SandgateTool]

export function formatExecution(ex: Execution, opts?: { maxChars?: number }): string
/**
 * A figure's chart data as the tool's text gives it: `[chart: TYPE "TITLE"; x: LABEL (UNIT); y: …]`,
 * then a line per series, bar, slice or box (a superchart's charts indented).
 */
export function formatChart(chart: Chart, indent?: string): string
export function truncate(text: string, max: number): string
export function stripAnsi(s: string): string
