// The E2B SDK's files.* and commands.* (envd's protocol) against sandgate.
// usage: node e2b_envd.mjs URL KEY [OTHER_TENANTS_KEY]
//   — prints one JSON line per check: {ok, name, detail}
import { createHash } from 'node:crypto'
import { Sandbox } from '@e2b/code-interpreter'

const [url, key, otherKey] = process.argv.slice(2)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
// Whether no command pred picks is listed, within 10 s (a kill is asynchronous).
const gone = async (sbx, pred) => {
  for (let i = 0; i < 100; i++) {
    if (!(await sbx.commands.list()).some(pred)) return true
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return false
}
const fails = async (p) => { try { await p; return null } catch (e) { return e || new Error('rejected') } }

// The SDK takes its envd token from E2B's API, which debug mode skips; its
// constructor takes it directly (sandboxId: a context's id, or 'default').
const open = (k, sandboxId = 'default') => new Sandbox({
  sandboxId, envdVersion: '99.99.99', envdAccessToken: k, trafficAccessToken: k,
  debug: true, sandboxUrl: url,
})

try {
  const sbx = open(key)
  // --- files ---------------------------------------------------------------------------
  const info = await sbx.files.write('/tmp/a.csv', 'x,y\n1,2\n')
  check(info.path === '/tmp/a.csv' && info.name === 'a.csv' && info.type === 'file',
    'files.write (text) answers the written file', info)
  let ex = await sbx.runCode("open('/tmp/a.csv').read()")
  check(ex.results[0]?.text === 'x,y\\n1,2\\n', 'runCode without a context sees the file',
    ex.results.map((r) => r.text))
  check(await sbx.files.read('/tmp/a.csv') === 'x,y\n1,2\n', 'files.read (text)')

  const bin = new Uint8Array(65536).map((_, i) => (i * 7) & 255)
  await sbx.files.write('/tmp/bin.dat', bin)
  const back = await sbx.files.read('/tmp/bin.dat', { format: 'bytes' })
  check(back.length === bin.length && Buffer.compare(Buffer.from(back), Buffer.from(bin)) === 0,
    'files.write and files.read (bytes): every byte intact', back.length)
  const big = Buffer.alloc(3 << 20)
  for (let i = 0; i < big.length; i += 4096) big.writeUInt32BE(i, i)
  await sbx.files.write('/tmp/big.dat', new Blob([big]))
  const stream = await sbx.files.read('/tmp/big.dat', { format: 'stream' })
  const chunks = []
  for await (const c of stream) chunks.push(Buffer.from(c))
  const got = Buffer.concat(chunks)
  const sha = (b) => createHash('sha256').update(b).digest('hex')
  check(got.length === big.length && sha(got) === sha(big), 'files.read (stream): 3 MiB intact',
    got.length)

  const many = await sbx.files.write([{ path: '/tmp/m/1.txt', data: 'one' },
    { path: '/tmp/m/2.txt', data: new TextEncoder().encode('two') }])
  check(Array.isArray(many) && many.map((f) => f.path).join() === '/tmp/m/1.txt,/tmp/m/2.txt',
    'files.write (several at once) answers each', many)
  check(await sbx.files.read('/tmp/m/2.txt') === 'two', 'each is written')
  const list = await sbx.files.list('/tmp/m')
  check(list.map((e) => `${e.name}:${e.type}`).join() === '1.txt:file,2.txt:file',
    'files.list', list)
  check(await sbx.files.exists('/tmp/a.csv') === true, 'files.exists: true')
  check(await sbx.files.exists('/tmp/nope') === false, 'files.exists: false')
  const st = await sbx.files.getInfo('/tmp/a.csv')
  check(st.size === 8 && st.type === 'file' && st.path === '/tmp/a.csv' &&
    st.modifiedTime instanceof Date && !isNaN(st.modifiedTime) && typeof st.permissions === 'string',
    'files.getInfo', st)
  check(await sbx.files.makeDir('/tmp/d/e') === true, 'files.makeDir creates (and its parents)')
  check(await sbx.files.makeDir('/tmp/d/e') === false, 'files.makeDir: false when it exists')
  check((await sbx.files.getInfo('/tmp/d')).type === 'dir', 'a made directory is a dir')
  const moved = await sbx.files.rename('/tmp/a.csv', '/tmp/d/b.csv')
  check(moved.path === '/tmp/d/b.csv' && await sbx.files.exists('/tmp/a.csv') === false &&
    await sbx.files.read('/tmp/d/b.csv') === 'x,y\n1,2\n', 'files.rename', moved)
  await sbx.files.remove('/tmp/d')
  check(await sbx.files.exists('/tmp/d') === false, 'files.remove (a directory with a file)')
  let e = await fails(sbx.files.read('/tmp/nope'))
  check(e && e.name === 'FileNotFoundError' || /not.?found/i.test(`${e?.name} ${e?.message}`),
    'files.read of a missing file: not found', `${e}`)
  e = await fails(sbx.files.remove('/tmp/nope'))
  check(e === null, "files.remove of a missing path succeeds, as E2B's envd (RemoveAll)", `${e}`)
  await sbx.files.write('rel.txt', 'relative')
  ex = await sbx.runCode("open('/home/user/rel.txt').read()")
  check(ex.results[0]?.text === 'relative', "a relative path is /home/user's", ex.results)
  const seen = []
  const watch = await sbx.files.watchDir('/tmp', (ev) => seen.push(ev.name))
  await sbx.files.write('/tmp/watched.txt', 'w')
  for (let i = 0; i < 500 && !seen.includes('watched.txt'); i++) await new Promise((r) => setTimeout(r, 10))
  await watch.stop()
  check(seen.includes('watched.txt'), 'files.watchDir (this client\'s sandbox): a write is seen', seen)

  // --- commands ------------------------------------------------------------------------
  const out = [], err = []
  e = await fails(sbx.commands.run('echo hi; echo err >&2; exit 3',
    { onStdout: (d) => out.push(d), onStderr: (d) => err.push(d) }))
  check(e && e.exitCode === 3 && e.stdout === 'hi\n' && e.stderr === 'err\n',
    'commands.run: a non-zero exit raises with its code, stdout and stderr',
    `${e} ${e?.exitCode} ${JSON.stringify(e?.stdout)}`)
  check(out.join('') === 'hi\n' && err.join('') === 'err\n', 'onStdout and onStderr', { out, err })
  let r = await sbx.commands.run('echo ok')
  check(r.exitCode === 0 && r.stdout === 'ok\n', 'commands.run: exit code 0 and stdout', r)
  r = await sbx.commands.run('pwd', { cwd: '/tmp' })
  check(r.stdout === '/tmp\n', 'commands.run with cwd', r)
  r = await sbx.commands.run('echo "$SG_A $SG_B"', { envs: { SG_A: 'one', SG_B: 'two words' } })
  check(r.stdout === 'one two words\n', 'commands.run with envs', r)
  r = await sbx.commands.run('cat /tmp/m/1.txt').catch((x) => x)
  check(r.stdout === 'one', 'a command sees the files', `${r}`)
  e = await fails(sbx.commands.run('sleep 30; echo late', { timeoutMs: 2000 }))
  check(e && /timeout|deadline/i.test(`${e.name} ${e.message}`), 'commands.run past timeoutMs raises a timeout', `${e}`)
  check(await gone(sbx, (p) => p.args?.[2]?.includes('echo late')), 'the timed-out command was killed')

  const bg = await sbx.commands.run('sleep 1; echo done', { background: true })
  check(typeof bg.pid === 'number' && bg.pid > 0, 'background: a handle with a pid', bg.pid)
  r = await bg.wait()
  check(r.exitCode === 0 && r.stdout === 'done\n', 'background: .wait() gives its result', r)

  const long = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
  const procs = await sbx.commands.list()
  const mine = procs.find((p) => p.pid === long.pid)
  check(mine && mine.cmd === '/bin/bash' && mine.args.includes('sleep 120'),
    'commands.list has the background command', procs)
  check(await long.kill() === true, 'background: .kill()')
  e = await fails(long.wait())
  check(e && e.exitCode !== 0, 'a killed command ends with a non-zero exit', `${e} ${e?.exitCode}`)
  check(await gone(sbx, (p) => p.pid === long.pid), 'it is no longer listed')
  const other = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
  check(await sbx.commands.kill(other.pid) === true, 'commands.kill(pid)')
  await fails(other.wait())
  check(await sbx.commands.kill(other.pid) === false, 'commands.kill of an ended command: false')

  const reader = await sbx.commands.run('read line; echo "got:$line"',
    { background: true, stdin: true, timeoutMs: 60000 })
  await sbx.commands.sendStdin(reader.pid, 'hello\n')
  r = await reader.wait()
  check(r.stdout === 'got:hello\n', 'commands.sendStdin', r)

  const cat = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 })
  await sbx.commands.sendStdin(cat.pid, 'to cat')
  await sbx.commands.closeStdin(cat.pid)
  r = await cat.wait()
  check(r.stdout === 'to cat', 'commands.closeStdin: the command reads its end', r)
  const later = await sbx.commands.run('read go; echo "later:$go"',
    { background: true, stdin: true, timeoutMs: 0 })
  const again = await sbx.commands.connect(later.pid)
  await later.disconnect()
  await sbx.commands.sendStdin(later.pid, 'now\n')
  r = await again.wait()
  check(r.stdout === 'later:now\n',
    'commands.connect: a second handle gets the output; disconnect() leaves the command running', r)

  // --- a named context's files and commands --------------------------------------------
  const ctx = await sbx.createCodeContext()
  const named = open(key, ctx.id)
  await named.files.write('/tmp/ctx.txt', 'in the context')
  ex = await sbx.runCode("open('/tmp/ctx.txt').read()", { context: ctx })
  check(ex.results[0]?.text === 'in the context', "a sandbox id that is a context's id reaches its sandbox", ex.results)
  check(await sbx.files.exists('/tmp/ctx.txt') === false, 'the default sandbox is another')
  r = await named.commands.run('cat /tmp/ctx.txt').catch((x) => x)
  check(r.stdout === 'in the context', "commands in the named context's sandbox", `${r}`)
  await sbx.removeCodeContext(ctx)
  e = await fails(named.files.list('/tmp'))
  check(e && /not.?found/i.test(`${e.name} ${e.message}`), 'a removed context: not found', `${e}`)

  // --- keys --------------------------------------------------------------------------------
  const bad = open('wrong-key-0123456789')
  e = await fails(bad.files.read('/tmp/m/1.txt'))
  check(e && /401|auth/i.test(`${e.name} ${e.message}`), 'files with a wrong key: 401', `${e}`)
  e = await fails(bad.commands.run('true'))
  check(e && /401|auth/i.test(`${e.name} ${e.message}`), 'commands with a wrong key: 401', `${e}`)
  if (otherKey) {
    const them = open(otherKey)
    check(await them.files.exists('/tmp/m/1.txt') === false, "another tenant does not see the first's files")
    const mine2 = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
    check(!(await them.commands.list()).some((p) => p.args?.includes('sleep 120')),
      "another tenant does not list the first's commands")
    check(await them.commands.kill(mine2.pid) === false, "another tenant's kill does not reach the first's command")
    check((await sbx.commands.list()).some((p) => p.pid === mine2.pid), "the first tenant's command still runs")
    await mine2.kill()
    const ctx2 = await sbx.createCodeContext()
    e = await fails(open(otherKey, ctx2.id).files.list('/tmp'))
    const e404 = await fails(open(otherKey, 'ffffffff-0000-4000-8000-000000000000').files.list('/tmp'))
    check(e && e404 && e.name === e404.name && /not.?found/i.test(`${e.name} ${e.message}`),
      "another tenant's context id is answered as one that does not exist", `${e} / ${e404}`)
    await sbx.removeCodeContext(ctx2)
  }
} catch (e) {
  check(false, 'the SDK run completes', `${e?.stack || e}`)
}
