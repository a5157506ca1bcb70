#include "tessera/serving/embedder.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/core/dtype.h"
#include "tessera/gguf/gguf.h"

namespace tessera::serving {

Pooling pooling_from_name(const std::string& name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "last") return Pooling::kLast;
  if (name == "cls") return Pooling::kCls;
  if (name == "rank") return Pooling::kRank;
  if (name == "none") return Pooling::kNone;
  fail(ErrorCategory::kInvalidArgument, "[--pooling] found '{}', expected mean, last, cls, rank or none", name);
}

Pooling model_pooling(const Model& model) {
  const std::string key = fmt::format("{}.pooling_type", model.hparams().architecture);
  if (const gguf::Value* v = model.file().find(key); v != nullptr && v->is_integer()) {
    switch (v->u32()) {
      case 0: return Pooling::kNone;
      case 2: return Pooling::kCls;
      case 3: return Pooling::kLast;
      case 4: return Pooling::kRank;
      default: return Pooling::kMean;
    }
  }
  return Pooling::kMean;
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kMean: return "mean";
    case Pooling::kLast: return "last";
    case Pooling::kCls: return "cls";
    case Pooling::kRank: return "rank";
    case Pooling::kNone: return "none";
  }
  return "?";
}

namespace {

// A weight as f32 in its GGUF order (rows of ne[0]), read back from the
// buffer it was placed in; empty when the model has none.
std::vector<float> host_f32(const Tensor* t) {
  if (t == nullptr) return {};
  std::vector<uint8_t> bytes(t->n_bytes());
  t->buffer->get_tensor(*t, bytes.data());
  std::vector<float> out(static_cast<size_t>(t->n_elements()));
  const int64_t rows = t->n_elements() / t->ne[0];
  const size_t row_bytes = bytes.size() / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t->type, bytes.data() + static_cast<size_t>(r) * row_bytes,
                   out.data() + r * t->ne[0], t->ne[0]);
  }
  return out;
}

// y = W x (+ b), W row-major [rows][cols] as GGUF stores [cols, rows].
std::vector<double> affine(const std::vector<float>& w, const std::vector<float>& b,
                           const std::vector<double>& x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    double s = b.empty() ? 0.0 : b[r];
    for (size_t c = 0; c < cols; ++c) s += double(w[r * cols + c]) * x[c];
    y[r] = s;
  }
  return y;
}

}  // namespace

std::string rerank_template(const Model& model) {
  const gguf::Value* v = model.file().find("tokenizer.chat_template.rerank");
  return v != nullptr && v->type() == gguf::ValueType::kString ? std::string(v->string()) : std::string();
}

std::vector<int32_t> rerank_tokens(const Tokenizer& tokenizer, std::string_view query,
                                   std::string_view document, std::string_view rerank_template) {
  if (!rerank_template.empty()) {
    // Each "{query}" and "{document}" of the template replaced (a query that
    // itself holds "{document}" keeps it: llama-server would replace that
    // too); the replaced ranges stay plain text.
    std::string prompt;
    std::vector<TextRange> plain;
    for (size_t pos = 0;;) {
      const size_t q = rerank_template.find("{query}", pos), d = rerank_template.find("{document}", pos);
      const size_t hit = std::min(q, d);
      prompt.append(rerank_template.substr(pos, hit == std::string_view::npos ? hit : hit - pos));
      if (hit == std::string_view::npos) break;
      const std::string_view value = hit == q ? query : document;
      plain.push_back({prompt.size(), value.size()});
      prompt.append(value);
      pos = hit + (hit == q ? std::string_view("{query}").size() : std::string_view("{document}").size());
    }
    return tokenizer.tokenize(prompt, /*add_special=*/false, /*parse_special=*/true, plain);
  }
  const TokenId eos = tokenizer.eos() != kNoToken ? tokenizer.eos() : tokenizer.sep();
  std::vector<int32_t> out;
  if (tokenizer.add_bos() && tokenizer.bos() != kNoToken) out.push_back(tokenizer.bos());
  const std::vector<TokenId> q = tokenizer.tokenize(query, false), d = tokenizer.tokenize(document, false);
  out.insert(out.end(), q.begin(), q.end());
  if (tokenizer.add_eos() && eos != kNoToken) out.push_back(eos);
  if (tokenizer.add_sep() && tokenizer.sep() != kNoToken) out.push_back(tokenizer.sep());
  out.insert(out.end(), d.begin(), d.end());
  if (tokenizer.add_eos() && eos != kNoToken) out.push_back(eos);
  return out;
}

void truncate_tokens(std::vector<int32_t>& ids, size_t max, const Tokenizer& tokenizer) {
  if (ids.size() <= max || max == 0) return;
  const int32_t last = ids.back();
  const bool closing = (last == tokenizer.sep() || last == tokenizer.eos()) && last != kNoToken;
  ids.resize(max);
  if (closing) ids.back() = last;
}

Embedder::Embedder(const Model& model, Pooling pooling, int64_t max_tokens, int64_t batch_tokens)
    : model_(model), pooling_(pooling),
      // Learned absolute positions (bert) end at the training context.
      max_tokens_(model.weights().position_embd != nullptr ? std::min(max_tokens, model.hparams().n_ctx_train)
                                                           : max_tokens),
      batch_tokens_(std::max(max_tokens_, batch_tokens)) {
  if (pooling_ != Pooling::kRank) return;
  const Weights& w = model.weights();
  if (w.cls == nullptr && w.cls_out == nullptr) {
    fail(ErrorCategory::kUnsupported,
         "[rerank] the model ({}) has no classifier head (cls.weight / cls.output.weight): it is "
         "not a reranker",
         model.hparams().architecture);
  }
  cls_ = host_f32(w.cls);
  cls_b_ = host_f32(w.cls_b);
  cls_out_ = host_f32(w.cls_out);
  cls_out_b_ = host_f32(w.cls_out_b);
}

std::vector<float> Embedder::embed(const std::vector<int32_t>& tokens, int normalize) {
  return embed_all({tokens}, normalize).at(0);
}

std::vector<std::vector<float>> Embedder::embed_all(const std::vector<std::vector<int32_t>>& inputs,
                                                    int normalize,
                                                    const std::function<void(size_t)>& progress) {
  // The pipeline's messages go one at a time, from the thread that decodes;
  // embeddings come from the HTTP threads.
  if (model_.is_stage()) {
    fail(ErrorCategory::kUnsupported,
         "embeddings are not available while the model is split across MPI ranks (this rank "
         "holds layers [{}, {}) of {})",
         model_.layer_range().begin, model_.layer_range().end, model_.hparams().n_layer);
  }
  const auto where = [&](size_t i) {
    return inputs.size() == 1 ? std::string() : fmt::format(" {}", i);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    if (n == 0) fail(ErrorCategory::kInvalidArgument, "an embeddings input{} has no tokens", where(i));
    if (n > max_tokens_) {
      fail(ErrorCategory::kInvalidArgument, "an embeddings input{} has {} tokens, at most {} fit",
           where(i), n, max_tokens_);
    }
  }
  std::vector<const std::vector<int32_t>*> mine;
  for (const auto& in : inputs) mine.push_back(&in);
  std::vector<std::vector<double>> pooled;
  if (progress) {
    // One caller's long list (the CLI): its passes alone, progress after each.
    pooled = run_passes(mine, progress);
  } else {
    // Requests from several threads (the server's clients) share passes:
    // whichever finds no pass running takes every request queued so far.
    Job job{&mine, {}, nullptr, false};
    std::unique_lock lk(queue_mutex_);
    queue_.push_back(&job);
    while (!job.done) {
      if (leading_) {
        done_cv_.wait(lk);
        continue;
      }
      leading_ = true;
      std::vector<Job*> jobs(queue_.begin(), queue_.end());
      queue_.clear();
      lk.unlock();
      std::vector<const std::vector<int32_t>*> all;
      for (const Job* q : jobs) all.insert(all.end(), q->inputs->begin(), q->inputs->end());
      std::vector<std::vector<double>> results;
      std::exception_ptr error;
      try {
        results = run_passes(all, {});
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      size_t at = 0;
      for (Job* q : jobs) {
        q->error = error;
        if (!error) {
          for (size_t k = 0; k < q->inputs->size(); ++k) q->pooled.push_back(std::move(results[at++]));
        }
        q->done = true;
      }
      leading_ = false;
      done_cv_.notify_all();
    }
    lk.unlock();
    if (job.error) std::rethrow_exception(job.error);
    pooled = std::move(job.pooled);
  }
  std::vector<std::vector<float>> out;
  out.reserve(pooled.size());
  for (size_t i = 0; i < pooled.size(); ++i) {
    std::vector<double>& v = pooled[i];
    if (pooling_ == Pooling::kRank) {
      out.push_back(score(std::move(v)));
    } else if (pooling_ == Pooling::kNone) {  // each token's row alone
      const size_t width = v.size() / inputs[i].size();
      std::vector<float> rows;
      rows.reserve(v.size());
      for (size_t at = 0; at < v.size(); at += width) {
        const std::vector<float> row = normalize_embedding(std::span(v).subspan(at, width), normalize);
        rows.insert(rows.end(), row.begin(), row.end());
      }
      out.push_back(std::move(rows));
    } else {
      out.push_back(normalize_embedding(v, normalize));
    }
  }
  return out;
}

std::vector<std::vector<double>> Embedder::run_passes(const std::vector<const std::vector<int32_t>*>& inputs,
                                                      const std::function<void(size_t)>& progress) {
  std::lock_guard lock(mutex_);
  if (!context_) {
    context_ = std::make_unique<Context>(
        model_, ContextOptions{.n_ctx = batch_tokens_, .n_batch = batch_tokens_, .embeddings = true});
  }
  ++passes_run_;  // (counted per call: one per batch of requests)
  const auto width = static_cast<size_t>(context_->output_width());
  std::vector<std::vector<double>> out;
  out.reserve(inputs.size());
  // A decoder's reranker (Qwen3-Reranker) reads its last token, as llama.cpp does.
  const bool rank_last = pooling_ == Pooling::kRank && !model_.is_encoder();
  const bool first = pooling_ == Pooling::kCls || (pooling_ == Pooling::kRank && !rank_last);
  const bool last = pooling_ == Pooling::kLast || rank_last;
  for (size_t begin = 0; begin < inputs.size();) {
    // As many inputs as one pass holds, each its own sequence.
    size_t end = begin;
    int64_t tokens = 0;
    while (end < inputs.size() && end - begin < static_cast<size_t>(kMaxSequences) &&
           tokens + static_cast<int64_t>(inputs[end]->size()) <= batch_tokens_) {
      tokens += static_cast<int64_t>(inputs[end]->size());
      ++end;
    }
    context_->cache().clear();
    batch_.clear();
    for (size_t k = begin; k < end; ++k) {
      const std::vector<int32_t>& in = *inputs[k];
      const auto n = static_cast<int64_t>(in.size());
      const int seq = static_cast<int>(k - begin);
      for (int64_t i = 0; i < n; ++i) {
        const bool want = pooling_ == Pooling::kMean || pooling_ == Pooling::kNone || (last && i + 1 == n) ||
                          (first && i == 0);
        batch_.add(in[static_cast<size_t>(i)], static_cast<int32_t>(i), {seq}, want);
      }
    }
    context_->decode(batch_);
    size_t at = 0;  // the batch's token index
    for (size_t k = begin; k < end; ++k) {
      if (pooling_ == Pooling::kNone) {  // every row, as it is
        std::vector<double> rows;
        rows.reserve(inputs[k]->size() * width);
        for (size_t i = 0; i < inputs[k]->size(); ++i, ++at) {
          const std::span<const float> h = context_->logits(at);
          rows.insert(rows.end(), h.begin(), h.begin() + static_cast<ptrdiff_t>(width));
        }
        out.push_back(std::move(rows));
        continue;
      }
      std::vector<double> sum(width, 0.0);
      int64_t rows = 0;
      for (size_t i = 0; i < inputs[k]->size(); ++i, ++at) {
        if (batch_.want_logits[at] == 0) continue;
        const std::span<const float> h = context_->logits(at);
        for (size_t j = 0; j < width; ++j) sum[j] += h[j];
        ++rows;
      }
      for (double& v : sum) v /= double(rows);
      out.push_back(std::move(sum));
    }
    begin = end;
    if (progress) progress(begin);
  }
  return out;
}

std::vector<float> Embedder::score(std::vector<double> x) const {
  // The classifier head on the [CLS] state, or a decoder's last (llama.cpp's rank pooling).
  if (!cls_.empty()) {
    x = affine(cls_, cls_b_, x);
    for (double& v : x) v = std::tanh(v);
  }
  if (!cls_out_.empty()) x = affine(cls_out_, cls_out_b_, x);
  if (!model_.is_encoder()) {  // a decoder's labels' logits: their softmax, as llama.cpp gives
    const double top = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (double& v : x) sum += (v = std::exp(v - top));
    for (double& v : x) v /= sum;
  }
  return std::vector<float>(x.begin(), x.end());
}

std::vector<float> normalize_embedding(std::span<const double> v, int mode) {
  double norm = 1.0;
  if (mode == 0) {  // the largest magnitude to 32760, as int16 would hold it
    double max_abs = 0;
    for (double x : v) max_abs = std::max(max_abs, std::abs(x));
    norm = max_abs / 32760.0;
  } else if (mode > 0) {  // the p-norm: taxicab (1), Euclidean (2), ...
    double sum = 0;
    for (double x : v) sum += mode == 2 ? x * x : std::pow(std::abs(x), mode);
    norm = mode == 1 ? sum : mode == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / mode);
  }
  std::vector<float> out(v.size());
  for (size_t j = 0; j < v.size(); ++j) out[j] = norm > 0 ? static_cast<float>(v[j] / norm) : 0.0f;
  return out;
}

}  // namespace tessera::serving
