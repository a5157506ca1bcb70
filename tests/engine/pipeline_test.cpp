// The pipeline without MPI: split_layers, and the protocol with each rank a
// thread of this process (a Transport of queues), so that builds without
// MPI test it too. The MPI runs are in tests/dist.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/core/error.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/placement.h"
#include "tessera/runtime/runtime.h"
#include "tessera/serving/serving.h"
#include "tessera/text/tokenizer.h"

namespace tessera {
namespace {

using testing::nmse;
using testing::stories;

std::vector<LayerRange> split(const std::string& path, int n, std::vector<double> shares = {}) {
  const gguf::File file = gguf::File::open(path);
  return split_layers(file, read_hparams(file).n_layer, n, shares);
}

TEST(SplitLayers, ContiguousNonEmptyAndCoveringEveryLayer) {
  for (int n = 1; n <= 5; ++n) {
    const std::vector<LayerRange> r = split(stories(), n);
    ASSERT_EQ(r.size(), static_cast<size_t>(n));
    EXPECT_EQ(r.front().begin, 0);
    EXPECT_EQ(r.back().end, 5);
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_GE(r[i].size(), 1);
      if (i > 0) {
        EXPECT_EQ(r[i].begin, r[i - 1].end);
      }
    }
  }
}

TEST(SplitLayers, SharesMoveTheBoundary) {
  // stories260K: 5 equal layers; the embedding (tied head) counts to the first.
  EXPECT_EQ(split(stories(), 2), (std::vector<LayerRange>{{0, 3}, {3, 5}}));
  EXPECT_EQ(split(stories(), 2, {3, 1}), (std::vector<LayerRange>{{0, 4}, {4, 5}}));
  EXPECT_EQ(split(stories(), 2, {1, 9}), (std::vector<LayerRange>{{0, 1}, {1, 5}}));
}

TEST(SplitLayers, ErrorsNameWhatIsWrong) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { split(stories(), 6); }).find("6 ranks for a model of 5 layers"),
            std::string::npos);
  EXPECT_NE(message([] { split(stories(), 2, {1, 2, 3}); }).find("[--split-ranks] 3 proportions for 2 ranks"),
            std::string::npos);
  EXPECT_NE(message([] { split(stories(), 2, {1, 0}); }).find("proportion 1 is 0, expected > 0"),
            std::string::npos);
}

// Ranks as threads: one queue of messages per (from, to).
class Mailboxes {
 public:
  void send(int from, int to, std::vector<std::byte> m) {
    std::lock_guard lock(mutex_);
    queues_[{from, to}].push_back(std::move(m));
    ready_.notify_all();
  }
  void recv(int from, int to, std::vector<std::byte>& m) {
    std::unique_lock lock(mutex_);
    auto& q = queues_[{from, to}];
    ready_.wait(lock, [&] { return !q.empty(); });
    m = std::move(q.front());
    q.pop_front();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> queues_;
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(Mailboxes& boxes, int rank, int size)
      : boxes_(boxes), rank_(rank), size_(size), host_("thread" + std::to_string(rank)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& host() const override { return host_; }
  void send(int to, std::vector<std::byte> m) override { boxes_.send(rank_, to, std::move(m)); }
  void recv(int from, std::vector<std::byte>& m) override { boxes_.recv(from, rank_, m); }
  std::vector<std::string> all_gather(const std::string&) override {
    fail(ErrorCategory::kUnsupported, "[test] no collectives here");
  }

 private:
  Mailboxes& boxes_;
  int rank_, size_;
  std::string host_;
};

// One stage per thread: rank 0 here, the others serving until it stops.
class ThreadPipeline {
 public:
  ThreadPipeline(const std::string& path, int n, std::vector<double> shares = {}) {
    const std::vector<LayerRange> ranges = split(path, n, shares);
    for (int r = 0; r < n; ++r) {
      transports_.push_back(std::make_unique<ThreadTransport>(boxes_, r, n));
      runtimes_.push_back(make_runtime());
    }
    for (int r = n - 1; r >= 0; --r) {
      auto pipeline = std::make_shared<Pipeline>(*transports_[static_cast<size_t>(r)], ranges);
      PlacementOptions po;
      po.pipeline = pipeline;
      auto model = load_model(*runtimes_[static_cast<size_t>(r)], path, po);
      pipeline->start();
      if (r == 0) {
        front_ = std::move(model);
        front_pipeline_ = pipeline;
      } else {
        workers_.emplace_back([m = std::shared_ptr<Model>(std::move(model)), pipeline] {
          pipeline->serve(*m);
        });
      }
    }
  }
  ~ThreadPipeline() {
    front_pipeline_.reset();  // rank 0's Pipeline sends stop
    for (std::thread& t : workers_) t.join();
  }
  const Model& front() const { return *front_; }
  Pipeline& pipeline() const { return *front_pipeline_; }
  // Options for a context on rank 0: `o` with this pipeline.
  ContextOptions on_front(ContextOptions o) const {
    o.pipeline = front_pipeline_.get();
    return o;
  }

 private:
  Mailboxes boxes_;
  std::vector<std::unique_ptr<ThreadTransport>> transports_;
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  std::unique_ptr<Model> front_;
  std::shared_ptr<Pipeline> front_pipeline_;
  std::vector<std::thread> workers_;
};

TEST(PipelineThreads, LogitsEqualTheWholeModelThroughCacheOperations) {
  auto runtime = make_runtime();
  const auto whole = load_model(*runtime, stories());
  for (int n : {2, 3, 5}) {
    SCOPED_TRACE(n);
    ThreadPipeline pipeline(stories(), n);
    EXPECT_EQ(pipeline.front().layer_range(), (LayerRange{0, split(stories(), n)[0].end}));
    const ContextOptions co{.n_ctx = 128, .n_batch = 8};
    Context a(pipeline.front(), pipeline.on_front(co)), b(*whole, co);
    std::mt19937 rng(n);
    auto step = [&](const Batch& batch, const char* what) {
      a.decode(batch);
      b.decode(batch);
      ASSERT_EQ(a.all_logits().size(), b.all_logits().size()) << what;
      EXPECT_EQ(nmse(a.all_logits(), b.all_logits()), 0.0) << what;
    };
    auto tokens = [&](size_t k) {
      std::vector<int32_t> t(k);
      for (int32_t& x : t) x = static_cast<int32_t>(rng() % 512);
      return t;
    };
    Batch batch;
    batch.add_sequence(tokens(19), 0, 0, true);
    step(batch, "prompt of 19 in 3 passes");
    for (auto* c : {&a, &b}) c->cache().seq_add(0, 4, -1, -2);
    batch.clear();
    batch.add_sequence(tokens(2), 17, 0, true);
    step(batch, "after a K shift");
    for (auto* c : {&a, &b}) c->cache().seq_rm(0, 10, -1);
    batch.clear();
    batch.add_sequence(tokens(3), 10, 0, false);
    step(batch, "after seq_rm");
  }
}

TEST(PipelineThreads, AWorkerFailureIsAnErrorNamingTheRank) {
  ThreadPipeline pipeline(stories(), 2);
  Context ctx(pipeline.front(), pipeline.on_front({.n_ctx = 64}));
  // A K shift whose length does not match the workers' cache: rank 1 fails,
  // and the front hears of it (rank 0 checks after the others).
  Pipeline& p = pipeline.pipeline();
  std::vector<int32_t> wrong(3, 0);
  try {
    p.shift(1, wrong);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[rank 1 on thread1]"), std::string::npos) << e.what();
  }
  // The pipeline still works afterwards.
  Batch batch;
  batch.add_sequence(std::vector<int32_t>{1, 2, 3}, 0, 0, false);
  EXPECT_NO_THROW(ctx.decode(batch));
  try {
    p.shift(99, std::vector<int32_t>(65, 0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no context 99"), std::string::npos) << e.what();
  }
}

TEST(PipelineThreads, BatchesInFlightEqualOneAtATime) {
  auto runtime = make_runtime();
  const auto whole = load_model(*runtime, stories());
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    ThreadPipeline pipeline(stories(), n);
    const ContextOptions co{.n_ctx = 256, .n_batch = 512};
    Context a(pipeline.front(), pipeline.on_front(co)), b(*whole, co);
    EXPECT_EQ(a.pipeline_depth(), n);
    EXPECT_EQ(b.pipeline_depth(), 1);
    std::mt19937 rng(n);
    auto tokens = [&](size_t k) {
      std::vector<int32_t> t(k);
      for (int32_t& x : t) x = static_cast<int32_t>(rng() % 512);
      return t;
    };
    // One at a time on the whole model; each batch's logits kept.
    auto expect = [&](const Batch& batch) {
      b.decode(batch);
      return std::vector<float>(b.all_logits().begin(), b.all_logits().end());
    };
    auto check = [&](const std::vector<float>& want, const char* what) {
      a.collect();
      ASSERT_EQ(a.all_logits().size(), want.size()) << what;
      EXPECT_EQ(nmse(a.all_logits(), want), 0.0) << what;
    };
    // A prompt of 100 in micro-batches (passes of 32, all in flight at
    // once), and a second sequence's prompt behind it.
    Batch p0, p1;
    p0.add_sequence(tokens(100), 0, 0, true);
    p1.add_sequence(tokens(40), 0, 1, false);
    const std::vector<float> w0 = expect(p0), w1 = expect(p1);
    a.submit(p0);
    a.submit(p1);
    EXPECT_EQ(a.in_flight(), 2u);
    // Sent without waiting: 100 tokens as passes of 32, 32, 32, 4; 40 as 32, 8.
    EXPECT_EQ(pipeline.pipeline().passes_in_flight(), 6u);
    check(w0, "prompt of 100");
    check(w1, "second prompt");
    EXPECT_EQ(a.in_flight(), 0u);
    // The cache changes while a batch is in flight: it acts on the next.
    Batch t0, t1;
    t0.add(5, 100, {0}, true);
    t1.add(7, 20, {1}, true);
    const std::vector<float> v0 = expect(t0);
    b.cache().seq_rm(1, 20, -1);
    const std::vector<float> v1 = expect(t1);
    a.submit(t0);
    a.cache().seq_rm(1, 20, -1);
    a.submit(t1);
    check(v0, "token of sequence 0");
    check(v1, "sequence 1 after seq_rm");
    EXPECT_EQ(a.cache().used(), b.cache().used());
    // Misuse: nothing to collect; a K shift with a batch in flight.
    EXPECT_THROW(a.collect(), Error);
    Batch t2;
    t2.add(9, 101, {0}, true);
    a.submit(t2);
    a.cache().seq_add(1, 0, -1, 3);
    Batch t3;
    t3.add(11, 24, {1}, true);
    EXPECT_THROW(a.submit(t3), Error);
    a.collect();
    EXPECT_NO_THROW(a.decode(t3));  // the shift runs once nothing is in flight
  }
}

// The serving loop on a pipeline keeps several groups of slots in flight;
// each request's text is the one it gets from one process.
TEST(PipelineThreads, AGeneratorOnAPipelineWritesWhatOneProcessWrites) {
  auto runtime = make_runtime();
  const auto whole = load_model(*runtime, stories());
  const Tokenizer tok = Tokenizer::from_gguf(whole->file());
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Tom", "The dog ran",
                                            "One day, a little bird", "Sam had a red ball"};
  auto generate = [&](const Model& model, Pipeline* pipeline) {
    serving::Generator g(model, tok, {.n_slots = 4, .n_ctx = 1024, .pipeline = pipeline});
    std::vector<std::string> texts(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      serving::GenerationParams p;
      p.sampling.temp = i == 4 ? 0.8f : 0.0f;  // one sampled, seeded
      p.sampling.seed = 42;
      p.max_tokens = 24;
      p.ignore_eos = true;
      g.submit(std::make_shared<serving::Request>(
          tok.tokenize(prompts[i], true, true), p,
          [&texts, i](serving::Event&& e) { texts[i] += e.text; }));
    }
    g.run();
    return texts;
  };
  const std::vector<std::string> want = generate(*whole, nullptr);
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    ThreadPipeline pipeline(stories(), n);
    const std::vector<std::string> got = generate(pipeline.front(), &pipeline.pipeline());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_FALSE(got[i].empty());
      EXPECT_EQ(got[i], want[i]) << prompts[i];
    }
  }
}

}  // namespace
}  // namespace tessera
