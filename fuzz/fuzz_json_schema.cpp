// libFuzzer target for the JSON-schema converter: the input is a schema's
// JSON. A schema json_schema_to_grammar refuses gives tessera::Error; one it
// accepts must give GBNF that Grammar::parse accepts, or refuses only for a
// limit (a syntax error or an undefined rule there is the converter's bug,
// and aborts). The run's -timeout bounds each input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  std::string text;
  try {
    text = tessera::grammar::json_schema_to_grammar(schema);
  } catch (const tessera::Error&) {
    return 0;
  }
  try {
    tessera::grammar::Grammar::parse(text);
  } catch (const tessera::Error& e) {
    if (std::string(e.what()).find("(limit k") == std::string::npos) {
      std::fprintf(stderr, "the converter wrote a grammar that does not parse: %s\n%s\n", e.what(), text.c_str());
      std::abort();
    }
  }
  return 0;
}
