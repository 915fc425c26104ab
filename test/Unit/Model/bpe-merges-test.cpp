//===- bpe-merges-test.cpp - Ranked BPE merges in n log n -----------------===//

#include "cac/Runtime/Model/BpeMerges.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>

using namespace cac::rt;

namespace {

using Ids = std::vector<int64_t>;
using Table = std::map<std::pair<int64_t, int64_t>, BpeMerge>;

/// The merge loop as it reads in the BPE papers (and as the tokenizer ran
/// it before): find the lowest-ranked adjacent pair, merge each of its
/// occurrences left to right, rescan. Quadratic, but plainly right.
Ids reference(Ids ids, const Table &table) {
  while (ids.size() > 1) {
    int64_t best = std::numeric_limits<int64_t>::max();
    std::pair<int64_t, int64_t> pair;
    for (size_t k = 0; k + 1 < ids.size(); ++k) {
      auto it = table.find({ids[k], ids[k + 1]});
      if (it != table.end() && it->second.rank < best) {
        best = it->second.rank;
        pair = it->first;
      }
    }
    if (best == std::numeric_limits<int64_t>::max())
      break;
    Ids merged;
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k + 1 < ids.size() && ids[k] == pair.first &&
          ids[k + 1] == pair.second) {
        merged.push_back(table.at(pair).id);
        ++k;
      } else {
        merged.push_back(ids[k]);
      }
    }
    ids = std::move(merged);
  }
  return ids;
}

/// A consistent random merge table over \p base symbols: merge k joins two
/// symbols that exist before it into the new id base + k, at rank k.
Table randomTable(std::mt19937 &rng, int64_t base, int64_t merges) {
  Table t;
  for (int64_t k = 0; k < merges; ++k) {
    std::uniform_int_distribution<int64_t> pick(0, base + k - 1);
    // Early symbols more often, so that merges chain.
    int64_t a = std::min(pick(rng), pick(rng)),
            b = std::min(pick(rng), pick(rng));
    t.emplace(std::make_pair(a, b), BpeMerge{k, base + k});
  }
  return t;
}

struct Counted {
  const Table &table;
  size_t calls = 0;
  BpeMergeLookup lookup() {
    return [this](int64_t a, int64_t b) -> std::optional<BpeMerge> {
      ++calls;
      auto it = table.find({a, b});
      if (it == table.end())
        return std::nullopt;
      return it->second;
    };
  }
};

} // namespace

TEST(BpeMerges, SameResultAsTheRescanningLoop) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    int64_t base = 2 + trial % 5;
    Table table = randomTable(rng, base, 3 + trial % 40);
    Ids ids(1 + rng() % 60);
    for (int64_t &x : ids)
      x = static_cast<int64_t>(rng() % base);
    Counted c{table};
    Ids got = ids;
    applyBpeMerges(got, c.lookup());
    ASSERT_EQ(got, reference(ids, table)) << "trial " << trial;
  }
}

TEST(BpeMerges, LeftmostOfEqualRanksFirst) {
  // "aaa" with a+a: the left pair merges, the last a stays.
  Table table = {{{0, 0}, BpeMerge{0, 1}}};
  Counted c{table};
  Ids ids = {0, 0, 0};
  applyBpeMerges(ids, c.lookup());
  EXPECT_EQ(ids, (Ids{1, 0}));
}

TEST(BpeMerges, LookupsAreLinearInTheSymbols) {
  // The merge count of a piece of n symbols bounds the work: at most 6n
  // lookups (the first n - 1 pairs, two new pairs per merge, one check per
  // queued pair) however deep the merges chain. A loop that rescans after
  // each merge makes about n^2 / 2 here.
  const size_t n = 1 << 17;
  // Doubling merges: a+a, aa+aa, ... so a run of 2^17 a's merges 17 levels.
  Table doubling;
  for (int64_t k = 0; k < 17; ++k)
    doubling.emplace(std::make_pair(k, k), BpeMerge{k, k + 1});
  Counted c{doubling};
  Ids ids(n, 0);
  applyBpeMerges(ids, c.lookup());
  EXPECT_EQ(ids, Ids{17});
  EXPECT_LE(c.calls, 6 * n);

  // A random table over random text: the same bound.
  std::mt19937 rng(11);
  Table random = randomTable(rng, 4, 500);
  Ids text(n);
  for (int64_t &x : text)
    x = static_cast<int64_t>(rng() % 4);
  Counted r{random};
  Ids merged = text;
  applyBpeMerges(merged, r.lookup());
  EXPECT_LT(merged.size(), n * 3 / 4); // it did merge
  EXPECT_LE(r.calls, 6 * n);
}
