// `tessera tokenize -m MODEL -p TEXT [--ids] [--no-bos] [--parse-special]`:
// the model's tokens for a text, as llama-tokenize prints them.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "tessera/gguf/gguf.h"
#include "tessera/text/tokenizer.h"

namespace tessera::cli {

Runner add_tokenize(CLI::App& app) {
  struct Options {
    std::string model;
    std::string prompt;
    bool ids = false;
    bool no_bos = false;
    bool parse_special = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Split a text into the model's tokens");
  cmd->add_option("-m,--model", opts->model, "GGUF file with a tokenizer")->required();
  cmd->add_option("-p,--prompt", opts->prompt, "Text to tokenize")->required();
  cmd->add_flag("--ids", opts->ids, "Print only the ids, as [1, 2, 3]");
  cmd->add_flag("--no-bos", opts->no_bos, "Add no BOS/EOS even when the model asks for them");
  cmd->add_flag("--parse-special", opts->parse_special,
                "Turn special-token text such as <s> into those tokens");
  return [opts]() {
    const gguf::File file = gguf::File::open(opts->model);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    const std::vector<TokenId> ids =
        tokenizer.tokenize(opts->prompt, !opts->no_bos, opts->parse_special);
    if (opts->ids) {
      fmt::print("[{}]\n", fmt::join(ids, ", "));
      return 0;
    }
    for (const TokenId id : ids) fmt::print("{:>6} -> '{}'\n", id, tokenizer.token_to_piece(id));
    return 0;
  };
}

}  // namespace tessera::cli
