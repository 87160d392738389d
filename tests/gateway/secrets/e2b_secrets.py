"""E2B's Python SDK, unchanged and configured only by the environment
(E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY): Secret's calls against
sandgate.  Run by tests/.venv-e2b's python.  usage: e2b_secrets.py
OTHER_TENANTS_KEY VALUE — one JSON line per check."""
import sys

from e2b import Secret
from e2b.exceptions import SecretException, SecretNotFoundException
from checks import check, fails

other, value = sys.argv[1], sys.argv[2]

info = Secret.create("sdk-token", value, metadata={"owner": "sdk"})
check(info.secret_id.startswith("sec_") and info.name == "sdk-token" and
      info.version == 1 and info.metadata == {"owner": "sdk"},
      "Secret.create: its id, name, version 1 and metadata", info)
check(value not in repr(info), "... and never its value", repr(info))
got = Secret.get_info("sdk-token")
check(got.secret_id == info.secret_id and got.created_at == info.created_at,
      "Secret.get_info by name", got)
up = Secret.update(info.secret_id, value + "-next")
check(up.version == 2 and up.metadata == {"owner": "sdk"},
      "Secret.update: version 2, metadata kept", up)
check(Secret.exists("sdk-token") and not Secret.exists("no-such-secret"), "Secret.exists")
names = []
pages = Secret.list(limit=1)
while pages.has_next:
    names += [s.name for s in pages.next_items()]
check("sdk-token" in names, "Secret.list, a page of one at a time", names)
e = fails(Secret.create, "sdk-token", "again")
check(isinstance(e, SecretException), "a name taken: the SDK's SecretException", e)
e = fails(Secret.get_info, info.secret_id, api_key=other)
check(isinstance(e, SecretNotFoundException),
      "another tenant's key: SecretNotFoundException", e)
check(Secret.destroy(info.secret_id) is True and Secret.destroy(info.secret_id) is False,
      "Secret.destroy: True, then False (not found)")
