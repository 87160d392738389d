// E2B's JS SDK, unchanged and configured only by the environment, with a
// terminal (sbx.pty: envd's Start with a pty, SendInput, Update).  Prints one
// JSON line per check: {ok, name, detail}.
import { Sandbox } from 'e2b'

const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const dec = new TextDecoder()
const enc = new TextEncoder()

const sbx = await Sandbox.create()
let text = ''
const term = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => { text += dec.decode(d) } })
await sbx.pty.sendInput(term.pid, enc.encode('echo $((6*7)); stty size\n'))
// its answer streams in: the size given, before the resize
for (let i = 0; i < 1000 && !text.includes('24 80'); i++) await new Promise((r) => setTimeout(r, 10))
await sbx.pty.resize(term.pid, { rows: 30, cols: 100 })
await sbx.pty.sendInput(term.pid, enc.encode('stty size; exit\n'))
const r = await term.wait()
check(r.exitCode === 0 && text.includes('42') && text.includes('24 80') &&
  text.includes('30 100'), 'pty.create, sendInput, resize: the shell answers and sees its size',
  text.slice(-500))
await sbx.kill()
