// E2B's JS SDK, unchanged and configured only by the environment
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, E2B_VOLUME_API_URL): a
// Volume made, written and read through the volume content API, mounted
// into a sandbox (volumeMounts), destroyed.  Prints one JSON line per
// check: {ok, name, detail}.
import { Sandbox, Volume } from 'e2b'

const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : String(detail) }))
const fails = async (fn) => {
  try {
    await fn()
  } catch (e) {
    return e
  }
  return null
}

const vol = await Volume.create('js-data')
check(vol.volumeId && vol.name === 'js-data' && vol.token.startsWith('sgvol_'),
  'Volume.create: its id, name and token', JSON.stringify(vol))
await vol.writeFile('/a.txt', 'from js')
check((await vol.readFile('/a.txt')) === 'from js', 'writeFile and readFile')
await vol.makeDir('/d/e', { force: true })
const entries = (await vol.list('/', { depth: 2 })).map((x) => x.path).sort()
check(JSON.stringify(entries) === JSON.stringify(['/a.txt', '/d', '/d/e']), 'list, depth 2',
  entries)
check((await Volume.list()).some((v) => v.volumeId === vol.volumeId), 'Volume.list has it')

const sbx = await Sandbox.create({ volumeMounts: { '/data': vol } })
const r = await sbx.commands.run('cat /data/a.txt; echo js-sandbox > /data/d/e/b.txt')
check(r.stdout === 'from js', 'a sandbox mounting it reads its file', r.stdout)
check((await vol.readFile('/d/e/b.txt')) === 'js-sandbox\n', 'and writes into it')
const e = await fails(() => Volume.destroy(vol.volumeId))
check(e && /mounted/.test(e.message), 'Volume.destroy while mounted: refused', e)
await sbx.kill()
check((await Volume.destroy(vol.volumeId)) === true, 'Volume.destroy once unmounted')
