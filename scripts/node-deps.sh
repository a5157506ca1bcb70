#!/usr/bin/env bash
# Installs bindings/node's npm packages (node-addon-api, node-api-headers,
# cmake-js) from its lock file, without running its install script: the main
# build then builds the addon and ctest runs the package's tests. Skipped
# when node_modules already matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../bindings/node"
stamp=node_modules/.tessera-lock
if [[ -f "$stamp" ]] && cmp -s package-lock.json "$stamp"; then exit 0; fi
if ! command -v npm >/dev/null; then
  echo "tessera: npm is missing (Debian package 'npm'; scripts/install-deps.sh installs it)" >&2
  exit 1
fi
echo "tessera: installing bindings/node's npm packages (npm ci)"
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
cp package-lock.json "$stamp"
