"""Sandboxes' lifecycle events (gateway/events/): GET /events by cursor and
E2B's GET /events/sandboxes[/{id}] by offset, in E2B's event shape, for
what E2B's API and sandgate's own do (create, pause, resume, snapshot,
fork, network rules, kill) and what the kernel manager does alone (an idle
pause); each tenant reads its own; --events-keep drops old ones.  Webhooks:
the server's (--webhook) and a tenant's (E2B's /events/webhooks), signed,
retried while the receiver is down, a slow receiver slowing no session."""
import base64
import hashlib
import hmac
import json
import os
import socket
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sgd import Daemon, add_key, wait_for
from tap import ok, done

class Receiver(ThreadingHTTPServer):
    """A webhook receiver: records each POST (path, headers, body); a path
    in `hold` waits for its event first, one in `refuse` is answered 503."""
    def __init__(self, port=0):
        self.got, self.hold, self.refuse = [], {}, set()
        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path in self.server.hold:
            self.server.hold[self.path].wait(60)
        self.server.got.append((self.path, {k.lower(): v for k, v in self.headers.items()},
                                body))
        self.send_response(503 if self.path in self.server.refuse else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def received(rx, path):
    return [(h, json.loads(b)) for p, h, b in rx.got if p == path]


rx = Receiver()
tmp = tempfile.mkdtemp(prefix="sg-events-", dir="/tmp")
keys = os.path.join(tmp, "keys")
alice, bob = add_key(keys, "alice"), add_key(keys, "bob")
d = Daemon("--pool-size", "0", "--keys-file", keys, "--events-keep", "30", "--webhook",
           f"http://127.0.0.1:{rx.server_port}/all", "--webhook-secret", "s3cret")


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
    st3, unknown = e2b("GET", "/events/sandboxes/no-such-sandbox")
    ok(st == 404 and mine.get("events") == [] and st3 == 404 and
       other["message"].replace(sid, "ID") == unknown["message"].replace("no-such-sandbox", "ID"),
       "bob sees none of alice's events: her sandbox is an unknown one (404)",
       (other, mine, unknown))

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

    # --webhook: every event, in order, signed.
    wait_for(lambda: len(received(rx, "/all")) >= len(all_["events"]), timeout=30)
    hooked = received(rx, "/all")
    ok([e for _, e in hooked] == all_["events"],
       "--webhook gets every event, in order, as GET /events has them",
       ([e["id"] for _, e in hooked], [e["id"] for e in all_["events"]]))
    h, e = hooked[0] if hooked else ({}, {})
    raw = next((b for p, _, b in rx.got if p == "/all"), b"")
    e2b_sig = base64.b64encode(hashlib.sha256(b"s3cret" + raw).digest()).decode().rstrip("=")
    mac = hmac.new(b"s3cret", raw, hashlib.sha256).hexdigest()
    ok(h.get("e2b-signature") == e2b_sig and h.get("x-sandgate-signature") == f"sha256={mac}" and
       h.get("e2b-signature-version") == "v1" and h.get("e2b-webhook-id") == "server" and
       h.get("e2b-delivery-id"), "signed as E2B signs (e2b-signature), and with an HMAC", h)

    # A tenant's own webhooks (E2B's API).
    st, wh = e2b("POST", "/events/webhooks", {
        "name": "mine", "url": f"http://127.0.0.1:{rx.server_port}/alice", "enabled": True,
        "events": ["sandbox.lifecycle.created"], "signatureSecret": "a"})
    wid = (wh or {}).get("id")
    st2, listed = e2b("GET", "/events/webhooks")
    st3, other = e2b("GET", f"/events/webhooks/{wid}", key=bob)
    ok(st == 201 and "signatureSecret" not in wh and [w["id"] for w in listed] == [wid] and
       st3 == 404, "POST /events/webhooks: made, listed for its tenant, unknown to another",
       (st, wh, listed, st3))
    e2b("POST", "/sandboxes", {"templateID": "base"}, key=bob)
    st, sb2 = e2b("POST", "/sandboxes", {"templateID": "base"})
    wait_for(lambda: received(rx, "/alice"), timeout=30)
    mine = [e["sandboxId"] for _, e in received(rx, "/alice")]
    ok(mine == [sb2.get("sandboxID")], "it gets its tenant's events of the types it asked for "
       "only (not bob's)", mine)

    # A receiver that is down: retried until it is up.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    st, wh2 = e2b("POST", "/events/webhooks", {"url": f"http://127.0.0.1:{port}/late"}, key=bob)
    st, c = d.json("POST", "/contexts", {}, token=bob)
    wid2 = (wh2 or {}).get("id")
    tried = wait_for(lambda: e2b("GET", f"/events/webhooks/{wid2}/deliveries", key=bob)[1],
                     timeout=30)
    late = Receiver(port)
    wait_for(lambda: received(late, "/late"), timeout=30)
    log = e2b("GET", f"/events/webhooks/{wid2}/deliveries", key=bob)[1]
    ok(tried and "error" in tried[0] and [e["sandboxId"] for _, e in received(late, "/late")] ==
       [c.get("id")] and log[-1].get("status") == 200 and log[-1]["attempt"] > 1,
       "a receiver that was down gets the event once it is up; the delivery log shows the "
       "attempts", log)

    # A slow receiver holds its own queue only: a session runs meanwhile.
    rx.hold["/slow"] = threading.Event()
    e2b("POST", "/events/webhooks", {"url": f"http://127.0.0.1:{rx.server_port}/slow"}, key=bob)
    st, c2 = d.json("POST", "/contexts", {}, token=bob)
    st, _, out = d.request("POST", "/execute", {"code": "6*7", "context_id": c2.get("id")},
                           token=bob)
    waiting = received(rx, "/slow") == []
    rx.hold["/slow"].set()
    ok(st == 200 and b"42" in out and waiting and wait_for(lambda: received(rx, "/slow")),
       "a receiver that holds its request slows no session; its event arrives once it answers",
       (st, out[-200:]))
    st, _ = e2b("DELETE", f"/events/webhooks/{wid}")
    st2, _ = e2b("GET", f"/events/webhooks/{wid}")
    ok(st == 204 and st2 == 404, "DELETE /events/webhooks/{id}", (st, st2))
    st, bad = e2b("POST", "/events/webhooks", {"url": "ftp://x"})
    ok(st == 400, "a url that is not http://: 400", bad)
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
