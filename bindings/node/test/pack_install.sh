#!/usr/bin/env bash
# The package as a user gets it: `npm pack` here, then `npm install` of the
# tarball into an empty folder, which builds the addon from the sources inside
# it (scripts/build.js), then the README's example on the default model.
# Prints the tarball's size and the install time. Needs node, npm, cmake,
# g++ and tessera's Debian -dev packages; npm fetches cmake-js and
# node-addon-api (from its cache when they are there).
# Usage: bindings/node/test/pack_install.sh   (TESSERA_NODE_CMAKE_ARGS: passed on)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-pack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset TESSERA_NODE_ADDON   # the installed package must load its own addon

cd "$here"
tarball=$(npm pack --pack-destination "$tmp" --loglevel=error | tail -n 1)
[[ -f "$tmp/$tarball" ]] || { echo "pack_install: npm pack made no tarball ($tarball)"; exit 1; }
[[ ! -e "$here/tessera" ]] || { echo "pack_install: postpack left $here/tessera behind"; exit 1; }
size=$(stat -c %s "$tmp/$tarball")
tar tzf "$tmp/$tarball" > "$tmp/list"
echo "pack_install: $tarball, $((size / 1024)) KiB, $(wc -l < "$tmp/list") files"
grep -qx 'package/tessera/src/serving/generator.cpp' "$tmp/list" ||
  { echo "pack_install: the tarball lacks tessera's sources"; exit 1; }

mkdir "$tmp/app"
cd "$tmp/app"
echo '{"name": "app", "version": "1.0.0", "private": true}' > package.json
start=$(date +%s)
npm install --no-audit --no-fund --prefer-offline --loglevel=error "$tmp/$tarball"
echo "pack_install: npm install built the addon in $(( $(date +%s) - start )) s"
[[ -f node_modules/@tessera/node/build/Release/tessera.node ]] ||
  { echo "pack_install: no build/Release/tessera.node after npm install"; exit 1; }

# The README's example, its text also gathered from onToken.
cat > example.js <<JS
const { loadModel } = require('@tessera/node');
(async () => {
  const context = await loadModel({ model: '$root/models/stories260K.gguf', n_ctx: 2048 });
  let streamed = '';
  const result = await context.completion(
    { messages: [{ role: 'user', content: 'Tell me a story.' }], n_predict: 64 },
    ({ token }) => { streamed += token; },
  );
  await context.release();
  if (!result.text || result.text !== streamed) {
    throw new Error('text ' + JSON.stringify(result.text) + ', streamed ' + JSON.stringify(streamed));
  }
  console.log('pack_install: example wrote ' + JSON.stringify(result.text.slice(0, 60)) + '...');
})().catch((e) => { console.error(e); process.exit(1); });
JS
node example.js
echo "pack_install: PASS"
