// Embeddings (the server's /v1/embeddings, the Node package's embedding()):
// a text's vector from the model's final hidden states (after the output
// norm), pooled over its tokens and L2-normalized as OpenAI's are. Runs on its own Context (made on first use), one input at a
// time, beside the generator's slots.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/engine/engine.h"
#include "tessera/text/tokenizer.h"

namespace tessera::serving {

// kRank: a reranker's classifier head on the [CLS] state (a decoder's, such
// as Qwen3-Reranker's: on the last token, its labels' softmax), one score per
// output label (llama.cpp's LLAMA_POOLING_TYPE_RANK).
// kNone: no pooling, every token's state (llama.cpp's LLAMA_POOLING_TYPE_NONE).
enum class Pooling { kMean, kLast, kCls, kRank, kNone };

// "mean", "last", "cls", "rank", "none"; the error names the flag and the choices.
Pooling pooling_from_name(const std::string& name);
// The model's {arch}.pooling_type (llama.cpp's numbering: 0 none, 1 mean,
// 2 cls, 3 last, 4 rank), or mean when it has no such key.
Pooling model_pooling(const Model& model);
const char* pooling_name(Pooling p);

// llama.cpp's embd_normalize: -1 none, 0 the largest magnitude scaled to
// 32760 (int16's range), 1 taxicab, 2 Euclidean (the default), p > 2 the
// p-norm. A zero vector stays zero.
std::vector<float> normalize_embedding(std::span<const double> v, int mode);

// The tokens a reranker scores for (query, document), as llama-server lays
// them out. With the model's rerank template (rerank_template(), e.g.
// Qwen3-Reranker's instruction prompt): the template with each "{query}"
// and "{document}" replaced, tokenized with special tokens parsed in the
// template's own text but never in the query's or the document's (llama-
// server parses them there too, and replaces a "{document}" inside the query). Without: [BOS] query [EOS] [SEP] document
// [EOS], each special token as the vocabulary adds it (BERT: [CLS] query
// [SEP] document).
std::vector<int32_t> rerank_tokens(const Tokenizer& tokenizer, std::string_view query,
                                   std::string_view document, std::string_view rerank_template = {});
// The model's tokenizer.chat_template.rerank, or empty.
std::string rerank_template(const Model& model);

// Cuts `ids` to at most `max` tokens, keeping a closing [SEP] / EOS (the
// tokenizer's) in last place when the input ended with one (as HF's
// truncation keeps the special tokens).
void truncate_tokens(std::vector<int32_t>& ids, size_t max, const Tokenizer& tokenizer);

class Embedder {
 public:
  // With kRank, the model's classifier head (cls / cls.output) is read here:
  // a model without one is Error(kUnsupported). Inputs of at most
  // max_tokens each (at most the training context where the model's
  // positions are learned embeddings, bert's); embed_all packs several into
  // one pass of up to max(max_tokens, batch_tokens) tokens.
  Embedder(const Model& model, Pooling pooling, int64_t max_tokens, int64_t batch_tokens = 0);
  // One vector of n_embd floats, normalized as normalize_embedding does with
  // `normalize` (default L2); with kRank the head's n_cls_out scores, as
  // they are; with kNone every token's n_embd floats, one after another,
  // each token's normalized alone. Throws Error(kInvalidArgument) for an empty input or one
  // longer than max_tokens().
  std::vector<float> embed(const std::vector<int32_t>& tokens, int normalize = 2);
  // embed() of each input, several inputs a pass (each its own sequence:
  // up to 64, and as many tokens as a pass holds), in order; `progress`
  // (nullable) hears the count done after each pass. An input that is
  // empty or too long is Error(kInvalidArgument) naming its index, before
  // anything runs. Calls from several threads without `progress` share
  // passes: a call that finds none running runs every call queued so far
  // together (an error in them fails them all).
  std::vector<std::vector<float>> embed_all(const std::vector<std::vector<int32_t>>& inputs,
                                            int normalize = 2,
                                            const std::function<void(size_t done)>& progress = {});
  int64_t max_tokens() const { return max_tokens_; }
  const Model& model() const { return model_; }
  Pooling pooling() const { return pooling_; }
  // Runs of passes made so far: one per call, or per group of calls that
  // shared them.
  int64_t runs() const { return passes_run_.load(); }

 private:
  const Model& model_;
  Pooling pooling_;
  int64_t max_tokens_;
  int64_t batch_tokens_;
  // Pooled (not normalized) states of each input, in passes on the context.
  std::vector<std::vector<double>> run_passes(const std::vector<const std::vector<int32_t>*>& inputs,
                                              const std::function<void(size_t)>& progress);

  std::mutex mutex_;  // the context and batch
  std::unique_ptr<Context> context_;
  Batch batch_;
  std::atomic<int64_t> passes_run_{0};
  // Calls waiting to share the next run of passes.
  struct Job {
    const std::vector<const std::vector<int32_t>*>* inputs;
    std::vector<std::vector<double>> pooled;
    std::exception_ptr error;
    bool done;
  };
  std::mutex queue_mutex_;
  std::condition_variable done_cv_;
  std::deque<Job*> queue_;
  bool leading_ = false;
  // kRank: the head's scores of a pooled state.
  std::vector<float> score(std::vector<double> x) const;
  // kRank: the classifier head as f32, row-major [out][in]; empty when absent.
  std::vector<float> cls_, cls_b_, cls_out_, cls_out_b_;
};

}  // namespace tessera::serving
