// E2B's JS SDK, unchanged, against sandgate's sandbox API: configured only by
// the environment (E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY in
// test_e2b_sandboxes.py; E2B_DOMAIN and E2B_API_KEY behind the TLS proxy in
// test_cluster.py).  Prints one JSON line per check: {ok, name, detail}.
import { Sandbox } from '@e2b/code-interpreter'

const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const texts = (ex) => ex.results.map((x) => x.text)
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)

const sbx = await Sandbox.create({ metadata: { lang: 'js' }, envs: { GREETING: 'hello' } })
const id = sbx.sandboxId
console.log(`#SANDBOX ${id}`)
const r = await sbx.runCode("import os; x = 6 * 7; os.environ['GREETING']")
check(same(texts(r), ['hello']), 'Sandbox.create() with envs, then runCode', r)
await sbx.files.write('/tmp/from-js.txt', 'written by js')
const read = texts(await sbx.runCode("open('/tmp/from-js.txt').read()"))
const command = (await sbx.commands.run('cat /tmp/from-js.txt')).stdout
check(same(read, ['written by js']) && command === 'written by js',
  'files.write seen by runCode and commands.run', { read, command })
// A JavaScript context in the same sandbox sees the same files; then it
// goes, so that the sandbox can pause.
const js = await sbx.createCodeContext({ language: 'javascript' })
const jsRead = texts(await sbx.runCode("Deno.readTextFileSync('/tmp/from-js.txt')", { context: js }))
check(jsRead.some((t) => t.includes('written by js')),
  'createCodeContext(javascript) in the sandbox reads the same file', jsRead)
await sbx.removeCodeContext(js.id)
const info = await sbx.getInfo()
const listed = (await Sandbox.list({ query: { metadata: { lang: 'js' } } }).nextItems()).map((s) => s.sandboxId)
check(same({ state: info.state, metadata: info.metadata, templateId: info.templateId },
  { state: 'running', metadata: { lang: 'js' }, templateId: 'code-interpreter-v1' }) &&
  same(listed, [id]), 'getInfo and a metadata list', { info, listed })
await sbx.setTimeout(120_000)
const paused = await sbx.pause()
const again = await Sandbox.connect(id)
const afterResume = texts(await again.runCode('x'))
check(paused === true && same(afterResume, ['42']),
  'pause, then Sandbox.connect resumes it with its variables', { paused, afterResume })
const killed = await Sandbox.kill(id)
let afterKill = 'found'
try {
  await Sandbox.getInfo(id)
} catch (e) {
  afterKill = e.constructor.name
}
check(killed === true && afterKill === 'SandboxNotFoundError',
  'Sandbox.kill; then getInfo raises SandboxNotFoundError', { killed, afterKill })
