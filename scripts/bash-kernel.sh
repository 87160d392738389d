#!/bin/bash
# Installs the Bash kernel (bash_kernel, from PyPI, pinned) where sandboxed
# code can run it: the sandboxes' /usr is this machine's, read-only.
#   /usr/local/lib/sandgate/bash_kernel           the package, outside the
#       system Python's site-packages (Debian manages those), on the kernel's
#       PYTHONPATH only
#   /usr/local/share/jupyter/kernels/bash/        its kernelspec ("language":
#       "bash"), found by sandgate like every kernelspec there
# Its imports besides the package come from Debian: python3-ipykernel,
# python3-pexpect, python3-filetype (scripts/deps.sh, docker/Dockerfile).
# Run as root (scripts/deps.sh runs it with sudo).  Idempotent: with the
# pinned version and its kernelspec in place it does nothing.
set -euo pipefail
umask 022
version=0.10.0
lib=/usr/local/lib/sandgate/bash_kernel
spec=/usr/local/share/jupyter/kernels/bash
kernel_json=$(cat <<JSON
{
  "argv": ["/usr/bin/python3", "-m", "bash_kernel", "-f", "{connection_file}"],
  "display_name": "Bash",
  "language": "bash",
  "codemirror_mode": "shell",
  "env": {"PS1": "\$", "PYTHONPATH": "$lib"}
}
JSON
)
if [ -d "$lib/bash_kernel-$version.dist-info" ] && [ -f "$spec/kernel.json" ] &&
   [ "$(cat "$spec/kernel.json")" = "$kernel_json" ]; then
  echo "deps: bash_kernel $version already installed"
  exit 0
fi
echo "deps: installing bash_kernel $version into $lib"
mkdir -p "$(dirname "$lib")"
rm -rf "$lib.new"
/usr/bin/python3 -m pip install -q --no-deps --no-cache-dir --disable-pip-version-check \
  --root-user-action=ignore \
  --target "$lib.new" "bash_kernel==$version"
rm -rf "$lib"
mv "$lib.new" "$lib"
mkdir -p "$spec"
printf '%s\n' "$kernel_json" >"$spec/kernel.json.new"
mv "$spec/kernel.json.new" "$spec/kernel.json"
cp "$lib/bash_kernel/resources/logo-svg.svg" "$spec/"
