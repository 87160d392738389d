#!/bin/bash
# Builds the sandgate image from docker/Dockerfile with buildah, with no
# registry: the Debian 12 base is made with mmdebstrap (its tarball kept in
# the cache directory) and imported as localhost/debian:bookworm.  An image
# built from the same source tree is reused; otherwise buildah's layer cache
# keeps the package installs, so a rebuild after a source change compiles
# sandgate and little else.  Prints the image's name as its last line.
#
#   docker/build-image.sh          localhost/sandgate:src-HASH (also :VERSION)
#
# Environment:
#   SANDGATE_IMAGE_CACHE  the base tarball and a lock (/var/tmp/sandgate-image-cache)
#   SANDGATE_BASE         the base image instead (e.g. debian:bookworm-slim,
#                         where a registry is reachable); used as it is
#
# Needs root (rootless podman cannot run nested runsc anyway), buildah,
# podman, mmdebstrap and runc: scripts/deps.sh --test installs them.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cache=${SANDGATE_IMAGE_CACHE:-/var/tmp/sandgate-image-cache}
base=${SANDGATE_BASE:-localhost/debian:bookworm}
repo=localhost/sandgate
# crun fails here ("cgroups in hybrid mode not supported"); runc works.
runtime=$(command -v runc || echo /usr/sbin/runc)
log() { echo "build-image: $*" >&2; }

mkdir -p "$cache"
# One build at a time on a machine: they share the cache and the tags.
exec 9>"$cache/lock"
flock 9

if ! podman image exists "$base"; then
  [ "$base" = localhost/debian:bookworm ] || { log "no image $base"; exit 1; }
  tar=$cache/bookworm-minbase.tar
  if [ ! -s "$tar" ]; then
    log "making the Debian 12 base with mmdebstrap (about a minute)"
    rm -rf "$tar.tmp"
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$tar.tmp" >&2
    mv "$tar.tmp" "$tar"
  fi
  podman import --quiet "$tar" "$base" >/dev/null
  log "imported $tar as $base"
fi

# The tree's files as the build sees them: git's tracked and untracked ones
# (not what .gitignore leaves out, as .dockerignore does); the base's id too.
hash=$({
  podman image inspect --format '{{.Id}}' "$base"
  cd "$src" && git ls-files -z -co --exclude-standard 2>/dev/null | sort -z |
    xargs -0 -r sha256sum 2>/dev/null || true
} | sha256sum | cut -c1-16)
image=$repo:src-$hash
version=$(sed -n 's/^AC_INIT(\[sandgate\], \[\([^]]*\)\].*/\1/p' "$src/configure.ac")

if podman image exists "$image"; then
  log "reusing $image (built from this tree)"
else
  log "building $image"
  # --format docker: OCI images have no HEALTHCHECK.
  # The build's RUN steps see this machine's CA certificates at
  # /run/host-ca.crt (not kept in the image): the download from PyPI
  # (bash_kernel) trusts what this machine trusts, e.g. a TLS-inspecting proxy.
  ca=()
  [ -s /etc/ssl/certs/ca-certificates.crt ] &&
    ca=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro)
  # runsc's build (scripts/runsc.sh) reuses this machine's Go caches.
  go=()
  [ -d /var/cache/sandgate/go ] && go=(-v /var/cache/sandgate/go:/var/cache/sandgate/go)
  buildah bud --runtime="$runtime" --network=host --layers --format docker "${ca[@]}" "${go[@]}" \
    --build-arg BASE="$base" -f "$src/docker/Dockerfile" -t "$image" "$src" >&2
  # Only the newest tree's tag is kept; the layers stay as the cache.
  podman images --format '{{.Repository}}:{{.Tag}}' "$repo" | grep ":src-" |
    grep -vx "$image" | xargs -r -I{} podman untag {} {} >/dev/null 2>&1 || true
fi
podman tag "$image" "$repo:$version" "$repo:latest"
echo "$image"
