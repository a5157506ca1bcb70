// tessera: run quantized language models on the accelerators a machine has.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "tessera/error.h"

namespace {

// llama.cpp's short flags of more than one letter, which CLI11 cannot name:
// rewritten to their long forms before parsing.
constexpr std::pair<std::string_view, std::string_view> kLlamaShortFlags[] = {
    {"-np", "--parallel"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-ngl", "--n-gpu-layers"},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    for (const auto& [short_form, long_form] : kLlamaShortFlags) {
      if (a == short_form) a = long_form;
    }
  }
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  argc = static_cast<int>(arg_ptrs.size());
  argv = arg_ptrs.data();

  CLI::App app{"tessera: run quantized language models (GGUF) on CPUs and accelerators"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");

  std::vector<std::pair<CLI::App*, tessera::cli::Runner>> runners;
  auto add = [&](tessera::cli::Runner (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    tessera::cli::Runner run = adder(app);
    runners.emplace_back(app.get_subcommands({}).at(before), std::move(run));
  };
  add(tessera::cli::add_run);
  add(tessera::cli::add_perplexity);
  add(tessera::cli::add_tokenize);
  add(tessera::cli::add_inspect);
  add(tessera::cli::add_devices);
  add(tessera::cli::add_bench);
  add(tessera::cli::add_synth);
  add(tessera::cli::add_quantize);
  add(tessera::cli::add_serve);
  add(tessera::cli::add_chat);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const tessera::Error& e) {
    fmt::print(stderr, "tessera: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tessera: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
