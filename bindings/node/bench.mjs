// The package's speed beside the engine's on one file: prompt (pp) and
// generation (tg) tokens/s through completion() against `tessera bench` (the
// bare engine) and `tessera run` (the same serving core from the CLI) in the
// same run (alternating, REPS rounds, medians), and 1 vs 4 parallel
// requests. package / run is what the package itself adds. Weights are repacked into anonymous memory at load, so the page
// cache does not matter once loaded.
//
//   node bench.mjs                       # TinyLlama-shaped Q4_0, synthesized once into the cache
//   MODEL=path.gguf THREADS=2 REPS=5 node bench.mjs
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, '..', '..');
const build = process.env.BUILD ?? path.join(root, 'build', 'release');
const bin = path.join(build, 'bin', 'tessera');
if (!process.env.TESSERA_NODE_ADDON) {
  const addon = path.join(build, 'bindings', 'node', 'tessera.node');
  if (existsSync(addon)) process.env.TESSERA_NODE_ADDON = addon;
}
const tessera = createRequire(import.meta.url)('./lib/index.js');

const threads = Number(process.env.THREADS ?? 2);
const reps = Number(process.env.REPS ?? 3);
const P = Number(process.env.P ?? 512);
const N = Number(process.env.N ?? 128);
const cache = process.env.CACHE ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'tessera-bench');
const shape = process.env.SHAPE ?? 'tinyllama-1.1b';
let model = process.env.MODEL;
if (!model) {
  model = path.join(cache, `${shape}-q4_0.gguf`);
  if (!existsSync(model)) {
    mkdirSync(cache, { recursive: true });
    console.error(`synthesizing ${model} ...`);
    execFileSync(bin, ['synth', '--shape', shape, '--type', 'q4_0', '-o', model], { stdio: 'inherit' });
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// tessera bench: pp at depth 0, tg after `depth` tokens in the cache (the
// package's generation follows its prompt).
function engine(depth) {
  const run = (args) => JSON.parse(execFileSync(bin, ['bench', '-m', model, '-t', String(threads), '-r', '1',
                                                      '-o', 'json', '--ceilings', '0', ...args],
                                                { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }))[0].avg_ts;
  return { pp: run(['-p', String(depth), '-n', '0', '-b', '1024']), tg: run(['-p', '0', '-n', String(N), '-d', String(depth)]) };
}

// `tessera run` on the same prompt text: its timings lines.
function cli(text) {
  const out = spawnSync(bin, ['run', '-m', model, '-t', String(threads), '-b', '1024', '-p', text, '-n', String(N),
                              '--temp', '0', '--ignore-eos', '--no-display-prompt'],
                        { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] }).stderr;
  const rate = (what) => Number(new RegExp(`^${what} .*\\(([0-9.]+) tok/s\\)`, 'm').exec(out)[1]);
  return { pp: rate('prompt'), tg: rate('generated') };
}

const ctx = await tessera.loadModel({ model, n_ctx: 4 * (P + N + 64), n_batch: 1024, n_threads: threads, n_parallel: 4 });
const vocab = ctx.getModelInfo().nVocab;
let seed = 1;
const randomIds = (n) => Array.from({ length: n }, () => (seed = (seed * 1103515245 + 12345) % 2147483648) % (vocab - 300) + 256);
// Random tokens, as tessera bench uses: a prompt of about P tokens.
const promptText = async () => ctx.detokenize(randomIds(P - 1));

const text = await promptText();
async function pkg(stream = true) {
  await ctx.clearCache();
  const r = await ctx.completion({ prompt: text, n_predict: N, ignore_eos: true, temperature: 0 }, stream ? () => {} : undefined);
  return { pp: r.timings.prompt_per_second, tg: r.timings.predicted_per_second, prompt_n: r.timings.prompt_n };
}

let promptN = (await pkg()).prompt_n;  // warm-up: plans for each batch shape
engine(promptN);
const e = { pp: [], tg: [] };
const c = { pp: [], tg: [] };
const p = { pp: [], tg: [] };
const quiet = { pp: [], tg: [] };  // no onToken: one call into JS at the end
for (let i = 0; i < reps; ++i) {
  const a = engine(promptN);
  e.pp.push(a.pp); e.tg.push(a.tg);
  const r = cli(text);
  c.pp.push(r.pp); c.tg.push(r.tg);
  const b = await pkg();
  p.pp.push(b.pp); p.tg.push(b.tg); promptN = b.prompt_n;
  const q = await pkg(false);
  quiet.pp.push(q.pp); quiet.tg.push(q.tg);
}

async function parallel(k) {
  await ctx.clearCache();
  const t0 = performance.now();
  const runs = [];
  for (let i = 0; i < k; ++i) {
    runs.push(ctx.parallel.queueCompletion({ prompt: await ctx.detokenize(randomIds(32)), n_predict: N, ignore_eos: true, temperature: 0 }).promise);
  }
  const results = await Promise.all(runs);
  const tokens = results.reduce((s, r) => s + r.tokens_predicted, 0);
  return tokens / ((performance.now() - t0) / 1000);
}
const par = { 1: [], 4: [] };
for (let i = 0; i < reps; ++i) {
  par[1].push(await parallel(1));
  par[4].push(await parallel(4));
}
await ctx.release();

const cpu = os.cpus()[0]?.model ?? '?';
console.log(`# @tessera/node bench.mjs — ${new Date().toISOString()}`);
console.log(`# CPU: ${cpu}, ${os.cpus().length} logical CPUs; ${path.basename(model)}; ${threads} threads; ${reps} rounds, medians`);
console.log('');
console.log('| test | tessera bench t/s | tessera run t/s | package t/s | package / run | package / bench |');
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
const row = (name, a, r, b) => console.log(`| ${name} | ${median(a).toFixed(1)} | ${median(r).toFixed(1)} | ${median(b).toFixed(1)} | ${(median(b) / median(r)).toFixed(3)} | ${(median(b) / median(a)).toFixed(3)} |`);
row(`pp${promptN} (one batch)`, e.pp, c.pp, p.pp);
row(`tg${N} after it (bench: -d ${promptN}), onToken`, e.tg, c.tg, p.tg);
row(`tg${N} after it, no onToken`, e.tg, c.tg, quiet.tg);
console.log('');
console.log('| parallel requests (tg' + N + ' each, 32-token prompts) | total t/s | vs 1 |');
console.log('| ---: | ---: | ---: |');
console.log(`| 1 | ${median(par[1]).toFixed(1)} | 1.00 |`);
console.log(`| 4 | ${median(par[4]).toFixed(1)} | ${(median(par[4]) / median(par[1])).toFixed(2)} |`);
