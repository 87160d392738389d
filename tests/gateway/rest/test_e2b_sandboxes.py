"""E2B's sandbox API (gateway/rest/e2b.c) with E2B's own SDKs, unchanged and
configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: the Python
SDK (tests/.venv-e2b, e2b_sandboxes.py: lifecycle, files, commands, list,
pause and connect, fork, timeouts, another tenant, the quota; e2b_kernels.py:
one sandbox holding Python, JavaScript and Bash contexts that share its
files and processes; signed file URLs) and the JS SDK (e2b_sandbox_api.mjs);
E2B's error shape, sandgate's own POST /contexts {"sandbox"} and a sandbox's
own token (good for that sandbox only, ended with its owner's key) by hand."""
import json
import os
import signal
import subprocess
import tempfile
import http.client
import urllib.parse

from sgd import Daemon, SANDGATE, add_key, wait_for
from tap import ok, done, relay_checks

SRC = os.environ.get("SG_SRCDIR", ".")
HERE = os.path.join(SRC, "tests", "gateway", "rest")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")

tmp = tempfile.mkdtemp(prefix="sg-e2bapi-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice = add_key(keys, "alice", "--max-contexts", "2")
bob = add_key(keys, "bob")
carol = add_key(keys, "carol")
dave = add_key(keys, "dave")
erin = add_key(keys, "erin", "--max-contexts", "2")
frank = add_key(keys, "frank")
d = Daemon("--pool-size", "1", "--pause-after", "0", "--keys-file", keys)
try:
    def env(key):
        return dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=key)

    def sdk_script(name, key, count, *args):
        """Runs an SDK script with key's environment; relays its checks."""
        r = subprocess.run([PY, os.path.join(HERE, name), *args], env=env(key),
                           capture_output=True, text=True, timeout=600)
        relay_checks(r, count, f"the Python SDK's {name}")
        return r

    if not os.access(PY, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
    else:
        sdk_script("e2b_sandboxes.py", alice, 63, bob)
        r = sdk_script("e2b_kernels.py", dave, 27)
        gone = next((l.split()[1:] for l in r.stdout.splitlines() if l.startswith("#SANDBOX")),
                    [])
        left = [d.json("GET", f"/contexts/{i}", token=dave)[0] for i in gone]
        st, lst = d.json("GET", "/contexts", token=dave)
        ok(len(left) == 3 and left == [404] * 3 and st == 200 and lst == [],
           "the killed sandbox's contexts, JavaScript and Bash too, are gone", (gone, left, lst))

    # sandgate's own API: POST /contexts {"sandbox"}.
    st, host = d.json("POST", "/contexts", {}, token=erin)
    hid = host.get("id")
    ok(st == 201 and host.get("sandbox") == hid, "a context made alone is a sandbox of its own",
       host)
    st, guest = d.json("POST", "/contexts", {"sandbox": hid, "language": "python"}, token=erin)
    ok(st == 201 and guest.get("sandbox") == hid and guest["id"] != hid,
       "POST /contexts {sandbox}: a context in that sandbox, which says so", guest)
    st, r = d.json("POST", "/execute", {"code": "open('/home/user/n', 'w').write('9')",
                                        "context_id": hid}, token=erin,
                   headers={"Accept": "application/json"}, timeout=120)
    st, r = d.json("POST", "/execute", {"code": "print(open('n').read())",
                                        "context_id": guest.get("id")}, token=erin,
                   headers={"Accept": "application/json"}, timeout=120)
    ok(st == 200 and r.get("stdout") == "9\n", "it reads what its sandbox's first context wrote",
       (st, r))
    st, q = d.json("POST", "/contexts", {"sandbox": hid}, token=erin)
    ok(st == 429 and "max-contexts" in q.get("message", ""),
       "each context in a sandbox counts against max-contexts (erin has 2): 429", (st, q))
    st, q = d.json("POST", "/contexts", {"sandbox": hid}, token=bob)
    ok(st == 404 and hid in q.get("message", ""),
       "another tenant naming erin's sandbox: 404, as an unknown one", (st, q))
    st, q = d.json("POST", "/contexts", {"sandbox": "no-such-sandbox"}, token=erin)
    ok(st == 404 and "no-such-sandbox" in q.get("message", ""), "an unknown sandbox: 404",
       (st, q))
    st, q = d.json("POST", "/contexts", {"sandbox": hid, "template": "x"}, token=erin)
    ok(st == 400 and "sandbox's files, template and network" in q.get("message", ""),
       "a sandbox with a template: 400 saying why", (st, q))
    st, q = d.json("POST", "/contexts", {"sandbox": 7}, token=erin)
    ok(st == 400, "a sandbox that is not a string: 400", (st, q))
    # A sandbox pauses whole: every kernel in it, with its variables.
    def run(cid, code):
        return d.json("POST", "/execute", {"code": code, "context_id": cid}, token=erin,
                      headers={"Accept": "application/json"}, timeout=120)

    run(hid, "v = 'first'")
    run(guest.get("id"), "v = 'second'")
    st, p = d.json("POST", f"/contexts/{hid}/pause", token=erin, timeout=120)
    st2, g = d.json("GET", f"/contexts/{guest.get('id')}", token=erin)
    ok(st == 200 and p.get("state") == "paused" and g.get("state") == "paused",
       "pausing a sandbox of two kernels pauses both", (st, p, g))
    st, r = run(guest.get("id"), "print(v)")
    st2, h = d.json("GET", f"/contexts/{hid}", token=erin)
    ok(st == 200 and r.get("stdout") == "second\n" and h.get("state") == "running",
       "an execution in the second kernel wakes the sandbox; its variables are there",
       (st, r, h))
    st, r = run(hid, "print(v)")
    ok(st == 200 and r.get("stdout") == "first\n", "... and the first kernel's", (st, r))
    st, p = d.json("POST", f"/contexts/{guest.get('id')}/pause", token=erin, timeout=120)
    st2, h = d.json("GET", f"/contexts/{hid}", token=erin)
    ok(st == 200 and p.get("state") == "paused" and h.get("state") == "paused",
       "pausing the second kernel pauses its sandbox", (st, p, h))
    st, h = d.json("POST", f"/contexts/{hid}/resume", token=erin, timeout=120)
    st2, r = run(guest.get("id"), "print(v)")
    ok(st == 200 and st2 == 200 and r.get("stdout") == "second\n",
       "resuming the first resumes the sandbox, both kernels", (st, h, st2, r))
    # Busy: its stream's first line says it runs.
    u = urllib.parse.urlparse(d.url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/execute", json.dumps({
        "code": "import time; print('running', flush=True); time.sleep(3)",
        "context_id": guest.get("id")}), {"Authorization": f"Bearer {erin}"})
    busy = c.getresponse()
    first = b""
    while b"running" not in first and (line := busy.readline()):
        first = line
    st, p = d.json("POST", f"/contexts/{hid}/pause", token=erin, timeout=120)
    busy.read()
    c.close()
    ok(b"running" in first and st == 409 and "all its kernels are idle" in p.get("message", ""),
       "a sandbox whose second kernel is busy does not pause: 409 saying why", (first, st, p))
    st, snap = d.json("POST", f"/contexts/{hid}/snapshots", {}, token=erin, timeout=120)
    st2, r = run(guest.get("id"), "print(v)")
    ok(st == 201 and st2 == 200 and r.get("stdout") == "second\n",
       "a snapshot of the sandbox leaves both kernels running with their variables",
       (st, snap, st2, r))
    st, p = d.json("POST", f"/contexts/{guest.get('id')}/snapshots", {}, token=erin)
    ok(st == 409 and "its sandbox's first context is" in p.get("message", ""),
       "a snapshot of the second kernel alone: 409, naming the sandbox's", (st, p))
    st, _ = d.json("DELETE", f"/contexts/{guest.get('id')}", token=erin)
    st2, r = run(hid, "print(open('n').read(), v)")
    ok(st == 204 and st2 == 200 and r.get("stdout") == "9 first\n",
       "deleting the kernel in it leaves the sandbox, its files and first kernel", (st, st2, r))
    st, p = d.json("POST", f"/contexts/{hid}/pause", token=erin, timeout=120)
    ok(st == 200 and p.get("state") == "paused", "alone again, it pauses", (st, p))
    st, woke = d.json("POST", "/contexts", {"sandbox": hid, "language": "python"}, token=erin)
    st2, r = d.json("POST", "/execute", {"code": "print(open('n').read())",
                                         "context_id": woke.get("id")}, token=erin,
                    headers={"Accept": "application/json"}, timeout=120)
    st3, h = d.json("GET", f"/contexts/{hid}", token=erin)
    ok(st == 201 and st2 == 200 and r.get("stdout") == "9\n" and h.get("state") == "running",
       "a context made in a paused sandbox wakes it, then starts there", (st, st2, r, h))
    d.json("DELETE", f"/contexts/{hid}", token=erin)
    st, _ = d.json("GET", f"/contexts/{woke.get('id')}", token=erin)
    ok(st == 404, "deleting the sandbox's first context deletes the others in it", st)

    r = subprocess.run(["node", os.path.join(HERE, "e2b_sandbox_api.mjs")], env=env(carol),
                       capture_output=True, text=True, timeout=300,
                       cwd=os.path.join(SRC, "tests"))
    relay_checks(r, 6, "JS SDK")

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
    # Network rules on a server that gives sandboxes no network (test_egress has one that does).
    st, _, body = d.request("POST", "/v2/sandboxes", {"allow_internet_access": False},
                            headers=h, token=None)
    nid = json.loads(body).get("sandboxID")
    net = [d.request("PUT", f"/sandboxes/{nid}/network", b, headers=h, token=None)
           for b in ({"denyOut": ["0.0.0.0/0"]}, {"allowOut": ["198.51.100.7"]},
                     {"allowOut": ["exa_mple.com"]}, {"denyOut": "all"},
                     {"rules": {"api.example.com": [{}]}})]
    st2, _, raw = d.request("PUT", f"/sandboxes/{nid}/network", raw=b"{no", headers=h,
                            token=None)
    got = [(n[0], json.loads(n[2])["message"] if n[2] else "") for n in net]
    ok(st == 201 and [g[0] for g in got] == [204, 409, 400, 400, 400] and st2 == 400 and
       "no network" in got[1][1] and "'exa_mple.com'" in got[2][1] and "rules" in got[4][1],
       "PUT /sandboxes/{id}/network: denying all of a sandbox without a network is 204, "
       "allowing is 409, a malformed host name, a non-list, rules and a malformed body 400", (got, raw))
    st, _, body = d.request("GET", f"/sandboxes/{nid}", headers=h, token=None)
    info = json.loads(body)
    st2, _, body = d.request("POST", "/v2/sandboxes", {"network": {"allowOut": ["1.2.3.4"]}},
                             headers=h, token=None)
    ok(info.get("allowInternetAccess") is False and "network" not in info and st2 == 429 and
       json.loads(body).get("quota") == "internet",
       "its detail says allowInternetAccess false; rules ask for a network, which bob's key "
       "may not have (429 naming the quota)", (info, body))
    d.request("DELETE", f"/sandboxes/{nid}", headers=h, token=None)
    st, _, body = d.request("GET", "/v2/sandboxes", headers={"X-API-Key": "wrong"}, token=None)
    got = json.loads(body)
    ok(st == 401 and got["code"] == 401 and "wrong token" in got["message"],
       "a wrong key: 401 in E2B's shape", (st, body))
    st, _, body = d.request("GET", "/v2/sandboxes", headers=h, token=None)
    ok(st == 200 and json.loads(body) == [], "bob's list is empty: nobody else's shows", body)
    st, lst = d.json("GET", "/contexts", token=carol)
    ok(st == 200 and lst == [], "carol's killed sandbox is no context either", lst)

    # A sandbox's own token (envdAccessToken): that sandbox's routes, as its owner, nothing else.
    hf = {"X-API-Key": frank, "Content-Type": "application/json"}
    made = [json.loads(d.request("POST", "/v2/sandboxes", {}, headers=hf, token=None)[2])
            for _ in range(2)]
    (s1, t1), (s2, t2) = ((m.get("sandboxID"), m.get("envdAccessToken")) for m in made)
    ok(t1 and t1 != t2 and frank not in (t1, t2) and made[0]["trafficAccessToken"] == t1,
       "each sandbox has a token of its own, not the key", made)

    def with_token(method, path, sandbox, token, body=None):
        hdrs = {"X-Access-Token": token, "Content-Type": "application/json"}
        if sandbox:
            hdrs["E2b-Sandbox-Id"] = sandbox
        st, _, data = d.request(method, path, body, headers=hdrs, token=None)
        return st, data

    st, data = with_token("POST", "/execute", s1, t1, {"code": "print(6 * 7)"})
    ok(st == 200 and b'"text":"42\\n"' in data, "its token runs code in it", (st, data[-300:]))
    # File metadata past what a file holds: 400 in envd's shape, nothing written.
    hm = dict(hf, **{"E2b-Sandbox-Id": s1, "Content-Type": "application/octet-stream",
                     "X-Metadata-Big": "v" * 5000})
    st, _, data = d.request("POST", "/files?path=/tmp/big-meta.txt", headers=hm, token=None,
                            raw=b"data")
    st2, _, _ = d.request("GET", "/files?path=/tmp/big-meta.txt", token=None,
                          headers={"X-API-Key": frank, "E2b-Sandbox-Id": s1})
    ok(st == 400 and json.loads(data).get("code") == 400 and "4096" in data.decode() and
       st2 == 404, "metadata past 4096 bytes: 400 naming the limit, and no file", (st, data, st2))
    st, data = with_token("POST", "/execute", s2, t1, {"code": "1"})
    ok(st == 401, "... but not in its owner's other sandbox", (st, data))
    st, data = with_token("GET", f"/contexts/{s2}", s1, t1)
    ok(st == 404, "whose id, named in a path, is unknown to it", (st, data))
    st, data = with_token("GET", "/v2/sandboxes", None, t1)
    st2, data2 = with_token("POST", "/v2/sandboxes", None, t1, {})
    ok(st == 401 and st2 == 401, "nor is it a key to the sandbox API", (st, st2))
    # Its logs: what sandgate's log says about it, in E2B's two shapes.
    def logs(query="", v2=True):
        path = f"/v2/sandboxes/{s1}/logs{query}" if v2 else f"/sandboxes/{s1}/logs{query}"
        st, _, data = d.request("GET", path, headers=hf, token=None)
        return st, json.loads(data)

    st, got = logs()
    msgs = [e.get("message", "") for e in got.get("logs", [])]
    ok(st == 200 and any(s1 in m and "created" in m for m in msgs) and
       all(set(e) == {"timestamp", "level", "message", "fields"} for e in got["logs"]),
       "GET /v2/sandboxes/{id}/logs: sandgate's lines about it ({timestamp, level, message})",
       (st, got))
    st1, old = logs(v2=False)
    ok(st1 == 200 and [x["line"] for x in old["logs"]] == msgs and
       [x["message"] for x in old["logEntries"]] == msgs, "... and /sandboxes/{id}/logs's shape",
       old)
    st, back = logs("?direction=backward&limit=1")
    st2, none = logs("?level=error&search=created")
    ok([x["message"] for x in back["logs"]] == msgs[-1:] and none["logs"] == [],
       "direction, limit, level and search", (back, none))
    st, bad = logs("?limit=5000")
    ok(st == 400 and bad.get("code") == 400, "a limit past 1000: 400 in E2B's shape", bad)
    d.restart()
    st, data = with_token("POST", "/execute", s1, t1, {"code": "print(6 * 7)"})
    ok(st == 200 and b'"text":"42\\n"' in data, "and again after sandgate restarts (the key "
       "it is made with is kept in STATE/secrets/)", (st, data[-300:]))
    subprocess.run([SANDGATE, "keys", "remove", "frank", "--keys-file", keys], check=True,
                   capture_output=True)
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.request("GET", "/v2/sandboxes", headers=hf, token=None)[0] == 401)
    st, data = with_token("POST", "/execute", s1, t1, {"code": "1"})
    ok(st == 401, "frank's key removed: its sandboxes' tokens stop too", (st, data))
finally:
    d.stop()
done()
