// Runs a command line through the shell and captures its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "models/model_test_util.h"  // models_dir(), fixtures_dir()

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline CommandResult run_command(const std::string& command) {
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("tessera-test-stderr-" + std::to_string(::getpid()) + ".txt");
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>" + err_path.string()).c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.out.append(buf, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  result.err = ss.str();
  std::filesystem::remove(err_path);
  return result;
}

}  // namespace tessera::testing
