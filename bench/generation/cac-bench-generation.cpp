//===- cac-bench-generation.cpp - Generation with and without KV cache ----===//
//
// cac-bench-generation [--cases gen,sampling,tree]
//                      [--models tiny,small,medium] [--prompts 64]
//                      [--samples 8] [--prompt-len 12] [--new 24,128]
//                      [--threads N] [--iters K] [--no-uncached]
//                      [--device cpu|cuda|cuda:N] [--dtype float32|bf16]
//                      [--layers N] [--json FILE] [--vocab 151936]
//                      [--rows 64] [--branches 4,4,4] [--seg-len 8]
//
// --cases picks the tables: `gen` (the default, below), `sampling`
// (SamplingCase.cpp: microseconds per sampled token of --rows rows over a
// vocabulary of --vocab ids, per top-p/top-k truncation) and `tree`
// (TreePlanCase.cpp: a tree plan of --branches and --seg-len from --prompts
// prompts against its paths as independent rows: computed tokens, KV cache
// memory and time, for every model of --models).
//
// Times batched sampling (cac::rt::generate, what cac-run's rollouts call)
// of randomly initialized models of the built-in shapes, with the KV cache
// and with useCache = false (every step runs the whole prefix through the
// model again), and prints a Markdown table of generated tokens per second
// (docs/benchmarks.md). Every row generates exactly --new tokens (no stop
// tokens), from random prompts of --prompt-len tokens, each prompt forked
// into --samples rows as in a GRPO group; the prefill is included.
//
// Models (the vocabulary is the character tokenizer's, 99 ids):
//   tiny    builtin("tiny"):  hidden 64, 2 layers, 4 heads, 2 KV heads, ffn 192
//           (the embedded default, examples/arith/train.cac)
//   small   builtin("small"): hidden 128, 4 layers, 4/2 heads, ffn 384
//   medium  builtin("custom", hidden = 512, layers = 8, heads = 8,
//           kv_heads = 4, ffn = 1536): a larger shape for scale
// and every public architecture of random("ARCH") (qwen2.5-0.5b,
// qwen2.5-1.5b, llama-3.2-1b; Architectures.cpp): the real shapes and
// vocabulary, random weights. --layers N keeps the first N layers of any.
//
// --dtype bf16 casts the model to bfloat16 (weights, activations, KV cache;
// sampling in float32). Where LibTorch has it (2.x) attention is
// at::scaled_dot_product_attention; the first line then also gives the
// largest difference of the last prompt token's logits between it and the
// plain matmul/softmax path. --json FILE appends one JSON object per row
// (scripts/gpu/cac-run/run.sh genbf16 merges them with
// bench/python/generate_baseline.py's).
//
// Both modes sample with the same seed; the "same tokens" column is the
// fraction of generated tokens that agree (the two modes compute the same
// logits up to float rounding, so it should be 1 or very near it). A
// benchmark, not a test. --device cuda runs the models on a GPU (a CUDA
// LibTorch): the sampled tokens come back to the host every step, as in
// cac-run, so the wall times include that synchronisation.
//
//===----------------------------------------------------------------------===//

#include "BenchGeneration.h"

#include "../common/BenchCommon.h"
#include "cac/Runtime/Model/Architectures.h"
#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Model/CpuKernels.h"
#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Model/Transformer.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace cac::rt;
using cac::bench::split;
using cac::bench::gen::Options;

namespace cac::bench::gen {

/// The model shapes of the table (see the file comment).
ModelConfig modelConfig(const std::string &name, int64_t layers) {
  if (std::optional<ModelConfig> arch = publicArchitecture(name)) {
    if (layers > 0)
      arch->numHiddenLayers = std::min(layers, arch->numHiddenLayers);
    arch->validate(name);
    return *arch;
  }
  ModelConfig c;
  c.modelType = "llama";
  c.vocabSize = 99; // CharTokenizer
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 10000.0;
  c.tieWordEmbeddings = true;
  c.maxPositionEmbeddings = 512;
  if (name == "tiny") {
    c.hiddenSize = 64, c.numHiddenLayers = 2, c.numAttentionHeads = 4,
    c.numKeyValueHeads = 2, c.intermediateSize = 192;
  } else if (name == "small") {
    c = ModelConfig::builtinSmall(99);
  } else if (name == "medium") {
    c.hiddenSize = 512, c.numHiddenLayers = 8, c.numAttentionHeads = 8,
    c.numKeyValueHeads = 4, c.intermediateSize = 1536;
  } else {
    std::string known = "tiny, small, medium";
    for (const std::string &a : publicArchitectureNames())
      known += ", " + a;
    std::fprintf(stderr, "unknown model '%s' (%s)\n", name.c_str(),
                 known.c_str());
    std::exit(2);
  }
  if (layers > 0)
    c.numHiddenLayers = std::min(layers, c.numHiddenLayers);
  c.validate(name);
  return c;
}

double medianSeconds(int iters, const std::function<void()> &fn) {
  fn();
  std::vector<double> s;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    s.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

void sync(const at::Device &device) {
  if (device.is_cuda())
    torch::cuda::synchronize(device.index());
}

} // namespace cac::bench::gen

using namespace cac::bench::gen;

namespace {

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: cac-bench-generation [--cases gen,sampling,tree] "
               "[--models tiny,small,medium] "
               "[--prompts N] [--samples N] [--prompt-len N] [--new N,M] "
               "[--threads N] [--iters K] [--no-uncached] "
               "[--device cpu|cuda|cuda:N] [--dtype float32|bf16] "
               "[--layers N] [--json FILE] [--vocab N] [--rows N] "
               "[--branches B1,B2,..] [--seg-len N]\n");
  std::exit(2);
}

int64_t positive(const std::string &s) {
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || v <= 0)
    usage();
  return v;
}

Options parseOptions(int argc, char **argv) {
  Options o;
  o.threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        usage();
      return argv[++i];
    };
    if (a == "--cases") {
      o.cases = split(next(), ',');
      for (const std::string &c : o.cases)
        if (c != "gen" && c != "sampling" && c != "tree")
          usage();
    } else if (a == "--models")
      o.models = split(next(), ',');
    else if (a == "--prompts")
      o.prompts = positive(next());
    else if (a == "--samples")
      o.samples = positive(next());
    else if (a == "--prompt-len")
      o.promptLen = positive(next());
    else if (a == "--new") {
      o.newTokens.clear();
      for (const std::string &n : split(next(), ','))
        o.newTokens.push_back(positive(n));
    } else if (a == "--threads")
      o.threads = static_cast<int>(positive(next()));
    else if (a == "--iters")
      o.iters = static_cast<int>(positive(next()));
    else if (a == "--no-uncached")
      o.uncached = false;
    else if (a == "--device")
      o.deviceName = next();
    else if (a == "--layers")
      o.layers = positive(next());
    else if (a == "--json")
      o.json = next();
    else if (a == "--vocab")
      o.vocab = positive(next());
    else if (a == "--rows")
      o.rows = positive(next());
    else if (a == "--branches") {
      o.branches.clear();
      for (const std::string &b : split(next(), ','))
        o.branches.push_back(positive(b));
      if (o.branches.empty())
        usage();
    } else if (a == "--seg-len")
      o.segLen = positive(next());
    else if (a == "--dtype") {
      try {
        o.dtype = parseModelDtype(next());
      } catch (const std::exception &e) {
        std::fprintf(stderr, "--dtype: %s\n", e.what());
        std::exit(2);
      }
    } else
      usage();
  }
  return o;
}

/// The largest difference of the last prompt token's logits between fused
/// and plain attention over the first four prompts (the model's dtype).
double fusedVsPlain(TransformerLM &model,
                    const std::vector<std::vector<int64_t>> &prompts) {
  int64_t n = std::min<int64_t>(4, static_cast<int64_t>(prompts.size()));
  std::vector<int64_t> flat;
  for (int64_t p = 0; p < n; ++p)
    flat.insert(flat.end(), prompts[p].begin(), prompts[p].end());
  at::Tensor ids = at::tensor(flat, at::kLong).view({n, -1});
  auto last = [&] {
    at::Tensor h = model->forwardHidden(ids);
    return model->lmHead(h.select(1, h.size(1) - 1)).to(at::kFloat);
  };
  at::Tensor fused = last();
  model->setFusedAttention(false);
  at::Tensor plain = last();
  model->setFusedAttention(true);
  return (fused - plain).abs().max().item<double>();
}

/// One model's rows of the table (and of --json); lines for after the
/// table go to \p notes.
void benchModel(const Options &o, const std::string &name,
                const at::Device &device, std::FILE *json,
                std::vector<std::string> &notes) {
  ModelConfig cfg = modelConfig(name, o.layers);
  torch::manual_seed(1);
  TransformerLM model(cfg);
  model->to(device, o.dtype);
  model->eval();
  at::Generator promptGen = makeGenerator(7);
  std::vector<std::vector<int64_t>> promptIds;
  for (int64_t p = 0; p < o.prompts; ++p) {
    at::Tensor ids =
        at::randint(3, cfg.vocabSize, {o.promptLen}, promptGen, at::kLong);
    promptIds.emplace_back(ids.data_ptr<int64_t>(),
                           ids.data_ptr<int64_t>() + o.promptLen);
  }
  std::string dtype = modelDtypeName(o.dtype);
  if (fusedAttentionAvailable()) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "%s %s: fused vs plain attention, largest |logit "
                  "difference| at the last prompt token of 4 prompts: %.3g",
                  name.c_str(), dtype.c_str(), fusedVsPlain(model, promptIds));
    notes.push_back(line);
  }
  for (int64_t n : o.newTokens) {
    if (o.promptLen + n > cfg.maxPositionEmbeddings) {
      std::fprintf(stderr, "skipping %s: %lld + %lld tokens exceed %lld "
                           "positions\n",
                   name.c_str(), static_cast<long long>(o.promptLen),
                   static_cast<long long>(n),
                   static_cast<long long>(cfg.maxPositionEmbeddings));
      continue;
    }
    SamplingOptions opts;
    opts.temperature = 1.0;
    opts.maxNewTokens = n;
    auto run = [&](bool cache, std::vector<GeneratedSequence> &out) {
      SamplingOptions so = opts;
      so.useCache = cache;
      at::Generator gen = makeGenerator(11);
      out = generate(model, promptIds, so, gen, nullptr, o.samples);
      sync(device);
    };
    std::vector<GeneratedSequence> withCache, without;
    double tc = medianSeconds(o.iters, [&] { run(true, withCache); });
    int64_t tokens = 0;
    for (const GeneratedSequence &g : withCache)
      tokens += static_cast<int64_t>(g.tokens.size());
    std::printf("| %s | %.2f M | %s | %lld | %lld | %.3f | %.0f |",
                name.c_str(), model->numParameters() / 1e6, dtype.c_str(),
                static_cast<long long>(withCache.size()),
                static_cast<long long>(n), tc, tokens / tc);
    if (json)
      std::fprintf(json,
                   "{\"impl\": \"cac\", \"model\": \"%s\", \"dtype\": "
                   "\"%s\", \"device\": \"%s\", \"rows\": %lld, "
                   "\"prompt_tokens\": %lld, \"new_tokens\": %lld, "
                   "\"seconds\": %.6f, \"tokens_per_s\": %.3f, "
                   "\"iters\": %d}\n",
                   name.c_str(), dtype.c_str(), device.str().c_str(),
                   static_cast<long long>(withCache.size()),
                   static_cast<long long>(o.promptLen),
                   static_cast<long long>(n), tc, tokens / tc, o.iters);
    if (!o.uncached) {
      std::printf(" — | — | — | — |\n");
      std::fflush(stdout);
      continue;
    }
    double tu = medianSeconds(o.iters, [&] { run(false, without); });
    int64_t same = 0, total = 0;
    for (size_t r = 0; r < withCache.size(); ++r) {
      const auto &a = withCache[r].tokens, &b = without[r].tokens;
      total += static_cast<int64_t>(std::max(a.size(), b.size()));
      for (size_t t = 0; t < std::min(a.size(), b.size()); ++t)
        same += a[t] == b[t];
    }
    std::printf(" %.3f | %.0f | %.1fx | %.4f |\n", tu, tokens / tu, tu / tc,
                total ? static_cast<double>(same) / total : 1.0);
    std::fflush(stdout);
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseOptions(argc, argv);
  std::optional<at::Device> device;
  try {
    device.emplace(o.deviceName);
  } catch (const std::exception &) {
  }
  if (!device || !(device->is_cpu() || device->is_cuda()))
    usage();
  if (device->is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "--device %s: this LibTorch sees no CUDA device\n",
                 o.deviceName.c_str());
    return 2;
  }
  std::FILE *json = nullptr;
  if (!o.json.empty() && !(json = std::fopen(o.json.c_str(), "a"))) {
    std::fprintf(stderr, "--json: cannot open '%s'\n", o.json.c_str());
    return 2;
  }
  setCpuThreads(std::max(o.threads, 1), /*blas=*/false);
  torch::NoGradGuard noGrad;

  auto wants = [&](const char *c) {
    return std::find(o.cases.begin(), o.cases.end(), c) != o.cases.end();
  };
  if (wants("gen")) {
    std::printf("%lld prompts x %lld samples, prompt %lld tokens, device %s, "
                "%d CPU threads, %s attention, median of %d after a "
                "warm-up\n\n",
                static_cast<long long>(o.prompts),
                static_cast<long long>(o.samples),
                static_cast<long long>(o.promptLen), device->str().c_str(),
                at::get_num_threads(),
                fusedAttentionAvailable() ? "fused" : "plain", o.iters);
    std::printf("| model | parameters | dtype | rows | new tokens | cached s "
                "| cached tok/s | uncached s | uncached tok/s | cached / "
                "uncached | same tokens |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
                "| --- |\n");
    std::vector<std::string> notes;
    for (const std::string &name : o.models)
      benchModel(o, name, *device, json, notes);
    if (!notes.empty())
      std::printf("\n");
    for (const std::string &n : notes)
      std::printf("%s\n", n.c_str());
  }
  if (wants("sampling"))
    benchSampling(o, *device);
  if (wants("tree"))
    benchTreePlan(o, *device);
  if (json)
    std::fclose(json);
  return 0;
}
