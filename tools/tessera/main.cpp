// tessera: run quantized language models on the accelerators a machine has.
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "tessera/error.h"

int main(int argc, char** argv) {
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
