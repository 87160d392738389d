"""clients/python's LangChain tools and Deep Agents backend in real agent
loops without an LLM: LangChain's GenericFakeChatModel (bind_tools returning
itself) scripts the tool calls; the agents are langchain's create_agent,
deepagents' create_deep_agent and, for sandgate's MCP tools, a LangGraph
agent over langchain-mcp-adapters.  The tools also run on a template's
contexts (--template pd=preload=import pandas as pd), and on JavaScript and
TypeScript contexts (execute_code_tool).  Against a second daemon, with
--notebook-url, the tool's artifact and text carry the context's link.  Everything PyPI runs in
tests/.venv-langchain (tests/requirements-langchain.txt, scripts/venv.sh)
with ./clients/python on PYTHONPATH; this file (system
python3) starts the daemon and reads the checks the agent script prints."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
VENV = os.path.join(SRC, "tests", ".venv-langchain")
PKG = os.path.join(SRC, "clients", "python", "src")

if not os.path.exists(os.path.join(VENV, "bin", "python")):
    ok(False, "tests/.venv-langchain exists (run scripts/venv.sh)")
    done()
    raise SystemExit

PRELUDE = r'''
import asyncio, atexit, base64, json, os, sys
checks = []
atexit.register(lambda: print(json.dumps(checks)))
def check(cond, name, detail=None):
    checks.append([bool(cond), name, None if cond else repr(detail)[:3000]])

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from sandgate import Sandgate
from sandgate.langchain import (execute_python_tool, execute_code_tool, execute_command_tool,
                                sandgate_tools)

class FakeToolModel(GenericFakeChatModel):
    """Replays scripted AIMessages; bind_tools keeps it as it is."""
    def bind_tools(self, tools, **kw):
        return self

def call(name, i, **args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{i}"}])

def script(*steps):
    return FakeToolModel(messages=iter(list(steps) + [AIMessage(content="done")]))

def tool_messages(state):
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]

def text_of(m):
    if isinstance(m.content, str):
        return m.content
    return "\n".join(b.get("text", "") for b in m.content if b.get("type") == "text")
'''

AGENTS = PRELUDE + r'''
sg = Sandgate()
before = {c.id for c in sg.list_contexts()}

# --- execute_python in create_agent: state across calls ------------------------------
tool = execute_python_tool(sg)
check(tool.name == "execute_python" and tool.response_format == "content_and_artifact",
      "execute_python_tool: a tool named execute_python, content_and_artifact",
      (tool.name, tool.response_format))
check(set(tool.args) == {"code", "timeout"}, "its schema: code, timeout", tool.args)
agent = create_agent(script(call("execute_python", 1, code="x = 6*7"),
                            call("execute_python", 2, code="print(x)")), tools=[tool])
state = agent.invoke({"messages": [{"role": "user", "content": "compute"}]})
tms = tool_messages(state)
check(len(tms) == 2 and "42" in text_of(tms[1]),
      "an agent calls execute_python twice (x = 6*7, print(x)); the second answer carries 42",
      [m.content for m in tms])
check(state["messages"][-1].content == "done", "the loop ends with the model's answer")
check(tms and tms[1].artifact["stdout"] == "42\n" and tms[1].artifact["error"] is None,
      "the artifact is the execution (stdout, error)", tms and tms[1].artifact)
check(tms and "notebook_url" not in tms[1].artifact and "JupyterLab" not in text_of(tms[1]),
      "without --notebook-url neither the artifact nor the text has a link", tms and tms[1].artifact)

# --- images, exceptions, truncation ---------------------------------------------------------
agent = create_agent(script(
    call("execute_python", 1, code="import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\n"
         "plt.title('Trend')\nplt.xlabel('Day (d)')\nplt.show()"),
    call("execute_python", 2, code="def g():\n    raise KeyError('nope')\ng()"),
    call("execute_python", 3, code="print('y' * 50000)"),
    call("execute_python", 4, code="x + 1")), tools=[tool])
state = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
tms = tool_messages(state)
img = [b for b in (tms[0].content if tms and isinstance(tms[0].content, list) else [])
       if b.get("type") == "image"]
check(img and img[0].get("mime_type") == "image/png" and
      base64.b64decode(img[0]["base64"])[:4] == b"\x89PNG",
      "a matplotlib plot comes back as an image content block", tms and tms[0].content)
check(tms and any("image/png" in r for r in tms[0].artifact["results"]),
      "and in the artifact", tms and tms[0].artifact)
t = text_of(tms[0]) if tms else ""
check('[chart: line "Trend"; x: Day (d)]' in t and
      "Line 0: (0.0, 3.0), (1.0, 1.0), (2.0, 2.0)" in t,
      "the plot's data comes back as text too (type, title, axes, points)", t)
t = text_of(tms[1]) if len(tms) > 1 else ""
check("Traceback" in t and "KeyError: 'nope'" in t and "g()" in t and "\x1b[" not in t,
      "an exception comes back as its traceback, as text", t)
check(len(tms) > 1 and tms[1].status != "error" or "KeyError" in t,
      "and not as an exception in the loop (the loop went on)", len(tms))
t = text_of(tms[2]) if len(tms) > 2 else ""
check(len(t) < 21000 and "characters truncated" in t, "long output is truncated with a marker",
      len(t))
check(len(tms) == 4 and text_of(tms[3]) == "43", "the kernel kept x through all that",
      [text_of(m) for m in tms])

# --- thread ids: one context each -------------------------------------------------------------
from langgraph.checkpoint.memory import InMemorySaver
tool = execute_python_tool(sg)
def run_thread(tid, code):
    agent = create_agent(script(call("execute_python", 1, code=code)), tools=[tool],
                         checkpointer=InMemorySaver())
    st = agent.invoke({"messages": [{"role": "user", "content": "go"}]},
                      {"configurable": {"thread_id": tid}})
    return text_of(tool_messages(st)[-1])
run_thread("thread-a", "who = 'a'")
run_thread("thread-b", "who = 'b'")
a, b = run_thread("thread-a", "who"), run_thread("thread-b", "who")
pool = tool.metadata["sandgate_contexts"]
check(a == "'a'" and b == "'b'" and len(set(pool.by_thread.values())) == 2,
      "two thread ids get two contexts, each keeping its variables", (a, b, pool.by_thread))

# --- errors never raise; a vanished context is replaced --------------------------------------------
bad = execute_python_tool(Sandgate(token="wrong-token-qqqqqqqqqq"))
out = bad.invoke({"type": "tool_call", "name": "execute_python", "id": "c1",
                  "args": {"code": "1"}})
check(isinstance(out, ToolMessage) and "unauthorized" in text_of(out),
      "a sandgate error (bad token) is the tool's output, not an exception", out)
cid = pool.by_thread["thread-a"]
sg.delete_context(cid)
t = run_thread("thread-a", "1 + 1")
check("2" in t and "new one" in t, "a deleted context is replaced and the tool says so", t)

# --- async -------------------------------------------------------------------------------------
async def go():
    agent = create_agent(script(call("execute_python", 1, code="z = 7"),
                                call("execute_python", 2, code="z * 6")), tools=[tool])
    return await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]})
st = asyncio.run(go())
check(text_of(tool_messages(st)[-1]) == "42", "ainvoke: the async tool keeps state too",
      [m.content for m in tool_messages(st)])

# --- the shell tool, sharing the context ------------------------------------------------------------
py, sh = sandgate_tools(sg)
agent = create_agent(script(
    call("execute_python", 1, code="open('note.txt', 'w').write('from python')"),
    call("execute_command", 2, command="cat note.txt; echo; exit 3")), tools=[py, sh])
state = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
t = text_of(tool_messages(state)[-1])
check(sh.name == "execute_command" and "from python" in t and "[exit code 3]" in t,
      "execute_command runs in the same context; a failure is reported, not raised", t)

# --- tools on a template: each conversation's context starts from it -------------------------------
tpy, tsh = sandgate_tools(sg, template="pd")
agent = create_agent(script(call("execute_python", 1, code="pd.__name__"),
                            call("execute_command", 2, command="echo shared")), tools=[tpy, tsh])
state = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
tms = tool_messages(state)
tpool = tpy.metadata["sandgate_contexts"]
tids = list(tpool.by_thread.values())
check(len(tms) == 2 and text_of(tms[0]) == "'pandas'" and "shared" in text_of(tms[1]) and
      len(tids) == 1 and sg.get_context(tids[0]).template == "pd",
      "sandgate_tools(template=): the tools' context is the template's (its preload, no import)",
      ([text_of(m) for m in tms], tids))
with sg.context(template="pd") as tc:
    pinned = execute_python_tool(sg, context=tc)
    out = pinned.invoke({"type": "tool_call", "name": "execute_python", "id": "t1",
                         "args": {"code": "int(pd.DataFrame({'a': [1, 2]}).a.sum())"}})
    check(text_of(out) == "3", "execute_python_tool(context=) on a context from a template",
          text_of(out))

# --- tools for other languages: a JavaScript context, a TypeScript one ----------------------------
jst = execute_code_tool(sg, language="js")
check(jst.name == "execute_javascript" and "JavaScript" in jst.description and
      "Python" not in jst.description and "Python" not in str(jst.args),
      "execute_code_tool(language='js') is execute_javascript, described for JavaScript",
      (jst.name, jst.description, jst.args))
agent = create_agent(script(call("execute_javascript", 1, code="let total = 0; total += 40"),
                            call("execute_javascript", 2, code="total += 2; `total=${total}`")),
                     tools=[jst])
state = agent.invoke({"messages": [{"role": "user", "content": "count in JavaScript"}]})
tms = tool_messages(state)
jids = list(jst.metadata["sandgate_contexts"].by_thread.values())
check(len(tms) == 2 and text_of(tms[1]) == '"total=42"' and len(jids) == 1 and
      sg.get_context(jids[0]).language == "javascript",
      "the JavaScript tool's context is a javascript one and keeps its variables",
      ([text_of(m) for m in tms], jids))
out = jst.invoke({"type": "tool_call", "name": "execute_javascript", "id": "j3",
                  "args": {"code": "undefinedThing.x"}})
check("ReferenceError" in text_of(out) and out.artifact["error"]["name"] == "ReferenceError",
      "a JavaScript exception is the tool's output (name and message), not raised",
      (text_of(out), out.artifact.get("error")))
tst = execute_code_tool(sg, language="typescript")
outs = [tst.invoke({"type": "tool_call", "name": "execute_typescript", "id": f"t{i}",
                    "args": {"code": code}}) for i, code in enumerate((
                        "interface Pt { x: number; y: number }\n"
                        "function dist2(p: Pt): number { return p.x ** 2 + p.y ** 2 }\n"
                        "dist2({ x: 3, y: 4 })",
                        "const far: Pt = { x: 6, y: 8 }; dist2(far)"))]
check(tst.name == "execute_typescript" and [text_of(o) for o in outs] == ["25", "100"],
      "execute_code_tool(language='typescript') runs typed code and keeps its interface and "
      "function", [text_of(o) for o in outs])
for tl in (tool, py, tpy, jst, tst):
    tl.metadata["sandgate_contexts"].close()

# --- Deep Agents: SandgateSandbox as the backend ----------------------------------------------------
from deepagents import create_deep_agent
from sandgate.deepagents import SandgateSandbox
with SandgateSandbox(sg) as box:
    r = box.execute("echo hi; echo err >&2; exit 4")
    check(r.output == "hi\nerr\n" and r.exit_code == 4 and not r.truncated,
          "SandgateSandbox.execute: output, exit code", r)
    up = box.upload_files([("/home/user/a/b.txt", b"bee"), ("/tmp/t.txt", b"tee"),
                           ("/proc/nope/x", b"x")])
    check([u.error for u in up][:2] == [None, None] and up[2].error,
          "upload_files: the workspace, /tmp (by command), an error per file", up)
    dn = box.download_files(["/home/user/a/b.txt", "/tmp/t.txt", "/home/user/none",
                             "/home/user/a"])
    check([x.content for x in dn[:2]] == [b"bee", b"tee"] and dn[2].error == "file_not_found"
          and dn[3].error == "is_directory", "download_files", dn)
    model = script(
        call("write_file", 1, file_path="/home/user/hello.py",
             content="def greet():\n    return 'hello from sandgate'\nprint(greet())\n"),
        call("grep", 2, pattern="greet", path="/home/user", output_mode="content"),
        call("execute", 3, command="python3 /home/user/hello.py"),
        call("edit_file", 4, file_path="/home/user/hello.py", old_string="hello from",
             new_string="edited in"),
        call("read_file", 5, file_path="/home/user/hello.py"),
        call("ls", 6, path="/home/user"),
        call("glob", 7, pattern="**/*.py", path="/home/user"))
    agent = create_deep_agent(model=model, backend=box)
    state = agent.invoke({"messages": [{"role": "user", "content": "write, grep, run"}]})
    tms = {m.name: text_of(m) for m in tool_messages(state)}
    check("hello.py" in tms.get("write_file", ""), "a Deep Agent writes a file",
          tms.get("write_file"))
    check("1: def greet" in tms.get("grep", "") and "3: print(greet())" in tms.get("grep", ""),
          "greps it (file, line numbers, lines)", tms.get("grep"))
    check("hello from sandgate" in tms.get("execute", ""), "and executes it",
          tms.get("execute"))
    check("edited in sandgate" in tms.get("read_file", ""), "edit_file and read_file",
          tms.get("read_file"))
    check("hello.py" in tms.get("ls", "") and "hello.py" in tms.get("glob", ""),
          "ls and glob", (tms.get("ls"), tms.get("glob")))
    check(box.client.run_command("cat hello.py", context=box.id).stdout.startswith("def greet"),
          "the file is in the context's workspace")
    box_id = box.id
check(box_id not in {c.id for c in sg.list_contexts()}, "the sandbox's context goes at close")

# --- sandgate's MCP tools via langchain-mcp-adapters in a LangGraph agent -----------------------------
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.prebuilt import create_react_agent

async def mcp():
    client = MultiServerMCPClient({"sandgate": {
        "transport": "streamable_http", "url": os.environ["SANDGATE_URL"] + "/mcp",
        "headers": {"Authorization": "Bearer " + os.environ["SANDGATE_TOKEN"]}}})
    async with client.session("sandgate") as session:
        tools = await load_mcp_tools(session)
        names = sorted(t.name for t in tools)
        agent = create_react_agent(script(call("execute_python", 1, code="x = 6*7"),
                                          call("execute_python", 2, code="print(x)")), tools)
        st = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]})
        return names, tool_messages(st)
names, tms = asyncio.run(mcp())
check("execute_python" in names and "execute_code" in names and "write_file" in names,
      "langchain-mcp-adapters loads sandgate's MCP tools", names)
check(len(tms) == 2 and "42" in text_of(tms[1]),
      "a LangGraph agent runs execute_python through MCP (state kept: 42)",
      [m.content for m in tms])

left = {c.id for c in sg.list_contexts()} - before
check(len(left) <= 1, "the tools' contexts are deleted at close (the MCP session's may stay)",
      left)
'''

# A server with --notebook-url: the tool's artifact carries the context's
# link, and its text ends with it, for the model to hand to a person.
NOTEBOOK_URL = "https://hub.example.org/user/alice/lab?kernel={kernel_id}"
LINKS = PRELUDE + r'''
sg = Sandgate()
link_of = lambda cid: os.environ["SG_NOTEBOOK_URL"].replace("{kernel_id}", cid)
tool = execute_python_tool(sg)
agent = create_agent(script(call("execute_python", 1, code="x = 6*7"),
                            call("execute_python", 2, code="x")), tools=[tool])
tms = tool_messages(agent.invoke({"messages": [{"role": "user", "content": "compute"}]}))
cid = tms[0].artifact.get("context_id") if tms else None
check(len(tms) == 2 and cid and all(m.artifact.get("notebook_url") == link_of(cid) for m in tms),
      "with --notebook-url the artifact carries the context's notebook_url",
      [m.artifact for m in tms])
check(len(tms) == 2 and text_of(tms[1]) == "42\nOpen this session in JupyterLab: " + link_of(cid),
      "and the text ends with it, for the model to pass on", [text_of(m) for m in tms])
with sg.context() as ctx:
    pinned = execute_python_tool(sg, context=ctx.id)  # an id: its link is asked of the server
    out = pinned.invoke({"type": "tool_call", "name": "execute_python", "id": "p1",
                         "args": {"code": "1 + 1"}})
    check(ctx.notebook_url == link_of(ctx.id) and out.artifact.get("notebook_url") == ctx.notebook_url,
          "execute_python_tool(context=ID): the same link for a context given by its id",
          (ctx.info, out.artifact))
tool.metadata["sandgate_contexts"].close()
'''


def run_agents(d, code, what, **env):
    """Runs code in tests/.venv-langchain against daemon d; reports its checks."""
    tmp = tempfile.mkdtemp(prefix="sgt-pylc-")
    try:
        env = dict(os.environ, PYTHONPATH=PKG, SANDGATE_URL=d.url, SANDGATE_TOKEN=TOKEN, **env)
        r = subprocess.run([os.path.join(VENV, "bin", "python"), "-c", code],
                           capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
        try:
            checks = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            checks = []
        if not checks:
            ok(False, f"the {what} script ran", r.stdout[-3000:] + r.stderr[-5000:])
        for good, name, detail in checks:
            ok(good, name, detail)
        if checks and r.returncode != 0:
            ok(False, f"the {what} script exited cleanly", r.stderr[-5000:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


d = Daemon("--pool-size", "2", "--template", "pd=preload=import pandas as pd")
try:
    run_agents(d, AGENTS, "agent")
finally:
    d.stop()
d = Daemon("--pool-size", "1", "--notebook-url", NOTEBOOK_URL)
try:
    run_agents(d, LINKS, "notebook_url", SG_NOTEBOOK_URL=NOTEBOOK_URL)
finally:
    d.stop()
done()
