"""E2B's sandbox API (gateway/rest/e2b.c) with E2B's own SDKs, unchanged and
configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: the Python
SDK (tests/.venv-e2b, e2b_sandboxes.py: lifecycle, files, commands, list,
pause and connect, fork, timeouts, another tenant, the quota) and the JS SDK
(e2b_sandbox_api.mjs); E2B's error shape by hand."""
import json
import os
import subprocess
import tempfile

from sgd import Daemon, add_key
from tap import ok, done

SRC = os.environ.get("SG_SRCDIR", ".")
HERE = os.path.join(SRC, "tests", "gateway", "rest")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")

tmp = tempfile.mkdtemp(prefix="sg-e2bapi-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice = add_key(keys, "alice", "--max-contexts", "2")
bob = add_key(keys, "bob")
carol = add_key(keys, "carol")
d = Daemon("--pool-size", "1", "--pause-after", "0", "--keys-file", keys)
try:
    def env(key):
        return dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=key)

    if not os.access(PY, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
    else:
        r = subprocess.run([PY, os.path.join(HERE, "e2b_sandboxes.py"), bob], env=env(alice),
                           capture_output=True, text=True, timeout=600)
        checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        ok(len(checks) == 40, f"the Python SDK's script ran its checks ({len(checks)})",
           r.stderr[-3000:])
        for c in checks:
            ok(c["ok"], "Python SDK: " + c["name"], c.get("detail"))

    r = subprocess.run(["node", os.path.join(HERE, "e2b_sandbox_api.mjs")], env=env(carol),
                       capture_output=True, text=True, timeout=300,
                       cwd=os.path.join(SRC, "tests"))
    seen = json.loads(r.stdout.splitlines()[-1]) if r.stdout.strip() else {}
    ok(seen.get("result") == ["'hello'"], "JS SDK: Sandbox.create() with envs, then runCode",
       (seen, r.stderr[-2000:]))
    ok(seen.get("read") == ["'written by js'"] and seen.get("command") == "written by js",
       "JS SDK: files.write seen by runCode and commands.run", seen)
    ok(seen.get("info") == {"state": "running", "metadata": {"lang": "js"},
                            "templateId": "code-interpreter-v1"}
       and seen.get("listed") == [seen.get("id")], "JS SDK: getInfo and a metadata list", seen)
    ok(seen.get("paused") is True and seen.get("afterResume") == ["42"],
       "JS SDK: pause, then Sandbox.connect resumes it with its variables", seen)
    ok(seen.get("killed") is True and seen.get("afterKill") == "SandboxNotFoundError",
       "JS SDK: Sandbox.kill; then getInfo raises SandboxNotFoundError", seen)

    # E2B's error shape, by hand.
    h = {"X-API-Key": bob, "Content-Type": "application/json"}
    st, _, body = d.request("GET", "/sandboxes/no-such-sandbox", headers=h, token=None)
    ok(st == 404 and json.loads(body) == {"code": 404,
                                          "message": "sandbox 'no-such-sandbox' not found"},
       "an unknown sandbox: 404 {code, message}", (st, body))
    st, _, body = d.request("POST", "/v2/sandboxes", raw=b"{not json", headers=h, token=None)
    ok(st == 400 and json.loads(body)["code"] == 400, "a malformed body: 400 {code, message}",
       (st, body))
    st, _, body = d.request("POST", "/v2/sandboxes", {"templateID": "nope"}, headers=h,
                            token=None)
    ok(st == 404 and "template 'nope' not found" in json.loads(body)["message"],
       "an unknown template: 404 naming it", (st, body))
    st, _, body = d.request("POST", "/v2/sandboxes", {"timeout": "long"}, headers=h, token=None)
    ok(st == 400 and "'timeout'" in json.loads(body)["message"], "a bad timeout: 400", (st, body))
    st, _, body = d.request("GET", "/v2/sandboxes", headers={"X-API-Key": "wrong"}, token=None)
    ok(st == 401, "a wrong key: 401", (st, body))
    st, _, body = d.request("GET", "/v2/sandboxes", headers=h, token=None)
    ok(st == 200 and json.loads(body) == [], "bob's list is empty: nobody else's shows", body)
    st, lst = d.json("GET", "/contexts", token=carol)
    ok(st == 200 and lst == [], "carol's killed sandbox is no context either", lst)
finally:
    d.stop()
done()
