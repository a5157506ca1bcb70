// tessera: run quantized language models on the accelerators a machine has.
#include <cstdio>
#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/dist/mpi.h"

namespace {

// llama.cpp's short flags of more than one letter, which CLI11 cannot name:
// rewritten to their long forms before parsing.
constexpr std::pair<std::string_view, std::string_view> kLlamaShortFlags[] = {
    {"-np", "--parallel"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-ngl", "--n-gpu-layers"},
    {"-cmoe", "--cpu-moe"},
    {"-ncmoe", "--n-cpu-moe"},
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

  // Under mpirun every rank runs this same command line; rank 0 speaks for
  // the job, the others stay quiet unless a failure is theirs alone.
  std::unique_ptr<tessera::MpiWorld> world;
  try {
    world = std::make_unique<tessera::MpiWorld>(argc, argv);
  } catch (const tessera::Error& e) {
    fmt::print(stderr, "tessera: error: {}\n", e.what());
    return 1;
  }
  const bool front = world->rank() == 0;

  CLI::App app{"tessera: run quantized language models (GGUF) on CPUs and accelerators"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");

  std::vector<std::pair<CLI::App*, tessera::cli::Runner>> runners;
  std::vector<CLI::App*> split_commands;  // those that run across MPI ranks
  auto add_runner = [&](auto&& adder) {
    const size_t before = app.get_subcommands({}).size();
    tessera::cli::Runner run = adder();
    runners.emplace_back(app.get_subcommands({}).at(before), std::move(run));
  };
  auto add = [&](tessera::cli::Runner (*adder)(CLI::App&)) { add_runner([&] { return adder(app); }); };
  auto add_split = [&](tessera::cli::Runner (*adder)(CLI::App&, const tessera::MpiWorld&)) {
    add_runner([&] { return adder(app, *world); });
    split_commands.push_back(runners.back().first);
  };
  add_split(tessera::cli::add_run);
  add_split(tessera::cli::add_perplexity);
  add_split(tessera::cli::add_serve);
  add_split(tessera::cli::add_chat);
  add(tessera::cli::add_tokenize);
  add(tessera::cli::add_embed);
  add(tessera::cli::add_inspect);
  add(tessera::cli::add_devices);
  add(tessera::cli::add_bench);
  add(tessera::cli::add_synth);
  add(tessera::cli::add_quantize);



  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same line: rank 0 tells.
    if (!front) return e.get_exit_code();
    return app.exit(e);
  }

  // A failure that only this rank knows of ends the job at once when other
  // ranks may be waiting on it; one that every rank saw (or after the
  // workers were stopped) ends each rank plainly.
  auto failed = [&](const std::string& what) {
    const tessera::Transport* t = world->transport();
    const bool shared = t == nullptr || t->peers_done();
    if (front || !shared) {
      fmt::print(stderr, "tessera: error: {}{}\n",
                 world->size() > 1 && !front ? tessera::rank_name(*t, world->rank(), world->host()) + " " : "",
                 what);
    }
    if (!shared) world->abort(1);
    return 1;
  };
  try {
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      if (world->size() > 1 &&
          std::find(split_commands.begin(), split_commands.end(), sub) == split_commands.end()) {
        if (front) {
          fmt::print(stderr, "tessera: error: [mpi] '{}' runs in one process; of the commands, "
                     "run, perplexity, serve and chat run across MPI ranks\n", sub->get_name());
        }
        return 1;
      }
      return run();
    }
  } catch (const tessera::Error& e) {
    return failed(e.what());
  } catch (const std::exception& e) {
    return failed(e.what());
  }
  return 1;
}
