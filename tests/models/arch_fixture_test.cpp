// Each architecture against llama.cpp on its random-weight fixture
// (shared/fixtures/archs, see PROVENANCE.md): the prompt's logits at every
// position within an NMSE limit (kArchNmseLimit, arch_fixture.h), and the 24 greedy tokens exactly,
// on every CPU tier the machine has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "models/arch_fixture.h"
#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/engine/engine.h"

namespace tessera {
namespace {

using testing::ArchFixture;
using testing::nmse;

using testing::kArchNmseLimit;

struct TierCase {
  std::string arch;
  cpu::Isa isa;
};

// gtest prints parameters in ctest's names: a readable one.
void PrintTo(const TierCase& c, std::ostream* os) {
  *os << c.arch << " on " << cpu::isa_name(c.isa);
}

std::string case_name(const ::testing::TestParamInfo<TierCase>& info) {
  return info.param.arch + "_cpu_" + std::string(cpu::isa_name(info.param.isa));
}

std::vector<TierCase> all_cases() {
  std::vector<TierCase> out;
  for (const std::string& arch : testing::kFixtureArchs) {
    for (cpu::Isa isa : cpu::kAllIsas) {
      out.push_back({arch, isa});
    }
  }
  return out;
}

int32_t argmax(std::span<const float> v) {  // ties: the lowest id, as the reference
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

class ArchFixtureTest : public ::testing::TestWithParam<TierCase> {
 protected:
  void SetUp() override {
    const auto supported = cpu::supported_isas();
    if (std::find(supported.begin(), supported.end(), GetParam().isa) == supported.end()) {
      GTEST_SKIP() << "this CPU has no " << cpu::isa_name(GetParam().isa) << " tier";
    }
    rt_ = make_runtime(false);
    auto& cpu = dynamic_cast<cpu::CpuDevice&>(rt_->device("CPU0"));
    cpu.set_isa(GetParam().isa);
    cpu.set_threads(2);
    cpu.set_min_work_per_thread(0);  // the row splits run on these small shapes too
    fixture_ = ArchFixture::load(GetParam().arch);
    model_ = Model::load(*rt_, fixture_.gguf);
  }

  std::unique_ptr<Runtime> rt_;
  ArchFixture fixture_;
  std::unique_ptr<Model> model_;
};

TEST_P(ArchFixtureTest, PromptLogitsMatchLlamaCppAtEveryPosition) {
  EXPECT_EQ(model_->hparams().architecture, fixture_.architecture);
  Session s(*model_);
  const auto all = s.decode(fixture_.prompt, /*all_logits=*/true);
  const size_t nv = static_cast<size_t>(fixture_.n_vocab);
  ASSERT_EQ(all.size(), fixture_.prompt.size() * nv);
  double worst = 0, max_abs = 0;
  for (size_t i = 0; i < fixture_.prompt.size(); ++i) {
    const auto got = all.subspan(i * nv, nv);
    const auto want = std::span(fixture_.logits).subspan(i * nv, nv);
    const double e = nmse(got, want);
    worst = std::max(worst, e);
    for (size_t j = 0; j < nv; ++j) max_abs = std::max(max_abs, double(std::abs(got[j] - want[j])));
    EXPECT_LT(e, kArchNmseLimit) << "position " << i;
  }
  std::printf("%s on %s: worst NMSE %.3g over %zu positions, max |diff| %.4f\n",
              GetParam().arch.c_str(), std::string(cpu::isa_name(GetParam().isa)).c_str(), worst,
              fixture_.prompt.size(), max_abs);
}

TEST_P(ArchFixtureTest, GreedyTokensEqualLlamaCpps) {
  Session s(*model_);
  auto logits = s.decode(fixture_.prompt);
  std::vector<int32_t> got;
  for (size_t i = 0; i < fixture_.greedy.size(); ++i) {
    const int32_t t = argmax(logits);
    got.push_back(t);
    logits = s.decode(std::span(&t, 1));
  }
  EXPECT_EQ(got, fixture_.greedy);
}

// Four sequences in one context, as `-np 4` runs them: sequence s starts s
// steps after sequence 0, so prompts and greedy steps share batches (a
// mixture of experts then routes tokens of different sequences in one
// MUL_MAT_ID). Each must take llama.cpp's greedy path.
TEST_P(ArchFixtureTest, FourSequencesInSharedBatchesTakeTheGreedyPath) {
  constexpr int kSeqs = 4;
  Context ctx(*model_, {.n_ctx = 256});
  std::vector<std::vector<int32_t>> got(kSeqs);
  const auto n_prompt = static_cast<int32_t>(fixture_.prompt.size());
  for (int step = 0; step < kSeqs + static_cast<int>(fixture_.greedy.size()); ++step) {
    Batch batch;
    std::vector<std::pair<int, size_t>> asked;  // (sequence, its token in the batch) that asks for logits
    for (int s = 0; s < kSeqs; ++s) {
      if (step < s || got[s].size() == fixture_.greedy.size()) continue;
      if (step == s) {
        batch.add_sequence(fixture_.prompt, 0, s);
      } else {
        batch.add(got[s].back(), n_prompt + static_cast<int32_t>(got[s].size()) - 1, {s}, true);
      }
      asked.emplace_back(s, batch.size() - 1);
    }
    if (batch.empty()) break;
    ctx.decode(batch);
    for (const auto& [s, i] : asked) got[s].push_back(argmax(ctx.logits(i)));
  }
  for (int s = 0; s < kSeqs; ++s) EXPECT_EQ(got[s], fixture_.greedy) << "sequence " << s;
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchFixtureTest, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace tessera
