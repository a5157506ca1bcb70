'use strict';
// Paths the tests need, from the environment ctest sets (or the checkout's own).
const path = require('node:path');
const fs = require('node:fs');
const { execFileSync } = require('node:child_process');

const root = path.join(__dirname, '..', '..', '..');
const models = process.env.TESSERA_MODELS_DIR ?? path.join(root, 'models');
const fixtures = process.env.TESSERA_FIXTURES_DIR ?? path.join(root, 'tests', 'fixtures');
const bin = process.env.TESSERA_BIN ?? path.join(root, 'build', 'release', 'bin', 'tessera');
if (!process.env.TESSERA_NODE_ADDON) {
  const built = path.join(root, 'build', 'release', 'bindings', 'node', 'tessera.node');
  if (fs.existsSync(built)) process.env.TESSERA_NODE_ADDON = built;
}

const stories = path.join(models, 'stories260K.gguf');
const archFixture = path.join(fixtures, 'archs', 'qwen2.gguf');

// `tessera run`'s greedy text after the prompt.
function runGreedy(model, prompt, n) {
  const out = execFileSync(bin, ['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0'],
                           { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  if (!out.startsWith(prompt)) throw new Error(`tessera run printed ${JSON.stringify(out)}`);
  return out.slice(prompt.length).replace(/\n$/, '');
}

function tmpFile(name) {
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'tessera-node-'));
  return path.join(dir, name);
}

module.exports = { models, fixtures, bin, stories, archFixture, runGreedy, tmpFile };
