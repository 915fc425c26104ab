//===- BenchGeneration.h - cac-bench-generation's cases ---------*- C++ -*-===//
//
// The options of cac-bench-generation and its cases beside the generation
// table: per-token sampling time at a real vocabulary (SamplingCase.cpp) and
// a tree rollout plan against its flattened paths (TreePlanCase.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_BENCH_GENERATION_H
#define CAC_BENCH_GENERATION_H

#include "cac/Runtime/Model/Config.h"

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

namespace cac::bench::gen {

/// The command line (cac-bench-generation.cpp's file comment).
struct Options {
  std::vector<std::string> cases = {"gen"};
  std::vector<std::string> models = {"tiny", "small", "medium"};
  std::vector<int64_t> newTokens = {24, 128};
  int64_t prompts = 64, samples = 8, promptLen = 12, layers = 0;
  int threads = 1;
  int iters = 3;
  bool uncached = true;
  std::string deviceName = "cpu";
  at::ScalarType dtype = at::kFloat;
  std::string json;
  /// The sampling case: vocabulary and rows per call.
  int64_t vocab = 151936, rows = 64;
  /// The tree case: branch factors per depth and tokens per segment.
  std::vector<int64_t> branches = {4, 4, 4};
  int64_t segLen = 8;
};

/// The model of \p name (tiny, small, medium or a public architecture),
/// keeping its first \p layers layers when > 0; exits on an unknown name.
rt::ModelConfig modelConfig(const std::string &name, int64_t layers);
/// Median wall time of \p fn in seconds over \p iters runs after a warm-up.
double medianSeconds(int iters, const std::function<void()> &fn);
/// Waits for \p device's queued work.
void sync(const at::Device &device);

/// Prints the sampling table: microseconds per sampled token of
/// rt::sampleTokens on [rows, vocab] logits, per truncation.
void benchSampling(const Options &o, const at::Device &device);
/// Prints the tree-plan table: a tree rollout plan sampled with forks
/// against its paths sampled as independent rows, for every model.
void benchTreePlan(const Options &o, const at::Device &device);

} // namespace cac::bench::gen

#endif // CAC_BENCH_GENERATION_H
