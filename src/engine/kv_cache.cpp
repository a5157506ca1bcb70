#include "tessera/engine/kv_cache.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>

#include "tessera/core/error.h"

namespace tessera {
namespace {

std::string seq_list(SeqSet seqs) {
  std::string out;
  for (int s = 0; s < kMaxSequences; ++s) {
    if ((seqs & seq_bit(s)) != 0) out += fmt::format("{}{}", out.empty() ? "" : ", ", s);
  }
  return out;
}

void check_type(DType type, int64_t head_dim, const char* which) {
  const DTypeInfo& info = dtype_info(type);
  const bool plain = type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
  if (!plain && !(info.quantized && info.has_quantize && info.has_dequantize)) {
    fail(ErrorCategory::kInvalidArgument,
         "[kv cache] {} type {}, expected f32, f16, bf16 or a quantized type such as q8_0, q4_0",
         which, info.name);
  }
  if (head_dim % info.block_size != 0) {
    fail(ErrorCategory::kInvalidArgument,
         "[kv cache] {} type {} needs the head size ({}) to be a multiple of its block size {}",
         which, info.name, head_dim, info.block_size);
  }
}

}  // namespace

KvCache::KvCache(const KvCacheOptions& options, int64_t n_embd_kv, int64_t head_dim,
                 std::span<Device* const> layer_devices)
    : n_ctx_(options.n_ctx), type_k_(options.type_k), type_v_(options.type_v) {
  if (n_ctx_ < 1 || n_ctx_ > (int64_t{1} << 24)) {
    fail(ErrorCategory::kInvalidArgument, "[kv cache] context size {}, expected 1 to {}", n_ctx_,
         int64_t{1} << 24);
  }
  check_type(type_k_, head_dim, "key");
  check_type(type_v_, head_dim, "value");
  cells_.resize(static_cast<size_t>(n_ctx_));
  // One buffer per device, zeroed: rows never written read as zeros.
  std::vector<TensorPlacement> placed;
  for (size_t il = 0; il < layer_devices.size(); ++il) {
    if (layer_devices[il] == nullptr) {  // a layer another pipeline stage holds
      k_.push_back(nullptr);
      v_.push_back(nullptr);
      continue;
    }
    for (bool is_k : {true, false}) {
      Tensor* t = arena_.new_tensor(is_k ? type_k_ : type_v_, {n_embd_kv, rows()},
                                    fmt::format("cache_{}_{}", is_k ? 'k' : 'v', il));
      (is_k ? k_ : v_).push_back(t);
      placed.push_back({t, &layer_devices[il]->buffer_type()});
    }
  }
  buffers_ = pack_tensors(placed, BufferUsage::kAny, uint8_t{0});
}

int64_t KvCache::used_end() const {
  for (int64_t i = n_ctx_; i > 0; --i) {
    if (cells_[static_cast<size_t>(i - 1)].seqs != 0) return i;
  }
  return 0;
}

void KvCache::find_slot(const Batch& batch, size_t begin, size_t end, std::span<int64_t> cells) {
  const auto n = static_cast<int64_t>(end - begin);
  TESSERA_CHECK(cells.size() >= static_cast<size_t>(n));
  if (n > n_ctx_ - used_) {
    SeqSet asking = 0;
    for (size_t i = begin; i < end; ++i) asking |= batch.seqs[i];
    fail(ErrorCategory::kInvalidArgument,
         "[kv cache] full: sequence{} {} asked for {} cells, {} of {} are free",
         std::popcount(asking) == 1 ? "" : "s", seq_list(asking), n, n_ctx_ - used_, n_ctx_);
  }
  // First fit from the start keeps the cells in use low, so attention reads
  // fewer rows.
  size_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    while (cells_[next].seqs != 0) ++next;
    Cell& c = cells_[next];
    c.pos = batch.pos[begin + static_cast<size_t>(i)];
    c.seqs = batch.seqs[begin + static_cast<size_t>(i)];
    c.shift = 0;
    cells[static_cast<size_t>(i)] = static_cast<int64_t>(next);
    used_ += 1;
  }
}

void KvCache::free_cell(Cell& c) {
  if (c.seqs != 0) used_ -= 1;
  c = Cell{};
}

void KvCache::release(std::span<const int64_t> cells) {
  for (int64_t i : cells) free_cell(cells_[static_cast<size_t>(i)]);
}

namespace {
bool in_range(int32_t pos, int32_t p0, int32_t p1) {
  return pos >= (p0 < 0 ? 0 : p0) && (p1 < 0 || pos < p1);
}
void check_seq(int seq, bool allow_all) {
  if ((seq < 0 && !(allow_all && seq == -1)) || seq >= kMaxSequences) {
    fail(ErrorCategory::kInvalidArgument, "[kv cache] sequence id {}, expected {}0 to {}", seq,
         allow_all ? "-1 (all) or " : "", kMaxSequences - 1);
  }
}
}  // namespace

void KvCache::seq_rm(int seq, int32_t p0, int32_t p1) {
  check_seq(seq, true);
  const SeqSet drop = seq < 0 ? ~SeqSet{0} : seq_bit(seq);
  for (Cell& c : cells_) {
    if ((c.seqs & drop) == 0 || !in_range(c.pos, p0, p1)) continue;
    c.seqs &= ~drop;
    if (c.seqs == 0) {
      used_ -= 1;
      c = Cell{};
    }
  }
}

void KvCache::seq_cp(int src, int dst, int32_t p0, int32_t p1) {
  check_seq(src, false);
  check_seq(dst, false);
  if (src == dst) return;
  for (Cell& c : cells_) {
    if ((c.seqs & seq_bit(src)) != 0 && in_range(c.pos, p0, p1)) c.seqs |= seq_bit(dst);
  }
}

void KvCache::seq_keep(int seq) {
  check_seq(seq, false);
  for (Cell& c : cells_) {
    if (c.seqs == 0) continue;
    if ((c.seqs & seq_bit(seq)) == 0) {
      free_cell(c);
    } else {
      c.seqs = seq_bit(seq);
    }
  }
}

void KvCache::seq_add(int seq, int32_t p0, int32_t p1, int32_t delta) {
  check_seq(seq, true);
  if (delta == 0) return;
  const SeqSet which = seq < 0 ? ~SeqSet{0} : seq_bit(seq);
  for (Cell& c : cells_) {
    if ((c.seqs & which) == 0 || !in_range(c.pos, p0, p1)) continue;
    c.pos += delta;
    c.shift += delta;
    has_shift_ = true;
    if (c.pos < 0) free_cell(c);
  }
}

int32_t KvCache::seq_pos_max(int seq) const {
  check_seq(seq, false);
  int32_t best = -1;
  for (const Cell& c : cells_) {
    if ((c.seqs & seq_bit(seq)) != 0) best = std::max(best, c.pos);
  }
  return best;
}

std::vector<int64_t> KvCache::seq_cells(int seq) const {
  check_seq(seq, false);
  std::vector<int64_t> out;
  for (size_t i = 0; i < cells_.size(); ++i) {
    if ((cells_[i].seqs & seq_bit(seq)) != 0) out.push_back(static_cast<int64_t>(i));
  }
  std::sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
    return cells_[static_cast<size_t>(a)].pos < cells_[static_cast<size_t>(b)].pos;
  });
  return out;
}

void KvCache::clear() {
  for (Cell& c : cells_) c = Cell{};
  used_ = 0;
  has_shift_ = false;
}

void KvCache::shifts(std::span<int32_t> shift) const {
  TESSERA_CHECK(shift.size() >= static_cast<size_t>(rows()));
  for (size_t i = 0; i < cells_.size(); ++i) shift[i] = cells_[i].seqs != 0 ? cells_[i].shift : 0;
  shift[static_cast<size_t>(n_ctx_)] = 0;
}

void KvCache::clear_shift() {
  for (Cell& c : cells_) c.shift = 0;
  has_shift_ = false;
}

void KvCache::build_mask(const Batch& batch, size_t begin, size_t end, int64_t n_kv,
                         int64_t n_tokens, float* mask, const MaskRule& rule) const {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto n = static_cast<int64_t>(end - begin);
  const int64_t visible = std::min(n_kv, n_ctx_);
  for (int64_t i = 0; i < n; ++i) {
    float* row = mask + i * n_kv;
    const SeqSet seqs = batch.seqs[begin + static_cast<size_t>(i)];
    const int32_t pos = batch.pos[begin + static_cast<size_t>(i)];
    for (int64_t j = 0; j < visible; ++j) {
      const Cell& c = cells_[static_cast<size_t>(j)];
      const int64_t behind = int64_t{pos} - c.pos;
      const bool in_window = rule.n_swa <= 0 ||
                             (rule.swa_symmetric ? std::abs(behind) <= rule.n_swa / 2 : behind < rule.n_swa);
      const bool seen = (c.seqs & seqs) != 0 && (!rule.causal || behind >= 0) && in_window;
      row[j] = !seen ? -kInf : rule.alibi ? -static_cast<float>(std::abs(behind)) : 0.0f;
    }
    for (int64_t j = visible; j < n_kv; ++j) row[j] = -kInf;  // the padding row
  }
  // Padding tokens see every row: finite results that nobody reads.
  std::fill(mask + n * n_kv, mask + n_tokens * n_kv, 0.0f);
}

}  // namespace tessera
