#include "tessera/engine/batch.h"

#include "tessera/core/error.h"

namespace tessera {

void Batch::add(int32_t t, int32_t p, std::span<const int> seq_ids, bool logits) {
  SeqSet set = 0;
  for (int s : seq_ids) {
    if (s < 0 || s >= kMaxSequences) {
      fail(ErrorCategory::kInvalidArgument, "[batch] sequence id {}, expected 0 to {}", s,
           kMaxSequences - 1);
    }
    set |= seq_bit(s);
  }
  token.push_back(t);
  pos.push_back(p);
  seqs.push_back(set);
  want_logits.push_back(logits ? 1 : 0);
}

void Batch::add(int32_t t, int32_t p, std::initializer_list<int> seq_ids, bool logits) {
  add(t, p, std::span<const int>(seq_ids.begin(), seq_ids.size()), logits);
}

void Batch::add_sequence(std::span<const int32_t> tokens, int32_t p0, int seq, bool all_logits) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    add(tokens[i], p0 + static_cast<int32_t>(i), {seq}, all_logits || i + 1 == tokens.size());
  }
}

}  // namespace tessera
