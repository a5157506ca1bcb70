'use strict';
// The package against the serving core, on stories260K and the qwen2 fixture
// of tests/fixtures/archs (llama.cpp's greedy tokens).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { fixtures, stories, archFixture, runGreedy, tmpFile } = require('./helpers.js');
const tessera = require('../lib/index.js');

const greedy = { temperature: 0 };
const prompt = 'Once upon a time';

test('loadModel reports rising integer progress up to 100', async () => {
  const seen = [];
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 }, (p) => seen.push(p));
  try {
    assert.ok(seen.length >= 2, `progress calls: ${seen}`);
    assert.equal(seen.at(-1), 100);
    for (let i = 0; i < seen.length; ++i) {
      assert.ok(Number.isInteger(seen[i]) && seen[i] >= 0 && seen[i] <= 100, `${seen[i]}`);
      if (i > 0) assert.ok(seen[i] > seen[i - 1], `not rising: ${seen}`);
    }
    const info = ctx.getModelInfo();
    assert.equal(info.metadata['general.architecture'], 'llama');
    assert.equal(info.nEmbd, 64);
    assert.ok(info.nParams > 200000 && info.size > 0, JSON.stringify(info.desc));
  } finally {
    await ctx.release();
  }
});

test('missing, truncated and non-model files reject naming the file', async () => {
  await assert.rejects(tessera.loadModel({ model: '/nonexistent/model.gguf' }), /nonexistent\/model\.gguf/);
  const truncated = tmpFile('truncated.gguf');
  const bytes = fs.readFileSync(stories);
  fs.writeFileSync(truncated, bytes.subarray(0, Math.floor(bytes.length / 2)));
  await assert.rejects(tessera.loadModel({ model: truncated }), (e) => e instanceof Error && e.message.includes(truncated));
  const text = tmpFile('notes.gguf');
  fs.writeFileSync(text, 'not a model at all\n');
  await assert.rejects(tessera.loadModel({ model: text }), (e) => e.message.includes(text));
  await assert.rejects(tessera.loadModel({ model: stories, cache_type_k: 'q9_9' }), /cache_type_k/);
  await assert.rejects(tessera.loadModel({ model: stories, n_cpu_moe: -1 }), /n_cpu_moe/);
  await assert.rejects(tessera.loadModel({ model: stories, weights_cache: 5 }), /weights_cache/);
  await assert.rejects(tessera.loadModel({ model: stories, weights_cache: true }), /weights_cache/);
  await assert.rejects(tessera.loadModel({}), /model/);
});

test('weights_cache takes a directory, off or false (a model this small gets no image)', async () => {
  const dir = tmpFile('weights-images');
  for (const weights_cache of [dir, 'off', false]) {
    const ctx = await tessera.loadModel({ model: stories, n_ctx: 128, weights_cache });
    try {
      const r = await ctx.completion({ prompt: 'x', n_predict: 2, temperature: 0 });
      assert.equal(r.tokens_predicted, 2);
    } finally {
      await ctx.release();
    }
  }
  assert.equal(fs.existsSync(dir), false);
});

test('n_cpu_moe and cpu_moe load a mixture of experts (no GPU here: everything stays on the CPU)', async () => {
  const moe = path.join(fixtures, 'archs', 'qwen3moe.gguf');
  for (const options of [{ n_cpu_moe: 1 }, { cpu_moe: true }]) {
    const ctx = await tessera.loadModel({ model: moe, n_ctx: 128, ...options });
    try {
      const r = await ctx.completion({ prompt: 'x', n_predict: 4, temperature: 0 });
      assert.equal(r.tokens_predicted, 4);
    } finally {
      await ctx.release();
    }
  }
});

test('loadLlamaModelInfo reads metadata without weights; devices come from the registry', async () => {
  const info = await tessera.loadLlamaModelInfo(stories);
  assert.equal(info['general.architecture'], 'llama');
  assert.equal(info.version, 3);
  const devices = await tessera.getBackendDevicesInfo();
  const cpu = devices.find((d) => d.backend === 'CPU');
  assert.ok(cpu && cpu.type === 'cpu' && cpu.maxMemorySize > 0, JSON.stringify(devices));
});

test('completion: greedy text equals tessera run, tokens stream in order', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    let streamed = '';
    let calls = 0;
    const r = await ctx.completion({ prompt, n_predict: 40, ...greedy }, ({ token }) => {
      streamed += token;
      ++calls;
    });
    assert.equal(r.text, runGreedy(stories, prompt, 40));
    assert.equal(streamed, r.text);
    assert.ok(calls >= 10, `${calls} token callbacks`);
    assert.equal(r.tokens_predicted, 40);
    assert.equal(r.stopped_limit, true);
    assert.equal(r.interrupted, false);
    assert.equal(r.timings.predicted_n, 40);
    assert.ok(r.timings.predicted_per_second > 0 && r.timings.prompt_n > 0);
    // A stop string ends the text before it.
    const s = await ctx.completion({ prompt, n_predict: 40, stop: ['Lily'], ...greedy });
    assert.equal(s.stopped_word, true);
    assert.equal(s.stopping_word, 'Lily');
    assert.equal(s.text, r.text.slice(0, r.text.indexOf('Lily')));
  } finally {
    await ctx.release();
  }
});

test('completion matches llama.cpp greedy tokens on the qwen2 fixture', async () => {
  const fx = JSON.parse(fs.readFileSync(path.join(fixtures, 'archs', 'qwen2.json'), 'utf8'));
  const ctx = await tessera.loadModel({ model: archFixture, n_ctx: 256 });
  try {
    const text = await ctx.detokenize(fx.prompt);
    assert.deepEqual(Array.from((await ctx.tokenize(text)).tokens), fx.prompt.slice(1));
    const r = await ctx.completion({ prompt: text, n_predict: fx.greedy.length, n_probs: 1, ignore_eos: true, ...greedy });
    assert.deepEqual(r.completion_probabilities.map((p) => p.id), fx.greedy);
  } finally {
    await ctx.release();
  }
});

test('messages render as the chat renderer does (llama.cpp\'s render of Qwen 2.5)', async () => {
  const dir = path.join(fixtures, 'chat-templates');
  const name = 'Qwen-Qwen2.5-7B-Instruct.jinja';
  const source = fs.readFileSync(path.join(dir, name), 'utf8');
  const conversations = JSON.parse(fs.readFileSync(path.join(dir, 'conversations.json'), 'utf8'));
  const expected = JSON.parse(fs.readFileSync(path.join(dir, 'expected.json'), 'utf8'))[name];
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    let checked = 0;
    for (const c of conversations) {
      if (!c.add_generation_prompt || c.tools || !expected[c.name] || expected[c.name].error) continue;
      const { prompt: rendered } = await ctx.getFormattedChat(c.messages, source);
      assert.equal(rendered, expected[c.name].prompt, c.name);
      ++checked;
    }
    assert.ok(checked >= 2, `${checked} conversations checked`);
    // completion({messages}) generates from that render.
    const r = await ctx.completion({ messages: [{ role: 'user', content: 'Hi' }], chat_template: 'chatml', n_predict: 8, ...greedy });
    const f = await ctx.getFormattedChat([{ role: 'user', content: 'Hi' }], 'chatml');
    assert.equal(r.tokens_evaluated, Array.from((await ctx.tokenize(f.prompt)).tokens).length + 1);  // + BOS
    await assert.rejects(ctx.getFormattedChat([{ role: 'user', content: 'x' }], 'no-such-template'), /no-such-template/);
  } finally {
    await ctx.release();
  }
});

test('stopCompletion resolves the running completion with interrupted: true', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 2048 });
  try {
    let tokens = 0;
    const p = ctx.completion({ prompt, n_predict: 1500, ignore_eos: true, ...greedy }, () => {
      if (++tokens === 5) ctx.stopCompletion();
    });
    const r = await p;
    assert.equal(r.interrupted, true);
    assert.ok(r.tokens_predicted < 1500, `${r.tokens_predicted}`);
  } finally {
    await ctx.release();
  }
});

test('tokenize / detokenize round trip; embeddings are unit vectors', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    const text = 'The little dog ran to the park, and Tom laughed.';
    const { tokens } = await ctx.tokenize(text);
    assert.ok(tokens instanceof Int32Array && tokens.length > 5);
    assert.equal(await ctx.detokenize(Array.from(tokens)), text);
    await assert.rejects(ctx.detokenize([1e6]), /outside the vocabulary/);
    const { embedding } = await ctx.embedding(text);
    assert.ok(embedding instanceof Float32Array);
    assert.equal(embedding.length, ctx.getModelInfo().nEmbd);
    const norm = Math.hypot(...embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
    const raw = (await ctx.embedding(text, { embd_normalize: -1 })).embedding;
    const scale = Math.hypot(...raw);
    for (let i = 0; i < raw.length; ++i) assert.ok(Math.abs(raw[i] / scale - embedding[i]) < 1e-5);
  } finally {
    await ctx.release();
  }
});

// A file of little-endian f32 (a Buffer may sit inside a larger pooled ArrayBuffer).
function floats(file) {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

test('encoders: bert embeddings in llama.cpp\'s direction; rerank scores as llama.cpp\'s, best first', async () => {
  const dir = path.join(fixtures, 'archs');
  const bert = await tessera.loadModel({ model: path.join(dir, 'bert.gguf'), weights_cache: false });
  try {
    const want = floats(path.join(dir, 'bert.embd.f32'));
    const n = bert.getModelInfo().nEmbd;
    const { embedding } = await bert.embedding('Hello world');
    let dot = 0, ref = 0;
    for (let i = 0; i < n; ++i) { dot += embedding[i] * want[i]; ref += want[i] * want[i]; }
    assert.ok(dot / Math.sqrt(ref) > 0.9999, `cosine ${dot / Math.sqrt(ref)}`);
    await assert.rejects(bert.rerank('q', ['a']), /not a reranker/);
  } finally {
    await bert.release();
  }
  const ranker = await tessera.loadModel({ model: path.join(dir, 'bert_rerank.gguf'), weights_cache: false });
  try {
    const fixture = JSON.parse(fs.readFileSync(path.join(dir, 'bert_rerank.json'), 'utf8'));
    const scores = floats(path.join(dir, 'bert_rerank.embd.f32'));
    const pairs = fixture.pairs.slice(0, 2);  // one query, two documents
    const ranked = await ranker.rerank(pairs[0].query, pairs.map((p) => p.document));
    assert.equal(ranked.length, 2);
    assert.ok(ranked[0].score >= ranked[1].score);
    for (const r of ranked) assert.ok(Math.abs(r.score - scores[r.index]) < 5e-4, JSON.stringify(r));
    const sig = await ranker.parallel.queueRerank(pairs[0].query, pairs.map((p) => p.document), { normalize: 1 }).promise;
    for (const r of sig) assert.ok(Math.abs(r.score - 1 / (1 + Math.exp(-scores[r.index]))) < 5e-4);
    await assert.rejects(ranker.rerank('q', ['a', 3]), /documents\[1\]/);
  } finally {
    await ranker.release();
  }
});

test('a saved session, loaded into a fresh context, continues as if never stopped', async () => {
  const file = tmpFile('story.session');
  const a = await tessera.loadModel({ model: stories, n_ctx: 512 });
  let first;
  let whole;
  try {
    whole = await a.completion({ prompt, n_predict: 48, ...greedy });
    await a.clearCache();
    first = await a.completion({ prompt, n_predict: 24, ...greedy });
    const saved = await a.saveSession(file);
    assert.ok(saved.tokens_saved > 20, JSON.stringify(saved));
  } finally {
    await a.release();
  }
  const b = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    const loaded = await b.loadSession(file);
    assert.ok(loaded.tokens_loaded > 20);
    const rest = await b.completion({ prompt: prompt + first.text, n_predict: 24, ...greedy });
    assert.ok(rest.timings.cache_n >= loaded.tokens_loaded - 1, `cache_n ${rest.timings.cache_n}`);
    assert.equal(first.text + rest.text, whole.text);
  } finally {
    await b.release();
  }
  // Another model's session is refused.
  const other = await tessera.loadModel({ model: archFixture, n_ctx: 256 });
  try {
    await assert.rejects(other.loadSession(file), /another model/);
    await assert.rejects(other.loadSession('/nonexistent/x.session'), /nonexistent/);
  } finally {
    await other.release();
  }
});

test('four queued completions run together, each equal to its solo result', async () => {
  const prompts = ['Once upon a time', 'The cat', 'Tom and Lily went', 'One day, a little bird'];
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 2048, n_parallel: 4 });
  try {
    const solo = [];
    for (const p of prompts) solo.push((await ctx.completion({ prompt: p, n_predict: 32, ...greedy })).text);
    await ctx.clearCache();
    const queued = prompts.map((p) => ctx.parallel.queueCompletion({ prompt: p, n_predict: 32, ...greedy }));
    const status = ctx.parallel.getParallelStatus();
    assert.equal(status.n_parallel, 4);
    assert.equal(status.requests.length, 4);
    const results = await Promise.all(queued.map((q) => q.promise));
    results.forEach((r, i) => assert.equal(r.text, solo[i], prompts[i]));
    assert.equal(ctx.parallel.getParallelStatus().requests.length, 0);
  } finally {
    await ctx.release();
  }
});

test('cancelRequest ends a queued completion and frees its slot', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 2048, n_parallel: 2 });
  try {
    let started;
    const onFirst = new Promise((resolve) => { started = resolve; });
    const long = ctx.parallel.queueCompletion({ prompt, n_predict: 1000, ignore_eos: true, ...greedy }, () => started());
    await onFirst;
    assert.equal(ctx.parallel.cancelRequest(long.requestId), true);
    const r = await long.promise;
    assert.equal(r.interrupted, true);
    assert.equal(ctx.parallel.getParallelStatus().active_slots, 0);
    assert.equal(ctx.parallel.cancelRequest(long.requestId), false);
    const again = await ctx.parallel.queueCompletion({ prompt, n_predict: 8, ...greedy }).promise;
    assert.equal(again.tokens_predicted, 8);
    await ctx.parallel.enable({ n_parallel: 3 });
    assert.equal(ctx.parallel.getParallelStatus().n_parallel, 3);
  } finally {
    await ctx.release();
  }
});

test('release() mid-completion resolves it; every later call rejects', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 2048 });
  let release;
  const p = ctx.completion({ prompt, n_predict: 1500, ignore_eos: true, ...greedy }, () => {
    if (!release) release = ctx.release();
  });
  const r = await p;
  await release;
  assert.equal(r.interrupted, true);
  await assert.rejects(ctx.completion({ prompt }), /released/);
  await assert.rejects(ctx.tokenize('x'), /released/);
  await assert.rejects(ctx.saveSession(tmpFile('x')), /released/);
  assert.throws(() => ctx.getModelInfo(), /released/);
  await ctx.release();  // twice is fine
});

test('a GBNF grammar keeps sampled output in shape', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    const grammar = 'root ::= ", there was a " ("dog" | "cat") " named " [A-Z] [a-z]{2,8} "."';
    for (let seed = 1; seed <= 3; ++seed) {
      const r = await ctx.completion({ prompt, n_predict: 40, temperature: 1, seed, grammar });
      assert.match(r.text, /^, there was a (dog|cat) named [A-Z][a-z]{2,8}\.$/);
      assert.equal(r.stopped_eos, true);
    }
    await assert.rejects(ctx.completion({ prompt, grammar: 'root ::= x' }), /option 'grammar'.*line 1, column 10/);
    const json_schema = { type: 'object', properties: { n: { type: 'integer', minimum: 3, maximum: 7 } }, required: ['n'] };
    for (const options of [{ json_schema }, { response_format: { type: 'json_schema', json_schema: { schema: json_schema } } }]) {
      const r = await ctx.completion({ prompt: 'Data:', n_predict: 60, temperature: 1, seed: 7, ...options });
      const doc = JSON.parse(r.text);
      assert.ok(doc.n >= 3 && doc.n <= 7, r.text);
    }
    await assert.rejects(ctx.completion({ prompt, json_schema: { type: 'string', pattern: 'a' } }), /at '\/pattern'/);
  } finally {
    await ctx.release();
  }
});

test('thinking goes to reasoning_content for messages (a grammar makes the model think)', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    const grammar = 'root ::= "<think>" [a-z ]{3,12} "</think>" " " [A-Z] [a-z]{2,6} "."';
    const messages = [{ role: 'user', content: 'Hi' }];
    let streamedReasoning = '';
    const r = await ctx.completion({ messages, n_predict: 60, temperature: 1, seed: 3, grammar },
                                   (t) => { streamedReasoning += t.reasoning_content ?? ''; });
    assert.match(r.reasoning_content, /^[a-z ]{3,12}$/);
    assert.match(r.content, /^[A-Z][a-z]{2,6}\.$/);
    assert.equal(streamedReasoning, r.reasoning_content);
    const n = await ctx.completion({ messages, n_predict: 60, temperature: 1, seed: 3, grammar, reasoning_format: 'none' });
    assert.equal(n.text, `<think>${r.reasoning_content}</think> ${r.content}`);
    assert.equal(n.reasoning_content, '');
  } finally {
    await ctx.release();
  }
});

test('gpt-oss replies (harmony): analysis to reasoning_content, final to content', async () => {
  const chat_template = fs.readFileSync(path.join(fixtures, 'chat-templates', 'openai-gpt-oss-120b.jinja'), 'utf8');
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 1024 });
  try {
    const grammar = 'root ::= "<|channel|>analysis<|message|>" [a-z ]{3,12} ' +
                    '"<|end|><|start|>assistant<|channel|>final<|message|>" [A-Z] [a-z]{2,6} "."';
    const messages = [{ role: 'user', content: 'Hi' }];
    let streamed = '';
    const r = await ctx.completion({ messages, chat_template, n_predict: 300, temperature: 1, seed: 3, grammar },
                                   (t) => { streamed += t.reasoning_content ?? ''; });
    assert.match(r.reasoning_content, /^[a-z ]{3,12}$/);
    assert.match(r.content, /^[A-Z][a-z]{2,6}\.$/);
    assert.equal(streamed, r.reasoning_content);
    const n = await ctx.completion({ messages, chat_template, n_predict: 300, temperature: 1, seed: 3, grammar,
                                     reasoning_format: 'none' });
    assert.equal(n.text, `<|channel|>analysis<|message|>${r.reasoning_content}<|end|>${r.content}`);
  } finally {
    await ctx.release();
  }
});

test('tools: a required call comes back in tool_calls, streamed and whole, in the template\'s format', async () => {
  const qwen = fs.readFileSync(path.join(fixtures, 'chat-templates', 'Qwen-Qwen2.5-7B-Instruct.jinja'), 'utf8');
  const gptOss = fs.readFileSync(path.join(fixtures, 'chat-templates', 'openai-gpt-oss-120b.jinja'), 'utf8');
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 2048 });
  const tools = [{
    type: 'function',
    function: {
      name: 'add', description: 'Adds two integers',
      parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] },
    },
  }];
  try {
    const messages = [{ role: 'user', content: 'Add 2 and 3.' }];
    for (const chat_template of [qwen, gptOss, 'chatml']) {  // <tool_call> tags; harmony; the generic JSON
      let ended = 0;
      for (let seed = 1; seed <= 3; ++seed) {
        const streamed = [];
        const r = await ctx.completion({ messages, chat_template, tools, tool_choice: 'required', n_predict: 300,
                                         temperature: 1, seed },
                                       (t) => streamed.push(...(t.tool_calls ?? [])));
        if (!r.stopped_eos) continue;
        ++ended;
        assert.equal(r.content, '');
        assert.equal(r.tool_calls.length, 1, JSON.stringify(r));
        const call = r.tool_calls[0];
        assert.equal(call.type, 'function');
        assert.equal(call.function.name, 'add');
        const args = JSON.parse(call.function.arguments);
        assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), call.function.arguments);
        assert.deepEqual(streamed, r.tool_calls);
      }
      assert.ok(ended >= 2, `${ended} of 3 forced calls ended`);
    }
    await assert.rejects(ctx.completion({ prompt, tools }), /'tools' needs 'messages'/);
    await assert.rejects(ctx.completion({ messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] }),
                         /tools\[0\]/);
  } finally {
    await ctx.release();
  }
});

test('bad options are TypeErrors naming the option', async () => {
  const ctx = await tessera.loadModel({ model: stories, n_ctx: 512 });
  try {
    await assert.rejects(ctx.completion({ prompt, temperature: 'hot' }), /temperature/);
    await assert.rejects(ctx.completion({ prompt, stop: 3 }), /stop/);
    await assert.rejects(ctx.completion({ prompt, top_p: 2 }), /top/);
    await assert.rejects(ctx.completion({}), /prompt/);
    await assert.rejects(ctx.completion({ prompt, n_predict: 100000 }), /slot holds/);
  } finally {
    await ctx.release();
  }
});

test('200 load / release cycles leave memory bounded', async () => {
  const rss = () => process.memoryUsage().rss;
  const cycle = async () => {
    const ctx = await tessera.loadModel({ model: stories, n_ctx: 256 });
    await ctx.completion({ prompt, n_predict: 4, ...greedy });
    await ctx.release();
  };
  for (let i = 0; i < 20; ++i) await cycle();  // warm up allocators and code
  const before = rss();
  for (let i = 0; i < 200; ++i) await cycle();
  const grown = rss() - before;
  assert.ok(grown < 8 * 1024 * 1024, `RSS grew ${(grown / 1048576).toFixed(1)} MiB over 200 cycles`);
});
