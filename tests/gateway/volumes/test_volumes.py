"""Volumes (gateway/volumes/): a tenant's named storage, made and deleted on
its own, read and written without a sandbox (E2B's volume content API, with
the tenant's key or the volume's own token), mounted into sandboxes at
creation (read-write or read-only), shared between them, kept by a pause
and a restart of sandgate, mounted again by a fork; its size is its limit
and the tenant's volumes count against max-volume-mib; another tenant's
volume is an unknown one.  E2B's SDKs, Python and JS, configured only by
environment (e2b_volumes.py, e2b_volumes.mjs)."""
import json
import os
import subprocess
import tempfile

from sgd import Daemon, add_key
from tap import ok, done, relay_checks

SRC = os.environ.get("SG_SRCDIR", ".")
HERE = os.path.join(SRC, "tests", "gateway", "volumes")
PY = os.path.join(SRC, "tests", ".venv-e2b", "bin", "python")

tmp = tempfile.mkdtemp(prefix="sg-volumes-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice = add_key(keys, "alice")
bob = add_key(keys, "bob", "--max-volume-mib", "100")
carol = add_key(keys, "carol")
d = Daemon("--pool-size", "0", "--keys-file", keys)


def api(method, path, body=None, key=alice, raw=None, headers=None):
    st, _, data = d.request(method, path, body, raw=raw, token=None,
                            headers={"X-API-Key": key, **(headers or {})})
    try:
        return st, json.loads(data) if data.strip() else None
    except ValueError:
        return st, data


def content(method, vol, what, path, key=None, token=None, raw=None, body=None, **q):
    """A /volumecontent call, with the volume's token unless key is given."""
    query = "&".join([f"path={path}"] + [f"{k}={v}" for k, v in q.items()])
    auth = {"X-API-Key": key} if key else {"Authorization": "Bearer " + (token or vol["token"])}
    st, _, data = d.request(method, f"/volumecontent/{vol['volumeID']}/{what}?{query}", body,
                            raw=raw, token=None, headers=auth)
    if method == "GET" and what == "file" and st == 200:
        return st, data
    try:
        return st, json.loads(data) if data.strip() else None
    except ValueError:
        return st, data


def run(cid, code, key=alice):
    st, _, out = d.request("POST", "/execute", {"context_id": cid, "code": code}, token=key)
    lines = [json.loads(x) for x in out.decode().splitlines() if x.strip()] if st == 200 else []
    return st, "".join(x.get("text", "") for x in lines if x.get("type") == "stdout"), \
        [x for x in lines if x.get("type") == "error"]


def context(mounts, key=alice):
    return api("POST", "/contexts", {"volumeMounts": mounts}, key=key)


try:
    # --- made, listed, refused ---------------------------------------------------------
    st, vol = api("POST", "/volumes", {"name": "shared", "sizeMiB": 32})
    ok(st == 201 and vol.get("name") == "shared" and vol.get("sizeMiB") == 32 and
       vol.get("token", "").startswith("sgvol_") and vol.get("mountedBy") == [],
       "POST /volumes: 201, its id, name, size and token", (st, vol))
    vid = vol["volumeID"]
    st, dup = api("POST", "/volumes", {"name": "shared"})
    ok(st == 409 and "exists" in dup.get("message", ""), "a second volume of that name: 409",
       (st, dup))
    bad = [api("POST", "/volumes", b) for b in ({"name": "a b"}, {"name": ""}, {},
                                              {"name": "x", "sizeMiB": 8},
                                              {"name": "x", "sizeMiB": "big"})]
    bad.append(api("POST", "/volumes", raw=b"{not json"))
    ok(all(s == 400 for s, _ in bad), "bad names, sizes and bodies: 400", bad)
    st, other = api("POST", "/volumes", {"name": "shared"}, key=carol)
    ok(st == 201 and other["volumeID"] != vid, "another tenant may use the same name", st)
    st, lst = api("GET", "/volumes")
    ok(st == 200 and [v["volumeID"] for v in lst] == [vid], "GET /volumes: the tenant's own",
       lst)
    seen = [api("GET", f"/volumes/{vid}", key=carol)[0],
            api("DELETE", f"/volumes/{vid}", key=carol)[0],
            content("GET", vol, "dir", "/", key=carol)[0],
            context([{"name": "shared", "path": "/mnt/x"}], key=bob)[0]]
    ok(seen == [404, 404, 404, 404], "another tenant: the volume is unknown (get, delete, "
       "content, a mount by its name)", seen)

    # --- quota: max-volume-mib ------------------------------------------------------------
    st1, _ = api("POST", "/volumes", {"name": "b1", "sizeMiB": 64}, key=bob)
    st2, q = api("POST", "/volumes", {"name": "b2", "sizeMiB": 64}, key=bob)
    ok(st1 == 201 and st2 == 429 and q.get("quota") == "max-volume-mib" and q.get("limit") == 100,
       "max-volume-mib: the sizes together, 429 naming it", (st1, st2, q))
    st3, _ = api("POST", "/volumes", {"name": "b3", "sizeMiB": 32}, key=bob)
    ok(st3 == 201, "a smaller one still fits", st3)

    # --- the content API ---------------------------------------------------------------
    st, e = content("PUT", vol, "file", "/hello.txt", raw=b"hi there")
    ok(st == 201 and e.get("type") == "file" and e.get("size") == 8 and e.get("path") ==
       "/hello.txt", "PUT file with the volume's token: 201 and its entry", (st, e))
    ok(content("GET", vol, "file", "/hello.txt") == (200, b"hi there"), "GET file: the bytes")
    ok(content("GET", vol, "file", "/hello.txt", key=alice) == (200, b"hi there"),
       "the tenant's key reads it too")
    st, _ = content("GET", vol, "file", "/hello.txt", token=other["token"])
    ok(st == 401, "another volume's token: 401", st)
    st, e = content("PUT", vol, "file", "/hello.txt", raw=b"x")
    st2, _ = content("PUT", vol, "file", "/hello.txt", raw=b"replaced", force="true")
    ok(st == 409 and st2 == 201 and content("GET", vol, "file", "/hello.txt")[1] == b"replaced",
       "an existing file: 409, replaced with force=true", (st, e, st2))
    st, _ = content("PUT", vol, "file", "/no/such/dir/f", raw=b"x")
    ok(st == 404, "a file under a missing directory: 404", st)
    st, e = content("POST", vol, "dir", "/a/b/c", force="true", uid=1000, gid=1000, mode=493)
    ok(st == 201 and (e["type"], e["uid"], e["gid"], e["mode"]) == ("directory", 1000, 1000, 493),
       "POST dir with force, uid, gid and mode", (st, e))
    st, lst = content("GET", vol, "dir", "/", depth=3)
    ok(st == 200 and sorted(x["path"] for x in lst) == ["/a", "/a/b", "/a/b/c", "/hello.txt"],
       "GET dir, depth 3", lst)
    st, e = content("PATCH", vol, "path", "/hello.txt", body={"mode": 0o640, "uid": 4242})
    ok(st == 200 and (e["mode"], e["uid"]) == (0o640, 4242), "PATCH path: mode and uid", (st, e))
    bad = [content("PATCH", vol, "path", "/hello.txt", body={"uid": 0})[0],
           content("PATCH", vol, "path", "/hello.txt", body={"mode": "rw"})[0],
           content("GET", vol, "file", "/../../etc/passwd")[0],
           content("GET", vol, "file", "")[0],
           content("DELETE", vol, "path", "/")[0]]
    ok(bad[:2] == [400, 400] and bad[2] in (400, 403) and bad[3:] == [400, 400],
       "root's uid, a mode not a number, '..', no path, the root's removal: refused", bad)

    # --- mounted into sandboxes ------------------------------------------------------------
    st, c1 = context([{"name": "shared", "path": "/mnt/shared"}])
    st2, c2 = context([{"name": "shared", "path": "/home/user/data", "readOnly": True}])
    ok(st == 201 and st2 == 201, "two contexts mounting it (read-write, read-only)", (c1, c2))
    a, b = c1["id"], c2["id"]
    st, out, err = run(a, "print(open('/mnt/shared/hello.txt').read())\n"
                          "open('/mnt/shared/from_a.txt', 'w').write('A')")
    ok(out == "replaced\n" and not err, "the first reads the volume's file and writes one",
       (out, err))
    st, out, err = run(b, "print(open('/home/user/data/from_a.txt').read())\n"
                          "try:\n    open('/home/user/data/b.txt', 'w')\n"
                          "except OSError as e:\n    print(e.errno)")
    ok(out == "A\n30\n", "the second sees it at once; its read-only mount refuses a write "
       "(EROFS)", (out, err))
    ok(content("GET", vol, "file", "/from_a.txt") == (200, b"A"),
       "the content API reads what a sandbox wrote")
    run(a, "import os; os.symlink('/etc/passwd', '/mnt/shared/link')")
    st, _ = content("GET", vol, "file", "/link")
    ok(st in (403, 404), "a symlink planted by a sandbox is not followed", st)
    st, out, err = run(a, "import os\ntry:\n    open('/mnt/shared/big', 'wb').write(os.urandom("
                          "48 << 20))\nexcept OSError as e:\n    print(e.errno)")
    ok(out == "28\n", "its size is its limit: a 48 MiB write into 32 MiB is ENOSPC", (out, err))
    run(a, "import os; os.remove('/mnt/shared/big')")
    bad = [context([{"name": "shared", "path": p}])[0]
           for p in ("/usr/x", "relative", "/home/user", "/mnt/../etc", "/tmp/x")]
    bad.append(context([{"name": "nope", "path": "/mnt/x"}])[0])
    bad.append(context([{"name": "shared"}])[0])
    ok(bad == [400] * 5 + [404, 400], "mount paths of the system's, relative or not canonical; "
       "an unknown volume; no path: refused", bad)
    st, e = api("DELETE", f"/volumes/{vid}")
    ok(st == 409 and a in e.get("message", "") and b in e.get("message", ""),
       "DELETE while mounted: 409 naming the contexts", (st, e))
    st, info = api("GET", f"/volumes/{vid}")
    ok(sorted(info.get("mountedBy", [])) == sorted([a, b]) and info.get("usedBytes", 0) > 0,
       "GET /volumes/{id}: mountedBy and usedBytes", info)

    # --- pause, snapshot, fork ----------------------------------------------------------------
    st, _ = api("POST", f"/contexts/{a}/pause", {})
    content("PUT", vol, "file", "/while_paused.txt", raw=b"P")
    st2, out, err = run(a, "print(open('/mnt/shared/while_paused.txt').read())")
    ok(st == 200 and out == "P\n", "a paused sandbox keeps its mount: resumed, it sees what was "
       "written meanwhile", (st, st2, out, err))
    st, snap = api("POST", f"/contexts/{a}/snapshots", {})
    sid = snap.get("id") if isinstance(snap, dict) else None
    content("PUT", vol, "file", "/after_snapshot.txt", raw=b"S")
    st2, f = api("POST", "/contexts", {"snapshot": sid})
    fid = f.get("id") if isinstance(f, dict) else None
    st3, out, err = run(fid, "print(open('/mnt/shared/after_snapshot.txt').read())")
    ok(st == 201 and st2 == 201 and out == "S\n", "a context from a snapshot mounts the same "
       "volume, as it is now (not a copy)", (st, snap, st2, f, out, err))
    st, e = api("POST", "/contexts", {"snapshot": sid,
                                      "volumeMounts": [{"name": "shared", "path": "/x"}]})
    ok(st == 400, "volumeMounts beside a snapshot: 400 (the snapshot's are its)", (st, e))

    # --- a restart of sandgate -------------------------------------------------------------------
    d.restart()
    st, info = api("GET", f"/volumes/{vid}")
    ok(st == 200 and info.get("token") == vol["token"] and
       content("GET", vol, "file", "/from_a.txt") == (200, b"A"),
       "after a restart: the volume, its token and its files", (st, info))
    st, out, err = run(a, "print(open('/mnt/shared/hello.txt').read())")
    ok(out == "replaced\n", "a re-adopted context still has it mounted", (out, err))

    # --- deleted -----------------------------------------------------------------------------
    for cid in (a, b, fid):
        api("DELETE", f"/contexts/{cid}")
    st, e = api("POST", "/contexts", {"snapshot": sid})
    ok(st == 201, "the snapshot still makes a context while its volume exists", (st, e))
    api("DELETE", f"/contexts/{e['id']}")
    st, _ = api("DELETE", f"/volumes/{vid}")
    st2, _ = api("GET", f"/volumes/{vid}")
    st3, _ = content("GET", vol, "file", "/from_a.txt")
    ok(st == 204 and st2 == 404 and st3 in (401, 404), "DELETE once unmounted: 204, then unknown",
       (st, st2, st3))
    st, e = api("POST", "/contexts", {"snapshot": sid})
    ok(st == 409 and "deleted" in e.get("message", ""),
       "a snapshot whose volume was deleted: 409", (st, e))

    # --- E2B's SDKs, unchanged -----------------------------------------------------------------
    env = dict(os.environ, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url, E2B_API_KEY=alice,
               E2B_VOLUME_API_URL=d.url)
    if not os.access(PY, os.X_OK):
        ok(False, "tests/.venv-e2b has the E2B SDK (run scripts/venv.sh)")
    else:
        r = subprocess.run([PY, os.path.join(HERE, "e2b_volumes.py"), carol], env=env,
                           capture_output=True, text=True, timeout=600)
        relay_checks(r, 24, "the Python SDK's e2b_volumes.py")
    r = subprocess.run(["node", os.path.join(HERE, "e2b_volumes.mjs")], env=env,
                       capture_output=True, text=True, timeout=600)
    relay_checks(r, 8, "the JS SDK's e2b_volumes.mjs")
finally:
    d.stop()
done()
