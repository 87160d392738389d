#!/bin/bash
# Makes tests/.venv, a virtual environment with tests/requirements.txt (the
# pinned PyPI packages the tests use).  Idempotent: does nothing when the
# environment already has exactly what the file asks for.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=tests/.venv req=tests/requirements.txt
stamp=$venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "venv: $venv is up to date"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req"
"$venv/bin/pip" check
echo "$want" >"$stamp"
echo "venv: $venv made from $req"
