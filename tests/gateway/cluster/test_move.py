"""Replicas helping each other (gateway/cluster/), two sandgates on this host
with real runsc, each the other's peer: a snapshot sent from one and taken
in by the other (GET/PUT /cluster/snapshots), and a context moved with its
memory, files and tenant under the same id (POST /contexts/{id}/move); an
operator's alone; refusals that change nothing (a busy context, one with a
volume, a bad archive, a peer that is down: the context stays and works);
GET /cluster/routes for the proxy.  Through the proxy: test_cluster.py."""
import base64
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

from sgd import SANDGATE, TOKEN, Daemon, add_key, free_port
from tap import ok, done

tmp = tempfile.mkdtemp(prefix="sg-move-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice, bob = add_key(keys, "alice"), add_key(keys, "bob")


pa, pb = free_port(), free_port()
a = Daemon("--pool-size", "0", "--keys-file", keys, "--replica-id", "ra", "--peers",
           f"rb=127.0.0.1:{pb},gone=127.0.0.1:{free_port()}", port=pa)
b = Daemon("--pool-size", "0", "--keys-file", keys, "--replica-id", "rb", "--peers",
           f"ra=127.0.0.1:{pa}", port=pb)


def run(d, cid, code, key=None):
    kw = {"token": key} if key else {}
    st, _, out = d.request("POST", "/execute", {"context_id": cid, "code": code}, **kw)
    lines = [json.loads(x) for x in out.decode().splitlines() if x.strip()] if st == 200 else []
    return st, "".join(x.get("text", "") for x in lines if x.get("type") == "stdout")


try:
    st, c = a.json("POST", "/contexts", {}, token=alice)
    cid = c["id"]
    run(a, cid, "secret = 'alice-only'; open('notes.txt', 'w').write('hers')", alice)

    # --- a snapshot out and in ----------------------------------------------------------
    st, snap = a.json("POST", f"/contexts/{cid}/snapshots", {"name": "carried"}, token=alice)
    sid = snap["id"]
    refused = [a.request("GET", f"/cluster/snapshots/{sid}", token=alice)[0],
               a.request("GET", f"/cluster/snapshots/{sid}", token=bob)[0]]
    ok(refused == [403, 404], "GET /cluster/snapshots: alice's own key 403 (the operator's), "
       "bob's 404", refused)
    st, h, tar = a.request("GET", f"/cluster/snapshots/{sid}")
    rec = h.get("Sandgate-Snapshot", "")
    record = json.loads(base64.urlsafe_b64decode(rec + "=" * (-len(rec) % 4)))
    ok(st == 200 and tar[257:262] == b"ustar" and record.get("id") == sid and
       record.get("tenant") == "alice", "the admin gets its files as a tar, its record in "
       "Sandgate-Snapshot", (st, len(tar), record))

    def put(d, rid, body, header=rec, key=None):
        kw = {"token": key} if key else {}
        return d.request("PUT", f"/cluster/snapshots/{rid}", raw=body,
                         headers={"Sandgate-Snapshot": header,
                                  "Content-Type": "application/x-tar"}, **kw)

    other = dict(record, id="5bce98f7-0000-4000-8000-00000000abcd")
    other_h = base64.urlsafe_b64encode(json.dumps(other).encode()).decode()
    bad = [put(b, sid, tar, key=alice)[0], put(b, sid, tar, header="bm90IGpzb24")[0],
           put(b, other["id"], tar)[0], put(b, other["id"], b"not a tar" * 1000, other_h)[0]]
    st, lst = b.json("GET", "/snapshots")
    ok(bad == [403, 400, 400, 400] and lst == [] and
       os.listdir(os.path.join(b.dir, "transfers")) == [],
       "PUT refused: a tenant's key, a header that is no record, a path not its id, an archive "
       "that is no tar — nothing kept", (bad, lst))
    st, got, _ = put(b, sid, tar)[::1]
    st2 = put(b, sid, tar)[0]
    ok(st == 201 and st2 == 409, "the admin's PUT takes it in (201); again: 409", (st, st2))
    st, f = b.json("POST", "/contexts", {"snapshot": sid}, token=alice)
    st2, out = run(b, f.get("id"), "print(secret, open('notes.txt').read())", alice)
    ok(st == 201 and out == "alice-only hers\n",
       "alice makes a context from it on the other sandgate: her variable and file", (st, out))
    b.json("DELETE", f"/contexts/{f['id']}", token=alice)
    old = dict(record, id="5bce98f7-0000-4000-8000-00000000beef", runsc="release-20221219.0")
    old_h = base64.urlsafe_b64encode(json.dumps(old).encode()).decode()
    st = put(b, old["id"], tar, old_h)[0]
    st2, e = b.json("POST", "/cluster/contexts", {"snapshot": old["id"]})
    ok(st == 201 and st2 == 409 and "runsc" in e.get("message", ""), "an image another runsc "
       "made is taken in, and starting a moved context from it is refused (409), so the move "
       "that sent it leaves the context where it was", (st, st2, e))
    b.json("DELETE", f"/snapshots/{old['id']}")

    # --- a context moved ------------------------------------------------------------------
    refused = [a.json("POST", f"/contexts/{cid}/move", {"to": "rb"}, token=alice)[0],
               a.json("POST", f"/contexts/{cid}/move", {"to": "rb"}, token=bob)[0],
               a.json("POST", f"/contexts/{cid}/move", {"to": "nowhere"})[0],
               a.json("POST", f"/contexts/{cid}/move", {"to": "ra"})[0]]
    ok(refused == [403, 404, 400, 400], "move refused: alice's key (the operator's), bob's "
       "(unknown), an unknown replica, the one it is on", refused)
    ran = {}
    busy = threading.Thread(target=lambda: ran.update(
        r=run(a, cid, "import time; time.sleep(2); print('slept')", alice)))
    busy.start()
    for _ in range(100):
        if a.json("GET", f"/api/kernels/{cid}", token=alice)[1].get("execution_state") == "busy":
            break
        time.sleep(0.05)
    st, e = a.json("POST", f"/contexts/{cid}/move", {"to": "gone"})
    busy.join()
    st2, out = run(a, cid, "print(secret)", alice)
    ok(st == 502 and ran.get("r") == (200, "slept\n") and out == "alice-only\n",
       "a context running code: the move waits for it to end (its output whole); then a peer "
       "that is down: 502, and the context stays, woken by its next request", (st, e, ran, out))
    st, mv = a.json("POST", f"/contexts/{cid}/move", {"to": "rb"})
    ok(st == 200 and mv.get("id") == cid and mv.get("replica") == "rb",
       f"moved to rb in {mv.get('ms')} ms", (st, mv))
    st, out = run(b, cid, "print(secret, open('notes.txt').read())", alice)
    st2, c2 = b.json("GET", f"/contexts/{cid}", token=alice)
    ok(st == 200 and out == "alice-only hers\n" and c2.get("tenant") == "alice",
       "on rb under the same id: alice's, her variable and file", (st, out, c2))
    ok(b.json("GET", f"/contexts/{cid}", token=bob)[0] == 404, "bob: unknown there too")
    h = hashlib.sha256(cid.encode()).hexdigest()
    rb_routes = b.json("GET", "/cluster/routes", token=None)
    ra_routes = a.json("GET", "/cluster/routes", token=None)
    ok(rb_routes == (200, {"replica": "rb", "here": [h], "moving": [], "moved": {},
                           "contexts": 1}) and
       ra_routes[1].get("here") == [] and ra_routes[1].get("moved") == {h: "rb"},
       "GET /cluster/routes (public): rb lists the moved id's SHA-256, never the id, and how "
       "many it holds; ra lists it as moved to rb", (rb_routes, ra_routes))
    for _ in range(100):
        if a.json("GET", f"/contexts/{cid}", token=alice)[0] == 404:
            break
        time.sleep(0.05)
    ok(a.json("GET", f"/contexts/{cid}", token=alice)[0] == 404, "ra let it go once moved")
    left = [s["id"] for s in a.json("GET", "/snapshots", token=alice)[1]]
    ok(left == [sid], "the move's own snapshot is gone from ra (alice's named one stays)", left)
    st, mv = b.json("POST", f"/contexts/{cid}/move", {"to": "ra"})
    st2, out = run(a, cid, "print(secret)", alice)
    ok(st == 200 and out == "alice-only\n", "and back to ra", (st, mv, out))

    # --- a move waits until the proxies asking know of it --------------------------------
    a.json("GET", "/cluster/routes?poller=p1", token=None)
    result = {}
    mover = threading.Thread(target=lambda: result.update(
        r=a.json("POST", f"/contexts/{cid}/move", {"to": "rb"})))
    mover.start()
    time.sleep(0.3)
    st, out = run(a, cid, "print(secret)", alice)
    _, told = a.json("GET", "/cluster/routes?poller=p1", token=None)
    ok(st == 200 and out == "alice-only\n" and mover.is_alive() and told.get("moving") == [h],
       "announced: listed as moving, it still runs on ra until the proxy p1 has asked twice "
       "more", (st, out, told))
    a.json("GET", "/cluster/routes?poller=p1", token=None)
    mover.join()
    st, mv = result["r"]
    st2, out = run(b, cid, "print(secret)", alice)
    ok(st == 200 and st2 == 200 and out == "alice-only\n",
       "p1 asked again: the move goes on, to rb", (st, mv, out))
    t0 = time.time()
    st, mv = b.json("POST", f"/contexts/{cid}/move", {"to": "ra"})
    ok(st == 200 and run(a, cid, "print(secret)", alice)[0] == 200,
       f"no proxy asks rb: back to ra in {time.time() - t0:.2f} s, waiting for none", (st, mv))
    time.sleep(2.1)  # p1 has gone quiet: no later move waits for it

    # --- the peer killed during a move: the context stays, never two copies -----------------
    result = {}
    mover = threading.Thread(target=lambda: result.update(
        r=a.json("POST", f"/contexts/{cid}/move", {"to": "rb"})))
    mover.start()
    time.sleep(0.15)
    b.proc.kill()
    b.proc.wait(timeout=30)
    mover.join()
    st, e = result["r"]
    st2, out = run(a, cid, "print(secret)", alice)
    ok(st == 502 and out == "alice-only\n", "rb killed during the move: 502, and the context "
       "stays on ra, whole", (st, e, out))
    b._start()
    st, _ = b.json("GET", f"/contexts/{cid}")
    left = [s["id"] for s in b.json("GET", "/snapshots")[1]]
    ok(st == 404 and sid in left and len(left) == 1, "rb, started again, has no copy of it "
       "(only the snapshot sent to it before)", (st, left))

    # --- one with a volume stays ------------------------------------------------------------
    st, vol = a.json("POST", "/volumes", {"name": "v", "sizeMiB": 16}, token=alice)
    st, cv = a.json("POST", "/contexts", {"volumeMounts": [{"name": "v", "path": "/mnt/v"}]},
                    token=alice)
    st, e = a.json("POST", f"/contexts/{cv['id']}/move", {"to": "rb"})
    ok(st == 409 and "volumes" in e.get("message", ""), "a context with a volume stays: 409",
       (st, e))

    # --- drains: `sandgate drain`, and SIGTERM with --drain-on-stop --------------------------
    refused = [a.request("POST", "/cluster/drain", token=alice)[0],
               b.request("POST", "/cluster/contexts", {"snapshot": sid}, token=alice)[0]]
    ok(refused == [403, 403], "a tenant's key may not drain a replica nor start a moved "
       "context", refused)
    made = [a.json("POST", "/contexts", {}, token=alice)[1]["id"] for _ in range(2)]
    for i, x in enumerate(made):
        run(a, x, f"n = {i}", alice)
    r = subprocess.run([SANDGATE, "drain", a.url], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SANDGATE_TOKEN=TOKEN))
    summary = json.loads(r.stdout or "{}")
    moved = sorted(m["id"] for m in summary.get("moved", []))
    stayed = {s["id"]: s["why"] for s in summary.get("stayed", [])}
    ok(r.returncode == 0 and moved == sorted(made + [cid]) and list(stayed) == [cv["id"]] and
       "volumes" in stayed[cv["id"]] and {m["replica"] for m in summary["moved"]} == {"rb"},
       "`sandgate drain`: every context moved to the live peer (the dead one, which did not "
       "say its load, left out), the one with a volume stayed, saying why", (r, summary))
    outs = [run(b, x, "print(n)", alice)[1] for x in made]
    health = a.json("GET", "/health", token=None)
    ok(outs == ["0\n", "1\n"] and health == (503, {"status": "draining"}),
       "on rb with their variables; the drained sandgate's /health says 503 draining (it "
       "still serves what stayed)", (outs, health))
    st, out = run(a, cv["id"], "print('still here')", alice)
    ok(st == 200 and out == "still here\n", "the context that stayed still runs there",
       (st, out))
    a.stop()
    a.cmd += ["--drain-on-stop", "yes"]
    a.dir = tempfile.mkdtemp(prefix="sg-move-a2-", dir="/tmp")
    a.cmd[a.cmd.index("--state-dir") + 1] = a.dir
    os.chmod(a.dir, 0o711)
    a._start()
    st, c3 = a.json("POST", "/contexts", {}, token=alice)
    run(a, c3["id"], "last = 'moved at stop'", alice)
    a.proc.send_signal(signal.SIGTERM)
    a.proc.wait(timeout=120)
    st, out = run(b, c3["id"], "print(last)", alice)
    ok(a.proc.returncode == 0 and out == "moved at stop\n", "SIGTERM with --drain-on-stop: the "
       "context moves to its peer before sandgate stops", (a.proc.returncode, out))
finally:
    a.stop()
    b.stop()
done()
