#include "cpu/kernels/repack.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/kernels/panel_groups.h"
#include "cpu/ops/op.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/quants.h"
#include "tessera/runtime/device.h"
#include "tessera/runtime/host_memory.h"

namespace tessera::cpu {
namespace {

// Each reordered format's panel_group is a permutation of its groups.
template <int kGroups>
constexpr bool is_permutation(DType type) {
  bool seen[kGroups] = {};
  for (int j = 0; j < kGroups; ++j) {
    const size_t p = groups::panel_group(type, static_cast<size_t>(j));
    if (p >= static_cast<size_t>(kGroups) || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}
static_assert(is_permutation<groups::kQ6KGroups>(DType::kQ6_K));
static_assert(is_permutation<groups::kQ5KGroups>(DType::kQ5_K));
static_assert(is_permutation<groups::kQ3KGroups>(DType::kQ3_K));

// Where the quants start in the GGUF block (after a leading scale, or at 0).
size_t quant_at(const PanelLayout& l) {
  return l.scale_at == 0 ? l.scale_bytes : 0;
}

// Bytes per row in one interleaved group of scales: 2 (f16s), or 1 (MXFP4's
// single E8M0 byte).
size_t scale_unit(const PanelLayout& l) {
  return l.scale_bytes == 1 ? 1 : 2;
}

// Where row r's block b's quants start in its panel (its row in panel group 0).
size_t quants_offset(const PanelLayout& l, int64_t r, int64_t b) {
  return static_cast<size_t>(r / kPanelRows) * l.panel_bytes +
         static_cast<size_t>(l.blocks) * kPanelRows * l.scale_bytes +
         static_cast<size_t>(b) * kPanelRows * l.quant_bytes +
         static_cast<size_t>(r % kPanelRows) * l.group_bytes;
}

// Where original byte `pos` (0 .. block_bytes) of row r's block b lands in its panel.
size_t panel_offset(const PanelLayout& l, int64_t r, int64_t b, size_t pos) {
  if (pos >= l.scale_at && pos < l.scale_at + l.scale_bytes) {
    const size_t base = static_cast<size_t>(r / kPanelRows) * l.panel_bytes;
    const auto rr = static_cast<size_t>(r % kPanelRows);
    const size_t s = pos - l.scale_at, u = scale_unit(l);
    return base + static_cast<size_t>(b) * kPanelRows * l.scale_bytes + (s / u) * u * kPanelRows +
           rr * u + s % u;
  }
  const size_t j = pos - quant_at(l), g = l.group_bytes;
  return quants_offset(l, r, b) + groups::panel_group(l.type, j / g) * kPanelRows * g + j % g;
}

// Q6_K's triples (panel_groups.h) over a block's quants (GGUF order), in
// place: code is groups::q6k_encode or groups::q6k_decode.
void q6k_code_block(uint8_t* quants, groups::Q6KTriple (*code)(uint8_t, uint8_t, uint8_t)) {
  for (int hh = 0; hh < 2; ++hh) {
    for (int f = 64 * hh; f < 64 * hh + 32; ++f) {  // the triple's first byte, ql[64 hh + l]
      uint8_t* p0 = quants + f;
      uint8_t* p1 = quants + groups::q6k_member_byte(f, 1);
      uint8_t* p2 = quants + groups::q6k_member_byte(f, 2);
      const groups::Q6KTriple t = code(*p0, *p1, *p2);
      *p0 = t.a, *p1 = t.b, *p2 = t.c;
    }
  }
}

// Copies whole rows [r0, r0 + n) (rows counted across matrices) between the
// original layout `flat` and the panels; kToPanels picks the direction. kG is
// the layout's group bytes (4, or F16's 2): each group one fixed-size move
// (a memcpy of a run-time size was a library call per 4 bytes, most of a
// model's load), to an offset within the block computed once.
template <bool kToPanels, size_t kG>
void copy_rows(const PanelLayout& l, uint8_t* panels, uint8_t* flat, int64_t r0, int64_t n) {
  const auto copy = [](uint8_t* panel, uint8_t* row, auto bytes) {
    if constexpr (kToPanels) {
      std::memcpy(panel, row, bytes);
    } else {
      std::memcpy(row, panel, bytes);
    }
  };
  constexpr size_t kMaxGroups = 64;  // Q6_K: 52, F16: 32
  const size_t n_groups = l.quant_bytes / kG, qa = quant_at(l), u = scale_unit(l);
  TESSERA_CHECK(l.group_bytes == kG && n_groups <= kMaxGroups, "copy_rows: {} groups of {} bytes",
                n_groups, l.group_bytes);
  size_t group_at[kMaxGroups];  // group g's offset from the block's quants (row 0)
  for (size_t g = 0; g < n_groups; ++g) group_at[g] = groups::panel_group(l.type, g) * kPanelRows * kG;
  const bool q6k = l.type == DType::kQ6_K;
  alignas(16) uint8_t coded[kMaxGroups * kG];  // Q6_K: a block's quants, re-encoded
  for (int64_t row = r0; row < r0 + n; ++row) {
    uint8_t* matrix = panels + static_cast<size_t>(row / l.rows) * l.matrix_bytes;
    const int64_t r = row % l.rows;
    uint8_t* src_row = flat + static_cast<size_t>(row - r0) * l.row_bytes();
    for (int64_t b = 0; b < l.blocks; ++b) {
      uint8_t* block = src_row + static_cast<size_t>(b) * l.block_bytes;
      // Scale unit i (u bytes) of row r at unit i's 16-row group of the block's scales.
      uint8_t* scales = matrix + panel_offset(l, r, b, l.scale_at);
      for (size_t s = 0; s < l.scale_bytes; s += u) {
        if (u == 2) {
          copy(scales + s * kPanelRows, block + l.scale_at + s, std::integral_constant<size_t, 2>{});
        } else {
          copy(scales + s * kPanelRows, block + l.scale_at + s, std::integral_constant<size_t, 1>{});
        }
      }
      uint8_t* quants = matrix + quants_offset(l, r, b);
      uint8_t* from = block + qa;
      if (kToPanels && q6k) {  // the source stays as given: encode a copy
        std::memcpy(coded, from, l.quant_bytes);
        q6k_code_block(coded, groups::q6k_encode);
        from = coded;
      }
      for (size_t g = 0; g < n_groups; ++g) {
        copy(quants + group_at[g], from + kG * g, std::integral_constant<size_t, kG>{});
      }
      if (!kToPanels && q6k) q6k_code_block(from, groups::q6k_decode);
    }
  }
}

// Bytes [offset, offset + size) of the original layout: partial rows byte by
// byte, whole rows through copy_rows.
template <bool kToPanels>
void transfer(const PanelLayout& l, uint8_t* panels, uint8_t* flat, size_t offset, size_t size) {
  const size_t row_bytes = l.row_bytes();
  auto one_byte = [&](size_t pos, uint8_t* ext) {
    const auto row = static_cast<int64_t>(pos / row_bytes);
    const size_t in_row = pos % row_bytes;
    uint8_t* matrix = panels + static_cast<size_t>(row / l.rows) * l.matrix_bytes;
    const int64_t r = row % l.rows, b = static_cast<int64_t>(in_row / l.block_bytes);
    const size_t in_block = in_row % l.block_bytes;
    if (l.type == DType::kQ6_K && in_block - quant_at(l) < groups::kQ6KTripleBytes) {
      // A byte of a re-encoded triple: decode all three, then (writing) encode them again.
      const groups::Q6KMember m = groups::q6k_member(static_cast<int>(in_block - quant_at(l)));
      uint8_t* at[3];
      for (int i = 0; i < 3; ++i) {
        at[i] = matrix + panel_offset(l, r, b, quant_at(l) + groups::q6k_member_byte(m.first, i));
      }
      const groups::Q6KTriple t = groups::q6k_decode(*at[0], *at[1], *at[2]);
      uint8_t bytes[3] = {t.a, t.b, t.c};
      if constexpr (kToPanels) {
        bytes[m.which] = *ext;
        const groups::Q6KTriple e = groups::q6k_encode(bytes[0], bytes[1], bytes[2]);
        *at[0] = e.a, *at[1] = e.b, *at[2] = e.c;
      } else {
        *ext = bytes[m.which];
      }
      return;
    }
    uint8_t* p = matrix + panel_offset(l, r, b, in_block);
    if constexpr (kToPanels) {
      *p = *ext;
    } else {
      *ext = *p;
    }
  };
  size_t pos = offset;
  const size_t end = offset + size;
  const size_t head_end = std::min(end, (pos + row_bytes - 1) / row_bytes * row_bytes);
  for (; pos < head_end; ++pos) one_byte(pos, flat + (pos - offset));
  const size_t whole = (end - pos) / row_bytes;
  if (whole > 0) {
    const auto first = static_cast<int64_t>(pos / row_bytes);
    const auto rows = [&](int64_t r0, int64_t n) {  // rows first + r0 .. of the range
      uint8_t* src = flat + (pos - offset) + static_cast<size_t>(r0) * row_bytes;
      if (l.group_bytes == 4) {
        copy_rows<kToPanels, 4>(l, panels, src, first + r0, n);
      } else {
        copy_rows<kToPanels, 2>(l, panels, src, first + r0, n);
      }
    };
    // A large range (a model's weights) on several threads, in runs of whole
    // panels: the copies, and the first touches of fresh pages (the kernel
    // zeroes each), were a model load's time, on one core. A thread for
    // each 4 MiB: at 32 MiB a TinyLlama's matrices (23 MiB in F16) went
    // on one thread (bench/LOG.md, 2026-12-07).
    constexpr size_t kPerThread = size_t{4} << 20;
    const size_t by_size = whole * row_bytes / kPerThread;
    const auto threads = static_cast<int64_t>(
        std::clamp<size_t>(by_size, 1, std::max(1u, std::thread::hardware_concurrency())));
    const auto count = static_cast<int64_t>(whole);
    if (threads == 1) {
      rows(0, count);
    } else {
      const int64_t per = (count / threads + kPanelRows - 1) / kPanelRows * kPanelRows;
      std::vector<std::thread> helpers;
      std::exception_ptr failed;
      std::mutex failed_mutex;
      for (int64_t r0 = per; r0 < count; r0 += per) {
        helpers.emplace_back([&, r0] {
          try {
            rows(r0, std::min(per, count - r0));
          } catch (...) {
            std::lock_guard lock(failed_mutex);
            failed = std::current_exception();
          }
        });
      }
      try {
        rows(0, std::min(per, count));
      } catch (...) {
        std::lock_guard lock(failed_mutex);
        failed = std::current_exception();
      }
      for (std::thread& t : helpers) t.join();
      if (failed) std::rethrow_exception(failed);
    }
    pos += whole * row_bytes;
  }
  for (; pos < end; ++pos) one_byte(pos, flat + (pos - offset));
}

class CpuWeightsBuffer final : public Buffer {
 public:
  CpuWeightsBuffer(BufferType& type, size_t size)
      : Buffer(type,
               host::host_allocate(size, CpuWeightsBufferType::kAlignment, type.device().name()),
               size) {}
  CpuWeightsBuffer(BufferType& type, void* base, size_t size, std::shared_ptr<void> keep)
      : Buffer(type, base, size), keep_(std::move(keep)) {
    TESSERA_CHECK(keep_ != nullptr &&
                      reinterpret_cast<uintptr_t>(base) % CpuWeightsBufferType::kAlignment == 0,
                  "wrapped weights memory must be held and aligned to {}",
                  CpuWeightsBufferType::kAlignment);
  }
  ~CpuWeightsBuffer() override {
    if (keep_ == nullptr) host::host_release(base(), size());
  }

  // Every byte reads back as value: a memset, then Q6_K's re-encoded
  // triples (panel_groups.h) written as (value, value, value) encodes.
  void clear(uint8_t value) override {
    std::memset(base(), value, size());
    for (const auto& [data, l] : q6k_tensors_) {
      const std::vector<uint8_t> row(l.row_bytes(), value);
      const int64_t rows = l.rows * l.matrices;
      for (int64_t r = 0; r < rows; ++r) copy_rows<true, 4>(l, data, const_cast<uint8_t*>(row.data()), r, 1);
    }
  }

 protected:
  // Padding rows of each matrix's last panel read as zero scales and quants.
  void init_tensor(Tensor& t) override {
    if (!is_repacked(t)) return;
    const PanelLayout l = panel_layout(t);
    if (l.type == DType::kQ6_K) q6k_tensors_.emplace_back(static_cast<uint8_t*>(t.data), l);
    if (l.rows % kPanelRows == 0) return;
    for (int64_t m = 0; m < l.matrices; ++m) {
      uint8_t* last = static_cast<uint8_t*>(t.data) + static_cast<size_t>(m) * l.matrix_bytes +
                      static_cast<size_t>(l.panels - 1) * l.panel_bytes;
      std::memset(last, 0, l.panel_bytes);
    }
  }

  void write(Tensor& t, const void* src, size_t offset, size_t size) override {
    const Tensor& root = storage_of(t);
    if (!is_repacked(root)) {
      std::memcpy(static_cast<uint8_t*>(t.data) + offset, src, size);
      return;
    }
    transfer<true>(panel_layout(root), static_cast<uint8_t*>(root.data),
                   const_cast<uint8_t*>(static_cast<const uint8_t*>(src)),
                   offset_in_root(t, root) + offset, size);
  }

  void read(const Tensor& t, void* dst, size_t offset, size_t size) const override {
    const Tensor& root = storage_of(t);
    if (!is_repacked(root)) {
      std::memcpy(dst, static_cast<const uint8_t*>(t.data) + offset, size);
      return;
    }
    transfer<false>(panel_layout(root), static_cast<uint8_t*>(root.data),
                    static_cast<uint8_t*>(dst), offset_in_root(t, root) + offset, size);
  }

 private:
  // A view's bytes start view offset bytes into its root's original layout.
  static size_t offset_in_root(const Tensor& t, const Tensor& root) {
    return static_cast<size_t>(static_cast<const uint8_t*>(t.data) -
                               static_cast<const uint8_t*>(root.data));
  }

  std::vector<std::pair<uint8_t*, PanelLayout>> q6k_tensors_;  // what clear() re-encodes
  std::shared_ptr<void> keep_;  // wrapped memory (a mapped weights image); null: our own
};

}  // namespace

bool repacks(const Tensor& t) {
  switch (t.type) {
    case DType::kQ4_0:
    case DType::kQ8_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kMXFP4:
      return true;
    case DType::kF16:
      return t.ne[0] % kQK == 0;
    default:
      return false;
  }
}

PanelLayout panel_layout(const Tensor& t) {
  TESSERA_CHECK(repacks(t), "panel_layout of {}", t.describe());
  PanelLayout l;
  l.type = t.type;
  l.rows = t.ne[1];
  l.blocks = t.ne[0] / (t.type == DType::kF16 ? kQK : dtype_info(t.type).block_size);
  l.panels = (l.rows + kPanelRows - 1) / kPanelRows;
  l.matrices = t.ne[2] * t.ne[3];
  if (t.type == DType::kF16) {
    l.block_bytes = kQK * sizeof(uint16_t);
    l.scale_bytes = 0;
    l.group_bytes = sizeof(uint16_t);
  } else {
    l.block_bytes = dtype_info(t.type).block_bytes;
    // d, dmin (IQ4_XS: d, scales_h, moved as a second f16)
    const bool two = t.type == DType::kQ2_K || t.type == DType::kQ4_K ||
                     t.type == DType::kQ5_K || t.type == DType::kIQ4_XS;
    l.scale_bytes = two                        ? 2 * sizeof(uint16_t)
                    : t.type == DType::kMXFP4 ? 1  // e, E8M0
                                              : sizeof(uint16_t);
    // Q2_K, Q3_K and Q6_K keep theirs last.
    l.scale_at = t.type == DType::kQ6_K   ? offsetof(block_q6_K, d)
                 : t.type == DType::kQ3_K ? offsetof(block_q3_K, d)
                 : t.type == DType::kQ2_K ? offsetof(block_q2_K, d)
                                          : 0;
    l.group_bytes = 4;
  }
  l.quant_bytes = l.block_bytes - l.scale_bytes;
  l.panel_bytes = kPanelRows * static_cast<size_t>(l.blocks) * l.block_bytes;
  l.matrix_bytes = static_cast<size_t>(l.panels) * l.panel_bytes;
  return l;
}

void pack_bytes(const PanelLayout& layout, uint8_t* panels, const uint8_t* src, size_t offset,
                size_t size) {
  transfer<true>(layout, panels, const_cast<uint8_t*>(src), offset, size);
}

void unpack_bytes(const PanelLayout& layout, const uint8_t* panels, uint8_t* dst, size_t offset,
                  size_t size) {
  transfer<false>(layout, const_cast<uint8_t*>(panels), dst, offset, size);
}

size_t CpuWeightsBufferType::alloc_size(const Tensor& t) const {
  if (t.view_src == nullptr && repacks(t) && t.is_contiguous()) {
    return panel_layout(t).total_bytes();
  }
  return t.n_bytes();
}

std::unique_ptr<Buffer> CpuWeightsBufferType::allocate(size_t bytes) {
  return std::make_unique<CpuWeightsBuffer>(*this, bytes);
}

std::unique_ptr<Buffer> CpuWeightsBufferType::wrap(void* base, size_t bytes,
                                                   std::shared_ptr<void> keep) {
  return std::make_unique<CpuWeightsBuffer>(*this, base, bytes, std::move(keep));
}

const Tensor& storage_of(const Tensor& t) {
  const Tensor* r = &t;
  while (r->view_src != nullptr) r = r->view_src;
  return *r;
}

bool is_repacked(const Tensor& t) {
  return t.view_src == nullptr && t.buffer != nullptr && repacks(t) && t.is_contiguous() &&
         dynamic_cast<const CpuWeightsBufferType*>(&t.buffer->type()) != nullptr;
}

bool is_view_of_repacked(const Tensor& t) {
  return t.view_src != nullptr && is_repacked(storage_of(t));
}

void read_row_f32(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* out) {
  if (!is_repacked(t)) {
    row_to_float(t.type, row_ptr(t, i1, i2, i3), out, t.ne[0]);
    return;
  }
  const PanelLayout l = panel_layout(t);
  if (t.type != DType::kF16 && t.type != DType::kQ4_0 && t.type != DType::kQ8_0) {
    // The row's bytes, then the reference.
    thread_local std::vector<uint8_t> bytes;
    bytes.resize(l.row_bytes());
    const size_t row = static_cast<size_t>(i1 + (i2 + i3 * t.ne[2]) * l.rows);
    unpack_bytes(l, static_cast<const uint8_t*>(t.data), bytes.data(), row * l.row_bytes(),
                 l.row_bytes());
    row_to_float(t.type, bytes.data(), out, t.ne[0]);
    return;
  }
  const uint8_t* matrix =
      static_cast<const uint8_t*>(t.data) + static_cast<size_t>(i2 + i3 * t.ne[2]) * l.matrix_bytes;
  for (int64_t b = 0; b < l.blocks; ++b, out += kQK) {
    uint16_t h;
    if (t.type == DType::kF16) {
      for (size_t j = 0; j < kQK; ++j) {
        std::memcpy(&h, matrix + panel_offset(l, i1, b, 2 * j), sizeof h);
        out[j] = fp16_to_fp32(h);
      }
      continue;
    }
    std::memcpy(&h, matrix + panel_offset(l, i1, b, 0), sizeof h);
    const float d = fp16_to_fp32(h);
    const uint8_t* q = matrix + panel_offset(l, i1, b, l.scale_bytes);
    for (int j = 0; j < 16; ++j) {
      const uint8_t byte = q[(j / 4) * 64 + j % 4];
      if (t.type == DType::kQ4_0) {  // as dequantize_row_q4_0_ref
        out[j] = static_cast<float>((byte & 0xF) - 8) * d;
        out[j + 16] = static_cast<float>((byte >> 4) - 8) * d;
      } else {  // as dequantize_row_q8_0_ref
        out[j] = static_cast<float>(static_cast<int8_t>(byte)) * d;
        const uint8_t hi = q[((j + 16) / 4) * 64 + j % 4];
        out[j + 16] = static_cast<float>(static_cast<int8_t>(hi)) * d;
      }
    }
  }
}

}  // namespace tessera::cpu
