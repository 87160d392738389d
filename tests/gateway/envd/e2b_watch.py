"""E2B's Python SDK, unchanged (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY),
watching directories (envd's CreateWatcher / GetWatcherEvents /
RemoveWatcher; gateway/envd/watch.c): the events E2B's envd gives for a
write (create, chmod, write), a rename, a chmod and a removal from a
command, entries, recursion, errors, stop; another tenant and another
sandbox cannot read a watcher; the max-queued quota counts watchers.
Run by tests/.venv-e2b's python.
usage: e2b_watch.py OTHER_TENANTS_KEY — one JSON line per check."""
import json
import os
import sys
import urllib.error
import urllib.request

from e2b import FileNotFoundException, FilesystemEventType as T, FileType, SandboxException
from e2b import Sandbox
from checks import check, fails

other = sys.argv[1]
url, key = os.environ["E2B_SANDBOX_URL"], os.environ["E2B_API_KEY"]


def seen(handle):
    return [(e.type, e.name) for e in handle.get_new_events()]


def rpc(method, body, sandbox_id, api_key=key):
    """A raw envd call: (HTTP status, answer)."""
    req = urllib.request.Request(f"{url}/filesystem.Filesystem/{method}",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {api_key}",
                                          "E2b-Sandbox-Id": sandbox_id})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


sbx = Sandbox.create(timeout=300)
sbx.files.make_dir("w/sub")
h = sbx.files.watch_dir("w")
sbx.files.write("w/a.txt", "hello")
got = seen(h)
check(got == [(T.CREATE, "a.txt"), (T.CHMOD, "a.txt"), (T.WRITE, "a.txt")],
      "files.write of a new file: create, chmod, write (as E2B's envd)", got)
sbx.commands.run("cd w && mv a.txt b.txt && chmod 600 b.txt && rm b.txt && echo x > sub/e.txt")
got = seen(h)
check(got == [(T.RENAME, "a.txt"), (T.CREATE, "b.txt"), (T.CHMOD, "b.txt"), (T.REMOVE, "b.txt")],
      "a command's mv, chmod, rm: rename and create, chmod, remove; not the subdirectory's "
      "file (not recursive)", got)
check(seen(h) == [], "nothing new: no events")
listed = [c.cmd for c in sbx.commands.list()]
check(not any("watch" in c for c in listed), "commands.list() does not show the watch", listed)
h.stop()
e = fails(h.get_new_events)
check(isinstance(e, SandboxException), "after stop(), its events are not found", e)

r = sbx.files.watch_dir("w", recursive=True, include_entry=True)
sbx.files.make_dir("w/sub/deep")
sbx.files.write("w/sub/deep/f.txt", "x")
events = r.get_new_events()
got = [(e.type, e.name) for e in events]
write = next((e for e in events if e.type == T.WRITE), None)
check((T.CREATE, "sub/deep") in got and (T.WRITE, "sub/deep/f.txt") in got and write and
      write.entry and write.entry.path == "/home/user/w/sub/deep/f.txt" and
      write.entry.type == FileType.FILE,
      "recursive, with entries: a new directory's file, its entry included", events)
r.stop()

e = fails(sbx.files.watch_dir, "missing")
check(isinstance(e, FileNotFoundException), "a missing directory: FileNotFoundException", e)
e = fails(sbx.files.watch_dir, "w/sub/e.txt")
check(isinstance(e, SandboxException) and not isinstance(e, FileNotFoundException),
      "a file, not a directory: an error", e)

# Who may read a watcher: its sandbox's tenant, on that sandbox.
st, made = rpc("CreateWatcher", {"path": "/home/user/w"}, sbx.sandbox_id)
wid = made.get("watcherId", "")
second = Sandbox.create(timeout=300)
st2, _ = rpc("GetWatcherEvents", {"watcherId": wid}, sbx.sandbox_id, api_key=other)
st3, ans = rpc("GetWatcherEvents", {"watcherId": wid}, second.sandbox_id)
st4, ok_ans = rpc("GetWatcherEvents", {"watcherId": wid}, sbx.sandbox_id)
check(st == 200 and wid and st2 == 404 and st3 == 404 and ans.get("code") == "not_found" and
      st4 == 200, "a watcher id: another tenant sees an unknown sandbox, another sandbox of "
      "the same tenant an unknown watcher", (st, made, st2, st3, ans, st4, ok_ans))
rpc("RemoveWatcher", {"watcherId": wid}, sbx.sandbox_id)

# max-queued 3 (the tenant's): three watches, the fourth refused.
hs = [sbx.files.watch_dir("w") for _ in range(3)]
st, ans = rpc("CreateWatcher", {"path": "/home/user/w"}, sbx.sandbox_id)
check(st == 429 and "max-queued" in json.dumps(ans),
      "watches count as the tenant's work: the fourth is refused (max-queued)", (st, ans))
for x in hs:
    x.stop()
st, ans = rpc("CreateWatcher", {"path": "/home/user/w"}, sbx.sandbox_id)
check(st == 200, "stopped, they count no more", (st, ans))
sbx.kill()
second.kill()
