// Pipeline: one model split across processes by layers. Stage r holds a
// contiguous range of layers (the token embedding on the first, the output
// norm and head on the last) and its own KV cache rows for them. Rank 0 is
// the front: it owns the tokenizer, the sampler, the cache's cells and every
// decision about them; the other ranks run a command loop (serve()).
//
// Every command goes down the chain rank 0 -> 1 -> ... -> last, one message
// per hop, and the last rank answers rank 0: a pass's message carries the
// pass's inputs (positions, cache rows, masks, rows asked) and the hidden
// state after the sender's layers; the last rank answers with the logits.
// Workers keep no cell table: what the cache operations (seq_rm, seq_cp,
// seq_add) change reaches them as the masks and rows of the next pass, and
// a K shift as a command of its own, so they cannot drift from rank 0. One
// chain gives one order: MPI keeps messages between two ranks in order.
//
// A failure on a worker (no memory for a context, a compute error) goes on
// down the chain as an error naming the rank and host, and the call on rank
// 0 throws it: an error, not a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/gguf/gguf.h"
#include "tessera/models/model.h"

namespace tessera {

struct ContextOptions;

// Contiguous layer ranges for `n_stages` stages, each at least one layer.
// Without `proportions`, balanced by bytes: each layer's blk.N.* tensors,
// the token embedding counted to the first stage and output / output_norm
// to the last. With proportions (one positive number per stage, as
// --split-ranks gives them), stage r gets that share of the bytes. Throws
// Error(kInvalidArgument) for more stages than layers or a wrong count of
// proportions (naming `flag`).
std::vector<LayerRange> split_layers(const gguf::File& file, int64_t n_layer, int n_stages,
                                     std::span<const double> proportions = {},
                                     const std::string& flag = "--split-ranks");

// The host-side inputs of one forward pass, as the front computed them: what
// every stage sets before it runs its graph. Shapes are the graph's (bucketed).
struct PassInputs {
  int64_t n = 0;         // real tokens; the rest of n_tokens is padding
  int64_t n_tokens = 0;  // graph tokens (bucket)
  int64_t n_kv = 0;      // cache rows attention reads
  int64_t n_out = 0;     // rows of logits asked
  int64_t n_out_rows = 0;          // graph rows of logits (bucket, >= 1)
  std::vector<int32_t> tokens;     // [n_tokens]; read by the first stage only
  std::vector<int32_t> positions;  // [n_tokens]
  std::vector<int64_t> kv_idx;     // [n_tokens]
  std::vector<float> mask;         // [n_tokens][n_kv]
  std::vector<float> mask_swa;     // as mask, or empty when the model has no sliding window
  std::vector<int32_t> out_ids;    // [n_out_rows]
};

// Moves byte messages between the ranks of one job. The MPI implementation
// lives in src/dist (mpi.h); a test may give its own.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& host() const = 0;  // this rank's host name
  // send() queues `message` for rank `to` and returns without waiting for
  // the receiver (the transport owns the bytes until they arrive): two ranks
  // that send each other large messages at once must not deadlock, and a
  // rank goes on computing while its last result travels. recv() blocks.
  // Messages between two ranks arrive in the order sent. Both throw
  // Error(kDevice) on failure.
  virtual void send(int to, std::vector<std::byte> message) = 0;
  virtual void recv(int from, std::vector<std::byte>& message) = 0;
  // Waits until every message sent has left this rank (before MPI ends).
  virtual void flush() {}
  // Collective: every rank's `mine`, in rank order.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;

  // Set once the other ranks are known to be past waiting on this one (they
  // got the stop command, or every rank saw the same failure): a front that
  // fails then exits plainly instead of aborting the job.
  void mark_peers_done() { peers_done_ = true; }
  bool peers_done() const { return peers_done_; }

 private:
  bool peers_done_ = false;
};

// "[rank r on host]": how every message about a rank names it.
std::string rank_name(const Transport& t, int rank, const std::string& host);

class Pipeline {
 public:
  // `transport` outlives the pipeline. ranges: one per rank (split_layers).
  Pipeline(Transport& transport, std::vector<LayerRange> ranges);
  // On rank 0 of a started pipeline: sends the stop command, so that every
  // worker's serve() returns.
  ~Pipeline();
  // Called on every rank once every rank has loaded its stage: from then on
  // the workers are in serve() and the front's destruction stops them.
  void start() { started_ = true; }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  bool is_front() const { return rank() == 0; }
  bool is_last() const { return rank() == size() - 1; }
  const LayerRange& range() const { return ranges_[static_cast<size_t>(rank())]; }
  const std::vector<LayerRange>& ranges() const { return ranges_; }
  Transport& transport() const { return transport_; }
  // Bytes sent by this rank so far (messages to other ranks).
  uint64_t bytes_sent() const { return bytes_sent_; }

  // ---- the front (rank 0), called by Context ------------------------------
  // Makes a context with `options` on every worker; returns its id.
  uint32_t open(const ContextOptions& options);
  void close(uint32_t context) noexcept;
  // Sends `inputs` down ranks 1..last after rank 0's `hidden` ([n][n_embd]
  // floats) and returns without waiting: several passes may be in flight,
  // each rank running them in the order sent (micro-batches: rank 1 works on
  // one while rank 0 computes the next).
  void send_pass(uint32_t context, const PassInputs& inputs, std::span<const float> hidden);
  // Waits for the answer to the oldest pass in flight and writes the last
  // rank's output (inputs.n_out rows) to `out`; throws the error of a rank
  // that failed it. Every pass sent gets one answer, output or error.
  // `context`: the context the pass was sent for (an answer for another is
  // an error: each context collects its own passes, in order).
  void receive_output(uint32_t context, std::span<float> out);
  size_t passes_in_flight() const { return in_flight_; }
  // send_pass, then receive_output.
  void pass(uint32_t context, const PassInputs& inputs, std::span<const float> hidden,
            std::span<float> out);
  // Rotates the workers' cached keys by `shifts` (one per cache row). Open
  // and shift wait for their answers, so no pass may be in flight.
  void shift(uint32_t context, std::span<const int32_t> shifts);

  // ---- the workers (rank > 0) ---------------------------------------------
  // Runs commands from the previous rank on `model` (this rank's stage)
  // until the front stops the pipeline.
  void serve(const Model& model);

 private:
  void send_to(int to, std::vector<std::byte>&& message);
  void send_down(std::vector<std::byte>&& message);
  void await_reply(std::span<float> out, uint32_t context = 0);

  Transport& transport_;
  std::vector<LayerRange> ranges_;
  bool started_ = false;
  uint32_t next_context_ = 1;
  uint64_t bytes_sent_ = 0;
  size_t in_flight_ = 0;  // passes sent and not yet answered
  std::vector<std::byte> reply_;
};

}  // namespace tessera
