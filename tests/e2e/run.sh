#!/usr/bin/env bash
# Runs one e2e step from ctest (tests/CMakeLists.txt registers them):
#   run.sh npm-ci          install tests/e2e/package-lock.json into $TESSERA_E2E_DIR,
#                          skipped when node_modules already matches the lock file
#   run.sh SCRIPT.mjs      run a script from $TESSERA_E2E_DIR with node
# Missing tools fail here, naming the Debian package (scripts/install-deps.sh installs them).
set -euo pipefail

need() {  # need COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "FAIL: '$1' is not installed: install the Debian package '$2' (scripts/install-deps.sh, run by 'make test', does)" >&2
    exit 1
  fi
}

: "${TESSERA_E2E_DIR:?TESSERA_E2E_DIR is not set (the build folder of tests/e2e)}"
cd "$TESSERA_E2E_DIR"
need node nodejs

if [[ "${1:-}" == "npm-ci" ]]; then
  need npm npm
  stamp=node_modules/.tessera-lock
  if [[ -f "$stamp" ]] && cmp -s package-lock.json "$stamp"; then
    echo "node_modules is up to date with package-lock.json"
    exit 0
  fi
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
  exit 0
fi

script="${1:?usage: run.sh npm-ci | run.sh SCRIPT.mjs}"
if [[ ! -f node_modules/.tessera-lock ]] || ! cmp -s package-lock.json node_modules/.tessera-lock; then
  echo "FAIL: node_modules in $TESSERA_E2E_DIR is missing or stale: run the e2e_npm_ci test first" >&2
  exit 1
fi
if [[ "$script" == chat_page.mjs ]]; then
  need "${CHROMIUM:-chromium}" chromium
  CHROMIUM=$(command -v "${CHROMIUM:-chromium}")
  export CHROMIUM
fi
exec node "$script"
