"""jupyter_client accepts (and verifies) the messages sandgate encodes.

For every golden vector, sandgate's encoder (jmsg_tool encode) produces the
wire frames; jupyter_client's Session.deserialize checks the signature and
decodes them, and the result must equal the vector's message.  A tampered
frame must make jupyter_client refuse it, and sandgate's decoder must decode
what jupyter_client produced.  Finally the committed vectors must still be
what jupyter_client produces today.
"""
import base64
import json
import os
import subprocess
import sys

from jupyter_client.session import Session
from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
BUILD = os.environ.get("SG_BUILDDIR", ".")
TOOL = os.path.join(BUILD, "tests/proto/jmsg_tool")

with open(os.path.join(SRC, "tests/proto/golden/vectors.json")) as f:
    vectors = json.load(f)["vectors"]


def tool(mode, spec):
    r = subprocess.run([TOOL, mode], input=json.dumps(spec).encode(), capture_output=True,
                       check=True)
    return json.loads(r.stdout)


def normal(d):
    """jupyter_client turns header dates into datetimes; compare as JSON."""
    from jupyter_client.jsonutil import json_default
    return json.loads(json.dumps(d, default=json_default))


for v in vectors:
    name = v["name"]
    frames = [base64.b64decode(f) for f in tool("encode", v)]
    s = Session(key=v["key"].encode(), signature_scheme="hmac-sha256")
    idents, msg_list = s.feed_identities(frames)
    ok([i.decode() for i in idents] == v["identities"], f"{name}: identities survive")
    try:
        msg = s.deserialize(msg_list)
        accepted = True
    except Exception as e:  # jupyter_client raises ValueError on a bad signature
        accepted = False
        diag(repr(e))
    ok(accepted, f"{name}: jupyter_client verifies sandgate's signature")
    if accepted:
        for part in ("header", "parent_header", "metadata", "content"):
            ok(normal(msg[part]) == v[part], f"{name}: {part} equal", (msg[part], v[part]))
        ok([bytes(b) for b in msg["buffers"]] == [base64.b64decode(b) for b in v["buffers"]],
           f"{name}: buffers equal")

    bad = list(msg_list)
    bad[4] = bad[4][:-1] + b" }"  # content frame changed after signing
    try:
        Session(key=v["key"].encode()).deserialize(bad)
        refused = False
    except ValueError:
        refused = True
    ok(refused, f"{name}: jupyter_client refuses a tampered message from sandgate")

    # And the other way: sandgate decodes jupyter_client's frames of this vector.
    out = tool("decode", {"key": v["key"], "frames": v["frames"]})
    ok(out.get("content") == v["content"] and out.get("header") == v["header"],
       f"{name}: sandgate decodes jupyter_client's frames", out)
    out = tool("decode", {"key": v["key"] + "x", "frames": v["frames"]})
    ok(out.get("kind") == "unauthorized", f"{name}: sandgate refuses it under another key", out)

r = subprocess.run([sys.executable, os.path.join(SRC, "tests/proto/golden/gen_golden.py"),
                    "--check"], capture_output=True, text=True)
ok(r.returncode == 0, "committed vectors equal what jupyter_client produces now", r.stderr)
done()
