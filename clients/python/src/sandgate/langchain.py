"""LangChain tools backed by sandgate (needs the `langchain` extra:
`pip install 'sandgate[langchain]'`).

    from sandgate import Sandgate
    from sandgate.langchain import execute_python_tool, execute_code_tool
    tool = execute_python_tool(Sandgate())
    js = execute_code_tool(Sandgate(), language="javascript")  # execute_javascript

The tool keeps state: one context per tool instance, or one per LangGraph
thread when the run's config has `configurable.thread_id`.  Its content is
text (stdout, stderr, the value, the traceback of an exception) plus image
blocks for PNG/JPEG output; its artifact is the whole execution.  Nothing it
meets is raised into the agent loop: the model reads what went wrong."""
import asyncio
import threading
from typing import Optional

try:
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import StructuredTool
    from pydantic import BaseModel, Field
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("sandgate.langchain needs LangChain: pip install 'sandgate[langchain]' "
                      f"({e})") from e

try:
    from langchain_core.messages.content import create_image_block
except ImportError:  # older langchain-core: the same block by hand
    def create_image_block(*, base64, mime_type):
        return {"type": "image", "base64": base64, "mime_type": mime_type}

from . import SandgateError
from .errors import NotFoundError

MAX_OUTPUT_CHARS = 20000

PYTHON_DESCRIPTION = (
    "Run Python code in a persistent, sandboxed Jupyter kernel (no network unless the context "
    "has it). Variables, imports and files persist between calls. Returns stdout, stderr, the "
    "value of the last expression and, on an exception, its traceback; matplotlib figures and "
    "other images come back as images. Files written under output/ are reported. The working "
    "directory is /home/user.")
COMMAND_DESCRIPTION = (
    "Run a shell command (/bin/sh -c) in the same sandbox as the Python kernel, in its working "
    "directory /home/user. Returns stdout, stderr and the exit code.")


# The languages a tool names and describes: a context's language (as
# create_context takes it) -> (the name in execute_<name>, how it reads).
LANGUAGES = {"python": ("python", "Python"), "javascript": ("javascript", "JavaScript"),
             "js": ("javascript", "JavaScript"), "typescript": ("typescript", "TypeScript"),
             "ts": ("typescript", "TypeScript"), "r": ("r", "R"), "bash": ("bash", "Bash")}


def code_description(language):
    """execute_code_tool's default description for a language."""
    key, title = LANGUAGES.get(language.lower(), (language, language))
    if key == "python":
        return PYTHON_DESCRIPTION
    return (f"Run {title} code in a persistent, sandboxed Jupyter kernel (no network unless the "
            "context has it). Variables, functions and imports persist between calls. Returns "
            "stdout, stderr, the value of the last expression and, on an error, its message "
            "and trace; images come back as images. Files written under output/ are reported. "
            "The working directory is /home/user."
            + (" Type annotations are accepted (Deno's kernel) but not checked."
               if key == "typescript" else ""))


class PythonInput(BaseModel):
    code: str = Field(description="Python code to run; the last expression's value is returned")
    timeout: Optional[float] = Field(default=None, description="seconds (optional)")


class CodeInput(BaseModel):
    code: str = Field(description="code to run, in the tool's language; the last expression's "
                                  "value is returned")
    timeout: Optional[float] = Field(default=None, description="seconds (optional)")


class CommandInput(BaseModel):
    command: str = Field(description="a shell command")
    timeout: Optional[float] = Field(default=None, description="seconds (optional)")


class ThreadContexts:
    """Which sandgate context serves which conversation: one for calls
    without a thread id, one per LangGraph thread id.  Created on first
    use; a context that disappeared (deleted, culled) is replaced and the
    tool says so.  Share one between tools so that they see the same
    kernel and files; `close()` deletes the contexts it made.  With
    `snapshot` (a Snapshot or its id; create's), each new context starts
    from it: its variables and files, its context's language and cwd; with
    `template` (a name from Sandgate.templates()), from that template, in
    its kernel's language."""

    def __init__(self, client, language="python", context=None, **create):
        self.client = client
        self.language = language
        snap = create.get("snapshot")
        if snap is not None:  # the snapshot's language and cwd: nothing else with it
            self.language, create = None, {"snapshot": snap if isinstance(snap, str) else snap.id}
        elif create.get("template") is not None:  # the template names the kernel
            self.language = None
        self.create = create
        self.fixed = context if isinstance(context, (str, type(None))) else context.id
        self.links = {} if isinstance(context, (str, type(None))) else {context.id: context.notebook_url}
        self.by_thread = {}
        self.lock = threading.Lock()

    def key(self, config):
        return ((config or {}).get("configurable") or {}).get("thread_id")

    def get(self, config):
        """(context id, whether it was made just now)."""
        if self.fixed:
            return self.fixed, False
        k = self.key(config)
        with self.lock:
            if k in self.by_thread:
                return self.by_thread[k], False
        ctx = self.client.create_context(language=self.language, **self.create)
        self.links[ctx.id] = ctx.notebook_url
        with self.lock:
            if k in self.by_thread:  # another call won the race
                extra = ctx.id
            else:
                self.by_thread[k], extra = ctx.id, None
        if extra:
            self.client.delete_context(extra)
        return self.by_thread[k], True

    def forget(self, config, context_id):
        with self.lock:
            k = self.key(config)
            if self.by_thread.get(k) == context_id:
                del self.by_thread[k]

    def run(self, config, fn):
        """fn(context_id) in this conversation's context; once more in a new
        context when the old one is gone.  Returns (value, note)."""
        cid, _ = self.get(config)
        try:
            return fn(cid), ""
        except NotFoundError:
            if self.fixed:
                raise
            self.forget(config, cid)
            cid, _ = self.get(config)
            return fn(cid), ("[sandgate: the previous context was gone; this ran in a new one, "
                             "so earlier variables are lost]\n")

    def notebook_url(self, context_id):
        """The JupyterLab that opens the context's kernel (a server started
        with --notebook-url), else None; asked of the server once for a
        context given by its id."""
        if context_id not in self.links:
            try:
                self.links[context_id] = self.client.get_context(context_id).notebook_url
            except SandgateError:
                return None
        return self.links[context_id]

    def close(self):
        with self.lock:
            ids, self.by_thread = list(self.by_thread.values()), {}
        for cid in ids:
            try:
                self.client.delete_context(cid)
            except SandgateError:
                pass


def truncate(text, limit=MAX_OUTPUT_CHARS):
    """At most about `limit` characters: the head and the tail (where a
    traceback ends), and a marker saying how much was cut in between."""
    if limit is None or len(text) <= limit:
        return text
    head, tail = limit * 3 // 5, limit * 2 // 5
    return (text[:head] + f"\n[... {len(text) - head - tail} characters truncated ...]\n"
            + text[-tail:])


def _axis(label, unit):
    """An axis as its label, which holds its unit ("Time (s)"), or the unit alone."""
    return label or (f"({unit})" if unit else "")


def chart_text(chart, indent=""):
    """An e2b/chart (docs/api.md) as lines a model can read: type, title,
    axes and each element's values."""
    head = f"{indent}[chart: {chart.get('type')}"
    if chart.get("title"):
        head += f" \"{chart['title']}\""
    for a in ("x", "y"):
        if chart.get(f"{a}_label") or chart.get(f"{a}_unit"):
            head += f"; {a}: {_axis(chart.get(f'{a}_label'), chart.get(f'{a}_unit'))}"
    lines = [head + "]"]
    for e in chart.get("elements") or []:
        if chart.get("type") == "superchart":
            lines.append(chart_text(e, indent + "  "))
        elif "points" in e:
            lines.append(f"{indent}{e.get('label') or 'series'}: "
                         + ", ".join(f"({x}, {y})" for x, y in e["points"]))
        elif "angle" in e:
            lines.append(f"{indent}{e.get('label')}: {e['angle']:g} degrees")
        elif "median" in e:
            lines.append(f"{indent}{e.get('label')}: min {e['min']}, q1 {e['first_quartile']}, "
                         f"median {e['median']}, q3 {e['third_quartile']}, max {e['max']}, "
                         f"outliers {e.get('outliers') or []}")
        elif "value" in e:
            group = f" ({e['group']})" if e.get("group") else ""
            lines.append(f"{indent}{e.get('label')}{group}: {e['value']}")
    return "\n".join(lines)


def execution_text(ex):
    """The model's view of an Execution, as text."""
    parts = []
    if ex.stdout:
        parts.append(ex.stdout.rstrip("\n"))
    if ex.stderr:
        parts.append("[stderr]\n" + ex.stderr.rstrip("\n"))
    for r in ex.results:
        if r.is_main_result and r.text is not None:
            parts.append(r.text)
        elif not r.is_main_result and r.text is not None and not r.images():
            parts.append(r.text)
        if isinstance(r.chart, dict):
            parts.append(chart_text(r.chart))
    if ex.error:
        parts.append(ex.error.text)
    for a in ex.artifacts:
        parts.append(f"[file written: {a.path} ({a.size} bytes, {a.mime})]")
    return "\n".join(parts) if parts else "(no output)"


def _error_content(e):
    return f"Error from sandgate: {e}", {"error": str(e), "kind": getattr(e, "error", None)}


def execute_code_tool(client=None, *, language="python", context=None, contexts=None, name=None,
                      description=None, timeout=None, max_output_chars=MAX_OUTPUT_CHARS,
                      **create):
    """A LangChain tool (StructuredTool, `response_format="content_and_artifact"`)
    that runs code of `language` (python, javascript, typescript, js, ts, r,
    bash, or any installed kernel's) in sandgate: named execute_<language>
    (execute_javascript for js) and described for it unless `name` and
    `description` say otherwise.  `context`: always use this context (of
    that language); else `contexts` (a ThreadContexts, to share with other
    tools of the same language) or a new one (contexts per thread id,
    created with `language` and `create`'s cwd/internet, or from `create`'s
    snapshot or template).  `timeout`: the default per call, in seconds."""
    if client is None:
        from . import Sandgate
        client = Sandgate()
    pool = contexts or ThreadContexts(client, language=language, context=context, **create)

    def run(code: str, timeout: Optional[float] = None, config: RunnableConfig = None):
        try:
            ex, note = pool.run(config, lambda cid: client.execute(
                code, context=cid, timeout=timeout if timeout is not None else default_timeout))
        except (SandgateError, OSError) as e:
            return _error_content(e)
        text = truncate(note + execution_text(ex), max_output_chars)
        artifact = ex.to_dict()
        link = pool.notebook_url(ex.context_id) if ex.context_id else None
        if link:  # for the model as well, to hand the session to a person
            text += f"\nOpen this session in JupyterLab: {link}"
            artifact["notebook_url"] = link
        images = [create_image_block(base64=data, mime_type=mime)
                  for r in ex.results for mime, data in r.images()]
        content = [{"type": "text", "text": text}] + images if images else text
        artifact["results"] = [dict(r.bundle, is_main_result=r.is_main_result)
                               for r in ex.results]
        return content, artifact

    async def arun(code: str, timeout: Optional[float] = None, config: RunnableConfig = None):
        return await asyncio.to_thread(run, code, timeout, config)

    default_timeout = timeout
    key = LANGUAGES.get(language.lower(), (language,))[0]
    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name or f"execute_{key}",
        description=description or code_description(language),
        args_schema=PythonInput if key == "python" else CodeInput,
        response_format="content_and_artifact", metadata={"sandgate_contexts": pool})


def execute_python_tool(client=None, *, name="execute_python", description=PYTHON_DESCRIPTION,
                        language="python", **kw):
    """execute_code_tool for Python: the tool execute_python (its
    `language` may name another kernel, which keeps the Python name)."""
    return execute_code_tool(client, language=language, name=name, description=description, **kw)


def execute_command_tool(client=None, *, context=None, contexts=None, name="execute_command",
                         description=COMMAND_DESCRIPTION, timeout=None,
                         max_output_chars=MAX_OUTPUT_CHARS, **create):
    """A LangChain tool that runs a shell command in a context's sandbox
    (the same contexts as execute_python_tool when given its `contexts`).
    A non-zero exit is reported, not raised."""
    if client is None:
        from . import Sandgate
        client = Sandgate()
    pool = contexts or ThreadContexts(client, context=context, **create)

    def run(command: str, timeout: Optional[float] = None, config: RunnableConfig = None):
        try:
            r, note = pool.run(config, lambda cid: client.run_command(
                command, context=cid, timeout=timeout if timeout is not None else default_timeout))
        except (SandgateError, OSError) as e:
            return _error_content(e)
        parts = [note.rstrip("\n")] if note else []
        if r.stdout:
            parts.append(r.stdout.rstrip("\n"))
        if r.stderr:
            parts.append("[stderr]\n" + r.stderr.rstrip("\n"))
        if r.error:
            parts.append(f"{r.error.name}: {r.error.value}")
        parts.append(f"[exit code {r.exit_code}]")
        return truncate("\n".join(parts), max_output_chars), r.to_dict()

    async def arun(command: str, timeout: Optional[float] = None, config: RunnableConfig = None):
        return await asyncio.to_thread(run, command, timeout, config)

    default_timeout = timeout
    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, description=description, args_schema=CommandInput,
        response_format="content_and_artifact", metadata={"sandgate_contexts": pool})


def sandgate_tools(client=None, **kw):
    """[execute_python, execute_command] sharing their contexts."""
    if client is None:
        from . import Sandgate
        client = Sandgate()
    pool = ThreadContexts(client, context=kw.pop("context", None),
                          **{k: kw.pop(k) for k in ("cwd", "internet", "snapshot", "template")
                             if k in kw})
    return [execute_python_tool(client, contexts=pool, **kw),
            execute_command_tool(client, contexts=pool, **kw)]
