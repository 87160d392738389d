// The official MCP TypeScript SDK (Streamable HTTP transport) against sandgate.
// usage: node mcp_sdk.mjs URL TOKEN   — prints one JSON line per check: {ok, name, detail}
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

const [url, token] = process.argv.slice(2)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))

async function connect (name) {
  const transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } }
  })
  const client = new Client({ name, version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n')
const run = (client, code, extra = {}, options = {}) =>
  client.callTool({ name: 'execute_python', arguments: { code, ...extra } }, undefined,
    { timeout: 120000, ...options })
const runIn = (client, language, code) =>
  client.callTool({ name: 'execute_code', arguments: { code, language } }, undefined,
    { timeout: 120000 })

try {
  const { client, transport } = await connect('sandgate-test-a')
  check(client.getServerVersion()?.name === 'sandgate', 'initialize: the server is sandgate',
    client.getServerVersion())
  check(/^[0-9a-f-]{36}$/.test(transport.sessionId ?? ''), 'initialize gives an Mcp-Session-Id',
    transport.sessionId)
  check(client.getServerCapabilities()?.tools, 'the server announces tools',
    client.getServerCapabilities())

  const { tools } = await client.listTools()
  const names = tools.map((t) => t.name).sort()
  check(['execute_python', 'list_files', 'read_file', 'restart_kernel', 'write_file']
    .every((n) => names.includes(n)), 'tools/list has the five tools', names)
  const ex = tools.find((t) => t.name === 'execute_python')
  check(ex?.inputSchema?.required?.includes('code') && ex.inputSchema.properties.timeout,
    'execute_python takes code and timeout', ex?.inputSchema)

  const ec = tools.find((t) => t.name === 'execute_code')
  check(JSON.stringify(ec?.inputSchema?.required) === '["code","language"]' &&
    JSON.stringify(ec.inputSchema.properties.language.enum) ===
      '["python","javascript","typescript","r","bash"]',
  'execute_code takes code and one of the installed languages', ec?.inputSchema)

  await client.ping()
  check(true, 'ping answers')

  let r = await run(client, "x = 41\nprint('hello')\nimport sys\nprint('oops', file=sys.stderr)")
  check(!r.isError && text(r).includes('hello\n') && text(r).includes('[stderr]\noops'),
    'execute_python returns stdout and stderr', r)
  r = await run(client, 'x + 1')
  check(!r.isError && text(r) === '42', 'a variable persists across calls', r)

  r = await run(client,
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('sandgate')\nplt.show()")
  const img = r.content.find((c) => c.type === 'image')
  check(img && img.mimeType === 'image/png' &&
    Buffer.from(img.data, 'base64').subarray(1, 4).toString() === 'PNG',
  'a matplotlib plot comes back as a PNG image', r.content.map((c) => c.type))

  r = await run(client, "import numpy as np\nnp.savetxt('output/table.csv', np.arange(6).reshape(2, 3), delimiter=',', fmt='%d')\n" +
    "plt.figure(); plt.bar([1, 2], [3, 4]); plt.savefig('output/bars.png')")
  const res = r.content.find((c) => c.type === 'resource')
  const art = r.content.find((c) => c.type === 'image')
  check(res?.resource?.uri === 'file:///home/user/output/table.csv' &&
    res.resource.text === '0,1,2\n3,4,5\n', 'a file written under output/ comes back as a resource', r.content)
  check(art && Buffer.from(art.data, 'base64').subarray(1, 4).toString() === 'PNG' &&
    text(r).includes('output/bars.png'), 'an image written under output/ comes back as an image',
  r.content.map((c) => c.type))

  r = await run(client, "with open('notes/data.txt', 'w') as f: f.write('written by code\\n')",
    {}) // notes/ does not exist: an exception
  check(r.isError && text(r).includes('FileNotFoundError'), 'a missing directory is a FileNotFoundError', r)
  await run(client, "import os\nos.makedirs('notes', exist_ok=True)\nopen('notes/data.txt', 'w').write('written by code\\n')")
  r = await client.callTool({ name: 'read_file', arguments: { path: 'notes/data.txt' } })
  check(!r.isError && text(r) === 'written by code\n', 'read_file returns a file the code wrote', r)
  r = await client.callTool({ name: 'read_file', arguments: { path: '/home/user/notes/data.txt' } })
  check(!r.isError && text(r) === 'written by code\n', 'read_file takes an absolute /home/user path', r)
  r = await client.callTool({ name: 'list_files', arguments: { path: 'notes' } })
  check(!r.isError && /file\s+16\s+data\.txt/.test(text(r)), 'list_files lists the directory', r)

  r = await client.callTool({ name: 'write_file', arguments: { path: 'in/params.json', content: '{"n": 7}' } })
  check(!r.isError && text(r).includes('8 bytes'), 'write_file writes a file', r)
  r = await run(client, "import json\njson.load(open('in/params.json'))['n'] * 6")
  check(text(r) === '42', 'the code reads what write_file wrote', r)
  r = await client.callTool({
    name: 'write_file',
    arguments: { path: 'in/bin.dat', content: Buffer.from([0, 1, 2, 255]).toString('base64'), encoding: 'base64' }
  })
  r = await run(client, "list(open('in/bin.dat', 'rb').read())")
  check(text(r) === '[0, 1, 2, 255]', 'write_file decodes base64 content', r)
  r = await client.callTool({ name: 'read_file', arguments: { path: 'in/bin.dat' } })
  check(r.content[0]?.type === 'resource' && r.content[0].resource.blob === 'AAEC/w==',
    'read_file returns binary files as a base64 resource', r)

  r = await client.callTool({ name: 'read_file', arguments: { path: '../../etc/passwd' } })
  check(r.isError && /\.\./.test(text(r)), 'read_file refuses a path leaving the workspace (isError)', r)
  r = await client.callTool({ name: 'read_file', arguments: { path: 'no/such/file' } })
  check(r.isError, 'read_file of a missing file is isError', r)

  r = await run(client, '1/0')
  check(r.isError && text(r).includes('ZeroDivisionError: division by zero') &&
    !text(r).includes('\x1b['), 'an exception is isError with a plain-text traceback', r)

  r = await run(client, "import time\nprint('before', flush=True)\ntime.sleep(60)", { timeout: 2 })
  check(r.isError && /Timeout/.test(text(r)) && text(r).includes('before'),
    'a timeout is isError and keeps the output before it', r)
  r = await run(client, 'x')
  check(!r.isError && text(r) === '41', 'variables survive the timeout', r)

  // Output as it happens: progress notifications carry it before the result.
  const seen = []
  let resultAt = null
  r = await run(client, "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)",
    {}, { onprogress: (p) => seen.push({ msg: p.message, at: Date.now() }) })
  resultAt = Date.now()
  check(seen.length >= 2 && seen.map((s) => s.msg).join('').includes('tick 2') && seen[0].at < resultAt,
    'output streams as progress notifications', seen)

  // Cancelling a call interrupts the code.
  const ac = new AbortController()
  const pending = run(client, "import time\ntime.sleep(30)\nafter_sleep = 1", {}, { signal: ac.signal })
  setTimeout(() => ac.abort('test cancels'), 1500)
  let threw = null
  try { await pending } catch (e) { threw = e }
  check(threw, 'an aborted call rejects', `${threw}`)
  r = await run(client, "'after_sleep' in dir()")
  check(text(r) === 'False', 'the cancelled code was interrupted', r)

  // A second session is a different kernel and workspace.
  const b = await connect('sandgate-test-b')
  check(b.transport.sessionId !== transport.sessionId, 'a second client gets its own session')
  r = await run(b.client, 'x')
  check(r.isError && text(r).includes('NameError'), "session B does not see session A's variables", r)
  r = await b.client.callTool({ name: 'read_file', arguments: { path: 'notes/data.txt' } })
  check(r.isError, "session B does not see session A's files", r)
  r = await run(client, 'x')
  check(text(r) === '41', 'session A is unaffected by B', r)

  // execute_code: a kernel per language, each keeping its state.
  r = await runIn(client, 'javascript', "let x = 'js'; const sq = (n) => n * n; sq(6)")
  check(!r.isError && text(r) === '36', 'execute_code runs JavaScript', r)
  r = await runIn(client, 'javascript', 'x + sq(3)')
  check(!r.isError && text(r) === '"js9"', 'JavaScript state persists across calls', r)
  r = await run(client, 'x')
  check(!r.isError && text(r) === '41', "Python's x is its own, not JavaScript's", r)
  r = await runIn(client, 'typescript',
    'interface P { name: string; n: number }\n' +
    'function label(p: P): string { return `${p.name}=${p.n * 2}` }\n' +
    "label({ name: 'ts', n: 21 })")
  check(!r.isError && text(r) === '"ts=42"', 'TypeScript runs a typed function', r)
  r = await runIn(client, 'bash', 'echo "sh says $((6 * 7))"')
  check(!r.isError && text(r) === 'sh says 42\n', 'bash runs echo', r)
  r = await runIn(client, 'javascript', "throw new TypeError('no such thing')")
  check(r.isError && text(r).includes('TypeError: no such thing'),
    'a JavaScript exception is isError with its message', r)
  r = await runIn(client, 'cobol', 'DISPLAY 42')
  check(r.isError && text(r).includes("unknown language 'cobol'") &&
    text(r).includes('python, javascript, typescript, r, bash'),
  'an unknown language is isError naming the languages there are', r)

  r = await client.callTool({ name: 'restart_kernel', arguments: {} })
  check(!r.isError, 'restart_kernel', r)
  r = await run(client, "'x' in dir(), open('notes/data.txt').read()")
  check(text(r) === "(False, 'written by code\\n')", 'after a restart variables are gone and files stay', r)

  threw = null
  try { await client.callTool({ name: 'no_such_tool', arguments: {} }) } catch (e) { threw = e }
  check(threw && threw.code === -32602, 'an unknown tool is a JSON-RPC error -32602', `${threw?.code} ${threw}`)
  r = await client.callTool({ name: 'execute_python', arguments: { timeout: 5 } })
  check(r.isError && text(r).includes("'code'"), 'a missing argument is isError', r)

  // Deleting the session shuts its kernel down; the id is then unknown.
  const sid = transport.sessionId
  await transport.terminateSession()
  const resp = await fetch(url + '/mcp', {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${token}`, 'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': sid
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'ping' })
  })
  check(resp.status === 404, 'a deleted session answers 404', resp.status)
  await client.close()
  r = await run(b.client, '6 * 7')
  check(text(r) === '42', 'the other session still works', r)
  console.log(JSON.stringify({ session_b: b.transport.sessionId }))
  await b.client.close()
} catch (e) {
  check(false, 'the script ran to the end', `${e?.stack ?? e}`)
}
