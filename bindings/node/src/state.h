// What a loaded model's context owns: the model (through the serving core),
// its generator, chat renderers and embedder, shared with the work in flight
// so that release() can drop it while a call still runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/serving/chat.h"
#include "tessera/serving/embedder.h"
#include "tessera/serving/loaded_model.h"
#include "tessera/serving/serving.h"

namespace tessera::node {

struct LoadSettings {
  serving::LoadOptions load;
  serving::GeneratorOptions generator;
  std::string chat_template;  // a built-in name or a Jinja source; "": the model's
  std::optional<serving::Pooling> pooling;
};

// What a context owns; shared with the workers in flight, so release() can
// drop it while one runs.
struct State {
  State(serving::LoadedModel m, LoadSettings s) : loaded(std::move(m)), settings(std::move(s)) {}
  serving::LoadedModel loaded;
  LoadSettings settings;  // settings.generator under generator_mutex
  std::mutex mutex;  // renderers, embedder
  std::map<std::string, std::unique_ptr<serving::ChatRenderer>> renderers;
  std::unique_ptr<serving::Embedder> embedder;
  std::unique_ptr<serving::Embedder> ranker;  // rank pooling: a reranker's head
  nlohmann::json info;  // getModelInfo()

  static std::shared_ptr<State> load(const LoadSettings& settings,
                                     const std::function<void(uint64_t, uint64_t)>& progress);
  const serving::ChatRenderer& renderer(const std::string& chat_template);
  serving::Embedder& embedder_for_use();
  // The reranker's embedder (made on first use; a model without a classifier
  // head is refused, naming why).
  serving::Embedder& ranker_for_use();

  // The generator, shared with the caller: parallel.enable() may replace it
  // meanwhile (the caller's keeps working until dropped, shut down).
  // Throws when a failed replacement left none.
  std::shared_ptr<serving::Generator> gen() const;
  // A generator of n slots in place of the one there; on failure the old
  // slot count is made again.
  void replace_generator(int n_slots);
  void shutdown();

 private:
  mutable std::mutex generator_mutex_;
  std::shared_ptr<serving::Generator> generator_;
};

}  // namespace tessera::node
