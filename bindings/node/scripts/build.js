'use strict';
// `npm install`'s build of the addon: cmake-js configures CMakeLists.txt
// (tessera's libraries from the packed sources, then tessera.node) with the
// Node-API headers npm installed, on every core. npm shows an install
// script's output only when it fails, so progress goes to the terminal
// itself (/dev/tty) when there is one, and to stderr otherwise.
// Environment: TESSERA_NODE_JOBS (parallel compiles; default: every CPU),
// TESSERA_NODE_CMAKE_ARGS (more -D options for the configure step, e.g.
// "-DTESSERA_CUDA=OFF").
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const pkg = path.join(__dirname, '..');

function includeDir(name, file) {
  const main = require.resolve(`${name}/package.json`, { paths: [pkg] });
  // include_dir: absolute (node-api-headers), or relative to the working
  // folder (node-addon-api, whose headers are in its own folder).
  const given = String(require(main.replace(/package\.json$/, '')).include_dir ?? '').replace(/^"|"$/g, '');
  const clean = path.isAbsolute(given) ? given : path.dirname(main);
  if (!fs.existsSync(path.join(clean, file))) {
    throw new Error(`@tessera/node: ${file} is not in ${clean} (from npm package ${name})`);
  }
  return clean;
}

let tty = null;
try {
  tty = fs.createWriteStream(null, { fd: fs.openSync('/dev/tty', 'w') });
} catch {
  tty = null;  // no terminal (CI, a pipe): stderr
}
const say = (line) => (tty ?? process.stderr).write(`${line}\n`);

const jobs = Number(process.env.TESSERA_NODE_JOBS) || os.availableParallelism?.() || os.cpus().length;
const cmakeJs = require.resolve('cmake-js/bin/cmake-js', { paths: [pkg] });
const defines = [
  `--CDNODE_ADDON_API_DIR=${includeDir('node-addon-api', 'napi.h')}`,
  `--CDNODE_API_HEADERS_DIR=${includeDir('node-api-headers', 'node_api.h')}`,
  '--CDCMAKE_BUILD_TYPE=Release',
];
for (const arg of (process.env.TESSERA_NODE_CMAKE_ARGS ?? '').split(/\s+/).filter(Boolean)) {
  if (!arg.startsWith('-D')) throw new Error(`TESSERA_NODE_CMAKE_ARGS: '${arg}' is not a -D option`);
  defines.push(`--CD${arg.slice(2)}`);
}
const args = [cmakeJs, 'compile', '--runtime', 'node', '--out', 'build', '--parallel', String(jobs), ...defines];

say(`@tessera/node: building the addon from source on ${jobs} thread(s); this takes minutes`);
const start = Date.now();
const child = spawn(process.execPath, args, { cwd: pkg, stdio: ['ignore', 'pipe', 'pipe'] });
let tail = [];
function relay(stream) {
  let rest = '';
  stream.on('data', (chunk) => {
    const lines = (rest + chunk.toString()).split('\n');
    rest = lines.pop();
    for (const line of lines) {
      tail.push(line);
      if (tail.length > 60) tail = tail.slice(-60);
      // The compiler's progress lines, errors and CMake's own messages.
      if (/^\[\s*\d+\/\d+\]|^\[\s*\d+%\]|error|warning: |^CMake Error|^-- tessera/i.test(line)) say(line);
    }
  });
}
relay(child.stdout);
relay(child.stderr);
child.on('close', (code) => {
  const s = ((Date.now() - start) / 1000).toFixed(0);
  if (code === 0) {
    say(`@tessera/node: built build/Release/tessera.node in ${s} s`);
    return;
  }
  process.stderr.write(tail.join('\n') + '\n');
  say(`@tessera/node: the build failed after ${s} s (exit ${code}); it needs cmake, g++ and ` +
      'the Debian packages libfmt-dev nlohmann-json3-dev libpcre2-dev (apt-get install them)');
  process.exit(code || 1);
});
