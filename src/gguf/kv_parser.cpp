// Key-value pairs: keys, scalar, string and array values, duplicate keys.
#include <algorithm>

#include "parse.h"
#include "tessera/core/error.h"

namespace tessera::gguf::detail {
namespace {

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::kF64);

// Reads a u64 length at the cursor that must fit in the bytes after it.
template <class What>
uint64_t read_length(Cursor& cur, const What& what) {
  const uint64_t pos = cur.pos();
  const uint64_t length = cur.read<uint64_t>(what);
  if (length > cur.remaining()) {
    cur.fail(pos, describe(what), std::to_string(length),
             fmt::format("at most {} (the bytes left; file truncated?)", cur.remaining()));
  }
  return length;
}

Value parse_array(Cursor& cur, const Site& site, FileData& out) {
  auto what = [&](std::string_view field) {
    return fmt::format("key '{}' array {}", printable(site.key), field);
  };
  const uint64_t type_pos = cur.pos();
  const uint32_t raw = cur.read<uint32_t>([&] { return what("element type"); });
  if (raw == static_cast<uint32_t>(ValueType::kArray)) {
    cur.fail(type_pos, what("element type"), "array",
             "a scalar or string type (nested arrays are not supported)");
  }
  if (raw > kMaxValueType) {
    cur.fail(type_pos, what("element type"), std::to_string(raw),
             fmt::format("a value type 0..{}", kMaxValueType));
  }
  const auto type = static_cast<ValueType>(raw);
  const uint64_t element_bytes =
      type == ValueType::kString ? kMinStringBytes : value_type_size(type);

  const uint64_t count_pos = cur.pos();
  const uint64_t count = cur.read<uint64_t>([&] { return what("count"); });
  uint64_t total = 0;
  if (!checked_mul(count, element_bytes, &total) || total > cur.remaining()) {
    cur.fail(count_pos, what("count"), std::to_string(count),
             fmt::format("at most {} ({} bytes left, >= {} per {} element)",
                         cur.remaining() / element_bytes, cur.remaining(), element_bytes,
                         value_type_name(type)));
  }
  const uint8_t* data = cur.data() + cur.pos();
  if (type != ValueType::kString) {
    cur.take(total, [&] { return what("data"); });
    return ValueBuilder::array(type, count, data, nullptr, site);
  }
  // count * 8 <= remaining was checked above, so this allocation is backed
  // by bytes that exist.
  auto offsets = std::make_unique_for_overwrite<uint64_t[]>(count);
  const uint64_t start = cur.pos();
  for (uint64_t i = 0; i < count; ++i) {
    offsets[i] = cur.pos() - start;
    const uint64_t length = read_length(
        cur, [&] { return fmt::format("key '{}' element {} length", printable(site.key), i); });
    cur.take(length, "string");
  }
  const uint64_t* raw_offsets = offsets.get();
  out.string_offsets.push_back(std::move(offsets));
  return ValueBuilder::array(type, count, data, raw_offsets, site);
}

Value parse_value(Cursor& cur, ValueType type, const Site& site, FileData& out) {
  if (type == ValueType::kArray) return parse_array(cur, site, out);
  if (type == ValueType::kString) {
    const uint64_t length = read_length(
        cur, [&] { return fmt::format("key '{}' string length", printable(site.key)); });
    return ValueBuilder::string(cur.take(length, "string"), length, site);
  }
  const uint8_t* data = cur.take(value_type_size(type), [&] {
    return fmt::format("key '{}' {} value", printable(site.key), value_type_name(type));
  });
  return ValueBuilder::scalar(type, data, site);
}

void check_unique_keys(const Cursor& cur, FileData& out) {
  auto& order = out.kv_order;
  order.resize(out.kvs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Ties broken by position (a stable order without std::stable_sort's
  // buffer), so the later of two equal keys is the duplicate.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto c = out.kvs[a].key <=> out.kvs[b].key;
    return c < 0 || (c == 0 && a < b);
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const KeyValue& first = out.kvs[order[i - 1]];
    const KeyValue& second = out.kvs[order[i]];
    if (first.key == second.key) {
      cur.fail(second.offset, fmt::format("key '{}'", printable(second.key)), "a duplicate key",
               fmt::format("each key once (first @ {:#x})", first.offset));
    }
  }
}

}  // namespace

void parse_kvs(Cursor& cur, uint64_t n_kv, FileData& out) {
  // n_kv was bounded by the bytes left (parse_header).
  out.kvs.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t kv_pos = cur.pos();
    auto length_what = [&] { return fmt::format("key {} length", i); };
    const uint64_t length = cur.read<uint64_t>(length_what);
    if (length == 0 || length > kMaxKeyLength) {
      cur.fail(kv_pos, length_what(), std::to_string(length), fmt::format("1..{}", kMaxKeyLength));
    }
    if (length > cur.remaining()) {
      cur.fail(kv_pos, length_what(), std::to_string(length),
               fmt::format("at most {} (the bytes left; file truncated?)", cur.remaining()));
    }
    const auto* key_bytes = reinterpret_cast<const char*>(cur.take(length, "key"));
    const std::string_view key(key_bytes, length);

    const uint64_t type_pos = cur.pos();
    const uint32_t raw_type =
        cur.read<uint32_t>([&] { return fmt::format("key '{}' type", printable(key)); });
    if (raw_type > kMaxValueType) {
      cur.fail(type_pos, fmt::format("key '{}' type", printable(key)), std::to_string(raw_type),
               fmt::format("a value type 0..{}", kMaxValueType));
    }
    const Site site{&out.name, key, kv_pos};
    Value value = parse_value(cur, static_cast<ValueType>(raw_type), site, out);
    out.kvs.push_back(KeyValue{key, value, kv_pos});
  }
  check_unique_keys(cur, out);
}

}  // namespace tessera::gguf::detail
