// The grammar stage's cost per sampled token: one apply() (the mask over the
// whole vocabulary) with a JSON grammar, at states where many tokens fit
// (inside a string) and few do (between values), on real vocabularies;
// beside it, the greedy chain alone (bans, penalties, NaN guard, argmax)
// as the baseline in the same run.
//   build/<dir>/bench/grammar_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>

#include "tessera/gguf/gguf.h"
#include "tessera/grammar/grammar.h"

namespace tessera {
namespace {

constexpr const char* kJson = R"(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

const Tokenizer& vocab(const std::string& name) {
  static std::map<std::string, std::pair<gguf::File, Tokenizer>>* cache = new std::map<std::string, std::pair<gguf::File, Tokenizer>>();
  auto it = cache->find(name);
  if (it == cache->end()) {
    gguf::File f = gguf::File::open(std::string(TESSERA_FIXTURES_DIR) + "/tokenizer/" + name);
    Tokenizer t = Tokenizer::from_gguf(f);
    it = cache->emplace(name, std::pair{std::move(f), std::move(t)}).first;
  }
  return it->second.second;
}

// warm: the same sampler each iteration (its state's mask cached after the
// first); cold: a fresh sampler each time (the walk of the token trie).
void run(benchmark::State& state, const std::string& name, const std::string& prefix, bool grammar,
         bool cold = false) {
  const Tokenizer& tok = vocab(name);
  const auto g = grammar::Grammar::parse(kJson);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> logits(tok.n_vocab());
  for (float& l : logits) l = normal(rng);
  auto make = [&] {
    std::vector<std::unique_ptr<SamplerStage>> masks;
    if (grammar) masks.push_back(grammar::stage(g, tok));
    SamplerParams p;
    p.temp = 0;
    auto s = std::make_unique<Sampler>(p, 4096, std::move(masks));
    s->sample(logits);  // the prompt is over; now the output:
    return s;
  };
  std::unique_ptr<Sampler> sampler = make();
  Sampler& s = *sampler;
  std::vector<TokenId> accepted;
  // The prefix as output tokens: longest piece first (tokenize() would add
  // SentencePiece's leading space).
  for (size_t at = 0; at < prefix.size();) {
    TokenId best = -1;
    size_t best_n = 0;
    for (TokenId t = 0; t < static_cast<TokenId>(tok.n_vocab()); ++t) {
      const std::string piece = tok.token_to_piece(t, false);
      if (piece.size() > best_n && prefix.compare(at, piece.size(), piece) == 0) best = t, best_n = piece.size();
    }
    s.accept(best);
    accepted.push_back(best);
    at += best_n;
  }
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      sampler = make();
      for (TokenId t : accepted) sampler->accept(t);
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(sampler->sample(logits));
  }
  state.counters["vocab"] = static_cast<double>(tok.n_vocab());
}

void BM_Greedy(benchmark::State& s) { run(s, "ggml-vocab-llama-spm.gguf", "", false); }
void BM_JsonInString_LlamaSpm(benchmark::State& s) { run(s, "ggml-vocab-llama-spm.gguf", "{\"name\": \"Al", true); }
void BM_JsonAfterKey_LlamaSpm(benchmark::State& s) { run(s, "ggml-vocab-llama-spm.gguf", "{\"name\":", true); }
void BM_JsonInString_Gpt2(benchmark::State& s) { run(s, "ggml-vocab-gpt-2.gguf", "{\"name\": \"Al", true); }
void BM_JsonInString_LlamaSpm_Cold(benchmark::State& s) { run(s, "ggml-vocab-llama-spm.gguf", "{\"name\": \"Al", true, true); }
void BM_JsonAfterKey_LlamaSpm_Cold(benchmark::State& s) { run(s, "ggml-vocab-llama-spm.gguf", "{\"name\":", true, true); }
void BM_JsonInString_Gpt2_Cold(benchmark::State& s) { run(s, "ggml-vocab-gpt-2.gguf", "{\"name\": \"Al", true, true); }
BENCHMARK(BM_JsonInString_LlamaSpm_Cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonAfterKey_LlamaSpm_Cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonInString_Gpt2_Cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonInString_LlamaSpm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonAfterKey_LlamaSpm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonInString_Gpt2)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
