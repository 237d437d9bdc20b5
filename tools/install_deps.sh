#!/usr/bin/env bash
# Installs the Debian packages ringkv builds with, when any is missing.
# Runs apt-get as root (directly, or through sudo when not root).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache
  libxsimd-dev libfmt-dev libmsgsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev nlohmann-json3-dev libcli11-dev pkg-config
  pybind11-dev python3-dev python3-numpy python3-pytest
)
# Extra packages for a particular script (e.g. clang for the sanitizer job).
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "ringkv: installing ${missing[*]}" >&2
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
