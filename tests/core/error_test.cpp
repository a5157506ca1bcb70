#include "tessera/core/error.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ErrorTest, FailFormatsMessageAndKeepsCategory) {
  try {
    fail(ErrorCategory::kInvalidFile, "[gguf {} @ 0x{:x}] found {}, expected {}", "m.gguf", 26,
         7, 3);
    FAIL() << "fail() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidFile);
    EXPECT_STREQ(e.what(), "[gguf m.gguf @ 0x1a] found 7, expected 3");
  }
}

TEST(ErrorTest, CheckNamesExpressionFileAndLine) {
  const int n = 3;
  try {
    TESSERA_CHECK(n == 4, "n was {}", n);
    FAIL() << "check passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInternal);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("n == 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("error_test.cpp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("n was 3"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(TESSERA_CHECK(n == 3));
}

TEST(ErrorTest, CategoryNamesAreDistinct) {
  EXPECT_EQ(category_name(ErrorCategory::kOutOfMemory), "out of memory");
  EXPECT_NE(category_name(ErrorCategory::kIo), category_name(ErrorCategory::kDevice));
}

}  // namespace
}  // namespace tessera
