"""sandgate's JS client (clients/js, npm `sandgate`): `npm install ./clients/js`
into an empty project and the import with nothing else installed; then the
client against a real daemon (js_client.mjs): streaming callbacks, charts
and DataFrames (result.chart of a line and a bar plot, result.data), contexts,
pause and resume, snapshots (a context from one, fork, roll-back), templates
(listTemplates, a context from one with its preload, an unknown one), commands,
files, an error class per kind; then tenants (a keys file from `sandgate
keys add`): each client works with its key (apiKey,
token, SANDGATE_API_KEY over SANDGATE_TOKEN), one tenant's context is a
NotFoundError to the other, both see and use the templates, max-contexts 1
is a QuotaExceededError naming it, an address past --auth-fail-limit gets
TooManyRequestsError."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jsenv import PKG, project, run_suite  # noqa: E402
from sgd import Daemon, TOKEN, add_key  # noqa: E402
from tap import ok, done  # noqa: E402

# npm install of the directory, offline: the package has no dependencies and
# its peers are optional, so nothing else may come with it.
bare = tempfile.mkdtemp(prefix="sg-js-bare-")
try:
    r = subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--loglevel=error",
                        os.path.abspath(PKG)], cwd=bare, capture_output=True, text=True, timeout=120)
    ok(r.returncode == 0, "npm install ./clients/js into an empty project", r.stderr[-2000:])
    installed = sorted(n for n in os.listdir(os.path.join(bare, "node_modules"))
                       if not n.startswith(".")) if r.returncode == 0 else []
    ok(installed == ["sandgate"], "it installs nothing else", installed)
    probe = ("const m = await import('sandgate');"
             "const c = new m.Sandgate({ url: 'http://127.0.0.1:9', token: 't' });"
             "let lc = 'loaded'; try { await import('sandgate/langchain') } catch (e) { lc = e.code + ' ' + e.message }"
             "console.log(JSON.stringify({ names: Object.keys(m).sort(), url: c.url, lc }))")
    r = subprocess.run(["node", "--input-type=module", "-e", probe], cwd=bare, capture_output=True,
                       text=True, timeout=60)
    out = json.loads(r.stdout) if r.returncode == 0 and r.stdout.startswith("{") else {}
    ok({"Sandgate", "Execution", "SandgateError", "NotFoundError"} <= set(out.get("names", [])),
       "import('sandgate') works with no other package", r.stdout + r.stderr[-2000:])
    ok("ERR_MODULE_NOT_FOUND" in out.get("lc", "") and "@langchain/core" in out.get("lc", ""),
       "sandgate/langchain without its peer dependency names @langchain/core", out.get("lc"))
finally:
    shutil.rmtree(bare, ignore_errors=True)

# The type declarations, compiled strictly with a use of each entry point:
# errors in sandgate's .d.ts or in js_types.mts fail; the third-party
# declarations' own are not this test's (so no --skipLibCheck, filtered).
types = project(["js_types.mts"])
try:
    r = subprocess.run(["node", "node_modules/typescript/bin/tsc", "--noEmit", "--strict", "--module", "nodenext",
                        "--moduleResolution", "nodenext", "--target", "es2022", "--lib", "es2022,dom",
                        "js_types.mts"], cwd=types, capture_output=True, text=True, timeout=120)
    mine = [l for l in r.stdout.splitlines() if "sandgate/" in l or l.startswith("js_types")]
    ok(not mine and (r.returncode == 0 or "error TS" in r.stdout),
       "the type declarations compile with tsc --strict (a client, a result's chart narrowed by "
       "its type and its data, the tools in createAgent, the backend in createDeepAgent)", "\n".join(mine) or r.stdout[-2000:] + r.stderr[-2000:])
finally:
    shutil.rmtree(types, ignore_errors=True)

# The daemon's --notebook-url: each context's notebookUrl is it, with its id.
NOTEBOOK_URL = "https://hub.example.org/user/alice/lab?kernel={kernel_id}"
tmp = tempfile.mkdtemp(prefix="sg-js-keys-")
keys_file = os.path.join(tmp, "keys")
key_a = add_key(keys_file, "alice")
key_b = add_key(keys_file, "bob", "--max-contexts", "1")
d = Daemon("--pool-size", "1", "--max-upload", "400000", "--keys-file", keys_file,
           "--auth-fail-limit", "10", "--auth-block", "2",
           "--template", "pd=preload=import pandas as pd", "--notebook-url", NOTEBOOK_URL)
try:
    run_suite(d, "js_client.mjs", TOKEN, 102, key_a, key_b, NOTEBOOK_URL)
finally:
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
done()
