"""Secrets (gateway/secrets/): E2B's Secret API — create, list (paged),
get by id or name, update (a new version), delete — whose values are
write-only: no answer, log line, audit line or file of the daemon's holds
one; what is kept is sealed to a key only root reads (STATE/sealing, 0700
root's), and only that key opens it.  Names are unique per tenant and
lower-cased, `sec_` is the ids' prefix; a tenant has 256 at most; another
tenant's secret is an unknown one, by id and by name.  E2B's Python SDK,
configured only by environment (e2b_secrets.py)."""
import base64
import ctypes
import ctypes.util
import json
import os
import stat
import subprocess
import tempfile

from sgd import Daemon, add_key
from tap import ok, done, relay_checks

SRC = os.environ.get("SG_SRCDIR", ".")
HERE = os.path.join(SRC, "tests", "gateway", "secrets")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")
VALUE = "sk-live-7f3a9c1e2b4d6f8a0c2e4a6b8d0f1e3c"

tmp = tempfile.mkdtemp(prefix="sg-secrets-", dir="/tmp")
keys = os.path.join(tmp, "keys")
audit = os.path.join(tmp, "audit.log")
alice, bob, carol = add_key(keys, "alice"), add_key(keys, "bob"), add_key(keys, "carol")
d = Daemon("--pool-size", "0", "--keys-file", keys, "--audit-log", audit)


def seal_open(box, pk, sk):
    """libsodium's crypto_box_seal_open (the daemon's own library)."""
    lib = ctypes.CDLL(ctypes.util.find_library("sodium"))
    out = ctypes.create_string_buffer(len(box) - 48)
    r = lib.crypto_box_seal_open(out, box, ctypes.c_ulonglong(len(box)), pk, sk)
    return out.raw.decode() if r == 0 else None


def api(method, path, body=None, key=alice):
    st, h, data = d.request(method, path, body, token=None, headers={"X-API-Key": key})
    try:
        return st, json.loads(data) if data.strip() else None, h
    except ValueError:
        return st, data, h


try:
    st, s, _ = api("POST", "/secrets", {"name": "OpenAI-Key", "value": VALUE,
                                        "metadata": {"team": "ml"}})
    sid = s.get("secretID", "") if st == 201 else ""
    ok(st == 201 and sid.startswith("sec_") and s["name"] == "openai-key" and
       s["currentVersion"] == 1 and s["metadata"] == {"team": "ml"} and
       s["createdAt"].endswith("Z") and "value" not in json.dumps(s) and
       VALUE not in json.dumps(s),
       "POST /secrets: 201, E2B's Secret (id sec_…, the name lower-cased, version 1), no value",
       (st, s))
    refused = [api("POST", "/secrets", b)[0] for b in (
        {"name": "openai-key", "value": "x"}, {"name": "OPENAI-KEY", "value": "x"},
        {"name": "bad name", "value": "x"}, {"name": "sec_x", "value": "x"},
        {"name": "n" * 129, "value": "x"}, {"name": "ok", "value": ""},
        {"name": "ok", "value": "v" * 65537}, {"name": "ok"}, {"name": "ok", "value": 3},
        {"name": "ok", "value": "x", "metadata": {"k": 1}},
        {"name": "ok", "value": "x", "metadata": {f"k{i}": "v" for i in range(33)}},
        {"name": "ok", "value": "x", "metadata": {"k": "v" * 1025}})]
    ok(refused == [409, 409] + [400] * 10, "refused: a name taken (any case) 409; a bad "
       "name, sec_, 129 characters, an empty, too long (64 KiB) or missing value, metadata "
       "not strings, over 32 entries or 1024 bytes: 400", refused)
    st, body, _ = api("POST", "/secrets", None)
    ok(st == 400 and body.get("code") == 400, "no body: 400 in E2B's shape", (st, body))

    st, by_id, _ = api("GET", f"/secrets/{sid}")
    st2, by_name, _ = api("GET", "/secrets/OpenAI-Key")
    ok(st == 200 and st2 == 200 and by_id == by_name == s,
       "GET /secrets/{id} and /secrets/{name} (any case): the same Secret", (by_id, by_name))
    st, up, _ = api("POST", f"/secrets/{sid}", {"value": VALUE + "-2"})
    ok(st == 200 and up["currentVersion"] == 2 and up["metadata"] == {"team": "ml"} and
       up["createdAt"] == s["createdAt"] and up["updatedAt"] >= s["updatedAt"],
       "POST /secrets/{id}: a new version (2), metadata kept when not given", (st, up))
    st, up, _ = api("POST", "/secrets/openai-key", {"value": "v3", "metadata": {"a": "b"}})
    ok(st == 200 and up["currentVersion"] == 3 and up["metadata"] == {"a": "b"},
       "by name, with metadata: version 3, the metadata replaced", (st, up))
    st, e, _ = api("POST", f"/secrets/{sid}", {"value": ""})
    ok(st == 400, "an update without a value: 400", (st, e))

    # --- tenants --------------------------------------------------------------------------
    other = [api("GET", f"/secrets/{sid}", key=bob)[0],
             api("GET", "/secrets/openai-key", key=bob)[0],
             api("POST", f"/secrets/{sid}", {"value": "hijack"}, key=bob)[0],
             api("DELETE", f"/secrets/{sid}", key=bob)[0]]
    st, bobs, _ = api("POST", "/secrets", {"name": "openai-key", "value": "bob's"}, key=bob)
    ok(other == [404, 404, 404, 404] and st == 201 and bobs["secretID"] != sid,
       "bob: alice's secret unknown by id and by name (get, update, delete: 404); his own "
       "of the same name is another", (other, st))
    st, mine, _ = api("GET", "/secrets", key=bob)
    ok(st == 200 and [x["secretID"] for x in mine] == [bobs["secretID"]],
       "GET /secrets: bob's own only", mine)
    st, one, _ = api("GET", f"/secrets/{sid}", key=alice)
    ok(st == 200 and one["currentVersion"] == 3, "alice's is untouched", one)

    # --- pages -------------------------------------------------------------------------------
    made = [api("POST", "/secrets", {"name": f"k{i}", "value": f"v{i}"})[1]["secretID"]
            for i in range(4)]
    st, page, h = api("GET", "/secrets?limit=2")
    token = h.get("x-next-token") or h.get("X-Next-Token")
    st2, page2, h2 = api("GET", f"/secrets?limit=2&nextToken={token}")
    st3, page3, h3 = api("GET", f"/secrets?limit=2&nextToken={h2.get('X-Next-Token')}")
    seen = [x["secretID"] for x in page + page2 + page3]
    ok(seen == [sid] + made and token and not h3.get("X-Next-Token"),
       "paged by 2 (X-Next-Token): all five in the order made, then no token", (seen, token))
    bad = [api("GET", "/secrets?limit=0")[0], api("GET", "/secrets?limit=101")[0],
           api("GET", "/secrets?nextToken=sec_nope")[0]]
    ok(bad == [400, 400, 400], "limit 0 or 101, a token never given: 400", bad)
    st, _, _ = api("DELETE", f"/secrets/{made[0]}")
    st2, e, _ = api("GET", f"/secrets/{made[0]}")
    ok(st == 204 and st2 == 404 and e.get("code") == 404,
       "DELETE: 204; then it is unknown (404, E2B's shape)", (st, st2, e))

    # --- the value: sealed, nowhere in the clear -------------------------------------------
    root = os.path.join(d.dir, "sealing")
    info = os.stat(root)
    key = open(os.path.join(root, "key"), "rb").read()
    ok(stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == 0 and len(key) == 64,
       "the sealing key: STATE/sealing/key, its directory root's and 0700, the daemon (its "
       "own uid) cannot read it", (oct(info.st_mode), info.st_uid))
    record = open(os.path.join(d.dir, "secrets", "secrets.json")).read()
    kept = {x["id"]: x for x in json.loads(record)}
    opened = seal_open(base64.b64decode(kept[sid]["sealed"]), key[:32], key[32:])
    ok(opened == "v3", "STATE/secrets/secrets.json keeps it sealed: the root key opens the "
       "current version", opened)
    everywhere = []
    for top, _, files in os.walk(d.dir):
        for f in files:
            p = os.path.join(top, f)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as fh:
                    if VALUE.encode() in fh.read():
                        everywhere.append(p)
    logs = "\n".join(d.log)
    trail = open(audit).read()
    ok(not everywhere and VALUE not in logs and "v3" not in trail and VALUE not in trail and
       "secret.create" in trail and "secret.update" in trail and "secret.delete" in trail,
       "the value is in no file of the state directory, no log line and no audit line (which "
       "has each create, update and delete)", everywhere)
    d.restart()
    st, back, _ = api("GET", "/secrets/openai-key")
    ok(st == 200 and back["currentVersion"] == 3 and back["secretID"] == sid,
       "after a restart: the same secrets", (st, back))

    # --- the quota -------------------------------------------------------------------------
    codes = [api("POST", "/secrets", {"name": f"q{i}", "value": "v"}, key=carol)[0]
             for i in range(257)]
    st, e, _ = api("POST", "/secrets", {"name": "one-more", "value": "v"}, key=carol)
    ok(codes[:256] == [201] * 256 and codes[256] == 429 and st == 429 and
       e.get("quota") == "max-secrets" and e.get("limit") == 256,
       "a tenant has 256 secrets at most: 429 naming it", (codes[250:], e))

    # --- E2B's Python SDK, configured by environment ----------------------------------------
    env = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=bob)
    if not os.access(PY, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
    else:
        r = subprocess.run([PY, os.path.join(HERE, "e2b_secrets.py"), alice, VALUE], env=env,
                           capture_output=True, text=True, timeout=300)
        relay_checks(r, 9, "the Python SDK's e2b_secrets.py")
finally:
    d.stop()
done()
