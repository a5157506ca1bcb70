'use strict';
// @tessera/node: tessera's serving core with @fugood/llama.node's API.
// The addon (src/) does the work off the JS thread; this file gives it
// llama.node's names and shapes.
const path = require('node:path');
const fs = require('node:fs');

function loadAddon() {
  const tried = [];
  const candidates = [
    process.env.TESSERA_NODE_ADDON,
    path.join(__dirname, '..', 'build', 'Release', 'tessera.node'),
    path.join(__dirname, '..', 'build', 'tessera.node'),
  ].filter(Boolean);
  for (const file of candidates) {
    if (!fs.existsSync(file)) {
      tried.push(file);
      continue;
    }
    return require(file);
  }
  throw new Error(`@tessera/node: the native addon is not built (looked for ${tried.join(', ')}); ` +
                  'run `npm install` in the package folder, or set TESSERA_NODE_ADDON');
}

const addon = loadAddon();
let nextRequestId = 1;

function released() {
  return Promise.reject(new Error('this context was released'));
}

class LlamaParallelAPI {
  constructor(context) {
    this._context = context;
    this._queued = new Map();  // requestId -> what cancelRequest does
  }

  // Sets the number of slots sequences share the context in (n_ctx / n_parallel
  // tokens each); waits for nothing to run first.
  async enable({ n_parallel = 8 } = {}) {
    await this._context._switch(n_parallel);
    return true;
  }

  async disable() {
    await this._context._switch(1);
    return true;
  }

  // Starts a completion beside the others; returns at once.
  queueCompletion(options, onToken) {
    const requestId = nextRequestId++;
    const promise = this._context._complete(options, onToken, requestId);
    this._queued.set(requestId, () => this._context._native?.cancel(requestId));
    promise.then(() => this._queued.delete(requestId), () => this._queued.delete(requestId));
    return { requestId, promise, stop: () => this.cancelRequest(requestId) };
  }

  queueEmbedding(text, params) {
    const requestId = nextRequestId++;
    const promise = this._context.embedding(text, params);
    return { requestId, promise };
  }

  queueRerank(query, documents, params) {
    const requestId = nextRequestId++;
    const promise = this._context.rerank(query, documents, params);
    return { requestId, promise };
  }

  cancelRequest(requestId) {
    const cancel = this._queued.get(requestId);
    if (cancel) cancel();
    return cancel !== undefined;
  }

  getParallelStatus() {
    if (!this._context._native) throw new Error('this context was released');
    return this._context._native.status();
  }
}

class LlamaContext {
  constructor(native) {
    this._native = native;
    this._main = new Set();  // ids of completion() calls, for stopCompletion()
    this._switching = null;
    this.parallel = new LlamaParallelAPI(this);
  }

  async _complete(options, onToken, requestId) {
    if (!this._native) return released();
    if (this._switching) await this._switching;
    if (!this._native) return released();
    if (options === null || typeof options !== 'object') {
      throw new TypeError('completion(options, onToken?): options must be an object');
    }
    return this._native.completion(options, requestId, typeof onToken === 'function' ? onToken : undefined);
  }

  async _switch(n) {
    if (!this._native) return released();
    while (this._switching) await this._switching;
    this._switching = this._native.setParallel(n).finally(() => { this._switching = null; });
    return this._switching;
  }

  // Generates from `prompt` (or `messages`, rendered with the chat template);
  // onToken({token}) gets the text as it comes, in whole UTF-8 characters.
  completion(options, onToken) {
    const id = nextRequestId++;
    this._main.add(id);
    const p = this._complete(options, onToken, id);
    const done = () => this._main.delete(id);
    p.then(done, done);
    return p;
  }

  // Ends the running completion() calls: their promises resolve with interrupted: true.
  stopCompletion() {
    if (!this._native) return;
    for (const id of this._main) this._native.cancel(id);
  }

  async tokenize(text) { return this._native ? this._native.tokenize(text) : released(); }
  async detokenize(tokens) { return this._native ? this._native.detokenize(Array.from(tokens ?? [])) : released(); }
  async embedding(text, params) { return this._native ? this._native.embedding(text, params ?? {}) : released(); }
  async rerank(query, documents, params) {
    return this._native ? this._native.rerank(query, documents, params ?? {}) : released();
  }

  async getFormattedChat(messages, template) {
    if (!this._native) return released();
    return this._native.formatChat(messages, template ?? undefined);
  }

  getModelInfo() {
    if (!this._native) throw new Error('this context was released');
    return this._native.modelInfo();
  }

  async saveSession(file) { return this._native ? this._native.saveSession(file) : released(); }
  async loadSession(file) { return this._native ? this._native.loadSession(file) : released(); }
  async clearCache() { return this._native ? this._native.clearCache() : released(); }

  // Frees the model and its cache now (do not wait for the garbage
  // collector). A completion still running resolves with interrupted: true;
  // later calls reject.
  async release() {
    const native = this._native;
    if (!native) return;
    this._native = null;
    await native.release();
  }
}

// Loads a GGUF model; onProgress gets integer percentages, only rising, up to 100.
async function loadModel(options, onProgress) {
  if (options === null || typeof options !== 'object') {
    throw new TypeError('loadModel(options, onProgress?): options must be an object');
  }
  const native = await addon.loadModel(options, typeof onProgress === 'function' ? onProgress : undefined);
  return new LlamaContext(native);
}

// A GGUF file's metadata without its weights: every key as a string, and
// version, alignment, data_offset, n_tensors.
function loadLlamaModelInfo(file, skip) {
  return addon.loadModelInfo(file, Array.isArray(skip) ? skip : []);
}

// The runtime's devices: [{backend, type, deviceName, maxMemorySize, metadata}].
function getBackendDevicesInfo() {
  return addon.backendDevices();
}

module.exports = { loadModel, loadLlamaModelInfo, getBackendDevicesInfo, LlamaContext };
