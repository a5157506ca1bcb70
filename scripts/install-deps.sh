#!/usr/bin/env bash
# Installs the Debian packages tessera needs, skipping those already present.
# Usage: scripts/install-deps.sh [--ci]   (--ci adds clang: the sanitizer and fuzz build)
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libfmt-dev nlohmann-json3-dev libcli11-dev libopenblas-dev libpcre2-dev
          libcpp-httplib-dev libboost-dev zlib1g-dev libbrotli-dev chromium
          libopenmpi-dev openmpi-bin python3)
# Node runs the e2e tests (tests/e2e: the openai npm client, the chat page in
# Chromium). A node from elsewhere (e.g. NodeSource, which bundles npm) is kept.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
if [[ "${1:-}" == "--ci" ]]; then
  packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "tessera: installing missing Debian packages: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "tessera: these packages are missing and installing them needs root:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
