// Placement: --gpu-layers counts as llama.cpp's -ngl (the output layer last),
// layers go only while they fit the device's free memory, and a model split
// between a fake GPU (CPU kernels behind its own non-host memory and a worker
// thread, tests/runtime/async_device.h) and the CPU gives the CPU's logits,
// with attention running where its layer is.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/model_test_util.h"
#include "runtime/async_device.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/placement.h"
#include "tessera/models/synth.h"

namespace tessera {
namespace {

using testing::llama_fixture;
using testing::nmse;
using testing::stories;

struct Rig {
  std::unique_ptr<Runtime> rt = make_runtime(false);
  testing::AsyncDevice* gpu = nullptr;
  explicit Rig(uint64_t free_bytes = uint64_t{1} << 32) {
    auto d = std::make_unique<testing::AsyncDevice>(0, &rt->device("CPU0"), free_bytes);
    gpu = d.get();
    rt->add_backend(std::move(d));
  }
};

// Logits of every position of a prompt, then of 4 greedy steps.
std::vector<std::vector<float>> run(const Model& model, std::string* plan = nullptr) {
  Session s(model, {.n_ctx = 64});
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432};
  std::vector<std::vector<float>> out;
  auto all = s.decode(prompt, /*all_logits=*/true);
  const auto nv = static_cast<size_t>(model.hparams().n_vocab);
  for (size_t i = 0; i < prompt.size(); ++i) {
    out.emplace_back(all.begin() + i * nv, all.begin() + (i + 1) * nv);
  }
  for (int i = 0; i < 4; ++i) {
    const auto t = static_cast<int32_t>(std::max_element(out.back().begin(), out.back().end()) -
                                        out.back().begin());
    auto l = s.decode(std::span(&t, 1));
    out.emplace_back(l.begin(), l.end());
  }
  if (plan != nullptr) *plan = s.context().describe_plan();
  return out;
}

int count_splits(const std::string& plan) {
  int n = 0;
  for (size_t at = plan.find("  split "); at != std::string::npos; at = plan.find("  split ", at + 1)) n++;
  return n;
}

TEST(SplitModel, LayersOnAFakeGpuGiveTheCpusLogits) {
  for (const std::string& path : {stories(), llama_fixture()}) {
    SCOPED_TRACE(path);
    std::vector<std::vector<float>> cpu_only;
    {
      auto rt = make_runtime(false);
      cpu_only = run(*load_model(*rt, path, {.gpu_layers = 0}));
    }
    const int64_t n_layer = gguf::File::open(path).find(
        fmt::format("{}.block_count", "llama"))->u64();
    // The last two layers; every layer but not the output; everything.
    for (int ngl : {2, static_cast<int>(n_layer), static_cast<int>(n_layer) + 1}) {
      SCOPED_TRACE(fmt::format("--gpu-layers {}", ngl));
      Rig rig;
      Placement where;
      auto model = load_model(*rig.rt, path, {.gpu_layers = ngl}, {}, &where);
      EXPECT_EQ(where.layers_on_gpu, ngl);
      EXPECT_EQ(&model->output_device() == rig.gpu, ngl > n_layer);
      for (int64_t il = 0; il < n_layer; ++il) {
        EXPECT_EQ(model->layers()[static_cast<size_t>(il)].device == rig.gpu, il >= n_layer - ngl)
            << "layer " << il;
      }
      std::string plan;
      const auto got = run(*model, &plan);
      ASSERT_EQ(got.size(), cpu_only.size());
      for (size_t i = 0; i < got.size(); ++i) {
        // CPU kernels on both sides: equal up to f32 rounding. (Not bit for
        // bit: F16 weights the CPU repacks are summed along k in one lane,
        // the fake GPU's plain rows in eight; seen up to 4e-9 here, 4e-8
        // on the arch fixtures.)
        EXPECT_LT(nmse(got[i], cpu_only[i]), 1e-7) << "row " << i;
      }
      // Embeddings on the CPU, then the GPU's layers (attention and RoPE
      // included: rope_freqs has a copy there), then the output wherever it
      // is: no op bounces back to the CPU in between.
      EXPECT_LE(count_splits(plan), 3) << plan;
      EXPECT_NE(plan.find("ASYNC0"), std::string::npos) << plan;
    }
  }
}

// --n-cpu-moe: a mixture of experts on the fake GPU with the first layer's
// experts in host memory. Those expert matmuls run on the CPU (the scheduler
// keeps an op beside weights the GPU cannot read), everything else of the
// layers on the GPU, and the logits are the CPU's. The placement counts the
// experts left behind out of the GPU's bytes.
TEST(SplitModel, ExpertsOfTheFirstLayersStayInHostMemory) {
  const std::string path = testing::fixtures_dir() + "/archs/qwen3moe.gguf";
  std::vector<std::vector<float>> cpu_only;
  {
    auto rt = make_runtime(false);
    cpu_only = run(*load_model(*rt, path, {.gpu_layers = 0}));
  }
  const gguf::File file = gguf::File::open(path);
  const Hparams hp = read_hparams(file);
  ASSERT_GE(hp.n_layer, 2);
  Rig rig;
  Placement where;
  auto model = load_model(*rig.rt, path, {.gpu_layers = -1, .n_cpu_moe = 1}, {}, &where);
  EXPECT_EQ(where.layers_on_gpu, hp.n_layer + 1) << where.message;
  EXPECT_NE(where.message.find("the experts of 1 layers in host memory"), std::string::npos) << where.message;
  Device& cpu = rig.rt->device("CPU0");
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& l = model->layers()[static_cast<size_t>(il)];
    EXPECT_EQ(l.device, rig.gpu);
    for (const Tensor* t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps}) {
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(&t->buffer->device(), il == 0 ? &cpu : static_cast<Device*>(rig.gpu)) << t->name;
    }
    EXPECT_EQ(&l.ffn_gate_inp->buffer->device(), static_cast<Device*>(rig.gpu));
  }
  std::string plan;
  const auto got = run(*model, &plan);
  ASSERT_EQ(got.size(), cpu_only.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(nmse(got[i], cpu_only[i]), 1e-7) << "row " << i;
  EXPECT_NE(plan.find("ASYNC0"), std::string::npos) << plan;
  EXPECT_GT(count_splits(plan), 3) << plan;  // to the CPU for layer 0's experts and back

  // The estimate: the GPU's bytes leave out exactly the experts kept behind.
  Rig big;
  const Placement all = plan_placement(*big.rt, file, hp, {});
  const Placement some = plan_placement(*big.rt, file, hp, {.n_cpu_moe = 1});
  uint64_t experts = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.starts_with("blk.0.") && t.name.find("_exps") != std::string_view::npos) experts += t.nbytes;
  }
  ASSERT_GT(experts, 0u);
  EXPECT_EQ(all.gpu_bytes - some.gpu_bytes, experts);
}

TEST(SplitModel, LayersGoOnlyWhileTheyFitTheFreeMemory) {
  const gguf::File file = gguf::File::open(stories());
  const Hparams hp = read_hparams(file);
  const PlacementOptions options{.n_ctx = 256};
  // What one layer takes: its weights and its cache rows.
  uint64_t layer = 2 * 2 * static_cast<uint64_t>(hp.n_embd_kv()) * (options.n_ctx + 1);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.starts_with("blk.0.")) layer += t.nbytes;
  }
  const uint64_t reserve = compute_reserve_bytes(hp, options.n_batch, /*output_on_gpu=*/true);  // -1 asks for it
  // Room for 2.5 layers beside the reserve (the 0.95 margin included).
  Rig rig(static_cast<uint64_t>(double(reserve + layer * 5 / 2) / 0.95));
  const Placement p = plan_placement(*rig.rt, file, hp, options);
  EXPECT_EQ(p.layers_on_gpu, 2) << p.message;  // the last two; not the output layer
  EXPECT_EQ(p.layer_devices.back(), rig.gpu);
  EXPECT_EQ(p.layer_devices[static_cast<size_t>(hp.n_layer - 3)], &rig.rt->device("CPU0"));
  EXPECT_EQ(p.output_device, &rig.rt->device("CPU0"));
  EXPECT_NE(p.message.find("2 of 6 layers on ASYNC0"), std::string::npos) << p.message;
  EXPECT_NE(p.message.find("4 more would need"), std::string::npos) << p.message;

  // Plenty of memory: everything, output included.
  Rig big;
  const Placement all = plan_placement(*big.rt, file, hp, options);
  EXPECT_EQ(all.layers_on_gpu, hp.n_layer + 1) << all.message;
  EXPECT_EQ(all.output_device, big.gpu);
}

// A head tied to the token embedding goes to the GPU with the output layer
// as a copy of the embedding (which stays on the CPU for GET_ROWS): after
// the embedding lookup, nothing runs on the CPU, and the logits are the
// CPU's.
TEST(SplitModel, ATiedHeadRunsOnTheGpuWithTheOutputLayer) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / fmt::format("tied_{}", getpid());
  std::filesystem::create_directories(dir);
  SynthOptions o;
  o.shape = *find_synth_shape("tiny");
  o.shape.tied_output = true;
  o.type = DType::kQ8_0;
  o.vocab = testing::fixtures_dir() + "/tokenizer/ggml-vocab-llama-spm.gguf";
  o.threads = 2;
  const auto path = (dir / "tied.gguf").string();
  synthesize_model(o, path);
  ASSERT_EQ(gguf::File::open(path).find_tensor("output.weight"), nullptr);
  std::vector<std::vector<float>> cpu_only;
  {
    auto rt = make_runtime(false);
    auto model = load_model(*rt, path, {.gpu_layers = 0});
    EXPECT_EQ(model->output(), model->token_embd());
    cpu_only = run(*model);
  }
  Rig rig;
  auto model = load_model(*rig.rt, path, {.gpu_layers = -1});
  EXPECT_EQ(&model->output_device(), rig.gpu);
  ASSERT_NE(model->output(), model->token_embd());
  EXPECT_EQ(model->output()->name, "token_embd.weight");
  EXPECT_EQ(&model->output()->buffer->type(), &rig.gpu->weights_buffer_type(*model->output()));
  EXPECT_EQ(&model->token_embd()->buffer->type(),
            &rig.rt->device("CPU0").weights_buffer_type(*model->token_embd()));
  std::string plan;
  const auto got = run(*model, &plan);
  ASSERT_EQ(got.size(), cpu_only.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(nmse(got[i], cpu_only[i]), 1e-7) << "row " << i;
  // The embedding lookup on the CPU, then everything on the GPU.
  EXPECT_EQ(count_splits(plan), 2) << plan;
  model.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
