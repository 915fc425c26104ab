//===- cac-kernel-smoke.cpp - Run a kernel bundle on a random batch -------===//
//
// cac-kernel-smoke DIR [--device cpu|cuda] [--seqs B] [--max-len T]
//                      [--group-size S] [--threads N] [--iters K]
//                      [--param NAME=VALUE]...
//
// Loads a bundle, makes a random batch (lengths uniform in [1, T], groups of
// S consecutive sequences, one tree node per sequence for tree estimators)
// with random inputs, runs it, and prints each output's summary and the
// median time per run (synchronized on CUDA). For checking a bundle on a new
// machine, not a benchmark.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Kernels/Bundle.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace cac::rt;

static int usage() {
  std::fprintf(stderr,
               "usage: cac-kernel-smoke DIR [--device cpu|cuda] [--seqs B] "
               "[--max-len T] [--group-size S] [--threads N] [--iters K] "
               "[--param NAME=VALUE]...\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string dir = argv[1], device = "cpu";
  int64_t seqs = 256, maxLen = 512, groupSize = 8, iters = 10;
  RunOptions options;
  ParamMap params;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc)
      return usage();
    std::string v = argv[++i];
    if (a == "--device")
      device = v;
    else if (a == "--seqs")
      seqs = std::atoll(v.c_str());
    else if (a == "--max-len")
      maxLen = std::atoll(v.c_str());
    else if (a == "--group-size")
      groupSize = std::max<int64_t>(1, std::atoll(v.c_str()));
    else if (a == "--threads")
      options.numThreads = std::atoi(v.c_str());
    else if (a == "--iters")
      iters = std::max<int64_t>(1, std::atoll(v.c_str()));
    else if (a == "--param" && v.find('=') != std::string::npos)
      params[v.substr(0, v.find('='))] = std::atof(v.c_str() + v.find('=') + 1);
    else
      return usage();
  }

  try {
    BundleEstimator est = BundleEstimator::load(dir);
    const Manifest &m = est.manifest();
    if (device == "cuda" && !at::hasCUDA())
      throw BundleError("--device cuda: this LibTorch has no CUDA");
    at::Device dev =
        device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    at::manual_seed(0);
    PackedBatch batch =
        PackedBatch::fromLengths(at::randint(1, maxLen + 1, {seqs}, at::kLong));
    batch.setGroups(at::arange(seqs, at::kLong).div(groupSize, "floor"));
    if (m.needsTree)
      batch.setTree(at::full({seqs}, -1, at::kLong), batch.tokenSeq());
    batch = batch.to(dev);

    TensorMap inputs;
    for (const BufferSpec &b : m.buffers)
      if (b.role == BufferRole::Input)
        inputs[b.name] = at::randn({domainSize(b.domain, batch)},
                                   at::TensorOptions().device(dev));
    std::printf("%s (%s): B=%lld N=%lld G=%lld K=%lld on %s, %zu kernels\n",
                m.estimator.c_str(), dir.c_str(), (long long)batch.numSeqs(),
                (long long)batch.numTokens(), (long long)batch.numGroups(),
                (long long)batch.numNodes(), dev.str().c_str(),
                m.kernels.size());

    options.synchronize = true;
    TensorMap out = est.run(inputs, batch, params, options); // warm-up, JIT
    std::vector<double> ms;
    for (int64_t i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      out = est.run(inputs, batch, params, options);
      auto t1 = std::chrono::steady_clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    for (const auto &[name, t] : out) {
      at::Tensor d = t.to(at::kCPU, at::kDouble);
      bool finite = d.numel() == 0 || d.isfinite().all().item<bool>();
      std::printf("  %-12s %-6s [%lld] mean %.6g min %.6g max %.6g%s\n",
                  name.c_str(), c10::toString(t.scalar_type()),
                  (long long)t.numel(),
                  d.numel() ? d.mean().item<double>() : 0.0,
                  d.numel() ? d.min().item<double>() : 0.0,
                  d.numel() ? d.max().item<double>() : 0.0,
                  finite ? "" : "  NON-FINITE");
    }
    std::printf("  median %.3f ms per run over %lld runs (inputs converted, "
                "outputs allocated, kernels run)\n",
                ms[ms.size() / 2], (long long)iters);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cac-kernel-smoke: %s\n", e.what());
    return 1;
  }
  return 0;
}
