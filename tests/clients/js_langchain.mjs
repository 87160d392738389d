// sandgate's LangChain tools and Deep Agents backend (npm `sandgate`) in real
// agent loops driven by LangChain's own fake tool-calling model: no LLM, no
// network. usage: node js_langchain.mjs URL TOKEN — one JSON line per check.
import { Sandgate } from 'sandgate'
import { executeCodeTool, executePythonTool, runCommandTool, sandgateTools } from 'sandgate/langchain'
import { SandgateSandbox } from 'sandgate/deepagents'
import { fakeModel } from '@langchain/core/testing'
import { AIMessage, HumanMessage } from '@langchain/core/messages'
import { MemorySaver } from '@langchain/langgraph'
import { createAgent } from 'langchain'
import { createDeepAgent } from 'deepagents'

const [url, token] = process.argv.slice(2)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const toolMessages = (res) => res.messages.filter((m) => m.type === 'tool' || m._getType?.() === 'tool')
const textOf = (m) => typeof m.content === 'string' ? m.content
  : m.content.filter((b) => b.type === 'text').map((b) => b.text).join('')
const brief = (msgs) => msgs.map((m) => ({ name: m.name, content: m.content, status: m.status }))
const calls = (...codes) => codes.reduce((m, c) => m.respondWithTools(
  [{ name: c.tool ?? 'execute_python', args: c.args ?? { code: c } }]), fakeModel())

const client = new Sandgate({ url, token })
const cleanup = []
try {
  // --- the loop: x = 6*7, then print(x) -----------------------------------
  let python = executePythonTool({ client })
  cleanup.push(python.registry)
  check(python.name === 'execute_python' && python.responseFormat === 'content_and_artifact',
    'executePythonTool is the tool execute_python, content_and_artifact', [python.name, python.responseFormat])
  let model = calls('x = 6*7', 'print(x)').respond(new AIMessage('x is 42'))
  let agent = createAgent({ model, tools: [python] })
  let res = await agent.invoke({ messages: [new HumanMessage('What is 6*7? Keep it in x.')] })
  let tm = toolMessages(res)
  check(tm.length === 2 && tm.every((m) => m.name === 'execute_python'),
    'createAgent with the fake model calls execute_python twice', brief(res.messages))
  check(tm.length === 2 && textOf(tm[1]).includes('42') && tm[1].artifact?.stdout === '42\n',
    'the second tool message carries 42 (state kept between calls)', brief(tm))
  check(res.messages.at(-1).content === 'x is 42', 'the loop ends with the model\'s answer', brief(res.messages))
  check(python.registry.contexts.size === 1, 'one context for the tool instance', python.registry.contexts.size)

  // --- a plot comes back as an image block --------------------------------------
  model = calls("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title('squares')\nplt.show()")
    .respond(new AIMessage('plotted'))
  agent = createAgent({ model, tools: [python] })
  res = await agent.invoke({ messages: [new HumanMessage('plot squares')] })
  tm = toolMessages(res)
  const blocks = Array.isArray(tm[0]?.content) ? tm[0].content : []
  const img = blocks.find((b) => b.type === 'image')
  check(img && img.mimeType === 'image/png' && Buffer.from(img.data, 'base64').subarray(1, 4).toString() === 'PNG',
    'a matplotlib plot is an image block {type: "image", mimeType, data}', brief(tm))
  check(blocks.some((b) => b.type === 'text') && tm[0].artifact?.images?.length === 1 &&
    tm[0].artifact.images[0].mimeType === 'image/png', 'beside a text block; the artifact has the image too',
  tm[0]?.artifact && { ...tm[0].artifact, results: undefined, images: tm[0].artifact.images?.length })
  check(textOf(tm[0]).includes('[chart: line "squares"]\nLine 0: (0, 1), (1, 4), (2, 9)'),
    "the plot's data comes back as text too (type, title, the series' points)", textOf(tm[0]))

  // --- a chart's data as text: bars; a figure of a pie and a box plot ---------------------------
  const asked = (code, id) => python.invoke({ name: 'execute_python', args: { code }, id, type: 'tool_call' })
  let msg = await asked("import matplotlib.pyplot as plt\n" +
    "plt.bar(['apples', 'pears', 'plums'], [3, 5, 2.5], label='stock')\n" +
    "plt.title('Fruit')\nplt.xlabel('Kind')\nplt.ylabel('Weight (kg)')\nplt.show()", 'ch1')
  let said = textOf(msg)
  check(said.includes('[chart: bar "Fruit"; x: Kind; y: Weight (kg)]\n' +
    'apples (stock): 3\npears (stock): 5\nplums (stock): 2.5'),
  "a bar chart's text: its type, title, axes and each bar's label, group and value", said)
  check(Array.isArray(msg.content) && msg.content.some((b) => b.type === 'image') &&
    msg.artifact?.results?.[0]?.chart?.type === 'bar', 'beside its image; the artifact has the chart', msg.content)
  msg = await asked("import matplotlib.pyplot as plt\nfig, (a, b) = plt.subplots(1, 2)\n" +
    "a.pie([1, 3], labels=['x', 'y'])\na.set_title('Pie')\n" +
    "b.boxplot([[1, 2, 3, 4, 5, 20]], labels=['A'])\nb.set_title('Box')\nfig.suptitle('Both')\nplt.show()", 'ch2')
  said = textOf(msg)
  check(said.includes('[chart: superchart "Both"]\n  [chart: pie "Pie"]\n  x: 90 degrees\n  y: 270 degrees\n' +
    '  [chart: box_and_whisker "Box"]\n  A: min 1, q1 2.25, median 3.5, q3 4.75, max 5, outliers [20]'),
  "a figure of two axes: each chart indented under the superchart, a pie's slices, a box's quartiles", said)

  // --- an exception comes back as the traceback -------------------------------------
  model = calls("def f():\n    raise ValueError('boom')\nf()").respond(new AIMessage('it failed'))
  agent = createAgent({ model, tools: [python] })
  res = await agent.invoke({ messages: [new HumanMessage('run f')] })
  tm = toolMessages(res)
  const t = tm[0] ? textOf(tm[0]) : ''
  check(t.includes('ValueError: boom') && t.includes("raise ValueError('boom')") && t.includes('Traceback'),
    'an exception comes back as name, value and traceback', t)
  check(!/\x1b\[/.test(t), 'the traceback has no terminal colour codes', JSON.stringify(t))
  check(res.messages.at(-1).content === 'it failed' && tm[0].artifact?.error?.name === 'ValueError',
    'the loop goes on after the exception; the artifact has the error', brief(res.messages))

  // --- long output is cut with a marker ---------------------------------------------
  const small = executePythonTool({ client, registry: python.registry, maxChars: 2000 })
  const cut = await small.invoke({ name: 'execute_python', args: { code: "print('z' * 50000)" },
    id: 'c2', type: 'tool_call' })
  const content = cut.content
  check(typeof content === 'string' && content.length <= 2000 && /\d+ characters truncated/.test(content) &&
    content.trimEnd().endsWith('zzz'), 'long output is truncated with a marker (head and tail kept)',
  typeof content === 'string' ? content.length : content)

  // --- errors go to the model, never thrown into the loop ----------------------------
  const dead = executePythonTool({ client: new Sandgate({ url: 'http://127.0.0.1:1', token }) })
  model = calls('1 + 1').respond(new AIMessage('no sandbox'))
  agent = createAgent({ model, tools: [dead] })
  let threw = null
  try { res = await agent.invoke({ messages: [new HumanMessage('try')] }) } catch (e) { threw = e }
  tm = threw ? [] : toolMessages(res)
  check(!threw && tm.length === 1 && /sandgate could not run this/.test(textOf(tm[0])),
    'an unreachable sandgate is a tool message, not an exception', threw ? `${threw.stack}` : brief(tm))
  const wrongToken = executePythonTool({ client: new Sandgate({ url, token: 'wrong-token-0123456789' }) })
  const out = await wrongToken.invoke({ name: 'execute_python', args: { code: '1' }, id: 'c3', type: 'tool_call' })
  check(/UnauthorizedError \(HTTP 401\)/.test(out.content), 'a refused token is reported as UnauthorizedError (HTTP 401)', out.content)

  // --- a deleted context is replaced, and the model is told -----------------------------
  const id = await python.registry.get()
  await client.removeContext(id)
  const again = await python.invoke({ name: 'execute_python', args: { code: "'x' in dir()" }, id: 'c4', type: 'tool_call' })
  check(/previous session was gone/.test(textOf(again)) && textOf(again).includes('False') &&
    again.artifact.contextId !== id, 'a context deleted under the tool is replaced, saying variables were lost', textOf(again))

  // --- one context per thread id -------------------------------------------------------
  python = executePythonTool({ client })
  cleanup.push(python.registry)
  // fakeModel answers in order across runs: a tool call, then a final answer per turn
  model = fakeModel()
    .respondWithTools([{ name: 'execute_python', args: { code: 'y = 1' } }]).respond(new AIMessage('set'))
    .respondWithTools([{ name: 'execute_python', args: { code: "'y' in dir()" } }]).respond(new AIMessage('checked'))
    .respondWithTools([{ name: 'execute_python', args: { code: 'print(y + 1)' } }]).respond(new AIMessage('two'))
  agent = createAgent({ model, tools: [python], checkpointer: new MemorySaver() })
  await agent.invoke({ messages: [new HumanMessage('set y')] }, { configurable: { thread_id: 'thread-a' } })
  const b = await agent.invoke({ messages: [new HumanMessage('is y set?')] }, { configurable: { thread_id: 'thread-b' } })
  const a = await agent.invoke({ messages: [new HumanMessage('y + 1')] }, { configurable: { thread_id: 'thread-a' } })
  const bt = toolMessages(b).at(-1), at = toolMessages(a).at(-1)
  check(bt && textOf(bt).includes('False'), 'thread b does not see thread a\'s variables', bt && textOf(bt))
  check(at && at.artifact?.stdout === '2\n', 'thread a keeps its variables across turns', at && textOf(at))
  const ids = await Promise.all([...python.registry.contexts.values()])
  check(python.registry.contexts.size === 2 && new Set(ids).size === 2 && bt.artifact.contextId !== at.artifact.contextId,
    'two thread ids get two contexts', [...python.registry.contexts.keys()])

  // --- the shell tool, sharing the sandbox with execute_python --------------------------------
  const [py2, sh] = sandgateTools({ client })
  cleanup.push(py2.registry)
  model = fakeModel()
    .respondWithTools([{ name: 'execute_python', args: { code: "open('note.txt', 'w').write('from python\\n')" } }])
    .respondWithTools([{ name: 'run_command', args: { command: 'cat note.txt; ls nope' } }])
    .respond(new AIMessage('done'))
  agent = createAgent({ model, tools: [py2, sh] })
  res = await agent.invoke({ messages: [new HumanMessage('write and read')] })
  tm = toolMessages(res)
  const shText = tm[1] ? textOf(tm[1]) : ''
  check(sh.name === 'run_command' && tm.length === 2 && shText.includes('from python') &&
    /exit code: [12]/.test(shText) && /No such file/.test(shText),
  'run_command sees what execute_python wrote; stderr and a non-zero exit are reported', shText)
  const solo = runCommandTool({ client })
  cleanup.push(solo.registry)
  const so = await solo.invoke({ name: 'run_command', args: { command: 'echo solo' }, id: 'c5', type: 'tool_call' })
  check(/stdout:\nsolo\n/.test(so.content) && /exit code: 0/.test(so.content), 'runCommandTool on its own', so.content)

  // --- tools for other languages: a JavaScript context, a TypeScript one ---------------------
  const jsTool = executeCodeTool({ client, language: 'js' })
  cleanup.push(jsTool.registry)
  check(jsTool.name === 'execute_javascript' && /JavaScript/.test(jsTool.description) &&
    !/Python/.test(jsTool.description), 'executeCodeTool({language: "js"}) is execute_javascript, described so',
  [jsTool.name, jsTool.description])
  model = calls({ tool: 'execute_javascript', args: { code: 'const xs = [1, 2, 3]' } },
    { tool: 'execute_javascript', args: { code: 'xs.map((n) => n * 2).join("-")' } }).respond(new AIMessage('doubled'))
  agent = createAgent({ model, tools: [jsTool] })
  res = await agent.invoke({ messages: [new HumanMessage('double 1..3 in JavaScript')] })
  tm = toolMessages(res)
  const jsId = tm[1]?.artifact?.contextId
  check(tm.length === 2 && textOf(tm[1]).includes('"2-4-6"') && jsId &&
    (await client.getContext(jsId)).language === 'javascript',
  'the JavaScript tool runs in a javascript context that keeps its constants between calls', brief(tm))
  const tsTool = executeCodeTool({ client, language: 'typescript' })
  cleanup.push(tsTool.registry)
  const typed = await tsTool.invoke({ name: 'execute_typescript', id: 'ts1', type: 'tool_call',
    args: { code: 'type Box = { w: number; h: number }\nconst area = (b: Box): number => b.w * b.h\narea({ w: 6, h: 7 })' } })
  const typedAgain = await tsTool.invoke({ name: 'execute_typescript', id: 'ts2', type: 'tool_call',
    args: { code: 'area({ w: 2, h: 3 }) as number' } })
  check(tsTool.name === 'execute_typescript' && /result:\n42/.test(textOf(typed)) &&
    /result:\n6/.test(textOf(typedAgain)) && typed.artifact.contextId === typedAgain.artifact.contextId,
  'executeCodeTool({language: "typescript"}) runs typed code and keeps its function', [textOf(typed), textOf(typedAgain)])
  const jsErr = await jsTool.invoke({ name: 'execute_javascript', id: 'js3', type: 'tool_call',
    args: { code: "JSON.parse('{nope')" } })
  check(/SyntaxError/.test(textOf(jsErr)) && jsErr.artifact?.error?.name === 'SyntaxError',
    'a JavaScript exception comes back as the error, not thrown', [textOf(jsErr), jsErr.artifact?.error])

  // --- tools on a template: each conversation's context starts from it ---------------------
  const [tpy, tsh] = sandgateTools({ client, contextOptions: { template: 'pd' } })
  cleanup.push(tpy.registry)
  model = calls('pd.__name__', { tool: 'run_command', args: { command: 'echo shared' } })
    .respond(new AIMessage('done'))
  agent = createAgent({ model, tools: [tpy, tsh] })
  res = await agent.invoke({ messages: [new HumanMessage('use pandas')] })
  tm = toolMessages(res)
  const tplId = tm[0]?.artifact?.contextId
  check(tm.length === 2 && textOf(tm[0]).includes("'pandas'") && textOf(tm[1]).includes('shared') &&
    tplId && (await client.getContext(tplId)).template === 'pd',
  'contextOptions {template}: the tools\' context is the template\'s (its preload, no import)', brief(tm))

  // --- Deep Agents with the sandgate backend ------------------------------------------------
  const backend = await SandgateSandbox.create({ client })
  cleanup.push(backend)
  check(typeof backend.id === 'string' && backend.id.length > 0, 'SandgateSandbox.create: a context as the backend', backend.id)
  model = fakeModel()
    .respondWithTools([{ name: 'write_file', args: { file_path: '/home/user/src/hello.py',
      content: "import sys\nprint('hello from deep agents', sys.argv[1])\n" } }])
    .respondWithTools([{ name: 'grep', args: { pattern: 'deep agents', path: '/home/user' } }])
    .respondWithTools([{ name: 'execute', args: { command: 'python3 src/hello.py sandgate' } }])
    .respondWithTools([{ name: 'read_file', args: { file_path: '/home/user/src/hello.py' } }])
    .respond(new AIMessage('ran it'))
  const deep = createDeepAgent({ model, backend })
  res = await deep.invoke({ messages: [new HumanMessage('write, grep and run a script')] })
  tm = toolMessages(res)
  const byName = Object.fromEntries(tm.map((m) => [m.name, textOf(m)]))
  check(/Successfully wrote/.test(byName.write_file ?? '') &&
    await client.readFile(backend.id, 'src/hello.py').catch((e) => `${e}`) ===
      "import sys\nprint('hello from deep agents', sys.argv[1])\n",
  'deep agent: write_file puts the file in the context\'s workspace', byName)
  check(/\/home\/user\/src\/hello.py/.test(byName.grep ?? '') && /deep agents/.test(byName.grep ?? ''),
    'deep agent: grep finds it', byName.grep)
  check(/hello from deep agents sandgate/.test(byName.execute ?? '') && /exit code 0/.test(byName.execute ?? ''),
    'deep agent: execute runs it', byName.execute)
  check(/print\('hello from deep agents'/.test(byName.read_file ?? ''), 'deep agent: read_file reads it', byName.read_file)
  check(res.messages.at(-1).content === 'ran it', 'the deep agent\'s loop ends with the model\'s answer', brief(res.messages))

  // the backend's own contract
  let r = await backend.execute('echo out; echo err >&2; exit 5')
  check(r.output === 'out\nerr\n' && r.exitCode === 5 && r.truncated === false,
    'execute: stdout and stderr as output, the exit code, not thrown', r)
  const up = await backend.uploadFiles([['/home/user/a/b.bin', new Uint8Array([0, 1, 255])],
    ['/tmp/outside.txt', new TextEncoder().encode('tmp side')], ['a/b.bin', new Uint8Array(1)]])
  check(up[0].error === null && up[1].error === null && up[2].error === 'invalid_path',
    'uploadFiles: in the workspace, outside it (/tmp), a relative path refused', up)
  const down = await backend.downloadFiles(['/home/user/a/b.bin', '/tmp/outside.txt', '/home/user/missing',
    '/home/user/a', 'a/b.bin', '/home/user'])
  check(down[0].content && Buffer.from(down[0].content).equals(Buffer.from([0, 1, 255])) &&
    new TextDecoder().decode(down[1].content ?? new Uint8Array()) === 'tmp side' &&
    down[2].error === 'file_not_found' && down[3].error === 'is_directory' && down[4].error === 'invalid_path' &&
    down[5].error === 'is_directory',
  'downloadFiles: bytes, /tmp, a missing file, a directory, a relative path refused', down.map((x) => [x.path, x.error, x.content?.length]))
  const ls = await backend.ls('/home/user/src')
  check(ls.files?.some((f) => f.path === '/home/user/src/hello.py'), 'ls (BaseSandbox, through execute)', ls)
  const ed = await backend.edit('/home/user/src/hello.py', 'hello from', 'edited by')
  r = await backend.execute('python3 src/hello.py x')
  check(ed.occurrences === 1 && r.output === 'edited by deep agents x\n', 'edit (download, replace, upload)', [ed, r])
  const gl = await backend.glob('**/*.py', '/home/user')
  check(gl.files?.some((f) => f.path === 'src/hello.py'), 'glob', gl)
  const paused = await client.pauseContext(backend.id)
  r = await backend.execute('cat src/hello.py | wc -l')
  check(paused.state === 'paused' && r.output.trim() === '2' && r.exitCode === 0,
    'a paused context resumes for the backend\'s next command', [paused.state, r])
} catch (e) {
  check(false, 'the agent script completes', `${e?.stack || e}`)
} finally {
  for (const c of cleanup) await c.close().catch(() => {})
}
