"""The cross-tenant 404 matrix: every route that takes an id, asked by one
tenant with another tenant's real id, answers exactly as for an unknown id.

Two tenants, alice and bob (a keys file, no quotas).  alice makes one of
everything an id can name: a context A (a variable set, a file written),
a snapshot S of it, a background command in it, a Jupyter kernel K and a
Jupyter session on A, an MCP session with its own kernel (a variable
set).  bob has a context, a Jupyter session and an MCP session of his own,
so that an id in a body or a header is reached past the ids before it.

Then, as bob, for every request that names an id:

- every path x method of docs/openapi.yaml with an id, in the path
  (`{context}`, `{snapshot}`; `{command}` is scoped by its `{context}`) or
  in the request body (`context_id`, `snapshot`), generated from the spec:
  a path parameter, a required query parameter or an id-like body field
  this test cannot fill fails the test (teach it the new kind);
- every route of the other front ends, taken from the route tables in
  gateway/**/*.c (a route or parameter kind that appears there without a case
  here fails the test): the Jupyter REST API (`/api/kernels/ID`,
  interrupt, restart, the channels WebSocket upgrade, `/api/sessions/ID`,
  a session naming a kernel), envd's Connect RPC and `/files` (the context
  in `E2b-Sandbox-Id`), MCP (`Mcp-Session-Id`; and the restore tool given
  alice's snapshot from bob's own session);

the request is sent with alice's id and with an unknown id of the same
shape, and the two answers must be identical (status, Content-Type and
body, the id's text replaced) and 404.  Which check comes first today: a
path's ids are resolved by the route layer before the body is read, so a
path case is 404 whatever its body (checked: the same request with a
malformed JSON body is 404 too); an id in a body or header is resolved by
the handler after the body validates, so those cases send a valid body
(the spec's example, or the least its schema needs).  A GET is asked as
HEAD too.  bob's lists (contexts, snapshots, kernels, sessions) show
nothing of alice's.  Afterwards alice's things are as they were: the
same contexts, state, snapshot, command still running, Jupyter kernel and
session, files; her variables keep their values (REST and MCP); and
bob's own lists gained nothing (a fork or restore that got through would
show there).  Needs root and runsc."""
import glob
import http.client
import json
import os
import random
import re
import shutil
import time
import uuid
from urllib.parse import quote, urlparse

import yaml

from sgd import Daemon, TOKEN, tenants
from tap import ok, diag, done

SRC = os.path.abspath(os.environ.get("SG_SRCDIR", "."))
spec = yaml.safe_load(open(os.path.join(SRC, "docs", "openapi.yaml"), encoding="utf-8"))
METHODS = ("get", "put", "post", "delete", "patch")
TIMEOUT = 20  # seconds a probe may take: a 404 is immediate; a leak may stream forever

# --- what the test knows how to fill ----------------------------------------------------

# Kinds of id a tenant owns (http_param names in gateway/**/*.c), and the kind
# whose id scopes them (a command's id is its number within its context).
OWNED = {"context", "snapshot", "command", "kernel", "session", "mcp_session", "sandbox",
         "exposed", "webhook", "volume", "secret"}
SCOPED = {"command": "context"}
# Kinds that are the server's, the same for every tenant.
SHARED = {"kernelspec", "template"}
# Path and query parameters that are not ids, and what to put in them.
PATH_FILL = {"path": "notes.txt"}
QUERY_FILL = {"path": "/home/user/notes.txt"}
# GET /snapshots' sandboxID and name filter the caller's own list: another
# tenant's context id filters to nothing, as an unknown one does.
QUERY_NOT_ID = {"path", "depth", "stat", "cmd", "cwd", "timeout", "env", "wait", "close",
                "sandboxID", "name"}
# Body fields that name an id, by name: their kind (None: not tenant-owned).
BODY_IDS = {"context_id": "context", "snapshot": "snapshot", "sandbox": "context", "template": None}
# Body fields whose name looks like an id's and are not: POST /execute's
# `command` is a shell command line.
BODY_NOT_ID = {"command"}


def id_like(name):
    return (name in OWNED or name in SHARED or name == "id" or name.endswith("_id") or
            name in ("kernel", "session"))


def deref(obj):
    while isinstance(obj, dict) and "$ref" in obj:
        node = spec
        for part in obj["$ref"].lstrip("#/").split("/"):
            node = node[part]
        obj = node
    return obj


def schema_properties(schema):
    """A request schema's properties, with those of its allOf/oneOf/anyOf."""
    schema = deref(schema or {})
    props = dict(schema.get("properties", {}))
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(key, []):
            props.update(schema_properties(sub))
    return props


def minimal(schema):
    """The least value a schema takes (for a body without an example), or None."""
    schema = deref(schema)
    t = schema.get("type")
    if t == "object":
        out = {}
        for name in schema.get("required", []):
            v = minimal(schema.get("properties", {}).get(name, {}))
            if v is None:
                return None
            out[name] = v
        return out
    if t == "string":
        return "/tmp/matrix" if schema.get("pattern", "").startswith("^/") else "x"
    if t in ("integer", "number"):
        return schema.get("minimum", 1)
    if t == "boolean":
        return False
    return None


tmp, KEYS, (ALICE, BOB) = tenants("sg-matrix-", "alice", "bob")
d = Daemon("--keys-file", KEYS, "--pool-size", "3", "--pause-after", "0")
HOST = urlparse(d.url)


def send(method, path, body=None, headers=None, key=BOB, timeout=TIMEOUT):
    """One request as key's tenant: (status, Content-Type, body bytes);
    status 0 when it did not answer within timeout."""
    h = {"Authorization": "Bearer " + key}
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    elif isinstance(body, bytes):
        h["Content-Type"] = "application/octet-stream"
    h.update(headers or {})
    c = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    except OSError as e:
        return 0, None, repr(e).encode()
    finally:
        c.close()


def js(key, method, path, body=None, headers=None, timeout=120):
    st, _, data = send(method, path, body, headers, key=key, timeout=timeout)
    try:
        return st, json.loads(data) if data.strip() else None
    except ValueError:
        return st, data


def lookalike(real, keep=0):
    """An id no one has, of real's shape (its first keep characters kept:
    a context's replica tag, so a proxy would route it the same way)."""
    rnd = random.Random(real)
    return real[:keep] + "".join(rnd.choice("0123456789abcdef") if ch.isalnum() else ch
                                 for ch in real[keep:])


def answer_of(resp, ident):
    st, ctype, data = resp
    return st, ctype, data.replace(ident.encode(), b"{ID}")


checked = []  # labels of the cases compared


def same_as_unknown(label, make, mine, unknown, expect=404):
    """make(id) -> (method, path, body, headers); sent with alice's id and an
    unknown one, the answers must be the same, and expect."""
    a = answer_of(send(*make(mine)), mine)
    u = answer_of(send(*make(unknown)), unknown)
    checked.append(label)
    ok(a == u and a[0] == expect,
       f"{label}: alice's id answers bob as an unknown id does ({expect})",
       f"alice's: {a[0]} {a[1]} {a[2][:300]!r}\nunknown: {u[0]} {u[1]} {u[2][:300]!r}")


def mcp_init(key):
    st, hdrs, data = None, None, None
    h = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
         "Accept": "application/json, text/event-stream"}
    c = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=60)
    c.request("POST", "/mcp", json.dumps(
        {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "matrix", "version": "0"}}}), h)
    r = c.getresponse()
    sid = r.getheader("Mcp-Session-Id")
    r.read()
    c.close()
    send("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
         {"Mcp-Session-Id": sid, "Accept": "application/json, text/event-stream"}, key=key)
    return sid


def mcp_call(key, sid, tool, args):
    st, _, data = send("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                        "params": {"name": tool, "arguments": args}},
                       {"Mcp-Session-Id": sid, "Accept": "application/json"}, key=key,
                       timeout=120)
    try:
        res = json.loads(data)["result"]
        return st, res.get("isError", False), "".join(c.get("text", "") for c in res["content"])
    except (ValueError, KeyError, TypeError):
        return st, True, data.decode(errors="replace")


def execute(key, ctx, code):
    st, r = js(key, "POST", "/execute", {"code": code, "context_id": ctx},
               {"Accept": "application/json"})
    return st, r


try:
    # --- alice's things, bob's own -------------------------------------------------------
    st, a = js(ALICE, "POST", "/contexts", {})
    ok(st == 201, "alice creates a context A", (st, a))
    A = a["id"]
    st, b = js(BOB, "POST", "/contexts", {})
    ok(st == 201, "bob creates one of his own", (st, b))
    B = b["id"]
    st, r = execute(ALICE, A, "secret = 'alice-only'\nopen('notes.txt', 'w').write('hers')")
    ok(st == 200 and r.get("error") is None, "alice sets a variable and writes notes.txt", r)
    st, snap = js(ALICE, "POST", f"/contexts/{A}/snapshots", {"name": "alice-snap"})
    ok(st == 201, "alice snapshots A", (st, snap))
    S = snap["id"]
    st, cmd = js(ALICE, "POST", f"/contexts/{A}/commands",
                 {"cmd": "sleep 600", "background": True, "stdin": True})
    ok(st == 201 and cmd.get("state") in ("starting", "running"),
       "alice starts a background command in A", (st, cmd))
    CMD = cmd["id"]
    st, kern = js(ALICE, "POST", "/api/kernels", {})
    ok(st == 201 and kern.get("id"), "alice starts a Jupyter kernel K", (st, kern))
    K = kern["id"]
    st, jsess = js(ALICE, "POST", "/api/sessions",
                   {"path": "alice.ipynb", "type": "notebook", "kernel": {"id": A}})
    ok(st == 201 and jsess.get("id"), "alice opens a Jupyter session on A", (st, jsess))
    JS = jsess["id"]
    MS = mcp_init(ALICE)
    st, err, text = mcp_call(ALICE, MS, "execute_python", {"code": "m = 'mcp-var'; print(m)"})
    ok(MS and st == 200 and not err and "mcp-var" in text,
       "alice opens an MCP session and sets a variable in its kernel", (st, text))
    st, bsess = js(BOB, "POST", "/api/sessions",
                   {"path": "bob.ipynb", "type": "notebook", "kernel": {"id": B}})
    BS = bsess["id"] if st == 201 else None
    BM = mcp_init(BOB)
    ok(BS and BM, "bob opens a Jupyter session on his context and an MCP session", (st, bsess))

    st, wh = js(ALICE, "POST", "/events/webhooks", {"url": "http://127.0.0.1:9/alice"})
    ok(st == 201 and wh.get("id"), "alice makes a webhook", (st, wh))
    WH = wh.get("id", "")
    st, vol = js(ALICE, "POST", "/volumes", {"name": "alices", "sizeMiB": 16})
    ok(st == 201 and vol.get("volumeID"), "alice makes a volume", (st, vol))
    VOL = vol.get("volumeID", "")
    js(ALICE, "POST", f"/volumecontent/{VOL}/dir?path=/kept")
    st, sec = js(ALICE, "POST", "/secrets", {"name": "alices-key", "value": "hers"})
    ok(st == 201 and sec.get("secretID"), "alice makes a secret", (st, sec))
    SEC = sec.get("secretID", "")
    ALICE_IDS = {"context": A, "snapshot": S, "command": CMD, "kernel": K, "session": JS,
                 "mcp_session": MS, "sandbox": A, "exposed": A, "webhook": WH, "volume": VOL,
                 "secret": SEC}
    BOB_IDS = {"context": B, "session": BS, "mcp_session": BM}
    UNKNOWN = {k: lookalike(v, keep=9 if k in ("context", "kernel", "sandbox", "exposed") else 0)
               for k, v in ALICE_IDS.items()}

    def view(key, path):
        st, v = js(key, "GET", path)
        return st, v

    def alice_state():
        """What bob must not change of alice's (volatile fields left out)."""
        ctxs = {c["id"]: (c["state"], c["tenant"]) for c in view(ALICE, "/contexts")[1]}
        cmd = view(ALICE, f"/contexts/{A}/commands/{CMD}")[1]
        sess = view(ALICE, f"/api/sessions/{JS}")[1]
        return {
            "contexts": ctxs,
            "snapshots": sorted(json.dumps(s, sort_keys=True)
                                for s in view(ALICE, "/snapshots")[1]),
            "command": (cmd.get("state"), cmd.get("stdin")),
            "commands": len(view(ALICE, f"/contexts/{A}/commands")[1]),
            "kernels": sorted(k["id"] for k in view(ALICE, "/api/kernels")[1]),
            "session": (sess.get("id"), sess.get("path"), sess.get("kernel", {}).get("id")),
            "files": sorted((e["name"], e["size"])
                            for e in view(ALICE, f"/contexts/{A}/files")[1]["entries"]),
            "tmp": sorted(e["path"] for e in
                          view(ALICE, f"/contexts/{A}/files?path=/tmp")[1]["entries"]),
            "volume": sorted(e["path"] for e in
                             view(ALICE, f"/volumecontent/{VOL}/dir?path=/")[1]),
            "secret": json.dumps(view(ALICE, f"/secrets/{SEC}")[1], sort_keys=True),
        }

    def bob_state():
        return (sorted(c["id"] for c in view(BOB, "/contexts")[1]),
                sorted(s["id"] for s in view(BOB, "/snapshots")[1]),
                sorted(k["id"] for k in view(BOB, "/api/kernels")[1]))

    before, bob_before = alice_state(), bob_state()
    diag(f"alice's things: A {A}, S {S}, command {CMD}, K {K}, session {JS}, MCP {MS}")

    # --- bob's lists ------------------------------------------------------------------------
    for path in ("/contexts", "/snapshots", "/api/kernels", "/api/sessions", "/volumes",
                 "/secrets", f"/contexts/{B}/snapshots", f"/contexts/{B}/commands"):
        st, _, data = send("GET", path)
        leaked = [k for k, v in ALICE_IDS.items() if k != "command" and v.encode() in data]
        ok(st == 200 and not leaked, f"bob's GET {path} shows nothing of alice's", (st, leaked))

    # --- the spec: every path x method with an id ----------------------------------------------
    spec_cases, spec_ops, no_ids = 0, [], []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            where = f"{method.upper()} {path}"
            params = [deref(p) for p in item.get("parameters", []) + op.get("parameters", [])]
            path_ids, taught = [], True
            for p in params:
                if p["in"] == "path":
                    if p["name"] in OWNED:
                        path_ids.append(p["name"])
                    elif p["name"] not in PATH_FILL:
                        taught = ok(False, f"{where}: the test can fill path parameter "
                                    f"{{{p['name']}}} (teach it this kind)")
                elif p["in"] == "query":
                    if id_like(p["name"]) or (p.get("required") and p["name"] not in QUERY_FILL):
                        taught = ok(False, f"{where}: the test knows query parameter "
                                    f"{p['name']!r} (teach it)")
                    elif p["name"] not in QUERY_NOT_ID:
                        taught = ok(False, f"{where}: the test knows query parameter "
                                    f"{p['name']!r} is not an id (teach it)")
            query = {p["name"]: QUERY_FILL[p["name"]] for p in params
                     if p["in"] == "query" and p.get("required")}
            # The body: JSON (the spec's first example, else the least the
            # schema needs) or bytes.
            content = op.get("requestBody", {}).get("content", {})
            body, body_ids = None, []
            if "application/json" in content:
                media = content["application/json"]
                examples = list(media.get("examples", {}).values())
                body = (dict(deref(examples[0])["value"]) if examples
                        else minimal(media.get("schema", {})))
                if body is None:
                    taught = ok(False, f"{where}: the test can make its JSON body (add an "
                                "example to the spec)")
                for name in schema_properties(media.get("schema")):
                    if not id_like(name) or name in BODY_NOT_ID:
                        continue
                    if name not in BODY_IDS:
                        taught = ok(False, f"{where}: the test knows body field {name!r}, "
                                    "which looks like an id (teach it)")
                    elif BODY_IDS[name]:
                        body_ids.append((name, BODY_IDS[name]))
            elif content:
                body = b"matrix"
            spec_ops.append(where)
            if not taught:
                continue
            if not path_ids and not body_ids:
                no_ids.append(where)
                continue

            def make(vary_where, vary_name, x, malformed=False, verb=method.upper(),
                     path=path, body=body, query=query, path_ids=path_ids):
                """The request with x in the varied slot, bob's ids (or for a
                scoped id, the id within its scope's owner) elsewhere."""
                scope_alice = vary_where == "path"
                url = path
                for name in path_ids:
                    if vary_where == "path" and name == vary_name:
                        v = x
                    elif name in SCOPED:
                        v = ALICE_IDS[name] if scope_alice else BOB_IDS.get(name, "1")
                    else:
                        v = BOB_IDS.get(name, ALICE_IDS[name])
                    url = url.replace("{" + name + "}", quote(v, safe=""))
                for name, fill in PATH_FILL.items():
                    url = url.replace("{" + name + "}", fill)
                if query:
                    url += "?" + "&".join(f"{k}={quote(v)}" for k, v in query.items())
                b = body
                if isinstance(b, dict):
                    b = dict(b)
                    for name, kind in body_ids:
                        b[name] = x if vary_where == "body" and name == vary_name else (
                            BOB_IDS.get(kind) or ALICE_IDS[kind])
                    if vary_where == "body":
                        # only the varied field names an id: the others stay as the example has them
                        for name, kind in body_ids:
                            if name != vary_name and name not in (body or {}):
                                b.pop(name, None)
                if malformed:
                    return verb, url, b"{", {"Content-Type": "application/json"}
                return verb, url, b, {}

            for name in path_ids:
                if name in SCOPED:
                    continue  # varied with its scope: alice's context, her command's id
                mine, unknown = ALICE_IDS[name], UNKNOWN[name]
                same_as_unknown(f"{where} {{{name}}}",
                                lambda x, n=name, m=make: m("path", n, x), mine, unknown)
                if isinstance(body, dict):
                    same_as_unknown(f"{where} {{{name}}} with a malformed body",
                                    lambda x, n=name, m=make: m("path", n, x, malformed=True),
                                    mine, unknown)
                if method == "get":
                    same_as_unknown(f"HEAD {path} {{{name}}}",
                                    lambda x, n=name, m=make: m("path", n, x, verb="HEAD"),
                                    mine, unknown)
                spec_cases += 1
            for name, kind in body_ids:
                same_as_unknown(f"{where} body {name!r}",
                                lambda x, n=name, m=make: m("body", n, x),
                                ALICE_IDS[kind], UNKNOWN[kind])
                spec_cases += 1
    diag(f"spec operations without an id: {', '.join(no_ids)}")
    with_ids = {c.split(" body ")[0].split(" {")[0] for c in checked}
    missed = [w for w in spec_ops if w not in with_ids and w not in no_ids]
    ok(spec_cases > 0 and not missed,
       f"every operation of the spec was checked or has no id ({len(spec_ops)} operations, "
       f"{spec_cases} id slots)", missed)

    # --- the other front ends: every route of theirs in gateway/**/*.c -----------------------
    WS_HEADERS = {"Upgrade": "websocket", "Connection": "Upgrade",
                  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
    MCP_H = {"Accept": "application/json, text/event-stream"}

    def mcp_req(verb, path, rpc=None):
        return lambda x: (verb, path, rpc, dict(MCP_H, **{"Mcp-Session-Id": x}))

    def rpc(method, **params):
        return {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params
                                                                 else {})}

    jupyter = {
        ("GET", "/api/kernels/{kernel}"): [("kernel", lambda x: ("GET", f"/api/kernels/{x}",
                                                                 None, {}))],
        ("DELETE", "/api/kernels/{kernel}"): [("kernel", lambda x: ("DELETE",
                                                                    f"/api/kernels/{x}", None,
                                                                    {}))],
        ("POST", "/api/kernels/{kernel}/interrupt"): [
            ("kernel", lambda x: ("POST", f"/api/kernels/{x}/interrupt", {}, {}))],
        ("POST", "/api/kernels/{kernel}/restart"): [
            ("kernel", lambda x: ("POST", f"/api/kernels/{x}/restart", {}, {}))],
        ("GET", "/api/kernels/{kernel}/channels"): [
            ("kernel", lambda x: ("GET", f"/api/kernels/{x}/channels?session_id=m", None,
                                  WS_HEADERS))],
        ("GET", "/api/sessions/{session}"): [("session", lambda x: ("GET",
                                                                    f"/api/sessions/{x}", None,
                                                                    {}))],
        ("PATCH", "/api/sessions/{session}"): [
            ("session", lambda x: ("PATCH", f"/api/sessions/{x}", {"path": "moved.ipynb"}, {})),
            # bob's own session, pointed at alice's kernel
            ("kernel", lambda x: ("PATCH", f"/api/sessions/{BS}", {"kernel": {"id": x}}, {}))],
        ("DELETE", "/api/sessions/{session}"): [
            ("session", lambda x: ("DELETE", f"/api/sessions/{x}", None, {}))],
    }
    # A context's terminal (jupyter/terminal.c), its servers (ports/ports.c),
    # its events and a webhook (events/).
    jupyter[("GET", "/contexts/{context}/terminal")] = [
        ("context", lambda x: ("GET", f"/contexts/{x}/terminal", None, WS_HEADERS))]
    for verb in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        jupyter[(verb, "/contexts/{exposed}/ports/*")] = [
            ("exposed", lambda x, verb=verb: (verb, f"/contexts/{x}/ports/8001/x",
                                              None if verb in ("GET", "DELETE") else {}, {}))]
    jupyter[("GET", "/events/sandboxes/*")] = [
        ("sandbox", lambda x: ("GET", f"/events/sandboxes/{x}", None, {}))]
    jupyter[("GET", "/events/webhooks/*")] = [
        ("webhook", lambda x: ("GET", f"/events/webhooks/{x}", None, {})),
        ("webhook", lambda x: ("GET", f"/events/webhooks/{x}/deliveries", None, {}))]
    jupyter[("PATCH", "/events/webhooks/*")] = [
        ("webhook", lambda x: ("PATCH", f"/events/webhooks/{x}", {"enabled": False}, {}))]
    jupyter[("DELETE", "/events/webhooks/*")] = [
        ("webhook", lambda x: ("DELETE", f"/events/webhooks/{x}", None, {}))]
    for p in ("/api/sessions", "/api/sessions/"):
        jupyter[("POST", p)] = [("kernel", lambda x, p=p: (
            "POST", p, {"path": "x.ipynb", "type": "notebook", "kernel": {"id": x}}, {}))]
    # volumes (volumes/): a volume, and its files by E2B's content API.
    jupyter[("GET", "/volumes/{volume}")] = [
        ("volume", lambda x: ("GET", f"/volumes/{x}", None, {}))]
    jupyter[("DELETE", "/volumes/{volume}")] = [
        ("volume", lambda x: ("DELETE", f"/volumes/{x}", None, {}))]
    for verb, what, body in (("GET", "path", None), ("PATCH", "path", {"mode": 0o777}),
                             ("DELETE", "path", None), ("GET", "dir", None),
                             ("POST", "dir", None), ("GET", "file", None),
                             ("PUT", "file", b"overwritten")):
        q = "?path=" + ("/kept" if what != "file" else "/evil.txt") + \
            ("&force=true" if verb in ("PUT", "POST") else "")
        jupyter[(verb, f"/volumecontent/{{volume}}/{what}")] = [
            ("volume", lambda x, v=verb, w=what, b=body, q=q: (
                v, f"/volumecontent/{x}/{w}{q}", b, {}))]
    # secrets (secrets/): by id; a name is looked up in the caller's own.
    jupyter[("GET", "/secrets/{secret}")] = [
        ("secret", lambda x: ("GET", f"/secrets/{x}", None, {}))]
    jupyter[("POST", "/secrets/{secret}")] = [
        ("secret", lambda x: ("POST", f"/secrets/{x}", {"value": "bob's now"}, {}))]
    jupyter[("DELETE", "/secrets/{secret}")] = [
        ("secret", lambda x: ("DELETE", f"/secrets/{x}", None, {}))]
    # a context moved to another replica, a snapshot sent to one (cluster/).
    jupyter[("POST", "/contexts/{context}/move")] = [
        ("context", lambda x: ("POST", f"/contexts/{x}/move", {"to": "r1"}, {}))]
    jupyter[("GET", "/cluster/snapshots/{snapshot}")] = [
        ("snapshot", lambda x: ("GET", f"/cluster/snapshots/{x}", None, {}))]
    no_id_routes = {
        ("GET", "/api"), ("GET", "/api/"), ("GET", "/api/status"), ("GET", "/api/kernels"),
        ("GET", "/api/kernels/"), ("POST", "/api/kernels"), ("POST", "/api/kernels/"),
        ("GET", "/api/sessions"), ("GET", "/api/sessions/"), ("GET", "/api/kernelspecs"),
        ("GET", "/api/kernelspecs/"), ("GET", "/api/kernelspecs/{kernelspec}"),
        ("GET", "/kernelspecs/{kernelspec}/*"), ("GET", "/events"),
        ("POST", "/events/webhooks/*"),  # a list, a new webhook: no id
        ("GET", "/volumes"), ("POST", "/volumes"), ("GET", "/secrets"), ("POST", "/secrets"),
        # the operator's alone (403 for a tenant), and the proxy's routes
        ("PUT", "/cluster/snapshots/*"), ("POST", "/cluster/contexts"), ("GET", "/cluster/routes"),
        ("POST", "/cluster/drain")}
    ENVD_BODY = {
        "/filesystem.Filesystem/Stat": {"path": "/home/user/notes.txt"},
        "/filesystem.Filesystem/MakeDir": {"path": "/tmp/matrix-dir"},
        "/filesystem.Filesystem/Move": {"source": "/home/user/notes.txt",
                                        "destination": "/tmp/moved.txt"},
        "/filesystem.Filesystem/ListDir": {"path": "/home/user", "depth": 1},
        "/filesystem.Filesystem/Remove": {"path": "/home/user/notes.txt"},
        "/filesystem.Filesystem/WatchDir": {"path": "/home/user"},
        "/filesystem.Filesystem/CreateWatcher": {"path": "/home/user"},
        "/filesystem.Filesystem/GetWatcherEvents": {"watcherId": "w"},
        "/filesystem.Filesystem/RemoveWatcher": {"watcherId": "w"},
        "/process.Process/Start": {"process": {"cmd": "/bin/sh",
                                               "args": ["-c", "echo pwned > /tmp/pwned"]}},
        "/process.Process/Connect": {"process": {"pid": int(CMD)}},
        "/process.Process/List": {},
        "/process.Process/SendInput": {"process": {"pid": int(CMD)},
                                       "input": {"stdin": "aGkK"}},
        "/process.Process/SendSignal": {"process": {"pid": int(CMD)},
                                        "signal": "SIGNAL_SIGKILL"},
        "/process.Process/CloseStdin": {"process": {"pid": int(CMD)}},
        "/process.Process/StreamInput": {"process": {"pid": int(CMD)}},
        "/process.Process/Update": {"process": {"pid": int(CMD)}, "pty": {}},
        "/files": None,
    }
    mcp = {}
    for p in ("/mcp", "/mcp/"):
        mcp[("POST", p)] = [
            ("mcp_session", mcp_req("POST", p, rpc("tools/call", name="execute_python",
                                                   arguments={"code": "print(m)"}))),
            ("mcp_session", mcp_req("POST", p, rpc("tools/list"))),
            ("mcp_session", mcp_req("POST", p, {"jsonrpc": "2.0",
                                                "method": "notifications/initialized"}))]
        mcp[("DELETE", p)] = [("mcp_session", mcp_req("DELETE", p))]

    def e2b_case(verb, pattern):
        """E2B's sandbox API (rest/e2b.c): its {sandbox} (a context) or
        {snapshot} in the path, with the key as E2B's SDKs send it."""
        kind = "sandbox" if "{sandbox}" in pattern else "snapshot" if "{snapshot}" in pattern \
            else None
        if kind is None:
            return None
        body = None if verb in ("GET", "DELETE") else {}
        return [(kind, lambda x: (verb, pattern.replace("{" + kind + "}", quote(x, safe="")),
                                  body, {}))]

    def envd_case(verb, path):
        body = ENVD_BODY[path]
        if path == "/files":
            q = "?path=" + quote("/home/user/notes.txt" if verb == "GET" else
                                 "/home/user/evil.txt")
            body = None if verb == "GET" else b"overwritten"
            return [("context", lambda x: (verb, path + q, body, {"E2b-Sandbox-Id": x}))]
        return [("context", lambda x: (verb, path, body, {"E2b-Sandbox-Id": x}))]

    routes, kinds = [], set()
    for f in sorted(glob.glob(os.path.join(SRC, "gateway", "**", "*.c"), recursive=True)):
        text = open(f, encoding="utf-8").read()
        kinds |= set(re.findall(r'http_param\(\s*http,\s*"(\w+)"', text))
        for verb, pattern in re.findall(r'\{"(GET|POST|PUT|DELETE|PATCH)",\s*"(/[^"]*)"', text):
            routes.append((os.path.relpath(f, os.path.join(SRC, "gateway")), verb, pattern))
    unknown_kinds = kinds - OWNED - SHARED
    ok(kinds and not unknown_kinds, "every id kind the daemon registers is one the test knows "
       "(owned or shared)", sorted(unknown_kinds))
    other = 0
    for fname, verb, pattern in routes:
        where = f"{verb} {pattern} ({fname})"
        if fname.startswith("rest/") and fname != "rest/e2b.c":
            continue  # the REST API: the spec's (test_openapi.py keeps them the same)
        if (verb, pattern) in no_id_routes:
            continue
        if fname == "rest/e2b.c":
            cases = e2b_case(verb, pattern)
            if cases is None:  # creating and listing name no id
                continue
        elif fname.startswith("envd/"):
            cases = envd_case(verb, pattern) if pattern in ENVD_BODY else None
        else:
            cases = jupyter.get((verb, pattern)) or mcp.get((verb, pattern))
        if not cases:
            ok(False, f"{where}: the test has a case for this route (teach it)")
            continue
        for kind, make in cases:
            label = f"{verb} {pattern} ({kind})"
            body = make("x")[2]
            if isinstance(body, dict) and "method" in body:
                label += " " + body["method"]
            same_as_unknown(label, make, ALICE_IDS[kind], UNKNOWN[kind])
            other += 1
    ok(other >= 30, f"the other front ends gave {other} cases", other)

    # MCP's restore tool, from bob's own session, given alice's snapshot.
    outs = []
    for x in (S, UNKNOWN["snapshot"]):
        st, err, text = mcp_call(BOB, BM, "restore", {"snapshot_id": x})
        outs.append((st, err, text.replace(x, "{ID}")))
    ok(outs[0] == outs[1] and outs[0][1],
       "MCP restore given alice's snapshot: the same tool error as an unknown one", outs)
    # An admin sees every tenant's: its own MCP session may start from hers.
    st, err, text = mcp_call(TOKEN, mcp_init(TOKEN), "restore", {"snapshot_id": S})
    ok(st == 200 and not err and "back at snapshot" in text,
       "an admin's MCP session restores alice's snapshot (an admin sees every tenant's)",
       (st, err, text[:300]))

    # --- afterwards: alice's things as they were ----------------------------------------------
    time.sleep(0.5)
    after = alice_state()
    for key in before:
        ok(after[key] == before[key], f"alice's {key}: unchanged", (before[key], after[key]))
    ok(bob_state() == bob_before, "bob gained nothing (no fork, no snapshot, no kernel)",
       (bob_before, bob_state()))
    st, r = execute(ALICE, A, "print(secret, open('notes.txt').read())")
    ok(st == 200 and r.get("stdout") == "alice-only hers\n",
       "A keeps alice's variable and file", (st, r))
    st, err, text = mcp_call(ALICE, MS, "execute_python", {"code": "print(m)"})
    ok(st == 200 and not err and "mcp-var" in text, "her MCP session keeps its variable",
       (st, text))
    st, k = js(ALICE, "GET", f"/api/kernels/{K}")
    ok(st == 200 and k.get("id") == K, "her Jupyter kernel K is there", (st, k))
    diag(f"{len(checked)} comparisons")
finally:
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)

done()
