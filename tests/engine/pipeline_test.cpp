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
#include "tessera/engine.h"
#include "tessera/error.h"
#include "tessera/placement.h"
#include "tessera/runtime.h"

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
  void send(int from, int to, std::span<const std::byte> m) {
    std::lock_guard lock(mutex_);
    queues_[{from, to}].emplace_back(m.begin(), m.end());
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
  void send(int to, std::span<const std::byte> m) override { boxes_.send(rank_, to, m); }
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
      } else {
        workers_.emplace_back([m = std::shared_ptr<Model>(std::move(model)), pipeline] {
          pipeline->serve(*m);
        });
      }
    }
  }
  ~ThreadPipeline() {
    front_.reset();  // its Pipeline sends stop
    for (std::thread& t : workers_) t.join();
  }
  const Model& front() const { return *front_; }

 private:
  Mailboxes boxes_;
  std::vector<std::unique_ptr<ThreadTransport>> transports_;
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  std::unique_ptr<Model> front_;
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
    Context a(pipeline.front(), co), b(*whole, co);
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
  Context ctx(pipeline.front(), {.n_ctx = 64});
  // A K shift whose length does not match the workers' cache: rank 1 fails,
  // and the front hears of it (rank 0 checks after the others).
  Pipeline& p = *pipeline.front().pipeline();
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

}  // namespace
}  // namespace tessera
