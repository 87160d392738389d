#!/bin/bash
# Installs everything sandgate needs to build, run and test, from Debian 12's
# packages.  Idempotent: when every package is present it does nothing.
set -euo pipefail
packages=(
  # build
  build-essential autoconf automake libtool pkg-config
  libzmq3-dev libczmq-dev libsodium-dev libjansson-dev libmicrohttpd-dev
  # run: the sandbox and the kernels it runs
  runsc python3 python3-ipykernel python3-jupyter-client python3-matplotlib e2fsprogs
  # ... the R kernel (kernelspec ir)
  r-cran-irkernel
  # ... network egress for contexts that ask (--egress-allow), and pip for them
  nftables iproute2 python3-pip
  # the tests' own PyPI packages live in a virtual environment (scripts/venv.sh)
  python3-venv
  # test: the fuzzer (clang + libFuzzer runtime), HTTP clients, the
  # Notebook server + browser the Jupyter front-end tests drive, and strace
  # (system calls the kernel makes)
  clang libclang-rt-14-dev curl python3-notebook chromium fonts-dejavu-core strace
  # ... systemd-analyze, which checks the installed systemd unit
  systemd
  # ... the proxy in front of several replicas (docker/local-cluster.sh)
  haproxy
  # ... and the container image (docker/build-image.sh, tests/build/test_image.py):
  # buildah builds it from a base mmdebstrap makes, podman runs it, with runc
  buildah podman mmdebstrap runc
)
# Node.js runs the real client SDKs the tests drive (npm packages).
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages already installed"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
# Debian's haproxy package enables a system service.  Its default
# configuration listens nowhere, but the cluster test runs its own haproxy:
# keep the system one stopped and disabled.
if [[ " ${missing[*]} " == *" haproxy "* ]]; then
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now haproxy >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/haproxy ]; then
    $sudo /etc/init.d/haproxy stop >/dev/null 2>&1 || true
    $sudo update-rc.d haproxy disable >/dev/null 2>&1 || true
  fi
fi
