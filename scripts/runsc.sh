#!/bin/bash
# Builds and installs gVisor's runsc, the sandbox every kernel runs in, from
# its Go module at the pinned version (scripts/runsc.pin):
#   /usr/local/lib/sandgate/runsc/VERSION/runsc   the binary (static, ~85 MB)
#   /usr/local/bin/runsc -> that                  what sandgate runs by default
# The go command fetches the module from the Go module proxy and checks it
# against the checksum database (sum.golang.org) before building.  A Go
# toolchain at least as new as the module's `go` line is needed: the
# machine's own Go when it is new enough; else Go $RUNSC_GO from the proxy:
# an older Go (1.21 or newer) fetches it itself (GOTOOLCHAIN); without one,
# the toolchain module (golang.org/toolchain) is fetched, its hash checked
# against the checksum database, and used.
# The version string runsc reports (and stamps into every checkpoint) is the
# pinned one.  Cached: with the pinned binary in place this does nothing, so
# a rebuild happens only when the pin changes.  Build files go under
# $SANDGATE_GO_CACHE (default /var/cache/sandgate/go).
# Run as root (scripts/deps.sh runs it with sudo).
set -euo pipefail
umask 022
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=runsc.pin
. "$here/runsc.pin"
lib=/usr/local/lib/sandgate/runsc/$RUNSC_VERSION
link=/usr/local/bin/runsc
cache=${SANDGATE_GO_CACHE:-/var/cache/sandgate/go}
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}

log() { echo "deps: runsc: $*" >&2; }

installed() {
  [ -x "$lib/runsc" ] &&
    [ "$("$lib/runsc" --version 2>/dev/null | sed -n 's/^runsc version //p')" = "$RUNSC_VERSION" ]
}

# "1.26.3" -> a number that orders versions (1026003)
vnum() {
  local IFS=. a b c
  read -r a b c <<<"$1"
  echo $((a * 1000000 + ${b:-0} * 1000 + ${c:-0}))
}

# The h1: hash the checksum database holds for a module zip (Go's dirhash).
zip_h1() {
  python3 - "$1" <<'PY'
import base64, hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
lines = "".join(f"{hashlib.sha256(z.read(n)).hexdigest()}  {n}\n"
                for n in sorted(z.namelist()) if not n.endswith("/"))
print("h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode())
PY
}

# A Go toolchain of version $1 from the proxy, checked against sum.golang.org
# (through the proxy's sumdb endpoint); prints its go binary.
fetch_toolchain() {
  local v=$1 mod="golang.org/toolchain@v0.0.1-go$1.linux-amd64"
  local dir=$cache/toolchain/go$v
  if [ ! -x "$dir/go/bin/go" ]; then
    log "fetching Go $v ($mod) from $proxy"
    local tmp
    tmp=$(mktemp -d)
    curl -fsSL --retry 3 -o "$tmp/t.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$v.linux-amd64.zip"
    local want got
    want=$(curl -fsSL --retry 3 "$proxy/sumdb/sum.golang.org/lookup/$mod" |
      awk -v m="${mod%@*}" -v ver="${mod#*@}" '$1 == m && $2 == ver { print $3 }')
    got=$(zip_h1 "$tmp/t.zip")
    [ -n "$want" ] && [ "$want" = "$got" ] || {
      log "toolchain hash mismatch: checksum database has '$want', download is '$got'"
      exit 1
    }
    mkdir -p "$tmp/x" "$(dirname "$dir")"
    (cd "$tmp/x" && python3 -m zipfile -e "$tmp/t.zip" .)
    chmod -R a+rX,u+w "$tmp/x"
    chmod a+x "$tmp/x/golang.org/toolchain@v0.0.1-go$v.linux-amd64/bin/"* \
      "$tmp/x/golang.org/toolchain@v0.0.1-go$v.linux-amd64/pkg/tool/linux_amd64/"*
    rm -rf "$dir"
    mkdir -p "$dir"
    mv "$tmp/x/golang.org/toolchain@v0.0.1-go$v.linux-amd64" "$dir/go"
    rm -rf "$tmp"
  fi
  echo "$dir/go/bin/go"
}

if installed; then
  log "$RUNSC_VERSION already installed"
else
  mkdir -p "$cache"
  export GOPATH=$cache/gopath GOCACHE=$cache/gocache GOFLAGS=-modcacherw
  export GONOSUMDB= GONOSUMCHECK= GOPRIVATE= GOINSECURE= GOSUMDB=sum.golang.org
  export CGO_ENABLED=0 GOTOOLCHAIN=local
  go=$(command -v go || true)
  [ -z "$go" ] && [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
  have=0
  [ -n "$go" ] && have=$(vnum "$("$go" env GOVERSION | sed 's/^go//; s/[^0-9.].*//')")
  if [ "$have" -lt "$(vnum "$RUNSC_GO_MIN")" ]; then
    if [ "$have" -ge "$(vnum 1.21)" ]; then
      export GOTOOLCHAIN=go$RUNSC_GO # the go command fetches and checks it
    else
      go=$(fetch_toolchain "$RUNSC_GO")
    fi
  fi
  log "building gvisor.dev/gvisor/runsc@$RUNSC_VERSION with $("$go" version) (minutes)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && GOBIN="$tmp" "$go" install -trimpath \
    -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
    "gvisor.dev/gvisor/runsc@$RUNSC_VERSION")
  mkdir -p "$lib"
  install -m 0755 "$tmp/runsc" "$lib/runsc.new"
  mv "$lib/runsc.new" "$lib/runsc"
  installed || {
    log "the built binary does not report version $RUNSC_VERSION"
    exit 1
  }
fi
if [ "$(readlink "$link" 2>/dev/null)" != "$lib/runsc" ]; then
  ln -sfn "$lib/runsc" "$link.new"
  mv -T "$link.new" "$link"
fi
