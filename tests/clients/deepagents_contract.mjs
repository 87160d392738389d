// sandgate/deepagents' SandgateSandbox against Deep Agents' backend contract
// (FileOperationError, BaseSandbox), with whichever `deepagents` the project
// resolves: 1.9.0 (the oldest clients/js claims) or the newest pinned. The
// checks of deepagents_contract.py: files under /tmp and /home/user both ways
// (text, a 100 KiB binary of every byte value, 10 MiB), relative paths, the
// protocol's error strings, 500 KiB of command output, Deep Agents' own file
// methods over /tmp, and a deep agent driven by @langchain/core's fake model
// (no LLM) writing, editing, grepping and running a file in /tmp.
// usage: node deepagents_contract.mjs URL TOKEN — one JSON line per check.
import { createHash, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { Sandgate } from 'sandgate'
import { SandgateSandbox } from 'sandgate/deepagents'
import { fakeModel } from '@langchain/core/testing'
import { AIMessage, HumanMessage } from '@langchain/core/messages'
import { createDeepAgent } from 'deepagents'

const [url, token] = process.argv.slice(2)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const brief = (rs) => rs.map((r) => [r.path, r.error, r.content?.length])
const sha256 = (b) => createHash('sha256').update(b).digest('hex')
const same = (a, b) => a != null && Buffer.from(a).equals(Buffer.from(b))
const enc = (s) => new TextEncoder().encode(s)

// The deepagents this project resolves (an npm alias keeps its real name).
const require = createRequire(import.meta.url)
const deepagentsDir = require.resolve('deepagents').replace(/\/dist\/.*$/, '')
const VERSION = JSON.parse(readFileSync(`${deepagentsDir}/package.json`, 'utf8')).version
console.error(`deepagents ${VERSION}`)

async function contract(box) {
  const text = enc('héllo\nwörld\n')
  const binary = new Uint8Array(256 * 400).map((_, i) => i % 256) // 100 KiB, every byte value
  const big = randomBytes(10 << 20) // 10 MiB
  for (const base of ['/tmp', '/home/user']) {
    const paths = ['text.txt', 'bin.dat', 'big.dat'].map((n) => `${base}/dc/${n}`)
    const up = await box.uploadFiles([[paths[0], text], [paths[1], binary], [paths[2], big]])
    check(up.every((u, i) => u.error === null && u.path === paths[i]),
      `uploadFiles under ${base}: text, a 100 KiB binary, 10 MiB`, up)
    const dn = await box.downloadFiles(paths)
    check(dn.every((d, i) => d.error === null && d.path === paths[i]),
      `downloadFiles under ${base}: each without error`, brief(dn))
    check(same(dn[0].content, text), `${base}: the text comes back as it went`, brief(dn.slice(0, 1)))
    check(same(dn[1].content, binary), `${base}: the 100 KiB binary comes back intact`, brief(dn.slice(1, 2)))
    check(same(dn[2].content, big), `${base}: the 10 MiB file comes back intact`, brief(dn.slice(2)))
    const r = await box.execute(`sha256sum ${base}/dc/big.dat ${base}/dc/bin.dat`)
    check(r.exitCode === 0 && r.output.includes(sha256(big)) && r.output.includes(sha256(binary)),
      `${base}: the sandbox's own sha256sum agrees (the files are in the sandbox)`, r)
  }

  // Relative paths: the protocol's invalid_path, and nothing written.
  let up = await box.uploadFiles([['rel.txt', enc('x')], ['tmp/rel.txt', enc('x')],
    ['./rel.txt', enc('x')], ['', enc('x')]])
  check(up.every((u) => u.error === 'invalid_path'), 'uploadFiles: a relative path is invalid_path', up)
  let dn = await box.downloadFiles(['dc/text.txt', 'tmp/dc/text.txt', './dc/text.txt', ''])
  check(dn.every((d) => d.error === 'invalid_path' && d.content === null),
    'downloadFiles: a relative path is invalid_path (even one naming a file)', brief(dn))
  let r = await box.execute('ls /home/user/rel.txt /home/user/tmp/rel.txt 2>&1; true')
  check(r.output.split('No such file').length === 3, 'and nothing was written for them', r.output)

  // The protocol's error strings.
  dn = await box.downloadFiles(['/tmp/nope', '/home/user/nope', '/tmp/nodir/x'])
  check(dn.every((d) => d.error === 'file_not_found'), 'a missing file is file_not_found', brief(dn))
  dn = await box.downloadFiles(['/tmp', '/tmp/dc', '/home/user/dc', '/home/user'])
  check(dn.every((d) => d.error === 'is_directory'), 'downloading a directory is is_directory', brief(dn))
  up = await box.uploadFiles([['/tmp/dc', enc('x')], ['/home/user/dc', enc('x')]])
  check(up.every((u) => u.error === 'is_directory'), 'uploading onto a directory is is_directory', up)
  r = await box.execute('echo secret > /tmp/locked && chmod 000 /tmp/locked && ' +
    'echo secret > /home/user/locked && chmod 000 /home/user/locked && mkdir /tmp/ro && chmod 500 /tmp/ro')
  dn = await box.downloadFiles(['/tmp/locked', '/home/user/locked'])
  check(r.exitCode === 0 && dn.every((d) => d.error === 'permission_denied'),
    'reading a mode 0000 file is permission_denied', [r, brief(dn)])
  up = await box.uploadFiles([['/etc/x', enc('x')], ['/usr/x', enc('x')], ['/tmp/ro/x', enc('x')]])
  check(up.every((u) => u.error === 'permission_denied'),
    'writing /etc/x, /usr/x or into a mode 0500 directory is permission_denied', up)
  up = await box.uploadFiles([['/tmp/ok.txt', enc('fine')], ['rel', enc('x')], ['/etc/x', enc('x')]])
  check(JSON.stringify(up.map((u) => u.error)) === JSON.stringify([null, 'invalid_path', 'permission_denied']),
    'partial success: one answer per file, in order', up)

  // Command output: 500 KiB intact.
  r = await box.execute(`python3 -c 'print("x" * 512000)'`)
  check(r.exitCode === 0 && r.output === 'x'.repeat(512000) + '\n' && !r.truncated,
    'execute: python3 -c printing 500 KiB comes back intact', [r.exitCode, r.output.length, r.truncated])
  r = await box.execute(`python -c 'print("y" * 512000)'`)
  check(r.exitCode === 0 && r.output === 'y'.repeat(512000) + '\n' && !r.truncated,
    'execute: python -c printing 500 KiB comes back intact', [r.exitCode, r.output.length, r.output.slice(0, 200), r.truncated])
  r = await box.execute('echo out; echo err >&2; exit 3')
  check(r.output === 'out\nerr\n' && r.exitCode === 3 && !r.truncated, 'execute: stdout then stderr, the exit code', r)
  r = await box.execute("printf 'a\\0b'")
  check(r.output === 'a\0b' && r.exitCode === 0, 'execute: a NUL byte in the output', r)
}

// The client's files anywhere in the sandbox, which the backend uses.
async function clientAnywhere(box) {
  const { client: c, id: ctx } = box
  const e = await c.writePath(ctx, '/tmp/cl/a.txt', 'anywhere')
  check(e.path === '/tmp/cl/a.txt' && e.type === 'file' && e.size === 8 && e.owner,
    'client: writePath answers the entry', e)
  check(new TextDecoder().decode(await c.readPath(ctx, '/tmp/cl/a.txt')) === 'anywhere', 'client: readPath')
  const st = await c.statPath(ctx, '/tmp/cl')
  check(st.type === 'dir' && typeof st.mode === 'number' && st.permissions, 'client: statPath', st)
  const d = await c.makeDir(ctx, '/tmp/cl/sub/deeper')
  const m = await c.movePath(ctx, '/tmp/cl/a.txt', '/tmp/cl/sub/b.txt')
  const names = (await c.listPath(ctx, '/tmp/cl', { depth: 3 })).map((x) => x.path)
  check(d.type === 'dir' && m.path === '/tmp/cl/sub/b.txt' &&
    JSON.stringify(names) === JSON.stringify(['/tmp/cl/sub', '/tmp/cl/sub/b.txt', '/tmp/cl/sub/deeper']),
  'client: makeDir, movePath, listPath with depth', [d, m, names])
  await c.removePath(ctx, '/tmp/cl')
  const cases = [
    [() => c.readPath(ctx, '/tmp/cl/sub/b.txt'), 'NotFoundError', 'not_found', 'a missing path: NotFoundError, code not_found'],
    [() => c.readPath(ctx, 'tmp/x'), 'InvalidRequestError', 'invalid_path', 'a relative path: InvalidRequestError, code invalid_path, before any request'],
    [() => c.readPath(ctx, '/tmp'), 'ConflictError', 'is_directory', 'readPath of a directory: ConflictError, code is_directory'],
    [() => c.makeDir(ctx, '/tmp/dc/text.txt'), 'ConflictError', 'exists', 'makeDir onto a file: ConflictError, code exists'],
  ]
  for (const [call, cls, code, name] of cases) {
    const got = await Promise.resolve().then(call).then(() => null, (x) => x)
    check(got?.name === cls && got?.code === code, `client: ${name}`, `${got?.name} ${got?.code} ${got?.message}`)
  }
}

// Deep Agents' own BaseSandbox methods (built on execute and the file transfers), over /tmp.
async function ownMethods(box) {
  let w = await box.write('/tmp/own/notes.txt', 'alpha\nbeta\ngamma beta\n')
  check(!w.error, 'write (BaseSandbox) a file in /tmp', w)
  let e = await box.edit('/tmp/own/notes.txt', 'alpha', 'delta')
  check(!e.error && e.occurrences === 1, 'edit it', e)
  e = await box.edit('/tmp/own/notes.txt', 'beta', 'BETA', true)
  check(!e.error && e.occurrences === 2, 'edit with replaceAll', e)
  const r = await box.read('/tmp/own/notes.txt')
  const content = typeof r === 'string' ? r : r.content ?? r.error
  check(/delta/.test(content) && /gamma BETA/.test(content) && !/alpha/.test(content), 'read it back', r)
  const dn = await box.downloadFiles(['/tmp/own/notes.txt'])
  check(new TextDecoder().decode(dn[0].content ?? new Uint8Array()) === 'delta\nBETA\ngamma BETA\n',
    'the edits are in the file', brief(dn))
  const ls = await box.ls('/tmp/own')
  check(ls.files?.some((f) => f.path === '/tmp/own/notes.txt'), 'ls', ls)
  const g = await box.grep('gamma', '/tmp/own')
  check(g.matches?.length === 1 && g.matches[0].path === '/tmp/own/notes.txt' && g.matches[0].line === 3 &&
    /gamma/.test(g.matches[0].text), 'grep: path, line, text', g)
  const gl = await box.glob('*.txt', '/tmp/own')
  check(gl.files?.some((f) => f.path === 'notes.txt'), 'glob', gl)
  const raw = await box.readRaw('/tmp/own/notes.txt')
  check(/gamma BETA/.test(JSON.stringify(raw.data?.content ?? '')), 'readRaw', raw)
  if (typeof box.delete === 'function') {
    const d = await box.delete('/tmp/own/notes.txt')
    check(!d.error && (await box.downloadFiles(['/tmp/own/notes.txt']))[0].error === 'file_not_found',
      'delete', d)
  }
}

// A deep agent, its model a script of tool calls, over /tmp.
async function agent(box) {
  const model = fakeModel()
    .respondWithTools([{ name: 'write_file', args: { file_path: '/tmp/agent/hello.py',
      content: "def greet():\n    return 'hello from sandgate'\nprint(greet())\n" } }])
    .respondWithTools([{ name: 'edit_file', args: { file_path: '/tmp/agent/hello.py',
      old_string: 'hello from', new_string: 'edited in' } }])
    // the rest at once (deepagents 1.9.0 summarizes a conversation of 16
    // messages, which would take one of the scripted answers)
    .respondWithTools([
      { name: 'grep', args: { pattern: 'greet', path: '/tmp/agent', output_mode: 'content' } },
      { name: 'execute', args: { command: 'python /tmp/agent/hello.py' } },
      { name: 'read_file', args: { file_path: '/tmp/agent/hello.py' } },
      { name: 'ls', args: { path: '/tmp/agent' } },
      { name: 'glob', args: { pattern: '*.py', path: '/tmp/agent' } }])
    .respond(new AIMessage('done'))
  const res = await createDeepAgent({ model, backend: box })
    .invoke({ messages: [new HumanMessage('write, edit, grep and run a file in /tmp')] })
  const tm = Object.fromEntries(res.messages.filter((m) => m.type === 'tool' || m._getType?.() === 'tool')
    .map((m) => [m.name, typeof m.content === 'string' ? m.content : JSON.stringify(m.content)]))
  check(/\/tmp\/agent\/hello.py/.test(tm.write_file ?? '') && !/rror/.test(tm.write_file ?? 'Error'),
    'agent: write_file in /tmp', tm.write_file)
  check(/1/.test(tm.edit_file ?? '') && !/rror/.test(tm.edit_file ?? 'Error'), 'agent: edit_file', tm.edit_file)
  check(/greet\(\)/.test(tm.grep ?? '') && /\/tmp\/agent\/hello.py/.test(tm.grep ?? ''), 'agent: grep', tm.grep)
  check(/edited in sandgate/.test(tm.execute ?? ''), 'agent: execute runs the edited file', tm.execute)
  check(/edited in sandgate/.test(tm.read_file ?? ''), 'agent: read_file', tm.read_file)
  check(/hello.py/.test(tm.ls ?? '') && /hello.py/.test(tm.glob ?? ''), 'agent: ls and glob', [tm.ls, tm.glob])
  check(res.messages.at(-1).content === 'done', 'agent: the loop ends with the model\'s answer', res.messages.at(-1))
  const dn = await box.downloadFiles(['/tmp/agent/hello.py'])
  check(/edited in sandgate/.test(new TextDecoder().decode(dn[0].content ?? new Uint8Array())),
    'agent: the file is in the sandbox\'s /tmp', brief(dn))
}

const client = new Sandgate({ url, apiKey: token })
const box = await SandgateSandbox.create({ client })
for (const part of [contract, clientAnywhere, ownMethods, agent]) {
  try {
    await part(box)
  } catch (e) {
    check(false, `${part.name} ran to its end`, `${e?.stack || e}`)
  }
}
await box.close()
check(!(await client.listContexts()).some((c) => c.id === box.id), 'close() removes the context')
