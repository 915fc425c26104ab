//===- chunked-logprobs-test.cpp - Log-probabilities without full logits --===//

#include "test-util.h"

#include "cac/Runtime/Model/ChunkedLogProbs.h"
#include "cac/Runtime/Model/Transformer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// Tolerances relative to the largest magnitude of the reference: float32
/// differs from the full path by the rounding of the chunks' sums (a few
/// ulps); bfloat16 rounds d/d weight once after a float32 sum where the
/// full path's bf16 matmul rounds it once per output (8 bits of mantissa).
double tolerance(at::ScalarType dtype) {
  return dtype == at::kFloat ? 1e-5 : 2e-2;
}

/// Expects \p got to equal \p want within tolerance(dtype) of want's largest
/// magnitude.
void expectClose(const at::Tensor &got, const at::Tensor &want,
                 at::ScalarType dtype, const std::string &what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  double scale =
      std::max(want.abs().max().to(at::kDouble).item<double>(), 1e-30);
  EXPECT_LE(maxAbsDiff(got.to(at::kFloat), want.to(at::kFloat)),
            tolerance(dtype) * scale)
      << what << " (largest magnitude " << scale << ")";
}

/// Ids [B, T] drawn from \p vocab with a fixed seed.
at::Tensor randomTokenIds(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  return at::randint(vocab, {B, T}, g, at::kLong);
}

/// The full path, as the trainer ran it: tokenLogProbs of the head's
/// logits [B, T, V], flattened to [B * (T-1)].
at::Tensor fullLogProbs(TransformerLM &m, const at::Tensor &hidden,
                        const at::Tensor &ids, double temperature) {
  return tokenLogProbs(m->lmHead(hidden), ids, temperature).reshape({-1});
}

/// The chunked path over the same positions: every position but the last
/// predicts the next token.
at::Tensor chunkedLogProbs(TransformerLM &m, const at::Tensor &hidden,
                           const at::Tensor &ids, double temperature,
                           int64_t chunkRows) {
  int64_t B = ids.size(0), T = ids.size(1);
  at::Tensor h = hidden.narrow(1, 0, T - 1).reshape({B * (T - 1), -1});
  at::Tensor next = ids.narrow(1, 1, T - 1).reshape({-1});
  return chunkedTokenLogProbs(h, m->headWeight(), next, temperature, chunkRows);
}

struct Case {
  bool tied;
  at::ScalarType dtype;
};

class ChunkedLogProbsTest : public ::testing::TestWithParam<Case> {
protected:
  TransformerLM model() const {
    ModelConfig c = tinyConfig(/*vocabSize=*/50);
    c.tieWordEmbeddings = GetParam().tied;
    TransformerLM m = tinyModel(c, GetParam().tied ? 3 : 4);
    m->to(GetParam().dtype);
    return m;
  }
};

// Values: 3 rows of 11 tokens give 30 positions; chunks of 1, 7 (not a
// divisor), 30 (one chunk) and 64 (one chunk larger than the rows), with and
// without a temperature.
TEST_P(ChunkedLogProbsTest, ValuesEqualTheFullLogitsPath) {
  TransformerLM m = model();
  at::ScalarType dtype = GetParam().dtype;
  at::Tensor ids = randomTokenIds(3, 11, 50, 7);
  torch::NoGradGuard ng;
  at::Tensor hidden = m->forwardHidden(ids);
  for (double temperature : {1.0, 0.7})
    for (int64_t chunk : {1, 7, 30, 64}) {
      at::Tensor want = fullLogProbs(m, hidden, ids, temperature);
      at::Tensor got = chunkedLogProbs(m, hidden, ids, temperature, chunk);
      EXPECT_EQ(got.scalar_type(), at::kFloat);
      expectClose(got, want, dtype,
                  "temperature " + std::to_string(temperature) + ", chunk " +
                      std::to_string(chunk));
    }
}

// Gradients: d/d every parameter of the model (the head, and through the
// hidden states every layer; a tied head's embedding gets both its lookup's
// and the head's share) of a weighted sum of the log-probabilities.
TEST_P(ChunkedLogProbsTest, GradientsEqualAutogradOfTheFullPath) {
  at::ScalarType dtype = GetParam().dtype;
  at::Tensor ids = randomTokenIds(3, 11, 50, 8);
  at::Tensor w = at::randn({30}, at::detail::createCPUGenerator(9));
  for (double temperature : {1.0, 0.7})
    for (int64_t chunk : {7, 30}) {
      auto grads = [&](bool chunked) {
        TransformerLM m = model();
        at::Tensor hidden = m->forwardHidden(ids);
        at::Tensor lp =
            chunked ? chunkedLogProbs(m, hidden, ids, temperature, chunk)
                    : fullLogProbs(m, hidden, ids, temperature);
        (lp * w).sum().backward();
        std::vector<std::pair<std::string, at::Tensor>> g;
        for (const auto &p : m->named_parameters())
          g.emplace_back(p.key(), p.value().grad());
        return g;
      };
      auto want = grads(false), got = grads(true);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(got[i].second.defined()) << got[i].first;
        EXPECT_EQ(got[i].second.scalar_type(), dtype) << got[i].first;
        expectClose(got[i].second, want[i].second, dtype,
                    got[i].first + ", temperature " +
                        std::to_string(temperature) + ", chunk " +
                        std::to_string(chunk));
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    HeadsAndDtypes, ChunkedLogProbsTest,
    ::testing::Values(Case{false, at::kFloat}, Case{true, at::kFloat},
                      Case{false, at::kBFloat16}, Case{true, at::kBFloat16}),
    [](const ::testing::TestParamInfo<Case> &i) {
      return std::string(i.param.tied ? "Tied" : "Untied") +
             (i.param.dtype == at::kFloat ? "Float32" : "BFloat16");
    });

TEST(ChunkedLogProbs, HeadLogProbsUsesTheModelsHeadAndChunkRule) {
  ModelConfig c = tinyConfig(/*vocabSize=*/40);
  TransformerLM m = tinyModel(c, 5);
  at::Tensor ids = randomTokenIds(2, 9, 40, 10);
  torch::NoGradGuard ng;
  at::Tensor hidden = m->forwardHidden(ids);
  at::Tensor h = hidden.narrow(1, 0, 8).reshape({16, -1});
  at::Tensor next = ids.narrow(1, 1, 8).reshape({-1});
  at::Tensor want = fullLogProbs(m, hidden, ids, 0.9);
  // 5 rows of 40 float32 logits a chunk: 16 rows in 4 chunks.
  expectClose(m->headLogProbs(h, next, 0.9, 5 * 40 * 4), want, at::kFloat,
              "5-row chunks");
  expectClose(m->headLogProbs(h, next, 0.9), want, at::kFloat,
              "the default budget");
  EXPECT_TRUE(m->headWeight().is_same(m->lm_head->weight));
}

TEST(ChunkedLogProbs, ChunkRowsFollowTheBudget) {
  EXPECT_EQ(logProbChunkRows(151936), kLogProbChunkBytes / (151936 * 4));
  EXPECT_EQ(logProbChunkRows(151936), 441);
  EXPECT_EQ(logProbChunkRows(1000, 4000 * 3 + 5), 3);
  EXPECT_EQ(logProbChunkRows(1000, 100), 1); // at least one row
}

TEST(ChunkedLogProbs, MismatchedInputsAreErrors) {
  at::Tensor h = at::zeros({4, 8}), w = at::zeros({10, 8});
  at::Tensor t = at::zeros({4}, at::kLong);
  EXPECT_ERROR(
      [&] {
        chunkedTokenLogProbs(h, at::zeros({10, 7}), t, 1, 2);
      },
      {"hidden [4, 8]", "head weight [10, 7]", "do not match"});
  EXPECT_ERROR(
      [&] { chunkedTokenLogProbs(h, w, at::zeros({3}, at::kLong), 1, 2); },
      {"targets [3]", "do not match"});
  EXPECT_ERROR([&] { chunkedTokenLogProbs(h, w.to(at::kBFloat16), t, 1, 2); },
               {"differ in dtype"});
  EXPECT_ERROR([&] { chunkedTokenLogProbs(h, w, t, 1, 0); },
               {"chunk rows 0 < 1"});
}

// The point of the chunks: one update minibatch's head forward and backward
// at a large vocabulary (32768 tokens, hidden 16: the head dominates, as it
// does at Qwen2.5-0.5B's 151936 x 896) holds a few chunks' logits instead of
// several [rows, vocab] float32 copies.
TEST(ChunkedLogProbs, PeakMemoryOfAnUpdateStepIsAFewChunks) {
  const int64_t V = 32768, B = 8, T = 129, rows = B * (T - 1);
  TransformerLM m = tinyModel(tinyConfig(V), 6);
  at::Tensor ids = randomTokenIds(B, T, V, 11);
  const int64_t chunkBytes = int64_t(8) << 20; // 64 rows
  auto peak = [&](bool chunked) {
    m->zero_grad();
    CpuAllocationCounter counter;
    at::Tensor hidden = m->forwardHidden(ids);
    at::Tensor lp = chunked ? chunkedLogProbs(m, hidden, ids, 1.0,
                                              logProbChunkRows(V, chunkBytes))
                            : fullLogProbs(m, hidden, ids, 1.0);
    lp.sum().backward();
    return counter.peakBytes();
  };
  // The model's gradients are allocated by the first backward: warm them
  // up so that both counts see the same.
  peak(false);
  int64_t full = peak(false), chunked = peak(true);
  const int64_t logits = rows * V * 4; // one float32 [rows, V] copy: 128 MiB
  std::printf("[ MEMORY   ] %lld rows x %lld vocab: peak %.1f MiB full, %.1f "
              "MiB chunked (%lld-row chunks), ratio %.1f\n",
              static_cast<long long>(rows), static_cast<long long>(V),
              full / 1048576.0, chunked / 1048576.0,
              static_cast<long long>(logProbChunkRows(V, chunkBytes)),
              double(full) / double(chunked));
  EXPECT_GE(full, 2 * logits);
  EXPECT_LE(chunked, 5 * chunkBytes + logits / 8);
}

} // namespace
