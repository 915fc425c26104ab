//===- BpeMerges.cpp - Ranked BPE merges in n log n -----------------------===//

#include "cac/Runtime/Model/BpeMerges.h"

#include <queue>

namespace cac::rt {

namespace {

/// A pair that merged when it was queued: the merge, and the position of
/// its left symbol.
struct Candidate {
  int64_t rank;
  size_t pos;
  int64_t id;
  bool operator>(const Candidate &o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

constexpr size_t kNone = SIZE_MAX;

} // namespace

void applyBpeMerges(std::vector<int64_t> &ids, const BpeMergeLookup &lookup) {
  size_t n = ids.size();
  if (n < 2)
    return;
  // A doubly linked list over the positions; a merge keeps the left
  // position and unlinks the right one.
  std::vector<size_t> prev(n), next(n);
  std::vector<bool> gone(n, false);
  for (size_t k = 0; k < n; ++k) {
    prev[k] = k == 0 ? kNone : k - 1;
    next[k] = k + 1 == n ? kNone : k + 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>,
                      std::greater<Candidate>>
      queue;
  auto offer = [&](size_t pos) {
    if (auto m = lookup(ids[pos], ids[next[pos]]))
      queue.push({m->rank, pos, m->id});
  };
  for (size_t k = 0; k + 1 < n; ++k)
    offer(k);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    if (gone[c.pos] || next[c.pos] == kNone)
      continue;
    // Either symbol may have merged since the pair was queued; as Hugging
    // Face does, the pair still merges if it now makes the same id.
    size_t right = next[c.pos];
    auto now = lookup(ids[c.pos], ids[right]);
    if (!now || now->id != c.id)
      continue;
    ids[c.pos] = c.id;
    gone[right] = true;
    next[c.pos] = next[right];
    if (next[right] != kNone)
      prev[next[right]] = c.pos;
    if (prev[c.pos] != kNone)
      offer(prev[c.pos]);
    if (next[c.pos] != kNone)
      offer(c.pos);
  }
  size_t w = 0;
  for (size_t k = 0; k < n; ++k)
    if (!gone[k])
      ids[w++] = ids[k];
  ids.resize(w);
}

} // namespace cac::rt
