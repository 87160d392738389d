"""The Python E2B SDK, unchanged (configured by E2B_API_URL, E2B_SANDBOX_URL
and E2B_API_KEY only): one sandbox holds several code contexts — Python,
JavaScript, Bash, R — that share its files and processes; run_code's envs in
each language; a sandbox killed during run_code.  Run by
tests/.venv-e2b's python.
usage: e2b_kernels.py  — prints one JSON line per check: {ok, name, detail}"""
import threading
import time

from e2b import TimeoutException
from e2b_code_interpreter import Sandbox
from checks import check, fails


def text(execution):
    return [r.text for r in execution.results] or execution.error


sbx = Sandbox.create(envs={"SHARED_ENV": "everywhere"})
sbx.files.write("/home/user/data.txt", "written by files.write")
sbx.run_code("x = 'python default'; open('from_py.txt', 'w').write('made by python')")

js = sbx.create_code_context(language="javascript")
check(js.id != sbx.sandbox_id and js.language == "javascript",
      "create_code_context(javascript): a context of its own", js)
r = sbx.run_code("Deno.readTextFileSync('/home/user/data.txt') + ' / ' + "
                 "Deno.readTextFileSync('from_py.txt')", context=js)
check("written by files.write / made by python" in str(text(r)),
      "the JavaScript context reads the files that files.write and Python wrote", text(r))
sbx.run_code("Deno.writeTextFileSync('from_js.txt', 'made by javascript')", context=js)
check(sbx.files.read("/home/user/from_js.txt") == "made by javascript",
      "and what it writes, files.read reads", sbx.files.read("/home/user/from_js.txt"))
r = sbx.run_code("open('from_js.txt').read()")
check(text(r) == ["made by javascript"], "and so does the default Python context", text(r))

r = sbx.run_code("console.log(6 * 7)", language="javascript")
check(r.logs.stdout == ["42\n"], "run_code(language=javascript) runs in the sandbox's own "
      "JavaScript context", r)
r = sbx.run_code("Deno.readTextFileSync('data.txt')", language="javascript")
check("written by files.write" in str(text(r)), "... which sees the same files", text(r))

sh = sbx.create_code_context(language="bash")
r = sbx.run_code("cat from_js.txt; echo; ls /home/user | sort | tr '\\n' ' '", context=sh)
check(r.logs.stdout and "made by javascript" in "".join(r.logs.stdout) and
      "data.txt from_js.txt from_py.txt" in "".join(r.logs.stdout),
      "a Bash context sees them too", r)

py2 = sbx.create_code_context(language="python")
r = sbx.run_code("'x' in dir(), open('from_py.txt').read()", context=py2)
check(text(r) == ["(False, 'made by python')"],
      "a second Python context: its own variables, the same files", text(r))
r = sbx.run_code("import os; open('py2_pid', 'w').write(str(os.getpid()))", context=py2)
r = sbx.run_code("import os; os.path.exists('/proc/' + open('py2_pid').read())")
check(text(r) == ["True"], "and one process space: the default context sees its process",
      text(r))
r = sbx.run_code("Deno.env.get('SHARED_ENV')", context=js)
r2 = sbx.run_code("echo $SHARED_ENV", context=sh)
r3 = sbx.commands.run("echo $SHARED_ENV")
check("everywhere" in str(text(r)) and "".join(r2.logs.stdout).strip() == "everywhere" and
      r3.stdout.strip() == "everywhere",
      "create(envs=...): every context of the sandbox and its commands have them",
      (text(r), r2.logs, r3.stdout))
r = sbx.commands.run("cat /home/user/from_js.txt")
check(r.stdout == "made by javascript", "commands.run acts on the same sandbox", r.stdout)

listed = sbx.list_code_contexts()
ids = {c.id for c in listed}
langs = sorted(c.language for c in listed)
check(ids >= {sbx.sandbox_id, js.id, sh.id, py2.id} and
      langs == ["bash", "javascript", "javascript", "python", "python"],
      "list_code_contexts: the sandbox's five (its own, the three made, run_code's JavaScript)",
      listed)
sbx.remove_code_context(py2)
ids = [c.id for c in sbx.list_code_contexts()]
check(py2.id not in ids and js.id in ids, "remove_code_context removes one, the others stay",
      ids)
check(text(sbx.run_code("x")) == ["python default"], "the default context keeps its variables")

# run_code's envs: for that run only, in every kernel's language; the sandbox's come back.
tricky = "it's \"q\" $HOME"
seen = {}
for lang, ctx, show in (
        ("bash", sh, 'echo "$SHARED_ENV|${EXTRA-none}"'),
        ("javascript", js,
         "console.log(`${process.env.SHARED_ENV}|${process.env.EXTRA ?? 'none'}`)"),
        ("r", None, "cat(Sys.getenv('SHARED_ENV'), Sys.getenv('EXTRA', 'none'), sep = '|')")):
    kw = {"context": ctx} if ctx else {"language": lang}
    runs = [sbx.run_code(show, envs={"SHARED_ENV": tricky, "EXTRA": "x"}, **kw),
            sbx.run_code(show, **kw)]
    seen[lang] = ["".join(r.logs.stdout).strip() for r in runs]
check(seen == {lang: [f"{tricky}|x", "everywhere|none"] for lang in ("bash", "javascript", "r")},
      "run_code(envs=...) in Bash, JavaScript and R: set for that run, then as before", seen)
one = [sbx.run_code("cat(Sys.getenv('ONLY', 'unset'))", language="r", **kw).logs.stdout
       for kw in ({"envs": {"ONLY": "1"}}, {})]
check(one == [["1"], ["unset"]], "... one variable alone too (R names a lone one otherwise)", one)
for c in sbx.list_code_contexts():
    if c.language == "r":
        sbx.remove_code_context(c)

other = Sandbox.create()
r = other.run_code("import os; os.path.exists('/home/user/from_js.txt')")
check(text(r) == ["False"], "another sandbox does not see them", text(r))
# A new sandbox's list has its default Python and JavaScript contexts, as E2B's
# has; those made after come after them.
first = other.list_code_contexts()
made = other.create_code_context()
last = other.list_code_contexts()
check(sorted(c.language for c in first) == ["javascript", "python"] and
      last[-1].id == made.id and [c.id for c in last[:2]] == [c.id for c in first],
      "list_code_contexts: a new sandbox's default Python and JavaScript first", (first, last))
# Restarts of a context end its kernel only: 8 in a row, with its relayed
# connections open (sandgate-init once crashed when a kernel's connections
# closed while it started the next one: 1 restart in 4 ended the sandbox).
errors = []
for i in range(8):
    other.run_code(f"v = {i}", context=made)
    other.restart_code_context(made)
    r = other.run_code("v", context=made)
    errors.append(r.error.name if r.error else None)
check(errors == ["NameError"] * 8 and text(other.run_code("1 + 1")) == ["2"],
      "restart_code_context 8 times: each a fresh kernel, the sandbox's own lives on", errors)
js_default = next(c for c in first if c.language == "javascript")
check(text(other.run_code("1 + 1", context=js_default)) == ["2"] and
      text(other.run_code("2 + 2", language="javascript")) == ["4"],
      "its JavaScript context runs code, and is run_code(language='javascript')'s", js_default)
other.kill()

# Metrics: sampled every 5 s from the sandbox's cgroup and workspace.
first = sbx.get_metrics()
check(first and first[-1].cpu_count >= 1 and 0 < first[-1].mem_used <= first[-1].mem_total and
      0 < first[-1].disk_used < first[-1].disk_total, "get_metrics: CPUs, memory and disk", first)
# 11 s busy: at least one whole 5-s sample lies inside it, however the samples fall.
sbx.run_code("import time\nt = time.time()\nwhile time.time() - t < 11: pass")
later = first
for _ in range(30):
    later = [m for m in sbx.get_metrics() if m.timestamp > first[-1].timestamp]
    if len(later) >= 2:
        break
    time.sleep(0.5)
check(later and max(m.cpu_used_pct for m in later) > 20,
      "a busy kernel shows in cpu_used_pct", (first, later))

listed = [s.sandbox_id for s in Sandbox.list().next_items()]
check(sbx.sandbox_id in listed and js.id not in listed and sh.id not in listed,
      "Sandbox.list() lists the sandbox, not its code contexts", listed)
sbx.run_code("var kept = 7", context=js)
sbx.pause()
again = Sandbox.connect(sbx.sandbox_id)
r = again.run_code("kept * 6", context=js)
check(text(r) == ["42"] and text(again.run_code("x")) == ["python default"],
      "pause() and connect(): every context of the sandbox keeps its variables", text(r))

sid = sbx.sandbox_id
check(Sandbox.kill(sid) is True and again.is_running() is False,
      "Sandbox.kill ends the sandbox (is_running: False)")

# Created, then paused at once: create answers once the sandbox runs.
fresh = Sandbox.create()
fresh.pause()
check(fresh.is_running() is False, "a sandbox paused right after create() pauses")
fresh.kill()
# Killed while run_code runs: the stream is cut, and the SDK says the sandbox was killed.
doomed = Sandbox.create()
threading.Timer(2.0, doomed.kill).start()
e = fails(doomed.run_code, "import time; time.sleep(300)", timeout=300)
check(isinstance(e, TimeoutException) and "killed while the request was in progress" in str(e),
      "a sandbox killed during run_code: the SDK's own 'killed' error", repr(e))
print("#SANDBOX", sid, js.id, sh.id, flush=True)
