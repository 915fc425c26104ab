//===- transformer-test.cpp - Llama/Qwen2 decoder and KV cache ------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Model/Transformer.h"

#include <torch/torch.h>

#include <cmath>
#include <set>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// Logits [T, V] of one unpadded sequence \p ids, computed independently of
/// the library: double precision, explicit loops over heads, HF's
/// rotate_half RoPE and repeat_kv head order, an explicit causal mask.
at::Tensor referenceLogits(TransformerLMImpl &m, const std::vector<int64_t> &ids,
                           int64_t positionOffset = 0) {
  const ModelConfig &c = m.config();
  auto params = m.named_parameters();
  auto W = [&](const std::string &n) {
    at::Tensor *t = params.find(n);
    EXPECT_NE(t, nullptr) << n;
    return t->detach().to(at::kDouble);
  };
  auto lin = [&](const at::Tensor &x, const std::string &name, bool bias) {
    at::Tensor y = at::matmul(x, W(name + ".weight").t());
    return bias ? y + W(name + ".bias") : y;
  };
  auto rms = [&](const at::Tensor &x, const std::string &name) {
    return W(name) * x / at::sqrt(x.pow(2).mean(-1, true) + c.rmsNormEps);
  };
  int64_t T = ids.size(), H = c.numAttentionHeads,
          KV = c.numKeyValueHeads, D = c.headDimension();
  at::Tensor cosT = at::zeros({T, D}, at::kDouble);
  at::Tensor sinT = at::zeros({T, D}, at::kDouble);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      double invFreq = 1.0 / std::pow(c.ropeTheta, 2.0 * i / D);
      double angle = (t + positionOffset) * invFreq;
      for (int64_t k : {i, i + D / 2}) {
        cosT[t][k] = std::cos(angle);
        sinT[t][k] = std::sin(angle);
      }
    }
  auto rope = [&](const at::Tensor &x) { // [T, heads, D]
    at::Tensor x1 = x.narrow(-1, 0, D / 2), x2 = x.narrow(-1, D / 2, D / 2);
    at::Tensor rotated = at::cat({-x2, x1}, -1);
    return x * cosT.unsqueeze(1) + rotated * sinT.unsqueeze(1);
  };
  at::Tensor x = W("model.embed_tokens.weight")
                     .index_select(0, at::tensor(ids, at::kLong));
  at::Tensor causal = at::ones({T, T}, at::kBool).tril();
  for (int64_t l = 0; l < c.numHiddenLayers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = rms(x, p + "input_layernorm.weight");
    at::Tensor q = rope(lin(h, p + "self_attn.q_proj", c.attentionBias)
                            .view({T, H, D}));
    at::Tensor k = rope(lin(h, p + "self_attn.k_proj", c.attentionBias)
                            .view({T, KV, D}));
    at::Tensor v =
        lin(h, p + "self_attn.v_proj", c.attentionBias).view({T, KV, D});
    std::vector<at::Tensor> heads;
    for (int64_t hd = 0; hd < H; ++hd) {
      int64_t kv = hd / (H / KV); // repeat_kv: kv head j serves j*G..j*G+G-1
      at::Tensor s = at::matmul(q.select(1, hd), k.select(1, kv).t()) /
                     std::sqrt(static_cast<double>(D));
      s = s.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(at::matmul(at::softmax(s, -1), v.select(1, kv)));
    }
    x = x + lin(at::cat(heads, -1), p + "self_attn.o_proj", false);
    at::Tensor h2 = rms(x, p + "post_attention_layernorm.weight");
    x = x + lin(at::silu(lin(h2, p + "mlp.gate_proj", c.mlpBias)) *
                    lin(h2, p + "mlp.up_proj", c.mlpBias),
                p + "mlp.down_proj", c.mlpBias);
  }
  x = rms(x, "model.norm.weight");
  return c.tieWordEmbeddings
             ? at::matmul(x, W("model.embed_tokens.weight").t())
             : lin(x, "lm_head", false);
}

at::Tensor ids2d(const std::vector<std::vector<int64_t>> &rows) {
  std::vector<int64_t> flat;
  for (const auto &r : rows)
    flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat, at::kLong)
      .view({static_cast<int64_t>(rows.size()), -1});
}

at::Tensor mask2d(const std::vector<std::vector<int>> &rows) {
  std::vector<int64_t> flat;
  for (const auto &r : rows)
    flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat, at::kLong)
             .view({static_cast<int64_t>(rows.size()), -1})
             .to(at::kBool);
}

std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
  at::Generator gen = makeGenerator(seed);
  at::Tensor t = at::randint(vocab, {n}, gen, at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

} // namespace

TEST(Transformer, ParameterNamesAreHuggingFaces) {
  std::set<std::string> expected = {"model.embed_tokens.weight",
                                    "model.norm.weight", "lm_head.weight"};
  for (int l = 0; l < 2; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char *s :
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
          "input_layernorm.weight", "post_attention_layernorm.weight"})
      expected.insert(p + s);
  }
  TransformerLM llama = tinyModel(tinyConfig());
  std::set<std::string> names;
  for (const auto &p : llama->named_parameters())
    names.insert(p.key());
  EXPECT_EQ(names, expected);

  ModelConfig qc = tinyConfig(32, "qwen2");
  qc.tieWordEmbeddings = true;
  TransformerLM qwen = tinyModel(qc, 1, /*valueHead=*/true);
  names.clear();
  for (const auto &p : qwen->named_parameters())
    names.insert(p.key());
  expected.erase("lm_head.weight");
  for (int l = 0; l < 2; ++l)
    for (const char *s : {"q_proj", "k_proj", "v_proj"})
      expected.insert("model.layers." + std::to_string(l) + ".self_attn." + s +
                      ".bias");
  expected.insert("value_head.weight");
  expected.insert("value_head.bias");
  EXPECT_EQ(names, expected);
}

TEST(Transformer, MatchesAnIndependentReference) {
  for (const char *type : {"llama", "qwen2"}) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(type) + (tied ? " tied" : " untied"));
      ModelConfig c = tinyConfig(32, type);
      c.tieWordEmbeddings = tied;
      TransformerLM m = tinyModel(c, 3);
      std::vector<int64_t> ids = randomIds(9, 32, 4);
      torch::NoGradGuard noGrad;
      at::Tensor logits = m->forward(ids2d({ids}))[0];
      at::Tensor ref = referenceLogits(*m, ids);
      EXPECT_LT(maxAbsDiff(logits, ref), 1e-4);
      EXPECT_GT(ref.abs().max().item<double>(), 0.1) << "degenerate model";
    }
  }
}

TEST(Transformer, GqaShapesAndEquivalenceWithRepeatedKv) {
  ModelConfig c = tinyConfig();
  TransformerLM gqa = tinyModel(c, 5);
  auto &attn = *gqa->model->blocks[0]->self_attn;
  EXPECT_EQ(attn.q_proj->weight.sizes(), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(attn.k_proj->weight.sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(attn.v_proj->weight.sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(attn.o_proj->weight.sizes(), (std::vector<int64_t>{16, 16}));

  torch::NoGradGuard noGrad;
  at::Tensor ids = ids2d({randomIds(7, 32, 1), randomIds(7, 32, 2)});
  KVCache cache;
  at::Tensor logits = gqa->forward(ids, {}, &cache);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 7, 32}));
  EXPECT_EQ(cache.keys(0).sizes(), (std::vector<int64_t>{2, 2, 7, 4}));
  EXPECT_EQ(cache.values(1).sizes(), (std::vector<int64_t>{2, 2, 7, 4}));
  EXPECT_EQ(cache.length(), 7);
  EXPECT_EQ(toLongs(cache.nextPositions()),
            (std::vector<int64_t>{7, 7}));

  // Multi-head attention whose K/V heads repeat the GQA ones in HF's
  // repeat_kv order (query head h uses kv head h / 2) must agree exactly.
  ModelConfig mc = c;
  mc.numKeyValueHeads = 4;
  TransformerLM mha = tinyModel(mc, 6);
  auto src = gqa->named_parameters();
  for (auto &p : mha->named_parameters()) {
    at::Tensor s = *src.find(p.key());
    bool kv = p.key().find("k_proj") != std::string::npos ||
              p.key().find("v_proj") != std::string::npos;
    if (kv) // [2 * 4, 16] → [4 * 4, 16]
      s = s.view({2, 1, 4, 16}).expand({2, 2, 4, 16}).reshape({16, 16});
    p.value().copy_(s);
  }
  EXPECT_LT(maxAbsDiff(mha->forward(ids), logits), 1e-5);
}

TEST(Transformer, KvCacheMatchesFullForward) {
  TransformerLM m = tinyModel(tinyConfig(), 7);
  torch::NoGradGuard noGrad;
  at::Tensor ids = ids2d({randomIds(12, 32, 8), randomIds(12, 32, 9)});
  at::Tensor full = m->forward(ids);

  // Prefill 4, then one token at a time.
  KVCache cache;
  std::vector<at::Tensor> parts = {m->forward(ids.narrow(1, 0, 4), {}, &cache)};
  for (int64_t t = 4; t < 12; ++t)
    parts.push_back(m->forward(ids.narrow(1, t, 1), {}, &cache));
  EXPECT_LT(maxAbsDiff(at::cat(parts, 1), full), 1e-5);
  EXPECT_EQ(cache.length(), 12);

  // Uneven chunks, with a small reservation so the cache must grow.
  KVCache chunked;
  chunked.reserve(2);
  parts = {m->forward(ids.narrow(1, 0, 5), {}, &chunked),
           m->forward(ids.narrow(1, 5, 3), {}, &chunked),
           m->forward(ids.narrow(1, 8, 4), {}, &chunked)};
  EXPECT_LT(maxAbsDiff(at::cat(parts, 1), full), 1e-5);
  EXPECT_GE(chunked.capacity(), 12);
  EXPECT_GT(chunked.memoryBytes(), 0);
}

TEST(Transformer, CausalMasking) {
  TransformerLM m = tinyModel(tinyConfig(), 9);
  torch::NoGradGuard noGrad;
  std::vector<int64_t> a = randomIds(10, 32, 10), b = a;
  b[6] = (a[6] + 1) % 32;
  at::Tensor la = m->forward(ids2d({a}))[0], lb = m->forward(ids2d({b}))[0];
  EXPECT_EQ(maxAbsDiff(la.narrow(0, 0, 6), lb.narrow(0, 0, 6)), 0.0)
      << "a later token changed earlier logits";
  EXPECT_GT(maxAbsDiff(la.narrow(0, 6, 4), lb.narrow(0, 6, 4)), 1e-3)
      << "changing a token must change its own and later logits";
}

TEST(Transformer, LeftRightAndHolePaddingAreInvisible) {
  TransformerLM m = tinyModel(tinyConfig(), 11);
  torch::NoGradGuard noGrad;
  std::vector<int64_t> a = randomIds(5, 32, 12), b = randomIds(8, 32, 13);
  at::Tensor la = m->forward(ids2d({a}))[0]; // [5, V]
  at::Tensor lb = m->forward(ids2d({b}))[0]; // [8, V]
  const int64_t P = 7; // pad id; attended to, it would change the results

  // Left padding.
  std::vector<int64_t> aLeft(3, P);
  aLeft.insert(aLeft.end(), a.begin(), a.end());
  at::Tensor out = m->forward(ids2d({aLeft, b}),
                              mask2d({{0, 0, 0, 1, 1, 1, 1, 1},
                                      {1, 1, 1, 1, 1, 1, 1, 1}}));
  EXPECT_LT(maxAbsDiff(out[0].narrow(0, 3, 5), la), 1e-5);
  EXPECT_LT(maxAbsDiff(out[1], lb), 1e-5);
  EXPECT_FALSE(out.isnan().any().item<bool>());

  // Right padding.
  std::vector<int64_t> aRight = a;
  aRight.insert(aRight.end(), 3, P);
  out = m->forward(ids2d({aRight, b}), mask2d({{1, 1, 1, 1, 1, 0, 0, 0},
                                               {1, 1, 1, 1, 1, 1, 1, 1}}));
  EXPECT_LT(maxAbsDiff(out[0].narrow(0, 0, 5), la), 1e-5);

  // Holes in the middle.
  std::vector<int64_t> aHoles = {a[0], a[1], P, a[2], P, P, a[3], a[4]};
  out = m->forward(ids2d({aHoles}), mask2d({{1, 1, 0, 1, 0, 0, 1, 1}}));
  at::Tensor real = out[0].index_select(0, at::tensor({0, 1, 3, 6, 7}));
  EXPECT_LT(maxAbsDiff(real, la), 1e-5);

  // Left-padded prefill through the cache, then decoding.
  KVCache cache;
  std::vector<int64_t> bHead(b.begin(), b.begin() + 4);
  std::vector<int64_t> aHead(3, P); // a's first token, left-padded to 4
  aHead.push_back(a[0]);
  std::vector<at::Tensor> outA, outB;
  at::Tensor first = m->forward(ids2d({aHead, bHead}),
                                mask2d({{0, 0, 0, 1}, {1, 1, 1, 1}}), &cache);
  outA.push_back(first[0].narrow(0, 3, 1));
  outB.push_back(first[1]);
  for (int64_t t = 1; t < 5; ++t) {
    at::Tensor step = m->forward(ids2d({{a[t]}, {b[t + 3]}}), {}, &cache);
    outA.push_back(step[0]);
    outB.push_back(step[1]);
  }
  EXPECT_LT(maxAbsDiff(at::cat(outA, 0), la), 1e-5);
  EXPECT_LT(maxAbsDiff(at::cat(outB, 0), lb), 1e-5);
  EXPECT_EQ(toLongs(cache.nextPositions()),
            (std::vector<int64_t>{5, 8}));
}

TEST(Transformer, RopeDependsOnlyOnRelativePositions) {
  TransformerLM m = tinyModel(tinyConfig(), 13);
  torch::NoGradGuard noGrad;
  std::vector<int64_t> a = randomIds(6, 32, 14);
  at::Tensor ids = ids2d({a});
  at::Tensor base = m->forward(ids);
  at::Tensor shifted =
      m->forward(ids, {}, nullptr, at::arange(6, at::kLong).view({1, 6}) + 37);
  EXPECT_LT(maxAbsDiff(base, shifted), 1e-4);
  EXPECT_LT(maxAbsDiff(shifted[0], referenceLogits(*m, a, 37)), 1e-4);
  // But the order of positions matters.
  at::Tensor reversed =
      m->forward(ids, {}, nullptr, at::arange(5, -1, -1, at::kLong).view({1, 6}));
  EXPECT_GT(maxAbsDiff(base, reversed), 1e-3);
}

TEST(Transformer, RopeScaling) {
  ModelConfig c = tinyConfig();
  TransformerLM plain = tinyModel(c, 15);
  ModelConfig lc = c;
  lc.ropeScaling.type = "linear";
  lc.ropeScaling.factor = 2.0;
  TransformerLM linear = tinyModel(lc, 15);
  torch::NoGradGuard noGrad;
  at::Tensor ids = ids2d({randomIds(6, 32, 16)});
  at::Tensor pos = at::arange(6, at::kLong).view({1, 6});
  // Linear scaling by 2 at positions 2t is the plain model at positions t.
  EXPECT_LT(maxAbsDiff(linear->forward(ids, {}, nullptr, pos * 2),
                       plain->forward(ids, {}, nullptr, pos)),
            1e-5);
  // llama3 scaling with factor 1 changes nothing; a large factor changes
  // the low frequencies and so the logits at distant positions.
  ModelConfig l3 = c;
  l3.ropeScaling.type = "llama3";
  l3.ropeScaling.originalMaxPositionEmbeddings = 16;
  TransformerLM same = tinyModel(l3, 15);
  EXPECT_LT(maxAbsDiff(same->forward(ids, {}, nullptr, pos * 40),
                       plain->forward(ids, {}, nullptr, pos * 40)),
            1e-5);
  l3.ropeScaling.factor = 8.0;
  TransformerLM scaled = tinyModel(l3, 15);
  EXPECT_GT(maxAbsDiff(scaled->forward(ids, {}, nullptr, pos * 40),
                       plain->forward(ids, {}, nullptr, pos * 40)),
            1e-4);
}

TEST(Transformer, CacheSelectForksRows) {
  TransformerLM m = tinyModel(tinyConfig(), 17);
  torch::NoGradGuard noGrad;
  std::vector<int64_t> a = randomIds(9, 32, 18), b = randomIds(9, 32, 19);
  KVCache cache;
  m->forward(ids2d({{a.begin(), a.begin() + 5}, {b.begin(), b.begin() + 5}}),
             {}, &cache);
  // Rows: b, b, a; the two copies of b continue differently.
  KVCache forked = cache.select({1, 1, 0});
  EXPECT_EQ(forked.batchSize(), 3);
  EXPECT_EQ(cache.batchSize(), 2) << "select must not modify the source";
  std::vector<int64_t> b2 = b;
  b2[5] = (b[5] + 3) % 32;
  at::Tensor out = m->forward(ids2d({{b[5]}, {b2[5]}, {a[5]}}), {}, &forked);
  EXPECT_LT(maxAbsDiff(out[0][0], m->forward(ids2d({b}))[0][5]), 1e-5);
  EXPECT_LT(maxAbsDiff(out[1][0], m->forward(ids2d({b2}))[0][5]), 1e-5);
  EXPECT_LT(maxAbsDiff(out[2][0], m->forward(ids2d({a}))[0][5]), 1e-5);
  // The source cache still continues as before.
  at::Tensor again = m->forward(ids2d({{a[5]}, {b[5]}}), {}, &cache);
  EXPECT_LT(maxAbsDiff(again[0][0], out[2][0]), 1e-5);
  EXPECT_ERROR([&] { cache.select({2}); }, {"out of range"});
}

TEST(Transformer, CacheSelectPrefixForksAtAnEarlierPosition) {
  TransformerLM m = tinyModel(tinyConfig(), 21);
  torch::NoGradGuard noGrad;
  std::vector<int64_t> a = randomIds(10, 32, 22), b = randomIds(10, 32, 23);
  const int64_t P = 5;
  // Row 0 is a (8 tokens) left-padded by 2; row 1 is b (10 tokens).
  KVCache cache;
  std::vector<int64_t> aPadded = {P, P};
  aPadded.insert(aPadded.end(), a.begin(), a.begin() + 8);
  m->forward(ids2d({aPadded, {b.begin(), b.begin() + 10}}),
             mask2d({{0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                     {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}),
             &cache);
  // Keep 3 tokens of a, 6 of b, and 8 of b; continue with new tokens.
  KVCache fork = cache.selectPrefix({0, 1, 1}, {3, 6, 10});
  EXPECT_EQ(toLongs(fork.nextPositions()),
            (std::vector<int64_t>{3, 6, 10}));
  std::vector<int64_t> next = {11, 12, 13};
  at::Tensor out = m->forward(ids2d({{next[0]}, {next[1]}, {next[2]}}), {},
                              &fork);
  auto expected = [&](const std::vector<int64_t> &src, size_t keep,
                      int64_t tok) {
    std::vector<int64_t> seq(src.begin(), src.begin() + keep);
    seq.push_back(tok);
    return m->forward(ids2d({seq}))[0][keep];
  };
  EXPECT_LT(maxAbsDiff(out[0][0], expected(a, 3, next[0])), 1e-5);
  EXPECT_LT(maxAbsDiff(out[1][0], expected(b, 6, next[1])), 1e-5);
  EXPECT_LT(maxAbsDiff(out[2][0], expected(b, 10, next[2])), 1e-5);
  // A prefix that drops everything after slot 4 shortens the cache.
  KVCache shortFork = cache.selectPrefix({1}, {4});
  EXPECT_EQ(shortFork.length(), 4);
  EXPECT_ERROR([&] { cache.selectPrefix({0}, {9}); },
               {"cannot keep 9", "holds 8"});
  EXPECT_ERROR([&] { cache.selectPrefix({0, 1}, {1}); }, {"prefix lengths"});
}

TEST(Transformer, ForksShareTheStorageOfTheirPrefix) {
  TransformerLM m = tinyModel(tinyConfig(), 27);
  torch::NoGradGuard noGrad;
  std::vector<int64_t> a = randomIds(7, 32, 28), b = randomIds(7, 32, 29);
  KVCache cache;
  // Row 0 is a (6 tokens), row 1 is b (4 tokens, right-padded).
  m->forward(
      ids2d({{a.begin(), a.begin() + 6}, {b[0], b[1], b[2], b[3], 0, 0}}),
      mask2d({{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0}}), &cache);
  // Each real token stored once: padding takes no storage.
  EXPECT_EQ(cache.storedTokens(), 10);
  const ModelConfig c = tinyConfig();
  EXPECT_EQ(cache.bytesPerToken(),
            2 * c.numHiddenLayers * c.numKeyValueHeads * c.headDimension() * 4);
  int64_t allocated = cache.memoryBytes(), grown = 0;
  {
    // Five forks of a and one of b hold no new storage until they write.
    KVCache forks = cache.select({0, 0, 0, 0, 0, 1});
    EXPECT_EQ(forks.storedTokens(), 10);
    EXPECT_EQ(forks.memoryBytes(), allocated);
    at::Tensor out =
        m->forward(ids2d({{a[6]}, {a[6]}, {1}, {2}, {3}, {b[4]}}), {}, &forks);
    EXPECT_EQ(forks.storedTokens(), 16);
    EXPECT_LT(maxAbsDiff(out[0][0], m->forward(ids2d({a}))[0][6]), 1e-5);
    EXPECT_LT(maxAbsDiff(out[1][0], out[0][0]), 1e-6);
    std::vector<int64_t> b5(b.begin(), b.begin() + 5);
    EXPECT_LT(maxAbsDiff(out[5][0], m->forward(ids2d({b5}))[0][4]), 1e-5);
    // A copy shares everything; the gathered keys are the source's.
    KVCache copy = forks;
    EXPECT_EQ(copy.storedTokens(), 16);
    EXPECT_TRUE(at::equal(copy.keys(1), forks.keys(1)));
    EXPECT_TRUE(at::equal(forks.keys(0)[0].narrow(1, 0, 6), cache.keys(0)[0]));
    grown = forks.memoryBytes();
  }
  // The forks' own tokens are released with them; the storage is reused.
  EXPECT_EQ(cache.storedTokens(), 10);
  EXPECT_EQ(cache.peakStoredTokens(), 16);
  {
    KVCache prefix = cache.selectPrefix({0}, {2});
    EXPECT_EQ(prefix.storedTokens(), 10);
    m->forward(ids2d({{5}}), {}, &prefix);
    EXPECT_EQ(prefix.storedTokens(), 11);
    EXPECT_EQ(prefix.memoryBytes(), grown)
        << "freed slots are taken again before the storage grows";
  }
  EXPECT_EQ(cache.storedTokens(), 10);
}

TEST(Transformer, RejectsBadInputs) {
  TransformerLM m = tinyModel(tinyConfig(), 25);
  torch::NoGradGuard noGrad;
  EXPECT_ERROR([&] { m->forward(ids2d({{1, 2, 32}})); },
               {"token id out of range", "32"});
  EXPECT_ERROR([&] { m->forward(ids2d({{1, -1}})); }, {"out of range"});
  EXPECT_ERROR([&] { m->forward(at::zeros({3}, at::kLong)); }, {"[B, T]"});
  EXPECT_ERROR([&] { m->forward(ids2d({{1, 2}}), mask2d({{1, 1, 1}})); },
               {"attention mask", "does not match"});
  KVCache cache;
  m->forward(ids2d({{1, 2}}), {}, &cache);
  EXPECT_ERROR([&] { m->forward(ids2d({{1}, {2}}), {}, &cache); },
               {"KV cache holds 1 rows"});
  EXPECT_ERROR([&] { KVCache().select({0}); }, {"empty cache"});
  ModelConfig bad = tinyConfig();
  bad.numKeyValueHeads = 3;
  EXPECT_ERROR([&] { TransformerLM x(bad); }, {"not divisible"});
}

TEST(Transformer, TokenLogProbsAndValueHead) {
  TransformerLM m = tinyModel(tinyConfig(), 27, /*valueHead=*/true);
  EXPECT_TRUE(m->hasValueHead());
  at::Tensor ids = ids2d({randomIds(6, 32, 28), randomIds(6, 32, 29)});
  at::Tensor hidden = m->forwardHidden(ids);
  at::Tensor logits = m->lmHead(hidden);
  at::Tensor lp = tokenLogProbs(logits, ids, 0.7);
  EXPECT_EQ(lp.sizes(), (std::vector<int64_t>{2, 5}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t) {
      at::Tensor ref = at::log_softmax(logits[b][t].to(at::kDouble) / 0.7, -1);
      EXPECT_NEAR(lp[b][t].item<double>(),
                  ref[ids[b][t + 1].item<int64_t>()].item<double>(), 1e-5);
    }
  at::Tensor values = m->valueHead(hidden);
  EXPECT_EQ(values.sizes(), (std::vector<int64_t>{2, 6}));

  // Gradients reach every parameter.
  (lp.sum() + values.sum()).backward();
  for (const auto &p : m->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
  TransformerLM plain = tinyModel(tinyConfig(), 27);
  EXPECT_FALSE(plain->hasValueHead());
  EXPECT_ERROR([&] { plain->valueHead(hidden); }, {"no value head"});
  plain->addValueHead();
  EXPECT_TRUE(plain->hasValueHead());
  EXPECT_EQ(plain->valueHead(hidden).sizes(), values.sizes());
}
