// Run under mpirun: `pipeline_check MODEL [SHARES]`. Every rank loads its
// stage of MODEL (split_layers, SHARES as --split-ranks gives them); rank 0
// also loads the whole model in a runtime of its own and runs the same
// batches and cache operations on both, comparing every logit:
//   1. a 24-token prompt, every logit, and a second sequence beside it;
//   2. token-by-token decodes after it (a small graph shape, a new plan);
//   3. seq_cp of a prefix, then a continuation on the copy;
//   4. seq_rm of a tail, then new tokens in its place;
//   5. seq_add (a K shift on every rank), then a decode.
// Prints each step's NMSE and exits 1 when any exceeds 1e-9 (the CPU gives
// the same kernels the same rows, so 0 is expected).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/dist/mpi.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/placement.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
namespace {

constexpr double kLimit = 1e-9;

struct Check {
  const Context& split;
  const Context& whole;
  int failures = 0;

  void compare(const std::string& what) {
    const std::span<const float> a = split.all_logits(), b = whole.all_logits();
    double err = a.size() == b.size() ? testing::nmse(a, b) : 1.0;
    fmt::print("{:<44} {} logits, NMSE {:.3g}\n", what, b.size(), err);
    if (!(err <= kLimit)) failures += 1;
  }
};

Batch prompt_batch(const std::vector<int32_t>& tokens, int seq, int32_t p0, bool all) {
  Batch b;
  b.add_sequence(tokens, p0, seq, all);
  return b;
}

int front(Pipeline& pipeline, const Model& split_model, const std::string& path) {
  // The whole model, in a runtime of its own, as one process would run it.
  auto runtime = make_runtime();
  const auto whole_model = load_model(*runtime, path);
  const int64_t n_vocab = whole_model->hparams().n_vocab;
  std::mt19937 rng(7);
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
  };
  const ContextOptions co{.n_ctx = 256, .n_batch = 16};
  ContextOptions on_pipeline = co;
  on_pipeline.pipeline = &pipeline;
  Context split(split_model, on_pipeline), whole(*whole_model, co);
  Check check{split, whole};
  auto both = [&](const Batch& b) {
    split.decode(b);
    whole.decode(b);
  };
  auto both_cache = [&](auto&& op) {
    op(split.cache());
    op(whole.cache());
  };

  // 1. A prompt in passes of 16 with every logit, then a second sequence.
  const std::vector<int32_t> prompt = tokens(24);
  both(prompt_batch(prompt, 0, 0, true));
  check.compare("prompt of 24, every logit (2 passes)");
  Batch two = prompt_batch(tokens(5), 1, 0, true);
  two.add(prompt[3], 24, {0}, true);
  both(two);
  check.compare("a second sequence beside the first");

  // 2. One token at a time.
  for (int32_t pos = 25; pos < 29; ++pos) both(prompt_batch(tokens(1), 0, pos, false));
  check.compare("4 single-token decodes, the last");

  // 3. The prefix copied to sequence 2, continued there.
  both_cache([](KvCache& c) { c.seq_cp(0, 2, 0, 12); });
  both(prompt_batch(tokens(3), 2, 12, true));
  check.compare("seq_cp of 12 positions, then 3 tokens");

  // 4. A tail removed, new tokens in its place.
  both_cache([](KvCache& c) { c.seq_rm(0, 20, -1); });
  both(prompt_batch(tokens(4), 0, 20, true));
  check.compare("seq_rm from 20, then 4 tokens there");

  // 5. Positions moved: every rank rotates its keys.
  both_cache([](KvCache& c) { c.seq_add(0, 8, -1, -3); });
  both(prompt_batch(tokens(2), 0, 21, true));
  check.compare("seq_add -3 from 8 (K shift), then 2 tokens");

  fmt::print("ranks {}, layers per rank:", pipeline.size());
  for (const LayerRange& r : pipeline.ranges()) fmt::print(" [{}, {})", r.begin, r.end);
  fmt::print(", bytes sent by rank 0: {}\n", pipeline.bytes_sent());
  fmt::print("{}\n", check.failures == 0 ? "PASS" : "FAIL");
  return check.failures == 0 ? 0 : 1;
}

int run(int argc, char** argv, MpiWorld& world) {
  if (argc < 2) {
    fmt::print(stderr, "usage: mpirun -np N pipeline_check MODEL [SHARES]\n");
    return 2;
  }
  const std::string path = argv[1];
  std::vector<double> shares;
  if (argc > 2) {
    for (std::string s = argv[2]; !s.empty();) {
      const size_t comma = s.find(',');
      shares.push_back(std::stod(s.substr(0, comma)));
      s = comma == std::string::npos ? "" : s.substr(comma + 1);
    }
  }
  if (world.transport() == nullptr) {
    fmt::print(stderr, "pipeline_check needs at least 2 MPI ranks\n");
    return 2;
  }
  Transport& t = *world.transport();
  std::vector<LayerRange> ranges;
  {
    const gguf::File file = gguf::File::open(path);
    ranges = split_layers(file, read_hparams(file).n_layer, t.size(), shares);
  }
  auto pipeline = std::make_shared<Pipeline>(t, ranges);
  auto runtime = make_runtime();
  PlacementOptions po;
  po.pipeline = pipeline;
  const auto model = load_model(*runtime, path, po);
  t.all_gather("");  // every rank loaded
  pipeline->start();
  if (world.rank() > 0) {
    pipeline->serve(*model);
    return 0;
  }
  return front(*pipeline, *model, path);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  try {
    tessera::MpiWorld world(argc, argv);
    try {
      return tessera::run(argc, argv, world);
    } catch (const std::exception& e) {
      fmt::print(stderr, "pipeline_check rank {}: {}\n", world.rank(), e.what());
      world.abort(1);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "pipeline_check: {}\n", e.what());
    return 1;
  }
}
