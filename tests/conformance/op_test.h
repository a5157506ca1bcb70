// The fixture every op suite derives from: one test body per op, run on every
// target (device and, for CPU0, ISA tier); names read
// Conformance/<Op>.MatchesReference_<cases>/<device>_<tier>.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "conformance/harness.h"

namespace tessera::conformance {

class OpTest : public ::testing::TestWithParam<Target> {
 protected:
  void run(const std::vector<Case>& cases, const Naive& naive) {
    run_cases(GetParam(), cases, naive);
  }
};

}  // namespace tessera::conformance
