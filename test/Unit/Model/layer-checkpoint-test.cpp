//===- layer-checkpoint-test.cpp - Checkpointed layers, bf16 compute ------===//
//
// TransformerLM's training switches: activation checkpointing (each layer
// recomputed in backward, LayerCheckpoint.cpp) must give the gradients of
// the plain pass and hold less memory; a bfloat16 compute dtype over
// float32 weights must give losses and gradients close to float32's, in
// float32.
//
//===----------------------------------------------------------------------===//

#include "test-util.h"

#include "cac/Runtime/Model/LayerCheckpoint.h"
#include "cac/Runtime/Model/Transformer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// Ids [B, T] with a fixed seed, and a mask with padding on the left of row
/// 0 and a hole in row 1 (the rotary positions and the mask bias matter).
std::pair<at::Tensor, at::Tensor> batch(int64_t B, int64_t T, int64_t vocab) {
  at::Generator g = at::detail::createCPUGenerator(7);
  at::Tensor ids = at::randint(vocab, {B, T}, g, at::kLong);
  at::Tensor mask = at::ones({B, T}, at::kBool);
  mask.index_put_({0, at::indexing::Slice(0, 3)}, false);
  if (B > 1)
    mask.index_put_({1, T / 2}, false);
  return {ids, mask};
}

/// The update's loss over \p ids: the mean log-probability of each next
/// token through the chunked head (as the trainer computes it), plus the
/// value head's mean where there is one. Backward fills the gradients.
double lossAndBackward(TransformerLM &m, const at::Tensor &ids,
                       const at::Tensor &mask) {
  m->zero_grad();
  int64_t B = ids.size(0), T = ids.size(1);
  at::Tensor h = m->forwardHidden(ids, mask);
  at::Tensor logp =
      m->headLogProbs(h.narrow(1, 0, T - 1).reshape({B * (T - 1), -1}),
                      ids.narrow(1, 1, T - 1).reshape({-1}), 0.9);
  at::Tensor loss = -logp.mean();
  if (m->hasValueHead())
    loss = loss + m->valueHead(h).pow(2).mean();
  loss.backward();
  return loss.item<double>();
}

std::map<std::string, at::Tensor> gradients(TransformerLM &m) {
  std::map<std::string, at::Tensor> g;
  for (auto &p : m->named_parameters())
    g[p.key()] = p.value().grad().clone();
  return g;
}

/// Each gradient of \p got within \p tol of the largest magnitude of
/// \p want's (every parameter has one).
void expectGradientsClose(const std::map<std::string, at::Tensor> &got,
                          const std::map<std::string, at::Tensor> &want,
                          double tol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (const auto &[name, w] : want) {
    ASSERT_TRUE(got.at(name).defined()) << what << ": " << name;
    ASSERT_TRUE(w.defined()) << what << ": " << name;
    EXPECT_EQ(got.at(name).scalar_type(), at::kFloat) << what << ": " << name;
    double scale = std::max(w.abs().max().item<double>(), 1e-12);
    double diff = maxAbsDiff(got.at(name), w);
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, tol * scale)
        << what << ": " << name << " (largest magnitude " << scale << ")";
  }
  std::printf("[ GRADS    ] %s: worst difference %.3g of a gradient's largest "
              "magnitude\n",
              what.c_str(), worst);
}

/// The checkpointed layers in \p t's graph (nodes of LayerCheckpoint.cpp's
/// function, which autograd names after its type).
int checkpointNodes(const at::Tensor &t) {
  std::vector<torch::autograd::Node *> todo{t.grad_fn().get()};
  std::set<torch::autograd::Node *> seen;
  int n = 0;
  while (!todo.empty()) {
    torch::autograd::Node *node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second)
      continue;
    n += node->name().find("LayerCheckpoint") != std::string::npos;
    for (const auto &edge : node->next_edges())
      todo.push_back(edge.function.get());
  }
  return n;
}

ModelConfig config(bool tied) {
  ModelConfig c = tinyConfig(48);
  c.numHiddenLayers = 3;
  c.attentionBias = true; // Qwen2's q/k/v biases
  c.tieWordEmbeddings = tied;
  return c;
}

// The recomputed layers run the same operations on the same inputs, so the
// gradients are the plain pass's up to the order in which the engine sums
// a tensor's contributions: 1e-6 of each gradient's largest magnitude.
TEST(LayerCheckpoint, GradientsOfEveryParameterEqualThePlainPass) {
  for (bool tied : {false, true}) {
    for (bool valueHead : {false, true}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") +
                   (valueHead ? ", value head" : ""));
      TransformerLM m = tinyModel(config(tied), 3, valueHead);
      auto [ids, mask] = batch(3, 12, 48);
      double plainLoss = lossAndBackward(m, ids, mask);
      auto plain = gradients(m);
      m->setActivationCheckpointing(true);
      double ckptLoss = lossAndBackward(m, ids, mask);
      auto ckpt = gradients(m);
      m->setActivationCheckpointing(false);
      EXPECT_EQ(ckptLoss, plainLoss);
      expectGradientsClose(ckpt, plain, 1e-6, "checkpointed");
    }
  }
}

TEST(LayerCheckpoint, OnlyRecordingPassesCheckpoint) {
  // Without grad mode (scoring) or with a KV cache (sampling) the layers
  // run as they always do: the same values, no checkpoint node.
  TransformerLM m = tinyModel(config(false), 4);
  auto [ids, mask] = batch(2, 10, 48);
  at::Tensor plain = m->forwardHidden(ids, mask);
  m->setActivationCheckpointing(true);
  at::Tensor ckpt = m->forwardHidden(ids, mask);
  EXPECT_TRUE(at::equal(ckpt, plain));
  {
    torch::NoGradGuard ng;
    at::Tensor scored = m->forwardHidden(ids, mask);
    EXPECT_TRUE(at::equal(scored, plain));
    EXPECT_FALSE(scored.requires_grad());
  }
  EXPECT_EQ(checkpointNodes(ckpt), 3);
  EXPECT_EQ(checkpointNodes(plain), 0);
}

TEST(LayerCheckpoint, AFrozenInputOrLayerGetsNoGradient) {
  // The first layer's input may not need a gradient (a frozen embedding),
  // and a frozen layer's parameters get none; the rest still do.
  TransformerLM m = tinyModel(config(false), 5);
  m->model->embed_tokens->weight.set_requires_grad(false);
  for (auto &p : m->model->blocks[1]->parameters())
    p.set_requires_grad(false);
  auto [ids, mask] = batch(2, 8, 48);
  lossAndBackward(m, ids, mask);
  std::map<std::string, at::Tensor> plain;
  for (auto &p : m->named_parameters())
    if (p.value().grad().defined())
      plain[p.key()] = p.value().grad().clone();
  m->setActivationCheckpointing(true);
  lossAndBackward(m, ids, mask);
  for (auto &p : m->named_parameters()) {
    bool frozen = !p.value().requires_grad();
    EXPECT_EQ(p.value().grad().defined(), !frozen) << p.key();
    if (!frozen) {
      ASSERT_TRUE(plain.count(p.key())) << p.key();
      double scale = std::max(plain[p.key()].abs().max().item<double>(), 1e-12);
      EXPECT_LE(maxAbsDiff(p.value().grad(), plain[p.key()]), 1e-6 * scale)
          << p.key();
    }
  }
}

// The point of the checkpoints: with many layers of wide activations, the
// update's forward and backward hold each layer's input and one layer's
// intermediates, not every layer's.
TEST(LayerCheckpoint, PeakMemoryOfAnUpdateStepIsLower) {
  ModelConfig c = tinyConfig(64);
  c.hiddenSize = 64;
  c.intermediateSize = 256;
  c.numHiddenLayers = 8;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  TransformerLM m = tinyModel(c, 6);
  auto [ids, mask] = batch(8, 96, 64);
  auto peak = [&](bool checkpointed) {
    m->setActivationCheckpointing(checkpointed);
    m->zero_grad();
    CpuAllocationCounter counter;
    lossAndBackward(m, ids, mask);
    return counter.peakBytes();
  };
  peak(false); // allocates the gradients, which both counts then share
  int64_t plain = peak(false), ckpt = peak(true);
  std::printf("[ MEMORY   ] 8 layers, 8 x 96 tokens: peak %.1f MiB plain, "
              "%.1f MiB checkpointed, ratio %.2f\n",
              plain / 1048576.0, ckpt / 1048576.0,
              double(ckpt) / double(plain));
  EXPECT_LT(double(ckpt), 0.5 * double(plain));
}

// bfloat16 keeps 8 bits of mantissa: one rounding is 2^-9 relative, and
// the roundings of three layers' products move the loss by 4e-5 of itself
// and each gradient by up to 4.2% of its largest magnitude (measured here:
// a small gradient, a norm's or a bias's, is the worst). The tolerances are
// 1e-3 of the loss and 8e-2 of each gradient's largest magnitude.
TEST(ComputeDtype, Bfloat16PassesAreCloseToFloat32) {
  try {
    checkModelDtype(at::kBFloat16, torch::kCPU);
  } catch (const std::exception &e) {
    GTEST_SKIP() << e.what();
  }
  for (bool checkpointed : {false, true}) {
    SCOPED_TRACE(checkpointed ? "checkpointed" : "plain");
    TransformerLM m = tinyModel(config(true), 8, /*valueHead=*/true, 0.1);
    m->setActivationCheckpointing(checkpointed);
    auto [ids, mask] = batch(3, 12, 48);
    double want = lossAndBackward(m, ids, mask);
    auto f32 = gradients(m);
    m->setComputeDtype(at::kBFloat16);
    EXPECT_EQ(m->computeDtype(), at::kBFloat16);
    EXPECT_EQ(m->dtype(), at::kFloat); // the weights stay float32
    double got = lossAndBackward(m, ids, mask);
    auto bf16 = gradients(m);
    std::printf("[ BF16     ] loss %.6f float32, %.6f bfloat16\n", want, got);
    EXPECT_TRUE(std::isfinite(got));
    EXPECT_NE(got, want); // it did compute in bfloat16
    EXPECT_NEAR(got, want, 1e-3 * std::abs(want));
    expectGradientsClose(bf16, f32, 8e-2, "bfloat16");
    m->setComputeDtype(at::ScalarType::Undefined);
    EXPECT_EQ(lossAndBackward(m, ids, mask), want);
  }
}

TEST(ComputeDtype, HiddenStatesAndValuesAreInTheirDtypes) {
  TransformerLM m = tinyModel(config(false), 9, /*valueHead=*/true);
  m->setComputeDtype(at::kBFloat16);
  auto [ids, mask] = batch(2, 6, 48);
  at::Tensor h = m->forwardHidden(ids, mask);
  EXPECT_EQ(h.scalar_type(), at::kBFloat16);
  // The estimator and the losses read float32 values and log-probabilities.
  EXPECT_EQ(m->valueHead(h).scalar_type(), at::kFloat);
  at::Tensor flat = h.reshape({-1, h.size(-1)});
  EXPECT_EQ(m->headLogProbs(flat, ids.reshape({-1})).scalar_type(), at::kFloat);
  EXPECT_EQ(m->lmHead(h).scalar_type(), at::kBFloat16);
  // A pass with a KV cache computes in the weights' dtype (its cache's).
  torch::NoGradGuard ng;
  KVCache cache;
  EXPECT_EQ(m->forwardHidden(ids, mask, &cache).scalar_type(), at::kFloat);
  EXPECT_ERROR([&] { m->setComputeDtype(at::kLong); },
               {"compute dtype must be floating point"});
}

} // namespace
