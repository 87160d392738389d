#!/bin/bash
# A real one-node Kubernetes on this machine, for running docker/k8s on it
# (tests/k8s/).  Everything is built here: the control plane, the kubelet,
# kube-proxy and kubectl from the Go module k8s.io/kubernetes
# (docker/k8s/cluster/kubernetes), CoreDNS and kube-router (NetworkPolicies)
# from theirs, the images with buildah (docker/k8s/cluster/images.sh);
# etcd, containerd, runc and the CNI plugins are Debian's.  Builds are cached
# (SANDGATE_K8S_CACHE); a warm `up` starts in well under a minute.
#
# The node lives in a network namespace of its own (sandgate-k8s), joined to
# this machine by a veth pair: the node is 172.30.255.2 (the API server's
# and the kubelet's address), this machine 172.30.255.1, with routes to the
# pod (10.244.0.0/16) and Service (10.96.0.0/16) ranges through the node.
# Every rule kube-proxy and kube-router write is in that namespace, so
# `down` leaves nothing behind.  docs/deploy-cluster.md describes it.
set -euo pipefail

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
cache=${SANDGATE_K8S_CACHE:-/var/cache/sandgate-k8s}
run=${SANDGATE_K8S_DIR:-/var/lib/sandgate-k8s}
sock_dir=/run/sandgate-k8s
netns=sandgate-k8s
node=sandgate-node
node_ip=172.30.255.2
host_ip=172.30.255.1
pod_cidr=10.244.0.0/16
svc_cidr=10.96.0.0/16
api_svc_ip=10.96.0.1
dns_ip=10.96.0.10
k8s_version=v1.34.4
kube_router_version=v2.1.0
# A metadata service as clouds have it, on this machine, so that tests can
# show a pod cannot reach it (169.254.169.254 is routed to this machine).
metadata_ip=169.254.169.254

usage() {
  cat <<EOF
Usage: $prog up | down | status | build | env | kubectl ARGS...

  up       builds what is missing (first time: 20-40 minutes on 2 cores),
           starts etcd, the control plane, containerd, the kubelet,
           kube-proxy, kube-router and CoreDNS, imports the images and waits
           until the node is Ready and DNS answers
  down     stops every process, removes the node's network namespace, its
           containers and the run dir ($run); the build cache stays
  status   each process, whether it runs, and the node's condition
  build    only builds (binaries and images)
  env      prints the environment for kubectl on this machine:
             eval "\$($prog env)"
  kubectl  runs kubectl against the cluster

Environment:
  SANDGATE_K8S_CACHE   build cache (default /var/cache/sandgate-k8s)
  SANDGATE_K8S_DIR     run dir: etcd's data, certificates, the kubelet's
                       and containerd's state, the volumes (default
                       /var/lib/sandgate-k8s)

Needs root, and: containerd runc etcd-server containernetworking-plugins
conntrack ipset iptables openssl (scripts/deps.sh --k8s installs them), and
Go 1.21 or newer.
EOF
}

log() { echo "$prog: $*" >&2; }
die() {
  log "$*"
  exit 1
}

gobuild_env() {
  command -v go >/dev/null || die "no go command: Go 1.21 or newer is needed to build Kubernetes"
  export GOPATH=$cache/gopath GOCACHE=$cache/gocache GOFLAGS=-modcacherw
  # An older Go fetches the toolchain go.mod asks for from the module proxy.
  export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
}

# --- build ------------------------------------------------------------------

build_kubernetes() {
  local bin=$cache/bin/kubernetes-$k8s_version
  [ -x "$bin/kubelet" ] && [ -x "$bin/kubectl" ] && return 0
  log "building Kubernetes $k8s_version from its Go modules (20-30 minutes on 2 cores)"
  gobuild_env
  local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version
  local minor=${k8s_version#v1.}
  minor=${minor%%.*}
  local ld="-s -w"
  for p in $pkg $cpkg; do
    ld+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$bin.tmp"
  (cd "$here/cluster/kubernetes" &&
    go build -trimpath -ldflags="$ld" -o "$bin.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kube-proxy \
      k8s.io/kubernetes/cmd/kubectl)
  rm -rf "$bin"
  mv "$bin.tmp" "$bin"
}

build_kube_router() {
  local bin=$cache/bin/kube-router-$kube_router_version
  [ -x "$bin/kube-router" ] && return 0
  log "building kube-router $kube_router_version from its Go module"
  gobuild_env
  mkdir -p "$bin"
  GOBIN=$bin go install -trimpath -ldflags="-s -w" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$kube_router_version"
}

build() {
  mkdir -p "$cache/bin"
  build_kubernetes
  build_kube_router
  "$here/cluster/images.sh" build >&2
}

kbin() { echo "$cache/bin/kubernetes-$k8s_version/$1"; }

# --- certificates and configuration -----------------------------------------

pki() {
  local d=$run/pki
  [ -s "$d/admin.kubeconfig" ] && return 0
  mkdir -p "$d"
  chmod 700 "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt \
      -days 3650 -subj "/CN=sandgate-k8s-ca" 2>/dev/null
    cat >apiserver.ext <<EOF
subjectAltName=IP:$node_ip,IP:$api_svc_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EOF
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
    echo "extendedKeyUsage=clientAuth" >client.ext
    openssl req -newkey rsa:2048 -nodes -keyout kubelet-client.key \
      -out kubelet-client.csr \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
    openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key \
      -CAcreateserial -out kubelet-client.crt -days 3650 -extfile client.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext
  )
  # Static tokens: the control plane's components as the users RBAC's
  # default bindings name; the kubelet as a node.
  local tokens=$d/tokens.csv
  : >"$tokens"
  chmod 600 "$tokens"
  local who
  for who in admin controller-manager scheduler kube-proxy kube-router kubelet; do
    local t
    t=$(openssl rand -hex 24)
    case $who in
    admin) echo "$t,admin,admin,system:masters" >>"$tokens" ;;
    controller-manager) echo "$t,system:kube-controller-manager,kcm" >>"$tokens" ;;
    scheduler) echo "$t,system:kube-scheduler,ksched" >>"$tokens" ;;
    kube-proxy) echo "$t,system:kube-proxy,kproxy" >>"$tokens" ;;
    kube-router) echo "$t,kube-router,krouter,system:masters" >>"$tokens" ;;
    kubelet) echo "$t,system:node:$node,knode,system:nodes" >>"$tokens" ;;
    esac
    cat >"$d/$who.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: sandgate-k8s
    cluster:
      server: https://$node_ip:6443
      certificate-authority: $d/ca.crt
users:
  - name: $who
    user:
      token: $t
contexts:
  - name: sandgate-k8s
    context: {cluster: sandgate-k8s, user: $who}
current-context: sandgate-k8s
EOF
    chmod 600 "$d/$who.kubeconfig"
  done
}

configs() {
  local c=$run/conf
  mkdir -p "$c/cni" "$run/volumes"
  cat >"$c/containerd.toml" <<EOF
version = 2
# Images stay between runs (the sandgate image alone takes minutes to
# import); \`down\` removes the containers.
root = "$cache/containerd"
state = "$sock_dir/containerd"
[grpc]
  address = "$sock_dir/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # The kubelet gives pods an oom_score_adj below 0 (-998 for the pause
  # container), which needs CAP_SYS_RESOURCE; a machine that withholds it
  # (as some VMs' agents do) fails every pod ("failed to update
  # /proc/self/oom_score_adj: Permission denied").  This keeps each at or
  # above containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$c/cni"
EOF
  cat >"$c/cni/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandgate-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.0.0/24", "gateway": "10.244.0.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  : >"$c/resolv.conf"
  cat >"$c/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $run/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$sock_dir/containerd.sock
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
resolvConf: $c/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 256Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
serializeImagePulls: false
EOF
  cat >"$c/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $run/pki/kube-proxy.kubeconfig
mode: iptables
clusterCIDR: $pod_cidr
nodePortAddresses: [primary]
hostnameOverride: $node
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
EOF
}

# --- processes ---------------------------------------------------------------

# start NAME COMMAND...: runs COMMAND in the node's network namespace, its
# output in $run/log/NAME.log, its pid in $run/pid/NAME.
start() {
  local name=$1
  shift
  mkdir -p "$run/log" "$run/pid"
  if running "$name"; then return 0; fi
  nsenter --net="/run/netns/$netns" -- setsid "$@" \
    >>"$run/log/$name.log" 2>&1 </dev/null &
  echo $! >"$run/pid/$name"
}

running() {
  local p
  p=$(cat "$run/pid/$1" 2>/dev/null) || return 1
  kill -0 "$p" 2>/dev/null
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$what did not come up in $secs s (logs: $run/log)"
}

network() {
  if [ ! -e "/run/netns/$netns" ]; then
    ip netns add "$netns"
    ip link add sgk8s-host type veth peer name sgk8s-node
    ip link set sgk8s-node netns "$netns"
    ip addr add "$host_ip/30" dev sgk8s-host
    ip link set sgk8s-host up
    ip -n "$netns" addr add "$node_ip/30" dev sgk8s-node
    ip -n "$netns" link set sgk8s-node up
    ip -n "$netns" link set lo up
    ip route replace "$pod_cidr" via "$node_ip"
    ip route replace "$svc_cidr" via "$node_ip"
    ip -n "$netns" route add "$metadata_ip/32" via "$host_ip"
    # The node has no default route (the cluster has no way out); Service
    # addresses need a route to be looked up before kube-proxy's DNAT
    # sends them to a pod.
    ip -n "$netns" route add "$svc_cidr" via "$host_ip"
    ip addr add "$metadata_ip/32" dev sgk8s-host
  fi
  ip netns exec "$netns" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$netns" sysctl -qw net.bridge.bridge-nf-call-iptables=1
  sysctl -qw net.ipv4.conf.sgk8s-host.forwarding=1 || true
}

metadata_service() {
  # Answers as a cloud's instance metadata service does, so that reaching it
  # is visible; nothing in it is secret.
  [ -e "$run/pid/metadata" ] && running metadata && return 0
  mkdir -p "$run/log" "$run/pid" "$run/metadata/latest"
  echo "sandgate-k8s-metadata" >"$run/metadata/latest/instance-id"
  setsid python3 -m http.server --bind "$metadata_ip" --directory "$run/metadata" 80 \
    >>"$run/log/metadata.log" 2>&1 </dev/null &
  echo $! >"$run/pid/metadata"
}

kctl() { "$(kbin kubectl)" --kubeconfig "$run/pki/admin.kubeconfig" "$@"; }

control_plane() {
  mkdir -p "$run/etcd"
  start etcd etcd --name sandgate-k8s --data-dir "$run/etcd" \
    --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster sandgate-k8s=http://127.0.0.1:2380 \
    --quota-backend-bytes 2147483648 --snapshot-count 10000
  local p=$run/pki
  start kube-apiserver "$(kbin kube-apiserver)" \
    --advertise-address "$node_ip" --bind-address "$node_ip" --secure-port 6443 \
    --etcd-servers http://127.0.0.1:2379 \
    --service-cluster-ip-range "$svc_cidr" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" --token-auth-file "$p/tokens.csv" \
    --kubelet-client-certificate "$p/kubelet-client.crt" \
    --kubelet-client-key "$p/kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" \
    --service-account-signing-key-file "$p/sa.key" \
    --requestheader-client-ca-file "$p/ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --anonymous-auth=false \
    --profiling=false --v=1
  wait_for "the API server" 120 kctl get --raw /readyz
  start kube-controller-manager "$(kbin kube-controller-manager)" \
    --kubeconfig "$p/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$p/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$p/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials=true \
    --allocate-node-cidrs=true --cluster-cidr "$pod_cidr" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$svc_cidr" --v=1
  start kube-scheduler "$(kbin kube-scheduler)" \
    --kubeconfig "$p/scheduler.kubeconfig" \
    --authentication-kubeconfig "$p/scheduler.kubeconfig" \
    --authorization-kubeconfig "$p/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --v=1
}

node_agents() {
  mkdir -p "$sock_dir" "$run/kubelet"
  start containerd containerd --config "$run/conf/containerd.toml"
  wait_for containerd 60 ctr --address "$sock_dir/containerd.sock" version
  "$here/cluster/images.sh" import "$sock_dir/containerd.sock" >&2
  start kubelet "$(kbin kubelet)" --config "$run/conf/kubelet.yaml" \
    --kubeconfig "$run/pki/kubelet.kubeconfig" --root-dir "$run/kubelet" \
    --hostname-override "$node" --node-ip "$node_ip" --v=1
  start kube-proxy "$(kbin kube-proxy)" --config "$run/conf/kube-proxy.yaml" --v=1
  wait_for "the node" 120 kctl get node "$node"
  # kube-router enforces NetworkPolicies only: routing is the bridge's and
  # Services are kube-proxy's (GHSA-phqm-jgc3-qf8g, in its proxy, does not
  # apply).
  start kube-router "$cache/bin/kube-router-$kube_router_version/kube-router" \
    --kubeconfig "$run/pki/kube-router.kubeconfig" --hostname-override "$node" \
    --run-firewall=true --run-router=false --run-service-proxy=false \
    --service-cluster-ip-range "$svc_cidr" --metrics-port 0 --health-port 20244 -v 1
}

# Static PersistentVolumes, one per replica the tests run (up to 4), each
# bound ahead to its StatefulSet claim (state-sandgate-N): a directory on
# this machine's disk, as a local volume on a real node would be.
volumes() {
  local i
  for i in 0 1 2 3; do
    mkdir -p "$run/volumes/state-sandgate-$i"
    cat <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: sandgate-k8s-state-$i
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: sandgate, name: state-sandgate-$i}
  hostPath: {path: $run/volumes/state-sandgate-$i, type: Directory}
---
EOF
  done
}

addons() {
  volumes | kctl apply -f - >&2
  kctl apply -f "$here/cluster/addons.yaml" >&2
  kctl wait --for=condition=Ready "node/$node" --timeout=180s >&2
  kctl -n kube-system rollout status deployment/coredns --timeout=180s >&2
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root"
  local t0=$SECONDS
  build
  local tb=$SECONDS
  pki
  configs
  network
  metadata_service
  control_plane
  node_agents
  addons
  log "up: built in $((tb - t0)) s, started in $((SECONDS - tb)) s"
  log "kubectl: eval \"\$($0 env)\"  or  $0 kubectl ..."
}

# stop NAME...: SIGTERM, then up to 60 s for each to exit (the API server
# drains its watches first), then SIGKILL.
stop() {
  local name p pids=()
  for name in "$@"; do
    p=$(cat "$run/pid/$name" 2>/dev/null) || continue
    kill "$p" 2>/dev/null && pids+=("$p")
  done
  local i
  for ((i = 0; i < 120; i++)); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.5
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}

down() {
  [ -d "$run/pid" ] && stop kube-router kube-proxy kubelet kube-scheduler \
    kube-controller-manager kube-apiserver metadata
  # The pods' containers: kill and remove them (the images stay), then
  # stop containerd and etcd.
  if running containerd; then
    local c ctr=(ctr --address "$sock_dir/containerd.sock" -n k8s.io)
    for c in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
      "${ctr[@]}" tasks kill -s KILL "$c" 2>/dev/null || true
    done
    sleep 2
    for c in $("${ctr[@]}" containers ls -q 2>/dev/null); do
      "${ctr[@]}" tasks delete -f "$c" >/dev/null 2>&1 || true
      "${ctr[@]}" containers delete "$c" 2>/dev/null || true
    done
  fi
  stop containerd etcd
  pkill -9 -f "containerd-shim-runc-v2 -namespace k8s.io .*-address $sock_dir/" 2>/dev/null || true
  # Mounts left under the run dir (pods' volumes, overlay snapshots, netns).
  local m
  for m in $(awk -v r="$run" -v s="$sock_dir" -v c="$cache/containerd" \
    '$5 ~ "^" r || $5 ~ "^" s || $5 ~ "^" c {print $5}' \
    /proc/self/mountinfo | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  for m in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do
    ip netns delete "$m" 2>/dev/null || true
  done
  # The pods' cgroups (cgroupfs driver: kubepods in each hierarchy).
  find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -depth -type d \
    -exec rmdir {} + 2>/dev/null || true
  ip route del "$pod_cidr" 2>/dev/null || true
  ip route del "$svc_cidr" 2>/dev/null || true
  ip link del sgk8s-host 2>/dev/null || true
  ip netns delete "$netns" 2>/dev/null || true
  rm -rf "$run" "$sock_dir"
  log "down"
}

status() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler \
    containerd kubelet kube-proxy kube-router metadata; do
    if running "$name"; then
      printf '%-24s running (pid %s)\n' "$name" "$(cat "$run/pid/$name")"
    else
      printf '%-24s stopped\n' "$name"
    fi
  done
  kctl get nodes 2>/dev/null || true
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
build) build ;;
env) echo "export KUBECONFIG=$run/pki/admin.kubeconfig PATH=$(dirname "$(kbin kubectl)"):\$PATH" ;;
kubectl)
  shift
  kctl "$@"
  ;;
-h | --help | help) usage ;;
*)
  usage >&2
  exit 2
  ;;
esac
