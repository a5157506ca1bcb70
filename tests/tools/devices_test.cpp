// `tessera devices` as a user runs it.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_command.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

TEST(DevicesTest, JsonListsBackendsDevicesAndModules) {
  const CommandResult r = run_command(std::string(TESSERA_BIN) + " devices --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_TRUE(j["modules"].is_array());
  bool cpu = false;
  for (const json& b : j["backends"]) {
    for (const json& d : b["devices"]) {
      EXPECT_TRUE(d["name"].get<std::string>().starts_with(b["name"].get<std::string>()));
      EXPECT_FALSE(d["description"].get<std::string>().empty());
      EXPECT_LE(d["memory_free"].get<uint64_t>(), d["memory_total"].get<uint64_t>());
      for (const char* cap : {"async", "host_buffer", "buffer_from_host_ptr", "events"}) {
        EXPECT_TRUE(d["caps"][cap].is_boolean()) << cap;
      }
      if (d["name"] == "CPU0") {
        cpu = true;
        EXPECT_EQ(d["type"], "CPU");
      }
    }
  }
  EXPECT_TRUE(cpu) << r.out;
}

TEST(DevicesTest, RefusedModulesAreListedWithTheirReason) {
  // A file that looks like a module but is not one.
  const std::string dir = ::testing::TempDir() + "tessera-fake-modules";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/libtessera-backend-fake.so") << "not a shared object";
  const CommandResult r = run_command("TESSERA_BACKEND_PATH=" + dir + " " +
                                      std::string(TESSERA_BIN) + " devices");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("libtessera-backend-fake.so: refused: cannot open"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("CPU0"), std::string::npos) << r.out;  // and carries on
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::testing
