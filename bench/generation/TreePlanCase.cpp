//===- TreePlanCase.cpp - A tree rollout plan against its flattened paths -===//
//
// Samples a tree plan the way cac-run's tree(branches, seg_len) does: every
// prompt forks into branches[0] rows, each row samples seg_len tokens and
// forks into branches[d + 1] rows at depth d, the last depth runs to
// seg_len * depths new tokens (no stop tokens, so every path has that many).
// The same paths sampled as independent rows (the flattened plan: every
// path prefilled and decoded on its own) are the comparison. Both report
// the tokens run through the model (prefill and fed tokens), the most KV
// cache tokens held at once and the KV bytes allocated.
//
//===----------------------------------------------------------------------===//

#include "BenchGeneration.h"

#include "cac/Runtime/Model/Generation.h"

#include <cstdio>

namespace cac::bench::gen {

namespace {

struct PlanFigures {
  int64_t paths = 0, computed = 0, peakTokens = 0, bytesPerToken = 0;
  int64_t allocated = 0;
  double seconds = 0;
};

/// Rows 0..rows-1, each repeated \p times.
std::vector<int64_t> repeatRows(size_t rows, int64_t times) {
  std::vector<int64_t> out;
  for (size_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < times; ++k)
      out.push_back(static_cast<int64_t>(r));
  return out;
}

int64_t countTokens(const std::vector<std::vector<int64_t>> &prompts) {
  int64_t n = 0;
  for (const auto &p : prompts)
    n += static_cast<int64_t>(p.size());
  return n;
}

PlanFigures sharedTree(rt::TransformerLM model, const Options &o,
                       const rt::SamplingOptions &so,
                       const std::vector<std::vector<int64_t>> &prompts) {
  PlanFigures f;
  at::Generator gen = rt::makeGenerator(13);
  rt::Decoder root(model, so);
  root.start(prompts);
  f.computed = countTokens(prompts);
  rt::Decoder dec = root.fork(repeatRows(prompts.size(), o.branches[0]));
  const size_t D = o.branches.size();
  for (size_t d = 0; d < D; ++d) {
    std::vector<size_t> before;
    for (const rt::GeneratedSequence &s : dec.sequences())
      before.push_back(s.tokens.size());
    dec.run(gen, d + 1 < D ? o.segLen : -1);
    for (size_t r = 0; r < dec.size(); ++r) {
      // The last token of a finished row is sampled but not fed.
      int64_t added =
          static_cast<int64_t>(dec.sequence(r).tokens.size() - before[r]);
      f.computed += added - (dec.sequence(r).finished() ? 1 : 0);
    }
    if (d + 1 < D)
      dec = dec.fork(repeatRows(dec.size(), o.branches[d + 1]));
  }
  f.paths = static_cast<int64_t>(dec.size());
  f.peakTokens = dec.cache().peakStoredTokens();
  f.bytesPerToken = dec.cache().bytesPerToken();
  f.allocated = dec.cache().memoryBytes();
  return f;
}

PlanFigures flatPaths(rt::TransformerLM model, const rt::SamplingOptions &so,
                      const std::vector<std::vector<int64_t>> &prompts,
                      int64_t pathsPerPrompt) {
  PlanFigures f;
  at::Generator gen = rt::makeGenerator(13);
  std::vector<std::vector<int64_t>> rows;
  for (const auto &p : prompts)
    for (int64_t k = 0; k < pathsPerPrompt; ++k)
      rows.push_back(p);
  rt::Decoder dec(model, so);
  dec.start(rows);
  dec.run(gen);
  f.computed = countTokens(rows);
  for (const rt::GeneratedSequence &s : dec.sequences())
    f.computed += static_cast<int64_t>(s.tokens.size()) - 1;
  f.paths = static_cast<int64_t>(rows.size());
  f.peakTokens = dec.cache().peakStoredTokens();
  f.bytesPerToken = dec.cache().bytesPerToken();
  f.allocated = dec.cache().memoryBytes();
  return f;
}

void printRow(const std::string &model, const char *plan,
              const PlanFigures &f) {
  double mib = 1024.0 * 1024.0;
  std::printf("| %s | %s | %lld | %lld | %lld | %.2f | %.2f | %.3f |\n",
              model.c_str(), plan, static_cast<long long>(f.paths),
              static_cast<long long>(f.computed),
              static_cast<long long>(f.peakTokens),
              static_cast<double>(f.peakTokens * f.bytesPerToken) / mib,
              static_cast<double>(f.allocated) / mib, f.seconds);
  std::fflush(stdout);
}

} // namespace

void benchTreePlan(const Options &o, const at::Device &device) {
  int64_t depths = static_cast<int64_t>(o.branches.size()), leaves = 1;
  std::string shape;
  for (int64_t b : o.branches) {
    leaves *= b;
    shape += (shape.empty() ? "" : ",") + std::to_string(b);
  }
  std::printf("\nTree plan: %lld prompts of %lld tokens, branches %s, "
              "seg_len %lld (%lld new tokens per path), against its %lld "
              "paths per prompt as independent rows; seconds: median of "
              "%d\n\n",
              static_cast<long long>(o.prompts),
              static_cast<long long>(o.promptLen), shape.c_str(),
              static_cast<long long>(o.segLen),
              static_cast<long long>(o.segLen * depths),
              static_cast<long long>(leaves), o.iters);
  std::printf("| model | plan | paths | computed tokens | peak KV tokens | "
              "peak KV MiB | KV MiB allocated | seconds |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const std::string &name : o.models) {
    rt::ModelConfig cfg = modelConfig(name, o.layers);
    torch::manual_seed(1);
    rt::TransformerLM model(cfg);
    model->to(device, o.dtype);
    model->eval();
    at::Generator promptGen = rt::makeGenerator(7);
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t p = 0; p < o.prompts; ++p) {
      at::Tensor ids =
          at::randint(3, cfg.vocabSize, {o.promptLen}, promptGen, at::kLong);
      prompts.emplace_back(ids.data_ptr<int64_t>(),
                           ids.data_ptr<int64_t>() + o.promptLen);
    }
    rt::SamplingOptions so;
    so.maxNewTokens = o.segLen * depths;
    PlanFigures tree, flat;
    tree.seconds = medianSeconds(o.iters, [&] {
      tree = sharedTree(model, o, so, prompts);
      sync(device);
    });
    flat.seconds = medianSeconds(o.iters, [&] {
      flat = flatPaths(model, so, prompts, leaves);
      sync(device);
    });
    printRow(name, "tree (shared prefixes)", tree);
    printRow(name, "flattened paths", flat);
  }
}

} // namespace cac::bench::gen
