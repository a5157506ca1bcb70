// The serving loop without a server: stories260K on the CPU, driven
// synchronously (run() / step()) so every case is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iterator>
#include <regex>
#include <memory>
#include <string>
#include <vector>

#include "models/model_test_util.h"
#include "serving/reasoning.h"
#include "serving/text_stream.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/gguf/gguf.h"
#include "tessera/grammar/grammar.h"
#include "tessera/models/model.h"
#include "tessera/runtime/runtime.h"
#include "tessera/serving/chat.h"
#include "tessera/serving/serving.h"

namespace tessera::serving {
namespace {

// Everything one request produced.
struct Result {
  std::vector<Event> events;
  std::string text() const {
    std::string t;
    for (const Event& e : events) t += e.text;
    return t;
  }
  const Event& last() const { return events.back(); }
};

class GeneratorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rt_ = make_runtime(false).release();
    model_ = Model::load(*rt_, testing::stories()).release();
    tok_ = new Tokenizer(Tokenizer::from_gguf(model_->file()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete model_;
    delete rt_;
  }

  static std::vector<TokenId> tokens(const std::string& text) { return tok_->tokenize(text, true, true); }

  static GenerationParams greedy(int32_t max_tokens) {
    GenerationParams p;
    p.sampling.temp = 0.0f;
    p.max_tokens = max_tokens;
    return p;
  }

  // Submits `prompt` with `params`; its events go to `out`.
  static std::shared_ptr<Request> submit(Generator& g, const std::vector<TokenId>& prompt,
                                         GenerationParams params, Result& out) {
    auto r = std::make_shared<Request>(prompt, std::move(params),
                                       [&out](Event&& e) { out.events.push_back(std::move(e)); });
    g.submit(r);
    return r;
  }

  static Result alone(const std::string& prompt, GenerationParams params, int64_t n_ctx = 512) {
    Generator g(*model_, *tok_, {.n_slots = 1, .n_ctx = n_ctx});
    Result out;
    submit(g, tokens(prompt), std::move(params), out);
    g.run();
    return out;
  }

  static Runtime* rt_;
  static Model* model_;
  static Tokenizer* tok_;
};
Runtime* GeneratorTest::rt_ = nullptr;
Model* GeneratorTest::model_ = nullptr;
Tokenizer* GeneratorTest::tok_ = nullptr;

TEST_F(GeneratorTest, RequestsInSlotsEachGetTheirTextAlone) {
  const std::vector<std::string> prompts = {"Once upon a time", "One day", "Lily was", "The sun",
                                            "Tom and Sam", "A little dog"};
  std::vector<std::string> want;
  for (const std::string& p : prompts) want.push_back(alone(p, greedy(24)).text());
  // Four slots for six requests: two wait, then join as slots free.
  Generator g(*model_, *tok_, {.n_slots = 4, .n_ctx = 4 * 128});
  std::vector<Result> got(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) submit(g, tokens(prompts[i]), greedy(24), got[i]);
  g.run();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].text(), want[i]) << prompts[i];
    EXPECT_EQ(got[i].last().finish, FinishReason::kLength);
    EXPECT_EQ(got[i].last().n_gen, 24);
    for (size_t e = 0; e + 1 < got[i].events.size(); ++e) EXPECT_FALSE(got[i].events[e].done);
  }
  EXPECT_EQ(g.metrics().requests, prompts.size());
  EXPECT_EQ(g.metrics().slots_busy, 0);
}

TEST_F(GeneratorTest, AStopStringAcrossTokensEndsTheTextWhereItStarts) {
  // The greedy text alone, one event per token: a stop string made of the
  // end of one token's text and the start of the next's spans the boundary.
  const Result free = alone("Once upon a time", greedy(30));
  std::string stop;
  for (size_t i = 3; i + 1 < free.events.size() && stop.empty(); ++i) {
    const std::string& a = free.events[i].text;
    const std::string& b = free.events[i + 1].text;
    if (a.size() >= 2 && b.size() >= 2) stop = a.substr(a.size() - 2) + b.substr(0, 2);
  }
  ASSERT_FALSE(stop.empty()) << free.text();
  const std::string text = free.text();
  const size_t cut = text.find(stop);
  ASSERT_NE(cut, std::string::npos);
  GenerationParams p = greedy(30);
  p.stop = {"never appears", stop};
  const Result r = alone("Once upon a time", p);
  EXPECT_EQ(r.text(), text.substr(0, cut)) << "stop '" << stop << "'";
  EXPECT_EQ(r.last().finish, FinishReason::kStop);
  EXPECT_LT(r.last().n_gen, free.last().n_gen);
}

TEST(TextStreamTest, AnIncompleteUtf8CharacterWaitsForItsLastBytes) {
  TextStream s;
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, three bytes
  EXPECT_FALSE(s.add("a" + euro.substr(0, 1)));
  EXPECT_EQ(s.take_ready(), "a");
  EXPECT_FALSE(s.add(euro.substr(1, 1)));
  EXPECT_EQ(s.take_ready(), "");
  EXPECT_FALSE(s.add(euro.substr(2) + "b"));
  EXPECT_EQ(s.take_ready(), euro + "b");
  const std::string emoji = "\xF0\x9F\x98\x80";  // four bytes, cut after two
  s.add(emoji.substr(0, 2));
  EXPECT_EQ(s.take_ready(), "");
  EXPECT_EQ(s.take_rest(), emoji.substr(0, 2));  // at the end, what is left goes out
}

TEST(TextStreamTest, APossibleStopStringWaitsAndIsCutWhenItCompletes) {
  TextStream s({"</end>", "STOP"});
  EXPECT_FALSE(s.add("hello </e"));
  EXPECT_EQ(s.take_ready(), "hello ");  // "</e" may start "</end>"
  EXPECT_FALSE(s.add("x"));             // "</ex" cannot
  EXPECT_EQ(s.take_ready(), "</ex");
  EXPECT_FALSE(s.add(" ST"));
  EXPECT_EQ(s.take_ready(), " ");
  EXPECT_TRUE(s.add("OP and more"));
  EXPECT_EQ(s.take_rest(), "");  // the text ends before the stop string
  TextStream t({"ab"});
  EXPECT_TRUE(t.add("xxab"));
  EXPECT_EQ(t.take_rest(), "xx");
}

TEST_F(GeneratorTest, CancelledMidPromptAndMidGenerationEachEndOnce) {
  // A prompt of several chunks (batch 8), cancelled after its first step.
  std::string long_prompt;
  for (int i = 0; i < 12; ++i) long_prompt += "Once upon a time there was a girl. ";
  Generator g(*model_, *tok_, {.n_slots = 2, .n_ctx = 1024, .n_batch = 8});
  Result mid_prompt, mid_gen;
  auto a = submit(g, tokens(long_prompt), greedy(50), mid_prompt);
  ASSERT_TRUE(g.step());
  a->cancel();
  g.step();
  ASSERT_EQ(mid_prompt.events.size(), 1u);
  EXPECT_EQ(mid_prompt.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(mid_prompt.last().n_gen, 0);
  // Mid-generation: the sink cancels after its third event.
  std::shared_ptr<Request> b;
  b = std::make_shared<Request>(tokens("One day"), greedy(200), [&](Event&& e) {
    mid_gen.events.push_back(std::move(e));
    if (mid_gen.events.size() == 3) b->cancel();
  });
  g.submit(b);
  g.run();
  ASSERT_FALSE(mid_gen.events.empty());
  EXPECT_TRUE(mid_gen.last().done);
  EXPECT_EQ(mid_gen.last().finish, FinishReason::kCancelled);
  EXPECT_LE(mid_gen.last().n_gen, 4);  // within one step of the cancel
  EXPECT_EQ(g.metrics().cancelled, 2u);
  EXPECT_EQ(g.metrics().slots_busy, 0);
  // A queued request cancelled before a slot took it ends too.
  Result queued;
  auto c = submit(g, tokens("The sun"), greedy(8), queued);
  c->cancel();
  g.run();
  ASSERT_EQ(queued.events.size(), 1u);
  EXPECT_EQ(queued.last().finish, FinishReason::kCancelled);
}

TEST_F(GeneratorTest, InterruptEndsEveryRequestRunningOrQueued) {
  Generator g(*model_, *tok_, {.n_slots = 1, .n_ctx = 512});
  Result running, queued;
  submit(g, tokens("Once upon a time"), greedy(100), running);
  submit(g, tokens("One day"), greedy(100), queued);
  g.step();
  g.step();
  std::atomic<bool> interrupt{true};
  g.run(&interrupt);
  EXPECT_EQ(running.last().finish, FinishReason::kCancelled);
  EXPECT_GE(running.last().n_gen, 1);
  EXPECT_EQ(queued.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(queued.events.size(), 1u);
}

TEST_F(GeneratorTest, APromptReusesTheLongestCachedPrefixWithTheSameText) {
  const std::string base = "Once upon a time, there was a little girl named Lily.";
  const std::string longer = base + " She had a red ball";
  const Result want = alone(longer, greedy(16));
  Generator g(*model_, *tok_, {.n_slots = 2, .n_ctx = 1024});
  Result first, second;
  submit(g, tokens(base), greedy(1), first);  // its one token is sampled, never decoded
  g.run();
  submit(g, tokens(longer), greedy(16), second);
  g.run();
  const std::vector<TokenId> a = tokens(base), b = tokens(longer);
  size_t common = 0;
  while (common < a.size() && a[common] == b[common]) ++common;
  EXPECT_EQ(second.last().n_cached, static_cast<int64_t>(common));
  EXPECT_EQ(second.text(), want.text());
  // Without cache_prompt nothing is reused.
  Result third;
  GenerationParams p = greedy(16);
  p.cache_prompt = false;
  submit(g, b, p, third);
  g.run();
  EXPECT_EQ(third.last().n_cached, 0);
  EXPECT_EQ(third.text(), want.text());
}

TEST_F(GeneratorTest, OnePromptForManyRequestsIsDecodedOnce) {
  const std::vector<TokenId> prompt = tokens("Once upon a time, there was a little girl named Lily.");
  const auto n = static_cast<uint64_t>(prompt.size());
  Generator g(*model_, *tok_, {.n_slots = 3, .n_ctx = 3 * 128});
  std::vector<Result> got(3);
  for (Result& r : got) submit(g, prompt, greedy(8), r);
  g.run();
  // The first decodes the prompt; the others copy all but its last token.
  EXPECT_EQ(g.metrics().prompt_tokens, n + 2);
  EXPECT_EQ(g.metrics().cached_tokens, 2 * (n - 1));
  EXPECT_EQ(got[1].text(), got[0].text());
  EXPECT_EQ(got[2].text(), got[0].text());
}

TEST_F(GeneratorTest, LogprobsComeFromTheSamplerChain) {
  GenerationParams p = greedy(6);
  p.top_logprobs = 3;
  const Result r = alone("Once upon a time", p);
  size_t tokens_seen = 0;
  for (const Event& e : r.events) {
    for (const auto& [chosen, top] : e.probs) {
      ++tokens_seen;
      ASSERT_EQ(top.size(), 3u);
      EXPECT_EQ(chosen.id, top[0].id);  // greedy picks the most likely
      EXPECT_FLOAT_EQ(chosen.logprob, top[0].logprob);
      EXPECT_LE(top[0].logprob, 0.0f);
      EXPECT_GE(top[0].logprob, top[1].logprob);
      EXPECT_GE(top[1].logprob, top[2].logprob);
    }
  }
  EXPECT_EQ(tokens_seen, 6u);
}

TEST_F(GeneratorTest, LimitsShutdownAndBadRequests) {
  Generator g(*model_, *tok_, {.n_slots = 2, .n_ctx = 256});
  EXPECT_EQ(g.slot_ctx(), 128);
  Result none;
  EXPECT_THROW(submit(g, {}, greedy(4), none), Error);                 // empty prompt
  EXPECT_THROW(submit(g, tokens("One day"), greedy(200), none), Error);  // past the slot
  EXPECT_THROW(submit(g, {1, 99999}, greedy(4), none), Error);          // outside the vocabulary
  GenerationParams bad = greedy(4);
  bad.sampling.top_p = 2.0f;
  EXPECT_THROW(submit(g, tokens("One day"), bad, none), Error);
  EXPECT_TRUE(none.events.empty());
  // max_tokens 0: the prompt only.
  Result zero;
  submit(g, tokens("One day"), greedy(0), zero);
  g.run();
  ASSERT_EQ(zero.events.size(), 1u);
  EXPECT_EQ(zero.last().finish, FinishReason::kLength);
  EXPECT_EQ(zero.last().n_gen, 0);
  EXPECT_EQ(zero.text(), "");
  // Shut down with requests queued: each ends once, later submits are refused.
  Result q1, q2;
  submit(g, tokens("One day"), greedy(8), q1);
  submit(g, tokens("The sun"), greedy(8), q2);
  g.shutdown();
  ASSERT_EQ(q1.events.size(), 1u);
  EXPECT_EQ(q1.last().finish, FinishReason::kShutdown);
  EXPECT_EQ(q2.last().finish, FinishReason::kShutdown);
  EXPECT_THROW(submit(g, tokens("One day"), greedy(8), none), Stopped);
}

TEST_F(GeneratorTest, AThreadedGeneratorServesRequestsFromOtherThreads) {
  const std::string want = alone("Once upon a time", greedy(12)).text();
  Generator g(*model_, *tok_, {.n_slots = 2, .n_ctx = 256});
  g.start();
  EventQueue q;
  g.submit(std::make_shared<Request>(tokens("Once upon a time"), greedy(12), q.sink()));
  std::string text;
  for (int i = 0; i < 600; ++i) {
    std::optional<Event> e = q.pop(std::chrono::milliseconds(100));
    if (!e) continue;
    text += e->text;
    if (e->done) break;
  }
  EXPECT_EQ(text, want);
  g.shutdown();
}

TEST_F(GeneratorTest, TextInMessagesNeverBecomesControlTokens) {
  // ChatML's markers are text to this vocabulary; its </s> is a control
  // token (EOS). A user who types "</s>" gets the text, the template's own
  // markers stay what they are.
  const ChatRenderer chat(model_->file(), *tok_, "llama2");
  const nlohmann::json messages = {{{"role", "user"}, {"content", "Say </s> and <s> now"}}};
  const std::string text = chat.render(messages, true);
  ASSERT_NE(text.find("</s>"), std::string::npos) << text;
  const std::vector<TokenId> loose = tok_->tokenize(text, true, true);
  const std::vector<TokenId> safe = chat.tokenize(messages, true, *tok_);
  auto count = [](const std::vector<TokenId>& v, TokenId t) { return std::count(v.begin(), v.end(), t); };
  EXPECT_GT(count(loose, tok_->eos()), 0) << "the check needs a render where </s> would parse";
  EXPECT_EQ(count(safe, tok_->eos()), 0);
  EXPECT_EQ(count(safe, tok_->bos()), 1);  // only the tokenizer's own
  // Where nothing was typed that spells a control token, the tokens are the same.
  const nlohmann::json plain = {{{"role", "system"}, {"content", "Be brief."}},
                                {{"role", "user"}, {"content", "Tell a story."}}};
  EXPECT_EQ(chat.tokenize(plain, true, *tok_), tok_->tokenize(chat.render(plain, true), true, true));
  // OpenAI's shapes: text parts are joined, null content is empty.
  const nlohmann::json parts = {{{"role", "user"},
                                 {"content", {{{"type", "text"}, {"text", "Tell a "}},
                                              {{"type", "text"}, {"text", "story."}}}}}};
  EXPECT_EQ(chat.render(parts, true), chat.render({{{"role", "user"}, {"content", "Tell a story."}}}, true));
  EXPECT_THROW(chat.render({{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}, true), ChatError);
  EXPECT_NO_THROW(chat.render({{{"role", "user"}, {"content", nullptr}}}, true));
}

}  // namespace
}  // namespace tessera::serving

namespace tessera::serving {
namespace {

// A session written by one generator and read by another over the same
// model continues exactly where the first stopped, decoding only the rest;
// phases and the stop string reach the caller; bad files are refused.
TEST_F(GeneratorTest, ASavedSessionContinuesInAFreshGenerator) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/generator.session";
  const std::vector<TokenId> prompt = tokens("Once upon a time");
  Result whole, first;
  std::vector<TokenId> continued;
  {
    Generator g(*model_, *tok_, {.n_slots = 2, .n_ctx = 512});
    submit(g, prompt, greedy(40), whole);
    g.run();
    g.clear_cache();
    GenerationParams with_ids = greedy(20);
    with_ids.top_logprobs = 0;  // the chosen tokens' ids come with the events
    auto r = submit(g, prompt, with_ids, first);
    EXPECT_EQ(r->phase(), Request::Phase::kQueued);
    g.run();
    EXPECT_EQ(r->phase(), Request::Phase::kDone);
    EXPECT_EQ(r->generated(), 20);
    // The cache holds the prompt and 19 generated tokens (the 20th was never decoded).
    EXPECT_EQ(g.save_session(file), prompt.size() + 19);
  }
  Generator g(*model_, *tok_, {.n_slots = 2, .n_ctx = 512});
  const std::vector<TokenId> loaded = g.load_session(file);
  ASSERT_EQ(loaded.size(), prompt.size() + 19);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), loaded.begin()));
  // The saved tokens and the 20th: the rest of the text, from the cache.
  std::vector<TokenId> generated;
  for (const Event& e : first.events) {
    for (const auto& p : e.probs) generated.push_back(p.first.id);
  }
  ASSERT_EQ(generated.size(), 20u);
  EXPECT_TRUE(std::equal(generated.begin(), generated.end() - 1, loaded.begin() + static_cast<ptrdiff_t>(prompt.size())));
  std::vector<TokenId> next = loaded;
  next.push_back(generated.back());
  Result rest;
  submit(g, next, greedy(20), rest);
  g.run();
  EXPECT_EQ(rest.last().n_cached, static_cast<int64_t>(loaded.size()));
  EXPECT_EQ(first.text() + rest.text(), whole.text());

  // Refused: not a session, truncated, another model's.
  const std::string junk = dir + "/junk.session";
  { std::ofstream(junk) << "not a session"; }
  EXPECT_THROW(g.load_session(junk), Error);
  const std::string cut = dir + "/cut.session";
  {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  }
  try {
    g.load_session(cut);
    ADD_FAILURE() << "a truncated session loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::unique_ptr<Model> other = Model::load(*rt_, testing::fixtures_dir() + "/archs/qwen2.gguf");
  const Tokenizer other_tok = Tokenizer::from_gguf(other->file());
  Generator h(*other, other_tok, {.n_slots = 1, .n_ctx = 256});
  try {
    h.load_session(file);
    ADD_FAILURE() << "another model's session loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
}

TEST_F(GeneratorTest, TheStopStringThatEndedTheTextIsReported) {
  const Result r = alone("Once upon a time", [] {
    GenerationParams p = greedy(60);
    p.stop = {"zzz", "Lily", "park"};
    return p;
  }());
  EXPECT_EQ(r.last().finish, FinishReason::kStop);
  EXPECT_EQ(r.last().stop, "Lily");  // "Lily" comes before "park" in this story
}

}  // namespace
}  // namespace tessera::serving

namespace tessera::serving {
namespace {

// The thinking splits from the answer however the text is cut into pieces.
TEST(ReasoningSplitterTest, SplitsAtEveryCut) {
  struct Case {
    bool open;
    std::string text, reasoning, content;
  };
  const std::vector<Case> cases = {
      {false, "<think>plan a</think>\n\nThe answer.", "plan a", "The answer."},
      {false, "\n <think>x</think>y", "x", "y"},
      {true, "step 1\nstep 2</think>Done", "step 1\nstep 2", "Done"},
      {false, "No thinking <think> here", "", "No thinking <think> here"},
      {false, "<think>never closed", "never closed", ""},
      {false, "<thin", "", "<thin"},
      {false, "<think>a</thinking> b</think>c", "a</thinking> b", "c"},
  };
  for (const Case& c : cases) {
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      for (size_t cut2 = cut; cut2 <= c.text.size(); cut2 += 3) {
        ReasoningSplitter s(c.open);
        std::string reasoning, content;
        for (const std::string_view piece : {std::string_view(c.text).substr(0, cut),
                                             std::string_view(c.text).substr(cut, cut2 - cut),
                                             std::string_view(c.text).substr(cut2)}) {
          const ReasoningSplitter::Parts p = s.add(piece);
          reasoning += p.reasoning;
          content += p.content;
        }
        const ReasoningSplitter::Parts rest = s.finish();
        EXPECT_EQ(reasoning + rest.reasoning, c.reasoning) << c.text << " cut " << cut << "," << cut2;
        EXPECT_EQ(content + rest.content, c.content) << c.text << " cut " << cut << "," << cut2;
      }
    }
  }
}

// In the generator: events carry the thinking apart from the text.
TEST_F(GeneratorTest, ThinkingComesApartFromTheAnswer) {
  GenerationParams p = greedy(80);
  p.sampling.temp = 1.0f;
  p.sampling.seed = 11;
  p.split_reasoning = true;
  p.masks = grammar::masks(grammar::Grammar::parse("root ::= \"<think>\" [a-z ]{3,12} \"</think>\" \" \" [A-Z] [a-z]{2,6} \".\"\n"), *tok_);
  const Result r = alone("Once upon a time", p);
  std::string reasoning;
  for (const Event& e : r.events) reasoning += e.reasoning;
  EXPECT_TRUE(std::regex_match(reasoning, std::regex("^[a-z ]{3,12}$"))) << reasoning;
  EXPECT_TRUE(std::regex_match(r.text(), std::regex("^[A-Z][a-z]{2,6}\\.$"))) << r.text();
}

}  // namespace
}  // namespace tessera::serving
