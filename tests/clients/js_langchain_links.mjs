// sandgate's LangChain tools against a daemon started with --notebook-url:
// the tool's artifact carries the context's notebookUrl and its text ends
// with it, for the model to hand the session to a person.
// usage: node js_langchain_links.mjs URL TOKEN NOTEBOOK_URL — one JSON line per check.
import { Sandgate } from 'sandgate'
import { executePythonTool } from 'sandgate/langchain'
import { fakeModel } from '@langchain/core/testing'
import { AIMessage, HumanMessage } from '@langchain/core/messages'
import { createAgent } from 'langchain'

const [url, token, template] = process.argv.slice(2)
const check = (ok, name, detail) =>
  console.log(JSON.stringify({ ok: !!ok, name, detail: ok ? undefined : detail }))
const linkOf = (id) => template.replaceAll('{kernel_id}', id)
const textOf = (m) => typeof m.content === 'string' ? m.content
  : m.content.filter((b) => b.type === 'text').map((b) => b.text).join('')

const client = new Sandgate({ url, token })
const python = executePythonTool({ client })
try {
  const model = fakeModel()
    .respondWithTools([{ name: 'execute_python', args: { code: 'x = 6*7' } }])
    .respondWithTools([{ name: 'execute_python', args: { code: 'x' } }])
    .respond(new AIMessage('42'))
  const res = await createAgent({ model, tools: [python] })
    .invoke({ messages: [new HumanMessage('compute')] })
  const tm = res.messages.filter((m) => m.type === 'tool' || m._getType?.() === 'tool')
  const id = tm[0]?.artifact?.contextId
  check(tm.length === 2 && id && tm.every((m) => m.artifact?.notebookUrl === linkOf(id)),
    "the artifact carries the context's notebookUrl", tm.map((m) => m.artifact))
  check(tm.length === 2 && textOf(tm[1]).endsWith(`\nOpen this session in JupyterLab: ${linkOf(id)}`) &&
    textOf(tm[1]).includes('42'), 'and the text ends with it, for the model to pass on', tm.map(textOf))
  const ctx = await client.getContext(id)
  check(ctx.notebookUrl === linkOf(id), "it is the context's notebookUrl", ctx)
} catch (e) {
  check(false, 'the script completes', `${e?.stack || e}`)
} finally {
  await python.registry.close().catch(() => {})
}
