//===- BpeMerges.h - Ranked BPE merges in n log n ---------------*- C++ -*-===//
//
// The merge loop of byte-level BPE, apart from any vocabulary so that its
// cost can be counted: symbols are ids, and a lookup says which adjacent
// pairs merge, at what rank, into which id.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_BPEMERGES_H
#define CAC_RUNTIME_MODEL_BPEMERGES_H

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace cac::rt {

/// What a pair of adjacent symbols merges into: the id of the result, and
/// the rank of the merge (lower ranks merge first).
struct BpeMerge {
  int64_t rank = 0;
  int64_t id = 0;
};

/// The merge of the adjacent symbols (\p left, \p right), if they merge.
using BpeMergeLookup =
    std::function<std::optional<BpeMerge>(int64_t left, int64_t right)>;

/// Merges \p ids in place as Hugging Face's BPE does: while some adjacent
/// pair merges, the pair of lowest rank merges (the leftmost of equal
/// ranks), and a merged symbol may merge again with its new neighbours.
/// A priority queue over the adjacent pairs of a linked list: O(n log n)
/// time for n symbols, and at most 6n calls of \p lookup.
void applyBpeMerges(std::vector<int64_t> &ids, const BpeMergeLookup &lookup);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_BPEMERGES_H
