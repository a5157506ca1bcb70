// What the loader reads from each architecture's fixture (keys, tensors,
// tied or untied output, the tokenizer), errors that list every tensor a
// file lacks, RoPE scaling types, and engine behaviour that the fixtures'
// reference data do not reach: batches split across passes under sliding
// windows, linear scaling as scaled positions, LongRoPE's choice of
// factors, shifts under YaRN.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "models/arch_fixture.h"
#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/engine/engine.h"
#include "tessera/text/tokenizer.h"

namespace tessera {
namespace {

using testing::ArchFixture;
using testing::nmse;
using testing::rewrite_gguf;

std::string fixture(const std::string& arch) {
  return testing::fixtures_dir() + "/archs/" + arch + ".gguf";
}

std::string load_error(const std::filesystem::path& path) {
  auto rt = make_runtime(false);
  try {
    Model::load(*rt, path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ArchHparams, EachFixtureReadsItsOwnKeys) {
  auto rt = make_runtime(false);
  {
    auto m = Model::load(*rt, fixture("llama"));
    EXPECT_EQ(m->hparams().rope_mode, ops::RopeMode::kNormal);
    ASSERT_NE(m->rope_freqs(), nullptr);  // Llama 3 scaling as a tensor
    EXPECT_FLOAT_EQ(m->hparams().rope_freq_scale, 1.0f);
  }
  {
    auto m = Model::load(*rt, fixture("qwen2"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.rope_mode, ops::RopeMode::kNeox);
    EXPECT_FLOAT_EQ(hp.rope_freq_base, 1e6f);
    EXPECT_NE(m->layers()[3].bq, nullptr);
    EXPECT_NE(m->layers()[3].bv, nullptr);
    EXPECT_NE(m->output(), m->token_embd());
  }
  {
    auto m = Model::load(*rt, fixture("qwen3"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.n_embd, 96);
    EXPECT_EQ(hp.head_dim, 32);  // attention.key_length, not 96 / 4
    EXPECT_EQ(hp.n_embd_q(), 128);
    EXPECT_EQ(hp.rope_mode, ops::RopeMode::kNeox);
    EXPECT_NE(m->layers()[0].attn_q_norm, nullptr);
    EXPECT_EQ(m->layers()[0].bq, nullptr);
  }
  {
    auto m = Model::load(*rt, fixture("gemma3"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.n_swa, 8);
    EXPECT_EQ(hp.swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));  // 5 local : 1 global
    EXPECT_FLOAT_EQ(hp.rope_freq_base, 1e6f);
    EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, 1e4f);
    EXPECT_FLOAT_EQ(hp.kq_scale(), 0.25f);  // 1 / sqrt(key_length 16)
    EXPECT_EQ(hp.rope_mode, ops::RopeMode::kNeox);
    EXPECT_NE(m->output(), m->token_embd());  // the fixture's own output matrix
  }
  {
    auto m = Model::load(*rt, fixture("phi3"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.n_swa, 0);  // sliding_window 0, and phi3's is not used anyway
    EXPECT_EQ(hp.n_ctx_orig, 512);
    EXPECT_NE(m->layers()[0].wqkv, nullptr);
    EXPECT_EQ(m->layers()[0].ffn_up->ne[1], 2 * hp.n_ff);
    EXPECT_EQ(m->weights().rope_long, nullptr);  // no LongRoPE in this file
  }
  {
    auto m = Model::load(*rt, fixture("qwen3moe"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.n_expert, 8);
    EXPECT_EQ(hp.n_expert_used, 2);
    EXPECT_EQ(hp.n_ff_exp, 64);
    EXPECT_EQ(hp.expert_gating, Hparams::ExpertGating::kSoftmax);
    EXPECT_TRUE(hp.expert_weights_norm);  // qwen3moe normalises whatever the keys say
    EXPECT_EQ(hp.rope_mode, ops::RopeMode::kNeox);
    const LayerWeights& l = m->layers()[3];
    ASSERT_NE(l.ffn_up_exps, nullptr);
    EXPECT_EQ(l.ffn_up_exps->ne[2], 8);
    EXPECT_EQ(l.ffn_gate_inp->type, DType::kF32);
    EXPECT_EQ(l.ffn_up, nullptr);  // no dense FFN
  }
  {
    auto m = Model::load(*rt, fixture("mixtral"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.architecture, "llama");
    EXPECT_EQ(hp.n_ff_exp, hp.n_ff);  // llama's experts are feed_forward_length rows
    EXPECT_TRUE(hp.expert_weights_norm);
    EXPECT_EQ(hp.rope_mode, ops::RopeMode::kNormal);
    EXPECT_NE(m->layers()[0].ffn_gate_inp, nullptr);
  }
  {
    auto m = Model::load(*rt, fixture("qwen2moe"));
    const Hparams& hp = m->hparams();
    EXPECT_FALSE(hp.expert_weights_norm);
    EXPECT_EQ(hp.n_ff_exp, 64);
    EXPECT_EQ(hp.n_ff_shexp, 96);
    const LayerWeights& l = m->layers()[2];
    EXPECT_NE(l.ffn_gate_inp_shexp, nullptr);
    EXPECT_NE(l.ffn_down_shexp, nullptr);
    EXPECT_NE(l.bq, nullptr);
  }
  {
    auto m = Model::load(*rt, fixture("gpt_oss"));
    const Hparams& hp = m->hparams();
    EXPECT_EQ(hp.architecture, "gpt-oss");
    EXPECT_EQ(hp.expert_gating, Hparams::ExpertGating::kSoftmaxWeight);
    EXPECT_EQ(hp.expert_activation, Hparams::ExpertActivation::kSwigluOai);
    EXPECT_EQ(hp.n_swa, 8);
    EXPECT_EQ(hp.swa_layers, (std::vector<uint8_t>{1, 0, 1, 0}));  // llama.cpp's pattern of 2
    EXPECT_FLOAT_EQ(hp.rope_ext_factor, 1.0f);                     // YaRN
    EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, hp.rope_freq_base);
    const LayerWeights& l = m->layers()[1];
    EXPECT_NE(l.attn_sinks, nullptr);
    EXPECT_NE(l.bo, nullptr);
    EXPECT_NE(l.ffn_down_exps_b, nullptr);
    EXPECT_NE(l.ffn_gate_inp_b, nullptr);
  }
}

// A mixture of experts whose keys or expert tensors are wrong is refused at
// load, naming the key or the tensors; nothing aborts.
TEST(ArchLoader, ExpertKeysAndTensorsAreChecked) {
  const std::string src = fixture("qwen3moe");
  const auto used = rewrite_gguf(src, "used9", [](gguf::Writer& w) { w.set_u32("qwen3moe.expert_used_count", 9); });
  std::string e = load_error(used);
  EXPECT_NE(e.find("qwen3moe.expert_used_count"), std::string::npos) << e;
  EXPECT_NE(e.find("9"), std::string::npos) << e;
  const auto none = rewrite_gguf(src, "none", [](gguf::Writer& w) {
    w.set_u32("qwen3moe.expert_count", 0);
    w.set_u32("qwen3moe.expert_used_count", 0);
  });
  e = load_error(none);
  EXPECT_NE(e.find("qwen3moe.expert_count"), std::string::npos) << e;
  const auto huge = rewrite_gguf(src, "huge", [](gguf::Writer& w) { w.set_u32("qwen3moe.expert_count", 1u << 30); });
  e = load_error(huge);
  EXPECT_NE(e.find("qwen3moe.expert_count"), std::string::npos) << e;
  const auto fewer = rewrite_gguf(src, "fewer", [](gguf::Writer& w) { w.set_u32("qwen3moe.expert_count", 4); });
  e = load_error(fewer);  // the tensors hold 8 experts
  EXPECT_NE(e.find("tensor 'blk.0.ffn_up_exps.weight': found shape [128, 64, 8], expected [128, 64, 4]"),
            std::string::npos) << e;
  const auto missing = rewrite_gguf(src, "noexps", [](gguf::Writer&) {}, {"blk.2.ffn_down_exps.weight"});
  e = load_error(missing);
  EXPECT_NE(e.find("tensor 'blk.2.ffn_down_exps.weight' is missing"), std::string::npos) << e;
  for (const auto& p : {used, none, huge, fewer, missing}) std::filesystem::remove(p);
}

TEST(ArchHparams, FixtureTokenizersLoad) {
  for (const std::string& arch : testing::kFixtureArchs) {
    const gguf::File file = gguf::File::open(fixture(arch));
    const Tokenizer tok = Tokenizer::from_gguf(file);
    EXPECT_EQ(tok.pre_name(), "default") << arch;  // the stories260K SPM vocabulary
    const ArchFixture f = ArchFixture::load(arch);
    // The prompt is the stories260K tokens of this text (PROVENANCE.md).
    EXPECT_EQ(tok.tokenize("Once upon a time, there was a little dog named Max. He liked to run in",
                           /*add_special=*/true),
              f.prompt)
        << arch;
  }
}

TEST(ArchLoader, OutputTiedToEmbeddingsWhenAbsent) {
  const auto path = rewrite_gguf(fixture("qwen2"), "tied", [](gguf::Writer&) {}, {"output.weight"});
  auto rt = make_runtime(false);
  auto m = Model::load(*rt, path);
  EXPECT_EQ(m->output(), m->token_embd());
  Session s(*m);
  EXPECT_EQ(s.decode(std::vector<int32_t>{1, 403, 407}).size(), 512u);
  std::filesystem::remove(path);
}

TEST(ArchLoader, OneErrorListsEveryMissingOrMisshapenTensor) {
  const auto path = rewrite_gguf(
      fixture("qwen3"), "missing",
      [](gguf::Writer& w) {
        const std::vector<float> wrong(16, 1.0f);
        const int64_t ne[] = {16};
        w.add_tensor("blk.2.attn_k_norm.weight", DType::kF32, ne,
                     std::span(reinterpret_cast<const uint8_t*>(wrong.data()),
                               wrong.size() * sizeof(float)));
      },
      {"blk.1.attn_q_norm.weight", "blk.3.attn_q_norm.weight", "blk.2.attn_k_norm.weight"});
  const std::string e = load_error(path);
  EXPECT_NE(e.find("architecture 'qwen3': 3 tensors do not match"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'blk.1.attn_q_norm.weight' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'blk.3.attn_q_norm.weight' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'blk.2.attn_k_norm.weight': found shape [16], expected [32]"),
            std::string::npos)
      << e;
  const auto problems = check_tensors(gguf::File::open(path));
  EXPECT_EQ(problems.size(), 3u);
  EXPECT_TRUE(check_tensors(gguf::File::open(fixture("qwen3"))).empty());
  std::filesystem::remove(path);
}

TEST(ArchLoader, EachArchitectureAsksForItsOwnTensors) {
  // A gemma3 file called phi3 lacks phi3's fused projections, and the
  // error names them.
  const auto path = rewrite_gguf(fixture("gemma3"), "asphi3", [](gguf::Writer& w) {
    w.set_string("general.architecture", "phi3");
    const gguf::File src = gguf::File::open(fixture("gemma3"));
    for (const gguf::KeyValue& kv : src.kvs()) {
      if (kv.key.starts_with("gemma3."))
        w.set_value("phi3." + std::string(kv.key.substr(7)), kv.value);
    }
  });
  const std::string e = load_error(path);
  EXPECT_NE(e.find("architecture 'phi3'"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'blk.0.attn_qkv.weight' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'blk.5.attn_qkv.weight' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'blk.0.ffn_up.weight': found shape [128, 256], expected [128, 512]"),
            std::string::npos)
      << e;
  std::filesystem::remove(path);
}

TEST(ArchLoader, RopeScalingTypes) {
  auto rt = make_runtime(false);
  auto with = [&](const std::string& tag, const std::function<void(gguf::Writer&)>& edit) {
    const auto path = rewrite_gguf(fixture("llama"), tag, edit);
    Hparams hp = read_hparams(gguf::File::open(path));
    std::filesystem::remove(path);
    return hp;
  };
  Hparams hp = with("linear", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
  });
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 0.25f);
  EXPECT_EQ(hp.rope_ext_factor, 0.0f);
  hp = with("yarn", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
    w.set_u32("llama.rope.scaling.original_context_length", 128);
  });
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 0.25f);
  EXPECT_EQ(hp.rope_ext_factor, 1.0f);
  EXPECT_NEAR(hp.rope_attn_factor, 1.0f, 1e-6f);  // ggml's YaRN magnitude is the only one
  EXPECT_EQ(hp.n_ctx_orig, 128);
  hp = with("none", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "none");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
  });
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f);
  const auto bad = rewrite_gguf(fixture("llama"), "dynamic", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "dynamic");
  });
  const std::string e = load_error(bad);
  EXPECT_NE(e.find("'llama.rope.scaling.type': found \"dynamic\", expected one of none, linear, "
                   "yarn, longrope"),
            std::string::npos)
      << e;
  std::filesystem::remove(bad);
}

// Logits of `tokens` at positions pos (one sequence), every row.
std::vector<float> logits_at(const Model& m, std::span<const int32_t> tokens,
                             std::span<const int32_t> pos, int64_t n_ctx = 128) {
  Context ctx(m, {.n_ctx = n_ctx});
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], pos[i], {0}, true);
  ctx.decode(b);
  const auto all = ctx.all_logits();
  return {all.begin(), all.end()};
}

TEST(ArchRope, LinearScalingIsPositionsScaledDown) {
  // RoPE with factor 2 at positions 0, 2, 4, ... rotates as factor 1 at
  // 0, 1, 2, ...: the same logits (within f32 rounding of the angles).
  const auto path = rewrite_gguf(fixture("llama"), "linear2", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", 2.0f);
  });
  auto rt = make_runtime(false);
  auto plain = Model::load(*rt, fixture("llama"));
  auto scaled = Model::load(*rt, path);
  const ArchFixture f = ArchFixture::load("llama");
  std::vector<int32_t> pos, pos2;
  for (int32_t i = 0; i < static_cast<int32_t>(f.prompt.size()); ++i) {
    pos.push_back(i);
    pos2.push_back(2 * i);
  }
  const auto a = logits_at(*plain, f.prompt, pos);
  const auto b = logits_at(*scaled, f.prompt, pos2);
  EXPECT_LT(nmse(b, a), 1e-9);
  // And the factor matters: factor 2 at positions 0, 1, 2, ... differs.
  EXPECT_GT(nmse(logits_at(*scaled, f.prompt, pos), a), 1e-5);
  std::filesystem::remove(path);
}

TEST(ArchRope, LongRopeTakesItsLongFactorsPastTheOriginalContext) {
  // Phi-3 with LongRoPE factors: short ones of 1 (no change) while the
  // context fits rope.scaling.original_context_length (512), long ones of 2
  // (every frequency halved, so positions 2p rotate as p did) past it.
  const std::vector<float> ones(16, 1.0f), twos(16, 2.0f);
  auto bytes = [](const std::vector<float>& v) {
    return std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
  };
  const auto path = rewrite_gguf(fixture("phi3"), "longrope", [&](gguf::Writer& w) {
    const int64_t ne[] = {16};
    w.add_tensor("rope_factors_long.weight", DType::kF32, ne, bytes(twos));
    w.add_tensor("rope_factors_short.weight", DType::kF32, ne, bytes(ones));
  });
  auto rt = make_runtime(false);
  auto plain = Model::load(*rt, fixture("phi3"));
  auto longrope = Model::load(*rt, path);
  ASSERT_NE(longrope->weights().rope_long, nullptr);
  const ArchFixture f = ArchFixture::load("phi3");
  std::vector<int32_t> pos, pos2;
  for (int32_t i = 0; i < static_cast<int32_t>(f.prompt.size()); ++i) {
    pos.push_back(i);
    pos2.push_back(2 * i);
  }
  const auto want = logits_at(*plain, f.prompt, pos);
  EXPECT_LT(nmse(logits_at(*longrope, f.prompt, pos, 512), want), 1e-12);
  EXPECT_LT(nmse(logits_at(*longrope, f.prompt, pos2, 1024), want), 1e-9);
  EXPECT_GT(nmse(logits_at(*longrope, f.prompt, pos, 1024), want), 1e-5);
  std::filesystem::remove(path);
}

TEST(ArchRope, ShiftedKeysUnderYarnEqualKeysRopedThere) {
  // seq_add re-rotates cached keys; under YaRN the shift must rotate only
  // (not apply YaRN's magnitude again): decoding after a shift equals
  // decoding at the shifted positions from the start.
  const auto path = rewrite_gguf(fixture("qwen2"), "yarn", [](gguf::Writer& w) {
    w.set_string("qwen2.rope.scaling.type", "yarn");
    w.set_f32("qwen2.rope.scaling.factor", 4.0f);
    w.set_u32("qwen2.rope.scaling.original_context_length", 64);
  });
  auto rt = make_runtime(false);
  auto m = Model::load(*rt, path);
  ASSERT_EQ(m->hparams().rope_ext_factor, 1.0f);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286};
  const int32_t next = 261, delta = 40;
  Context shifted(*m, {.n_ctx = 128});
  Batch b;
  b.add_sequence(prompt, 0, 0);
  shifted.decode(b);
  shifted.cache().seq_add(0, 0, -1, delta);
  b.clear();
  b.add(next, static_cast<int32_t>(prompt.size()) + delta, {0}, true);
  shifted.decode(b);
  const std::vector<float> got(shifted.all_logits().begin(), shifted.all_logits().end());

  Context direct(*m, {.n_ctx = 128});
  b.clear();
  b.add_sequence(prompt, delta, 0);
  b.add(next, static_cast<int32_t>(prompt.size()) + delta, {0}, true);
  direct.decode(b);
  const auto want = direct.logits(b.size() - 1);
  // The f16 cache rounds the keys once more after the shift.
  EXPECT_LT(nmse(got, want), 1e-5);
  std::filesystem::remove(path);
}

TEST(ArchSlidingWindow, BatchesSplitAcrossPassesEqualOneBatch) {
  // The window mask spans passes: 24 tokens in passes of 5 see the same
  // keys as in one pass, on local and global layers alike.
  auto rt = make_runtime(false);
  auto m = Model::load(*rt, fixture("gemma3"));
  const ArchFixture f = ArchFixture::load("gemma3");
  Session one(*m);
  const auto a = one.decode(f.prompt, true);
  const std::vector<float> whole(a.begin(), a.end());
  Session split(*m, {.n_ctx = 64, .n_batch = 5});
  const auto b = split.decode(f.prompt, true);
  EXPECT_LT(nmse(b, whole), 1e-6);
}

TEST(ArchSlidingWindow, TheWindowMatters) {
  // With the window as wide as the context, positions past the window
  // change (PROVENANCE.md: by 0.17-0.78) and those inside it do not.
  const auto path = rewrite_gguf(fixture("gemma3"), "wide", [](gguf::Writer& w) {
    w.set_u32("gemma3.attention.sliding_window", 4096);
  });
  auto rt = make_runtime(false);
  auto narrow = Model::load(*rt, fixture("gemma3"));
  auto wide = Model::load(*rt, path);
  const ArchFixture f = ArchFixture::load("gemma3");
  Session a(*narrow), b(*wide);
  const auto la = a.decode(f.prompt, true);
  const std::vector<float> x(la.begin(), la.end());
  const auto y = b.decode(f.prompt, true);
  const size_t nv = 512;
  for (size_t i = 0; i < f.prompt.size(); ++i) {
    const double e = nmse(y.subspan(i * nv, nv), std::span(x).subspan(i * nv, nv));
    if (i < 8) {
      EXPECT_LT(e, 1e-12) << "position " << i;
    } else {
      EXPECT_GT(e, 1e-4) << "position " << i;
    }
  }
  std::filesystem::remove(path);
}

// The fixture test's NMSE limit is tight enough to see what each fixture is
// built to show: a model that drops Llama 3's rope_freqs, or rotates Gemma's
// local layers with the global base, or widens its window, exceeds it at
// some prompt position (measured worst: 6.8e-4, 3.0e-3, 5.3e-2).
TEST(ArchFixtureLimit, CatchesTheEffectsTheFixturesCarry) {
  auto worst_nmse = [](const std::string& arch, const std::filesystem::path& path) {
    auto rt = make_runtime(false);
    auto m = Model::load(*rt, path);
    const ArchFixture f = ArchFixture::load(arch);
    Session s(*m);
    const auto all = s.decode(f.prompt, true);
    const auto nv = static_cast<size_t>(f.n_vocab);
    double worst = 0;
    for (size_t i = 0; i < f.prompt.size(); ++i) {
      worst =
          std::max(worst, nmse(all.subspan(i * nv, nv), std::span(f.logits).subspan(i * nv, nv)));
    }
    std::filesystem::remove(path);
    return worst;
  };
  EXPECT_GT(worst_nmse("llama", rewrite_gguf(fixture("llama"), "no-rope-freqs",
                                             [](gguf::Writer&) {}, {"rope_freqs.weight"})),
            testing::kArchNmseLimit);
  EXPECT_GT(worst_nmse("gemma3", rewrite_gguf(fixture("gemma3"), "swa-base",
                                              [](gguf::Writer& w) {
                                                w.set_f32("gemma3.rope.freq_base_swa", 1e6f);
                                              })),
            testing::kArchNmseLimit);
  EXPECT_GT(worst_nmse("gemma3", rewrite_gguf(fixture("gemma3"), "no-window",
                                              [](gguf::Writer& w) {
                                                w.set_u32("gemma3.attention.sliding_window", 4096);
                                              })),
            testing::kArchNmseLimit);
}

}  // namespace
}  // namespace tessera
