#!/bin/bash
# Installs Deno, whose built-in Jupyter kernel runs JavaScript and
# TypeScript, where sandboxed code can run it: the sandboxes' /usr is this
# machine's, read-only.
#   /usr/local/lib/sandgate/deno/deno          the binary, from the npm
#       registry's @deno/linux-x64-glibc package (pinned, checksum checked);
#       it links against the system glibc only
#   /usr/local/share/jupyter/kernels/deno/     its kernelspec ("language":
#       "typescript"; sandgate maps js, javascript, ts and typescript to it)
# The kernel speaks ZeroMQ over TCP only; its kernelspec says so
# ("metadata": {"sandgate": {"transport": "tcp"}}) and sandgate's
# sandgate-preload.so gives it Unix sockets instead (docs/architecture.md).
# It publishes results and stdout from other tasks than its status, now
# and then after an execution's idle status (up to ~90 ms on a loaded
# machine): sandgate waits 100 ms more for them, again after each late one
# ("iopub_linger_ms": 30).
# Interrupts are interrupt_request messages (Deno terminates the running
# code and keeps its state; a SIGINT would end the kernel).
# Deno's kernel runs user code with every Deno permission (it takes no
# --allow-* flags): the sandbox is the wall, as for every kernel.
# Run as root (scripts/deps.sh runs it with sudo).  Idempotent: with the
# pinned version and its kernelspec in place it does nothing.
set -euo pipefail
umask 022
version=2.9.6
sha256=a6596af07f3570b4f1ffa6783bfee9942aac14a719a601baa6bf5b71bf0105e2
registry=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}
lib=/usr/local/lib/sandgate/deno
spec=/usr/local/share/jupyter/kernels/deno
kernel_json=$(cat <<JSON
{
  "argv": ["$lib/deno", "jupyter", "--kernel", "--conn", "{connection_file}"],
  "display_name": "Deno (TypeScript, JavaScript)",
  "language": "typescript",
  "codemirror_mode": "typescript",
  "interrupt_mode": "message",
  "env": {"DENO_DIR": "/tmp/deno", "DENO_NO_UPDATE_CHECK": "1", "DENO_NO_PROMPT": "1",
          "NO_COLOR": "1"},
  "metadata": {"sandgate": {"transport": "tcp", "iopub_linger_ms": 30}}
}
JSON
)
if [ -x "$lib/deno" ] && [ "$("$lib/deno" --version 2>/dev/null | head -1 | cut -d' ' -f2)" = "$version" ] &&
   [ -f "$spec/kernel.json" ] && [ "$(cat "$spec/kernel.json")" = "$kernel_json" ]; then
  echo "deps: deno $version already installed"
  exit 0
fi
echo "deps: installing deno $version into $lib"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --retry 3 -o "$tmp/deno.tgz" "$registry/@deno/linux-x64-glibc/-/linux-x64-glibc-$version.tgz"
echo "$sha256  $tmp/deno.tgz" | sha256sum -c --quiet
tar -xzf "$tmp/deno.tgz" -C "$tmp" package/deno
mkdir -p "$lib"
install -m 0755 "$tmp/package/deno" "$lib/deno.new"
mv "$lib/deno.new" "$lib/deno"
mkdir -p "$spec"
printf '%s\n' "$kernel_json" >"$spec/kernel.json.new"
mv "$spec/kernel.json.new" "$spec/kernel.json"
