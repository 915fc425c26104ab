//===- stdlib-bundle-test.cpp - Bundles the compiler emits ----------------===//
//
// Runs the stdlib estimators as compiled by `cac compile --bundle` through
// BundleEstimator: gae and grpo against LibTorch computations of
// estimators.md's formulas (the contract of docs/bundle.md seen from both
// sides), and every method on a random batch with empty sequences, groups and
// a tree (finite outputs on the CPU; on a GPU, CUDA equal to the CPU), and
// that each manifest is the text the ABI's writer gives for it. Skips
// when no compiled bundles are at hand.
//
//===----------------------------------------------------------------------===//

#include "cac/Abi/ManifestReader.h"
#include "cac/Abi/ManifestWriter.h"
#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Kernels/CudaDriver.h"
#include "test-bundles.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

class StdlibBundle : public ::testing::Test {
protected:
  void SetUp() override {
    if (stdlibBundlesPath().empty())
      GTEST_SKIP() << "no compiled stdlib bundles (build with the compiler or "
                      "set CAC_TEST_STDLIB_BUNDLES)";
  }
  BundleEstimator load(const std::string &name) {
    std::string dir = stdlibBundlesPath() + "/" + name;
    struct stat st;
    if (::stat((dir + "/manifest.json").c_str(), &st) != 0) {
      std::ifstream err(dir + "/compile-error.txt");
      std::stringstream ss;
      ss << err.rdbuf();
      ADD_FAILURE() << "no compiled bundle in " << dir << "\n" << ss.str();
      throw std::runtime_error("no bundle " + dir);
    }
    return BundleEstimator::load(dir);
  }
};

/// The bundles of every stdlib method that was compiled.
std::vector<std::string> stdlibMethods() {
  std::vector<std::string> names;
  for (const auto &entry :
       std::filesystem::directory_iterator(stdlibBundlesPath()))
    if (entry.is_directory())
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// A random batch for any bundle: lengths 0..maxLen (empty sequences too),
/// groups of 8, and per group a tree whose root owns each member's first
/// half and one leaf per member the rest. Inputs are plausible values for
/// their names (log-probabilities <= 0, 0/1 rewards and newlines, values in
/// (0, 1)), one slot per token for seg inputs.
struct RandomBatch {
  PackedBatch batch;
  TensorMap inputs;
};

RandomBatch randomBatch(const Manifest &m, int64_t B, int64_t maxLen,
                        uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor lengths = at::randint(0, maxLen + 1, {B}, at::kLong);
  RandomBatch r{PackedBatch::fromLengths(lengths), {}};
  r.batch.setGroups(at::arange(B, at::kLong).div(8, "floor"));
  int64_t G = (B + 7) / 8;
  at::Tensor parent = at::cat({at::full({G}, -1, at::kLong),
                               at::arange(B, at::kLong).div(8, "floor")});
  at::Tensor seq = r.batch.tokenSeq().to(at::kLong);
  at::Tensor pos =
      at::arange(r.batch.numTokens(), at::kLong) -
      r.batch.seqOffsets().to(at::kLong).index_select(0, seq);
  at::Tensor half = lengths.index_select(0, seq).div(2, "floor");
  at::Tensor node = at::where(pos < half, seq.div(8, "floor"), G + seq);
  r.batch.setTree(parent, node);
  for (const BufferSpec &b : m.buffers) {
    if (b.role != BufferRole::Input)
      continue;
    bool perToken = b.domain == Domain::Token || b.domain == Domain::Seg;
    int64_t n = perToken ? r.batch.numTokens() : r.batch.numSeqs();
    at::Tensor u = at::rand({n});
    if (b.name == "logp")
      r.inputs[b.name] = at::log(0.05 + 0.95 * u);
    else if (b.name == "reward" || b.name == "newline")
      r.inputs[b.name] = (u < 0.4).to(at::kFloat);
    else
      r.inputs[b.name] = 0.05 + 0.9 * u;
  }
  return r;
}

ParamMap requiredParams(const Manifest &m) {
  ParamMap p;
  for (const ParamSpec &s : m.params)
    if (!s.defaultValue)
      p[s.name] = 0.9;
  return p;
}

/// estimators.md §1.1: delta_t = r_t + gamma V_{t+1} - V_t with R on the last
/// token and V after it 0; A_t = delta_t + gamma lambda A_{t+1}; ret = A + V.
std::pair<at::Tensor, at::Tensor> gaeReference(const at::Tensor &value,
                                               const at::Tensor &reward,
                                               const PackedBatch &batch,
                                               double gamma, double lambda) {
  std::vector<at::Tensor> advs;
  std::vector<at::Tensor> rows = batch.split(value.to(at::kDouble));
  for (size_t b = 0; b < rows.size(); ++b) {
    const at::Tensor &v = rows[b];
    const int64_t len = v.size(0);
    at::Tensor nextV = at::cat({v.slice(0, 1), at::zeros({1}, v.options())});
    at::Tensor r = at::zeros({len}, v.options());
    if (len > 0)
      r[len - 1] = reward[b].item<double>();
    at::Tensor delta = r + gamma * nextV.slice(0, 0, len) - v;
    at::Tensor adv = at::zeros({len}, v.options());
    double acc = 0.0;
    for (int64_t t = len - 1; t >= 0; --t) {
      acc = delta[t].item<double>() + gamma * lambda * acc;
      adv[t] = acc;
    }
    advs.push_back(adv);
  }
  at::Tensor adv = at::cat(advs);
  return {adv, adv + value.to(at::kDouble)};
}

TEST_F(StdlibBundle, GaeMatchesTorch) {
  BundleEstimator gae = load("gae");
  EXPECT_EQ(gae.inputNames(), (std::vector<std::string>{"value", "reward"}));
  at::manual_seed(11);
  PackedBatch batch =
      PackedBatch::fromLengths(at::randint(0, 30, {64}, at::kLong));
  at::Tensor value = at::randn({batch.numTokens()});
  at::Tensor reward = at::randint(0, 2, {batch.numSeqs()}).to(at::kFloat);
  for (auto [gamma, lambda] : {std::pair{1.0, 0.95}, std::pair{0.9, 0.5}}) {
    TensorMap out = gae.run({{"value", value}, {"reward", reward}}, batch,
                            {{"gamma", gamma}, {"lambda", lambda}});
    auto [adv, ret] = gaeReference(value, reward, batch, gamma, lambda);
    EXPECT_TRUE(at::allclose(out.at("adv").to(at::kDouble), adv, 1e-4, 1e-5));
    EXPECT_TRUE(at::allclose(out.at("ret").to(at::kDouble), ret, 1e-4, 1e-5));
  }
  // Defaults (gamma 1, lambda 0.95) apply when no parameter is given.
  TensorMap out = gae.run({{"value", value}, {"reward", reward}}, batch);
  auto [adv, ret] = gaeReference(value, reward, batch, 1.0, 0.95);
  EXPECT_TRUE(at::allclose(out.at("adv").to(at::kDouble), adv, 1e-4, 1e-5));
}

TEST_F(StdlibBundle, GrpoMatchesTorch) {
  BundleEstimator grpo = load("grpo");
  at::manual_seed(12);
  const int64_t groups = 16, perGroup = 4, seqs = groups * perGroup;
  PackedBatch batch =
      PackedBatch::fromLengths(at::randint(1, 20, {seqs}, at::kLong));
  at::Tensor ids = at::randperm(seqs, at::kLong).remainder(groups) * 7 + 3;
  batch.setGroups(ids);
  at::Tensor reward = at::rand({seqs});
  for (int unbiased : {0, 1}) {
    TensorMap out = grpo.run({{"reward", reward}}, batch,
                             {{"unbiased", double(unbiased)}, {"eps", 1e-6}});
    at::Tensor dense = batch.seqGroup().to(at::kLong);
    at::Tensor advSeq = at::empty({seqs}, at::kDouble);
    at::Tensor r = reward.to(at::kDouble);
    for (int64_t g = 0; g < groups; ++g) {
      at::Tensor members = dense.eq(g);
      at::Tensor rg = r.masked_select(members);
      at::Tensor scaled =
          (rg - rg.mean()) / (rg.std(/*unbiased=*/unbiased != 0) + 1e-6);
      advSeq.masked_scatter_(members, scaled);
    }
    at::Tensor expected = advSeq.index({batch.tokenSeq()});
    EXPECT_TRUE(
        at::allclose(out.at("adv").to(at::kDouble), expected, 1e-4, 1e-4))
        << "unbiased=" << unbiased;
  }
}

TEST_F(StdlibBundle, EveryMethodRunsOnRandomBatches) {
  std::vector<std::string> methods = stdlibMethods();
  EXPECT_GE(methods.size(), 2u);
  for (const std::string &name : methods) {
    BundleEstimator est = load(name);
    for (uint64_t seed : {1, 2}) {
      RandomBatch r = randomBatch(est.manifest(), 37, 200, seed);
      TensorMap out = est.run(r.inputs, r.batch, requiredParams(est.manifest()));
      for (const BufferSpec &b : est.manifest().buffers) {
        if (b.role != BufferRole::Output)
          continue;
        ASSERT_TRUE(out.count(b.name)) << name << ": " << b.name;
        EXPECT_TRUE(out.at(b.name).isfinite().all().item<bool>())
            << name << ": " << b.name << " (seed " << seed << ")";
      }
    }
  }
}

/// The manifest the compiler wrote is the one the ABI's writer writes for
/// what its reader reads, byte for byte: one format, whichever side writes.
TEST_F(StdlibBundle, EveryManifestIsWhatTheAbiWriterWrites) {
  for (const std::string &name : stdlibMethods()) {
    std::string path = stdlibBundlesPath() + "/" + name + "/manifest.json";
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    cac::abi::ManifestOrError read = cac::abi::readManifest(text, path);
    ASSERT_TRUE(read) << read.error;
    EXPECT_EQ(cac::abi::writeManifest(*read.manifest), text) << path;
  }
}

/// The runtime leaves outputs and scratch uninitialised (docs/bundle.md), so
/// every kernel must write every element of its outputs: with the buffers
/// filled with NaN first, no NaN may survive, and the outputs must equal
/// those of buffers filled with zeros (a kernel reading scratch it did not
/// write would differ too). Ragged batches with empty sequences, groups and
/// trees, on the CPU and, where there is one, the GPU.
TEST_F(StdlibBundle, EveryMethodWritesEveryOutputElement) {
  std::vector<at::Device> devices{at::kCPU};
  if (CudaDriver::get().available() && at::hasCUDA())
    devices.emplace_back(at::kCUDA, 0);
  for (const std::string &name : stdlibMethods()) {
    BundleEstimator est = load(name);
    for (uint64_t seed : {3, 4}) {
      RandomBatch r = randomBatch(est.manifest(), 45, 300, seed);
      ParamMap params = requiredParams(est.manifest());
      for (const at::Device &dev : devices) {
        TensorMap in;
        for (auto &[k, v] : r.inputs)
          in[k] = v.to(dev);
        RunOptions nan, zero;
        nan.fillOutputs = std::numeric_limits<double>::quiet_NaN();
        zero.fillOutputs = 0.0;
        nan.synchronize = zero.synchronize = true;
        TensorMap a = est.run(in, r.batch, params, nan);
        TensorMap b = est.run(in, r.batch, params, zero);
        for (const BufferSpec &bs : est.manifest().buffers) {
          if (bs.role != BufferRole::Output)
            continue;
          at::Tensor x = a.at(bs.name).cpu(), y = b.at(bs.name).cpu();
          EXPECT_FALSE(x.isnan().any().item<bool>())
              << name << ": " << bs.name << " has " << x.isnan().sum().item<int64_t>()
              << " unwritten elements on " << dev.str() << " (seed " << seed
              << ")";
          EXPECT_TRUE(at::equal(x.nan_to_num(0.0), y))
              << name << ": " << bs.name << " depends on the initial buffer "
              << "contents on " << dev.str() << " (seed " << seed << ")";
        }
      }
    }
  }
}

TEST_F(StdlibBundle, EveryMethodCudaMatchesCpu) {
  if (!CudaDriver::get().available())
    GTEST_SKIP() << CudaDriver::get().unavailableReason();
  if (!at::hasCUDA())
    GTEST_SKIP() << "LibTorch has no CUDA";
  at::Device gpu(at::kCUDA, 0);
  for (const std::string &name : stdlibMethods()) {
    BundleEstimator est = load(name);
    RandomBatch r = randomBatch(est.manifest(), 300, 700, 7);
    ParamMap params = requiredParams(est.manifest());
    TensorMap cpu = est.run(r.inputs, r.batch, params);
    TensorMap onGpu;
    for (auto &[k, v] : r.inputs)
      onGpu[k] = v.to(gpu);
    TensorMap cuda = est.run(onGpu, r.batch, params);
    for (auto &[k, v] : cpu)
      EXPECT_TRUE(at::allclose(cuda.at(k).cpu(), v, 1e-4, 1e-4))
          << name << ": " << k << " max |diff| "
          << (cuda.at(k).cpu() - v).abs().max().item<double>();
  }
}

TEST_F(StdlibBundle, CudaMatchesCpu) {
  if (!CudaDriver::get().available())
    GTEST_SKIP() << CudaDriver::get().unavailableReason();
  if (!at::hasCUDA())
    GTEST_SKIP() << "LibTorch has no CUDA";
  at::Device gpu(at::kCUDA, 0);
  at::manual_seed(13);
  PackedBatch batch =
      PackedBatch::fromLengths(at::randint(0, 300, {2000}, at::kLong));
  batch.setGroups(at::arange(2000, at::kLong).div(8, "floor"));
  at::Tensor value = at::randn({batch.numTokens()});
  at::Tensor reward = at::rand({batch.numSeqs()});

  BundleEstimator gae = load("gae");
  TensorMap cpu = gae.run({{"value", value}, {"reward", reward}}, batch);
  TensorMap cuda =
      gae.run({{"value", value.to(gpu)}, {"reward", reward.to(gpu)}}, batch);
  for (const char *name : {"adv", "ret"})
    EXPECT_TRUE(at::allclose(cuda.at(name).cpu(), cpu.at(name), 1e-4, 1e-4))
        << name;

  BundleEstimator grpo = load("grpo");
  cpu = grpo.run({{"reward", reward}}, batch);
  cuda = grpo.run({{"reward", reward.to(gpu)}}, batch);
  EXPECT_TRUE(at::allclose(cuda.at("adv").cpu(), cpu.at("adv"), 1e-4, 1e-4));
}

} // namespace
