//===- cac-bench-cpu.cpp - Compiled CPU kernels vs the eager backend ------===//
//
// cac-bench-cpu --stdlib DIR --bundles DIR [--methods a,b,..]
//               [--shapes 256x4096,64x1024] [--threads N] [--iters K]
//               [--compiled-only 1]
//
// For each method and batch shape B x T (every sequence T tokens long, groups
// of 8 sequences, a two-level tree per group for tree estimators), measured in
// one run:
//   eager    the eager LibTorch backend (cac_eager) on the padded batch: the
//            reference, one tensor operation per dialect operation, its
//            outputs made contiguous in the timed call;
//   loop     the loop verl runs, for the methods verl has: gae and
//            gae_dense (compute_gae_advantage_return, a loop over t of
//            LibTorch column operations on token rewards with the response
//            mask, then masked_whiten), grpo and rloo
//            (compute_grpo_outcome_advantage and
//            compute_rloo_outcome_advantage: per-sample loops that gather each
//            group's scores, then per-group statistics); a transcription in
//            C++, so without Python's per-iteration overhead (verl's own
//            function is slower: bench/python/baselines.py times that);
//   compiled the bundle's host.so through the runtime (BundleEstimator::run,
//            what cac-run calls), inputs already packed;
// each as the median (min) of --iters calls to the microsecond,
// their ratios (of the medians), the bytes of inputs and outputs per token, the
// compiled kernels' throughput, and the machine's copy bandwidth measured by
// the same program. Prints a Markdown table (docs/benchmarks.md). A benchmark,
// not a test: it checks only that eager and compiled agree (max |diff| column).
// --compiled-only 1 times the bundles alone (eager, loop and agreement cells
// "—"): for A/B runs of two compilers' bundles and for profiling the kernels.
//
//===----------------------------------------------------------------------===//

#include "../common/BenchCommon.h"
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
using namespace cac::bench;

/// "median (min)" in milliseconds to the microsecond.
static std::string timingCell(const Timing &t) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f (%.3f)", t.median, t.min);
  return buf;
}

static int run(int argc, char **argv) {
  std::string stdlibDir = "stdlib", bundlesDir;
  CommonOptions o;
  o.methods = {"gae",  "gae_dense", "sae",       "grpo", "rloo",    "sppo",
               "vineppo", "spo_chain", "sapo", "treeadv", "spo_tree"};
  o.shapes = {{256, 4096}, {64, 1024}};
  o.iters = 5;
  int threads = 2;
  bool compiledOnly = false;
  bool ok = parseArgs(argc, argv, o, [&](const std::string &a,
                                         const std::string &v) {
    if (a == "--stdlib")
      stdlibDir = v;
    else if (a == "--bundles")
      bundlesDir = v;
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--compiled-only")
      compiledOnly = v != "0" && v != "false";
    else
      return false;
    return true;
  });
  if (!ok)
    return 2;
  const std::vector<std::string> &methods = o.methods;
  const std::vector<Shape> &shapes = o.shapes;
  const int iters = o.iters;
  if (bundlesDir.empty()) {
    std::fprintf(stderr,
                 "usage: cac-bench-cpu --stdlib DIR --bundles DIR [--methods "
                 "a,b] [--shapes BxT,..] [--threads N] [--iters K] "
                 "[--compiled-only 1]\n"
                 "(bench/cpu/run.sh compiles the bundles and runs it)\n");
    return 2;
  }
  setCpuThreads(threads, /*blas=*/false);
  double bw = copyBandwidth(iters, at::TensorOptions());
  std::printf("copy bandwidth: %.1f GB/s (read + write, 256 MiB, %d "
              "threads); eager on CPU kernels %s\n\n",
              bw / 1e9, threads, cac::rt::cpuKernelSet().c_str());
  std::printf("ms: median (min) of %d calls\n\n", iters);
  std::printf("| method | B x T | kernels | eager ms | C++ verl loop ms | "
              "compiled ms | eager / compiled | loop / compiled | bytes/token | "
              "compiled GB/s | of copy bw | max abs diff |\n");
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
      BenchTree tree = benchTree(B, T);
      batch.numNodes = G + B;
      batch.nodeParent = tree.nodeParent;
      batch.tokenNode = tree.tokenNode;
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
        std::vector<double> v = randomInput(bs, perToken ? N : B, rng);
        (bs.domain == Domain::Token  ? batch.token
         : bs.domain == Domain::Seg ? batch.seg
                                    : batch.seq)[bs.name] = v;
        inputs[bs.name] = at::tensor(v, at::kDouble).to(at::kFloat);
      }
      PackedBatch pbatch = PackedBatch::fromLengths(std::vector<int64_t>(
          size_t(B), T));
      pbatch.setGroups(at::arange(B, at::kLong).div(8, "floor"));
      if (m.needsTree)
        setBenchTree(pbatch, tree);

      cac::PaddedBatch padded = cac::padBatch(batch, torch::kFloat32);
      std::vector<cac::PaddedOutput> eagerOut;
      // The eager outputs are made contiguous inside the timer: a seq value
      // broadcast to tokens is otherwise a lazy expand() view, and the
      // kernels write every token.
      Timing eager{};
      if (!compiledOnly)
        eager = timeCalls(iters, [&] {
          auto r = cac::runEagerPadded(*module, padded);
          if (!r) {
            std::fprintf(stderr, "%s: %s\n", name.c_str(),
                         llvm::toString(r.takeError()).c_str());
            std::exit(1);
          }
          eagerOut = std::move(*r);
          for (cac::PaddedOutput &o : eagerOut)
            o.values = o.values.contiguous();
        });

      RunOptions opts;
      opts.numThreads = threads;
      TensorMap out;
      Timing compiled =
          timeCalls(iters, [&] { out = est.run(inputs, pbatch, params, opts); });
      double compiledMs = compiled.median;

      // Agreement: every eager output against the compiled one.
      double maxDiff = 0.0;
      for (const cac::OutputArray &o :
           compiledOnly ? std::vector<cac::OutputArray>{}
                        : cac::unpadOutputs(padded, eagerOut)) {
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
      if (hasVerlLoop(name) && !compiledOnly) {
        at::Tensor loopAdv;
        Timing loop = timeCalls(
            iters, [&] { loopAdv = runVerlLoop(name, inputs, B, T); });
        // The baseline computes what the kernels compute.
        maxDiff = std::max(
            maxDiff, (loopAdv.to(at::kDouble) -
                      out.at("adv").to(at::kDouble))
                         .abs()
                         .max()
                         .item<double>());
        loopMs = timingCell(loop);
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.1fx", loop.median / compiledMs);
        loopRatio = buf;
      }

      double bytes = ioBytes(m, N, B, G, G + B);
      double gbps = bytes / (compiledMs * 1e-3) / 1e9;
      std::string eagerMs = "—", eagerRatio = "—", diff = "—";
      if (!compiledOnly) {
        char buf[64];
        eagerMs = timingCell(eager);
        std::snprintf(buf, sizeof buf, "%.1fx", eager.median / compiledMs);
        eagerRatio = buf;
        std::snprintf(buf, sizeof buf, "%.1e", maxDiff);
        diff = buf;
      }
      std::printf("| %s | %lld x %lld | %zu | %s | %s | %s | %s | %s | "
                  "%.1f | %.2f | %.0f%% | %s |\n",
                  name.c_str(), (long long)B, (long long)T, m.kernels.size(),
                  eagerMs.c_str(), loopMs.c_str(), timingCell(compiled).c_str(),
                  eagerRatio.c_str(), loopRatio.c_str(), bytes / double(N),
                  gbps, 100.0 * gbps * 1e9 / bw, diff.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  return mainOf("cac-bench-cpu", run, argc, argv);
}
