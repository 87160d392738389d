"""The Python E2B SDK, unchanged (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY):
a sandbox's network rules — create's network= (allow_out, deny_out),
allow_internet_access=False, update_network — against a sandgate started
with --egress-allow 0.0.0.0/0 and test_egress.py's own "internet" (two
public addresses).  Run by tests/.venv-e2b's python.
usage: e2b_network.py PUBLIC PUBLIC2 OTHER_KEY — prints one JSON line per check"""
import json
import os
import sys

from e2b import Sandbox, SandboxNetworkOpts
from e2b.exceptions import NotFoundException, SandboxException
from checks import check, fails

PUBLIC, PUBLIC2, OTHER_KEY = sys.argv[1:4]

PROBE = ("import json, socket\n"
         "def tcp(h):\n"
         "    s = socket.socket(); s.settimeout(3)\n"
         "    try:\n"
         "        s.connect((h, 8080)); return 'open'\n"
         "    except OSError as e:\n"
         "        return type(e).__name__\n"
         "    finally:\n"
         "        s.close()\n"
         f"print(json.dumps({{'a': tcp('{PUBLIC}'), 'b': tcp('{PUBLIC2}')}}))\n")


def reach(sbx):
    """{'a': what a connection to PUBLIC:8080 gives, 'b': to PUBLIC2}, from a command."""
    sbx.files.write("/tmp/probe.py", PROBE)
    r = sbx.commands.run("python3 /tmp/probe.py", timeout=60)
    return json.loads(r.stdout)


ALL = "0.0.0.0/0"
made = []
try:
    sbx = Sandbox.create(network=SandboxNetworkOpts(deny_out=lambda ctx: [ctx.all_traffic],
                                                    allow_out=[PUBLIC]))
    made.append(sbx)
    r = reach(sbx)
    check(r == {"a": "open", "b": "ConnectionRefusedError"},
          "deny_out all with allow_out one address: that address only", r)
    info = sbx.get_info()
    check(info.network is not None and info.network.get("allow_out") == [PUBLIC]
          and info.network.get("deny_out") == [ALL], "get_info gives the sandbox's network", info)

    deny = Sandbox.create(network=SandboxNetworkOpts(deny_out=[PUBLIC2]))
    made.append(deny)
    r = reach(deny)
    check(r == {"a": "open", "b": "ConnectionRefusedError"},
          "deny_out one address: that one is refused, the rest reached", r)

    deny.update_network({"deny_out": [ALL], "allow_out": [PUBLIC2]})
    r = reach(deny)
    check(r == {"a": "ConnectionRefusedError", "b": "open"},
          "update_network replaces the rules of a running sandbox", r)
    deny.pause()
    deny = Sandbox.connect(deny.sandbox_id)
    r = reach(deny)
    check(r == {"a": "ConnectionRefusedError", "b": "open"},
          "the rules hold across pause and connect", r)
    deny.update_network({})
    r = reach(deny)
    check(r == {"a": "open", "b": "open"}, "update_network({}) clears them", r)

    off = Sandbox.create(allow_internet_access=False)
    made.append(off)
    r = reach(off)
    check(r["a"] not in ("open", "ConnectionRefusedError") and r["b"] == r["a"],
          "allow_internet_access=False: no network at all", r)
    e = fails(off.update_network, {"allow_out": [PUBLIC]})
    check(isinstance(e, SandboxException) and "no network" in str(e),
          "allow_out on a sandbox without a network is refused, saying why", repr(e))

    e = fails(Sandbox.create, network=SandboxNetworkOpts(allow_out=["exa_mple.com"],
                                                         deny_out=[ALL]))
    check(isinstance(e, SandboxException) and "400" in str(e) and "'exa_mple.com'" in str(e),
          "a malformed host name is refused with 400 naming it", repr(e))
    e = fails(deny.update_network, {"deny_out": ["10.0.0.1/8"]})
    check(isinstance(e, SandboxException) and "400" in str(e) and "'10.0.0.1/8'" in str(e),
          "update_network: a range with host bits set is refused, naming it", repr(e))

    # The SDK sends no allow_internet_access unless asked: E2B's default is the internet.
    plain = Sandbox.create()
    made.append(plain)
    r = reach(plain)
    check(r == {"a": "open", "b": "open"},
          "Sandbox.create() saying nothing of the network: E2B's default, the internet", r)
    os.environ["E2B_API_KEY"] = OTHER_KEY
    e = fails(Sandbox.update_network, sbx.sandbox_id, {"deny_out": []})
    check(isinstance(e, NotFoundException), "another tenant's update_network: not found", repr(e))
    bare = Sandbox.create()
    made.append(bare)
    r = reach(bare)
    check(r["a"] not in ("open", "ConnectionRefusedError") and r["b"] == r["a"],
          "... for a key that may not use the network: none, and the sandbox is made", r)
    print(f"#SANDBOX {sbx.sandbox_id}", flush=True)
finally:
    for s in made:
        if s is not sbx:
            fails(s.kill)
