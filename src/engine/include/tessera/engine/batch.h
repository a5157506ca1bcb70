// Batch: the tokens one decode runs, each with its position, the sequences it
// belongs to, and whether its logits are wanted. One token may belong to
// several sequences (a prompt shared by all of them is decoded once).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace tessera {

// Sequence ids run from 0 to kMaxSequences - 1; a set of them is a bit mask.
inline constexpr int kMaxSequences = 64;
using SeqSet = uint64_t;
constexpr SeqSet seq_bit(int seq) { return SeqSet{1} << seq; }

struct Batch {
  std::vector<int32_t> token;
  std::vector<int32_t> pos;
  std::vector<SeqSet> seqs;
  std::vector<uint8_t> want_logits;

  size_t size() const { return token.size(); }
  bool empty() const { return token.empty(); }
  void clear() {
    token.clear();
    pos.clear();
    seqs.clear();
    want_logits.clear();
  }
  // Appends one token of the sequences `seq_ids` (each 0..kMaxSequences-1).
  void add(int32_t t, int32_t p, std::initializer_list<int> seq_ids, bool logits);
  void add(int32_t t, int32_t p, std::span<const int> seq_ids, bool logits);
  // Tokens at positions p0, p0+1, ... of one sequence; logits for the last
  // one only, or for each with all_logits.
  void add_sequence(std::span<const int32_t> tokens, int32_t p0, int seq, bool all_logits = false);
};

}  // namespace tessera
