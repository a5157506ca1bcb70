// Engine: a Context runs batches of many sequences over one shared KV cache;
// a Session is one sequence over a Context, for the simple generate loop.
//
// A Context builds one graph per shape (tokens rounded up to a bucket, cache
// rows rounded up to 256, rows of logits) and keeps it with its scheduler
// plan: a decode step of a shape seen before only writes the inputs and
// replays the plan.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/engine/batch.h"
#include "tessera/engine/kv_cache.h"
#include "tessera/engine/pipeline.h"
#include "tessera/models/model.h"
#include "tessera/runtime/scheduler.h"

namespace tessera {

struct ContextOptions {
  int64_t n_ctx = 0;      // cells of the cache; 0: the model's training context, at most 4096
  int64_t n_batch = 512;  // tokens per forward pass
  DType type_k = DType::kF16;  // cache types: F16, F32, BF16, Q8_0, Q4_0, ...
  DType type_v = DType::kF16;
  // Outputs are the final hidden states (after the output norm, n_embd per
  // row) instead of logits: for embeddings.
  bool embeddings = false;
  // The pipeline a model split across processes runs on (it outlives the
  // context): required when the model is a stage, and its range must be the
  // model's. On rank 0 the context is the pipeline's front; Pipeline::serve
  // makes the workers' contexts. Null: the whole model is here.
  Pipeline* pipeline = nullptr;
};

class Context {
 public:
  explicit Context(const Model& model, const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Runs every token of `batch` (in passes of at most n_batch tokens). The
  // logits of the tokens that asked are then read with logits(i). Throws
  // Error(kInvalidArgument) for a token id out of range, a token of no
  // sequence or of a sequence id >= kMaxSequences, or a full cache (naming
  // the sequences and the cells asked); the cache is then as before the call.
  void decode(const Batch& batch);
  // decode() in two halves, for batches in flight on a pipeline: submit()
  // claims the batch's cells and runs it as far as this process goes (on
  // the front of a pipeline its own layers, the rest sent down the chain
  // without waiting); collect() waits for the oldest batch submitted and
  // makes its logits the ones logits(i) reads. Every rank runs the batches
  // in the order submitted, so a batch sees the cells of those before it.
  // The cache may change in between (seq_rm, seq_cp act on the batches
  // submitted after), but not the cells of a batch in flight. A batch
  // submit() refuses is not in flight (errors as decode's); one that fails
  // on another rank throws from its collect(), its cells released, and so
  // does every batch submitted after it (they were built on its cells).
  // Without a pipeline submit() runs the whole batch. A K shift (seq_add)
  // waits until no batch is in flight; decode() refuses while any is.
  void submit(const Batch& batch);
  void collect();
  // Batches submitted and not yet collected.
  size_t in_flight() const;
  // Ranks a batch goes through: 1, or the size of the pipeline this
  // context is the front of. Keeping that many batches in flight keeps
  // every rank busy.
  int pipeline_depth() const;
  // Logits (n_vocab floats) of token i of the last batch; it must have asked.
  // With options.embeddings: its hidden state (n_embd floats) instead.
  std::span<const float> logits(size_t i) const;
  // Logits of every token that asked, in batch order (rows of n_vocab).
  std::span<const float> all_logits() const { return logits_; }

  KvCache& cache() { return *cache_; }
  const KvCache& cache() const { return *cache_; }
  const Model& model() const { return model_; }
  int64_t n_ctx() const { return cache_->size(); }
  int64_t n_batch() const { return n_batch_; }
  int64_t n_vocab() const { return model_.hparams().n_vocab; }
  // Floats per output row: n_vocab, or n_embd with options.embeddings.
  int64_t output_width() const { return embeddings_ ? model_.hparams().n_embd : n_vocab(); }

  // ---- a model split across processes (pipeline.h) -------------------------
  // On rank 0 a context of a pipeline stage runs decode() as above: its own
  // layers, then the other ranks' through the pipeline, which returns the
  // logits. The workers' contexts (made by Pipeline::serve) run these two:
  //
  // This stage's layers on `inputs` after the previous stage's hidden state
  // (inputs.n rows of n_embd); `out` gets the next stage's hidden state
  // (inputs.n rows of n_embd) or, on the last stage, inputs.n_out rows of
  // output_width().
  void run_stage(const PassInputs& inputs, std::span<const float> hidden, std::vector<float>& out);
  // Rotates every cached key row by shifts[row] (rows() entries), as the K
  // shift after seq_add does.
  void rotate_keys(std::span<const int32_t> shifts);

  // Graphs built and planned so far (one per shape, plus K shifts): stays
  // put in a steady decode loop.
  uint64_t plans_built() const { return scheduler_->plans_made(); }
  // The splits of the most recent pass's plan (TESSERA_SCHED_DEBUG prints them too).
  std::string describe_plan() const;

  // Where decode time went since the context was made: in the devices'
  // compute (scheduler replay, copies included) and on the host around it
  // (slot search, plan lookup or build, inputs, logits read back).
  struct Timings {
    uint64_t passes = 0;
    double compute_us = 0;
    double host_us = 0;
  };
  const Timings& timings() const { return timings_; }

 private:
  struct Plan;
  Plan& plan_for(int64_t n_tokens, int64_t n_kv, int64_t n_out);
  // A batch submitted: its logits (filled as the answers come), its cells,
  // and its passes still to be answered (output row, rows asked).
  struct Flight {
    std::vector<float> logits;
    std::vector<int32_t> logit_row;  // per batch token: row in logits, or -1
    std::vector<int64_t> cells;
    std::vector<std::pair<size_t, size_t>> passes;
    bool ghost = false;  // submit() failed after sending part of it: answers to drop
    std::exception_ptr error;  // a batch before it failed: it fails too
  };
  std::exception_ptr answer(Flight& f);
  void drop_ghosts();
  int64_t pass_size(size_t n) const;
  void run_pass(const Batch& batch, size_t begin, size_t end, size_t out_row, Flight& f);
  void fill_inputs(const Batch& batch, size_t begin, size_t end, std::span<const int64_t> cells);
  Plan& prepare(const PassInputs& p, std::span<const float> hidden);
  void read_output(const Plan& plan, const PassInputs& p, float* dst);
  void apply_shift();
  Pipeline* front_pipeline() const;

  const Model& model_;
  int64_t n_batch_;
  bool embeddings_ = false;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Plan>> plans_;  // least recently used first out
  Plan* last_plan_ = nullptr;
  uint64_t clock_ = 0;
  Timings timings_;

  // Reused from call to call: no allocation in a steady decode loop.
  std::vector<float> logits_;
  std::vector<int32_t> logit_row_;  // per batch token: row in logits_, or -1
  std::vector<Flight> flights_;     // submitted, oldest first (a few: no ring needed)
  std::vector<Flight> spare_;       // collected: their vectors reused
  std::vector<int32_t> i32_;
  PassInputs pass_;               // the current pass's inputs
  std::vector<float> hidden_;     // a stage's hidden state in or out
  Pipeline* pipeline_ = nullptr;   // options.pipeline
  uint32_t pipeline_context_ = 0;  // on rank 0 of a pipeline: this context's id there
};

using SessionOptions = ContextOptions;

// One sequence (id 0) of a Context: decode() appends tokens at n_past().
class Session {
 public:
  explicit Session(const Model& model, const SessionOptions& options = {});

  // Runs `tokens` at positions n_past().. and returns the logits of the last
  // token (n_vocab floats), or with all_logits those of every token
  // (tokens.size() rows of n_vocab). Throws Error(kInvalidArgument) when the
  // context would overflow or a token id is out of range; then nothing changed.
  std::span<const float> decode(std::span<const int32_t> tokens, bool all_logits = false);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return context_.n_ctx(); }
  int64_t n_batch() const { return context_.n_batch(); }
  void reset();
  Context& context() { return context_; }

 private:
  Context context_;
  Batch batch_;
  int64_t n_past_ = 0;
};

}  // namespace tessera
