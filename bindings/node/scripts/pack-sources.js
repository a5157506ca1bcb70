'use strict';
// `npm pack` / `npm publish` hooks: the package builds its addon from
// tessera's own sources, so prepack copies them from the repository around
// this folder into tessera/ (the top CMakeLists.txt, cmake/, src/); postpack
// removes the copy. Usage: node scripts/pack-sources.js copy|clean
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const repo = path.join(pkg, '..', '..');
const out = path.join(pkg, 'tessera');
const parts = ['CMakeLists.txt', 'cmake', 'src'];

function copy() {
  for (const p of parts) {
    if (!fs.existsSync(path.join(repo, p))) {
      throw new Error(`pack-sources: ${path.join(repo, p)} is missing: pack from a tessera checkout`);
    }
  }
  fs.rmSync(out, { recursive: true, force: true });
  let files = 0;
  for (const p of parts) {
    fs.cpSync(path.join(repo, p), path.join(out, p), {
      recursive: true,
      filter: (src) => {
        const ok = !/(^|\/)(build|node_modules)(\/|$)/.test(path.relative(repo, src));
        if (ok && fs.statSync(src).isFile()) files += 1;
        return ok;
      },
    });
  }
  console.error(`pack-sources: ${files} files of tessera's sources in ${path.relative(process.cwd(), out) || out}`);
}

const what = process.argv[2];
if (what === 'copy') copy();
else if (what === 'clean') fs.rmSync(out, { recursive: true, force: true });
else {
  console.error('usage: node scripts/pack-sources.js copy|clean');
  process.exit(2);
}
