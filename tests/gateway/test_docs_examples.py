"""Every code example in README.md and docs/*.md, run against a real daemon.

The convention (docs are written for readers, so the marks are HTML
comments, invisible once rendered): the line just before a fenced block in
sh, bash, python or js says what the block is —

  <!-- example -->                 the test runs it;
  <!-- example: venv=NAME -->      python run by tests/.venv-NAME's
                                   interpreter (scripts/venv.sh makes it);
  <!-- not an example: REASON --> it is not run, for REASON (a real LLM, a
                                   cluster, an install into the system...),
                                   reported as a TAP skip.

An unmarked block in one of those languages fails this test: a new example
gets run, or says why not.  Blocks in other languages (json, plain text)
are data and transcripts, not examples.

How an example runs: in a fresh directory holding in.csv (a header and 100
rows) and script.py (prints, and writes output/plot.png), with the daemon's
address in place of 127.0.0.1:49999 (a daemon with the template pd:
--template pd=preload=import pandas as pd) and its token in $TOKEN,
$SANDGATE_TOKEN and $SANDGATE_API_KEY (and $SANDGATE_URL).  sh runs under bash -e -o pipefail,
with sandgate-cli on the PATH (clients/python); in an sh block a line
starting with '{' is output the commands above it print: some line they
print must be JSON with the same keys and values (values that vary —
times, sizes, counts, ids, URLs, strings with '…' — aside), and no line
may be an error the docs do not show.  python runs with clients/python/src
importable and TOKEN and token defined; js is an ES module with `token`
defined, beside tests/node_modules and clients/js as `sandgate`.  Each must
exit 0."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from jsenv import project  # noqa: E402
from sgd import Daemon, TOKEN  # noqa: E402
from tap import ok, skip, done  # noqa: E402

SRC = os.path.abspath(os.environ.get("SG_SRCDIR", "."))
CODE = {"sh", "bash", "python", "js"}
MARK = re.compile(r"^<!--\s*(example(?::\s*venv=(\S+))?|not an example:\s*(.+?))\s*-->$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
VARYING = {"timestamp", "duration_ms", "size", "url", "execution_count", "id"}


def blocks(path):
    """(line, language, mark match or None, code) of each fenced block."""
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, lang = i, m.group(1), m.group(2)
        i += 1
        body = []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        mark = MARK.match(lines[before].strip()) if before >= 0 else None
        yield start + 1, lang, mark, "\n".join(body) + "\n"


def matches(want, got):
    if isinstance(want, str) and "…" in want:
        return True
    if isinstance(want, dict):
        return isinstance(got, dict) and all(
            k in got and (k in VARYING or matches(v, got[k])) for k, v in want.items())
    return want == got


def json_lines(text):
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def fixtures(work, url):
    with open(os.path.join(work, "in.csv"), "w") as f:
        f.write("x,y\n" + "".join(f"{i},{i * i}\n" for i in range(100)))
    with open(os.path.join(work, "script.py"), "w") as f:
        f.write("import os\nimport matplotlib.pyplot as plt\n"
                "os.makedirs('output', exist_ok=True)\n"
                "plt.plot([1, 2, 4]); plt.savefig('output/plot.png')\n"
                "print('plotted')\n")
    bindir = os.path.join(work, "bin")
    os.mkdir(bindir)
    cli = os.path.join(bindir, "sandgate-cli")
    with open(cli, "w") as f:
        f.write(f"#!/bin/sh\nexec /usr/bin/python3 -m sandgate \"$@\"\n")
    os.chmod(cli, 0o755)
    return dict(os.environ, TOKEN=TOKEN, SANDGATE_TOKEN=TOKEN, SANDGATE_API_KEY=TOKEN,
                SANDGATE_URL=url,
                PATH=bindir + ":" + os.environ["PATH"],
                PYTHONPATH=os.path.join(SRC, "clients/python/src"))


def run(lang, venv, code, url, name):
    """Runs one example; returns (passed, what to show when it failed)."""
    addr = url.split("://", 1)[1]
    code = code.replace("127.0.0.1:49999", addr).replace("localhost:49999", addr)
    work = project() if lang == "js" else tempfile.mkdtemp(prefix="sg-doc-")
    try:
        env = fixtures(work, url)
        documented = []
        if lang in ("sh", "bash"):
            script = [l for l in code.splitlines() if not l.startswith("{")]
            documented = [json.loads(l) for l in code.splitlines() if l.startswith("{")]
            argv = ["bash", "-e", "-o", "pipefail", "-c", "\n".join(script)]
        elif lang == "python":
            py = os.path.join(SRC, "tests", f".venv-{venv}", "bin", "python") if venv \
                else "/usr/bin/python3"
            if not os.path.exists(py):
                return False, f"{py} is missing: run scripts/venv.sh"
            argv = [py, "-c", "import os\nTOKEN = token = os.environ['SANDGATE_TOKEN']\n" + code]
        else:
            with open(os.path.join(work, "example.mjs"), "w") as f:
                f.write("const token = process.env.SANDGATE_TOKEN\n" + code)
            argv = ["node", "example.mjs"]
        try:
            r = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                               timeout=120)
        except subprocess.TimeoutExpired:
            return False, "timed out after 120 s (does it leave something open?)"
        show = f"exit {r.returncode}\n--- stdout\n{r.stdout[-2500:]}\n--- stderr\n{r.stderr[-2500:]}"
        if r.returncode != 0:
            return False, show
        got = json_lines(r.stdout)
        missing = [w for w in documented if not any(matches(w, g) for g in got)]
        errors = [g for g in got if isinstance(g, dict) and
                  (g.get("type") == "error" or g.get("error")) and
                  not any(matches(w, g) for w in documented)]
        if missing or errors:
            return False, f"documented but not printed: {missing}\nerrors: {errors}\n{show}"
        return True, None
    finally:
        shutil.rmtree(work, ignore_errors=True)


docs = [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
found = [(os.path.relpath(p, SRC), *b) for p in docs for b in blocks(p)]
examples = [f for f in found if f[2] in CODE]
ok(len(examples) >= 20, f"{len(examples)} code blocks in README.md and docs/")
unmarked = [f"{p}:{line}: {lang}" for p, line, lang, mark, _ in examples if mark is None]
ok(not unmarked, "every sh, python and js block is marked <!-- example --> or "
   "<!-- not an example: REASON -->", "\n".join(unmarked))
marked_other = [f"{p}:{line}: {lang or 'plain'}" for p, line, lang, mark, _ in found
                if mark and lang not in CODE]
ok(not marked_other, "marks are on code blocks only", "\n".join(marked_other))

# The docs' template examples (api.md, clients.md) use "pd".
d = Daemon("--pool-size", "1", "--template", "pd=preload=import pandas as pd", "--notebook-url",
           "https://hub.example.org/user/alice/lab?kernel={kernel_id}")
try:
    n = 0
    for path, line, lang, mark, code in examples:
        if mark is None:
            continue
        name = f"{path}:{line} ({lang})"
        if mark.group(3):
            skip(name, mark.group(3))
            continue
        passed, why = run(lang, mark.group(2), code, d.url, name)
        n += 1
        ok(passed, f"{name} runs", why)
    ok(n >= 8, f"{n} examples ran")
finally:
    d.stop()
done()
