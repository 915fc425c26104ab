//===- memory-check-test.cpp - The update's activations, estimated --------===//
//
// estimateActivationMemory against the real thing: the bytes LibTorch's CPU
// allocator holds at the peak of one update's forward and backward pass (as
// UpdatePhase.cpp runs it: hidden states, the chunked LM head's token
// log-probs, a loss, backward), counted by c10's memory reporting, for
// models whose activations are dominated by each term in turn (the
// attention's tokens^2, the hidden and MLP widths, the vocabulary).
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Transformer.h"
#include "cac/Runtime/Train/MemoryCheck.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <mutex>

using namespace cac::rt;
using namespace cac::rt::train;

namespace {

/// The most bytes the CPU allocator held at once while it was installed,
/// counting only what was allocated since (c10's reporter starts at zero).
class AllocatorPeak : public c10::MemoryReportingInfoBase {
public:
  void reportMemoryUsage(void * /*ptr*/, int64_t /*allocSize*/,
                         int64_t totalAllocated, int64_t /*totalReserved*/,
                         c10::Device device) override {
    if (!device.is_cpu())
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = std::max(peak_, totalAllocated);
  }
  bool memoryProfilingEnabled() const override { return true; }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

private:
  std::mutex mutex_;
  int64_t peak_ = 0;
};

/// The update's forward and backward over \p ids.
void forwardBackward(TransformerLM &m, const at::Tensor &ids) {
  at::Tensor mask = at::ones(ids.sizes(), at::kBool);
  at::Tensor h = m->forwardHidden(ids, mask);
  int64_t B = ids.size(0), T = ids.size(1);
  at::Tensor logp =
      m->headLogProbs(h.narrow(1, 0, T - 1).reshape({B * (T - 1), -1}),
                      ids.narrow(1, 1, T - 1).reshape({-1}), 1.0);
  logp.mean().backward();
}

struct Shape {
  const char *name;
  int64_t hidden, layers, heads, kvHeads, ffn, vocab, rows, tokens;
};

/// How the update's passes run: update_dtype and activation_checkpointing.
struct Mode {
  at::ScalarType compute = at::kFloat;
  bool checkpointed = false;
};

/// The peak bytes of one update of \p s's model over \p s.rows rows of
/// \p s.tokens tokens, and the estimate.
std::pair<double, double> measure(const Shape &s, Mode mode = {}) {
  ModelConfig c;
  c.vocabSize = s.vocab;
  c.hiddenSize = s.hidden;
  c.intermediateSize = s.ffn;
  c.numHiddenLayers = s.layers;
  c.numAttentionHeads = s.heads;
  c.numKeyValueHeads = s.kvHeads;
  c.maxPositionEmbeddings = s.tokens;
  torch::manual_seed(1);
  TransformerLM m(c);
  if (mode.compute != at::kFloat)
    m->setComputeDtype(mode.compute);
  m->setActivationCheckpointing(mode.checkpointed);
  at::Tensor ids = at::randint(s.vocab, {s.rows, s.tokens}, at::kLong);
  // The gradients first (the training estimate counts them apart), so
  // that the measured pass adds only activations.
  forwardBackward(m, ids.narrow(1, 0, 2));
  auto peak = std::make_shared<AllocatorPeak>();
  {
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, peak);
    forwardBackward(m, ids);
  }
  int64_t d = static_cast<int64_t>(c10::elementSize(mode.compute));
  ActivationMemory est = estimateActivationMemory(
      c, d, s.rows, s.tokens, /*logits=*/true, mode.checkpointed);
  return {static_cast<double>(peak->peak()),
          est.total() + weightCastMemory(c, d, mode.checkpointed)};
}

/// The estimate is within 25% of the measured peak, from above or below,
/// whichever term dominates.
TEST(ActivationMemory, TheEstimateIsWithinAQuarterOfTheMeasuredPeak) {
  const Shape shapes[] = {
      {"attention (tokens^2)", 32, 2, 4, 2, 64, 64, 4, 512},
      {"hidden and MLP widths", 256, 2, 4, 4, 1024, 64, 8, 64},
      {"vocabulary", 32, 1, 2, 1, 64, 8192, 8, 128},
  };
  for (const Shape &s : shapes) {
    auto [measured, estimate] = measure(s);
    ASSERT_GT(measured, 0) << s.name << ": the allocator reported nothing";
    double ratio = estimate / measured;
    EXPECT_GT(ratio, 0.75) << s.name << ": estimate " << estimate
                           << " bytes, measured peak " << measured;
    EXPECT_LT(ratio, 1.25) << s.name << ": estimate " << estimate
                           << " bytes, measured peak " << measured;
    std::cout << s.name << ": estimate " << estimate / 1e6
              << " MB, measured peak " << measured / 1e6 << " MB (ratio "
              << ratio << ")\n";
  }
}

/// The same with the update's options: checkpointed layers, a bfloat16
/// compute (its weight casts counted), both; and what they save.
TEST(ActivationMemory, TheUpdateOptionsEstimatesAreWithinAQuarter) {
  const Shape shapes[] = {
      {"attention (tokens^2)", 32, 4, 4, 2, 64, 64, 4, 384},
      {"hidden and MLP widths", 256, 4, 4, 4, 1024, 64, 8, 64},
  };
  const std::pair<const char *, Mode> modes[] = {
      {"checkpointed", {at::kFloat, true}},
      {"bfloat16", {at::kBFloat16, false}},
      {"bfloat16, checkpointed", {at::kBFloat16, true}},
  };
  for (const Shape &s : shapes) {
    double plain = measure(s).first;
    for (const auto &[name, mode] : modes) {
      auto [measured, estimate] = measure(s, mode);
      ASSERT_GT(measured, 0) << s.name << ", " << name;
      double ratio = estimate / measured;
      EXPECT_GT(ratio, 0.75) << s.name << ", " << name << ": estimate "
                             << estimate << " bytes, measured " << measured;
      EXPECT_LT(ratio, 1.25) << s.name << ", " << name << ": estimate "
                             << estimate << " bytes, measured " << measured;
      std::cout << s.name << ", " << name << ": estimate " << estimate / 1e6
                << " MB, measured peak " << measured / 1e6 << " MB (ratio "
                << ratio << "; float32 without checkpoints " << plain / 1e6
                << " MB)\n";
      // Checkpoints always hold less. bfloat16 alone halves the saved
      // activations but where the attention's T^2 dominates: the plain
      // attention keeps its float32 probabilities and their bfloat16 copy
      // (HF's eager attention does the same; the fused one keeps neither).
      if (mode.checkpointed || s.hidden > 32) {
        EXPECT_LT(measured, plain) << s.name << ", " << name;
      }
    }
  }
}

TEST(ActivationMemory, CheckpointsKeepEachLayersInput) {
  ModelConfig c = ModelConfig::builtinSmall(40); // 4 layers, hidden 128
  ActivationMemory plain = estimateActivationMemory(c, 4, 2, 10, true);
  ActivationMemory ckpt = estimateActivationMemory(c, 4, 2, 10, true, true);
  // One layer's saved tensors (while it is recomputed) and every layer's
  // input; the other terms do not change.
  EXPECT_EQ(ckpt.layers, plain.layers / 4 + 4 * 4.0 * 2 * 10 * 128);
  EXPECT_EQ(ckpt.total() - ckpt.layers, plain.total() - plain.layers);
  // No casts in float32; in bfloat16 every weight's, or with checkpoints
  // the LM head's and one layer's.
  EXPECT_EQ(weightCastMemory(c, 4, false), 0);
  EXPECT_EQ(weightCastMemory(c, 2, false), 2 * c.numParameters());
  double head = double(c.vocabSize) * double(c.hiddenSize);
  double heads = c.tieWordEmbeddings ? head : 2 * head;
  EXPECT_DOUBLE_EQ(weightCastMemory(c, 2, true),
                   2 * (head + (c.numParameters() - heads) / 4));
}

TEST(ActivationMemory, TheTermsFollowTheShapes) {
  ModelConfig c = ModelConfig::builtinSmall(40); // 4 layers, 4 heads of 32
  ActivationMemory a = estimateActivationMemory(c, 4, 2, 10, true);
  // Per layer: 6 H + 2 Hq + 2 Hkv + 4 F per token, 4 bytes, and the
  // float32 probabilities of 4 heads.
  double perLayer = 4.0 * 2 * 10 * (6 * 128 + 2 * 128 + 2 * 64 + 4 * 384) +
                    4.0 * 2 * 4 * 10 * 10;
  EXPECT_EQ(a.layers, 4 * perLayer);
  EXPECT_EQ(a.attention, 2 * 4.0 * 2 * 4 * 10 * 10);
  EXPECT_EQ(a.logits, 2 * 4.0 * 2 * 10 * 40);
  EXPECT_EQ(a.other, 4.0 * (3 * 20 * 128 + 2 * 20 * 32 + 2 * 10 * 10));
  EXPECT_EQ(a.total(), a.layers + a.attention + a.logits + a.other);
  // A critic model has no logits; twice the rows, twice everything.
  EXPECT_EQ(estimateActivationMemory(c, 4, 2, 10, false).logits, 0);
  EXPECT_EQ(estimateActivationMemory(c, 4, 4, 10, true).total(), 2 * a.total());
  // A real vocabulary: one chunk's rows, however many the minibatch has
  // (32 sequences of 576 tokens at Qwen2.5's 151936 tokens: 441 rows).
  c.vocabSize = 151936;
  EXPECT_EQ(estimateActivationMemory(c, 4, 32, 576, true).logits,
            2 * 4.0 * 441 * 151936);
}

} // namespace
