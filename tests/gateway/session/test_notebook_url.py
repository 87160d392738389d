"""--notebook-url: the link that hands a session to a person.

With the option (here from the environment, SANDGATE_NOTEBOOK_URL) every
context's JSON — POST /contexts, GET /contexts, GET /contexts/{id} —
carries notebook_url, the template with the context's id for {kernel_id};
MCP's execute_python and execute_code results carry it in _meta and as one
text line, naming the kernel the tool runs in (and the official MCP SDK's
client hands both to its caller).  Another tenant's key gets
404 for the context, exactly as for an id that does not exist, and its
list holds nothing of the first tenant's.  Without the option there is no
notebook_url anywhere.  Needs root and runsc."""
import json
import os
import shutil
import subprocess

import mcpraw
from sgd import Daemon, TOKEN, tenants
from tap import ok, done

TEMPLATE = "https://hub.example.org/user/alice/lab?kernel={kernel_id}"
SRC = os.path.abspath(os.environ.get("SG_SRCDIR", "."))
SDK = """
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
const [url, token] = process.argv.slice(1)
const transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'),
  { requestInit: { headers: { Authorization: `Bearer ${token}` } } })
const client = new Client({ name: 'notebook-url', version: '1.0.0' })
await client.connect(transport)
const r = await client.callTool({ name: 'execute_python', arguments: { code: 'print(6 * 7)' } })
console.log(JSON.stringify(r))
await transport.terminateSession()
await client.close()
"""


def url_for(cid):
    return TEMPLATE.replace("{kernel_id}", cid)


tmp, KEYS, (ALICE, BOB) = tenants("sg-nburl-", "alice", "bob")
d = Daemon("--pool-size", "0", "--keys-file", KEYS, env={"SANDGATE_NOTEBOOK_URL": TEMPLATE})
try:
    # --- REST ----------------------------------------------------------------------------
    st, c = d.json("POST", "/contexts", {}, token=ALICE)
    cid = c.get("id", "") if c else ""
    ok(st == 201 and c.get("notebook_url") == url_for(cid),
       "POST /contexts answers with notebook_url, the context's id for {kernel_id}", (st, c))
    st, one = d.json("GET", f"/contexts/{cid}", token=ALICE)
    ok(st == 200 and one.get("notebook_url") == url_for(cid), "GET /contexts/{id} carries it",
       (st, one))
    st, lst = d.json("GET", "/contexts", token=ALICE)
    ok(st == 200 and [x.get("notebook_url") for x in lst] == [url_for(cid)],
       "GET /contexts carries it for each context", lst)
    st, _, body = d.request("POST", "/execute", {"code": "x = 42", "context_id": cid},
                            token=ALICE)
    ok(st == 200, "the context runs code", body)

    # Another tenant: the context is an unknown one.
    unknown = "00000000-0000-4000-8000-000000000000"
    st_b, _, body_b = d.request("GET", f"/contexts/{cid}", token=BOB)
    st_u, _, body_u = d.request("GET", f"/contexts/{unknown}", token=BOB)
    ok(st_b == 404 and (st_b, body_b.replace(cid.encode(), b"ID")) ==
       (st_u, body_u.replace(unknown.encode(), b"ID")),
       "bob's key gets alice's context exactly as an unknown id: 404", (st_b, body_b, body_u))
    st, lst = d.json("GET", "/contexts", token=BOB)
    ok(st == 200 and lst == [], "bob's list holds none of alice's contexts", lst)
    st, _, body = d.request("GET", f"/api/kernels/{cid}", token=BOB)
    ok(st == 404, "nor does the Jupyter kernels API show it to him", (st, body))

    # --- MCP -----------------------------------------------------------------------------
    st, sid, _ = mcpraw.initialize(d)
    st, a = mcpraw.call(d, sid, "execute_python", {"code": "print('hi')"})
    res = (a or {}).get("result", {})
    link = res.get("_meta", {}).get("notebook_url", "")
    kid = link.rsplit("=", 1)[-1]
    st2, k = d.json("GET", f"/contexts/{kid}")
    ok(st == 200 and not res.get("isError") and link == url_for(kid) and st2 == 200
       and k.get("notebook_url") == link,
       "execute_python's result has _meta.notebook_url, naming the MCP session's kernel",
       (a, st2, k))
    texts = [b.get("text") for b in res.get("content", []) if b["type"] == "text"]
    ok(texts[:1] == ["hi\n"] and texts[-1:] == [f"Open this session in JupyterLab: {link}"],
       "and a last text line with it, after the output", texts)
    st, a = mcpraw.call(d, sid, "execute_code", {"language": "python", "code": "1/0"}, rid=2)
    res = (a or {}).get("result", {})
    ok(res.get("isError") and res.get("_meta", {}).get("notebook_url") == link
       and mcpraw.text_of(a).endswith(f"Open this session in JupyterLab: {link}"),
       "execute_code's result too, an error's as well", a)
    st, a = mcpraw.call(d, sid, "list_files", {}, rid=3)
    ok(st == 200 and "_meta" not in a["result"], "a file tool's result has none", a)
    d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})

    # The official SDK's client hands both to its caller.
    r = subprocess.run(["node", "--input-type=module", "-e", SDK, d.url, TOKEN],
                       cwd=os.path.join(SRC, "tests"), capture_output=True, text=True, timeout=300)
    res = json.loads(r.stdout) if r.returncode == 0 and r.stdout.startswith("{") else {}
    link = res.get("_meta", {}).get("notebook_url", "")
    ok(link.startswith(TEMPLATE.split("{")[0]) and res["content"][-1]["text"] ==
       f"Open this session in JupyterLab: {link}" and res["content"][0]["text"] == "42\n",
       "the MCP SDK's callTool gives the caller _meta.notebook_url and the text line",
       r.stdout + r.stderr[-2000:])
finally:
    d.stop()

# --- without the option --------------------------------------------------------------------
d = Daemon("--pool-size", "0")
try:
    st, c = d.json("POST", "/contexts", {})
    st2, lst = d.json("GET", "/contexts")
    st3, one = d.json("GET", f"/contexts/{c['id']}")
    ok(st == 201 and "notebook_url" not in c and all("notebook_url" not in x for x in lst)
       and "notebook_url" not in one, "without --notebook-url no context carries one", (c, lst))
    st, sid, _ = mcpraw.initialize(d)
    st, a = mcpraw.call(d, sid, "execute_python", {"code": "print('hi')"})
    ok(st == 200 and "_meta" not in a["result"] and mcpraw.text_of(a) == "hi\n",
       "nor does an MCP result", a)
    d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
finally:
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
