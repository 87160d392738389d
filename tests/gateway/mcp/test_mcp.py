"""MCP over Streamable HTTP: the official SDK as a client, then the protocol's
edges by hand (malformed JSON-RPC, batches, sessions, headers), execute_code's
kernel per language (another tenant's session sees none of them), the
snapshot and restore tools (another tenant's snapshot is an unknown id), a
restart of sandgate in the middle of a session, and idle culling."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from sgd import Daemon, TOKEN, add_key
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
from mcpraw import JSON_AND_SSE, post, initialize, call, text_of, err_code


KEYS = os.path.join(tempfile.mkdtemp(prefix="sgt-mcp-"), "keys")
KEY_A = add_key(KEYS, "alice")
d = Daemon("--pool-size", "1", "--keys-file", KEYS)
try:
    # --- the official SDK ---------------------------------------------------------
    r = subprocess.run(["node", os.path.join(SRC, "tests/lib/mcp_sdk.mjs"), d.url, TOKEN],
                       capture_output=True, text=True, timeout=900)
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    checks = [l for l in lines if "ok" in l]
    ok(len(checks) >= 45, f"the SDK script ran its checks ({len(checks)})", r.stderr[-2000:])
    for c in checks:
        ok(c["ok"], "SDK: " + c["name"], c.get("detail"))
    survivor = next((l["session_b"] for l in lines if "session_b" in l), None)

    # --- sessions and headers ------------------------------------------------------
    status, sid, answer = initialize(d, "2025-06-18")
    ok(status == 200 and sid and answer["result"]["protocolVersion"] == "2025-06-18",
       "initialize answers with the client's protocol version", answer)
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                 "params": {"protocolVersion": "1999-01-01"}})
    ok(status == 200 and answer["result"]["protocolVersion"] == "2025-11-25",
       "an unknown protocol version gets the newest sandgate speaks", answer)
    status, hdrs, answer = post(d, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                session=sid)
    ok(status == 202 and answer is None, "a notification is answered 202 with no body",
       (status, answer))
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    ok(status == 400 and err_code(answer) == -32000 and "Mcp-Session-Id" in
       answer["error"]["message"], "a request without a session id is 400", (status, answer))
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                             session="00000000-0000-4000-8000-000000000000")
    ok(status == 404 and err_code(answer) == -32001, "an unknown session id is 404",
       (status, answer))
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid,
                             headers={"MCP-Protocol-Version": "1900-01-01"})
    ok(status == 400 and "MCP-Protocol-Version" in answer["error"]["message"],
       "an unsupported MCP-Protocol-Version header is 400", (status, answer))
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid,
                             headers={"MCP-Protocol-Version": "2025-06-18"})
    ok(status == 200 and answer == {"jsonrpc": "2.0", "id": 1, "result": {}},
       "ping with a supported MCP-Protocol-Version", answer)
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid,
                             accept="text/html")
    ok(status == 406, "an Accept without JSON or an event stream is 406", status)
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": "s", "method": "ping"}, session=sid,
                             accept="text/event-stream")
    ok(status == 200 and answer == [{"jsonrpc": "2.0", "id": "s", "result": {}}],
       "a client that takes only event streams gets one", answer)
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid,
                             headers={"Content-Type": "text/plain"})
    ok(status == 415 and err_code(answer) == -32000, "a Content-Type other than JSON is 415",
       (status, answer))
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid,
                             headers={"Authorization": "Bearer wrong-token-0123456789"})
    ok(status == 401, "a wrong token is 401", status)
    for method in ("GET", "PUT"):
        status, hdrs, data = d.request(method, "/mcp", headers={"Mcp-Session-Id": sid})
        ok(status == 405 and "POST" in (hdrs.get("Allow") or ""),
           f"{method} /mcp is 405 with Allow", (status, data))

    # --- malformed JSON-RPC ----------------------------------------------------------
    status, _, answer = post(d, None, session=sid, raw=b'{"jsonrpc": "2.0", "id": 1, "meth')
    ok(status == 400 and err_code(answer) == -32700 and answer["id"] is None,
       "malformed JSON is a parse error (-32700, id null)", (status, answer))
    cases = [
        ({"jsonrpc": "2.0", "id": 5, "method": "no/such"}, -32601, "an unknown method"),
        ({"jsonrpc": "1.0", "id": 5, "method": "ping"}, -32600, "jsonrpc other than 2.0"),
        ({"id": 5, "method": "ping"}, -32600, "no jsonrpc member"),
        ({"jsonrpc": "2.0", "id": 5}, -32600, "no method"),
        ({"jsonrpc": "2.0", "id": 5, "method": 7}, -32600, "a method that is not a string"),
        ({"jsonrpc": "2.0", "id": 5, "method": "tools/call"}, -32602, "tools/call without params"),
        ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": [1]}, -32602,
         "params that are not an object"),
        ({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
          "params": {"name": "execute_python", "arguments": "1+1"}}, -32602,
         "arguments that are not an object"),
        ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "rm_rf"}}, -32602,
         "an unknown tool"),
        ({"jsonrpc": "2.0", "id": 5, "method": "resources/list"}, -32601,
         "a capability sandgate does not offer"),
    ]
    for msg, code, what in cases:
        status, _, answer = post(d, msg, session=sid)
        ok(status == 200 and err_code(answer) == code and answer.get("id") in (5, None),
           f"{what}: error {code}", (status, answer))
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": None, "method": "ping"}, session=sid)
    ok(err_code(answer) == -32600 and answer["id"] is None, "a null id is an invalid request",
       answer)
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, session=sid)
    ok(err_code(answer) == -32600, "a fractional id is an invalid request", answer)
    status, _, answer = post(d, None, session=sid, raw=b"42")
    ok(status == 200 and err_code(answer) == -32600, "a bare number is an invalid request",
       (status, answer))

    # --- batches -------------------------------------------------------------------------
    status, _, answer = post(d, [], session=sid)
    ok(status == 400 and err_code(answer) == -32600, "an empty batch is an invalid request",
       (status, answer))
    status, _, answer = post(d, [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                  "params": {"protocolVersion": "2025-03-26"}},
                                 {"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    ok(status == 400 and err_code(answer) == -32600, "initialize inside a batch is refused",
       (status, answer))
    status, _, answer = post(d, [{"jsonrpc": "2.0", "id": "a", "method": "ping"}, 7,
                                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                 {"jsonrpc": "2.0", "id": "b", "method": "nope"}], session=sid)
    ok(status == 200 and isinstance(answer, list) and len(answer) == 3 and
       answer[0] == {"jsonrpc": "2.0", "id": "a", "result": {}} and err_code(answer[1]) == -32600
       and answer[2]["id"] == "b" and err_code(answer[2]) == -32601,
       "a mixed batch: one answer per request, an error for the bad member, none for the "
       "notification", answer)
    status, _, answer = post(d, [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(65)],
                             session=sid)
    ok(status == 400 and err_code(answer) == -32600, "a batch of 65 messages is refused",
       (status, answer))
    status, _, answer = post(d, [{"jsonrpc": "2.0", "method": "notifications/initialized"}],
                             session=sid)
    ok(status == 202, "a batch of notifications only is 202", status)
    status, _, answer = post(d, [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": "execute_python",
                                             "arguments": {"code": "a = 6"}}},
                                 {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "execute_python",
                                             "arguments": {"code": "a * 7"}}}],
                             session=sid, accept="application/json")
    ok(status == 200 and [m["id"] for m in answer] == [1, 2] and text_of(answer[1]) == "42",
       "a batch of two executions runs them in order", answer)
    status, _, answer = post(d, None, session=sid, raw=b"x" * (2 << 20))
    ok(status == 413, "a body over --max-body is 413", status)

    # --- tool errors are results ----------------------------------------------------------
    status, answer = call(d, sid, "execute_python", {"code": "1", "timeout": -1})
    ok(answer["result"]["isError"] and "timeout" in text_of(answer),
       "a negative timeout is isError", answer)
    status, answer = call(d, sid, "execute_python", {"code": "import os; os._exit(1)"})
    ok(answer["result"]["isError"] and "Kernel" in text_of(answer),
       "the kernel dying under the code is isError", answer)
    status, answer = call(d, sid, "execute_python", {"code": "a"})
    ok(status == 200 and answer["result"]["isError"] and "restart_kernel" in text_of(answer),
       "after its kernel died the session answers isError, pointing to restart_kernel", answer)
    status, answer = call(d, sid, "restart_kernel", {})
    status, answer = call(d, sid, "execute_python", {"code": "'alive'"})
    ok(text_of(answer) == "'alive'", "restart_kernel brings the session back", answer)
    status, answer = call(d, sid, "write_file", {"path": "a/../../x", "content": "no"})
    ok(answer["result"]["isError"], "write_file refuses '..'", answer)
    status, answer = call(d, sid, "execute_python",
                          {"code": "import os; os.symlink('/etc', 'etc-link')"})
    status, answer = call(d, sid, "read_file", {"path": "etc-link/passwd"})
    ok(answer["result"]["isError"] and "root:" not in json.dumps(answer),
       "read_file does not follow a symlink planted by the code", answer)
    status, answer = call(d, sid, "execute_python",
                          {"code": "print('y' * 100000)", "timeout": 60},
                          accept=JSON_AND_SSE)
    ok(status == 200 and len(answer) == 1 and len(text_of(answer[0])) == 100001,
       "a 100 kB output comes back whole", status)

    # --- execute_code: a kernel per language ------------------------------------------------
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, session=sid)
    ec = next((t for t in answer["result"]["tools"] if t["name"] == "execute_code"), {})
    status, kspecs = d.json("GET", "/api/kernelspecs")
    have = {k["spec"]["language"].lower() for k in kspecs["kernelspecs"].values()}
    installed = [l for l in ("python", "javascript", "typescript", "r", "bash")
                 if l in have or (l == "javascript" and "typescript" in have)]
    ok(ec.get("inputSchema", {}).get("properties", {}).get("language", {}).get("enum") ==
       installed and len(installed) == 5 and ec["inputSchema"]["required"] == ["code", "language"],
       "execute_code offers the languages whose kernels are installed (all five here)",
       (ec, have))
    status, answer = call(d, sid, "execute_code", {"language": "javascript",
                                                   "code": "let jsSecret = 6; jsSecret"})
    ok(not answer["result"]["isError"] and text_of(answer) == "6", "execute_code in JavaScript",
       answer)
    status, answer = call(d, sid, "execute_code", {"language": "js", "code": "jsSecret * 7"})
    ok(text_of(answer) == "42", "js is javascript: the same kernel, its variable kept", answer)
    status, answer = call(d, sid, "execute_code",
                          {"language": "typescript",
                           "code": "const half = (n: number): number => n / 2; half(84)"})
    ok(text_of(answer) == "42", "TypeScript: a typed function", answer)
    status, answer = call(d, sid, "execute_code", {"language": "typescript",
                                                   "code": "typeof jsSecret"})
    ok(text_of(answer) == '"undefined"', "typescript has a kernel of its own", answer)
    status, answer = call(d, sid, "execute_code", {"language": "r", "code": "v <- c(4, 2)"})
    status, answer = call(d, sid, "execute_code", {"language": "R", "code": "sum(v) * 7"})
    ok(text_of(answer) == "[1] 42", "R keeps its variables (the name's case aside)", answer)
    status, answer = call(d, sid, "execute_code", {"language": "bash",
                                                   "code": "echo to-err >&2; exit_code=3; false"})
    status, answer = call(d, sid, "execute_code", {"language": "bash", "code": "echo $exit_code"})
    ok(text_of(answer) == "3\n", "bash keeps its shell variables", answer)
    status, answer = call(d, sid, "execute_code", {"language": "javascript",
                                                   "code": "null.boom"})
    ok(answer["result"]["isError"] and "TypeError" in text_of(answer),
       "a JavaScript exception is isError", answer)
    for args, what, needle in (
            ({"code": "1"}, "no language", "'language'"),
            ({"code": "1", "language": 5}, "a language that is not a string", "'language'"),
            ({"code": "1", "language": "cobol"}, "an unknown language", "unknown language 'cobol'"),
            ({"language": "bash"}, "no code", "'code'")):
        status, answer = call(d, sid, "execute_code", args)
        ok(status == 200 and answer["result"]["isError"] and needle in text_of(answer) and
           (needle == "'code'" or "python, javascript, typescript, r, bash" in text_of(answer)),
           f"execute_code with {what} is isError and says what it takes", answer)
    alice = {"Authorization": "Bearer " + KEY_A}
    status, hdrs, _ = post(d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "raw", "version": "0"}}},
                           headers=alice)
    asid = hdrs.get("Mcp-Session-Id")
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                 "params": {"name": "execute_code",
                                            "arguments": {"language": "javascript",
                                                          "code": "typeof jsSecret"}}},
                             session=asid, headers=alice, accept="application/json")
    ok(asid and text_of(answer) == '"undefined"',
       "another tenant's session does not see the first's JavaScript variables", answer)
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                 "params": {"name": "execute_code",
                                            "arguments": {"language": "javascript",
                                                          "code": "jsSecret"}}},
                             session=sid, headers=alice, accept="application/json")
    ok(status == 404 and err_code(answer) == -32001,
       "nor can it call into the first's session (an unknown session)", (status, answer))
    d.request("DELETE", "/mcp", headers=dict(alice, **{"Mcp-Session-Id": asid}))

    # --- snapshot and restore --------------------------------------------------------------
    call(d, sid, "execute_python", {"code": "snap_v = 1\nopen('m.txt', 'w').write('one')"})
    status, answer = call(d, sid, "snapshot", {"name": "mcp"})
    m = re.search(r"[0-9a-f]{8}-[0-9a-f-]{27}", text_of(answer))
    snap = m.group(0) if m else "none"
    status, snaps = d.json("GET", "/snapshots")
    ok(m and not answer["result"]["isError"] and
       [(x["id"], x.get("name")) for x in snaps] == [(snap, "mcp")],
       "snapshot: its id, listed by GET /snapshots with its name", (answer, snaps))
    call(d, sid, "execute_python", {"code": "snap_v = 2\nopen('m.txt', 'w').write('two')"})
    status, answer = call(d, sid, "restore", {"snapshot_id": snap})
    ok(not answer["result"]["isError"] and snap in text_of(answer), "restore", answer)
    status, answer = call(d, sid, "execute_python", {"code": "snap_v, open('m.txt').read()"})
    ok(text_of(answer) == "(1, 'one')", "after restore: the variable and the file as they were",
       answer)
    unknown = "00000000-0000-4000-8000-000000000000"
    status, answer = call(d, sid, "restore", {"snapshot_id": unknown})
    ok(answer["result"]["isError"] and unknown in text_of(answer),
       "restore of an unknown snapshot is isError", answer)
    status, answer = call(d, sid, "snapshot", {"name": 5})
    ok(answer["result"]["isError"] and "name" in text_of(answer),
       "snapshot with a name that is not a string is isError", answer)
    status, hdrs, _ = post(d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "raw", "version": "0"}}},
                           headers=alice)
    asid = hdrs.get("Mcp-Session-Id")
    got = {}
    for sid_ in (unknown, snap):
        status, _, got[sid_] = post(d, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                        "params": {"name": "restore",
                                                   "arguments": {"snapshot_id": sid_}}},
                                    session=asid, headers=alice, accept="application/json")
    ok(asid and got[snap]["result"]["isError"] and
       text_of(got[snap]).replace(snap, "ID") == text_of(got[unknown]).replace(unknown, "ID"),
       "another tenant's session: the snapshot is the same error as an unknown id", got)
    d.request("DELETE", "/mcp", headers=dict(alice, **{"Mcp-Session-Id": asid}))
    status, _, _ = d.request("DELETE", "/snapshots/" + snap)
    ok(status == 204, "the snapshot is deleted over REST", status)

    # --- a restart of sandgate keeps the session ----------------------------------------
    status, answer = call(d, sid, "execute_python", {"code": "kept = 'across restarts'"})
    d.restart()
    status, answer = call(d, sid, "execute_python", {"code": "kept"})
    ok(status == 200 and text_of(answer) == "'across restarts'",
       "a session and its variables survive a restart of sandgate", answer)
    status, answer = call(d, sid, "execute_code", {"language": "javascript", "code": "jsSecret"})
    ok(status == 200 and text_of(answer) == "6", "so does its JavaScript kernel", answer)
    if survivor:
        status, answer = call(d, survivor, "execute_python", {"code": "6 * 7"})
        ok(status == 200 and text_of(answer) == "42", "so does the SDK's second session", answer)
    status, _, data = d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
    ok(status == 200, "DELETE ends the session", status)
    status, _, data = d.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
    ok(status == 404, "DELETE of an ended session is 404", status)
    status, ctxs = d.json("GET", "/contexts")
    ok(status == 200 and survivor and len(ctxs) == 1,
       "the deleted session's kernels are gone, every language's (only the SDK's second "
       "session is left)", ctxs)
finally:
    d.stop()
    shutil.rmtree(os.path.dirname(KEYS), ignore_errors=True)

# --- idle sessions end, and their kernels with them ---------------------------------------
d = Daemon("--pool-size", "0", "--idle-timeout", "4")
try:
    status, sid, _ = initialize(d)
    status, answer = call(d, sid, "execute_python", {"code": "1 + 1"})
    ok(text_of(answer) == "2", "a session with a kernel", answer)
    status, ctxs = d.json("GET", "/contexts")
    ok(len(ctxs) == 1, "its kernel is listed", ctxs)
    deadline = time.time() + 30
    while time.time() < deadline and d.json("GET", "/contexts")[1]:
        time.sleep(0.5)
    ok(d.json("GET", "/contexts")[1] == [], "the idle session's kernel is shut down")
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid)
    ok(status == 404, "the idle session is gone (404)", (status, answer))
    ok(any("idle past the timeout" in l for l in d.log), "the log says why it ended",
       "".join(d.log[-20:]))
finally:
    d.stop()
done()
