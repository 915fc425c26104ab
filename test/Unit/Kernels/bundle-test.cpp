//===- bundle-test.cpp - Loading bundles and running them on the CPU ------===//

#include "cac/Runtime/Kernels/Bundle.h"
#include "test-bundles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <thread>

using namespace cac::rt;
using namespace cac::rt::test;
using nlohmann::json;

namespace {

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const BundleError &e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part)                                            \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                   \
      << "'" << (text) << "' does not contain '" << (part) << "'"

/// ret[t] = sum_{j >= t} gamma^(j-t) x[j] + gamma^(L-t) bonus, per sequence,
/// with torch ops in double; returns {ret, total}.
std::pair<at::Tensor, at::Tensor> discReference(const at::Tensor &x,
                                                const at::Tensor &bonus,
                                                const PackedBatch &batch,
                                                double gamma) {
  std::vector<at::Tensor> rets;
  std::vector<at::Tensor> totals;
  std::vector<at::Tensor> rows = batch.split(x.to(at::kDouble));
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t len = rows[b].size(0);
    at::Tensor bb = bonus.to(at::kDouble)[b];
    if (len == 0) {
      totals.push_back(bb);
      rets.push_back(rows[b]);
      continue;
    }
    at::Tensor powers = at::pow(at::full({len}, gamma, at::kDouble),
                                at::arange(len, at::kDouble));
    at::Tensor weighted = rows[b] * powers;
    at::Tensor tail = weighted.flip(0).cumsum(0).flip(0) / powers;
    at::Tensor ret = tail + bb * at::pow(at::full({len}, gamma, at::kDouble),
                                         at::arange(len, 0, -1, at::kDouble));
    rets.push_back(ret);
    totals.push_back(ret[0]);
  }
  return {at::cat(rets), at::stack(totals)};
}

PackedBatch randomBatch(int64_t seqs, int64_t maxLen, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor lengths = at::randint(0, maxLen + 1, {seqs}, at::kLong);
  return PackedBatch::fromLengths(lengths);
}

TEST(Bundle, LoadsManifestAndHostSo) {
  TempBundle tb(discManifest());
  auto bundle = Bundle::load(tb.dir());
  EXPECT_TRUE(bundle->hasCpu());
  EXPECT_FALSE(bundle->hasCuda());
  EXPECT_EQ(bundle->manifest().estimator, "disc");
  EXPECT_EQ(bundle->directory(), tb.dir());
  BundleEstimator est(bundle);
  EXPECT_EQ(est.inputNames(), (std::vector<std::string>{"x", "bonus"}));
  EXPECT_EQ(est.outputNames(),
            (std::vector<std::string>{"ret", "total", "_seg_start"}));
  EXPECT_EQ(est.paramNames(), (std::vector<std::string>{"gamma"}));
  EXPECT_CONTAINS(errorOf([&] { bundle->cuda(); }), "has no kernels.ptx");
}

TEST(Bundle, DiscMatchesTorch) {
  TempBundle tb(discManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = randomBatch(9, 12, 1);
  at::Tensor x = at::randn({batch.numTokens()});
  at::Tensor bonus = at::randn({batch.numSeqs()});
  TensorMap out =
      est.run({{"x", x}, {"bonus", bonus}}, batch, {{"gamma", 0.9}});
  ASSERT_EQ(out.size(), 3u);
  auto [ret, total] = discReference(x, bonus, batch, 0.9);
  EXPECT_EQ(out["ret"].scalar_type(), at::kFloat);
  EXPECT_EQ(out["ret"].sizes(), x.sizes());
  EXPECT_TRUE(at::allclose(out["ret"].to(at::kDouble), ret, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(out["total"].to(at::kDouble), total, 1e-5, 1e-5));
  // _seg_start is an int32 token output: 1 at each sequence's first token.
  at::Tensor seg = out["_seg_start"];
  EXPECT_EQ(seg.scalar_type(), at::kInt);
  at::Tensor expected = at::zeros({batch.numTokens()}, at::kInt);
  at::Tensor off = batch.seqOffsets();
  for (int64_t b = 0; b < batch.numSeqs(); ++b)
    if (off[b].item<int>() < off[b + 1].item<int>())
      expected[off[b].item<int>()] = 1;
  EXPECT_TRUE(seg.equal(expected));
}

TEST(Bundle, DefaultParameterApplies) {
  TempBundle tb(discManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{3, 2});
  at::Tensor x = at::tensor({1.f, 2.f, 3.f, 4.f, 5.f});
  at::Tensor bonus = at::tensor({10.f, 20.f});
  TensorMap out = est.run({{"x", x}, {"bonus", bonus}}, batch);
  // gamma = 1: reverse cumulative sums plus the bonus.
  EXPECT_TRUE(out["ret"].equal(at::tensor({16.f, 15.f, 13.f, 29.f, 25.f})));
  EXPECT_TRUE(out["total"].equal(at::tensor({16.f, 29.f})));
}

TEST(Bundle, DoublePrecisionBundle) {
  TempBundle tb(discManifest("f64"));
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = randomBatch(6, 20, 2);
  at::Tensor x = at::randn({batch.numTokens()}, at::kDouble);
  at::Tensor bonus = at::randn({batch.numSeqs()}, at::kDouble);
  TensorMap out =
      est.run({{"x", x}, {"bonus", bonus}}, batch, {{"gamma", 0.97}});
  auto [ret, total] = discReference(x, bonus, batch, 0.97);
  EXPECT_EQ(out["ret"].scalar_type(), at::kDouble);
  EXPECT_TRUE(at::allclose(out["ret"], ret, 1e-10, 1e-10));
  EXPECT_TRUE(at::allclose(out["total"], total, 1e-10, 1e-10));
}

TEST(Bundle, RunsWithoutArgsInManifest) {
  json m = discManifest();
  m.erase("args");
  TempBundle tb(m);
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{2});
  TensorMap out = est.run(
      {{"x", at::tensor({1.f, 1.f})}, {"bonus", at::tensor({1.f})}}, batch);
  EXPECT_TRUE(out["ret"].equal(at::tensor({3.f, 2.f})));
}

TEST(Bundle, PaddedAndConvertedInputs) {
  TempBundle tb(discManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  // Left-padded rows; double inputs for an f32 bundle.
  at::Tensor mask =
      at::tensor({0, 1, 1, 1, 1, 1}, at::kInt).reshape({2, 3}).to(at::kBool);
  PackedBatch batch = PackedBatch::fromMask(mask);
  at::Tensor xPadded =
      at::tensor({9.0, 1.0, 2.0, 3.0, 4.0, 5.0}, at::kDouble).reshape({2, 3});
  TensorMap out = est.run(
      {{"x", xPadded}, {"bonus", at::tensor({0.0, 0.0}, at::kDouble)}}, batch);
  EXPECT_TRUE(out["ret"].equal(at::tensor({3.f, 2.f, 12.f, 9.f, 5.f})));
  at::Tensor back = batch.unpack(out["ret"]);
  EXPECT_TRUE(
      back.equal(at::tensor({0.f, 3.f, 2.f, 12.f, 9.f, 5.f}).reshape({2, 3})));
}

TEST(Bundle, GroupMeanMatchesTorch) {
  TempBundle tb(gmeanManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(at::ones({7}, at::kLong));
  at::Tensor ids = at::tensor({100, 5, 100, 5, 77, 100, 5}, at::kLong);
  batch.setGroups(ids);
  at::Tensor reward = at::randn({7});
  TensorMap out = est.run({{"reward", reward}}, batch, {{"scale", 2.0}});
  EXPECT_EQ(out.count("_mean"), 0u);

  at::Tensor dense = batch.seqGroup().to(at::kLong);
  at::Tensor sums = at::zeros({3}).index_add_(0, dense, reward);
  at::Tensor counts = at::zeros({3}).index_add_(0, dense, at::ones({7}));
  at::Tensor mean = sums / counts;
  EXPECT_TRUE(out["gsize"].equal(at::tensor({3.f, 1.f, 3.f}))); // 5, 77, 100
  EXPECT_TRUE(at::allclose(out["adv"], 2.0 * (reward - mean.index({dense})),
                           1e-5, 1e-6));

  RunOptions keep;
  keep.returnScratch = true;
  out = est.run({{"reward", reward}}, batch, {{"scale", 1.0}}, keep);
  ASSERT_EQ(out.count("_mean"), 1u);
  EXPECT_TRUE(at::allclose(out["_mean"], mean, 1e-6, 1e-6));
}

/// adv = scale * (reward - group mean) on the CPU, for `ids` per sequence.
at::Tensor groupMeanReference(const at::Tensor &reward, const PackedBatch &b) {
  at::Tensor dense = b.seqGroup().to(at::kLong);
  const int64_t groups = b.numGroups();
  at::Tensor sums = at::zeros({groups}).index_add_(0, dense, reward);
  at::Tensor counts =
      at::zeros({groups}).index_add_(0, dense, at::ones_like(reward));
  return reward - (sums / counts).index({dense});
}

TEST(Bundle, KeptScratchServesLaterCalls) {
  TempBundle tb(gmeanManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  EXPECT_EQ(est.keptScratchBytes(), 0);
  auto runOn = [&](int64_t seqs, int64_t groups, const RunOptions &o) {
    PackedBatch b = PackedBatch::fromLengths(at::ones({seqs}, at::kLong));
    b.setGroups(at::arange(seqs, at::kLong).remainder(groups));
    at::Tensor reward = at::randn({seqs});
    TensorMap out = est.run({{"reward", reward}}, b, {{"scale", 1.0}}, o);
    EXPECT_TRUE(
        at::allclose(out["adv"], groupMeanReference(reward, b), 1e-5, 1e-6))
        << seqs << " sequences in " << groups << " groups";
  };
  RunOptions keep;
  runOn(7, 3, keep); // the group means' scratch: 3 floats
  EXPECT_EQ(est.keptScratchBytes(), 12);
  runOn(40, 5, keep); // a larger batch replaces it
  EXPECT_EQ(est.keptScratchBytes(), 20);
  runOn(4, 1, keep); // a smaller one uses its front
  EXPECT_EQ(est.keptScratchBytes(), 20);
  keep.fillOutputs = std::nan("");
  runOn(9, 4, keep); // filled like fresh scratch, then written
  EXPECT_EQ(est.keptScratchBytes(), 20);

  // Copies share the buffers; calls at once each get scratch of their own.
  BundleEstimator copy = est;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        runOn(8 + t * 16 + i, 2 + t, {});
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_GE(copy.keptScratchBytes(), 20);

  copy.releaseScratch();
  EXPECT_EQ(est.keptScratchBytes(), 0);
  RunOptions fresh;
  fresh.keepScratch = false;
  runOn(7, 3, fresh);
  EXPECT_EQ(est.keptScratchBytes(), 0);
}

TEST(Bundle, OneGroupWithoutIds) {
  TempBundle tb(gmeanManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{1, 2, 3});
  TensorMap out = est.run({{"reward", at::tensor({1.f, 2.f, 6.f})}}, batch,
                          {{"scale", 1.0}});
  EXPECT_TRUE(out["adv"].equal(at::tensor({-2.f, -1.f, 3.f})));
  EXPECT_TRUE(out["gsize"].equal(at::tensor({3.f})));
}

TEST(Bundle, TreeKernelsSeeNodes) {
  TempBundle tb(treeManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  // Node 0 is a shared prefix; 1 and 2 its children; 3 a child of 1.
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{4, 3});
  at::Tensor parent = at::tensor({-1, 0, 0, 1}, at::kLong);
  at::Tensor tokenNode = at::tensor({0, 0, 1, 3, 0, 0, 2}, at::kLong);
  batch.setTree(parent, tokenNode);
  at::Tensor w = at::randn({7});
  TensorMap out = est.run({{"w", w}}, batch);
  at::Tensor nsum = at::zeros({4}).index_add_(0, tokenNode, w);
  at::Tensor depth = at::tensor({0.f, 1.f, 1.f, 2.f});
  EXPECT_TRUE(at::allclose(out["nsum"], nsum, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(out["tdepth"], depth.index({tokenNode}) + w));

  PackedBatch noTree = PackedBatch::fromLengths(std::vector<int64_t>{4, 3});
  EXPECT_CONTAINS(errorOf([&] {
                    est.run({{"w", w}}, noTree);
                  }),
                  "bundle 'tree' needs a rollout tree");
}

TEST(Bundle, ThreadedRunIsBitwiseEqual) {
  TempBundle tb(discManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = randomBatch(3000, 40, 3);
  at::Tensor x = at::randn({batch.numTokens()});
  at::Tensor bonus = at::randn({batch.numSeqs()});
  RunOptions one, many;
  one.numThreads = 1;
  many.numThreads = 4;
  TensorMap a = est.run({{"x", x}, {"bonus", bonus}}, batch, {}, one);
  TensorMap b = est.run({{"x", x}, {"bonus", bonus}}, batch, {}, many);
  RunOptions automatic;
  automatic.minTokensPerThread = 1000;
  TensorMap c = est.run({{"x", x}, {"bonus", bonus}}, batch, {}, automatic);
  for (const char *name : {"ret", "total", "_seg_start"}) {
    EXPECT_TRUE(a[name].equal(b[name])) << name;
    EXPECT_TRUE(a[name].equal(c[name])) << name;
  }
}

TEST(Bundle, EmptyBatch) {
  TempBundle tb(gmeanManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch;
  TensorMap out =
      est.run({{"reward", at::zeros({0})}}, batch, {{"scale", 1.0}});
  EXPECT_EQ(out["adv"].numel(), 0);
  EXPECT_EQ(out["gsize"].numel(), 0);
}

TEST(Bundle, InputErrorsNameTheInput) {
  TempBundle tb(discManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{3, 2});
  at::Tensor x = at::zeros({5}), bonus = at::zeros({2});

  EXPECT_EQ(errorOf([&] {
              est.run({{"x", x}}, batch);
            }),
            "bundle 'disc': missing input 'bonus' (seq, f32, [B] = [2])");
  EXPECT_EQ(errorOf([&] {
              est.run({{"x", at::zeros({6})}, {"bonus", bonus}}, batch);
            }),
            "bundle 'disc': input 'x' (token): expected [N] = [5] (packed) or "
            "[B, T] padded, got shape [6]");
  EXPECT_EQ(errorOf([&] {
              est.run({{"x", x}, {"bonus", at::zeros({3})}}, batch);
            }),
            "bundle 'disc': input 'bonus' (seq): expected [B] = [2], got "
            "shape [3]");
  EXPECT_EQ(errorOf([&] {
              est.run({{"x", x}, {"bonus", bonus}, {"y", x}}, batch);
            }),
            "bundle 'disc': unknown input 'y' (inputs: x, bonus)");
  EXPECT_EQ(errorOf([&] {
              est.run({{"x", x}, {"bonus", bonus}, {"ret", x}}, batch);
            }),
            "bundle 'disc': unknown input 'ret' (inputs: x, bonus)");
  EXPECT_EQ(errorOf([&] {
              est.run({{"x", x}, {"bonus", bonus}}, batch, {{"gama", 0.9}});
            }),
            "bundle 'disc': unknown parameter 'gama' (parameters: gamma)");
  RunOptions lax;
  lax.allowExtra = true;
  EXPECT_EQ(errorOf([&] {
              est.run({{"x", x}, {"bonus", bonus}, {"y", x}}, batch,
                      {{"gama", 0.9}}, lax);
            }),
            "");
}

TEST(Bundle, MissingRequiredParameter) {
  TempBundle tb(gmeanManifest());
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{1});
  EXPECT_EQ(errorOf([&] {
              est.run({{"reward", at::zeros({1})}}, batch);
            }),
            "bundle 'gmean': missing required parameter 'scale' (it has no "
            "default)");
}

TEST(Bundle, MissingKernelSymbol) {
  json m = discManifest();
  m["kernels"][0]["name"] = "disc_k9";
  TempBundle tb(m);
  EXPECT_CONTAINS(errorOf([&] { Bundle::load(tb.dir()); }),
                  tb.dir() + "/host.so: kernel 'disc_k9' of the manifest is "
                             "not exported");
}

TEST(Bundle, BadManifestNamesTheFile) {
  json m = discManifest();
  m["buffers"][0]["domain"] = "tokens";
  TempBundle tb(m);
  EXPECT_EQ(errorOf([&] { Bundle::load(tb.dir()); }),
            tb.dir() + "/manifest.json: buffers[0].domain: unknown domain "
                       "'tokens' (expected token, seg, seq, group, node or "
                       "batch)");
  TempBundle broken(std::string("{ not json"));
  EXPECT_CONTAINS(errorOf([&] { Bundle::load(broken.dir()); }),
                  broken.dir() + "/manifest.json: not valid JSON");
  EXPECT_EQ(errorOf([] { Bundle::load("/nonexistent-bundle"); }),
            "/nonexistent-bundle/manifest.json: cannot open the manifest");
}

TEST(Bundle, NeedsAModule) {
  TempBundle none(discManifest(), /*host=*/false);
  EXPECT_EQ(errorOf([&] { Bundle::load(none.dir()); }),
            none.dir() + ": the bundle has neither host.so nor kernels.ptx");
  if (ptxPath().empty())
    GTEST_SKIP() << "no test PTX (nvcc not found)";
  TempBundle ptxOnly(discManifest(), /*host=*/false, /*ptx=*/true);
  BundleEstimator est = BundleEstimator::load(ptxOnly.dir());
  EXPECT_TRUE(est.bundle().hasCuda());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{1});
  EXPECT_CONTAINS(
      errorOf([&] {
        est.run({{"x", at::zeros({1})}, {"bonus", at::zeros({1})}}, batch);
      }),
      "bundle 'disc' has no host.so (compile it with --target cpu or all)");
}

} // namespace
