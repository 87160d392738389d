// E2B's JS SDK, unchanged and configured only by the environment
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), watching a directory with
// files.watchDir: envd's WatchDir stream (gateway/envd/watch.c).  Prints one
// JSON line per check: {ok, name, detail}.
import { Sandbox, FilesystemEventType as T } from 'e2b'

const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)
// The events come on the stream as they happen: wait for want's count.
const until = async (events, n) => {
  for (let i = 0; i < 500 && events.length < n; i++) await new Promise((r) => setTimeout(r, 10))
  return events.map((e) => [e.type, e.name])
}

const sbx = await Sandbox.create()
await sbx.files.makeDir('w/sub')
const events = []
const handle = await sbx.files.watchDir('w', (e) => events.push(e))
await sbx.files.write('w/a.txt', 'hello')
check(same(await until(events, 3), [[T.CREATE, 'a.txt'], [T.CHMOD, 'a.txt'], [T.WRITE, 'a.txt']]),
  'watchDir: a write streams create, chmod, write', events)
events.length = 0
await sbx.commands.run('rm /home/user/w/a.txt')
check(same(await until(events, 1), [[T.REMOVE, 'a.txt']]), 'a command\'s rm: remove', events)
await handle.stop()

const deep = []
const rec = await sbx.files.watchDir('w', (e) => deep.push(e), { recursive: true })
await sbx.files.write('w/sub/b.txt', 'x')
const got = await until(deep, 3)
check(got.some(([t, n]) => t === T.WRITE && n === 'sub/b.txt'),
  'recursive: a subdirectory\'s file, named from the watched one', got)
await rec.stop()

let error
try {
  await sbx.files.watchDir('missing', () => {})
} catch (e) {
  error = e
}
check(error && error.name === 'NotFoundError' || /not found|no such/i.test(String(error)),
  'a missing directory: the SDK\'s not-found error', String(error))
await sbx.kill()
