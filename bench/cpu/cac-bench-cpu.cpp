//===- cac-bench-cpu.cpp - Compiled CPU kernels vs the eager backend ------===//
//
// cac-bench-cpu --stdlib DIR --bundles DIR [--methods a,b,..]
//               [--shapes 256x4096,64x1024] [--threads N] [--iters K]
//
// For each method and batch shape B x T (every sequence T tokens long, groups
// of 8 sequences, a two-level tree per group for tree estimators), measured in
// one run:
//   eager    the eager LibTorch backend (cac_eager) on the padded batch: the
//            reference, one tensor operation per dialect operation;
//   loop     the loop verl runs, for the methods verl has: gae and
//            gae_dense (compute_gae_advantage_return, a loop over t of
//            LibTorch column operations on token rewards), grpo and rloo (compute_grpo_outcome_advantage and
//            compute_rloo_outcome_advantage: per-sample loops that gather each
//            group's scores, then per-group statistics); here in C++, so
//            without Python's per-iteration overhead;
//   compiled the bundle's host.so through the runtime (BundleEstimator::run,
//            what cac-run calls), inputs already packed;
// their ratios, the bytes of inputs and outputs per token, the compiled
// kernels' throughput, and the machine's copy bandwidth measured by the same
// program. Prints a Markdown table (docs/benchmarks.md). A benchmark, not a
// test: it checks only that eager and compiled agree (max |diff| column).
//
//===----------------------------------------------------------------------===//

#include "cac/Driver/Driver.h"
#include "cac/Eager/Padded.h"
#include "cac/Eval/Batch.h"
#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Model/CpuKernels.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace cac::rt;

namespace {

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// Median wall time of `fn` in milliseconds over `iters` runs (after one
/// warm-up run).
double medianMs(int iters, const std::function<void()> &fn) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Copy bandwidth (bytes read + written per second) of a 256 MiB copy.
double copyBandwidth(int iters) {
  const int64_t n = int64_t(64) << 20; // floats
  at::Tensor a = at::rand({n}), b = at::empty({n});
  double ms = medianMs(iters, [&] { b.copy_(a); });
  return 2.0 * double(n) * 4.0 / (ms * 1e-3);
}

/// verl's compute_gae_advantage_return: a reverse loop over the token
/// columns of padded [B, T] tensors.
std::pair<at::Tensor, at::Tensor> verlGae(const at::Tensor &values,
                                          const at::Tensor &rewards,
                                          double gamma, double lam) {
  int64_t T = values.size(1);
  at::Tensor lastgaelam = at::zeros({values.size(0)});
  std::vector<at::Tensor> reversed;
  for (int64_t t = T - 1; t >= 0; --t) {
    at::Tensor nextvalues =
        t < T - 1 ? values.select(1, t + 1) : at::zeros({values.size(0)});
    at::Tensor delta =
        rewards.select(1, t) + gamma * nextvalues - values.select(1, t);
    lastgaelam = delta + gamma * lam * lastgaelam;
    reversed.push_back(lastgaelam);
  }
  std::reverse(reversed.begin(), reversed.end());
  at::Tensor adv = at::stack(reversed, 1);
  return {adv, adv + values};
}

/// Sums the [B, T] token rewards into per-sample scores and gathers them
/// by group id, as verl's outcome estimators do.
std::map<int64_t, std::vector<at::Tensor>>
verlGatherScores(const at::Tensor &scores, const at::Tensor &index) {
  std::map<int64_t, std::vector<at::Tensor>> id2score;
  for (int64_t i = 0; i < scores.size(0); ++i)
    id2score[index[i].item<int64_t>()].push_back(scores[i]);
  return id2score;
}

/// verl's compute_grpo_outcome_advantage, with the population std of cac's
/// default (verl's torch.std is the unbiased one: the same work).
at::Tensor verlGrpo(const at::Tensor &tokenRewards, const at::Tensor &mask,
                    const at::Tensor &index, double eps) {
  at::Tensor scores = tokenRewards.sum(-1);
  auto id2score = verlGatherScores(scores, index);
  std::map<int64_t, at::Tensor> id2mean, id2std;
  for (auto &[id, list] : id2score) {
    if (list.size() == 1) {
      id2mean[id] = at::tensor(0.0f);
      id2std[id] = at::tensor(1.0f);
    } else {
      at::Tensor s = at::stack(list);
      id2mean[id] = s.mean();
      id2std[id] = s.std(/*unbiased=*/false);
    }
  }
  for (int64_t i = 0; i < scores.size(0); ++i) {
    int64_t id = index[i].item<int64_t>();
    scores[i] = (scores[i] - id2mean[id]) / (id2std[id] + eps);
  }
  return scores.unsqueeze(-1) * mask;
}

/// verl's compute_rloo_outcome_advantage.
at::Tensor verlRloo(const at::Tensor &tokenRewards, const at::Tensor &mask,
                    const at::Tensor &index) {
  at::Tensor scores = tokenRewards.sum(-1);
  auto id2score = verlGatherScores(scores, index);
  std::map<int64_t, at::Tensor> id2mean;
  for (auto &[id, list] : id2score)
    id2mean[id] = list.size() == 1 ? at::tensor(0.0f) : at::stack(list).mean();
  for (int64_t i = 0; i < scores.size(0); ++i) {
    int64_t id = index[i].item<int64_t>();
    double n = double(id2score[id].size());
    if (n > 1)
      scores[i] = scores[i] * n / (n - 1) - id2mean[id] * n / (n - 1);
  }
  return scores.unsqueeze(-1) * mask;
}

struct Shape {
  int64_t B, T;
};

} // namespace

int main(int argc, char **argv) {
  std::string stdlibDir = "stdlib", bundlesDir;
  std::vector<std::string> methods = {"gae",     "gae_dense", "sae",       "grpo",
                                      "rloo",    "sppo",      "vineppo",
                                      "spo_chain", "sapo",    "treeadv",
                                      "spo_tree"};
  std::vector<Shape> shapes = {{256, 4096}, {64, 1024}};
  int threads = 2, iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--stdlib")
      stdlibDir = v;
    else if (a == "--bundles")
      bundlesDir = v;
    else if (a == "--methods")
      methods = split(v, ',');
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--iters")
      iters = std::max(1, std::atoi(v.c_str()));
    else if (a == "--shapes") {
      shapes.clear();
      for (const std::string &s : split(v, ',')) {
        auto x = s.find('x');
        if (x == std::string::npos)
          return std::fprintf(stderr, "--shapes: expected BxT, got %s\n",
                              s.c_str()),
                 2;
        shapes.push_back({std::atoll(s.substr(0, x).c_str()),
                          std::atoll(s.substr(x + 1).c_str())});
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (bundlesDir.empty()) {
    std::fprintf(stderr,
                 "usage: cac-bench-cpu --stdlib DIR --bundles DIR [--methods "
                 "a,b] [--shapes BxT,..] [--threads N] [--iters K]\n"
                 "(bench/cpu/run.sh compiles the bundles and runs it)\n");
    return 2;
  }
  setCpuThreads(threads, /*blas=*/false);
  double bw = copyBandwidth(iters);
  std::printf("copy bandwidth: %.1f GB/s (read + write, 256 MiB, %d "
              "threads); eager on CPU kernels %s\n\n",
              bw / 1e9, threads, cac::rt::cpuKernelSet().c_str());
  std::printf("| method | B x T | kernels | eager ms | loop ms | compiled ms | "
              "eager / compiled | loop / compiled | bytes/token | compiled "
              "GB/s | of copy bw | max abs diff |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
              "--- | --- |\n");

  mlir::DialectRegistry registry;
  cac::registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();

  for (const std::string &name : methods) {
    std::string path = stdlibDir + "/" + name + ".cac";
    auto file = llvm::MemoryBuffer::getFile(path);
    if (!file) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 1;
    }
    llvm::SourceMgr sm;
    unsigned id = sm.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    auto module = cac::compileToCac(sm, id, ctx, /*f64=*/false);
    if (!module)
      return 1;
    BundleEstimator est = BundleEstimator::load(bundlesDir + "/" + name);
    const Manifest &m = est.manifest();

    for (Shape sh : shapes) {
      const int64_t B = sh.B, T = sh.T, N = B * T, G = (B + 7) / 8;
      std::mt19937_64 rng(1234);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      // The batch: packed vectors for the eager backend's padBatch, tensors
      // for the runtime.
      cac::Batch batch;
      batch.numSeqs = B;
      batch.numTokens = N;
      for (int64_t b = 0; b <= B; ++b)
        batch.seqOffsets.push_back(int32_t(b * T));
      batch.segOffsets = batch.seqOffsets; // T segment slots per sequence
      for (int64_t b = 0; b < B; ++b)
        batch.seqGroup.push_back(int32_t(b / 8));
      for (int64_t g = 0; g < G; ++g) {
        batch.groupIds.push_back(g);
        batch.groupOffsets.push_back(int32_t(g * 8));
      }
      batch.groupOffsets.push_back(int32_t(B));
      for (int64_t b = 0; b < B; ++b)
        batch.groupMembers.push_back(int32_t(b));
      // Tree: per group a root owning each member's first half, and one leaf
      // per sequence owning the second half.
      batch.numNodes = G + B;
      for (int64_t g = 0; g < G; ++g)
        batch.nodeParent.push_back(-1);
      for (int64_t b = 0; b < B; ++b)
        batch.nodeParent.push_back(int32_t(b / 8));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          batch.tokenNode.push_back(int32_t(t < T / 2 ? b / 8 : G + b));
      // Required parameters (SAE's lambda) get the papers' usual value.
      ParamMap params;
      for (const ParamSpec &ps : m.params)
        if (!ps.defaultValue)
          params[ps.name] = ps.name == "lambda" ? 0.95 : 1.0;
      for (const auto &[k, v] : params)
        batch.params[k] = v;
      TensorMap inputs;
      for (const BufferSpec &bs : m.buffers) {
        if (bs.role != BufferRole::Input)
          continue;
        bool perToken = bs.domain == Domain::Token || bs.domain == Domain::Seg;
        int64_t n = perToken ? N : B;
        std::vector<double> v(static_cast<size_t>(n));
        for (double &x : v) {
          double r = u(rng);
          if (bs.name == "logp")
            x = std::log(0.05 + 0.95 * r);
          else if (bs.name == "reward")
            x = r < 0.4 ? 1.0 : 0.0;
          else if (bs.name == "newline")
            x = r < 0.1 ? 1.0 : 0.0;
          else if (bs.name == "entropy")
            x = 3.0 * r;
          else if (bs.name == "value" && !perToken) // SPPO's V(prompt)
            x = 0.05 + 0.9 * r;
          else
            x = r;
        }
        (bs.domain == Domain::Token  ? batch.token
         : bs.domain == Domain::Seg ? batch.seg
                                    : batch.seq)[bs.name] = v;
        inputs[bs.name] = at::tensor(v, at::kDouble).to(at::kFloat);
      }
      PackedBatch pbatch = PackedBatch::fromLengths(std::vector<int64_t>(
          size_t(B), T));
      pbatch.setGroups(at::arange(B, at::kLong).div(8, "floor"));
      if (m.needsTree)
        pbatch.setTree(
            at::tensor(std::vector<int64_t>(batch.nodeParent.begin(),
                                             batch.nodeParent.end())),
            at::tensor(std::vector<int64_t>(batch.tokenNode.begin(),
                                            batch.tokenNode.end())));

      cac::PaddedBatch padded = cac::padBatch(batch, torch::kFloat32);
      std::vector<cac::PaddedOutput> eagerOut;
      double eagerMs = medianMs(iters, [&] {
        auto r = cac::runEagerPadded(*module, padded);
        if (!r) {
          std::fprintf(stderr, "%s: %s\n", name.c_str(),
                       llvm::toString(r.takeError()).c_str());
          std::exit(1);
        }
        eagerOut = std::move(*r);
      });

      RunOptions opts;
      opts.numThreads = threads;
      TensorMap out;
      double compiledMs =
          medianMs(iters, [&] { out = est.run(inputs, pbatch, params, opts); });

      // Agreement: every eager output against the compiled one.
      double maxDiff = 0.0;
      for (const cac::OutputArray &o : cac::unpadOutputs(padded, eagerOut)) {
        auto it = out.find(o.name);
        if (it == out.end())
          continue;
        at::Tensor want = at::tensor(o.values, at::kDouble);
        at::Tensor got = it->second.to(at::kDouble);
        if (got.numel() == want.numel())
          maxDiff = std::max(maxDiff,
                             (got - want).abs().max().item<double>());
      }

      std::string loopMs = "—", loopRatio = "—";
      if (name == "gae" || name == "gae_dense" || name == "grpo" ||
          name == "rloo") {
        // verl's layout: [B, T] token rewards, the outcome on the last token
        // (gae_dense's are already token rewards).
        at::Tensor rewards = at::zeros({B, T});
        if (name == "gae_dense")
          rewards = inputs["reward"].view({B, T});
        else
          rewards.select(1, T - 1).copy_(inputs["reward"]);
        at::Tensor mask = at::ones({B, T});
        at::Tensor index = at::arange(B, at::kLong).div(8, "floor");
        at::Tensor loopAdv;
        double ms = medianMs(iters, [&] {
          if (name == "gae" || name == "gae_dense")
            loopAdv = verlGae(inputs["value"].view({B, T}), rewards, 1.0, 0.95)
                          .first;
          else if (name == "grpo")
            loopAdv = verlGrpo(rewards, mask, index, 1e-6);
          else
            loopAdv = verlRloo(rewards, mask, index);
        });
        // The baseline computes what the kernels compute.
        maxDiff = std::max(
            maxDiff, (loopAdv.reshape({N}).to(at::kDouble) -
                      out.at("adv").to(at::kDouble))
                         .abs()
                         .max()
                         .item<double>());
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.2f", ms);
        loopMs = buf;
        std::snprintf(buf, sizeof buf, "%.1fx", ms / compiledMs);
        loopRatio = buf;
      }

      // Bytes the kernels must read and write: inputs and outputs.
      double bytes = 0.0;
      for (const BufferSpec &bs : m.buffers) {
        if (bs.role == BufferRole::Scratch)
          continue;
        int64_t n = bs.domain == Domain::Token || bs.domain == Domain::Seg
                        ? N
                    : bs.domain == Domain::Seq   ? B
                    : bs.domain == Domain::Group ? G
                                                 : G + B;
        bytes += double(n) * 4.0;
      }
      double gbps = bytes / (compiledMs * 1e-3) / 1e9;
      std::printf("| %s | %lld x %lld | %zu | %.2f | %s | %.2f | %.1fx | %s | "
                  "%.1f | %.2f | %.0f%% | %.1e |\n",
                  name.c_str(), (long long)B, (long long)T, m.kernels.size(),
                  eagerMs, loopMs.c_str(), compiledMs, eagerMs / compiledMs,
                  loopRatio.c_str(), bytes / double(N), gbps,
                  100.0 * gbps * 1e9 / bw, maxDiff);
      std::fflush(stdout);
    }
  }
  return 0;
}
