// Types of the well-known keys, checked once at load so that later typed
// reads of them cannot fail, and general.alignment.
#include <algorithm>
#include <array>
#include <bit>

#include "parse.h"
#include "tessera/core/error.h"

namespace tessera::gguf::detail {
namespace {

enum class Want {
  kU32,
  kF32,
  kBool,
  kString,
  kUnsigned,            // u8, u16, u32 or u64
  kUnsignedOrIntArray,  // the same, or a per-layer array of integers
  kStringArray,
  kF32Array,
  kI32Array,
};

struct KnownKey {
  std::string_view name;
  bool per_arch;  // name follows "<general.architecture>"
  Want want;
};

// Types as llama.cpp's loader reads them.
constexpr std::array kKnownKeys = {
    KnownKey{"general.alignment", false, Want::kU32},
    KnownKey{"general.architecture", false, Want::kString},
    KnownKey{"general.name", false, Want::kString},
    KnownKey{"general.file_type", false, Want::kU32},
    KnownKey{"general.quantization_version", false, Want::kU32},
    KnownKey{"tokenizer.ggml.model", false, Want::kString},
    KnownKey{"tokenizer.ggml.pre", false, Want::kString},
    KnownKey{"tokenizer.ggml.tokens", false, Want::kStringArray},
    KnownKey{"tokenizer.ggml.scores", false, Want::kF32Array},
    KnownKey{"tokenizer.ggml.token_type", false, Want::kI32Array},
    KnownKey{"tokenizer.ggml.merges", false, Want::kStringArray},
    KnownKey{"tokenizer.ggml.bos_token_id", false, Want::kU32},
    KnownKey{"tokenizer.ggml.eos_token_id", false, Want::kU32},
    KnownKey{"tokenizer.ggml.unknown_token_id", false, Want::kU32},
    KnownKey{"tokenizer.ggml.unk_token_id", false, Want::kU32},
    KnownKey{"tokenizer.ggml.seperator_token_id", false, Want::kU32},  // sic: the real key
    KnownKey{"tokenizer.ggml.padding_token_id", false, Want::kU32},
    KnownKey{"tokenizer.ggml.add_bos_token", false, Want::kBool},
    KnownKey{"tokenizer.ggml.add_eos_token", false, Want::kBool},
    KnownKey{"tokenizer.chat_template", false, Want::kString},
    KnownKey{".context_length", true, Want::kUnsigned},
    KnownKey{".embedding_length", true, Want::kUnsigned},
    KnownKey{".block_count", true, Want::kUnsigned},
    KnownKey{".feed_forward_length", true, Want::kUnsignedOrIntArray},
    KnownKey{".attention.head_count", true, Want::kUnsignedOrIntArray},
    KnownKey{".attention.head_count_kv", true, Want::kUnsignedOrIntArray},
    KnownKey{".rope.freq_base", true, Want::kF32},
    KnownKey{".attention.layer_norm_rms_epsilon", true, Want::kF32},
};

bool is_unsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}

bool is_integer(ValueType t) {
  return is_unsigned(t) || t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}

bool matches(const Value& v, Want want) {
  const ValueType t = v.type();
  const auto array_of = [&](ValueType e) {
    return t == ValueType::kArray && v.array().element_type() == e;
  };
  switch (want) {
    case Want::kU32:
      return t == ValueType::kU32;
    case Want::kF32:
      return t == ValueType::kF32;
    case Want::kBool:
      return t == ValueType::kBool;
    case Want::kString:
      return t == ValueType::kString;
    case Want::kUnsigned:
      return is_unsigned(t);
    case Want::kUnsignedOrIntArray:
      return is_unsigned(t) || (t == ValueType::kArray && is_integer(v.array().element_type()));
    case Want::kStringArray:
      return array_of(ValueType::kString);
    case Want::kF32Array:
      return array_of(ValueType::kF32);
    case Want::kI32Array:
      return array_of(ValueType::kI32);
  }
  return false;
}

std::string_view want_name(Want want) {
  switch (want) {
    case Want::kU32:
      return "u32";
    case Want::kF32:
      return "f32";
    case Want::kBool:
      return "bool";
    case Want::kString:
      return "string";
    case Want::kUnsigned:
      return "an unsigned integer";
    case Want::kUnsignedOrIntArray:
      return "an unsigned integer or an array of integers";
    case Want::kStringArray:
      return "array of string";
    case Want::kF32Array:
      return "array of f32";
    case Want::kI32Array:
      return "array of i32";
  }
  return "?";
}

std::string type_name(const Value& v) {
  if (v.type() != ValueType::kArray) return std::string(value_type_name(v.type()));
  return fmt::format("array of {}", value_type_name(v.array().element_type()));
}

// kv_order is sorted by key (parse_kvs).
const KeyValue* find_kv(const FileData& data, std::string_view key) {
  auto it = std::lower_bound(data.kv_order.begin(), data.kv_order.end(), key,
                             [&](size_t i, std::string_view k) { return data.kvs[i].key < k; });
  if (it == data.kv_order.end() || data.kvs[*it].key != key) return nullptr;
  return &data.kvs[*it];
}

}  // namespace

void check_known_keys(FileData& out) {
  // Architecture first: it names the per-architecture keys.
  std::string_view arch;
  if (const KeyValue* kv = find_kv(out, "general.architecture");
      kv != nullptr && kv->value.type() == ValueType::kString) {
    arch = kv->value.string();
  }
  std::string name;
  for (const KnownKey& known : kKnownKeys) {
    if (known.per_arch && arch.empty()) continue;
    name = known.per_arch ? fmt::format("{}{}", arch, known.name) : std::string(known.name);
    const KeyValue* kv = find_kv(out, name);
    if (kv == nullptr || matches(kv->value, known.want)) continue;
    fail_field(out.name, kv->offset, fmt::format("key '{}'", printable(name)), type_name(kv->value),
               want_name(known.want));
  }
  if (const KeyValue* kv = find_kv(out, "general.alignment")) {
    const uint32_t alignment = kv->value.u32();
    if (!std::has_single_bit(alignment)) {
      fail_field(out.name, kv->offset, "key 'general.alignment'", std::to_string(alignment),
                 "a non-zero power of two");
    }
    out.alignment = alignment;
  }
}

}  // namespace tessera::gguf::detail
