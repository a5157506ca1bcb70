// Subcommands of the tessera CLI. Each file adds one subcommand to the app and
// returns the function that runs it once parsing succeeded.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace tessera {
class MpiWorld;
}

namespace tessera::cli {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_devices(CLI::App& app);
// These two also run across the ranks of an MPI job (mpirun -np N): rank 0
// runs the command, the others serve their stage of the model.
Runner add_run(CLI::App& app, const MpiWorld& world);
Runner add_perplexity(CLI::App& app, const MpiWorld& world);
Runner add_tokenize(CLI::App& app);
Runner add_embed(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_serve(CLI::App& app, const MpiWorld& world);
Runner add_chat(CLI::App& app, const MpiWorld& world);

}  // namespace tessera::cli
