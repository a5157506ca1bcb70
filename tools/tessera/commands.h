// Subcommands of the tessera CLI. Each file adds one subcommand to the app and
// returns the function that runs it once parsing succeeded.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace tessera::cli {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_devices(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat(CLI::App& app);

}  // namespace tessera::cli
