// `tessera embed` on the bert fixture: the vectors llama.cpp pools
// (tests/fixtures/archs/bert.*), in each output format; bad input named.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/model_test_util.h"
#include "tools/run_command.h"

namespace tessera::testing {
namespace {

std::string tessera_cmd(const std::string& args) {
  return std::string(TESSERA_BIN) + " " + args;
}

struct Fixture {
  std::string gguf;
  std::vector<std::string> texts;
  std::vector<std::vector<float>> vectors;  // llama.cpp's mean-pooled, not normalized
};

Fixture load_fixture() {
  const std::string dir = fixtures_dir() + "/archs/";
  std::ifstream js(dir + "bert.json");
  const nlohmann::json j = nlohmann::json::parse(js);
  Fixture f;
  f.gguf = dir + "bert.gguf";
  const auto n = j.at("n_embd").get<size_t>();
  std::ifstream e(dir + j.at("embeddings").get<std::string>(), std::ios::binary);
  for (const auto& t : j.at("texts")) {
    f.texts.push_back(t.at("text").get<std::string>());
    std::vector<float> v(n);
    e.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    f.vectors.push_back(v);
  }
  return f;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got.at(i)) - want[i]) * (double(got.at(i)) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return err / ref;
}

TEST(EmbedCli, ArrayOutputIsLlamaCppsPooledVectors) {
  const Fixture f = load_fixture();
  std::string texts;
  for (const std::string& t : f.texts) texts += (texts.empty() ? "" : "\n") + t;
  const std::string path = ::testing::TempDir() + "embed_texts.txt";
  std::ofstream(path) << texts << "\n\n";  // empty lines are no texts
  const CommandResult r = run_command(tessera_cmd("embed -m " + f.gguf + " -f " + path +
                                                  " --embd-normalize -1 --embd-output-format array"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = nlohmann::json::parse(r.out).get<std::vector<std::vector<float>>>();
  ASSERT_EQ(got.size(), f.vectors.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(nmse(got[i], f.vectors[i]), 1e-4) << f.texts[i];
  EXPECT_NE(r.err.find("4 texts"), std::string::npos) << r.err;
}

TEST(EmbedCli, JsonOutputIsUnitLengthByDefault) {
  const Fixture f = load_fixture();
  const CommandResult r = run_command(
      tessera_cmd("embed -m " + f.gguf + " -p 'Hello world' --embd-output-format json --pooling mean"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["data"].size(), 1u);
  const auto v = j["data"][0]["embedding"].get<std::vector<float>>();
  double norm = 0, dot = 0, ref = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    norm += double(v[i]) * v[i];
    dot += double(v[i]) * f.vectors[0][i];
    ref += double(f.vectors[0][i]) * f.vectors[0][i];
  }
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_GT(dot / std::sqrt(ref), 0.9999);  // the same direction as llama.cpp's
}

// --pooling none: each token's state its own embedding, in order, as
// llama-embedding prints them (text 0 is "Hello world": [CLS] hello world
// [SEP]), each a unit vector.
TEST(EmbedCli, PoolingNoneGivesEveryToken) {
  const Fixture f = load_fixture();
  const CommandResult r = run_command(
      tessera_cmd("embed -m " + f.gguf + " -p 'Hello world' --pooling none --embd-output-format json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["data"].size(), 4u);
  for (size_t i = 0; i < j["data"].size(); ++i) {
    EXPECT_EQ(j["data"][i]["index"].get<size_t>(), i);
    const auto v = j["data"][i]["embedding"].get<std::vector<float>>();
    double norm = 0;
    for (float x : v) norm += double(x) * x;
    EXPECT_NEAR(norm, 1.0, 1e-5) << "token " << i;
  }
  EXPECT_NE(r.err.find("none pooling"), std::string::npos) << r.err;
}

// A reranker with --pooling rank: QUERY<tab>DOCUMENT per line, the scores
// llama.cpp gives the fixture's pairs.
TEST(EmbedCli, RankPoolingScoresPairs) {
  const std::string dir = fixtures_dir() + "/archs/";
  std::ifstream js(dir + "bert_rerank.json");
  const nlohmann::json j = nlohmann::json::parse(js);
  std::ifstream e(dir + "bert_rerank.embd.f32", std::ios::binary);
  const std::string path = ::testing::TempDir() + "rank_pairs.txt";
  std::vector<float> want;
  {
    std::ofstream out(path);
    for (const auto& p : j["pairs"]) {
      out << p["query"].get<std::string>() << "\t" << p["document"].get<std::string>() << "\n";
      float s = 0;
      e.read(reinterpret_cast<char*>(&s), sizeof s);
      want.push_back(s);
    }
  }
  const CommandResult r = run_command(tessera_cmd("embed -m " + dir + "bert_rerank.gguf -f " + path +
                                                  " --pooling rank --embd-output-format array"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = nlohmann::json::parse(r.out).get<std::vector<std::vector<float>>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i].at(0), want[i], 5e-4);
  const CommandResult bad = run_command(tessera_cmd("embed -m " + dir + "bert_rerank.gguf -p 'no tab' --pooling rank"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("QUERY<tab>DOCUMENT"), std::string::npos) << bad.err;
}

TEST(EmbedCli, BadInputIsNamed) {
  const Fixture f = load_fixture();
  CommandResult r = run_command(tessera_cmd("embed -m " + f.gguf + " -f /nonexistent/texts.txt"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("[-f /nonexistent/texts.txt]"), std::string::npos) << r.err;
  r = run_command(tessera_cmd("embed -m " + f.gguf + " -p ''"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("found no text"), std::string::npos) << r.err;
  r = run_command(tessera_cmd("embed -m " + f.gguf));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-p TEXT or -f FILE"), std::string::npos) << r.err;
  // More tokens than -c allows: the text is named.
  r = run_command(tessera_cmd("embed -m " + f.gguf + " -c 4 --embd-separator '|' -p 'a|the quick brown fox'"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("text 2 of 2"), std::string::npos) << r.err;
  // Generation from an encoder is refused, naming why.
  r = run_command(tessera_cmd("run -m " + f.gguf + " -p hi -n 2"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("is an encoder"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera::testing
