// Each architecture split between a fake GPU (CPU kernels behind non-host
// memory, tests/runtime/async_device.h) and the CPU gives the CPU's logits:
// biases, q/k norms, fused projections, rope_freqs and the sliding-window
// mask all reach the device that runs their layer.
#include <gtest/gtest.h>

#include "models/arch_fixture.h"
#include "runtime/async_device.h"
#include "tessera/backends/builtin.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/placement.h"

namespace tessera {
namespace {

using testing::ArchFixture;
using testing::nmse;

// Logits of every prompt position, then of 4 greedy steps.
std::vector<std::vector<float>> run(const Model& model, const std::vector<int32_t>& prompt) {
  Session s(model, {.n_ctx = 64});
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
  return out;
}

class ArchSplitTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchSplitTest, LayersOnAFakeGpuGiveTheCpusLogits) {
  const ArchFixture f = ArchFixture::load(GetParam());
  std::vector<std::vector<float>> cpu_only;
  {
    auto rt = make_runtime(false);
    cpu_only = run(*load_model(*rt, f.gguf, {.gpu_layers = 0}), f.prompt);
  }
  const int64_t n_layer = read_hparams(gguf::File::open(f.gguf)).n_layer;
  for (int ngl : {2, static_cast<int>(n_layer) + 1}) {
    SCOPED_TRACE(fmt::format("--gpu-layers {}", ngl));
    auto rt = make_runtime(false);
    auto d = std::make_unique<testing::AsyncDevice>(0, &rt->device("CPU0"), uint64_t{1} << 32);
    Device* gpu = d.get();
    rt->add_backend(std::move(d));
    auto model = load_model(*rt, f.gguf, {.gpu_layers = ngl});
    EXPECT_EQ(model->layers().back().device, gpu);
    const auto got = run(*model, f.prompt);
    ASSERT_EQ(got.size(), cpu_only.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // CPU kernels both sides, up to f32 rounding: F16 weights the CPU
      // repacks sum along k in one lane, the fake GPU's rows in eight (seen
      // up to 4e-8 for dense blocks, 1.4e-7 for mixtral, whose router and
      // experts add matmuls and a top-k pick per block). A layer that lost a
      // weight or a bias on the way errs by 1e-4 and more.
      EXPECT_LT(nmse(got[i], cpu_only[i]), 5e-7) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchSplitTest, ::testing::ValuesIn(testing::kFixtureArchs),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace tessera
