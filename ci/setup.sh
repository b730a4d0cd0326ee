#!/usr/bin/env bash
# Installs what parity needs from Debian 12's packages, only what is missing. As root it runs
# apt-get; otherwise it prints the exact command to run and exits non-zero.
set -euo pipefail

packages=(
  build-essential cmake git
  openmpi-bin libopenmpi-dev
  libhdf5-dev zlib1g-dev
  libgtest-dev googletest libbenchmark-dev
  libcli11-dev libfmt-dev
  libopenblas-dev libhwy-dev
  python3-matplotlib python3-h5py python3-numpy python3-torch
  chromium
  iproute2
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "ci/setup.sh: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "ci/setup.sh: missing packages; run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "ci/setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "ci/setup.sh: done"
