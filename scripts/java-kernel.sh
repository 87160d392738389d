#!/bin/bash
# Installs the Java kernel (JJava, from PyPI, pinned and checksum-checked:
# Debian 12 has no Java kernel) where sandboxed code can run it: the
# sandboxes' /usr is this machine's, read-only.
#   /usr/local/share/jupyter/kernels/java/   the kernelspec ("language":
#       "java") and the kernel's jar, found by sandgate like every
#       kernelspec there
# It runs on Debian's OpenJDK 17 (openjdk-17-jdk-headless: JShell is the
# JDK's; scripts/deps.sh, docker/Dockerfile).  The wheel is only a carrier:
# nothing of it goes into a Python.
# Run as root (scripts/deps.sh runs it with sudo).  Idempotent: with the
# pinned version's kernelspec in place it does nothing.
set -euo pipefail
umask 022
version=1.0a8
sha256=b86ddf2eee6037a33a0adc2ac2f318a94638f42eefaeeeb13db381587e5f2a69
spec=/usr/local/share/jupyter/kernels/java
# The kernel's JVM is started directly, as JJava's launcher jar would start
# it (a JVM that only starts another is left out), its heap bounded to fit
# a sandbox's memory limit (--memory-mib, 1024 by default; the JVM would
# size it by the machine's); JShell runs the code in the same JVM.  Its
# ZeroMQ (JeroMQ) speaks TCP only: sandgate-preload.so turns its loopback
# sockets into the Unix sockets sandgate relays (metadata.sandgate.transport
# "tcp", as Deno's; IPv4 sockets, which the preload knows).
kernel_json=$(cat <<JSON
{
  "argv": ["/usr/bin/java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Djava.net.preferIPv4Stack=true",
           "--add-opens", "jdk.jshell/jdk.jshell=ALL-UNNAMED",
           "-jar", "$spec/jjava.jar", "{connection_file}"],
  "display_name": "Java",
  "language": "java",
  "interrupt_mode": "message",
  "env": {"JJAVA_VERSION": "$version"},
  "metadata": {"sandgate": {"transport": "tcp"}}
}
JSON
)
if [ -f "$spec/kernel.json" ] && [ "$(cat "$spec/kernel.json")" = "$kernel_json" ]; then
  echo "deps: Java kernel (JJava $version) already installed"
  exit 0
fi
echo "deps: installing the Java kernel (JJava $version) into $spec"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m pip download -q --no-deps --no-cache-dir --disable-pip-version-check \
  --only-binary=:all: -d "$tmp" "jjava==$version"
whl="$tmp/jjava-$version-py3-none-any.whl"
echo "$sha256  $whl" | sha256sum -c --quiet
/usr/bin/python3 -m zipfile -e "$whl" "$tmp/x"
rm -rf "$spec.new"
mkdir -p "$spec.new"
cp "$tmp/x/jjava-$version.data/data/share/jupyter/kernels/java/jjava.jar" "$spec.new/"
printf '%s\n' "$kernel_json" >"$spec.new/kernel.json"
rm -rf "$spec"
mv "$spec.new" "$spec"
