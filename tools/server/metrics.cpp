#include "server/metrics.h"

#include <fmt/format.h>

namespace tessera::server {

std::string prometheus_text(const serving::GeneratorMetrics& m) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP tessera_{0} {1}\n# TYPE tessera_{0} {2}\ntessera_{0} {3}\n", name,
                       help, type, v);
  };
  metric("requests_total", "counter", "Generation requests accepted.", double(m.requests));
  metric("requests_cancelled_total", "counter", "Requests whose client left before the end.",
         double(m.cancelled));
  metric("prompt_tokens_total", "counter", "Prompt tokens decoded (cache hits excluded).",
         double(m.prompt_tokens));
  metric("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the cache.",
         double(m.cached_tokens));
  metric("generated_tokens_total", "counter", "Tokens generated.", double(m.generated_tokens));
  metric("prompt_seconds_total", "counter", "Time requests spent on their prompts.",
         m.prompt_seconds);
  metric("generation_seconds_total", "counter", "Time requests spent generating.",
         m.generation_seconds);
  metric("generated_tokens_per_second", "gauge", "Generated tokens per second of generation.",
         m.generation_seconds > 0 ? double(m.generated_tokens) / m.generation_seconds : 0.0);
  metric("slots_busy", "gauge", "Slots holding a request.", m.slots_busy);
  metric("slots", "gauge", "Slots (-np).", m.slots);
  metric("requests_queued", "gauge", "Requests waiting for a slot.", m.queued);
  metric("kv_cells_used", "gauge", "KV cache cells in use.", double(m.kv_cells_used));
  metric("kv_cells", "gauge", "KV cache cells.", double(m.kv_cells));
  metric("decode_steps_total", "counter", "Batches decoded.", double(m.steps));
  metric("seconds_since_progress", "gauge",
         "While requests wait or run: seconds since the generator last finished a step.",
         m.seconds_since_progress);
  metric("plans_built_total", "counter", "Graphs built and planned (one per batch shape).",
         double(m.plans_built));
  return out;
}

}  // namespace tessera::server
