//===- objective-test.cpp - PPO surrogate, aggregation, KL, value loss ----===//

#include "cac/Runtime/Train/Objective.h"
#include "cac/Runtime/Train/Trainer.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace cac::rt::train;

namespace {

at::Tensor t(std::vector<double> v) { return at::tensor(v, at::kDouble); }

// estimators.md §11.4: (ratio, A) -> f, and whether the gradient is cut.
TEST(Objective, PpoClipHandValues) {
  struct Case {
    double ratio, adv, f;
    bool clipped;
  };
  const Case cases[] = {{1.3, +1, 1.2, true},
                        {1.3, -1, -1.3, false},
                        {0.7, +1, 0.7, false},
                        {0.7, -1, -0.8, true},
                        {1.1, 0.5, 0.55, false}};
  for (const Case &c : cases) {
    at::Tensor w = t({c.ratio}).requires_grad_(true);
    at::Tensor f = clippedSurrogate(w, t({c.adv}), 0.2, 0.2);
    EXPECT_NEAR(f.item<double>(), c.f, 1e-12) << c.ratio << " " << c.adv;
    f.sum().backward();
    double g = w.grad().item<double>();
    if (c.clipped)
      EXPECT_EQ(g, 0.0) << c.ratio << " " << c.adv;
    else
      EXPECT_NEAR(g, c.adv, 1e-12) << c.ratio << " " << c.adv;
    EXPECT_EQ(clippedMask(t({c.ratio}), t({c.adv}), 0.2, 0.2).item<bool>(),
              c.clipped);
  }
}

TEST(Objective, AsymmetricClip) {
  // eps_high = 0.28 lets a positive advantage's ratio reach 1.28.
  EXPECT_NEAR(clippedSurrogate(t({1.3}), t({1}), 0.2, 0.28).item<double>(),
              1.28, 1e-12);
  EXPECT_NEAR(clippedSurrogate(t({0.7}), t({-1}), 0.2, 0.28).item<double>(),
              -0.8, 1e-12);
}

TEST(Objective, AggregationModes) {
  // Two sequences: [1, 2, 3] and [10].
  at::Tensor x = t({1, 2, 3, 10});
  at::Tensor seq = at::tensor({0, 0, 0, 1}, at::kLong);
  EXPECT_NEAR(aggregate(x, seq, 2, Aggregation::TokenMean).item<double>(),
              16.0 / 4, 1e-12);
  EXPECT_NEAR(
      aggregate(x, seq, 2, Aggregation::SeqMeanTokenMean).item<double>(),
      (2.0 + 10.0) / 2, 1e-12);
  EXPECT_NEAR(aggregate(x, seq, 2, Aggregation::SeqMeanTokenSum).item<double>(),
              (6.0 + 10.0) / 2, 1e-12);
  EXPECT_NEAR(
      aggregate(x, seq, 2, Aggregation::SeqMeanTokenSumNorm, 8).item<double>(),
      (6.0 + 10.0) / 2 / 8, 1e-12);
  // A sequence without tokens still counts in B.
  EXPECT_NEAR(
      aggregate(x, seq, 3, Aggregation::SeqMeanTokenMean).item<double>(),
      12.0 / 3, 1e-12);
  // Gradients: seq-mean-token-mean weighs a token by 1/(B*T_i).
  at::Tensor y = x.clone().requires_grad_(true);
  aggregate(y, seq, 2, Aggregation::SeqMeanTokenMean).backward();
  at::Tensor g = y.grad();
  EXPECT_NEAR(g[0].item<double>(), 1.0 / 6, 1e-12);
  EXPECT_NEAR(g[3].item<double>(), 1.0 / 2, 1e-12);
  // Empty batch: zero, still differentiable.
  at::Tensor e = at::zeros({0}, at::kDouble).requires_grad_(true);
  at::Tensor z =
      aggregate(e, at::zeros({0}, at::kLong), 0, Aggregation::TokenMean);
  EXPECT_EQ(z.item<double>(), 0.0);
}

TEST(Objective, MaskedAggregationLeavesFullyMaskedSequencesOut) {
  // Three sequences: [1, 2, 3] with weights [1, 0, 1], [10] with 1, [5] with
  // 0: the last is out of B, and seq-mean-token-mean divides each sequence
  // by its weight sum (the compiled objectives' mask; verl's seq_mask).
  at::Tensor x = t({1, 2, 3, 10, 5});
  at::Tensor w = t({1, 0, 1, 1, 0});
  at::Tensor seq = at::tensor({0, 0, 0, 1, 2}, at::kLong);
  auto agg = [&](const at::Tensor &v, Aggregation mode) {
    return aggregateMasked(v, w, seq, 3, mode, 8);
  };
  EXPECT_NEAR(agg(x, Aggregation::TokenMean).item<double>(), 14.0 / 3, 1e-12);
  EXPECT_NEAR(agg(x, Aggregation::SeqMeanTokenMean).item<double>(),
              (2.0 + 10.0) / 2, 1e-12);
  EXPECT_NEAR(agg(x, Aggregation::SeqMeanTokenSum).item<double>(),
              (4.0 + 10.0) / 2, 1e-12);
  EXPECT_NEAR(agg(x, Aggregation::SeqMeanTokenSumNorm).item<double>(),
              (4.0 + 10.0) / 2 / 8, 1e-12);
  // Gradients: 1 / (B W_i) on the weighted tokens, 0 (not NaN) elsewhere.
  at::Tensor y = x.clone().requires_grad_(true);
  agg(y, Aggregation::SeqMeanTokenMean).backward();
  at::Tensor g = y.grad();
  EXPECT_NEAR(g[0].item<double>(), 1.0 / 4, 1e-12);
  EXPECT_EQ(g[1].item<double>(), 0.0);
  EXPECT_NEAR(g[3].item<double>(), 1.0 / 2, 1e-12);
  EXPECT_EQ(g[4].item<double>(), 0.0);
  // Every weight 0: zero, with a zero gradient.
  at::Tensor z = x.clone().requires_grad_(true);
  at::Tensor none = aggregateMasked(z, at::zeros_like(w), seq, 3,
                                    Aggregation::SeqMeanTokenMean, 8);
  EXPECT_EQ(none.item<double>(), 0.0);
  none.backward();
  EXPECT_EQ(z.grad().abs().sum().item<double>(), 0.0);
}

TEST(Objective, KlEstimators) {
  at::Tensor logp = t({-1.0, -2.0}), ref = t({-1.5, -1.0});
  at::Tensor k1 = klEstimate(logp, ref, KlSpec::Kind::K1);
  EXPECT_NEAR(k1[0].item<double>(), 0.5, 1e-12);
  EXPECT_NEAR(k1[1].item<double>(), -1.0, 1e-12);
  at::Tensor k3 = klEstimate(logp, ref, KlSpec::Kind::K3);
  // k3 = exp(ref - logp) - (ref - logp) - 1.
  EXPECT_NEAR(k3[0].item<double>(), std::exp(-0.5) + 0.5 - 1, 1e-12);
  EXPECT_NEAR(k3[1].item<double>(), std::exp(1.0) - 1.0 - 1, 1e-12);
  // k3 is never negative and zero at equality.
  EXPECT_EQ(klEstimate(logp, logp, KlSpec::Kind::K3).abs().max().item<double>(),
            0.0);
}

TEST(Objective, ClippedValueLoss) {
  // V_old = 0.5, target 1.0, eps_v = 0.2.
  // V = 0.9: unclipped error 0.01, clipped V 0.7 -> 0.09: max is 0.09.
  EXPECT_NEAR(valueLoss(t({0.9}), t({0.5}), t({1.0}), 0.2).item<double>(),
              0.5 * 0.09, 1e-12);
  // V = 0.6 (inside the clip range): 0.5 * 0.16.
  EXPECT_NEAR(valueLoss(t({0.6}), t({0.5}), t({1.0}), 0.2).item<double>(),
              0.5 * 0.16, 1e-12);
  // No clipping.
  EXPECT_NEAR(valueLoss(t({0.9}), t({0.5}), t({1.0}), 0).item<double>(),
              0.5 * 0.01, 1e-12);
}

TEST(Objective, Whiten) {
  at::Tensor w = whiten(t({1, 2, 3}));
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-12);
  EXPECT_NEAR(w.std().item<double>(), 1.0, 1e-6);
}

TEST(Objective, Schedules) {
  ScheduleSpec c;
  EXPECT_EQ(scheduleFactor(c, 0, 10), 1.0);
  c.warmup = 3;
  EXPECT_NEAR(scheduleFactor(c, 0, 10), 0.25, 1e-12);
  EXPECT_NEAR(scheduleFactor(c, 2, 10), 0.75, 1e-12);
  EXPECT_EQ(scheduleFactor(c, 3, 10), 1.0);
  ScheduleSpec cos;
  cos.kind = ScheduleSpec::Kind::Cosine;
  cos.minRatio = 0.1;
  EXPECT_NEAR(scheduleFactor(cos, 0, 11), 1.0, 1e-12);
  EXPECT_NEAR(scheduleFactor(cos, 5, 11), 0.55, 1e-12);
  EXPECT_NEAR(scheduleFactor(cos, 10, 11), 0.1, 1e-12);
}

} // namespace
