import { BaseSandbox } from 'deepagents'
import type { ExecuteResponse, FileDownloadResponse, FileUploadResponse } from 'deepagents'
import type { Sandgate, ContextRef } from './index.js'

export interface SandgateSandboxOptions {
  client: Sandgate
  /** Seconds per command. */
  timeout?: number
  /** Characters of a command's output kept (default: all that sandgate keeps, its --max-output). */
  maxOutput?: number | null
}

/**
 * A Deep Agents sandbox backend on one sandgate context (workspace /home/user).
 * File paths are absolute paths inside the sandbox; a relative one is 'invalid_path'.
 */
export class SandgateSandbox extends BaseSandbox {
  constructor(opts: SandgateSandboxOptions & { context: ContextRef; owned?: boolean })
  /** A backend on a new context; close() removes it. */
  static create(opts: SandgateSandboxOptions & { language?: string; cwd?: string; internet?: boolean }): Promise<SandgateSandbox>
  readonly id: string
  client: Sandgate
  contextId: string
  /** A shell command; `options.timeout` (seconds) overrides the backend's. */
  execute(command: string, options?: { timeout?: number }): Promise<ExecuteResponse>
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>
  close(): Promise<void>
}
