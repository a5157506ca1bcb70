// Backend modules: a good one loads and computes; bad ones are refused with
// their reason and the runtime carries on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "tessera/core/graph.h"
#include "tessera/core/ops.h"
#include "tessera/runtime/buffer.h"
#include "tessera/runtime/runtime.h"
#include "tessera/runtime/stream.h"

namespace tessera {
namespace {

const std::filesystem::path kDir = TESSERA_TEST_MODULE_DIR;

std::filesystem::path module_path(const char* kind) {
  return kDir / (std::string("libtessera-backend-test") + kind + ".so");
}

TEST(ModuleTest, GoodModuleLoadsAndComputes) {
  Runtime rt;
  const ModuleReport& r = rt.load_module(module_path("good"));
  ASSERT_TRUE(r.loaded) << r.reason;
  EXPECT_TRUE(r.reason.empty());
  Backend* b = rt.find_backend("TESTMOD");
  ASSERT_NE(b, nullptr);
  Device& d = b->device(0);
  // Run an op through the module's code.
  Graph g;
  Tensor* a = g.new_tensor(DType::kF32, {3}, "a");
  Tensor* y = ops::scale(g, a, 2.0f, 1.0f);
  auto buf = d.buffer_type().allocate(1024);
  buf->place(*a, 0);
  buf->place(*y, 512);
  const float in[3] = {0.25f, -0.5f, 1.5f};
  buf->set_tensor(*a, in);
  g.expand(y);
  d.make_stream()->compute(g);
  float out[3];
  buf->get_tensor(*y, out);
  EXPECT_FLOAT_EQ(out[0], 1.5f);
  EXPECT_FLOAT_EQ(out[1], 0.0f);
  EXPECT_FLOAT_EQ(out[2], 4.0f);
}

TEST(ModuleTest, BadModulesAreRefusedWithTheirReason) {
  Runtime rt;
  EXPECT_FALSE(rt.load_module(module_path("bad_version")).loaded);
  EXPECT_NE(rt.modules().back().reason.find("interface version"), std::string::npos)
      << rt.modules().back().reason;
  EXPECT_FALSE(rt.load_module(module_path("no_entry")).loaded);
  EXPECT_NE(rt.modules().back().reason.find("no entry point"), std::string::npos)
      << rt.modules().back().reason;
  EXPECT_FALSE(rt.load_module(module_path("throws")).loaded);
  EXPECT_NE(rt.modules().back().reason.find("no device answered"), std::string::npos)
      << rt.modules().back().reason;
  EXPECT_FALSE(rt.load_module(kDir / "libtessera-backend-missing.so").loaded);
  EXPECT_NE(rt.modules().back().reason.find("cannot open"), std::string::npos);
  EXPECT_TRUE(rt.backends().empty());
  // The runtime carries on: a good module still loads afterwards.
  EXPECT_TRUE(rt.load_module(module_path("good")).loaded);
  EXPECT_EQ(rt.backends().size(), 1u);
}

TEST(ModuleTest, SecondCopyOfABackendIsRefused) {
  Runtime rt;
  ASSERT_TRUE(rt.load_module(module_path("good")).loaded);
  const ModuleReport& again = rt.load_module(module_path("good"));
  EXPECT_FALSE(again.loaded);
  EXPECT_NE(again.reason.find("already registered"), std::string::npos) << again.reason;
}

TEST(ModuleTest, FolderScanAndBackendPath) {
  Runtime rt;
  ::setenv("TESSERA_BACKEND_PATH", ("/nonexistent:" + kDir.string()).c_str(), 1);
  rt.load_default_modules();
  ::unsetenv("TESSERA_BACKEND_PATH");
  int loaded = 0, refused = 0;
  for (const ModuleReport& r : rt.modules()) (r.loaded ? loaded : refused) += 1;
  EXPECT_EQ(loaded, 1);   // good
  EXPECT_EQ(refused, 3);  // bad_version, no_entry, throws
  EXPECT_NE(rt.find_backend("testmod"), nullptr);
}

}  // namespace
}  // namespace tessera
