//===- replay-buffer-test.cpp - SPO-tree's replay buffer ------------------===//
//
// The buffer's rules (estimators.md §3.5): an entry waits at most `steps`
// steps, a question gives at most `take` entries a step, chosen by a hash, and
// what is taken is removed. The choice and the order must not depend on which
// other questions share the buffer (data-parallel workers each hold some), and
// the checkpoint form (packed numbers) must round-trip exactly.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/ReplayBuffer.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

using namespace cac::rt::train;

namespace {

/// \p n entries of question (step, slot), with recognisable contents.
std::vector<ReplayEntry> question(int64_t step, int64_t slot, int n) {
  std::vector<ReplayEntry> out;
  for (int i = 0; i < n; ++i) {
    ReplayEntry e;
    e.step = step;
    e.slot = slot;
    e.sample.prompt = {1, 2, slot};
    e.sample.response = {10 + i, 11 + i};
    e.sample.logp = {-0.5f - float(i), -0.25f};
    e.sample.entropy = {0.125f, 1.0f / 3.0f};
    e.sample.reward = i % 2;
    e.sample.correct = i % 2 == 1;
    e.adv = {0.1f * float(i), -0.7f};
    e.weight = {1.0f, 0.0f};
    out.push_back(e);
  }
  return out;
}

using Id = std::tuple<int64_t, int64_t, int64_t>; // step, slot, ordinal

std::vector<Id> ids(const std::vector<ReplayEntry> &es) {
  std::vector<Id> v;
  for (const ReplayEntry &e : es)
    v.emplace_back(e.step, e.slot, e.ordinal);
  return v;
}

} // namespace

TEST(ReplayBuffer, OffTrainsEveryFreshSampleInPlanOrder) {
  ReplayBuffer b; // steps = 0
  EXPECT_FALSE(b.enabled());
  auto in = question(0, 1, 3);
  auto q0 = question(0, 0, 2);
  in.insert(in.end(), q0.begin(), q0.end());
  b.add(in);
  ReplayBuffer::Taken t = b.take(0, 7);
  EXPECT_EQ(t.dropped, 0);
  // Ordered by slot, then as added; ordinals count within a question.
  EXPECT_EQ(ids(t.entries),
            (std::vector<Id>{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                             {0, 1, 2}}));
  EXPECT_EQ(b.size(), 0u);
}

TEST(ReplayBuffer, AQuestionGivesAtMostTakeAStepUntilItIsStale) {
  ReplayBuffer b(/*steps=*/3, /*take=*/2);
  b.add(question(0, 0, 5));
  std::set<int64_t> trained;
  for (int64_t step = 0; step < 3; ++step) {
    ReplayBuffer::Taken t = b.take(step, 11);
    EXPECT_EQ(t.dropped, 0);
    ASSERT_EQ(t.entries.size(), step < 2 ? 2u : 1u) << "step " << step;
    for (const ReplayEntry &e : t.entries)
      EXPECT_TRUE(trained.insert(e.ordinal).second) << "trained twice";
  }
  EXPECT_EQ(trained.size(), 5u);
  // Stale: entries of step s are dropped at step s + steps.
  ReplayBuffer c(2, 1);
  c.add(question(0, 0, 4));
  EXPECT_EQ(c.take(0, 1).entries.size(), 1u);
  EXPECT_EQ(c.take(1, 1).entries.size(), 1u);
  ReplayBuffer::Taken late = c.take(2, 1);
  EXPECT_EQ(late.dropped, 2);
  EXPECT_TRUE(late.entries.empty());
  EXPECT_EQ(c.size(), 0u);
}

TEST(ReplayBuffer, TheChoiceIsAHashAndIgnoresOtherQuestions) {
  // One buffer with questions 0-3 against two holding 0-1 and 2-3 (two
  // workers): the same entries, and in slot order the concatenation.
  auto fill = [](ReplayBuffer &b, int64_t lo, int64_t hi) {
    for (int64_t step = 0; step < 2; ++step) {
      std::vector<ReplayEntry> es;
      for (int64_t s = lo; s < hi; ++s) {
        auto q = question(step, s, 6);
        es.insert(es.end(), q.begin(), q.end());
      }
      b.add(es);
    }
  };
  ReplayBuffer one(4, 3), a(4, 3), b(4, 3);
  fill(one, 0, 4);
  fill(a, 0, 2);
  fill(b, 2, 4);
  for (int64_t step = 1; step < 4; ++step) {
    auto all = ids(one.take(step, 5).entries);
    auto first = ids(a.take(step, 5).entries);
    auto second = ids(b.take(step, 5).entries);
    first.insert(first.end(), second.begin(), second.end());
    EXPECT_EQ(all, first) << "step " << step;
    // Slot-major, then sampling step, then ordinal.
    std::vector<Id> sorted = all;
    std::sort(sorted.begin(), sorted.end(), [](const Id &x, const Id &y) {
      return std::tie(std::get<1>(x), std::get<0>(x), std::get<2>(x)) <
             std::tie(std::get<1>(y), std::get<0>(y), std::get<2>(y));
    });
    EXPECT_EQ(all, sorted);
    std::map<std::pair<int64_t, int64_t>, int> perQuestion;
    for (const Id &i : all)
      ++perQuestion[{std::get<0>(i), std::get<1>(i)}];
    for (const auto &[q, n] : perQuestion)
      EXPECT_LE(n, 3);
  }
  // Another seed chooses other entries; the same seed the same ones.
  ReplayBuffer x(4, 2), y(4, 2), z(4, 2);
  for (ReplayBuffer *r : {&x, &y, &z})
    r->add(question(0, 0, 20));
  auto ex = ids(x.take(0, 1).entries);
  EXPECT_EQ(ex, ids(y.take(0, 1).entries));
  EXPECT_NE(ex, ids(z.take(0, 2).entries));
}

TEST(ReplayBuffer, PackedFormRoundTripsAndLoadsAWorkersShare) {
  ReplayBuffer b(8, 0);
  b.add(question(3, 0, 2));
  b.add(question(4, 5, 3));
  auto back = ReplayBuffer::unpack(ReplayBuffer::pack(b.entries()));
  ReplayBuffer all(8, 0), mine(8, 0);
  all.load(back, 0, 100);
  mine.load(back, 1, 6); // a worker holding slots 1..5
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(ids(all.entries()), ids(b.entries()));
  EXPECT_EQ(mine.size(), 3u);
  for (const ReplayEntry &e : mine.entries())
    EXPECT_EQ(e.slot, 5);
  ASSERT_EQ(back.size(), b.size());
  for (size_t i = 0; i < back.size(); ++i) {
    const ReplayEntry &e = back[i], &w = b.entries()[i];
    EXPECT_EQ(e.sample.prompt, w.sample.prompt);
    EXPECT_EQ(e.sample.response, w.sample.response);
    EXPECT_EQ(e.sample.logp, w.sample.logp); // bit-exact floats
    EXPECT_EQ(e.sample.entropy, w.sample.entropy);
    EXPECT_EQ(e.sample.reward, w.sample.reward);
    EXPECT_EQ(e.sample.correct, w.sample.correct);
    EXPECT_EQ(e.adv, w.adv);
    EXPECT_EQ(e.weight, w.weight);
    EXPECT_EQ(e.ordinal, w.ordinal);
  }
}

TEST(ReplayBuffer, MalformedPackedFormsAreErrors) {
  auto expectError = [](std::vector<double> packed, const std::string &what) {
    try {
      ReplayBuffer::unpack(packed);
      FAIL() << "no error for " << what;
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
          << e.what();
    }
  };
  const std::vector<double> good = ReplayBuffer::pack(question(0, 0, 1));
  // Header: step, slot, ordinal, reward, correct, prompt, tokens, weights.
  std::vector<double> truncated = good;
  truncated.pop_back();
  expectError(truncated, "a packed entry is truncated");
  std::vector<double> negative = good;
  negative[6] = -1;
  expectError(negative, "a packed entry has an invalid length");
  std::vector<double> weights = good;
  weights[7] = 1; // 1 weight for 2 tokens
  expectError(weights, "weight differs in length from its tokens");
}
