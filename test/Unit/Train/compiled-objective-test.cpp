//===- compiled-objective-test.cpp - stdlib/ppo_clip.cac as the loss -----===//
//
// The compiled objective's loss and gradient, put on the model's tensor by
// CompiledObjective::surrogate, equal LibTorch autograd of the trainer's own
// C++ PPO loss (Objective.cpp) in every aggregation mode.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/CompiledObjective.h"
#include "cac/Runtime/Train/Objective.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace cac::rt;
using namespace cac::rt::train;
namespace fs = std::filesystem;

namespace {

std::string bundleDir() {
  return (fs::path(CAC_TEST_TRAIN_BUNDLES) / "ppo_clip").string();
}

class CompiledObjectiveTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fs::exists(fs::path(bundleDir()) / "manifest.json"))
      GTEST_SKIP() << "no compiled stdlib/ppo_clip.cac bundle";
  }
};

// The seq-mean modes divide by the sequences with an element that counts: a
// sequence its mask removes entirely is left out of B, as verl's agg_loss
// (seq_mask); token-mean divides by the elements.
TEST_F(CompiledObjectiveTest, SeqMeanModesLeaveFullyMaskedSequencesOut) {
  CompiledObjective obj(Bundle::load(bundleDir()));
  at::Tensor lossCount = at::tensor({3.0, 0.0, 2.0, 0.0}, at::kDouble);
  EXPECT_EQ(obj.normalizer(lossCount, 0), 5.0);
  for (int code = 1; code < 4; ++code)
    EXPECT_EQ(obj.normalizer(lossCount, code), 2.0) << code;
}

TEST_F(CompiledObjectiveTest, MatchesAutogradOfTheTrainersPpoLoss) {
  CompiledObjective obj(Bundle::load(bundleDir()));
  EXPECT_EQ(obj.wrt(), "logp_new");
  EXPECT_FALSE(obj.seqLoss());
  at::manual_seed(7);
  std::vector<int64_t> lengths = {5, 1, 17, 3, 9};
  int64_t N = 0;
  std::vector<int64_t> seqOf;
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t t = 0; t < lengths[b]; ++t, ++N)
      seqOf.push_back(int64_t(b));
  PackedBatch batch = PackedBatch::fromLengths(lengths);
  at::Tensor tokenSeq = at::tensor(seqOf, at::kLong);
  at::Tensor logp = -at::rand({N}, at::kFloat) * 3;
  at::Tensor adv = at::randn({N}, at::kFloat);
  // Ratios between about 0.6 and 1.6: both sides of the clip occur.
  at::Tensor base = logp + (at::rand({N}, at::kFloat) - 0.5);
  const Aggregation modes[] = {Aggregation::TokenMean,
                               Aggregation::SeqMeanTokenMean,
                               Aggregation::SeqMeanTokenSum,
                               Aggregation::SeqMeanTokenSumNorm};
  int clippedSomewhere = 0;
  for (int code = 0; code < 4; ++code) {
    const double normLen = 24;
    // The trainer's C++ loss and autograd.
    at::Tensor x1 = base.clone().requires_grad_(true);
    at::Tensor ratio = at::exp(x1 - logp);
    at::Tensor f = clippedSurrogate(ratio, adv, 0.2, 0.28);
    at::Tensor want = -aggregate(f, tokenSeq, int64_t(lengths.size()),
                                 modes[code], normLen);
    want.backward();
    // The compiled objective.
    at::Tensor x2 = base.clone().requires_grad_(true);
    auto r = obj.run({{"logp_new", x2.detach()}, {"logp", logp}, {"adv", adv}},
                     batch,
                     {{"eps_high", 0.28},
                      {"aggregation", double(code)},
                      {"norm_len", normLen}});
    at::Tensor got = CompiledObjective::surrogate(x2, r);
    got.backward();
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << code;
    EXPECT_TRUE(at::allclose(x2.grad(), x1.grad(), 1e-4, 1e-6))
        << "aggregation " << code << "\n"
        << (x2.grad() - x1.grad()).abs().max();
    clippedSomewhere += (x1.grad() == 0).sum().item<int>();
  }
  EXPECT_GT(clippedSomewhere, 0); // the clip cut some gradients
}

// The trainer's masked aggregation (SPO's `weight`) equals the compiled
// objectives' mask in every mode: stdlib/ppo_clip_is.cac with 0/1 weights is
// ppo_clip masked by them, and a sequence the weights remove entirely is out
// of B on both sides.
TEST_F(CompiledObjectiveTest, MaskedAggregationMatchesACompiledMask) {
  fs::path dir = fs::path(CAC_TEST_TRAIN_BUNDLES) / "ppo_clip_is";
  if (!fs::exists(dir / "manifest.json"))
    GTEST_SKIP() << "no compiled stdlib/ppo_clip_is.cac bundle";
  CompiledObjective obj(Bundle::load(dir.string()));
  at::manual_seed(11);
  std::vector<int64_t> lengths = {4, 1, 6, 3, 5};
  std::vector<int64_t> seqOf;
  std::vector<float> mask;
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t t = 0; t < lengths[b]; ++t) {
      seqOf.push_back(int64_t(b));
      // Sequences 1 and 3 masked entirely, every third token of the others.
      mask.push_back(b == 1 || b == 3 || t % 3 == 2 ? 0.0f : 1.0f);
    }
  const int64_t N = int64_t(seqOf.size());
  PackedBatch batch = PackedBatch::fromLengths(lengths);
  at::Tensor tokenSeq = at::tensor(seqOf, at::kLong);
  at::Tensor w = at::tensor(mask, at::kFloat);
  at::Tensor logp = -at::rand({N}, at::kFloat) * 3;
  at::Tensor adv = at::randn({N}, at::kFloat);
  at::Tensor base = logp + (at::rand({N}, at::kFloat) - 0.5);
  const Aggregation modes[] = {Aggregation::TokenMean,
                               Aggregation::SeqMeanTokenMean,
                               Aggregation::SeqMeanTokenSum,
                               Aggregation::SeqMeanTokenSumNorm};
  for (int code = 0; code < 4; ++code) {
    const double normLen = 12;
    at::Tensor x1 = base.clone().requires_grad_(true);
    at::Tensor f = clippedSurrogate(at::exp(x1 - logp), adv, 0.2, 0.2);
    at::Tensor want = -aggregateMasked(f, w, tokenSeq, int64_t(lengths.size()),
                                       modes[code], normLen);
    want.backward();
    at::Tensor x2 = base.clone().requires_grad_(true);
    auto r = obj.run({{"logp_new", x2.detach()},
                      {"logp", logp},
                      {"adv", adv},
                      {"is_weight", w}},
                     batch, {{"aggregation", double(code)}, {"norm_len", normLen}});
    at::Tensor got = CompiledObjective::surrogate(x2, r);
    got.backward();
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << code;
    EXPECT_TRUE(at::allclose(x2.grad(), x1.grad(), 1e-4, 1e-6))
        << "aggregation " << code << "\n"
        << (x2.grad() - x1.grad()).abs().max();
  }
}

TEST_F(CompiledObjectiveTest, RejectsAnEstimator) {
  fs::path grpo = fs::path(CAC_TEST_TRAIN_BUNDLES) / "grpo";
  if (!fs::exists(grpo / "manifest.json"))
    GTEST_SKIP();
  try {
    CompiledObjective obj(Bundle::load(grpo.string()));
    FAIL() << "an estimator was accepted as an objective";
  } catch (const BundleError &e) {
    EXPECT_NE(std::string(e.what()).find("is not an objective"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
