#!/bin/bash
# Builds the container images a one-node Kubernetes cluster running sandgate
# needs, with no registry, and imports them into its containerd:
#
#   docker.io/library/sandgate:0.1.0         docker/Dockerfile (docker/build-image.sh)
#   docker.io/library/haproxy:2.6            Debian's HAProxy 2.6 with Lua, in place of
#                                            Docker Hub's (haproxy.Dockerfile here)
#   registry.k8s.io/pause:3.10               the pods' sandbox: Kubernetes' own pause.c,
#                                            compiled statically, from scratch
#   registry.k8s.io/coredns/coredns:v1.14.7  CoreDNS built from its Go module, from scratch
#
# The names are those the manifests use, so none needs changing.  Built
# binaries are kept in the cache's bin/, and an image whose inputs did not
# change is reused (its label sandgate.k8s.inputs holds their hash; remove the
# image with `podman rmi` to rebuild it anyway).
#
# containerd's CRI plugin must name this pause image as its sandbox_image
# (containerd 1.6 defaults to registry.k8s.io/pause:3.6, which is not here).
# The label io.cri-containerd.pinned keeps an image from the kubelet's image
# GC where containerd reads it (1.7, and 1.6 releases later than Debian
# 12's); 1.6.20 does not, so there the kubelet may remove an image no pod
# uses once the disk is fuller than its imageGCHighThresholdPercent.
#
#   docker/k8s/cluster/images.sh build
#   docker/k8s/cluster/images.sh import /run/containerd/containerd.sock
#   docker/k8s/cluster/images.sh list
set -euo pipefail

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)
cache=${SANDGATE_K8S_CACHE:-/var/cache/sandgate-k8s}
gopath=${SANDGATE_K8S_GOPATH:-/var/tmp/sandgate-k8s/gopath}
gocache=${SANDGATE_K8S_GOCACHE:-/var/tmp/sandgate-k8s/gocache}
k8s_version=v1.34.4
pause_version=3.10
coredns_version=v1.14.7
base=localhost/debian:bookworm
# crun fails here ("cgroups in hybrid mode not supported"); runc works.
runtime=$(command -v runc || echo /usr/sbin/runc)

sandgate_image=docker.io/library/sandgate:0.1.0
haproxy_image=docker.io/library/haproxy:2.6
pause_image=registry.k8s.io/pause:$pause_version
coredns_image=registry.k8s.io/coredns/coredns:$coredns_version
images=("$sandgate_image" "$haproxy_image" "$pause_image" "$coredns_image")

usage() {
    cat <<EOF
Usage: $prog build
       $prog import ADDRESS
       $prog list

  build           builds every image (podman's store), reusing each one whose
                  inputs did not change; sandgate's is docker/build-image.sh's
                  (which makes $base with mmdebstrap when missing)
  import ADDRESS  imports every image into the containerd listening on the
                  socket ADDRESS, namespace k8s.io, and labels each
                  io.cri-containerd.pinned=pinned; one already there with the
                  same image id is left as it is
  list            prints the images' names

Environment:
  SANDGATE_K8S_CACHE    built binaries (bin/) and a lock (/var/cache/sandgate-k8s)
  SANDGATE_K8S_GOPATH   Go's module cache, where Kubernetes' pause.c is read from
                        (/var/tmp/sandgate-k8s/gopath)
  SANDGATE_K8S_GOCACHE  Go's build cache (/var/tmp/sandgate-k8s/gocache)

Needs root, buildah, podman, runc, gcc with a static libc (libc6-dev), Go,
setcap (libcap2-bin) and, for import, ctr.
EOF
}

die() {
    echo "$prog: $*" >&2
    exit 1
}

log() { echo "$prog: $*" >&2; }

gorun() {
    env GOPATH="$gopath" GOCACHE="$gocache" GOFLAGS=-modcacherw CGO_ENABLED=0 "$@"
}

# The hash of what an image is made of: its arguments' contents and names.
inputs_hash() {
    local f
    for f in "$@"; do
        if [ -f "$f" ]; then
            printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$(basename "$f")"
        else
            printf '%s\n' "$f"
        fi
    done | sha256sum | cut -c1-16
}

# True when image $1 exists and was built from inputs hashing to $2.
current() {
    podman image exists "$1" &&
        [ "$(podman image inspect --format '{{index .Labels "sandgate.k8s.inputs"}}' "$1")" = "$2" ]
}

build_sandgate() {
    local built
    built=$("$src/docker/build-image.sh" | tail -n 1)
    podman tag "$built" "$sandgate_image"
    log "$sandgate_image is $built"
}

build_haproxy() {
    local hash
    hash=$(inputs_hash "$here/haproxy.Dockerfile" "$here/haproxy-entrypoint.sh" \
        "$(podman image inspect --format '{{.Id}}' "$base")")
    if current "$haproxy_image" "$hash"; then
        log "reusing $haproxy_image"
        return
    fi
    log "building $haproxy_image"
    buildah bud --runtime="$runtime" --network=host --layers --format docker \
        --build-arg BASE="$base" --label sandgate.k8s.inputs="$hash" \
        -f "$here/haproxy.Dockerfile" -t "$haproxy_image" "$here" >&2
}

# An image of one static binary, from scratch: scratch_image NAME HASH BINARY
# PATH [buildah config options...].
scratch_image() {
    local name=$1 hash=$2 bin=$3 path=$4 ctr
    shift 4
    ctr=$(buildah from scratch)
    buildah copy --quiet "$ctr" "$bin" "$path" >/dev/null
    buildah config --entrypoint "[\"$path\"]" --label sandgate.k8s.inputs="$hash" "$@" "$ctr"
    buildah commit --quiet --rm "$ctr" "$name" >/dev/null
}

# Kubernetes' own pause.c, from the Kubernetes module as released, built as
# build/pause/Makefile builds it.
build_pause() {
    local c=$gopath/pkg/mod/k8s.io/kubernetes@$k8s_version/build/pause/linux/pause.c
    local flags="-Os -Wall -Werror -static -DVERSION=v$pause_version-sandgate"
    local bin=$cache/bin/pause hash
    if [ ! -f "$c" ]; then
        log "downloading k8s.io/kubernetes@$k8s_version for its pause.c"
        (cd / && gorun go mod download "k8s.io/kubernetes@$k8s_version")
    fi
    hash=$(inputs_hash "$c" "$flags" "$(gcc --version | sed -n 1p)")
    if [ "$(cat "$bin.inputs" 2>/dev/null)" != "$hash" ] || [ ! -x "$bin" ]; then
        log "compiling $c"
        # shellcheck disable=SC2086 # the flags are words
        gcc $flags -o "$bin.tmp" "$c"
        strip "$bin.tmp"
        mv "$bin.tmp" "$bin"
        echo "$hash" >"$bin.inputs"
    fi
    hash=$(inputs_hash "$bin" 65535:65535)
    if current "$pause_image" "$hash"; then
        log "reusing $pause_image"
        return
    fi
    log "building $pause_image"
    scratch_image "$pause_image" "$hash" "$bin" /pause --user 65535:65535
}

# CoreDNS as its own image is: run as nonroot (65532), the binary allowed to
# bind port 53 (file capability cap_net_bind_service, as upstream's
# Dockerfile sets; the Deployment adds NET_BIND_SERVICE for it).
build_coredns() {
    local bin=$cache/bin/coredns-$coredns_version hash
    if [ ! -x "$bin" ]; then
        log "building CoreDNS $coredns_version (go install, minutes)"
        rm -rf "$bin.tmp"
        (cd / && GOBIN="$bin.tmp" gorun go install -trimpath -ldflags='-s -w' \
            "github.com/coredns/coredns@$coredns_version")
        setcap cap_net_bind_service=+ep "$bin.tmp/coredns"
        mv "$bin.tmp/coredns" "$bin"
        rmdir "$bin.tmp"
    fi
    hash=$(inputs_hash "$bin" 65532:65532 "$(getcap "$bin")")
    if current "$coredns_image" "$hash"; then
        log "reusing $coredns_image"
        return
    fi
    log "building $coredns_image"
    scratch_image "$coredns_image" "$hash" "$bin" /coredns --user 65532:65532 \
        --port 53 --port 53/udp
}

build() {
    mkdir -p "$cache/bin"
    exec 9>"$cache/lock"
    flock 9
    build_sandgate
    build_haproxy
    build_pause
    build_coredns
    local name
    for name in "${images[@]}"; do
        podman image exists "$name" || die "no image $name after building"
        # sed, not head: podman would die of SIGPIPE (pipefail)
        podman images --format "$name {{.ID}} {{.Size}}" "$name" | sed -n 1p
    done
}

import() {
    local addr=$1 name id
    [ -S "$addr" ] || die "no containerd socket at $addr"
    for name in "${images[@]}"; do
        podman image exists "$name" || die "no image $name: run '$prog build' first"
    done
    for name in "${images[@]}"; do
        id=$(podman image inspect --format '{{.Id}}' "$name")
        if [ -n "$(ctr --address "$addr" -n k8s.io images ls -q \
            "name==$name,labels.\"sandgate.k8s.image-id\"==$id")" ]; then
            log "$name is there already"
        else
            log "importing $name"
            podman save --format docker-archive "$name" |
                ctr --address "$addr" -n k8s.io images import - >&2
        fi
        ctr --address "$addr" -n k8s.io images label "$name" \
            io.cri-containerd.pinned=pinned sandgate.k8s.image-id="$id" >/dev/null
    done
}

case ${1:-} in
    build)
        [ $# -eq 1 ] || die "build takes no arguments"
        build
        ;;
    import)
        [ $# -eq 2 ] || die "usage: $prog import ADDRESS"
        import "$2"
        ;;
    list)
        printf '%s\n' "${images[@]}"
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        usage >&2
        exit 2
        ;;
esac
