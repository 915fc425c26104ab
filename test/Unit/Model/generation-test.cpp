//===- generation-test.cpp - Batched sampling with a KV cache -------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Model/Tokenizer.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

using Prompts = std::vector<std::vector<int64_t>>;

const Prompts kPrompts = {{1, 5, 9}, {2, 7}, {3, 3, 3, 3, 8}};

SamplingOptions opts(double temperature, int64_t maxNew = 12) {
  SamplingOptions o;
  o.temperature = temperature;
  o.maxNewTokens = maxNew;
  return o;
}

std::vector<GeneratedSequence> run(TransformerLM m, const Prompts &prompts,
                                   const SamplingOptions &o, uint64_t seed,
                                   const Tokenizer *tok = nullptr) {
  at::Generator gen = makeGenerator(seed);
  return generate(m, prompts, o, gen, tok);
}

/// The model's logits for every position of prompt + generated tokens.
at::Tensor fullLogits(TransformerLM m, const GeneratedSequence &s) {
  std::vector<int64_t> ids = s.prompt;
  ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  torch::NoGradGuard noGrad;
  return m->forward(at::tensor(ids, at::kLong).view({1, -1}))[0];
}

} // namespace

TEST(Sampling, LogProbAndEntropyAreThoseOfTheTemperedDistribution) {
  at::Generator gen = makeGenerator(1);
  at::Tensor logits = at::randn({6, 10}, gen) * 3;
  for (double temperature : {1.0, 0.6, 1.7}) {
    SamplingOptions o = opts(temperature);
    SampledTokens s = sampleTokens(logits, o, gen);
    at::Tensor ref = at::log_softmax(logits.to(at::kDouble) / temperature, -1);
    for (int64_t b = 0; b < 6; ++b) {
      int64_t tok = s.tokens[b].item<int64_t>();
      EXPECT_NEAR(s.logprobs[b].item<double>(), ref[b][tok].item<double>(),
                  1e-5);
      double entropy = -(ref[b].exp() * ref[b]).sum().item<double>();
      EXPECT_NEAR(s.entropies[b].item<double>(), entropy, 1e-5);
    }
  }
  // Greedy: argmax, recorded under temperature 1.
  SampledTokens g = sampleTokens(logits, opts(0.0), gen);
  EXPECT_TRUE(at::equal(g.tokens, logits.argmax(-1)));
  at::Tensor ref = at::log_softmax(logits, -1);
  EXPECT_LT(maxAbsDiff(g.logprobs, ref.gather(-1, g.tokens.unsqueeze(-1))
                                       .squeeze(-1)),
            1e-6);
}

TEST(Sampling, FollowsTheDistributionAndTruncations) {
  // p = [0.5, 0.3, 0.15, 0.05]
  at::Tensor logits =
      at::log(at::tensor({0.5f, 0.3f, 0.15f, 0.05f})).view({1, 4});
  at::Tensor batch = logits.expand({4000, 4}).contiguous();
  at::Generator gen = makeGenerator(2);
  auto counts = [&](const SamplingOptions &o) {
    at::Tensor t = sampleTokens(batch, o, gen).tokens;
    std::vector<double> c(4, 0.0);
    for (int64_t k = 0; k < 4; ++k)
      c[k] = (t == k).sum().item<double>() / 4000.0;
    return c;
  };
  std::vector<double> f = counts(opts(1.0));
  std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  for (int k = 0; k < 4; ++k) // ~5 standard deviations
    EXPECT_NEAR(f[k], p[k], 0.04) << "token " << k;

  SamplingOptions top = opts(1.0);
  top.topP = 0.75; // {0, 1} reach 0.8
  f = counts(top);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.04);
  top.topP = 0.45; // {0} alone reaches 0.5
  f = counts(top);
  EXPECT_EQ(f[0], 1.0);
  SamplingOptions k2 = opts(1.0);
  k2.topK = 2;
  f = counts(k2);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[1], 0.3 / 0.8, 0.04);
  // A high temperature flattens the distribution.
  f = counts(opts(50.0));
  EXPECT_GT(f[3], 0.15);
}

TEST(Sampling, SiblingsDrawWithoutReplacement) {
  // p = [0.5, 0.3, 0.15, 0.05]; 2000 groups of 2 rows (and 1000 of 3): a
  // group's tokens are distinct, the first row draws from p and the second
  // from p without the first's token: P(second = b) = sum_a p_a p_b / (1 -
  // p_a).
  std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  at::Tensor logits =
      at::log(at::tensor({0.5f, 0.3f, 0.15f, 0.05f})).view({1, 4});
  for (bool nucleus : {false, true}) {
    SCOPED_TRACE(nucleus ? "top_p = 0.99 (sorted order)" : "no truncation");
    SamplingOptions o = opts(1.0);
    if (nucleus)
      o.topP = 0.99; // keeps all four, exercises the sorted order
    const int64_t G = 2000;
    at::Tensor batch = logits.expand({2 * G, 4}).contiguous();
    std::vector<int64_t> sib(2 * G);
    for (int64_t r = 0; r < 2 * G; ++r)
      sib[r] = r / 2;
    at::Generator gen = makeGenerator(3);
    at::Tensor t = sampleTokens(batch, o, gen, &sib).tokens;
    auto tok = t.accessor<int64_t, 1>();
    std::vector<double> first(4, 0.0), second(4, 0.0);
    for (int64_t g = 0; g < G; ++g) {
      ASSERT_NE(tok[2 * g], tok[2 * g + 1]) << "group " << g;
      first[tok[2 * g]] += 1.0 / G;
      second[tok[2 * g + 1]] += 1.0 / G;
    }
    for (int b = 0; b < 4; ++b) {
      double want = 0;
      for (int a = 0; a < 4; ++a)
        if (a != b)
          want += p[a] * p[b] / (1 - p[a]);
      EXPECT_NEAR(first[b], p[b], 0.05) << "token " << b;
      EXPECT_NEAR(second[b], want, 0.05) << "token " << b;
    }
  }
  // More siblings than tokens with mass: top_k = 2 leaves two tokens, so a
  // group of 3 has its first two distinct and the third keeps its own draw.
  SamplingOptions k2 = opts(1.0);
  k2.topK = 2;
  at::Tensor three = logits.expand({300, 4}).contiguous();
  std::vector<int64_t> sib(300);
  for (int64_t r = 0; r < 300; ++r)
    sib[r] = r / 3;
  at::Generator gen = makeGenerator(4);
  SampledTokens s = sampleTokens(three, k2, gen, &sib);
  auto tok = s.tokens.accessor<int64_t, 1>();
  for (int64_t g = 0; g < 100; ++g) {
    EXPECT_NE(tok[3 * g], tok[3 * g + 1]);
    EXPECT_LT(tok[3 * g + 2], 2);
  }
  // The recorded log-probability is the policy's, log p of the token.
  at::Tensor want =
      at::log_softmax(logits, -1).squeeze(0).index_select(0, s.tokens);
  EXPECT_LT(maxAbsDiff(s.logprobs, want), 1e-6);
  // Rows outside any group (-1) sample as before.
  std::vector<int64_t> none(300, -1);
  at::Generator g1 = makeGenerator(5), g2 = makeGenerator(5);
  EXPECT_TRUE(at::equal(sampleTokens(three, k2, g1, &none).tokens,
                        sampleTokens(three, k2, g2).tokens));
}

namespace {

/// Top-p by a sort of the whole vocabulary (what sampleTokens did before it
/// searched the nucleus among the top tokens): the token drawn by
/// inverse CDF with \p u [B] from the kept mass of \p logits [B, V].
at::Tensor topPBySort(const at::Tensor &logits, const SamplingOptions &o,
                      const at::Tensor &u) {
  at::Tensor logp = at::log_softmax(logits / o.temperature, -1);
  if (o.topK > 0) {
    at::Tensor kth = std::get<0>(logp.topk(o.topK, -1)).narrow(-1, o.topK - 1, 1);
    logp = logp.masked_fill(logp < kth, -INFINITY);
  }
  auto [sp, order] = logp.exp().sort(-1, /*descending=*/true);
  sp = sp.masked_fill(sp.cumsum(-1) - sp >= o.topP, 0.0);
  at::Tensor cdf = sp.cumsum(-1);
  at::Tensor target = u.view({-1, 1}) * cdf.narrow(-1, cdf.size(1) - 1, 1);
  at::Tensor idx = at::searchsorted(cdf, target, false, /*right=*/true)
                       .clamp_max(cdf.size(1) - 1);
  return order.gather(-1, idx).squeeze(-1);
}

} // namespace

TEST(Sampling, TopPDrawsWhatAFullSortDraws) {
  // Vocabulary 6000: peaked rows (scale 8) keep their nucleus within the
  // first candidates, flat ones (scale 1) make the search grow to a sort.
  const int64_t B = 48, V = 6000;
  at::Generator gen = makeGenerator(17);
  for (double scale : {1.0, 4.0, 8.0})
    for (double topP : {0.3, 0.9, 0.97})
      for (int64_t topK : {0, 40, 3000}) {
        SCOPED_TRACE("scale " + std::to_string(scale) + ", top_p " +
                     std::to_string(topP) + ", top_k " + std::to_string(topK));
        at::Tensor logits = at::randn({B, V}, gen) * scale;
        at::Tensor u = at::rand({B}, gen);
        SamplingOptions o = opts(1.0);
        o.topP = topP;
        o.topK = topK;
        SampledTokens s = sampleTokens(logits, o, u);
        EXPECT_TRUE(at::equal(s.tokens, topPBySort(logits, o, u)));
      }
  // Rows of every kind in one batch: each row searches only as far as its
  // own nucleus needs, the flat ones to the sort.
  for (double topP : {0.5, 0.9, 0.97}) {
    SCOPED_TRACE("mixed rows, top_p " + std::to_string(topP));
    at::Tensor scale =
        at::tensor(std::vector<double>{1.0, 8.0, 4.0, 8.0, 16.0, 8.0})
            .repeat({B / 6})
            .to(at::kFloat);
    at::Tensor logits = at::randn({B, V}, gen) * scale.unsqueeze(1);
    at::Tensor u = at::rand({B}, gen);
    SamplingOptions o = opts(1.0);
    o.topP = topP;
    EXPECT_TRUE(
        at::equal(sampleTokens(logits, o, u).tokens, topPBySort(logits, o, u)));
  }
  // A token of probability ~0.99 is the whole nucleus of top_p = 0.9.
  at::Tensor logits = at::randn({B, V}, gen);
  logits.select(1, 4321).fill_(30.0);
  SamplingOptions o = opts(1.0);
  o.topP = 0.9;
  SampledTokens s = sampleTokens(logits, o, gen);
  EXPECT_TRUE(at::equal(s.tokens, at::full({B}, 4321, at::kLong)));
}

TEST(Generation, GreedyIsDeterministicAndCacheIndependent) {
  TransformerLM m = tinyModel(tinyConfig(), 31);
  auto a = run(m, kPrompts, opts(0.0), 1);
  auto b = run(m, kPrompts, opts(0.0), 2);
  SamplingOptions uncached = opts(0.0);
  uncached.useCache = false;
  auto c = run(m, kPrompts, uncached, 3);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, kPrompts[i]);
    EXPECT_EQ(a[i].tokens.size(), 12u);
    EXPECT_EQ(a[i].finish, FinishReason::Length);
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].tokens, c[i].tokens) << "KV cache changed greedy output";
    for (size_t t = 0; t < a[i].tokens.size(); ++t)
      EXPECT_NEAR(a[i].logprobs[t], c[i].logprobs[t], 1e-5);
  }
  // A row does not depend on the other rows of its batch (padding).
  auto alone = run(m, {kPrompts[2]}, opts(0.0), 4);
  EXPECT_EQ(alone[0].tokens, a[2].tokens);
  auto alone0 = run(m, {kPrompts[1]}, opts(0.0), 4);
  EXPECT_EQ(alone0[0].tokens, a[1].tokens);
}

TEST(Generation, SeededSamplingIsReproducible) {
  TransformerLM m = tinyModel(tinyConfig(), 33);
  auto a = run(m, kPrompts, opts(1.0, 16), 42);
  auto b = run(m, kPrompts, opts(1.0, 16), 42);
  auto c = run(m, kPrompts, opts(1.0, 16), 43);
  bool anyDifferent = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].logprobs, b[i].logprobs);
    anyDifferent = anyDifferent || a[i].tokens != c[i].tokens;
  }
  EXPECT_TRUE(anyDifferent) << "another seed gave the same 48 samples";
  // Sampling with and without the KV cache draws the same tokens.
  SamplingOptions uncached = opts(1.0, 16);
  uncached.useCache = false;
  auto d = run(m, kPrompts, uncached, 42);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].tokens, d[i].tokens);
}

TEST(Generation, PositionalUniformsMakeRowsIndependentOfTheBatch) {
  // With uniforms given by (row, token index), a prompt's samples are the
  // same whether it is decoded alone or beside others (data-parallel workers
  // rely on this), and differ between rows.
  TransformerLM m = tinyModel(tinyConfig(), 34);
  auto uniform = [](int64_t row, int64_t t) {
    uint64_t h = (static_cast<uint64_t>(row) * 1000003u + t) * 2654435761u;
    return static_cast<float>((h >> 8) % 65536) / 65536.0f;
  };
  const int64_t n = 3;
  auto all = generate(m, kPrompts, opts(1.0, 16), RowUniforms(uniform),
                      nullptr, n);
  ASSERT_EQ(all.size(), kPrompts.size() * n);
  bool rowsDiffer = false;
  for (size_t p = 0; p < kPrompts.size(); ++p) {
    // Prompt p alone: its rows are p*n.. of the full batch.
    RowUniforms shifted = [&](int64_t row, int64_t t) {
      return uniform(static_cast<int64_t>(p) * n + row, t);
    };
    auto one = generate(m, {kPrompts[p]}, opts(1.0, 16), shifted, nullptr, n);
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_EQ(one[k].tokens, all[p * n + k].tokens) << p << "/" << k;
      for (size_t t = 0; t < one[k].logprobs.size(); ++t)
        EXPECT_NEAR(one[k].logprobs[t], all[p * n + k].logprobs[t], 1e-4);
      rowsDiffer = rowsDiffer || all[p * n + k].tokens != all[p * n].tokens;
    }
  }
  EXPECT_TRUE(rowsDiffer);
}

TEST(Generation, RecordedLogProbsMatchARecomputation) {
  TransformerLM m = tinyModel(tinyConfig(), 35);
  for (double temperature : {1.0, 0.7}) {
    auto seqs = run(m, kPrompts, opts(temperature, 10), 5);
    for (const GeneratedSequence &s : seqs) {
      at::Tensor logits = fullLogits(m, s);
      ASSERT_EQ(s.logprobs.size(), s.tokens.size());
      for (size_t t = 0; t < s.tokens.size(); ++t) {
        // Token t was drawn from the logits at position prompt + t - 1.
        at::Tensor lp = at::log_softmax(
            logits[s.prompt.size() + t - 1].to(at::kDouble) / temperature, -1);
        EXPECT_NEAR(s.logprobs[t], lp[s.tokens[t]].item<double>(), 1e-5);
        EXPECT_NEAR(s.entropies[t], -(lp.exp() * lp).sum().item<double>(),
                    1e-5);
      }
    }
  }
}

TEST(Generation, StopTokens) {
  TransformerLM m = tinyModel(tinyConfig(), 37);
  auto free = run(m, {kPrompts[0]}, opts(0.0, 12), 1);
  // Stop at the token greedy decoding produces at step 4 (its first
  // occurrence is where the row must end).
  int64_t stop = free[0].tokens[4];
  size_t first = std::find(free[0].tokens.begin(), free[0].tokens.end(), stop) -
                 free[0].tokens.begin();
  SamplingOptions o = opts(0.0, 12);
  o.stopTokens = {stop};
  auto stopped = run(m, {kPrompts[0]}, o, 1);
  EXPECT_EQ(stopped[0].finish, FinishReason::Stop);
  ASSERT_EQ(stopped[0].tokens.size(), first + 1);
  EXPECT_EQ(stopped[0].tokens.back(), stop);
  EXPECT_EQ(stopped[0].logprobs.size(), first + 1);
  EXPECT_EQ(std::vector<int64_t>(free[0].tokens.begin(),
                                 free[0].tokens.begin() + first + 1),
            stopped[0].tokens);
  EXPECT_STREQ(finishReasonName(stopped[0].finish), "stop");
}

TEST(Generation, StopStringsWithACharacterTokenizer) {
  CharTokenizer tok;
  TransformerLM m = tinyModel(tinyConfig(tok.vocabSize()), 39);
  Prompts prompts = {tok.encode("12+3=", true)};
  SamplingOptions o = opts(0.0, 20);
  auto free = run(m, prompts, o, 1, &tok);
  ASSERT_EQ(free[0].finish, FinishReason::Length);
  std::string text = free[0].text;
  ASSERT_EQ(text, tok.decode(free[0].tokens));
  ASSERT_GE(text.size(), 8u);
  std::string stop = text.substr(5, 2);
  size_t at = text.find(stop);
  // The row must end at the first token whose text completes the stop string.
  size_t ending = 0;
  while (tok.decode({free[0].tokens.begin(),
                     free[0].tokens.begin() + ending})
             .find(stop) == std::string::npos)
    ++ending;
  o.stopStrings = {"never-there", stop};
  auto stopped = run(m, prompts, o, 1, &tok);
  EXPECT_EQ(stopped[0].finish, FinishReason::Stop);
  EXPECT_EQ(stopped[0].stopString, stop);
  EXPECT_EQ(stopped[0].text, text.substr(0, at));
  EXPECT_EQ(stopped[0].tokens.size(), ending)
      << "the token completing the stop string is the last one";
  EXPECT_ERROR([&] { Decoder d(m, o, nullptr); }, {"stop strings need"});
}

TEST(Generation, LimitsAndErrors) {
  TransformerLM m = tinyModel(tinyConfig(), 41);
  auto none = run(m, kPrompts, opts(1.0, 0), 1);
  for (const auto &s : none) {
    EXPECT_TRUE(s.tokens.empty());
    EXPECT_EQ(s.finish, FinishReason::Length);
  }
  // The model's position limit ends rows too.
  ModelConfig c = tinyConfig();
  c.maxPositionEmbeddings = 8;
  TransformerLM shortModel = tinyModel(c, 41);
  auto capped = run(shortModel, kPrompts, opts(1.0, 100), 1);
  for (const auto &s : capped) {
    EXPECT_EQ(s.prompt.size() + s.tokens.size(), 8u);
    EXPECT_EQ(s.finish, FinishReason::Length);
  }
  at::Generator gen = makeGenerator(1);
  EXPECT_ERROR([&] { generate(m, Prompts{{}}, opts(1.0), gen); },
               {"prompt 0", "empty"});
  EXPECT_ERROR([&] { generate(m, Prompts{{1}, {2, 40}}, opts(1.0), gen); },
               {"prompt 1", "40"});
  EXPECT_ERROR([&] { generate(shortModel, Prompts{std::vector<int64_t>(8, 1)},
                              opts(1.0), gen); },
               {"8 positions"});
  SamplingOptions badP = opts(1.0);
  badP.topP = 0.0;
  EXPECT_ERROR([&] { Decoder d(m, badP); }, {"topP"});
  Decoder d(m, opts(1.0));
  EXPECT_ERROR([&] { d.step(gen); }, {"before start"});
  d.start({{1}});
  EXPECT_ERROR([&] { d.start({{1}}); }, {"only once"});
}

TEST(Generation, ForkSharesThePrefix) {
  TransformerLM m = tinyModel(tinyConfig(), 43);
  at::Generator gen = makeGenerator(7);
  Decoder base(m, opts(0.0, 10));
  base.start(kPrompts);
  base.run(gen, 3);
  EXPECT_EQ(base.sequence(0).tokens.size(), 3u);
  // Greedy copies continue exactly like the original.
  Decoder copies = base.fork({2, 0, 2});
  base.run(gen);
  copies.run(gen);
  EXPECT_EQ(copies.sequence(0).tokens, base.sequence(2).tokens);
  EXPECT_EQ(copies.sequence(1).tokens, base.sequence(0).tokens);
  EXPECT_EQ(copies.sequence(2).tokens, base.sequence(2).tokens);
  for (size_t t = 0; t < base.sequence(2).logprobs.size(); ++t)
    EXPECT_NEAR(copies.sequence(0).logprobs[t], base.sequence(2).logprobs[t],
                1e-5);

  // Sampled copies share their first tokens, then diverge.
  Decoder sampler(m, opts(1.0, 16));
  sampler.start({kPrompts[0]});
  sampler.run(gen, 4);
  std::vector<int64_t> prefix = sampler.sequence(0).tokens;
  Decoder branches = sampler.fork({0, 0, 0, 0});
  branches.run(gen);
  std::set<std::vector<int64_t>> distinct;
  for (size_t i = 0; i < branches.size(); ++i) {
    const auto &t = branches.sequence(i).tokens;
    EXPECT_EQ(std::vector<int64_t>(t.begin(), t.begin() + 4), prefix);
    distinct.insert(t);
  }
  EXPECT_GT(distinct.size(), 1u);

  // generate() with several samples per prompt orders rows by prompt.
  auto rows = generate(m, kPrompts, opts(1.0, 5), gen, nullptr, 2);
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(rows[i].prompt, kPrompts[i / 2]);
  EXPECT_ERROR([&] { base.fork({3}); }, {"row 3", "out of range"});
}

namespace {

/// A tree plan of branches {2, 3} and segments of 3 tokens from \p prompts
/// (9 new tokens per path), each node drawing from its own uniforms; returns
/// the leaves' decoder (the other decoders are alive while it runs, as in
/// the rollout plans) and the bytes of its KV cache through \p kvBytes.
std::vector<GeneratedSequence> treePlan(TransformerLM m, const Prompts &prompts,
                                        bool cache, int64_t *storedTokens,
                                        int64_t *allocatedBytes,
                                        int64_t *bytesPerToken) {
  SamplingOptions o = opts(1.0, 9);
  o.useCache = cache;
  auto uniforms = [](int64_t node) {
    return [node](int64_t row, int64_t t) {
      uint64_t h = static_cast<uint64_t>(node * 1000 + row * 50 + t + 1) *
                   0x9E3779B97F4A7C15ull;
      return static_cast<float>((h >> 40) & 0xFFFFFF) / 16777216.0f;
    };
  };
  Decoder root(m, o);
  root.start(prompts);
  Decoder depth1 = root.fork({0, 0, 1, 1});
  depth1.run(uniforms(1), 3);
  Decoder leaves = depth1.fork({0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3});
  leaves.run(uniforms(2));
  *storedTokens = leaves.cache().storedTokens();
  *allocatedBytes = leaves.cache().memoryBytes();
  *bytesPerToken = leaves.cache().bytesPerToken();
  return leaves.sequences();
}

} // namespace

TEST(Generation, TreePlanSharesPrefixesAndMatchesARecomputation) {
  TransformerLM m = tinyModel(tinyConfig(), 47);
  const Prompts prompts = {{1, 5, 9, 4}, {2, 7}};
  int64_t stored = 0, allocated = 0, perToken = 0, unused = 0;
  std::vector<GeneratedSequence> shared =
      treePlan(m, prompts, true, &stored, &allocated, &perToken);
  std::vector<GeneratedSequence> recomputed =
      treePlan(m, prompts, false, &unused, &unused, &unused);
  ASSERT_EQ(shared.size(), 12u);
  for (size_t r = 0; r < shared.size(); ++r) {
    SCOPED_TRACE("path " + std::to_string(r));
    ASSERT_EQ(shared[r].tokens.size(), 9u);
    EXPECT_EQ(shared[r].tokens, recomputed[r].tokens);
    for (size_t t = 0; t < 9; ++t)
      EXPECT_NEAR(shared[r].logprobs[t], recomputed[r].logprobs[t], 1e-5);
    // Paths of one depth-1 node share its three tokens.
    EXPECT_EQ(std::vector<int64_t>(shared[r].tokens.begin(),
                                   shared[r].tokens.begin() + 3),
              std::vector<int64_t>(shared[r / 3 * 3].tokens.begin(),
                                   shared[r / 3 * 3].tokens.begin() + 3));
  }
  // The cache holds the tree's distinct tokens: the prompts (6), the four
  // depth-1 segments (3 tokens each) and the twelve leaves' 6 tokens but
  // the last (never fed back), not the paths' 12 x (prompt + 8).
  EXPECT_EQ(stored, 6 + 4 * 3 + 12 * 5);
  // Each fork reserved exactly what its rows feed, plus the padding slot.
  EXPECT_EQ(allocated, (stored + 1) * perToken);
  // The same twelve paths as independent rows store every path's prefix.
  Prompts paths;
  for (const GeneratedSequence &g : shared)
    paths.push_back(g.prompt);
  Decoder flat(m, opts(1.0, 9));
  flat.start(paths);
  at::Generator gen = makeGenerator(3);
  flat.run(gen);
  EXPECT_EQ(flat.cache().storedTokens(), 6 * 6 + 12 * 8);
}

TEST(Generation, ForkAtAnEarlierToken) {
  TransformerLM m = tinyModel(tinyConfig(), 45);
  for (bool useCache : {true, false}) {
    SCOPED_TRACE(useCache ? "cached" : "uncached");
    at::Generator gen = makeGenerator(9);
    SamplingOptions o = opts(0.0, 10);
    o.useCache = useCache;
    // Mid-generation: every source row still has its KV cache.
    Decoder base(m, o);
    base.start(kPrompts);
    base.run(gen, 6);
    Decoder mid = base.forkAt({1, 0, 1}, {2, 0, 6});
    EXPECT_EQ(mid.sequence(0).tokens.size(), 2u);
    EXPECT_EQ(mid.sequence(1).tokens.size(), 0u);
    EXPECT_FALSE(mid.sequence(2).finished());
    base.run(gen);
    mid.run(gen);
    // Greedy continuations of a prefix reproduce the original row.
    EXPECT_EQ(mid.sequence(0).tokens, base.sequence(1).tokens);
    EXPECT_EQ(mid.sequence(1).tokens, base.sequence(0).tokens);
    EXPECT_EQ(mid.sequence(2).tokens, base.sequence(1).tokens);
    for (size_t t = 0; t < base.sequence(1).logprobs.size(); ++t)
      EXPECT_NEAR(mid.sequence(0).logprobs[t], base.sequence(1).logprobs[t],
                  1e-5);

    // After the end: finished rows have no cache left, so the prefixes are
    // recomputed.
    Decoder late = base.forkAt({2, 2}, {3, 9});
    EXPECT_FALSE(late.sequence(0).finished());
    late.run(gen);
    EXPECT_EQ(late.sequence(0).tokens, base.sequence(2).tokens);
    EXPECT_EQ(late.sequence(1).tokens, base.sequence(2).tokens);
    // Keeping all maxNewTokens tokens leaves the row finished.
    Decoder full = base.forkAt({0}, {10});
    EXPECT_EQ(full.sequence(0).finish, FinishReason::Length);
    EXPECT_ERROR([&] { base.forkAt({0}, {11}); }, {"cannot keep 11"});
    EXPECT_ERROR([&] { base.forkAt({0, 1}, {1}); }, {"token counts"});
  }
}

TEST(Generation, NextTokenLogitsAndDecodingUnknownIds) {
  // A model vocabulary larger than the tokenizer's (as Qwen2 pads it): ids
  // the tokenizer does not know are skipped in `text`, not fatal.
  CharTokenizer tok;
  TransformerLM m = tinyModel(tinyConfig(tok.vocabSize() + 20), 47);
  at::Generator gen = makeGenerator(3);
  SamplingOptions o = opts(3.0, 30);
  Decoder d(m, o, &tok);
  d.start({tok.encode("7*8=", true)});
  at::Tensor logits = d.nextTokenLogits();
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, tok.vocabSize() + 20}));
  d.run(gen);
  const GeneratedSequence &s = d.sequence(0);
  std::string expected;
  for (int64_t id : s.tokens)
    if (id < tok.vocabSize())
      expected += tok.decode({id});
  EXPECT_EQ(s.text, expected);
  EXPECT_EQ(d.nextTokenLogits().abs().sum().item<double>(), 0.0)
      << "finished rows have zero logits";
}
