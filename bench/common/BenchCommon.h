//===- BenchCommon.h - What the benchmark programs share --------*- C++ -*-===//
//
// Helpers of cac-bench-cpu and cac-bench-gpu: option parsing, median timing,
// random inputs by buffer name, and verl's loops (the baselines) written on
// LibTorch tensors of any device.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_BENCH_COMMON_H
#define CAC_BENCH_COMMON_H

#include "cac/Runtime/Kernels/Manifest.h"
#include "cac/Runtime/Kernels/PackedBatch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

namespace cac::bench {

inline std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty())
      out.push_back(item);
  return out;
}

struct Shape {
  int64_t B, T;
};

/// "256x4096,64x1024" -> shapes; false on a malformed entry.
inline bool parseShapes(const std::string &s, std::vector<Shape> &shapes) {
  shapes.clear();
  for (const std::string &item : split(s, ',')) {
    auto x = item.find('x');
    if (x == std::string::npos)
      return false;
    shapes.push_back({std::atoll(item.substr(0, x).c_str()),
                      std::atoll(item.substr(x + 1).c_str())});
    if (shapes.back().B < 1 || shapes.back().T < 1)
      return false;
  }
  return !shapes.empty();
}

/// The options the benchmark programs share.
struct CommonOptions {
  std::vector<std::string> methods;
  std::vector<Shape> shapes;
  int iters = 5;
};

/// Parses argv as flag-value pairs: `--methods a,b`, `--shapes BxT,..` and
/// `--iters K` into `o`, every other flag through `own(flag, value)`, which
/// returns false for a flag it does not know. Returns false after printing
/// what is wrong.
inline bool
parseArgs(int argc, char **argv, CommonOptions &o,
          const std::function<bool(const std::string &, const std::string &)>
              &own) {
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "%s needs a value\n", flag.c_str());
      return false;
    }
    std::string v = argv[i + 1];
    if (flag == "--methods") {
      o.methods = split(v, ',');
    } else if (flag == "--iters") {
      o.iters = std::max(1, std::atoi(v.c_str()));
    } else if (flag == "--shapes") {
      if (!parseShapes(v, o.shapes)) {
        std::fprintf(stderr, "--shapes: expected BxT,..., got %s\n",
                     v.c_str());
        return false;
      }
    } else if (!own(flag, v)) {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return false;
    }
  }
  return true;
}

/// Runs a benchmark's `run(argc, argv)`; an exception (a missing or
/// malformed bundle) ends it with a message naming `program`, status 1.
inline int mainOf(const char *program, int (*run)(int, char **), int argc,
                  char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

/// Wall times of `iters` runs of `fn` in milliseconds (after one warm-up
/// run): the median (the typical call) and the minimum (the call on an idle
/// machine).
struct Timing {
  double median = 0.0, min = 0.0;
};

/// Times `fn`; `sync` (if any) runs before the clock starts and before it
/// stops, so that asynchronous (GPU) work is counted.
inline Timing timeCalls(int iters, const std::function<void()> &fn,
                        const std::function<void()> &sync = {}) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    if (sync)
      sync();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    if (sync)
      sync();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

/// The median of timeCalls.
inline double medianMs(int iters, const std::function<void()> &fn,
                       const std::function<void()> &sync = {}) {
  return timeCalls(iters, fn, sync).median;
}

/// Copy bandwidth (bytes read + written per second) of a 256 MiB copy of
/// floats on the device of `options`.
inline double copyBandwidth(int iters, const at::TensorOptions &options,
                            const std::function<void()> &sync = {}) {
  const int64_t n = int64_t(64) << 20; // floats
  at::Tensor a = at::rand({n}, options.dtype(at::kFloat)),
             b = at::empty({n}, options.dtype(at::kFloat));
  double ms = medianMs(iters, [&] { b.copy_(a); }, sync);
  return 2.0 * double(n) * 4.0 / (ms * 1e-3);
}

/// The bytes the kernels of `m` must read and write at least: their inputs
/// and outputs (f32), for N tokens, B sequences, G groups and K nodes.
inline double ioBytes(const rt::Manifest &m, int64_t N, int64_t B, int64_t G,
                      int64_t K) {
  double bytes = 0.0;
  for (const rt::BufferSpec &bs : m.buffers) {
    if (bs.role == rt::BufferRole::Scratch)
      continue;
    int64_t n = bs.domain == rt::Domain::Token || bs.domain == rt::Domain::Seg
                    ? N
                : bs.domain == rt::Domain::Seq   ? B
                : bs.domain == rt::Domain::Group ? G
                                                 : K;
    bytes += double(n) * 4.0;
  }
  return bytes;
}

/// The benchmarks' rollout tree over B sequences of T tokens in groups of 8:
/// per group a root owning each member's first half of tokens, and one leaf
/// per sequence owning the second half (nodes: the G roots, then B leaves).
struct BenchTree {
  std::vector<int32_t> nodeParent, tokenNode;
};
inline BenchTree benchTree(int64_t B, int64_t T) {
  const int64_t G = (B + 7) / 8;
  BenchTree tree;
  for (int64_t g = 0; g < G; ++g)
    tree.nodeParent.push_back(-1);
  for (int64_t b = 0; b < B; ++b)
    tree.nodeParent.push_back(int32_t(b / 8));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      tree.tokenNode.push_back(int32_t(t < T / 2 ? b / 8 : G + b));
  return tree;
}

/// Gives `batch` the tree (PackedBatch::setTree takes int64 tensors).
inline void setBenchTree(rt::PackedBatch &batch, const BenchTree &tree) {
  batch.setTree(at::tensor(std::vector<int64_t>(tree.nodeParent.begin(),
                                                tree.nodeParent.end())),
                at::tensor(std::vector<int64_t>(tree.tokenNode.begin(),
                                                tree.tokenNode.end())));
}

/// A random input for a buffer of the manifest, plausible for its name
/// (log-probabilities < 0, 0/1 rewards and newlines, values in (0, 1)).
inline std::vector<double> randomInput(const rt::BufferSpec &bs, int64_t n,
                                       std::mt19937_64 &rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  bool perToken =
      bs.domain == rt::Domain::Token || bs.domain == rt::Domain::Seg;
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
  return v;
}

/// verl's masked_whiten: (x - mean) / sqrt(var + 1e-8) over the mask, with
/// the unbiased variance.
inline at::Tensor verlMaskedWhiten(const at::Tensor &x, const at::Tensor &mask) {
  at::Tensor n = mask.sum();
  at::Tensor mean = (x * mask).sum() / n;
  at::Tensor var = ((x - mean).pow(2) * mask).sum() / n * (n / (n - 1));
  return (x - mean) * at::rsqrt(var + 1e-8);
}

/// verl's compute_gae_advantage_return: a reverse loop over the token
/// columns of padded [B, T] tensors (one small tensor operation per column,
/// on the tensors' device) that carries the next value and the running
/// advantage across tokens whose mask is 0, then the whitening of the
/// advantages over the mask. Returns (advantages before the whitening,
/// returns, whitened advantages): the kernels compute the first two, verl
/// returns the last two.
struct VerlGae {
  at::Tensor adv, returns, whitened;
};
inline VerlGae verlGae(const at::Tensor &values, const at::Tensor &rewards,
                       const at::Tensor &mask, double gamma, double lam) {
  int64_t T = values.size(1);
  at::Tensor nextvalues = at::zeros({values.size(0)}, values.options());
  at::Tensor lastgaelam = at::zeros({values.size(0)}, values.options());
  std::vector<at::Tensor> reversed;
  for (int64_t t = T - 1; t >= 0; --t) {
    at::Tensor v = values.select(1, t), m = mask.select(1, t);
    at::Tensor delta = rewards.select(1, t) + gamma * nextvalues - v;
    at::Tensor cand = delta + gamma * lam * lastgaelam;
    nextvalues = v * m + (1 - m) * nextvalues;
    lastgaelam = cand * m + (1 - m) * lastgaelam;
    reversed.push_back(lastgaelam);
  }
  std::reverse(reversed.begin(), reversed.end());
  at::Tensor adv = at::stack(reversed, 1);
  return {adv, adv + values, verlMaskedWhiten(adv, mask)};
}

/// Sums the [B, T] token rewards into per-sample scores and gathers them
/// by group id (`index`, on the CPU like verl's numpy uids), as verl's
/// outcome estimators do.
inline std::map<int64_t, std::vector<at::Tensor>>
verlGatherScores(const at::Tensor &scores, const at::Tensor &index) {
  std::map<int64_t, std::vector<at::Tensor>> id2score;
  for (int64_t i = 0; i < scores.size(0); ++i)
    id2score[index[i].item<int64_t>()].push_back(scores[i]);
  return id2score;
}

/// verl's compute_grpo_outcome_advantage, with the population std of cac's
/// default (verl's torch.std is the unbiased one: the same work).
inline at::Tensor verlGrpo(const at::Tensor &tokenRewards,
                           const at::Tensor &mask, const at::Tensor &index,
                           double eps) {
  at::Tensor scores = tokenRewards.sum(-1);
  auto id2score = verlGatherScores(scores, index);
  std::map<int64_t, at::Tensor> id2mean, id2std;
  for (auto &[id, list] : id2score) {
    if (list.size() == 1) {
      id2mean[id] = at::zeros({}, scores.options());
      id2std[id] = at::ones({}, scores.options());
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
inline at::Tensor verlRloo(const at::Tensor &tokenRewards,
                           const at::Tensor &mask, const at::Tensor &index) {
  at::Tensor scores = tokenRewards.sum(-1);
  auto id2score = verlGatherScores(scores, index);
  std::map<int64_t, at::Tensor> id2mean;
  for (auto &[id, list] : id2score)
    id2mean[id] = list.size() == 1 ? at::zeros({}, scores.options())
                                   : at::stack(list).mean();
  for (int64_t i = 0; i < scores.size(0); ++i) {
    int64_t id = index[i].item<int64_t>();
    double n = double(id2score[id].size());
    if (n > 1)
      scores[i] = scores[i] * n / (n - 1) - id2mean[id] * n / (n - 1);
  }
  return scores.unsqueeze(-1) * mask;
}

/// The methods whose verl loop the benchmarks run.
inline bool hasVerlLoop(const std::string &name) {
  return name == "gae" || name == "gae_dense" || name == "grpo" ||
         name == "rloo";
}

/// Runs verl's loop for `name` on [B, T] tensors of `inputs`' device (the
/// outcome reward on the last token, gae_dense's token rewards as they
/// are), with verl's masks and GAE's whitening, all inside the timed call;
/// returns the advantage the kernels compute (GAE's before the whitening),
/// flattened like the kernels' token output. A C++ transcription: it runs
/// without Python's per-step overhead, so verl's own function is slower.
inline at::Tensor runVerlLoop(const std::string &name,
                              const std::map<std::string, at::Tensor> &inputs,
                              int64_t B, int64_t T) {
  const at::Tensor &reward = inputs.at("reward");
  at::Tensor rewards = at::zeros({B, T}, reward.options());
  if (name == "gae_dense")
    rewards = reward.view({B, T});
  else
    rewards.select(1, T - 1).copy_(reward);
  at::Tensor mask = at::ones({B, T}, reward.options());
  at::Tensor index = at::arange(B, at::kLong).div(8, "floor");
  at::Tensor adv;
  if (name == "gae" || name == "gae_dense")
    adv = verlGae(inputs.at("value").view({B, T}), rewards, mask, 1.0, 0.95)
              .adv;
  else if (name == "grpo")
    adv = verlGrpo(rewards, mask, index, 1e-6);
  else
    adv = verlRloo(rewards, mask, index);
  return adv.reshape({B * T});
}

} // namespace cac::bench

#endif // CAC_BENCH_COMMON_H
