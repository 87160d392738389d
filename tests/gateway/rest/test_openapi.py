"""docs/openapi.yaml, the REST API's description, against the daemon that
serves it, the docs and the code.

- The spec validates as OpenAPI 3.1 (openapi-spec-validator).
- GET /openapi.json answers without a token, and is the YAML as JSON.
- The same routes three ways: the spec's paths, docs/api.md's (its headings
  and route tables), and the REST route tables in gateway/rest/*.c.  A route
  added to one and not the others fails here.
- docs/api.md's JSON examples validate against the spec's schemas (each is
  matched to one by its keys), and an execution's real NDJSON lines and
  JSON-mode document against ExecuteLine and ExecuteResult.
- schemathesis, against a live daemon with real runsc, checks every answer
  (not_a_server_error, status_code_conformance, content_type_conformance,
  response_schema_conformance): first its examples, coverage and fuzzing
  phases, a bounded number of cases per operation, the {context} of every
  operation but DELETE a real context (so the files routes reach files);
  then its stateful phase, which follows the spec's links (create a
  context, execute, files, pause, delete).  0 failures.

schemathesis and openapi-spec-validator are in tests/.venv-openapi
(tests/requirements-openapi.txt, made by scripts/venv.sh).  SG_OPENAPI_SEED
replays a run (schemathesis prints its seed); SG_OPENAPI_EXAMPLES sets the
cases per operation of the first run (25)."""
import json
import os
import re
import subprocess
import tempfile
import time

import yaml

from sgd import Daemon, TOKEN
from tap import ok, diag, done

SRC = os.path.abspath(os.environ.get("SG_SRCDIR", "."))
VENV = os.path.join(SRC, "tests", ".venv-openapi", "bin")
SPEC_PATH = os.path.join(SRC, "docs", "openapi.yaml")
API_MD = os.path.join(SRC, "docs", "api.md")
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
METHODS = ("get", "put", "post", "delete", "patch")
MISSING = "00000000-0000-4000-8000-000000000000"

spec = yaml.safe_load(open(SPEC_PATH, encoding="utf-8"))


def venv_python(code, *args, stdin=None):
    """Runs code under the venv's python: (exit status, stdout + stderr)."""
    r = subprocess.run([os.path.join(VENV, "python"), "-c", code, *args], input=stdin,
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


# Validates the JSON documents on stdin ([[schema name, document], ...])
# against the spec's schemas: one line per document, "ok" or why not.
VALIDATE = r"""
import json, sys, yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
spec = yaml.safe_load(open(sys.argv[1]))
registry = Registry().with_resource(
    "urn:spec", Resource.from_contents(spec, default_specification=DRAFT202012))
for name, doc in json.load(sys.stdin):
    v = Draft202012Validator({"$ref": "urn:spec#/components/schemas/" + name}, registry=registry)
    # A string with '…' in an example is a placeholder (tests/gateway/
    # test_docs_examples.py's convention): it stands for any valid value.
    errs = sorted(e.message for e in v.iter_errors(doc)
                  if not (isinstance(e.instance, str) and "\u2026" in e.instance))
    print("ok" if not errs else "; ".join(errs)[:300])
"""


def validate(pairs):
    """[(schema name, document)] -> a list of "ok" or the errors."""
    rc, out = venv_python(VALIDATE, SPEC_PATH, stdin=json.dumps(pairs))
    lines = out.strip().splitlines()
    return lines if rc == 0 and len(lines) == len(pairs) else [out[-1500:]] * len(pairs)


# --- the spec itself ----------------------------------------------------------

def check_spec():
    if not ok(os.access(os.path.join(VENV, "schemathesis"), os.X_OK),
              "tests/.venv-openapi has schemathesis (run scripts/venv.sh)"):
        return False
    rc, out = venv_python(
        "import sys, yaml\n"
        "from openapi_spec_validator import validate\n"
        "from openapi_spec_validator.validation import OpenAPIV31SpecValidator\n"
        "validate(yaml.safe_load(open(sys.argv[1])), cls=OpenAPIV31SpecValidator)\n",
        SPEC_PATH)
    ok(rc == 0, "docs/openapi.yaml validates as OpenAPI 3.1", out[-2000:])
    ok(str(spec.get("openapi", "")).startswith("3.1"), "it says openapi: 3.1.x")
    # What the HTTP layer answers on any route (http.c, libmicrohttpd), and on
    # any route that needs a key, each operation must list.
    lacking = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            public = op.get("security") == []
            want = {"400", "414", "431"} | (set() if public else {"401", "429"})
            if want - set(op["responses"]):
                lacking.append(f"{method.upper()} {path}: {sorted(want - set(op['responses']))}")
    ok(not lacking, "every operation lists the statuses the HTTP layer can answer on it "
       "(400 %00, 414, 431; 401 and 429 unless public)", lacking)
    return True


# --- the same routes three ways -------------------------------------------------

def spec_routes():
    return {(m.upper(), p) for p, item in spec["paths"].items() for m in item if m in METHODS}


def docs_routes():
    """docs/api.md's routes: its `METHOD /path` headings and the first cell of
    its route tables, ids named as the spec names them; a query
    (`/files?path=/tmp/a.csv`) is a parameter of the path's operation, not
    a route of its own."""
    found = set()
    for line in open(API_MD, encoding="utf-8"):
        m = (re.match(r"^#+ `(GET|PUT|POST|DELETE|PATCH) (/\S*)`", line) or
             re.match(r"^\| `(GET|PUT|POST|DELETE|PATCH) (/[^\s`]*)", line))
        if m:
            path = re.sub(r"\{(file|dir|path)\}", "{path}", m.group(2).split("?")[0])
            found.add((m.group(1), path.replace("{id}", "{context}")))
    return found


def daemon_routes():
    """The REST front end's route tables (gateway/rest/*.c): (method, pattern).
    Not e2b.c's: E2B's sandbox API is E2B's, described by E2B's own spec
    (docs/clients.md), and tested with E2B's SDKs (test_e2b_sandboxes.py)."""
    found = set()
    for name in sorted(os.listdir(os.path.join(SRC, "gateway", "rest"))):
        if name.endswith(".c") and name != "e2b.c":
            text = open(os.path.join(SRC, "gateway", "rest", name), encoding="utf-8").read()
            found |= set(re.findall(r'\{"(GET|PUT|POST|DELETE|PATCH)", "(/[^"]*)"', text))
    return found


def covers(pattern, route):
    """Whether the daemon's pattern serves the spec's (method, path): a
    trailing '*' takes the bare path and {path}, which may have slashes."""
    if pattern[0] != route[0]:
        return False
    if pattern[1].endswith("/*"):
        base = pattern[1][:-2]
        return route[1] in (base, base + "/{path}")
    return pattern[1] == route[1]


def check_routes():
    in_spec, in_docs, in_code = spec_routes(), docs_routes(), daemon_routes()
    diag(f"routes: {len(in_spec)} in the spec, {len(in_docs)} in docs/api.md, "
         f"{len(in_code)} in gateway/rest/*.c")
    ok(len(in_code) >= 14, "the daemon's REST routes are found", sorted(in_code))
    missing = [f"{m} {p}" for m, p in sorted(in_code)
               if not any(covers((m, p), r) for r in in_spec)]
    ok(not missing, "every REST route the daemon serves is in the spec", missing)
    extra = [f"{m} {p}" for m, p in sorted(in_spec)
             if not any(covers(c, (m, p)) for c in in_code)]
    ok(not extra, "every route in the spec is one the daemon serves", extra)
    ok(in_docs - in_spec == set(), "every route docs/api.md names is in the spec",
       sorted(in_docs - in_spec))
    ok(in_spec - in_docs == set(), "every route in the spec is in docs/api.md",
       sorted(in_spec - in_docs))


# --- docs/api.md's JSON examples --------------------------------------------------

def schema_for(doc):
    """The spec's schema a JSON example of docs/api.md shows, by its keys."""
    if not isinstance(doc, dict):
        return None
    keys = set(doc)
    if keys >= {"name", "path", "type", "mode", "permissions"}:
        return "Entry"
    if doc.get("type") in ("start", "dropped", "exit"):
        return "CommandLine"
    if "type" in keys:
        return "ExecuteLine"
    if "quota" in keys:
        return "QuotaError"
    if keys >= {"error", "code", "message"}:
        return "FilesError"
    if keys >= {"error", "message"}:
        return "Error"
    if keys >= {"id", "pid", "cmd", "state"}:
        return "Command"
    if keys >= {"id", "pid", "exit_code"}:
        return "CommandOutput"
    if "exit_code" in keys:
        return "CommandResult"
    if "results" in keys:
        return "ExecuteResult"
    if "code" in keys or "command" in keys:
        return "ExecuteRequest"
    if keys >= {"id", "language", "state"}:
        return "Context"
    if keys >= {"id", "context_id", "created", "bytes"}:
        return "Snapshot"
    return None


def docs_examples():
    """(line, document) of each JSON document in docs/api.md's ```json
    blocks and of each output line ('{...}') of its sh blocks."""
    lines = open(API_MD, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start, body = m.group(1), i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if lang == "json":
            try:
                out.append((start, json.loads("\n".join(body))))
            except ValueError:
                out += [(start + k, json.loads(l)) for k, l in enumerate(body)
                        if l.strip().startswith("{")]
        elif lang == "sh":
            out += [(start + k, json.loads(l)) for k, l in enumerate(body)
                    if l.startswith("{")]
    return out


def check_docs_examples():
    examples = [(line, schema_for(doc), doc) for line, doc in docs_examples()]
    unmatched = [f"docs/api.md:{line}: {json.dumps(doc)[:100]}" for line, s, doc in examples
                 if s is None]
    ok(not unmatched, "every JSON example in docs/api.md is one of the spec's schemas",
       unmatched)
    pairs = [(s, doc) for _, s, doc in examples if s]
    verdicts = validate(pairs)
    bad = [f"docs/api.md:{line}: {s}: {v}" for (line, s, _), v in
           zip([e for e in examples if e[1]], verdicts) if v != "ok"]
    ok(len(pairs) >= 10 and not bad,
       f"docs/api.md's {len(pairs)} JSON examples validate against the spec", bad)


# --- a real execution against the schemas ------------------------------------------

def check_real_answers(d):
    code = ("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
            "from IPython.display import display, HTML\ndisplay(HTML('<b>x</b>'))\n"
            "open('output/a.txt', 'w').write('a')\n6 * 7")
    lines = d.execute(code)
    lines += d.execute("1/0")
    verdicts = validate([("ExecuteLine", l) for l in lines])
    bad = [f"{json.dumps(l)[:120]}: {v}" for l, v in zip(lines, verdicts) if v != "ok"]
    types = {l.get("type") for l in lines}
    ok(not bad and {"stdout", "stderr", "result", "error", "artifact"} <= types,
       f"an execution's {len(lines)} NDJSON lines are ExecuteLines", bad or sorted(types))
    status, _, body = d.request("POST", "/execute", {"code": "print(1)\n2"},
                                headers={"Accept": "application/json"})
    doc = json.loads(body)
    v = validate([("ExecuteResult", doc)])[0]
    ok(status == 200 and v == "ok", "the JSON mode's answer is an ExecuteResult", f"{doc}: {v}")
    status, _, body = d.request("POST", "/execute", {"command": "echo hi; exit 3"})
    doc = json.loads(body)
    v = validate([("CommandResult", doc)])[0]
    ok(status == 200 and v == "ok" and doc["exit_code"] == 3, "a command's answer is a "
       "CommandResult", f"{doc}: {v}")
    # /contexts/{context}/commands: a foreground stream, its JSON mode, a
    # background command and its status.
    _, ctx = d.json("POST", "/contexts", {})
    base = f"/contexts/{ctx['id']}/commands"
    status, _, body = d.request("POST", base, {"cmd": "echo out; echo err >&2; exit 3"})
    lines = [json.loads(l) for l in body.decode().splitlines() if l.strip()]
    verdicts = validate([("CommandLine", l) for l in lines])
    bad = [f"{json.dumps(l)[:120]}: {v}" for l, v in zip(lines, verdicts) if v != "ok"]
    ok(status == 200 and not bad and [l["type"] for l in lines][::len(lines) - 1] ==
       ["start", "exit"], f"a command's {len(lines)} NDJSON lines are CommandLines",
       bad or lines)
    status, _, body = d.request("POST", base, {"argv": ["echo", "hi"]},
                                headers={"Accept": "application/json"})
    doc = json.loads(body)
    v = validate([("CommandOutput", doc)])[0]
    ok(status == 200 and v == "ok", "its JSON mode's answer is a CommandOutput", f"{doc}: {v}")
    status, _, body = d.request("POST", base, {"cmd": "exit 0", "background": True})
    started = json.loads(body)
    status2, _, body = d.request("GET", f"{base}/{started.get('id')}?wait=1")
    ended = json.loads(body)
    v = validate([("Command", started), ("Command", ended)])
    ok(status == 201 and status2 == 200 and v == ["ok", "ok"] and ended["state"] == "exited",
       "a background command, started and ended, is a Command", f"{started} {ended}: {v}")
    d.request("DELETE", f"/contexts/{ctx['id']}")


# --- schemathesis ------------------------------------------------------------------

def schemathesis(d, workdir, config, *args):
    """Runs schemathesis in workdir with config (schemathesis.toml): its exit
    status and output."""
    with open(os.path.join(workdir, "schemathesis.toml"), "w") as f:
        f.write(config)
    seed = os.environ.get("SG_OPENAPI_SEED")
    cmd = [os.path.join(VENV, "schemathesis"), "run", SPEC_PATH, "--url", d.url,
           "--header", f"Authorization: Bearer {TOKEN}", "--checks", CHECKS,
           "--workers", "1", "--request-timeout", "60", "--generation-database", "none",
           "--no-color", *(["--seed", seed] if seed else []), *args]
    env = dict(os.environ, NO_COLOR="1")
    try:
        r = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=420,
                           env=env)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        return -1, f"schemathesis did not finish within 420 s (a hang?)\n{e.stdout or ''}"


def summary(out):
    """schemathesis' last lines worth a diagnostic: cases, seed, verdict."""
    keep = [l for l in out.splitlines()
            if re.search(r"generated|Seed:|passed|failed|issues found|Scenarios|API Links", l)]
    return "\n".join(keep[-8:])


def check_schemathesis(d):
    _, ctx = d.json("POST", "/contexts", {})
    fixture = ctx["id"]
    # Its command 1, ended: {command} for the commands routes (a running
    # one would hold a wait=1 until it ends).  The commands schemathesis
    # starts run in a context of their own, so that 16 of them ending do
    # not push command 1 out of the fixture's list.
    d.request("POST", f"/contexts/{fixture}/commands", {"cmd": "echo fixture"})
    _, ctx = d.json("POST", "/contexts", {})
    runs = ctx["id"]
    examples = int(os.environ.get("SG_OPENAPI_EXAMPLES", "25"))
    # Each context is a sandbox (seconds of CPU): a few creations per phase.
    create = ('[[operations]]\ninclude-operation-id = "createContext"\n'
              'generation.max-examples = 3\nphases.coverage.enabled = false\n')
    fork = ('[[operations]]\ninclude-operation-id = "forkContext"\n'
            f'parameters = {{ "path.context" = "{fixture}" }}\n'
            'generation.max-examples = 3\nphases.coverage.enabled = false\n\n')
    fuzz = (f'[[operations]]\ninclude-path-regex = "^/contexts/\\\\{{context\\\\}}"\n'
            f'exclude-operation-id-regex = "^(deleteContext|startCommand|forkContext)$"\n'
            f'parameters = {{ "path.context" = "{fixture}", "path.command" = "1" }}\n\n'
            f'[[operations]]\ninclude-operation-id = "startCommand"\n'
            f'parameters = {{ "path.context" = "{runs}" }}\n\n'
            f'[[operations]]\ninclude-operation-id = "deleteContext"\n'
            f'parameters = {{ "path.context" = "{MISSING}" }}\n\n' + fork + create)
    with tempfile.TemporaryDirectory(prefix="sg-openapi-") as tmp:
        t0 = time.time()
        rc, out = schemathesis(d, tmp, fuzz, "--phases", "examples,coverage,fuzzing",
                               "--max-examples", str(examples))
        diag(f"schemathesis examples, coverage, fuzzing ({time.time() - t0:.0f} s):\n"
             + summary(out))
        ok(rc == 0, f"schemathesis' examples, coverage and fuzzing phases: 0 failures "
           f"({examples} cases per operation, {{context}} a real one)", out[-6000:])
        # Which links a run follows is random: one run of 20 scenarios
        # over 33 operations mostly follows 5-15, now and then 0 or 1 (its
        # first contexts' bodies refused).  Runs go on, each with 0
        # failures, until one has followed at least 3 (at most 4 runs).
        runs, covered, failed = 0, 0, None
        while runs < 4 and covered < 3 and failed is None:
            runs += 1
            t0 = time.time()
            rc, out = schemathesis(d, tmp, create, "--phases", "stateful", "--max-examples",
                                   "20")
            diag(f"schemathesis stateful, run {runs} ({time.time() - t0:.0f} s):\n"
                 + summary(out))
            m = re.search(r"API Links:\s+(\d+) covered", out)
            covered = int(m.group(1)) if m else 0
            if rc != 0:
                failed = out[-6000:]
        ok(failed is None, "schemathesis' stateful phase (the spec's links: create a context, "
           "execute, files, pause, delete): 0 failures", failed)
        ok(covered >= 3, f"the stateful phase followed links ({covered} in run {runs})",
           out[-1500:])

def cleanup(d):
    """Deletes what the run left; the daemon still answers afterwards."""
    status, contexts = d.json("GET", "/contexts")
    for c in contexts or []:
        d.request("DELETE", f"/contexts/{c['id']}")
    status, health = d.json("GET", "/health")
    ok(status == 200 and health["status"] == "ok",
       f"sandgate still answers after the run ({len(contexts or [])} contexts deleted)")


def check_served(d):
    status, headers, body = d.request("GET", "/openapi.json", token=None)
    ok(status == 200 and headers.get("Content-Type") == "application/json",
       "GET /openapi.json answers without a token, as application/json",
       f"{status} {headers.get('Content-Type')}")
    ok(status == 200 and json.loads(body) == spec, "GET /openapi.json is docs/openapi.yaml")
    status, headers, _ = d.request("HEAD", "/openapi.json", token=None)
    ok(status == 200, "HEAD /openapi.json too", status)


if check_spec():
    check_routes()
    check_docs_examples()
    # --notebook-url: contexts' answers carry notebook_url, for the schema to check.
    d = Daemon("--pool-size", "1", "--max-kernels", "8", "--auth-fail-limit", "0",
               "--notebook-url", "https://hub.example.org/user/alice/lab?kernel={kernel_id}")
    try:
        check_served(d)
        check_real_answers(d)
        check_schemathesis(d)
        cleanup(d)
    finally:
        d.stop()
done()
