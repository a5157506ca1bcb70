// Tensor infos (name, shape, type, offset) and the data section's layout.
#include <algorithm>
#include <limits>

#include "parse.h"
#include "tessera/core/error.h"

namespace tessera::gguf::detail {
namespace {

constexpr uint64_t kMaxDim = std::numeric_limits<int64_t>::max();

// Indices 0..n-1 sorted by key(i), ties by position, so that the first of
// two equal entries comes first (stable without std::stable_sort's buffer).
template <class Key>
std::vector<size_t> sorted_indices(size_t n, Key key) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto c = key(a) <=> key(b);
    return c < 0 || (c == 0 && a < b);
  });
  return order;
}

std::string field(std::string_view name, std::string_view what) {
  return fmt::format("tensor '{}' {}", printable(name), what);
}

TensorInfo parse_tensor_info(Cursor& cur, uint64_t index, uint32_t alignment) {
  TensorInfo info{};
  info.info_offset = cur.pos();
  auto length_what = [&] { return fmt::format("tensor {} name length", index); };
  const uint64_t length = cur.read<uint64_t>(length_what);
  if (length == 0 || length > kMaxTensorNameLength) {
    cur.fail(info.info_offset, length_what(), std::to_string(length),
             fmt::format("1..{} (GGML_MAX_NAME is {} with the NUL)", kMaxTensorNameLength,
                         kMaxTensorNameLength + 1));
  }
  info.name = {reinterpret_cast<const char*>(cur.take(length, length_what)), length};
  const std::string_view name = info.name;

  const uint64_t dims_pos = cur.pos();
  const uint32_t n_dims = cur.read<uint32_t>([&] { return field(name, "n_dims"); });
  if (n_dims == 0 || n_dims > kMaxDims) {
    cur.fail(dims_pos, field(name, "n_dims"), std::to_string(n_dims),
             fmt::format("1..{}", kMaxDims));
  }
  info.n_dims = static_cast<int>(n_dims);
  info.ne = {1, 1, 1, 1};
  std::array<uint64_t, kMaxDims> dim_pos{};
  int64_t n_elements = 1;
  for (uint32_t j = 0; j < n_dims; ++j) {
    dim_pos[j] = cur.pos();
    auto dim_what = [&] { return field(name, fmt::format("dim {}", j)); };
    const uint64_t raw = cur.read<uint64_t>(dim_what);
    if (raw == 0 || raw > kMaxDim) {
      // Stored as int64 by ggml: values past 2^63 are negative.
      cur.fail(dim_pos[j], dim_what(), std::to_string(static_cast<int64_t>(raw)), "a size > 0");
    }
    const auto dim = static_cast<int64_t>(raw);
    if (dim > std::numeric_limits<int64_t>::max() / n_elements) {
      cur.fail(dim_pos[j], dim_what(), std::to_string(dim),
               "dims whose product fits in int64 (element count overflows)");
    }
    n_elements *= dim;
    info.ne[j] = dim;
  }

  const uint64_t type_pos = cur.pos();
  const uint32_t raw_type = cur.read<uint32_t>([&] { return field(name, "type"); });
  const std::optional<DType> type = dtype_from_raw(raw_type);
  if (!type) {
    cur.fail(type_pos, field(name, "type"), std::to_string(raw_type),
             "a ggml type id (this id names no type)");
  }
  info.type = *type;
  const DTypeInfo& type_info = dtype_info(info.type);
  if (info.ne[0] % type_info.block_size != 0) {
    cur.fail(dim_pos[0], field(name, "dim 0"), std::to_string(info.ne[0]),
             fmt::format("a multiple of {} ({} rows are whole blocks)", type_info.block_size,
                         type_info.name));
  }
  const std::optional<size_t> row = row_bytes(info.type, info.ne[0]);
  if (!row) {
    cur.fail(dim_pos[0], field(name, "dim 0"), std::to_string(info.ne[0]),
             "a row size that fits in 64 bits (byte size overflows)");
  }
  uint64_t nbytes = *row;
  for (uint32_t j = 1; j < n_dims; ++j) {
    if (!checked_mul(nbytes, static_cast<uint64_t>(info.ne[j]), &nbytes)) {
      cur.fail(dim_pos[j], field(name, fmt::format("dim {}", j)), std::to_string(info.ne[j]),
               "a tensor size that fits in 64 bits (byte size overflows)");
    }
  }
  info.nbytes = nbytes;

  const uint64_t offset_pos = cur.pos();
  info.offset = cur.read<uint64_t>([&] { return field(name, "offset"); });
  if (info.offset % alignment != 0) {
    cur.fail(offset_pos, field(name, "offset"), std::to_string(info.offset),
             fmt::format("a multiple of the alignment {}", alignment));
  }
  return info;
}

}  // namespace

void parse_tensor_infos(Cursor& cur, uint64_t n_tensors, FileData& out) {
  // n_tensors was bounded by the bytes left (parse_header).
  out.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    out.tensors.push_back(parse_tensor_info(cur, i, out.alignment));
  }
  out.header_size = cur.pos();

  const auto& tensors = out.tensors;
  out.tensor_order = sorted_indices(tensors.size(), [&](size_t i) { return tensors[i].name; });
  for (size_t i = 1; i < out.tensor_order.size(); ++i) {
    const TensorInfo& first = tensors[out.tensor_order[i - 1]];
    const TensorInfo& second = tensors[out.tensor_order[i]];
    if (first.name == second.name) {
      cur.fail(second.info_offset, field(second.name, "name"), "a duplicate name",
               fmt::format("unique tensor names (first @ {:#x})", first.info_offset));
    }
  }
}

void check_tensor_layout(const Cursor& cur, FileData& out) {
  if (!checked_pad(out.header_size, out.alignment, &out.data_offset)) {
    cur.fail(out.header_size, "data section", std::to_string(out.header_size),
             "a header size that can be padded to the alignment");
  }
  // With no tensors the data section may start past the end: llama.cpp
  // writes vocab-only files without the padding.
  const auto& tensors = out.tensors;
  for (const TensorInfo& t : tensors) {
    uint64_t start = 0;
    uint64_t end = 0;
    if (!checked_add(out.data_offset, t.offset, &start) || !checked_add(start, t.nbytes, &end) ||
        end > cur.size()) {
      cur.fail(t.info_offset, field(t.name, "data"),
               fmt::format("offset {} + {} bytes after the data section at {}", t.offset, t.nbytes,
                           out.data_offset),
               fmt::format("to end within the file size {}", cur.size()));
    }
  }
  // Gaps between tensors are allowed (llama.cpp allows them); overlaps are not.
  const std::vector<size_t> by_offset =
      sorted_indices(tensors.size(), [&](size_t i) { return tensors[i].offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = tensors[by_offset[i - 1]];
    const TensorInfo& next = tensors[by_offset[i]];
    const uint64_t prev_end = prev.offset + prev.nbytes;  // <= file size, checked above
    if (next.offset < prev_end) {
      cur.fail(
          next.info_offset, field(next.name, "offset"), std::to_string(next.offset),
          fmt::format("at least {} (it overlaps tensor '{}')", prev_end, printable(prev.name)));
    }
  }
}

}  // namespace tessera::gguf::detail
