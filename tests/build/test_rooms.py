"""The daemon's folders show its architecture (docs/architecture.md, the map).

Read from the #include "..." lines of common/, proto/, kernelmgr/ and
gateway/ (scripts/rooms.py, which draws the picture from the same reading):

- a room (a folder of sources) is included by other rooms only through its
  face, the header named after it (gateway/http/http.h); common/ is a
  toolkit, each header public;
- no circle of rooms: a lower room calls back up only through function
  pointers it was given; and no room includes a higher layer's (common/ <
  proto/ < kernelmgr/ < gateway/);
- what runs inside a sandbox (kernelmgr/guest/) includes nothing of the
  host's rooms, and no host room includes it;
- at most 14 source files (.c and .h) in a room, at most 3 directly in
  gateway/ and kernelmgr/;
- no C file over 900 lines;
- docs/rooms.dot is what scripts/rooms.py draws from the tree now;
- tests/ mirrors the rooms (tests/README.md): every test file (test_*.c,
  .py, .sh) is in the folder of a room (tests/gateway/mcp/) or in one of
  the folders beside the rooms; every room has tests, or says here why
  not; every tests/ path Makefile.am names exists, and it runs every test
  of a room's folder."""
import os
import re
import sys

from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
sys.path.insert(0, os.path.join(SRC, "scripts"))
import rooms  # noqa: E402  (scripts/rooms.py)

MAX_ROOM, MAX_TOP, MAX_LINES = 14, 3, 900
GUEST = "kernelmgr/guest"
# tests/'s folders beside the rooms' (tests/README.md); lib/ holds helpers, no test
BESIDE = ("clients", "security", "build", "fuzz", "k8s")
NO_TESTS = {}  # room: why it has no tests folder
TEST_FILE = re.compile(r"^test_\w+\.(c|py|sh)$")

all_rooms = rooms.rooms(SRC)
incs = rooms.includes(SRC)
edges = rooms.edges(SRC)
diag(f"{len(all_rooms)} rooms, {len(incs)} includes, {len(edges)} edges between rooms")
ok(len(all_rooms) >= 15 and len(incs) > 300,
   "the rooms and their includes are found", sorted(all_rooms))

included = {b for a, b in edges}
no_face = sorted(r for r in included if rooms.face(r) and rooms.face(r) not in all_rooms[r])
ok(not no_face, "every room others include has a face named after it",
   [f"{r}: no {rooms.face(r)}" for r in no_face])

behind = []
for path, inc in incs:
    a, b = rooms.room_of(path), rooms.room_of(inc)
    if a != b and b not in rooms.TOOLKITS and inc != rooms.face(b):
        behind.append(f"{path} includes {inc}, not {rooms.face(b) or 'anything of ' + b}")
ok(not behind, "rooms include only each other's face", behind)

circles = rooms.cycles(edges)
ok(not circles, "no circle of rooms", [" <-> ".join(c) for c in circles])

upward = [f"{a} includes {b}" for a, b in edges if rooms.layer(a) < rooms.layer(b)]
ok(not upward, "no room includes a higher layer's", upward)

guest = [f"{a} includes {b}" for a, b in edges if GUEST in (a, b)]
ok(GUEST in all_rooms and not guest,
   "the guest (what runs in a sandbox) and the host include nothing of each other", guest)

crowded = []
for r, files in sorted(all_rooms.items()):
    limit = MAX_TOP if r in ("gateway", "kernelmgr") else MAX_ROOM
    if len(files) > limit:
        crowded.append(f"{r}: {len(files)} files (at most {limit})")
ok(not crowded, f"at most {MAX_ROOM} source files a room, {MAX_TOP} at the top of "
   "gateway/ and kernelmgr/", crowded)

long_files = []
for r, files in all_rooms.items():
    for path in files:
        n = sum(1 for _ in open(os.path.join(SRC, path), encoding="utf-8"))
        if path.endswith(".c") and n > MAX_LINES:
            long_files.append(f"{path}: {n} lines")
ok(not long_files, f"no C file over {MAX_LINES} lines", sorted(long_files))

tests = []
for dirpath, dirnames, filenames in os.walk(os.path.join(SRC, "tests")):
    dirnames[:] = sorted(d for d in dirnames
                         if d not in ("node_modules", "__pycache__") and not d.startswith("."))
    here = os.path.relpath(dirpath, os.path.join(SRC, "tests"))
    tests += [os.path.normpath(os.path.join(here, f)) for f in sorted(filenames)
              if TEST_FILE.match(f)]
diag(f"{len(tests)} test files under tests/")
stray = [f"tests/{t}" for t in tests
         if os.path.dirname(t) not in all_rooms and t.split("/")[0] not in BESIDE]
ok(bool(tests) and not stray, "every test is in a room's folder of tests/ (tests/gateway/mcp/) or "
   f"beside them (tests/{{{','.join(BESIDE)}}}/)", stray)

tested = {os.path.dirname(t) for t in tests}
untested = sorted(r for r in all_rooms if r not in tested and r not in NO_TESTS)
ok(not untested, "every room has tests in its folder of tests/ (or NO_TESTS says why not)",
   [f"tests/{r}/: no test_*" for r in untested])
gone = sorted(r for r in NO_TESTS if r not in all_rooms or r in tested)
ok(not gone, "NO_TESTS names only rooms still without tests", gone)

makefile = open(os.path.join(SRC, "Makefile.am"), encoding="utf-8").read()
named = set(re.findall(r"\btests/[\w./-]*\w", makefile))
missing = sorted(p for p in named if not any(os.path.exists(os.path.join(SRC, p + ext))
                                             for ext in ("", ".c")))
ok(bool(named) and not missing, "every tests/ path Makefile.am names exists", missing)
unrun = sorted(f"tests/{t}" for t in tests
               if t.split("/")[0] not in BESIDE
               and f"tests/{t}" not in named and f"tests/{t[:-2]}" not in named)
ok(not unrun, "Makefile.am runs every test of a room's folder", unrun)

committed = open(os.path.join(SRC, "docs", "rooms.dot"), encoding="utf-8").read()
now = rooms.dot(SRC)
if committed != now:
    import difflib
    diff = "".join(difflib.unified_diff(committed.splitlines(True), now.splitlines(True),
                                        "docs/rooms.dot", "the tree now"))
else:
    diff = None
ok(committed == now, "docs/rooms.dot is the tree's (scripts/rooms.py redraws it and rooms.svg)",
   diff)

done()
