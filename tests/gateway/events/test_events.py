"""Sandboxes' lifecycle events (gateway/events/): GET /events by cursor and
E2B's GET /events/sandboxes[/{id}] by offset, in E2B's event shape, for
what E2B's API and sandgate's own do (create, pause, resume, snapshot,
fork, network rules, kill) and what the kernel manager does alone (an idle
pause); each tenant reads its own; --events-keep drops old ones."""
import json
import os
import tempfile
import time

from sgd import Daemon, add_key, wait_for
from tap import ok, done

tmp = tempfile.mkdtemp(prefix="sg-events-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice, bob = add_key(keys, "alice"), add_key(keys, "bob")
d = Daemon("--pool-size", "0", "--keys-file", keys, "--events-keep", "30")


def e2b(method, path, body=None, key=alice):
    st, _, data = d.request(method, path, body, headers={"X-API-Key": key}, token=None)
    return st, json.loads(data) if data.strip() else None


def types(events):
    return [e["type"].replace("sandbox.lifecycle.", "") for e in events]


try:
    st, sbx = e2b("POST", "/sandboxes", {"templateID": "base", "timeout": 300})
    sid = sbx.get("sandboxID")
    d.request("POST", "/execute", {"code": "x = 1"}, headers={"E2b-Sandbox-Id": sid},
              token=alice)
    e2b("POST", f"/sandboxes/{sid}/pause")
    e2b("POST", f"/sandboxes/{sid}/connect", {"timeout": 300})
    e2b("POST", f"/sandboxes/{sid}/snapshots", {})
    e2b("DELETE", f"/sandboxes/{sid}")
    st, page = d.json("GET", "/events", token=alice)
    evs = page.get("events", [])
    got = [(e["sandboxId"], t) for e, t in zip(evs, types(evs))]
    want = [(sid, t) for t in ("created", "paused", "resumed", "checkpointed", "killed")]
    ok(st == 200 and got == want, "E2B's create, pause, connect, snapshot, kill: their events, "
       "in order", got)
    ev = page["events"][0]
    ok(ev.get("version") == "v2" and ev.get("sandboxTeamId") == "alice" and
       ev.get("timestamp", "").endswith("Z") and "sandbox_metadata" in ev.get("eventData", {}) and
       "_ms" not in ev, "E2B's event shape (version v2, sandboxTeamId the tenant, timestamp)", ev)

    st, first = d.json("GET", "/events?limit=2", token=alice)
    st2, rest = d.json("GET", f"/events?after={first.get('next')}", token=alice)
    ok(types(first["events"]) == ["created", "paused"] and
       types(rest["events"]) == ["resumed", "checkpointed", "killed"],
       "by cursor: limit 2, then after the cursor the rest", (first, rest))
    st3, last = d.json("GET", f"/events?after={rest.get('next')}", token=alice)
    ok(last.get("events") == [] and last.get("next") == rest.get("next"),
       "after the last: none, the same cursor", last)
    st, only = d.json("GET", "/events?types=paused&types=sandbox.lifecycle.killed", token=alice)
    ok(types(only["events"]) == ["paused", "killed"], "types= filters (short or full names)", only)
    st, bad = d.json("GET", "/events?limit=0", token=alice)
    ok(st == 400, "a bad limit: 400", (st, bad))

    st, e2b_list = e2b("GET", f"/events/sandboxes/{sid}?orderAsc=true&limit=3")
    st2, newest = e2b("GET", f"/events/sandboxes/{sid}?limit=1")
    st3, off = e2b("GET", f"/events/sandboxes/{sid}?orderAsc=true&offset=3")
    ok(st == 200 and types(e2b_list) == ["created", "paused", "resumed"] and
       types(newest) == ["killed"] and types(off) == ["checkpointed", "killed"],
       "E2B's /events/sandboxes/{id}: oldest first with orderAsc, newest first by default, offset",
       (e2b_list, newest, off))
    st, other = e2b("GET", f"/events/sandboxes/{sid}", key=bob)
    st2, mine = d.json("GET", "/events", token=bob)
    ok(other == [] and mine.get("events") == [], "bob sees none of alice's events", (other, mine))

    # sandgate's own API, and the kernel manager's own acts.
    st, c = d.json("POST", "/contexts", {}, token=bob)
    cid = c.get("id")
    d.request("POST", "/execute", {"code": "1", "context_id": cid}, token=bob)  # it runs
    d.json("POST", f"/contexts/{cid}/pause", token=bob)
    d.request("POST", "/execute", {"code": "1", "context_id": cid}, token=bob)
    d.json("POST", f"/contexts/{cid}/fork", {}, token=bob)
    d.json("DELETE", f"/contexts/{cid}", token=bob)
    st, mine = d.json("GET", f"/events?sandbox={cid}", token=bob)
    got = types(mine.get("events", []))
    ok(got[:3] == ["created", "paused", "resumed"] and "killed" == got[-1] and
       ("checkpointed" in got or "forked" in got),
       "sandgate's own contexts: created, paused, resumed (by an execute), forked, killed", got)
    st, all_ = d.json("GET", "/events?limit=1000")
    ok({e["sandboxTeamId"] for e in all_["events"]} == {"alice", "bob"},
       "the admin sees every tenant's", all_)
finally:
    d.stop()

# --events-keep: old events go (a daemon keeping them a second).
d = Daemon("--pool-size", "0", "--events-keep", "1")
try:
    st, c = d.json("POST", "/contexts", {})
    st, page = d.json("GET", "/events")
    kept = len(page.get("events", []))
    gone = wait_for(lambda: d.json("GET", "/events")[1].get("events") == [], timeout=10)
    ok(kept == 1 and gone, "--events-keep 1: an event is there, then gone after a second", kept)
finally:
    d.stop()
done()
