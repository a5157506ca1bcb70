// Types of @tessera/node: @fugood/llama.node's API over tessera's serving core.

export interface LlamaModelOptions {
  model: string;
  n_ctx?: number;          // cells of the KV cache, shared by the slots (default 4096)
  n_batch?: number;        // tokens per forward pass (default 512)
  n_threads?: number;      // CPU threads (default: one per physical core)
  n_parallel?: number;     // slots (default 1); each gets n_ctx / n_parallel cells
  n_gpu_layers?: number;   // -1 (default): every layer that fits on the GPU; 0: none
  n_cpu_moe?: number;      // the experts of the first N layers stay in host memory (MoE models)
  weights_cache?: string | false;  // directory of weights images (later loads map the repacked weights); 'off' or false: none
  cpu_moe?: boolean;       // every layer's experts in host memory
  device?: string;         // a GPU by name, e.g. "CUDA0"
  embedding?: boolean;     // accepted; embeddings work on any context
  pooling_type?: 'none' | 'mean' | 'cls' | 'last';
  cache_type_k?: 'f16' | 'f32' | 'bf16' | 'q8_0' | 'q4_0' | 'q4_1' | 'q5_0' | 'q5_1';
  cache_type_v?: LlamaModelOptions['cache_type_k'];
  chat_template?: string;  // a built-in name (chatml, llama3, ...) or a Jinja template's source
}

export interface ChatMessage {
  role: string;
  content: string | null | Array<{ type: 'text'; text: string }>;
  [key: string]: unknown;
}

export interface LlamaCompletionOptions {
  prompt?: string;
  messages?: ChatMessage[];
  chat_template?: string;
  n_predict?: number;      // -1: until the end of text or the slot is full
  max_tokens?: number;     // n_predict's other name
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  penalty_repeat?: number;
  penalty_last_n?: number;
  penalty_freq?: number;
  penalty_present?: number;
  seed?: number;           // -1: random
  stop?: string | string[];
  ignore_eos?: boolean;
  n_probs?: number;        // alternatives per token in completion_probabilities
  logit_bias?: Array<[number, number | false]> | Record<string, number | false>;
  grammar?: string;        // GBNF (llama.cpp's syntax): the output keeps to it
  reasoning_format?: 'none' | 'auto' | 'deepseek';  // default: auto for messages, none for a prompt
  chat_template_kwargs?: Record<string, unknown>;
  enable_thinking?: boolean;
  json_schema?: object;    // or a JSON schema
  response_format?: { type: 'text' | 'json_object' | 'json_schema'; schema?: object;
                      json_schema?: { name?: string; schema: object; strict?: boolean } };
  // OpenAI's tools (with messages): calls come back in tool_calls.
  tools?: Array<{ type: 'function';
                  function: { name: string; description?: string; parameters?: object } }>;
  tool_choice?: 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };
  parallel_tool_calls?: boolean;
}

export interface LlamaToolCall {
  type: 'function';
  function: { name: string; arguments: string };  // arguments: a JSON text
  id: string;
}

export interface TokenProbability {
  id: number;
  content: string;
  prob: number;
  probs: Array<{ id: number; tok_str: string; prob: number }>;
}

export interface LlamaCompletionToken {
  token: string;           // the new text, whole UTF-8 characters
  content?: string;        // its answer part
  reasoning_content?: string;  // its thinking part
  completion_probabilities?: TokenProbability[];
  tool_calls?: LlamaToolCall[];  // calls completed with this token
}

export interface LlamaTimings {
  cache_n: number;
  prompt_n: number;
  prompt_ms: number;
  prompt_per_token_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_token_ms: number;
  predicted_per_second: number;
}

export interface LlamaCompletionResult {
  text: string;
  content: string;
  reasoning_content: string;
  tool_calls?: LlamaToolCall[];  // with tools, when the model called them
  tokens_predicted: number;
  tokens_evaluated: number;
  tokens_cached: number;
  truncated: boolean;
  context_full: boolean;
  interrupted: boolean;
  stopped_eos: boolean;
  stopped_word: boolean;
  stopped_limit: boolean;
  stopping_word: string;
  finish_reason: string;
  seed: number;
  completion_probabilities?: TokenProbability[];
  timings: LlamaTimings;
}

export interface ModelInfo {
  desc: string;
  nEmbd: number;
  nParams: number;
  size: number;
  nVocab: number;
  nCtxTrain: number;
  metadata: Record<string, string>;
  chatTemplates: { llamaChat: boolean; minja: { default: boolean; toolUse: boolean } };
  isChatTemplateSupported: boolean;
}

export interface ParallelStatus {
  n_parallel: number;
  active_slots: number;
  queued_requests: number;
  requests: Array<{
    requestId: number;
    state: 'queued' | 'processing_prompt' | 'generating' | 'done';
    tokens_generated: number;
    tokens_per_second: number;
  }>;
}

export interface RerankParams {
  normalize?: number;  // 0 (default): the classifier's scores; 1: through a sigmoid
}
export interface RerankResult {
  score: number;
  index: number;  // in `documents`
}

export declare class LlamaParallelAPI {
  enable(options?: { n_parallel?: number }): Promise<boolean>;
  disable(): Promise<boolean>;
  queueCompletion(options: LlamaCompletionOptions, onToken?: (t: LlamaCompletionToken) => void):
    { requestId: number; promise: Promise<LlamaCompletionResult>; stop: () => boolean };
  queueEmbedding(text: string, params?: { embd_normalize?: number }):
    { requestId: number; promise: Promise<{ embedding: Float32Array }> };
  queueRerank(query: string, documents: string[], params?: RerankParams):
    { requestId: number; promise: Promise<RerankResult[]> };
  cancelRequest(requestId: number): boolean;
  getParallelStatus(): ParallelStatus;
}

export declare class LlamaContext {
  readonly parallel: LlamaParallelAPI;
  completion(options: LlamaCompletionOptions, onToken?: (t: LlamaCompletionToken) => void):
    Promise<LlamaCompletionResult>;
  stopCompletion(): void;
  tokenize(text: string): Promise<{ tokens: Int32Array; has_media: boolean }>;
  detokenize(tokens: number[] | Int32Array): Promise<string>;
  embedding(text: string, params?: { embd_normalize?: number }): Promise<{ embedding: Float32Array }>;
  // A reranker's scores of each document against the query, best first.
  rerank(query: string, documents: string[], params?: RerankParams): Promise<RerankResult[]>;
  getFormattedChat(messages: ChatMessage[], template?: string): Promise<{ prompt: string; type: string }>;
  getModelInfo(): ModelInfo;
  saveSession(path: string): Promise<{ tokens_saved: number }>;
  loadSession(path: string): Promise<{ tokens_loaded: number; prompt: string }>;
  clearCache(): Promise<void>;
  release(): Promise<void>;
}

export declare function loadModel(options: LlamaModelOptions,
                                  onProgress?: (percent: number) => void): Promise<LlamaContext>;
export declare function loadLlamaModelInfo(path: string, skip?: string[]):
  Promise<Record<string, string | number>>;
export declare function getBackendDevicesInfo(): Promise<Array<{
  backend: string; type: string; deviceName: string; maxMemorySize: number;
  metadata: { description: string; freeMemory: number };
}>>;
