//===- MemoryCheck.cpp - Refusing a rollout that cannot fit in memory -----===//
//
// A rollout step holds every row's KV cache at once and, per generated
// token, each row's logits over the vocabulary. A batch of a million prompts
// would be allocated until the kernel kills the process; instead the step
// estimates these two before generating and stops with the numbers and the
// fields to lower.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/MemoryCheck.h"

#include "Phases.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace cac::rt::train {

namespace {

/// MemAvailable of /proc/meminfo in bytes; -1 where it cannot be read.
double availableHostMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = -1;
  std::string unit;
  while (in >> key) {
    if (key == "MemAvailable:") {
      in >> kb >> unit;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

/// Rows that generate at once for one prompt: a lower bound for plans that
/// grow (chains add Monte-Carlo continuations, forests branch).
int64_t rowsPerPrompt(const RolloutSpec &r) {
  if (r.kind == RolloutSpec::Kind::Tree) {
    int64_t leaves = 1;
    for (int64_t w : r.branches)
      leaves *= std::max<int64_t>(w, 1);
    return leaves;
  }
  return std::max<int64_t>(r.n, 1);
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / double(int64_t(1) << 30));
  return buf;
}

} // namespace

RolloutMemory estimateRolloutMemory(const ModelConfig &c, int64_t dtypeBytes,
                                    int64_t rows, int64_t tokensPerRow) {
  RolloutMemory m;
  double perToken = 2.0 * double(c.numHiddenLayers) *
                    double(c.numKeyValueHeads * c.headDimension()) *
                    double(dtypeBytes);
  m.kvCache = double(rows) * double(tokensPerRow) * perToken;
  // The step's logits, their softmax and log-softmax in float32.
  m.logits = 3.0 * 4.0 * double(rows) * double(c.vocabSize);
  return m;
}

void checkRolloutMemory(const TrainerState &s, int64_t rlIndex,
                        int64_t numPrompts, int64_t promptTokens) {
  if (s.device().type() != at::kCPU || numPrompts <= 0)
    return;
  double available = availableHostMemory();
  if (available <= 0)
    return;
  const RolloutSpec &r = s.cfg.rollout;
  int64_t rows = numPrompts * rowsPerPrompt(r);
  const ModelConfig &c = s.models.policy->config();
  int64_t dtypeBytes = static_cast<int64_t>(
      c10::elementSize(s.models.policy->parameters().front().scalar_type()));
  RolloutMemory m = estimateRolloutMemory(
      c, dtypeBytes, rows, promptTokens + r.maxTokens);
  if (m.total() <= available)
    return;
  std::ostringstream msg;
  msg << "RL step " << rlIndex + 1 << ": the rollouts need at least about "
      << gib(m.total()) << " (" << rows << " rows = " << numPrompts
      << " prompts x " << rowsPerPrompt(r) << ", " << promptTokens
      << " prompt + " << r.maxTokens << " new tokens each: KV cache "
      << gib(m.kvCache) << ", logits " << gib(m.logits) << "), more than the "
      << gib(available)
      << " of memory available; lower prompts, the rollouts per prompt or "
         "max_tokens";
  throw TrainError(msg.str());
}

} // namespace cac::rt::train
