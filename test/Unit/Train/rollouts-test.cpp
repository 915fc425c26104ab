//===- rollouts-test.cpp - Rollout plans: chain, tree, forest -------------===//
//
// On a randomly initialised model of a few thousand parameters: forking a
// finished row's retained KV cache gives the logits of a recomputation; the
// paths of a tree and a forest carry the log-probabilities that a forward
// pass over the flattened path gives (so every forked cache was right), and
// greedy trees reproduce independent greedy generation token for token; the
// node structure is consistent with the tokens; the token counts are exact
// where the shapes are known (no stop token); chain MC values keep the
// prefix up to the boundary token position.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/Rollouts.h"
#include "tiny-model.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace cac::rt;
using namespace cac::rt::train;

namespace {

std::vector<std::vector<int64_t>> testPrompts() {
  return {{1, 5, 6, 7}, {1, 9, 3}, {1, 4}};
}

/// Log-probabilities of each response token under a full forward pass of
/// prompt + response (no cache), at \p temperature.
std::vector<float> recompute(TransformerLM &m, const Rollout &r,
                             double temperature) {
  torch::NoGradGuard ng;
  std::vector<int64_t> ids = r.prompt;
  ids.insert(ids.end(), r.response.begin(), r.response.end());
  int64_t L = static_cast<int64_t>(ids.size());
  at::Tensor x = at::tensor(ids, at::kLong).view({1, L});
  at::Tensor mask = at::ones({1, L}, at::kBool);
  at::Tensor lp = tokenLogProbs(m->forward(x, mask), x, temperature)[0];
  std::vector<float> out;
  for (size_t t = 0; t < r.response.size(); ++t)
    out.push_back(lp[static_cast<int64_t>(r.prompt.size() + t) - 1]
                      .item<float>());
  return out;
}

void expectConsistentLogp(TransformerLM &m, const RolloutBatch &b,
                          double temperature) {
  for (const Rollout &r : b.rolls) {
    std::vector<float> ref = recompute(m, r, temperature);
    ASSERT_EQ(ref.size(), r.logp.size());
    for (size_t t = 0; t < ref.size(); ++t)
      EXPECT_NEAR(r.logp[t], ref[t], 1e-4) << "token " << t;
  }
}

/// Shared nodes hold the same tokens in every path; nodes appear in path
/// order parent before child; every token's node descends from the path's
/// earlier nodes.
void expectConsistentTree(const RolloutBatch &b) {
  ASSERT_EQ(b.tokenNode.size(), b.rolls.size());
  std::map<int64_t, std::vector<int64_t>> nodeTokens;
  for (size_t i = 0; i < b.rolls.size(); ++i) {
    const auto &tn = b.tokenNode[i];
    const Rollout &r = b.rolls[i];
    ASSERT_EQ(tn.size(), r.response.size());
    std::map<int64_t, std::vector<int64_t>> mine;
    for (size_t t = 0; t < tn.size(); ++t) {
      ASSERT_GE(tn[t], 0);
      ASSERT_LT(tn[t], static_cast<int64_t>(b.nodeParent.size()));
      mine[tn[t]].push_back(r.response[t]);
      if (t > 0 && tn[t] != tn[t - 1]) {
        // A new node: the previous one is an ancestor.
        int64_t a = b.nodeParent[tn[t]];
        while (a >= 0 && a != tn[t - 1])
          a = b.nodeParent[a];
        EXPECT_EQ(a, tn[t - 1]) << "path " << i << " token " << t;
      }
    }
    for (auto &[n, toks] : mine) {
      auto it = nodeTokens.find(n);
      if (it == nodeTokens.end())
        nodeTokens[n] = toks;
      else
        EXPECT_EQ(it->second, toks) << "node " << n; // shared: same tokens
    }
  }
}

PlanContext context(TransformerLM m, at::Generator &gen, double temperature,
                    int64_t maxTokens, bool stopToken) {
  PlanContext ctx;
  ctx.model = m;
  ctx.options.temperature = temperature;
  ctx.options.maxNewTokens = maxTokens;
  if (stopToken)
    ctx.options.stopTokens = {2};
  ctx.gen = &gen;
  ctx.reward = [](int64_t, const std::string &) { return 0.0; };
  return ctx;
}

} // namespace

TEST(Rollouts, RetainedCacheForkEqualsRecomputation) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(5);
  SamplingOptions o;
  o.maxNewTokens = 9;
  o.retainFinished = true;
  o.stopTokens = {2};
  Decoder d(m, o);
  d.start(testPrompts());
  Decoder rows = d.fork({0, 0, 1, 2, 2});
  rows.run(gen);
  std::vector<int64_t> src, keep;
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t k = 0; k <= static_cast<int64_t>(rows.sequence(i).tokens.size()) - 1; ++k) {
      src.push_back(static_cast<int64_t>(i));
      keep.push_back(k);
    }
  Decoder cached = rows.forkAt(src, keep);
  SamplingOptions u = o;
  u.useCache = false;
  Decoder fresh(m, u);
  // The same prefixes, run from scratch by an uncached decoder.
  std::vector<std::vector<int64_t>> prefixes;
  for (size_t j = 0; j < src.size(); ++j) {
    const GeneratedSequence &g = rows.sequence(src[j]);
    std::vector<int64_t> p = g.prompt;
    p.insert(p.end(), g.tokens.begin(), g.tokens.begin() + keep[j]);
    prefixes.push_back(p);
  }
  fresh.start(prefixes);
  at::Tensor a = cached.nextTokenLogits(), b = fresh.nextTokenLogits();
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-4))
      << (a - b).abs().max().item<float>();
}

TEST(Rollouts, GreedyTreePathsEqualGreedyGeneration) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(1);
  PlanContext ctx = context(m, gen, 0.0, 10, false);
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Tree;
  spec.branches = {2, 2, 2};
  spec.segLen = 3;
  RolloutBatch b = sampleTree(ctx, testPrompts(), spec);
  at::Generator g2 = makeGenerator(1);
  SamplingOptions o = ctx.options;
  std::vector<GeneratedSequence> ref = generate(m, testPrompts(), o, g2);
  ASSERT_EQ(b.rolls.size(), 3u * 8u);
  for (const Rollout &r : b.rolls)
    EXPECT_EQ(r.response, ref[static_cast<size_t>(r.group)].tokens);
}

TEST(Rollouts, TreeShapeTokensAndLogp) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(3);
  // No stop token: every row runs to max_tokens, so the shape is fixed.
  PlanContext ctx = context(m, gen, 1.0, 7, false);
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Tree;
  spec.branches = {2, 3};
  spec.segLen = 3;
  auto prompts = testPrompts();
  RolloutBatch b = sampleTree(ctx, prompts, spec);
  const int64_t P = 3, promptTok = 4 + 3 + 2;
  ASSERT_EQ(b.rolls.size(), static_cast<size_t>(P * 6));
  EXPECT_EQ(b.stats.nodes, P + P * 2 + P * 6);
  EXPECT_EQ(b.stats.tokensSampled, P * (2 * 3 + 6 * 4));
  EXPECT_EQ(b.stats.tokensComputed, promptTok + P * (2 * 3 + 6 * 4));
  EXPECT_EQ(b.stats.tokensFlattenedResponse, P * 6 * 7);
  EXPECT_EQ(b.stats.tokensFlattened, 6 * promptTok + P * 6 * 7);
  for (size_t i = 0; i < b.rolls.size(); ++i) {
    // Paths are grouped by prompt; the first segment's node is a child of
    // the prompt's root node.
    EXPECT_EQ(b.rolls[i].group, static_cast<int64_t>(i) / 6);
    EXPECT_EQ(b.nodeParent[b.tokenNode[i][0]], b.rolls[i].group);
  }
  expectConsistentTree(b);
  expectConsistentLogp(m, b, 1.0);

  // Node samples: every non-root node once, context = prompt + history.
  std::vector<float> adv;
  for (const Rollout &r : b.rolls)
    for (size_t t = 0; t < r.response.size(); ++t)
      adv.push_back(static_cast<float>(t));
  std::vector<std::vector<float>> out;
  std::vector<Rollout> nodes = nodeSamples(b, {adv}, {}, out);
  EXPECT_EQ(static_cast<int64_t>(nodes.size()), P * 2 + P * 6);
  int64_t total = 0;
  for (const Rollout &n : nodes)
    total += static_cast<int64_t>(n.response.size());
  EXPECT_EQ(total, b.stats.tokensSampled);
  // A sample's outputs are its tokens' outputs in the path: adv (= token
  // index in the path) starts at 0 for depth-1 nodes, at 3 for depth 2.
  ASSERT_EQ(out[0].size(), static_cast<size_t>(total));
  size_t off = 0;
  for (const Rollout &n : nodes) {
    EXPECT_EQ(out[0][off], n.response.size() == 3 ? 0.0f : 3.0f);
    EXPECT_EQ(n.prompt.size(),
              prompts[static_cast<size_t>(n.group)].size() +
                  (n.response.size() == 3 ? 0u : 3u));
    off += n.response.size();
  }
  expectConsistentLogp(m, RolloutBatch{nodes, {}, {}, {}, {}, {}}, 1.0);
}

TEST(Rollouts, TreeEarlyLeavesOnStop) {
  TransformerLM m = cac::rt::test::tinyDecoderModel(11);
  at::Generator gen = makeGenerator(4);
  // A hot temperature with stop token 2 among 24: some rows stop early.
  PlanContext ctx = context(m, gen, 3.0, 12, true);
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Tree;
  spec.branches = {3, 3, 3};
  spec.segLen = 4;
  RolloutBatch b = sampleTree(ctx, testPrompts(), spec);
  bool early = false;
  for (const Rollout &r : b.rolls) {
    EXPECT_TRUE(r.response.size() == 12 || r.response.back() == 2);
    early = early || r.response.size() < 12;
  }
  EXPECT_TRUE(early);
  EXPECT_LT(b.rolls.size(), 3u * 27u);
  expectConsistentTree(b);
  expectConsistentLogp(m, b, 3.0);
  EXPECT_LT(b.stats.tokensSampled, b.stats.tokensFlattenedResponse);
}

TEST(Rollouts, ForestBranchesWithinBudget) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(9);
  PlanContext ctx = context(m, gen, 1.0, 8, false);
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Forest;
  spec.n = 8;
  spec.trees = 2;
  spec.children = 2;
  // tau 0: every position of high enough entropy (all) may branch until
  // the budget of 4 leaves per tree is used.
  RolloutBatch b = sampleForest(ctx, testPrompts(), spec, 0.0);
  ASSERT_EQ(b.rolls.size(), 3u * 8u);
  for (size_t i = 0; i < b.rolls.size(); ++i)
    EXPECT_EQ(b.rolls[i].group, static_cast<int64_t>(i) / 8);
  expectConsistentTree(b);
  expectConsistentLogp(m, b, 1.0);
  // Each tree's root row branches at position 0 into 2 rows (the root node
  // keeps no token), which branch at position 1 into 4 (the budget), which
  // run to 8 tokens: 2 + 4 * 7 sampled tokens and 1 + 2 + 4 nodes a tree.
  EXPECT_EQ(b.stats.tokensSampled, 3 * 2 * (2 + 4 * 7));
  EXPECT_EQ(b.stats.tokensFlattenedResponse, 3 * 8 * 8);
  EXPECT_EQ(b.stats.nodes, 3 * 2 * (1 + 2 + 4));
  EXPECT_EQ(b.stats.tokensComputed, 9 + b.stats.tokensSampled);
  // The children of a branch point start with distinct tokens (sampling
  // without replacement, estimators.md §6.2).
  std::map<int64_t, int64_t> firstToken; // node -> its first token
  for (size_t i = 0; i < b.rolls.size(); ++i) {
    const auto &tn = b.tokenNode[i];
    for (size_t t = 0; t < tn.size(); ++t)
      if (t == 0 || tn[t - 1] != tn[t])
        firstToken.emplace(tn[t], b.rolls[i].response[t]);
  }
  std::map<int64_t, std::set<int64_t>> childTokens;
  std::map<int64_t, int> children;
  for (const auto &[node, token] : firstToken) {
    int64_t parent = b.nodeParent[static_cast<size_t>(node)];
    if (parent < 0)
      continue;
    childTokens[parent].insert(token);
    ++children[parent];
  }
  EXPECT_EQ(children.size(), 3u * 2u * 3u); // roots and their 2 children
  for (const auto &[parent, n] : children)
    EXPECT_EQ(static_cast<int>(childTokens[parent].size()), n)
        << "children of node " << parent << " share a first token";
}

TEST(Rollouts, ForestWithoutBranchPointsFillsFromThePrompt) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(9);
  PlanContext ctx = context(m, gen, 1.0, 6, false);
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Forest;
  spec.n = 4;
  spec.trees = 2;
  RolloutBatch b = sampleForest(ctx, testPrompts(), spec, 1e9);
  ASSERT_EQ(b.rolls.size(), 12u);
  // 2 trees of one path each, plus 2 one-node fill trees per prompt: every
  // node is a root.
  EXPECT_EQ(b.stats.nodes, 12);
  for (int64_t p : b.nodeParent)
    EXPECT_EQ(p, -1);
  EXPECT_EQ(b.stats.tokensSampled, b.stats.tokensFlattenedResponse);
  EXPECT_EQ(b.stats.tokensComputed, 9 + 12 * 6);
  expectConsistentLogp(m, b, 1.0);
}

TEST(Rollouts, ForestEntropyOverTheTopK) {
  // With the entropy over the top-1 probability (always 0), nothing exceeds
  // tau = 0: no tree branches, every leaf is a fill from the prompt. Over the
  // top-2 it is positive, so the root branches as with the full vocabulary.
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(9);
  PlanContext ctx = context(m, gen, 1.0, 6, false);
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Forest;
  spec.n = 4;
  spec.trees = 2;
  spec.entropyTopK = 1;
  RolloutBatch b = sampleForest(ctx, testPrompts(), spec, 0.0);
  ASSERT_EQ(b.rolls.size(), 12u);
  for (int64_t p : b.nodeParent)
    EXPECT_EQ(p, -1);
  spec.entropyTopK = 2;
  b = sampleForest(ctx, testPrompts(), spec, 0.0);
  ASSERT_EQ(b.rolls.size(), 12u);
  EXPECT_EQ(b.stats.nodes, 3 * 2 * 3); // each tree: a root, 2 children
}

TEST(Rollouts, ChainMonteCarloKeepsThePrefix) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(2);
  PlanContext ctx = context(m, gen, 1.0, 6, false);
  // Record every scored completion: the rollouts first, then the
  // continuations in order (rollout, segment, sample).
  CharTokenizer tok;
  ctx.tokenizer = &tok;
  std::vector<std::string> texts;
  ctx.reward = [&](int64_t, const std::string &text) {
    texts.push_back(text);
    return static_cast<double>(text.size() % 2);
  };
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Chain;
  spec.n = 2;
  spec.samples = 3;
  spec.dedup = false; // every start its own query (see the next test)
  std::vector<std::vector<int64_t>> seen;
  auto starts = [&](const std::vector<Rollout> &rolls) {
    std::vector<std::vector<int64_t>> s;
    for (size_t i = 0; i < rolls.size(); ++i)
      s.push_back(i % 2 ? std::vector<int64_t>{0, 2, 5}
                        : std::vector<int64_t>{1, 3});
    seen = s;
    return s;
  };
  RolloutBatch b = sampleChain(ctx, testPrompts(), spec, starts);
  ASSERT_EQ(b.rolls.size(), 6u);
  ASSERT_EQ(b.mcValue.size(), 36u);
  ASSERT_EQ(texts.size(), 6u + 3u * 15u);
  size_t c = 6;
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = 0; j < seen[i].size(); ++j) {
      // Every continuation starts with the rollout's first b tokens (a token
      // position, not re-tokenized text), and the MC value is the mean of
      // the continuations' rewards.
      const auto &resp = b.rolls[i].response;
      std::string prefix = tok.decode(
          std::vector<int64_t>(resp.begin(), resp.begin() + seen[i][j]));
      double sum = 0;
      for (int k = 0; k < 3; ++k, ++c) {
        EXPECT_EQ(texts[c].substr(0, prefix.size()), prefix);
        sum += static_cast<double>(texts[c].size() % 2);
      }
      EXPECT_FLOAT_EQ(b.mcValue[i * 6 + j], static_cast<float>(sum / 3));
    }
  // 6 rollouts of 6 tokens; 3 continuations per start of 6 - b tokens each.
  int64_t cont = 3 * (3 * ((6 - 1) + (6 - 3)) + 3 * ((6 - 0) + (6 - 2) + (6 - 5)));
  EXPECT_EQ(b.stats.tokensSampled, 36 + cont);
  EXPECT_EQ(b.stats.tokensComputed, 9 + 36 + cont + 3 * 15);
  expectConsistentLogp(m, b, 1.0);
}

TEST(Rollouts, ChainSharesIdenticalPrefixQueries) {
  // 3 prompts x 4 rollouts with segment starts {0, 1, 2}: the empty prefix
  // is one query per prompt, and a prefix of 1 or 2 tokens is shared by the
  // rollouts of its prompt that begin with the same tokens. Continuations
  // are sampled once per distinct query and its value serves each start.
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  at::Generator gen = makeGenerator(4);
  PlanContext ctx = context(m, gen, 0.7, 5, false);
  CharTokenizer tok;
  ctx.tokenizer = &tok;
  std::vector<std::string> texts;
  ctx.reward = [&](int64_t, const std::string &text) {
    texts.push_back(text);
    return static_cast<double>(text.size() % 3) / 2.0;
  };
  RolloutSpec spec;
  spec.kind = RolloutSpec::Kind::Chain;
  spec.n = 4;
  spec.samples = 2;
  auto starts = [&](const std::vector<Rollout> &rolls) {
    return std::vector<std::vector<int64_t>>(rolls.size(), {0, 1, 2});
  };
  RolloutBatch b = sampleChain(ctx, testPrompts(), spec, starts);
  ASSERT_EQ(b.rolls.size(), 12u);
  // The distinct (prompt, prefix) pairs, in order of first appearance.
  std::map<std::pair<int64_t, std::vector<int64_t>>, size_t> first;
  std::vector<std::vector<size_t>> q(12);
  for (size_t i = 0; i < 12; ++i)
    for (int64_t s : {0, 1, 2}) {
      const auto &r = b.rolls[i].response;
      auto key = std::make_pair(
          b.rolls[i].group, std::vector<int64_t>(r.begin(), r.begin() + s));
      auto it = first.try_emplace(key, first.size()).first;
      q[i].push_back(it->second);
    }
  const size_t distinct = first.size();
  EXPECT_LE(distinct, 3u * (1 + 4 + 4));
  EXPECT_GT(distinct, 3u); // sampled rollouts differ somewhere
  EXPECT_EQ(b.stats.nodes, static_cast<int64_t>(distinct));
  EXPECT_EQ(b.stats.sharedQueries, static_cast<int64_t>(36 - distinct));
  EXPECT_GE(b.stats.sharedQueries, 9); // at least the empty prefixes
  ASSERT_EQ(texts.size(), 12u + 2u * distinct);
  // Each query's two continuations start with its prefix; every start of it
  // gets their mean.
  for (size_t i = 0; i < 12; ++i)
    for (size_t j = 0; j < 3; ++j) {
      size_t c = 12 + 2 * q[i][j];
      std::string prefix = tok.decode(std::vector<int64_t>(
          b.rolls[i].response.begin(), b.rolls[i].response.begin() + j));
      double sum = 0;
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(texts[c + k].substr(0, prefix.size()), prefix);
        sum += static_cast<double>(texts[c + k].size() % 3) / 2.0;
      }
      EXPECT_FLOAT_EQ(b.mcValue[i * 5 + j], static_cast<float>(sum / 2));
    }
  expectConsistentLogp(m, b, 0.7);
}
