#include "state.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/serving/inspect.h"

namespace tessera::node {

// ---- State ----------------------------------------------------------------------------

namespace {

nlohmann::json model_info_json(const serving::LoadedModel& m) {
  const serving::ModelInfo info = serving::model_info(*m.model);
  nlohmann::json metadata = nlohmann::json::object();
  std::string arch, name, chat_template;
  for (serving::MetadataEntry& e : serving::model_metadata(*m.model)) {
    if (e.key == "general.architecture") arch = e.value;
    if (e.key == "general.name") name = e.value;
    if (e.key == "tokenizer.chat_template") chat_template = e.value;
    metadata[std::move(e.key)] = std::move(e.value);
  }
  const double params = static_cast<double>(info.n_params);
  const std::string size = params >= 1e9   ? fmt::format("{:.1f}B", params / 1e9)
                           : params >= 1e6 ? fmt::format("{:.0f}M", params / 1e6)
                                           : fmt::format("{:.0f}K", params / 1e3);
  const bool has_template = !chat_template.empty();
  return {
      {"desc", fmt::format("{} {}{}", arch, size, name.empty() ? "" : " (" + name + ")")},
      {"nEmbd", info.n_embd},
      {"nParams", info.n_params},
      {"size", info.size_bytes},
      {"nVocab", info.n_vocab},
      {"nCtxTrain", info.n_ctx_train},
      {"metadata", metadata},
      {"chatTemplates",
       {{"llamaChat", true},
        {"minja",
         {{"default", has_template},
          {"toolUse", chat_template.find("tools") != std::string::npos}}}}},
      {"isChatTemplateSupported", true},
  };
}

}  // namespace

std::shared_ptr<State> State::load(const LoadSettings& settings,
                                   const std::function<void(uint64_t, uint64_t)>& progress) {
  serving::LoadOptions o = settings.load;
  o.progress = progress;
  auto s = std::make_shared<State>(serving::load(o), settings);
  const Model& model = *s->loaded.model;
  for (const auto& [name, type] : {std::pair{"cache_type_k", settings.generator.type_k},
                                   std::pair{"cache_type_v", settings.generator.type_v}}) {
    if (model.hparams().head_dim % dtype_info(type).block_size != 0) {
      fail(ErrorCategory::kInvalidArgument,
           "[{} {}] needs the model's head size ({}) to be a multiple of its block size {}", name,
           dtype_name(type), model.hparams().head_dim, dtype_info(type).block_size);
    }
  }
  s->generator_ = std::make_shared<serving::Generator>(model, s->loaded.tokenizer, settings.generator);
  s->generator_->start();
  s->renderer(settings.chat_template);  // a template that does not parse fails the load
  s->info = model_info_json(s->loaded);
  return s;
}

const serving::ChatRenderer& State::renderer(const std::string& chat_template) {
  std::lock_guard lock(mutex);
  auto& r = renderers[chat_template];
  if (!r) {
    r = std::make_unique<serving::ChatRenderer>(loaded.model->file(), loaded.tokenizer,
                                                chat_template);
  }
  return *r;
}

serving::Embedder& State::embedder_for_use() {
  std::lock_guard lock(mutex);
  if (!embedder) {
    const Model& model = *loaded.model;
    // One vector per text: a file whose pooling_type is none embeds as mean.
    serving::Pooling pooling = settings.pooling.value_or(serving::model_pooling(model));
    if (pooling == serving::Pooling::kNone) pooling = serving::Pooling::kMean;
    embedder = std::make_unique<serving::Embedder>(
        model, pooling,
        std::max<int64_t>(settings.generator.n_ctx, 512));
  }
  return *embedder;
}

serving::Embedder& State::ranker_for_use() {
  std::lock_guard lock(mutex);
  if (!ranker) {
    const Model& model = *loaded.model;
    const int64_t max_tokens = model.is_encoder() ? std::min<int64_t>(model.hparams().n_ctx_train, 8192)
                                                  : std::max<int64_t>(settings.generator.n_ctx, 512);
    ranker = std::make_unique<serving::Embedder>(model, serving::Pooling::kRank, max_tokens, 2048);
  }
  return *ranker;
}

std::shared_ptr<serving::Generator> State::gen() const {
  std::lock_guard lock(generator_mutex_);
  if (!generator_) throw std::runtime_error("this context has no generator (a failed parallel.enable())");
  return generator_;
}

void State::replace_generator(int n_slots) {
  std::lock_guard lock(generator_mutex_);
  serving::GeneratorOptions g = settings.generator;
  const int before = g.n_slots;
  g.n_slots = n_slots;
  if (generator_) generator_->shutdown();
  generator_.reset();  // its cache first: both might not fit together
  try {
    generator_ = std::make_shared<serving::Generator>(*loaded.model, loaded.tokenizer, g);
  } catch (...) {
    g.n_slots = before;
    generator_ = std::make_shared<serving::Generator>(*loaded.model, loaded.tokenizer, g);
    generator_->start();
    throw;
  }
  generator_->start();
  settings.generator = g;
}

void State::shutdown() {
  std::lock_guard lock(generator_mutex_);
  if (generator_) generator_->shutdown();
}


}  // namespace tessera::node
