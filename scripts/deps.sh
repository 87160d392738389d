#!/bin/bash
# Installs what sandgate needs: Debian 12's packages, and gVisor's runsc built
# from its Go module (scripts/runsc.sh):
#   scripts/deps.sh          to build and run it (scripts/quickstart.sh)
#   scripts/deps.sh --test   that, and what the tests and benchmarks drive
#                            (scripts/test.sh)
#   scripts/deps.sh --k8s    that, and the parts of the one-node Kubernetes
#                            that come from Debian (tests/k8s/run.sh)
# Idempotent: when every package is present it does nothing.
set -euo pipefail
case "${1:-}" in
  "") test=0 k8s=0 ;;
  --test) test=1 k8s=0 ;;
  --k8s) test=1 k8s=1 ;;
  *) echo "usage: scripts/deps.sh [--test | --k8s]" >&2; exit 2 ;;
esac
packages=(
  # build
  build-essential autoconf automake libtool pkg-config
  libzmq3-dev libczmq-dev libsodium-dev libjansson-dev libmicrohttpd-dev zlib1g-dev
  # ... docs/openapi.yaml becomes the JSON GET /openapi.json serves
  python3 python3-yaml
  # run: its workspaces' file systems, and the Python kernel (the sandbox,
  # gVisor's runsc, is built from its Go module: scripts/runsc.sh, below).
  # The sandboxes' root is this machine's /usr: what is installed here is
  # what sandboxed code can import.
  e2fsprogs python3 python3-ipykernel python3-jupyter-client
  # ... `python` as well as `python3` (agents and their tools call `python`)
  python-is-python3
  # ... the data stack analytics code expects (Debian 12 has no pyarrow)
  python3-numpy python3-pandas python3-scipy python3-matplotlib python3-sklearn
  fonts-dejavu-core
  # ... the R kernel (kernelspec ir)
  r-cran-irkernel
  # ... the JDK the Java kernel (JJava, from PyPI: below) runs on: JShell
  openjdk-17-jdk-headless
  # ... what the Bash kernel (bash_kernel, from PyPI: below) imports besides
  # ipykernel
  python3-pexpect python3-filetype
  # ... network egress for contexts that ask (--egress-allow), the egress
  # proxy that lets their rules name hosts and set headers (haproxy; openssl
  # makes its CA), and pip, venv (`python -m venv`) and requests for them
  nftables iproute2 haproxy openssl python3-pip python3-venv python3-requests
  # ... the docs' shell examples (docs/api.md): HTTP and JSON from a shell
  curl jq
  # ... templates made from OCI images (--template NAME=image=PATH): umoci
  # unpacks them
  umoci
)
test_packages=(
  # the tests' own PyPI packages live in virtual environments (scripts/venv.sh;
  # python3-venv, above)
  # the fuzzer (clang + libFuzzer runtime), the Notebook server + browser the
  # Jupyter front-end tests drive, and strace (system calls the kernel makes)
  clang libclang-rt-14-dev python3-notebook chromium strace
  # ... systemd-analyze, which checks the installed systemd unit
  systemd
  # ... for E2B_DOMAIN through the cluster's proxy (haproxy, above) and
  # the egress tests' names: a resolver answering a whole test domain
  # (dnsmasq-base: the program, no service); openssl (above) makes test CAs
  dnsmasq-base
  # ... and the container image (docker/build-image.sh, tests/build/test_image.py):
  # buildah builds it from a base mmdebstrap makes, podman runs it, with runc
  buildah podman mmdebstrap runc
)
k8s_packages=(
  # the one-node Kubernetes of docker/k8s/local-cluster.sh (tests/k8s/run.sh):
  # etcd, the container runtime and CNI plugins, what kube-proxy and
  # kube-router call.  The rest is built from Go modules with the machine's
  # Go (1.21 or newer; Debian 12's 1.19 is too old to fetch the toolchain
  # k8s.io/kubernetes asks for)
  etcd-server containerd runc containernetworking-plugins iptables ipset
  conntrack ebtables ethtool socat openssl
)
[ $k8s = 1 ] && packages+=("${k8s_packages[@]}")
if [ $test = 1 ]; then
  packages+=("${test_packages[@]}")
  # Node.js runs the real client SDKs the tests drive (npm packages).
  command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages already installed"
else
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Debian's haproxy package enables a system service.  Its default
# configuration listens nowhere, but sandgate runs its own (the egress
# proxy), as does the cluster test:
# keep the system one stopped and disabled.
if [[ " ${missing[*]} " == *" haproxy "* ]]; then
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now haproxy >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/haproxy ]; then
    $sudo /etc/init.d/haproxy stop >/dev/null 2>&1 || true
    $sudo update-rc.d haproxy disable >/dev/null 2>&1 || true
  fi
fi
# gVisor's runsc, the sandbox: built from its Go module at the pinned version
# (scripts/runsc.pin), once per pin
$sudo "$(dirname "$0")/runsc.sh"
# The Bash kernel: from PyPI, pinned (Debian 12 has no package of it).
$sudo "$(dirname "$0")/bash-kernel.sh"
# The Java kernel (JJava; kernelspec java): its jar from PyPI, pinned and
# checksum-checked
$sudo "$(dirname "$0")/java-kernel.sh"
# Deno's Jupyter kernel (JavaScript and TypeScript; kernelspec deno): its
# binary from the npm registry, pinned and checksum-checked
$sudo "$(dirname "$0")/deno.sh"
