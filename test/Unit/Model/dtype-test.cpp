//===- dtype-test.cpp - bfloat16 models and the attention kernels ---------===//
//
// A model cast to bfloat16 runs its matmuls and KV cache in bfloat16 and its
// norms' statistics, softmax, rotary angles and sampling in float32: its
// logits stay within a bfloat16 tolerance of the float32 model's, and greedy
// decoding picks the same tokens wherever the float32 margins exceed that
// tolerance. LibTorch 1.13 (this machine) does bfloat16 matmuls on the CPU.
//
//===----------------------------------------------------------------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Model/Transformer.h"

#include <torch/torch.h>
#include <torch/version.h>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// The bfloat16 tolerance on logits, relative to the largest float32 logit:
/// bfloat16 keeps 8 significant bits (relative rounding 2^-9 per value),
/// and the error of the two layers' products and residual sums stays
/// within a few percent of the logits' scale (measured: 1.7% on the first
/// model below).
constexpr double kRelTolerance = 0.025;

std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
  at::Generator gen = makeGenerator(seed);
  at::Tensor t = at::randint(3, vocab, {n}, gen, at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

/// The same weights in bfloat16.
TransformerLM bf16Copy(const ModelConfig &c, uint64_t seed) {
  TransformerLM m = tinyModel(c, seed);
  m->to(at::kBFloat16);
  return m;
}

} // namespace

TEST(Dtype, Bfloat16LogitsAndCacheStayNearFloat32) {
  ModelConfig c = tinyConfig(64, "qwen2");
  TransformerLM f = tinyModel(c, 41);
  TransformerLM b = bf16Copy(c, 41);
  EXPECT_EQ(f->dtype(), at::kFloat);
  EXPECT_EQ(b->dtype(), at::kBFloat16);
  for (const auto &p : b->parameters())
    EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  torch::NoGradGuard noGrad;
  // Left padding in row 1: masks and positions in bfloat16 too.
  std::vector<int64_t> a = randomIds(10, 64, 1), z = randomIds(10, 64, 2);
  at::Tensor ids = at::tensor(a, at::kLong).view({1, 10});
  ids = at::cat({ids, at::tensor(z, at::kLong).view({1, 10})});
  at::Tensor mask = at::ones({2, 10}, at::kBool);
  mask[1].narrow(0, 0, 3).fill_(false);
  at::Tensor lf = f->forward(ids, mask), lb = b->forward(ids, mask);
  EXPECT_EQ(lb.scalar_type(), at::kBFloat16);
  double scale = lf.abs().max().item<double>();
  ASSERT_GT(scale, 1.0); // std 0.3: logits far from zero
  at::Tensor real = mask.unsqueeze(-1).expand_as(lf);
  double diff =
      (lf - lb.to(at::kFloat)).abs().masked_select(real).max().item<double>();
  EXPECT_LT(diff, kRelTolerance * scale);
  EXPECT_GT(diff, 0.0); // it did run in bfloat16

  // The cache holds bfloat16 keys and values and decodes as the full
  // forward does, within the same tolerance.
  KVCache cache;
  std::vector<at::Tensor> parts = {
      b->forward(ids.narrow(1, 0, 6), mask.narrow(1, 0, 6), &cache)};
  for (int64_t t = 6; t < 10; ++t)
    parts.push_back(
        b->forward(ids.narrow(1, t, 1), mask.narrow(1, t, 1), &cache));
  EXPECT_EQ(cache.keys(0).scalar_type(), at::kBFloat16);
  EXPECT_EQ(cache.values(1).scalar_type(), at::kBFloat16);
  at::Tensor cached = at::cat(parts, 1).to(at::kFloat);
  EXPECT_LT((cached - lf).abs().masked_select(real).max().item<double>(),
            kRelTolerance * scale);

  // tokenLogProbs works in float32 on bfloat16 logits.
  at::Tensor lp = tokenLogProbs(lb, ids);
  EXPECT_EQ(lp.scalar_type(), at::kFloat);
  EXPECT_TRUE(lp.isfinite().all().item<bool>());
}

TEST(Dtype, Bfloat16GreedyDecodingPicksTheFloat32Tokens) {
  ModelConfig c = tinyConfig(16);
  TransformerLM f = tinyModel(c, 43);
  TransformerLM b = bf16Copy(c, 43);
  // A small vocabulary: wide margins between the top two tokens.
  std::vector<std::vector<int64_t>> prompts;
  for (uint64_t i = 0; i < 6; ++i)
    prompts.push_back(randomIds(3 + static_cast<int64_t>(i), 16, 10 + i));
  SamplingOptions o;
  o.temperature = 0;
  o.maxNewTokens = 16;
  at::Generator g1 = makeGenerator(1), g2 = makeGenerator(1);
  auto rf = generate(f, prompts, o, g1, nullptr);
  auto rb = generate(b, prompts, o, g2, nullptr);
  ASSERT_EQ(rf.size(), rb.size());
  torch::NoGradGuard noGrad;
  // Where float32's top two logits differ by more than twice the tolerance,
  // bfloat16 cannot swap them.
  int64_t forced = 0, running = 0;
  for (size_t i = 0; i < rf.size(); ++i) {
    std::vector<int64_t> seq = rf[i].prompt;
    seq.insert(seq.end(), rf[i].tokens.begin(), rf[i].tokens.end());
    at::Tensor ids = at::tensor(seq, at::kLong).view({1, -1});
    at::Tensor lf = f->forward(ids)[0];
    at::Tensor lb = b->forward(ids)[0].to(at::kFloat);
    double scale = lf.abs().max().item<double>();
    auto top = std::get<0>(lf.topk(2, -1));
    at::Tensor wide =
        (top.select(1, 0) - top.select(1, 1)) > 2 * kRelTolerance * scale;
    at::Tensor agree = lb.argmax(-1) == lf.argmax(-1);
    // On float32's own greedy path, every position with a wide margin.
    forced += wide.sum().item<int64_t>();
    EXPECT_TRUE((agree | wide.logical_not()).all().item<bool>()) << "row " << i;
    // Free-running bfloat16 decoding (its own KV cache and sampler) takes
    // float32's tokens up to the first narrow margin of the row.
    size_t p = rf[i].prompt.size();
    for (size_t t = 0; t < rf[i].tokens.size(); ++t) {
      if (!wide[p - 1 + t].item<bool>())
        break;
      ASSERT_LT(t, rb[i].tokens.size());
      EXPECT_EQ(rb[i].tokens[t], rf[i].tokens[t])
          << "row " << i << " token " << t;
      EXPECT_NEAR(rb[i].logprobs[t], rf[i].logprobs[t],
                  2 * kRelTolerance * scale);
      ++running;
    }
  }
  // The margins are wide often enough for both checks to mean something
  // (here: 88 of the 96 positions, 14 free-running tokens).
  EXPECT_GE(forced, 60);
  EXPECT_GE(running, 8);
}

TEST(Dtype, Bfloat16SamplingRecordsFloat32LogProbs) {
  TransformerLM b = bf16Copy(tinyConfig(64), 47);
  SamplingOptions o;
  o.temperature = 1.0;
  o.maxNewTokens = 8;
  at::Generator g = makeGenerator(5);
  auto rows = generate(b, {randomIds(4, 64, 6)}, o, g, nullptr,
                       /*samplesPerPrompt=*/4);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto &r : rows) {
    ASSERT_EQ(r.tokens.size(), 8u);
    for (size_t t = 0; t < r.tokens.size(); ++t) {
      EXPECT_TRUE(std::isfinite(r.logprobs[t]));
      EXPECT_LE(r.logprobs[t], 0.0f);
      EXPECT_GE(r.entropies[t], 0.0f);
    }
  }
}

TEST(Dtype, NamesAndErrors) {
  EXPECT_EQ(parseModelDtype("float32"), at::kFloat);
  EXPECT_EQ(parseModelDtype("fp32"), at::kFloat);
  EXPECT_EQ(parseModelDtype("bfloat16"), at::kBFloat16);
  EXPECT_EQ(parseModelDtype("bf16"), at::kBFloat16);
  EXPECT_EQ(modelDtypeName(at::kBFloat16), "bfloat16");
  EXPECT_EQ(modelDtypeName(at::kFloat), "float32");
  EXPECT_EQ(parseModelDtype("float16"), at::kHalf);
  EXPECT_EQ(parseModelDtype("fp16"), at::kHalf);
  EXPECT_EQ(parseModelDtype("f16"), at::kHalf);
  EXPECT_EQ(modelDtypeName(at::kHalf), "float16");
  EXPECT_ERROR([] { parseModelDtype("bf8"); },
               {"unknown model dtype 'bf8'", "float32, bfloat16 or float16"});
  EXPECT_ERROR([] { parseModelDtype("half"); }, {"unknown model dtype 'half'"});
}

TEST(Dtype, DevicesRefuseWhatTheyCannotRun) {
  checkModelDtype(at::kFloat, torch::kCPU);
  checkModelDtype(at::kBFloat16, torch::kCPU);
  // A GPU runs float16 (asked without one: the answer needs no device).
  checkModelDtype(at::kHalf, torch::Device(torch::kCUDA, 0));
  EXPECT_ERROR([] { checkModelDtype(at::kLong, torch::kCPU); },
               {"floating point", "Long"});
  // LibTorch 1.13 has no float16 matmul on the CPU; a later LibTorch may.
  std::string error =
      errorOf([] { checkModelDtype(at::kHalf, torch::kCPU); });
#if TORCH_VERSION_MAJOR < 2
  EXPECT_NE(error, "<no exception>");
#endif
  if (error == "<no exception>") {
    TransformerLM m = tinyModel(tinyConfig(), 3);
    m->to(at::kHalf);
    torch::NoGradGuard noGrad;
    EXPECT_EQ(m->forward(at::ones({1, 3}, at::kLong)).scalar_type(),
              at::kHalf);
  } else {
    for (const char *part :
         {"a float16 model cannot run on the CPU with this LibTorch",
          "use float32 or bfloat16 on the CPU, float16 on a CUDA device"})
      EXPECT_NE(error.find(part), std::string::npos) << error;
    // A float16 model of what this CPU cannot run indeed fails.
    TransformerLM m = tinyModel(tinyConfig(), 3);
    m->to(at::kHalf);
    torch::NoGradGuard noGrad;
    EXPECT_ANY_THROW(m->forward(at::ones({1, 3}, at::kLong)));
  }
}

TEST(Dtype, FusedAttentionAgreesWithThePlainPath) {
  ModelConfig c = tinyConfig(64);
  TransformerLM m = tinyModel(c, 53);
  if (!fusedAttentionAvailable()) {
    // LibTorch 1.13: only the plain path exists, and asking for the fused
    // one is an error rather than a silent fallback.
    EXPECT_ERROR([&] { m->setFusedAttention(true); },
                 {"fused attention needs LibTorch 2"});
    m->setFusedAttention(false); // the plain path is always there
    return;
  }
  torch::NoGradGuard noGrad;
  at::Tensor ids = at::tensor(randomIds(9, 64, 7), at::kLong).view({1, 9});
  ids = at::cat({ids, ids.flip(1)});
  at::Tensor mask = at::ones({2, 9}, at::kBool);
  mask[0].narrow(0, 0, 2).fill_(false);
  m->setFusedAttention(true);
  at::Tensor fused = m->forward(ids, mask);
  KVCache cache;
  std::vector<at::Tensor> parts = {
      m->forward(ids.narrow(1, 0, 5), mask.narrow(1, 0, 5), &cache)};
  for (int64_t t = 5; t < 9; ++t)
    parts.push_back(
        m->forward(ids.narrow(1, t, 1), mask.narrow(1, t, 1), &cache));
  m->setFusedAttention(false);
  at::Tensor plain = m->forward(ids, mask);
  at::Tensor real = mask.unsqueeze(-1).expand_as(plain);
  EXPECT_LT((fused - plain).abs().masked_select(real).max().item<double>(),
            1e-4);
  EXPECT_LT((at::cat(parts, 1) - plain)
                .abs()
                .masked_select(real)
                .max()
                .item<double>(),
            1e-4);
}
