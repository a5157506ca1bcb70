// Weights images (ModelOptions::weights_cache): a first load writes one, a
// later load maps it and computes the same logits bit for bit; an image that
// does not check out (bytes, header, size, rows unlike the file's) is never
// used but replaced; a changed file gets a new image and its old ones go; a
// directory that cannot take one leaves the load as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "models/model_test_util.h"
#include "tessera/backends/builtin.h"
#include "tessera/engine/engine.h"
#include "tessera/models/model.h"
#include "tessera/models/quantize.h"
#include "tessera/models/synth.h"
#include "tessera/runtime/runtime.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using State = WeightsImageUse::State;

class WeightsImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / fmt::format("weights_image_{}", getpid());
    fs::create_directories(dir_);
    images_ = dir_ / "images";
    rt_ = make_runtime(false);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path synth(const std::string& name, DType type, uint64_t seed = 1) {
    SynthOptions o;
    o.shape = *find_synth_shape("tiny");
    o.type = type;
    o.vocab = fixtures_dir() + "/tokenizer/ggml-vocab-llama-spm.gguf";
    o.seed = seed;
    const fs::path path = dir_ / name;
    synthesize_model(o, path);
    return path;
  }

  std::unique_ptr<Model> load(const fs::path& path, fs::path images, uint64_t keep_free = 0,
                              bool fuse = true) {
    ModelOptions o;
    o.fuse_projections = fuse;
    o.weights_cache = std::move(images);
    o.weights_cache_min_bytes = 0;
    o.weights_cache_keep_free = keep_free;
    progress_.clear();
    o.progress = [this](uint64_t done, uint64_t total) { progress_.emplace_back(done, total); };
    return Model::load(*rt_, path, o);
  }

  // The last load's progress rose to its total, which never changed.
  void expect_progress_rose() const {
    ASSERT_FALSE(progress_.empty());
    const uint64_t total = progress_.back().second;
    EXPECT_EQ(progress_.back().first, total);
    for (size_t i = 0; i < progress_.size(); ++i) {
      EXPECT_EQ(progress_[i].second, total) << i;
      if (i > 0) {
        EXPECT_GE(progress_[i].first, progress_[i - 1].first) << i;
      }
    }
  }

  static std::vector<float> logits(const Model& m) {
    Session s(m);
    const std::vector<int32_t> prompt = {1, 9038, 2501, 263, 931};
    std::span<const float> first = s.decode(prompt);
    std::vector<float> out(first.begin(), first.end());
    const int32_t next = 29871;
    std::span<const float> second = s.decode(std::span(&next, 1));
    out.insert(out.end(), second.begin(), second.end());
    return out;
  }

  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    if (fs::exists(images_)) {
      for (const auto& e : fs::directory_iterator(images_)) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Overwrites `n` bytes at `at` of `path`, keeping its modification time.
  static void patch(const fs::path& path, uint64_t at, std::span<const uint8_t> bytes) {
    const auto when = fs::last_write_time(path);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.close();
    fs::last_write_time(path, when);
  }
  static std::vector<uint8_t> read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_, images_;
  std::unique_ptr<Runtime> rt_;
  std::vector<std::pair<uint64_t, uint64_t>> progress_;
};

// Every repacked type the CPU reads (F16, Q8_0, Q4_0, K-quants) and the
// plain host buffer beside them (F32 norms).
TEST_F(WeightsImageTest, AFirstLoadWritesItAndALaterOneMapsItWithTheSameLogits) {
  const fs::path f16 = synth("m-f16.gguf", DType::kF16);
  QuantizeOptions q;
  q.mix = *quantize_mix_from_name("Q4_K_M");
  const fs::path q4km = dir_ / "m-q4_k_m.gguf";
  quantize_model(f16, q4km, q);
  for (const fs::path& path : {f16, synth("m-q8_0.gguf", DType::kQ8_0), synth("m-q4_0.gguf", DType::kQ4_0), q4km}) {
    SCOPED_TRACE(path.filename().string());
    fs::remove_all(images_);
    const std::vector<float> want = logits(*load(path, {}));

    const std::unique_ptr<Model> first = load(path, images_);
    EXPECT_EQ(first->weights_image().state, State::kWritten) << first->weights_image().reason;
    expect_progress_rose();  // through the copy and the image
    const uint64_t image_bytes = first->weights_image().bytes, total = progress_.back().second;
    EXPECT_GT(total, image_bytes);
    EXPECT_EQ(logits(*first), want);
    ASSERT_EQ(files(), std::vector{first->weights_image().path});  // no temporary file left
    EXPECT_EQ(fs::file_size(first->weights_image().path), first->weights_image().bytes);
    EXPECT_EQ(first->weights_image().path.extension(), ".tsw");
    EXPECT_TRUE(first->weights_image().path.filename().string().starts_with(path.stem().string() + "-"));

    const std::unique_ptr<Model> second = load(path, images_);
    EXPECT_EQ(second->weights_image().state, State::kMapped) << second->weights_image().reason;
    expect_progress_rose();
    EXPECT_EQ(second->weights_image().path, first->weights_image().path);
    EXPECT_EQ(logits(*second), want);
    EXPECT_EQ(logits(*first), want);  // both at once, over the same file
  }
}

TEST_F(WeightsImageTest, AnImageThatDoesNotCheckOutIsReplaced) {
  const fs::path path = synth("m.gguf", DType::kQ8_0);
  const std::vector<float> want = logits(*load(path, {}));
  const fs::path image = load(path, images_)->weights_image().path;
  const uint64_t size = fs::file_size(image);
  struct Damage {
    const char* what;
    std::function<void()> apply;
    const char* reason;
  };
  const uint8_t junk[] = {0x5a, 0xa5, 0x5a, 0xa5};
  const uint8_t big[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  const Damage damages[] = {
      {"a byte of the weights", [&] { patch(image, (uint64_t{2} << 20) + 100, std::span(junk, 1)); },
       "do not hash"},
      {"the magic", [&] { patch(image, 0, junk); }, "not a weights image"},
      // A header length past the file (and past the 64 MiB any header may take): refused
      // before anything of that size is read or allocated.
      {"the header's length", [&] { patch(image, 8, std::span(big, 8)); }, "header of"},
      {"the header text", [&] { patch(image, 40, junk); }, "header hash"},
      {"truncated", [&] { fs::resize_file(image, size - 4096); }, "bytes, expected"},
      {"empty", [&] { fs::resize_file(image, 0); }, "not a weights image"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    const std::vector<uint8_t> before = read(image);
    d.apply();
    ASSERT_NE(read(image), before);
    const std::unique_ptr<Model> m = load(path, images_);
    EXPECT_EQ(m->weights_image().state, State::kWritten);
    EXPECT_NE(m->weights_image().reason.find(d.reason), std::string::npos) << m->weights_image().reason;
    EXPECT_EQ(logits(*m), want);
    EXPECT_EQ(files(), std::vector{image});
    EXPECT_EQ(read(image), before);  // written again, the same bytes
    EXPECT_EQ(load(path, images_)->weights_image().state, State::kMapped);
  }
}

// The file changed under the same path, size, inode and time (its bytes
// patched in place): the image's description still matches, its hashes too,
// but the rows read back from it differ from the file's.
TEST_F(WeightsImageTest, RowsUnlikeTheFilesRejectTheImage) {
  const fs::path path = synth("m.gguf", DType::kF16);
  const fs::path image = load(path, images_)->weights_image().path;
  // The first bytes of blk.0.ffn_down.weight, found in the file.
  std::vector<uint8_t> head;
  {
    const gguf::File f = gguf::File::open(path);
    const auto data = f.tensor_data(*f.find_tensor("blk.0.ffn_down.weight"));
    head.assign(data.begin(), data.begin() + 64);
  }
  const std::vector<uint8_t> all = read(path);
  const auto at = std::search(all.begin(), all.end(), head.begin(), head.end());
  ASSERT_NE(at, all.end());
  const uint8_t other[] = {static_cast<uint8_t>(head[0] ^ 0x40)};
  patch(path, static_cast<uint64_t>(at - all.begin()), other);
  const std::vector<float> want = logits(*load(path, {}));

  const std::unique_ptr<Model> m = load(path, images_);
  EXPECT_EQ(m->weights_image().state, State::kWritten);
  EXPECT_NE(m->weights_image().reason.find("rows differ"), std::string::npos) << m->weights_image().reason;
  EXPECT_EQ(m->weights_image().path, image);
  EXPECT_EQ(logits(*m), want);
  EXPECT_EQ(load(path, images_)->weights_image().state, State::kMapped);
}

// Another placement of the same file (projections not fused) has its own
// image beside the first; a changed file gets a new one, and the images of
// its earlier version go, another model's stay.
TEST_F(WeightsImageTest, AChangedFileGetsANewImageAndTheOldOnesGo) {
  const fs::path path = synth("m.gguf", DType::kQ4_0);
  const fs::path fused = load(path, images_)->weights_image().path;
  const std::unique_ptr<Model> unfused_model = load(path, images_, 0, false);
  const fs::path unfused = unfused_model->weights_image().path;
  EXPECT_EQ(unfused_model->weights_image().state, State::kWritten);
  EXPECT_NE(unfused, fused);
  const fs::path other = synth("other.gguf", DType::kQ4_0);
  const fs::path other_image = load(other, images_)->weights_image().path;
  EXPECT_EQ(files().size(), 3u);
  EXPECT_EQ(load(path, images_)->weights_image().state, State::kMapped);
  EXPECT_EQ(load(path, images_, 0, false)->weights_image().state, State::kMapped);

  fs::remove(path);
  synth("m.gguf", DType::kQ4_0, 2);  // another seed: another model
  const std::vector<float> want = logits(*load(path, {}));
  const std::unique_ptr<Model> m = load(path, images_);
  EXPECT_EQ(m->weights_image().state, State::kWritten);
  EXPECT_NE(m->weights_image().path, fused);
  EXPECT_EQ(logits(*m), want);
  std::vector<fs::path> expect = {m->weights_image().path, other_image};
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(files(), expect);
}

TEST_F(WeightsImageTest, NoImageWhereNoneCanBeWrittenAndTheLoadGoesOn) {
  const fs::path path = synth("m.gguf", DType::kQ8_0);
  const std::vector<float> want = logits(*load(path, {}));
  {
    std::ofstream(dir_ / "a-file") << "x";
    const std::unique_ptr<Model> m = load(path, dir_ / "a-file" / "images");
    EXPECT_EQ(m->weights_image().state, State::kFailed);
    EXPECT_NE(m->weights_image().reason.find("cannot create"), std::string::npos) << m->weights_image().reason;
    EXPECT_EQ(logits(*m), want);
  }
  {
    const std::unique_ptr<Model> m = load(path, images_, uint64_t{1} << 62);  // keep 4 EiB free
    EXPECT_EQ(m->weights_image().state, State::kFailed);
    EXPECT_NE(m->weights_image().reason.find("MiB needed"), std::string::npos) << m->weights_image().reason;
    EXPECT_EQ(logits(*m), want);
    EXPECT_TRUE(files().empty());
  }
  {
    ModelOptions o;
    o.weights_cache = images_;  // the default minimum: this model is far smaller
    const std::unique_ptr<Model> m = Model::load(*rt_, path, o);
    EXPECT_EQ(m->weights_image().state, State::kNone);
    EXPECT_TRUE(files().empty());
  }
  {
    // A temporary file of a process that is gone is cleared; the image is written.
    fs::create_directories(images_);
    std::ofstream(images_ / "m-0123456789abcdef.tsw.tmp.999999999") << "x";
    const std::unique_ptr<Model> m = load(path, images_);
    EXPECT_EQ(m->weights_image().state, State::kWritten);
    EXPECT_EQ(files(), std::vector{m->weights_image().path});
  }
}

}  // namespace
}  // namespace tessera::testing
