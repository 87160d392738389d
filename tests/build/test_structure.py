"""The code stays readable in the ways docs/architecture.md promises.

- No C file in gateway/ or kernelmgr/ over 900 lines, no function in any
  C file of the daemon (common/, proto/, kernelmgr/, gateway/) over 120.
- http.c knows no front end and no kernel manager: gateway/http/http.h includes
  nothing of kernelmgr/, http.c nothing of the front ends.
- No Python source inside C strings: the code sandgate runs in kernels lives
  in .py files (a C string literal holding "import NAME as", "import
  NAME;" or "import NAME\\n", "def NAME(" or "from NAME import" is Python).
- Launcher operations are named in one table: no strcmp against an
  operation's name in launcher.c or kernelmgr/sandbox/link.c.
- A test file shares one started daemon among its cases: two daemons with
  the same options in one file are allowed only where a line just above
  the second says why it needs a fresh one ("# fresh: WHY").

Functions are found the way clang-format lays them out here: a body's '{'
and '}' at the start of a line."""
import glob
import os
import re

from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
MAX_FILE, MAX_FUNC = 900, 120


def src(*patterns):
    return sorted(p for pat in patterns
                  for p in glob.glob(os.path.join(SRC, pat), recursive=True))


def functions(path):
    """(name, first line, length) of each function body in path."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, start, name = [], None, None
    for i, line in enumerate(lines):
        if start is None and line.startswith("{") and i > 0:
            j = i - 1
            while j > 0 and "(" not in lines[j]:
                j -= 1
            m = re.search(r"(\w+)\s*\(", lines[j])
            start, name = i, m.group(1) if m else lines[j].strip()
        elif start is not None and line.startswith("}"):
            out.append((name, start, i - start + 1))
            start = None
    return out


long_files = []
for path in src("gateway/**/*.c", "kernelmgr/**/*.c"):
    n = sum(1 for _ in open(path, encoding="utf-8"))
    if n > MAX_FILE:
        long_files.append(f"{os.path.relpath(path, SRC)}: {n} lines")
ok(not long_files, f"no C file in gateway/ or kernelmgr/ over {MAX_FILE} lines", long_files)

long_funcs, counted = [], 0
for path in src("common/**/*.c", "proto/**/*.c", "kernelmgr/**/*.c", "gateway/**/*.c"):
    for name, line, n in functions(path):
        counted += 1
        if n > MAX_FUNC:
            long_funcs.append(f"{os.path.relpath(path, SRC)}:{line + 1}: {name}: {n} lines")
diag(f"{counted} functions")
ok(counted > 500, "the function finder finds the functions", counted)
ok(not long_funcs, f"no function over {MAX_FUNC} lines", long_funcs)

http_h = open(os.path.join(SRC, "gateway/http/http.h")).read()
http_c = open(os.path.join(SRC, "gateway/http/http.c")).read()
ok("kernelmgr/" not in http_h, "gateway/http/http.h includes nothing of kernelmgr/")
front = re.findall(r'#include "(gateway/(?:rest|jupyter|mcp|envd|session|files|commands|tenants)/\w+\.h|'
                   r'kernelmgr/[\w/]+\.h)"', http_c)
ok(not front, "gateway/http/http.c includes no front end and no kernel manager", front)

python_in_c = []
for path in src("gateway/**/*.c", "kernelmgr/**/*.c"):
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r'"[^"\n]*?\b(import \w+(?: as |;|\\n)|def \w+\(|from \w+ import)', text):
        python_in_c.append(f"{os.path.relpath(path, SRC)}: {m.group(1)}")
ok(not python_in_c, "no Python source in C strings (it lives in .py files)", python_in_c)

for path in ("kernelmgr/launcher/launcher.c", "kernelmgr/sandbox/link.c"):
    text = open(os.path.join(SRC, path)).read()
    ops = re.findall(r'strcmp\(\s*\w+\s*,\s*"(\w+)"\s*\)', text)
    ok(not ops, f"{path} matches no operation name with strcmp", ops)



def daemon_starts(text):
    """(line, options) of each Daemon(...) a test starts."""
    for m in re.finditer(r"\bDaemon\(", text):
        i, depth = m.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text.count("\n", 0, m.start()), re.sub(r"\s+", " ", text[m.end():i - 1])


starts, repeated = 0, []
for path in src("tests/**/test_*.py"):
    text = open(path, encoding="utf-8").read()
    lines, seen = text.split("\n"), set()
    for n, opts in daemon_starts(text):
        starts += 1
        if opts in seen and not any("# fresh:" in l for l in lines[max(0, n - 3):n + 1]):
            repeated.append(f"{os.path.relpath(path, SRC)}:{n + 1}: Daemon({opts})")
        seen.add(opts)
ok(starts > 50, "the daemon finder finds the tests' daemons", starts)
ok(not repeated, "no test file starts a second daemon with the same options without saying "
   "why it needs a fresh one (# fresh: WHY)", repeated)

done()
