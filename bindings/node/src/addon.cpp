// tessera.node: the module's functions (loadModel, loadModelInfo,
// backendDevices) and the NativeContext class. lib/index.js gives them
// llama.node's names and shapes.
#include <napi.h>

#include <algorithm>

#include "context.h"
#include "convert.h"
#include "task.h"
#include "tessera/core/error.h"
#include "tessera/serving/inspect.h"

namespace tessera::node {
namespace {

struct Addon {
  Napi::FunctionReference context_class;
};

DType cache_type(const Napi::Object& o, const char* key) {
  const std::string name = string(o, key, "f16");
  for (std::string_view known : {"f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) {
    if (name == known) return *dtype_from_name(name);
  }
  throw Napi::TypeError::New(o.Env(), std::string("option '") + key + "': '" + name +
                                          "' is not a cache type; expected f16, f32, bf16, q8_0, "
                                          "q4_0, q4_1, q5_0 or q5_1");
}

LoadSettings load_settings(const Napi::Object& o) {
  LoadSettings s;
  s.load.model = string(o, "model", "");
  if (s.load.model.empty()) throw Napi::TypeError::New(o.Env(), "option 'model': expected a GGUF file's path");
  const int64_t threads = integer(o, "n_threads", 0);
  if (threads < 0 || threads > 1024) throw Napi::RangeError::New(o.Env(), "option 'n_threads': expected 0..1024");
  s.load.threads = static_cast<int>(threads);
  const int64_t n_ctx = integer(o, "n_ctx", 4096), n_batch = integer(o, "n_batch", 512);
  const int64_t n_parallel = integer(o, "n_parallel", 1);
  if (n_ctx < 16 || n_ctx > (int64_t{1} << 24)) throw Napi::RangeError::New(o.Env(), "option 'n_ctx': expected 16 or more");
  if (n_batch < 1 || n_batch > (int64_t{1} << 20)) throw Napi::RangeError::New(o.Env(), "option 'n_batch': expected 1 or more");
  if (n_parallel < 1 || n_parallel > kMaxSequences) {
    throw Napi::RangeError::New(o.Env(), "option 'n_parallel': expected 1.." + std::to_string(kMaxSequences));
  }
  s.load.placement.gpu_layers = static_cast<int>(integer(o, "n_gpu_layers", -1));
  // llama.node's n_cpu_moe (and cpu_moe: all of them): experts kept in host memory.
  const int64_t n_cpu_moe = integer(o, "n_cpu_moe", 0);
  if (n_cpu_moe < 0) throw Napi::RangeError::New(o.Env(), "option 'n_cpu_moe': expected 0 or more");
  s.load.placement.n_cpu_moe = boolean(o, "cpu_moe", false) ? int64_t{1} << 30 : n_cpu_moe;
  s.load.placement.device = string(o, "device", "");
  s.load.device_flag = "device";
  // A directory of weights images ("off" or false: none); default as the CLI's.
  s.load.placement.weights_cache = serving::default_weights_cache();
  if (has(o, "weights_cache")) {
    const Napi::Value v = o.Get("weights_cache");
    if (v.IsBoolean() && !v.As<Napi::Boolean>().Value()) {
      s.load.placement.weights_cache.clear();
    } else if (v.IsString()) {
      s.load.placement.weights_cache = serving::weights_cache_dir(v.As<Napi::String>().Utf8Value());
    } else {
      throw Napi::TypeError::New(o.Env(), "option 'weights_cache': expected a directory, 'off' or false");
    }
  }
  s.generator = {.n_slots = static_cast<int>(n_parallel), .n_ctx = n_ctx, .n_batch = n_batch,
                 .type_k = cache_type(o, "cache_type_k"), .type_v = cache_type(o, "cache_type_v")};
  s.load.placement.n_ctx = n_ctx;
  s.load.placement.n_batch = n_batch;
  s.load.placement.type_k = s.generator.type_k;
  s.load.placement.type_v = s.generator.type_v;
  s.chat_template = string(o, "chat_template", "");
  if (has(o, "pooling_type")) {
    const std::string p = string(o, "pooling_type", "");
    if (p != "none") {  // none: the model's own
      try {
        s.pooling = serving::pooling_from_name(p);
      } catch (const std::exception& e) {
        throw Napi::TypeError::New(o.Env(), std::string("option 'pooling_type': ") + e.what());
      }
    }
  }
  return s;
}

// Loads on the worker pool; progress (integer percent, only rising) reaches
// onProgress before the promise settles.
class LoadWorker : public Napi::AsyncProgressQueueWorker<int> {
 public:
  LoadWorker(Napi::Env env, LoadSettings settings, Napi::Function on_progress)
      : Napi::AsyncProgressQueueWorker<int>(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        settings_(std::move(settings)) {
    if (!on_progress.IsEmpty()) on_progress_ = Napi::Persistent(on_progress);
  }
  Napi::Promise promise() const { return deferred_.Promise(); }

  void Execute(const ExecutionProgress& progress) override {
    int last = -1;
    auto report = [&](uint64_t done, uint64_t total) {
      const int pct = total ? static_cast<int>(std::min<uint64_t>(100, done * 100 / total)) : 100;
      if (pct > last) {
        last = pct;
        progress.Send(&pct, 1);
      }
    };
    try {
      report(0, 1);
      state_ = State::load(settings_, report);
      report(1, 1);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnProgress(const int* data, size_t count) override {
    if (on_progress_.IsEmpty()) return;
    for (size_t i = 0; i < count; ++i) {
      try {
        on_progress_.Call({Napi::Number::New(Env(), data[i])});
      } catch (const Napi::Error&) {
        // a throwing progress callback does not stop the load
      }
    }
  }
  void OnOK() override {
    Napi::Env env = Env();
    auto* addon = env.GetInstanceData<Addon>();
    try {
      deferred_.Resolve(addon->context_class.New(
          {Napi::External<std::shared_ptr<State>>::New(env, &state_)}));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  LoadSettings settings_;
  Napi::FunctionReference on_progress_;
  std::shared_ptr<State> state_;
};

Napi::Value LoadModel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsObject()) {
      throw Napi::TypeError::New(env, "loadModel(options, onProgress?): options must be an object");
    }
    LoadSettings settings = load_settings(info[0].As<Napi::Object>());
    Napi::Function on_progress;
    if (info.Length() > 1 && info[1].IsFunction()) on_progress = info[1].As<Napi::Function>();
    auto* worker = new LoadWorker(env, std::move(settings), on_progress);
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  });
}

Napi::Value LoadModelInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsString()) {
      throw Napi::TypeError::New(env, "loadLlamaModelInfo(path): path must be a string");
    }
    const std::string path = info[0].As<Napi::String>().Utf8Value();
    std::vector<std::string> skip;
    if (info.Length() > 1 && info[1].IsArray()) {
      const nlohmann::json j = to_json(info[1], "skip");
      for (const auto& k : j) {
        if (k.is_string()) skip.push_back(k.get<std::string>());
      }
    }
    return run_task<nlohmann::json>(
        env,
        [path, skip] {
          const serving::FileMetadata file = serving::read_file_metadata(path);
          nlohmann::json out = {{"version", file.version},
                                {"alignment", file.alignment},
                                {"data_offset", file.data_offset},
                                {"n_tensors", file.n_tensors}};
          for (const serving::MetadataEntry& e : file.entries) {
            if (std::find(skip.begin(), skip.end(), e.key) != skip.end()) continue;
            out[e.key] = e.value;
          }
          return out;
        },
        [](Napi::Env e, nlohmann::json& j) { return from_json(e, j); });
  });
}

Napi::Value BackendDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    return run_task<nlohmann::json>(
        env,
        [] {
          nlohmann::json out = nlohmann::json::array();
          for (const serving::DeviceInfo& d : serving::list_devices()) {
            out.push_back({{"backend", d.backend},
                           {"type", d.type},
                           {"deviceName", d.name},
                           {"maxMemorySize", d.total_bytes},
                           {"metadata", {{"description", d.description}, {"freeMemory", d.free_bytes}}}});
          }
          return out;
        },
        [](Napi::Env e, nlohmann::json& j) { return from_json(e, j); });
  });
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* addon = new Addon();
  addon->context_class = Napi::Persistent(NativeContext::define(env));
  env.SetInstanceData(addon);
  exports.Set("loadModel", Napi::Function::New(env, LoadModel, "loadModel"));
  exports.Set("loadModelInfo", Napi::Function::New(env, LoadModelInfo, "loadModelInfo"));
  exports.Set("backendDevices", Napi::Function::New(env, BackendDevices, "backendDevices"));
  exports.Set("NativeContext", addon->context_class.Value());
  return exports;
}

}  // namespace
}  // namespace tessera::node

static Napi::Object InitTessera(Napi::Env env, Napi::Object exports) {
  return tessera::node::Init(env, exports);
}
NODE_API_MODULE(tessera, InitTessera)
