"""The Python E2B SDK, unchanged (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY):
host names in a sandbox's network rules — create's network=(allow_out with a
name, deny_out all traffic; rules with a header holding a secret) and
update_network — against the sandgate and
the "internet" of test_egress_names.py.  Run by tests/.venv-e2b's python.
usage: e2b_names.py API OTHER < CA_PEM — prints one JSON line per check"""
import json
import sys

from e2b import Sandbox, SandboxNetworkOpts
from checks import check

API, OTHER = sys.argv[1:3]
CA = sys.stdin.read()
CURL = "curl -sS --max-time 20 --cacert /tmp/ca.pem https://{}/ || true"


def who(sbx, name):
    """The address of the server that answered https://NAME/ in the sandbox, or its error."""
    out = sbx.commands.run(CURL.format(name), timeout=60).stdout
    try:
        return json.loads(out)["me"]
    except ValueError:
        return out.strip() or "refused"


sbx = Sandbox.create(network=SandboxNetworkOpts(allow_out=["api.example.test"],
                                                deny_out=lambda ctx: [ctx.all_traffic]))
try:
    sbx.files.write("/tmp/ca.pem", CA)
    got = (who(sbx, "api.example.test"), who(sbx, "other.example.test"))
    check(got[0] == API and got[1] != OTHER,
          "allow_out a host name with deny_out all traffic: that name only", got)
    sbx.update_network({"allow_out": ["other.example.test"], "deny_out": ["0.0.0.0/0"]})
    got = (who(sbx, "api.example.test"), who(sbx, "other.example.test"))
    check(got[0] != API and got[1] == OTHER, "update_network with a name", got)
    info = sbx.get_info()
    check(info.network and info.network.get("allow_out") == ["other.example.test"],
          "get_info gives the rules with the name", info)
    ruled = Sandbox.create(network={"rules": {"api.example.test": [
        {"transform": {"headers": {"X-From-Sdk": "${e2b.secrets.api-key}"}}}]}})
    try:
        out = ruled.commands.run("curl -sS --max-time 20 https://api.example.test/h",
                                 timeout=60).stdout
        check("x-from-sdk" in out.lower() and "sk-test" in out,
              "create's network rules: the proxy sets the header, a secret's value in it", out)
    finally:
        ruled.kill()
finally:
    sbx.kill()
