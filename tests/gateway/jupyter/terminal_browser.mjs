// A person at a terminal in a browser: xterm.js (npm @xterm/xterm) in headless
// Chromium, on sandgate's GET /contexts/{id}/terminal WebSocket (terminado's
// messages: gateway/jupyter/terminal.c).  Types `echo $((6*7))` and sees 42,
// resizes and sees the shell's new size, then closes the page's connection
// and opens a new one to the same shell, which kept its variable.
// usage: node terminal_browser.mjs SANDGATE_URL CONTEXT_ID TOKEN
// Prints one JSON line per check: {ok, name, detail}.
import { createRequire } from 'node:module'
import { chromium } from 'playwright-core'

const [base, ctx, token] = process.argv.slice(2)
const require = createRequire(import.meta.url)
const xtermJs = require.resolve('@xterm/xterm/lib/xterm.js')
const xtermCss = require.resolve('@xterm/xterm/css/xterm.css')
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']
})
try {
  const page = await browser.newPage()
  await page.setContent('<!doctype html><html><body><div id="t"></div></body></html>')
  await page.addStyleTag({ path: xtermCss })
  await page.addScriptTag({ path: xtermJs })
  const ws = `${base.replace(/^http/, 'ws')}/contexts/${ctx}/terminal?token=${token}`
  // The page's glue: a terminal wired to the WebSocket, as an app would.
  await page.evaluate((url) => {
    window.connect = (rows, cols) => new Promise((resolve) => {
      document.getElementById('t').innerHTML = ''
      const term = new window.Terminal({ rows, cols })
      term.open(document.getElementById('t'))
      const sock = new WebSocket(`${url}&rows=${rows}&cols=${cols}`)
      sock.onmessage = (e) => {
        const [kind, data] = JSON.parse(e.data)
        if (kind === 'stdout') term.write(data)
      }
      term.onData((d) => sock.send(JSON.stringify(['stdin', d])))
      term.onResize(({ rows, cols }) => sock.send(JSON.stringify(['set_size', rows, cols])))
      sock.onopen = () => { term.focus(); resolve() }
      window.term = term
      window.sock = sock
    })
    window.screen_ = () => {
      const b = window.term.buffer.active
      const lines = []
      for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true))
      return lines.join('\n')
    }
  }, ws)
  const until = async (re) => {
    for (let i = 0; i < 1500; i++) {
      const s = await page.evaluate(() => window.screen_())
      if (re.test(s)) return s
      await new Promise((r) => setTimeout(r, 20))
    }
    return await page.evaluate(() => window.screen_())
  }
  await page.evaluate(() => window.connect(24, 80))
  await until(/\$ $/m) // the prompt
  await page.keyboard.type('echo $((6*7))')
  await page.keyboard.press('Enter')
  let s = await until(/^42$/m)
  check(/^42$/m.test(s), 'typed into xterm.js: echo $((6*7)) prints 42', s.slice(-400))

  await page.evaluate(() => window.term.resize(100, 30))
  await page.keyboard.type('stty size; X=survives')
  await page.keyboard.press('Enter')
  s = await until(/^30 100$/m)
  check(/^30 100$/m.test(s), 'the terminal resized: the shell sees 30 rows, 100 columns', s.slice(-400))

  await page.evaluate(() => window.sock.close())
  await page.evaluate(() => window.connect(30, 100))
  await page.keyboard.type('echo $X-again')
  await page.keyboard.press('Enter')
  s = await until(/^survives-again$/m)
  check(/^survives-again$/m.test(s), 'a new connection: the same shell, its variable kept',
    s.slice(-400))
  await page.keyboard.type('exit')
  await page.keyboard.press('Enter')
  const closed = await page.evaluate(() => new Promise((resolve) => {
    if (window.sock.readyState === 3) resolve(true)
    window.sock.onclose = (e) => resolve(e.code === 1000)
    setTimeout(() => resolve(false), 20000)
  }))
  check(closed, 'exit: the socket closes (1000) with the shell')
} finally {
  await browser.close()
}
