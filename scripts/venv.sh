#!/bin/bash
# Makes the tests' virtual environments from their pinned PyPI requirements:
# tests/requirements.txt -> tests/.venv, tests/requirements-NAME.txt ->
# tests/.venv-NAME (one environment per file, so that one set of pins never
# has to agree with another).  Never the system Python: its /usr is the
# sandboxes' root file system.  Idempotent: an environment that already has
# exactly what its file asks for is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
for req in tests/requirements.txt tests/requirements-*.txt; do
  [ -f "$req" ] || continue
  name=$(basename "$req" .txt)
  venv=tests/.venv${name#requirements}
  stamp=$venv/.requirements.sha256
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "venv: $venv is up to date"
    continue
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req"
  "$venv/bin/pip" check
  echo "$want" >"$stamp"
  echo "venv: $venv made from $req"
done
