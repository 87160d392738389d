// E2B's JS SDK, unchanged, against sandgate's sandbox API: configured only by
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (test_e2b_sandboxes.py sets them).
// Prints one JSON line of what it saw.
import { Sandbox } from '@e2b/code-interpreter'

const out = {}
const sbx = await Sandbox.create({ metadata: { lang: 'js' }, envs: { GREETING: 'hello' } })
out.id = sbx.sandboxId
const r = await sbx.runCode("import os; x = 6 * 7; os.environ['GREETING']")
out.result = r.results.map((x) => x.text)
await sbx.files.write('/tmp/from-js.txt', 'written by js')
out.read = (await sbx.runCode("open('/tmp/from-js.txt').read()")).results.map((x) => x.text)
out.command = (await sbx.commands.run('cat /tmp/from-js.txt')).stdout
// A JavaScript context in the same sandbox sees the same files; then it
// goes, so that the sandbox can pause.
const js = await sbx.createCodeContext({ language: 'javascript' })
out.jsRead = (await sbx.runCode("Deno.readTextFileSync('/tmp/from-js.txt')", { context: js })).results.map((x) => x.text)
await sbx.removeCodeContext(js.id)
const info = await sbx.getInfo()
out.info = { state: info.state, metadata: info.metadata, templateId: info.templateId }
out.listed = (await Sandbox.list({ query: { metadata: { lang: 'js' } } }).nextItems()).map((s) => s.sandboxId)
await sbx.setTimeout(120_000)
out.paused = await sbx.pause()
const again = await Sandbox.connect(sbx.sandboxId)
out.afterResume = (await again.runCode('x')).results.map((x) => x.text)
out.killed = await Sandbox.kill(sbx.sandboxId)
try {
  await Sandbox.getInfo(sbx.sandboxId)
  out.afterKill = 'found'
} catch (e) {
  out.afterKill = e.constructor.name
}
console.log(JSON.stringify(out))
