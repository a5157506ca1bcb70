#include <algorithm>
#include <cstring>
#include <limits>

#include "tessera/engine.h"
#include "tessera/error.h"

namespace tessera {
namespace {

constexpr int64_t kDefaultMaxContext = 4096;

// K and V caches for every layer on that layer's device, zeroed.
void allocate_cache(KvCache& cache, const Model& model, int64_t n_ctx) {
  const LlamaHparams& hp = model.hparams();
  cache.n_ctx = n_ctx;
  std::vector<std::pair<Tensor*, Device*>> plan;
  for (size_t il = 0; il < model.layers().size(); ++il) {
    for (auto* list : {&cache.k, &cache.v}) {
      Tensor* t = cache.arena.new_tensor(DType::kF16, {hp.head_dim, n_ctx, hp.n_head_kv},
                                         fmt::format("cache_{}_{}", list == &cache.k ? 'k' : 'v', il));
      list->push_back(t);
      plan.emplace_back(t, model.layers()[il].device);
    }
  }
  for (Device* d : model.devices()) {
    BufferType& type = d->buffer_type();
    size_t size = 0;
    for (auto& [t, dev] : plan) {
      if (dev == d) size += (type.alloc_size(*t) + type.alignment() - 1) / type.alignment() * type.alignment();
    }
    if (size == 0) continue;
    auto buffer = type.allocate(size);
    buffer->clear(0);
    size_t offset = 0;
    for (auto& [t, dev] : plan) {
      if (dev != d) continue;
      buffer->place(*t, offset);
      offset += (type.alloc_size(*t) + type.alignment() - 1) / type.alignment() * type.alignment();
    }
    cache.buffers.push_back(std::move(buffer));
  }
}

}  // namespace

Session::Session(const Model& model, const SessionOptions& options)
    : model_(model), n_batch_(options.n_batch) {
  const LlamaHparams& hp = model.hparams();
  int64_t n_ctx = options.n_ctx;
  if (n_ctx == 0) n_ctx = std::min(hp.n_ctx_train, kDefaultMaxContext);
  if (n_ctx < 1 || n_ctx > (int64_t{1} << 24)) {
    fail(ErrorCategory::kInvalidArgument, "[session] context size {}, expected 1 to {}", n_ctx,
         int64_t{1} << 24);
  }
  if (n_batch_ < 1) {
    fail(ErrorCategory::kInvalidArgument, "[session] batch size {}, expected >= 1", n_batch_);
  }
  allocate_cache(cache_, model, n_ctx);
  scheduler_ = std::make_unique<Scheduler>(model.devices());
}

Session::~Session() = default;

std::span<const float> Session::decode(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorCategory::kInvalidArgument, "[session] decode of no tokens");
  if (n_past_ + n > cache_.n_ctx) {
    fail(ErrorCategory::kInvalidArgument,
         "[session] context full: {} tokens in the cache plus {} new exceed the context size {}",
         n_past_, n, cache_.n_ctx);
  }
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      fail(ErrorCategory::kInvalidArgument, "[session] token id {} at {}, expected 0 to {}",
           tokens[i], i, n_vocab - 1);
    }
  }
  logits_.resize(static_cast<size_t>((all_logits ? n : 1) * n_vocab));
  // On failure the cache holds a partial batch: forget the whole call.
  const int64_t n_past_before = n_past_;
  struct Restore {
    int64_t& n_past;
    int64_t before;
    bool done = false;
    ~Restore() {
      if (!done) n_past = before;
    }
  } restore{n_past_, n_past_before};
  for (int64_t start = 0; start < n; start += n_batch_) {
    const int64_t count = std::min(n_batch_, n - start);
    const bool last = start + count == n;
    float* out = all_logits ? logits_.data() + start * n_vocab : (last ? logits_.data() : nullptr);
    run_batch(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(count)),
              all_logits, out);
  }
  restore.done = true;
  return logits_;
}

void Session::run_batch(std::span<const int32_t> tokens, bool all_logits, float* out) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  Graph g;
  LlamaInputs in{};
  // Logits for every token only when asked; otherwise just the last one.
  Tensor* logits = build_llama(g, model_, cache_, n_past_, n, all_logits, &in);
  scheduler_->allocate(g);

  in.tokens->buffer->set_tensor(*in.tokens, tokens.data());
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(n_past_ + i);
  in.positions->buffer->set_tensor(*in.positions, pos.data());
  // Causal mask: token i (at n_past + i) sees cache positions 0..n_past + i.
  const int64_t n_kv = n_past_ + n;
  std::vector<float> mask(static_cast<size_t>(n_kv * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n_kv; ++j) {
      mask[i * n_kv + j] = j <= n_past_ + i ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }
  in.mask->buffer->set_tensor(*in.mask, mask.data());

  scheduler_->compute();
  if (out != nullptr) logits->buffer->get_tensor(*logits, out);
  n_past_ += n;
}

}  // namespace tessera
