// The architectures this build knows, keyed on general.architecture. Each is
// defined in its own file (src/models/<name>.cpp) and listed here once.
#include <array>

#include "tessera/core/error.h"
#include "tessera/models/model.h"

namespace tessera {

extern const Architecture kLlamaArchitecture;
extern const Architecture kQwen2Architecture;
extern const Architecture kQwen3Architecture;
extern const Architecture kGemma3Architecture;
extern const Architecture kPhi3Architecture;
extern const Architecture kQwen3MoeArchitecture;
extern const Architecture kQwen2MoeArchitecture;
extern const Architecture kGptOssArchitecture;
extern const Architecture kOlmoeArchitecture;
extern const Architecture kBertArchitecture;
extern const Architecture kNomicBertArchitecture;
extern const Architecture kJinaBertV2Architecture;
extern const Architecture kModernBertArchitecture;

namespace {

constexpr std::array kArchitectures = {&kLlamaArchitecture, &kQwen2Architecture,
                                       &kQwen3Architecture, &kGemma3Architecture,
                                       &kPhi3Architecture, &kQwen3MoeArchitecture,
                                       &kQwen2MoeArchitecture, &kGptOssArchitecture,
                                       &kOlmoeArchitecture, &kBertArchitecture,
                                       &kNomicBertArchitecture, &kJinaBertV2Architecture,
                                       &kModernBertArchitecture};

}  // namespace

const Architecture& find_architecture(std::string_view name, std::string_view file) {
  for (const Architecture* a : kArchitectures) {
    if (a->name == name) return *a;
  }
  std::string known;
  for (const Architecture* a : kArchitectures) {
    known += fmt::format("{}{}", known.empty() ? "" : ", ", a->name);
  }
  fail(ErrorCategory::kUnsupported, "[model {}] architecture '{}' is not supported; known: {}",
       file, name, known);
}

std::vector<std::string_view> architecture_names() {
  std::vector<std::string_view> out;
  for (const Architecture* a : kArchitectures) out.push_back(a->name);
  return out;
}

}  // namespace tessera
