// Context: batches over the shared KV cache with one plan per graph shape.
//
// A pass of n tokens becomes a graph of bucket(n) tokens (the rest padding:
// token 0 at position 0, written to the cache's spare row, seeing every row
// so that it stays finite), reading the first round_up(used cells, 256) rows
// of the cache, with logits for bucket(wanted) rows. Plans are kept per
// (tokens, rows, logits) shape, least recently used dropped past kMaxPlans.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/engine/engine.h"

namespace tessera {
namespace {

constexpr int64_t kDefaultMaxContext = 4096;
constexpr int64_t kKvBucket = 256;
constexpr size_t kMaxPlans = 16;
constexpr double kBufferGrowth = 1.25;

constexpr int64_t kMicroBatches = 4;  // per rank of a pipeline
constexpr int64_t kMinMicroBatch = 32;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

double us_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Token (and logits) counts: exact up to 8, then multiples of 8.
int64_t token_bucket(int64_t n) { return n <= 8 ? n : round_up(n, 8); }

std::vector<Device*> layer_devices(const Model& model) {
  std::vector<Device*> out;
  for (const LayerWeights& l : model.layers()) out.push_back(l.device);
  return out;
}

}  // namespace

struct Context::Plan {
  int64_t n_tokens = 0, n_kv = 0, n_out = 0;
  uint64_t last_used = 0;
  Graph graph;
  GraphInputs in;
  Tensor* logits = nullptr;
  std::unique_ptr<Scheduler::Plan> sched;
};

Context::Context(const Model& model, const ContextOptions& options)
    : model_(model), n_batch_(options.n_batch), embeddings_(options.embeddings),
      pipeline_(options.pipeline) {
  const Hparams& hp = model.hparams();
  if (model.is_stage() && pipeline_ == nullptr) {
    fail(ErrorCategory::kInvalidArgument,
         "[context] the model holds layers [{}, {}) of {}: a stage needs its pipeline "
         "(ContextOptions::pipeline)",
         model.layer_range().begin, model.layer_range().end, hp.n_layer);
  }
  if (pipeline_ != nullptr && pipeline_->range() != model.layer_range()) {
    fail(ErrorCategory::kInvalidArgument,
         "[context] pipeline rank {} holds layers [{}, {}), the model [{}, {})", pipeline_->rank(),
         pipeline_->range().begin, pipeline_->range().end, model.layer_range().begin,
         model.layer_range().end);
  }
  int64_t n_ctx = options.n_ctx;
  if (n_ctx == 0) n_ctx = std::min(hp.n_ctx_train, kDefaultMaxContext);
  if (n_ctx < 1 || n_ctx > (int64_t{1} << 24)) {
    fail(ErrorCategory::kInvalidArgument, "[context] context size {}, expected 1 to {}", n_ctx,
         int64_t{1} << 24);
  }
  if (n_batch_ < 1) {
    fail(ErrorCategory::kInvalidArgument, "[context] batch size {}, expected >= 1", n_batch_);
  }
  const std::vector<Device*> devices = layer_devices(model);
  cache_ = std::make_unique<KvCache>(
      KvCacheOptions{.n_ctx = n_ctx, .type_k = options.type_k, .type_v = options.type_v},
      hp.n_embd_kv(), hp.head_dim, devices);
  scheduler_ = std::make_unique<Scheduler>(model.devices());
  scheduler_->set_growth(kBufferGrowth);
  if (Pipeline* pipeline = front_pipeline()) {
    ContextOptions resolved = options;
    resolved.n_ctx = n_ctx;
    pipeline_context_ = pipeline->open(resolved);
  }
}

Context::~Context() {
  if (Pipeline* pipeline = front_pipeline(); pipeline != nullptr && pipeline_context_ != 0) {
    // Every answer in flight is read before the context goes.
    while (!flights_.empty()) {
      try {
        collect();
      } catch (const std::exception&) {
        // Its error was the batch's to report; the context is going.
      }
    }
    pipeline->close(pipeline_context_);
  }
}

// The pipeline whose front this context is (rank 0 of a split model), else null.
size_t Context::in_flight() const {
  return static_cast<size_t>(std::count_if(flights_.begin(), flights_.end(),
                                           [](const Flight& f) { return !f.ghost; }));
}

int Context::pipeline_depth() const {
  const Pipeline* p = front_pipeline();
  return p == nullptr ? 1 : p->size();
}

Pipeline* Context::front_pipeline() const {
  Pipeline* p = pipeline_;
  return p != nullptr && p->is_front() && p->size() > 1 ? p : nullptr;
}

std::string Context::describe_plan() const {
  return last_plan_ == nullptr ? std::string() : scheduler_->describe(*last_plan_->sched);
}

std::span<const float> Context::logits(size_t i) const {
  if (i >= logit_row_.size() || logit_row_[i] < 0) {
    fail(ErrorCategory::kInvalidArgument, "[context] token {} of the last batch has no logits", i);
  }
  const auto w = static_cast<size_t>(output_width());
  return std::span<const float>(logits_).subspan(static_cast<size_t>(logit_row_[i]) * w, w);
}

Context::Plan& Context::plan_for(int64_t n_tokens, int64_t n_kv, int64_t n_out) {
  clock_ += 1;
  for (auto& p : plans_) {
    if (p->n_tokens == n_tokens && p->n_kv == n_kv && p->n_out == n_out) {
      p->last_used = clock_;
      return *p;
    }
  }
  if (plans_.size() >= kMaxPlans) {
    auto oldest = std::min_element(plans_.begin(), plans_.end(), [](auto& a, auto& b) {
      return a->last_used < b->last_used;
    });
    plans_.erase(oldest);
  }
  auto p = std::make_unique<Plan>();
  p->n_tokens = n_tokens;
  p->n_kv = n_kv;
  p->n_out = n_out;
  p->last_used = clock_;
  Graph& g = p->graph;
  GraphInputs& in = p->in;
  in.n_tokens = n_tokens;
  in.n_kv = n_kv;
  in.n_out = n_out;
  in.embeddings = embeddings_;
  in.tokens = g.new_tensor(DType::kI32, {n_tokens}, "tokens");
  if (!model_.holds_input()) {
    in.hidden = g.new_tensor(DType::kF32, {model_.hparams().n_embd, n_tokens}, "hidden_in");
    in.hidden->flags |= kFlagInput;
  }
  in.positions = g.new_tensor(DType::kI32, {n_tokens}, "positions");
  in.kv_idx = g.new_tensor(DType::kI64, {n_tokens}, "kv_idx");
  in.mask = g.new_tensor(DType::kF32, {n_kv, n_tokens}, "mask");
  in.out_ids = g.new_tensor(DType::kI32, {n_out}, "out_ids");
  for (Tensor* t : {in.tokens, in.positions, in.kv_idx, in.mask, in.out_ids}) t->flags |= kFlagInput;
  if (model_.hparams().has_swa()) {
    in.mask_swa = g.new_tensor(DType::kF32, {n_kv, n_tokens}, "mask_swa");
    in.mask_swa->flags |= kFlagInput;
  }
  in.n_ctx = cache_->size();
  in.cache_k = cache_->k();
  in.cache_v = cache_->v();
  p->logits = model_.build_graph(g, in);
  p->sched = scheduler_->plan(g);
  plans_.push_back(std::move(p));
  return *plans_.back();
}

void Context::decode(const Batch& batch) {
  drop_ghosts();
  if (!flights_.empty()) {
    fail(ErrorCategory::kInvalidArgument,
         "[context] decode with {} batches in flight: collect them first", flights_.size());
  }
  try {
    submit(batch);
  } catch (...) {
    logit_row_.assign(batch.size(), -1);
    throw;
  }
  collect();
}

// Tokens per pass of an n-token batch: n_batch; on the front of a pipeline
// of S ranks, kMicroBatches * S micro-batches (at least kMinMicroBatch
// tokens each), so that every rank has work: with M passes in flight the
// ranks are busy M / (M + S - 1) of the time.
int64_t Context::pass_size(size_t n) const {
  const Pipeline* pipeline = front_pipeline();
  if (pipeline == nullptr) return n_batch_;
  const int64_t parts = kMicroBatches * pipeline->size();
  const int64_t micro = std::max(kMinMicroBatch, (static_cast<int64_t>(n) + parts - 1) / parts);
  return std::min(n_batch_, micro);
}

void Context::submit(const Batch& batch) {
  const size_t n = batch.size();
  if (n == 0) fail(ErrorCategory::kInvalidArgument, "[context] decode of an empty batch");
  if (const Pipeline* p = pipeline_; p != nullptr && !p->is_front()) {
    fail(ErrorCategory::kInvalidArgument,
         "[context] decode on pipeline rank {}: only rank 0 runs batches", p->rank());
  }
  TESSERA_CHECK(batch.pos.size() == n && batch.seqs.size() == n && batch.want_logits.size() == n,
                "batch columns differ in length");
  const int64_t nv = n_vocab();
  size_t n_logits = 0;
  for (size_t i = 0; i < n; ++i) {
    if (batch.token[i] < 0 || batch.token[i] >= nv) {
      fail(ErrorCategory::kInvalidArgument, "[context] token id {} at {}, expected 0 to {}",
           batch.token[i], i, nv - 1);
    }
    if (batch.seqs[i] == 0) {
      fail(ErrorCategory::kInvalidArgument, "[context] token {} belongs to no sequence", i);
    }
    if (batch.pos[i] < 0) {
      fail(ErrorCategory::kInvalidArgument, "[context] token {} at position {}, expected >= 0", i,
           batch.pos[i]);
    }
    n_logits += batch.want_logits[i] != 0 ? 1 : 0;
  }
  if (cache_->has_shift()) drop_ghosts();
  if (cache_->has_shift() && !flights_.empty()) {
    fail(ErrorCategory::kInvalidArgument,
         "[context] a K shift (seq_add) waits for the {} batches in flight: collect them first",
         flights_.size());
  }
  if (cache_->has_shift()) apply_shift();

  Flight f;
  if (!spare_.empty()) {
    f = std::move(spare_.back());
    spare_.pop_back();
  }
  f.logits.resize(n_logits * static_cast<size_t>(output_width()));
  f.logit_row.assign(n, -1);
  f.passes.clear();
  f.ghost = false;
  f.error = nullptr;
  int32_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    if (batch.want_logits[i] != 0) f.logit_row[i] = row++;
  }
  // Every token's cell first, so that one check says whether the batch
  // fits; each pass's mask sees the cells of the passes before it (later
  // positions are masked anyway). On failure, the cells are released.
  f.cells.resize(n);
  cache_->find_slot(batch, 0, n, f.cells);
  try {
    size_t out_row = 0;
    const auto step = static_cast<size_t>(pass_size(n));
    if (!model_.hparams().causal && step < n) {
      // Every token of an encoder's batch attends to every other: one pass.
      fail(ErrorCategory::kInvalidArgument,
           "[context] {} attends in both directions, so a batch must fit one pass: {} tokens, "
           "at most {}",
           model_.hparams().architecture, n, step);
    }
    for (size_t begin = 0; begin < n; begin += step) {
      const size_t end = std::min(n, begin + step);
      run_pass(batch, begin, end, out_row, f);
      for (size_t i = begin; i < end; ++i) out_row += batch.want_logits[i] != 0 ? 1 : 0;
    }
  } catch (...) {
    cache_->release(f.cells);
    if (!f.passes.empty()) {
      // Part of the batch is on its way: its answers come before the next
      // batch's, and collect() drops them.
      f.ghost = true;
      flights_.push_back(std::move(f));
    }
    throw;
  }
  flights_.push_back(std::move(f));
}

// The answers to every pass of a flight, in order; the first error once all
// of them are in.
std::exception_ptr Context::answer(Flight& f) {
  Pipeline* pipeline = front_pipeline();
  std::exception_ptr error;
  const auto w = static_cast<size_t>(output_width());
  for (const auto& [out_row, n_out] : f.passes) {
    try {
      pipeline->receive_output(pipeline_context_, std::span(f.logits).subspan(out_row * w, n_out * w));
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  return error;
}

// Batches whose submit() failed after part of them was sent: their answers
// come before the next batch's and are dropped.
void Context::drop_ghosts() {
  while (!flights_.empty() && flights_.front().ghost) {
    answer(flights_.front());
    spare_.push_back(std::move(flights_.front()));
    flights_.erase(flights_.begin());
  }
}

void Context::collect() {
  const auto t0 = std::chrono::steady_clock::now();
  drop_ghosts();
  if (flights_.empty()) {
    fail(ErrorCategory::kInvalidArgument, "[context] collect with no batch in flight");
  }
  Flight f = std::move(flights_.front());
  flights_.erase(flights_.begin());
  std::exception_ptr error = f.passes.empty() ? nullptr : answer(f);
  if (!error && f.error) error = f.error;
  if (error) {
    // The batches behind this one were built on its cells (a sequence's
    // next tokens see its rows), which the failing rank never wrote: they
    // fail too, each at its own collect.
    for (Flight& later : flights_) {
      if (!later.error) later.error = error;
    }
    cache_->release(f.cells);
    logits_.clear();
    logit_row_.assign(f.logit_row.size(), -1);
    spare_.push_back(std::move(f));
    std::rethrow_exception(error);
  }
  std::swap(logits_, f.logits);
  std::swap(logit_row_, f.logit_row);
  spare_.push_back(std::move(f));
  timings_.host_us += us_between(t0, std::chrono::steady_clock::now());
}

void Context::run_pass(const Batch& batch, size_t begin, size_t end, size_t out_row, Flight& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto n = static_cast<int64_t>(end - begin);
  fill_inputs(batch, begin, end, std::span<const int64_t>(f.cells).subspan(begin, end - begin));
  Plan& plan = prepare(pass_, {});
  last_plan_ = &plan;

  const auto t1 = std::chrono::steady_clock::now();
  scheduler_->compute(*plan.sched);
  const auto t2 = std::chrono::steady_clock::now();
  if (Pipeline* pipeline = front_pipeline()) {
    // This rank's layers are done: the rest of the model is on the others,
    // and the answer is read by collect().
    hidden_.resize(static_cast<size_t>(n * model_.hparams().n_embd));
    read_output(plan, pass_, hidden_.data());
    f.passes.emplace_back(out_row, static_cast<size_t>(pass_.n_out));
    try {
      pipeline->send_pass(pipeline_context_, pass_, hidden_);
    } catch (...) {
      f.passes.pop_back();  // not sent: no answer will come
      throw;
    }
  } else if (pass_.n_out > 0) {
    read_output(plan, pass_, f.logits.data() + out_row * static_cast<size_t>(output_width()));
  }
  const auto t3 = std::chrono::steady_clock::now();
  timings_.passes += 1;
  timings_.compute_us += us_between(t1, t2);
  timings_.host_us += us_between(t0, t1) + us_between(t2, t3);
}

// The host side of a pass's inputs for batch[begin, end), in the cells just claimed.
void Context::fill_inputs(const Batch& batch, size_t begin, size_t end,
                          std::span<const int64_t> cells) {
  PassInputs& p = pass_;
  p.n = static_cast<int64_t>(end - begin);
  p.n_out = 0;
  for (size_t i = begin; i < end; ++i) p.n_out += batch.want_logits[i] != 0 ? 1 : 0;
  p.n_tokens = token_bucket(p.n);
  p.n_kv = std::min(round_up(std::max<int64_t>(cache_->used_end(), 1), kKvBucket), cache_->rows());
  p.n_out_rows = std::max<int64_t>(token_bucket(p.n_out), 1);
  const auto nt = static_cast<size_t>(p.n_tokens);
  // Padding tokens: token 0 at position 0, written to the spare row.
  p.tokens.assign(nt, 0);
  std::copy(batch.token.begin() + begin, batch.token.begin() + end, p.tokens.begin());
  p.positions.assign(nt, 0);
  std::copy(batch.pos.begin() + begin, batch.pos.begin() + end, p.positions.begin());
  p.kv_idx.assign(nt, cache_->trash_row());
  std::copy(cells.begin(), cells.end(), p.kv_idx.begin());
  p.mask.resize(static_cast<size_t>(p.n_kv) * nt);
  const Hparams& hp = model_.hparams();
  KvCache::MaskRule rule{.causal = hp.causal, .alibi = hp.max_alibi_bias > 0.0f};
  cache_->build_mask(batch, begin, end, p.n_kv, p.n_tokens, p.mask.data(), rule);
  if (hp.has_swa()) {
    p.mask_swa.resize(p.mask.size());
    rule.n_swa = hp.n_swa;
    rule.swa_symmetric = hp.swa_symmetric;
    cache_->build_mask(batch, begin, end, p.n_kv, p.n_tokens, p.mask_swa.data(), rule);
  } else {
    p.mask_swa.clear();
  }
  p.out_ids.assign(static_cast<size_t>(p.n_out_rows), 0);
  int32_t k = 0;
  for (size_t i = begin; i < end; ++i) {
    if (batch.want_logits[i] != 0) p.out_ids[static_cast<size_t>(k++)] = static_cast<int32_t>(i - begin);
  }
}

// The plan of p's shape with its inputs set: p's arrays and, on a stage
// after the first, `hidden` (p.n rows; the padding rows zero).
Context::Plan& Context::prepare(const PassInputs& p, std::span<const float> hidden) {
  Plan& plan = plan_for(p.n_tokens, p.n_kv, p.n_out_rows);
  scheduler_->place(*plan.sched);  // a newer plan may have grown the buffers
  const GraphInputs& in = plan.in;
  auto set = [](Tensor* t, const void* data) {
    if (t != nullptr && t->buffer != nullptr) t->buffer->set_tensor(*t, data);
  };
  set(in.tokens, p.tokens.data());
  set(in.positions, p.positions.data());
  set(in.kv_idx, p.kv_idx.data());
  set(in.mask, p.mask.data());
  set(in.mask_swa, p.mask_swa.data());
  set(in.out_ids, p.out_ids.data());
  if (in.hidden != nullptr && in.hidden->buffer != nullptr) {
    const auto n_embd = static_cast<size_t>(model_.hparams().n_embd);
    const size_t rows = static_cast<size_t>(p.n) * n_embd;
    TESSERA_CHECK(hidden.size() == rows, "hidden state of {} floats, expected {}", hidden.size(), rows);
    Tensor& t = *in.hidden;
    t.buffer->set_tensor(t, hidden.data(), 0, rows * sizeof(float));
    if (p.n < p.n_tokens) {
      // hidden_ is free here: only the front reads its own stage's output
      // into it, and the front's stage starts at layer 0.
      TESSERA_CHECK(hidden.data() != hidden_.data(), "the padding would overwrite the input");
      hidden_.assign(static_cast<size_t>(p.n_tokens) * n_embd - rows, 0.0f);
      t.buffer->set_tensor(t, hidden_.data(), rows * sizeof(float), hidden_.size() * sizeof(float));
    }
  }
  return plan;
}

// The rows of a computed pass that leave this stage: the hidden state of the
// p.n real tokens before the last stage, else the p.n_out rows asked.
void Context::read_output(const Plan& plan, const PassInputs& p, float* dst) {
  const int64_t rows = model_.holds_output() ? p.n_out : p.n;
  const int64_t width = model_.holds_output() ? output_width() : model_.hparams().n_embd;
  if (rows == 0) return;
  const size_t bytes = static_cast<size_t>(rows * width) * sizeof(float);
  plan.logits->buffer->get_tensor(*plan.logits, dst, 0, bytes);
}

void Context::run_stage(const PassInputs& inputs, std::span<const float> hidden,
                        std::vector<float>& out) {
  Plan& plan = prepare(inputs, hidden);
  last_plan_ = &plan;
  scheduler_->compute(*plan.sched);
  const int64_t rows = model_.holds_output() ? inputs.n_out : inputs.n;
  const int64_t width = model_.holds_output() ? output_width() : model_.hparams().n_embd;
  out.resize(static_cast<size_t>(rows * width));
  read_output(plan, inputs, out.data());
  timings_.passes += 1;
}

// Keys whose positions moved get rotated by the difference, once, before the
// next pass: a graph of its own, not kept. The shifts are cleared only once
// the rotation ran, so a failure leaves them to the next decode.
void Context::apply_shift() {
  i32_.resize(static_cast<size_t>(cache_->rows()));
  cache_->shifts(i32_);
  // The other stages first: a failure there leaves every rank's keys as they were.
  if (Pipeline* pipeline = front_pipeline()) pipeline->shift(pipeline_context_, i32_);
  rotate_keys(i32_);
  cache_->clear_shift();
}

void Context::rotate_keys(std::span<const int32_t> shifts) {
  const int64_t rows = cache_->rows();
  TESSERA_CHECK(shifts.size() == static_cast<size_t>(rows), "{} shifts for {} cache rows",
                shifts.size(), rows);
  Graph g;
  Tensor* shift = g.new_tensor(DType::kI32, {rows}, "k_shift");
  Tensor* all_rows = g.new_tensor(DType::kI32, {rows}, "k_shift_rows");
  shift->flags |= kFlagInput;
  all_rows->flags |= kFlagInput;
  model_.build_k_shift(g, cache_->k(), shift, all_rows, cache_->size());
  auto plan = scheduler_->plan(g);
  shift->buffer->set_tensor(*shift, shifts.data());
  if (all_rows->buffer != nullptr) {
    std::vector<int32_t> index(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) index[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    all_rows->buffer->set_tensor(*all_rows, index.data());
  }
  scheduler_->compute(*plan);
}

// ---- Session: sequence 0 of a context -------------------------------------------

Session::Session(const Model& model, const SessionOptions& options) : context_(model, options) {}

void Session::reset() {
  context_.cache().clear();
  n_past_ = 0;
}

std::span<const float> Session::decode(std::span<const int32_t> tokens, bool all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorCategory::kInvalidArgument, "[session] decode of no tokens");
  if (n_past_ + n > n_ctx()) {
    fail(ErrorCategory::kInvalidArgument,
         "[session] context full: {} tokens in the cache plus {} new exceed the context size {}",
         n_past_, n, n_ctx());
  }
  batch_.clear();
  batch_.add_sequence(tokens, static_cast<int32_t>(n_past_), 0, all_logits);
  context_.decode(batch_);
  n_past_ += n;
  return context_.all_logits();
}

}  // namespace tessera
