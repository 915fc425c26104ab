//===- MemoryCheck.h - What training and a rollout step hold ----*- C++ -*-===//
//
// The estimates behind the refusal of a run or a rollout step that cannot
// fit (docs/reliability.md, "Bounded inputs").
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_MEMORYCHECK_H
#define CAC_RUNTIME_TRAIN_MEMORYCHECK_H

#include "cac/Runtime/Model/Config.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace cac::rt::train {

/// The memory a rollout step holds at once (bytes): every row's KV cache at
/// full length and one step's logits (with their softmax and log-softmax).
struct RolloutMemory {
  double kvCache = 0, logits = 0;
  double total() const { return kvCache + logits; }
};

/// The estimate for \p rows rows of up to \p tokensPerRow tokens of a model
/// with config \p c whose weights have \p dtypeBytes bytes.
RolloutMemory estimateRolloutMemory(const ModelConfig &c, int64_t dtypeBytes,
                                    int64_t rows, int64_t tokensPerRow);

/// The memory training adds to a model's weights (bytes): its gradients,
/// AdamW's two moments (all in the weights' dtype) and, where the run reads
/// logp_ref, the reference policy's copy. Activations are not counted: the
/// sum is a lower bound.
struct TrainingMemory {
  double gradients = 0, moments = 0, reference = 0;
  double total() const { return gradients + moments + reference; }
};

/// The estimate for a model of \p parameters parameters of \p dtypeBytes
/// bytes each; \p reference adds a frozen copy of it.
TrainingMemory estimateTrainingMemory(int64_t parameters, int64_t dtypeBytes,
                                      bool reference);

/// The memory this process can still allocate on \p device (bytes), -1
/// where it cannot be read. The CPU: /proc/meminfo's MemAvailable, or less
/// where a cgroup (v2, a scheduler's job) limits the process. A CUDA device:
/// the driver's free memory (cuMemGetInfo), which counts what LibTorch's
/// caching allocator holds as used.
double availableMemory(const c10::Device &device);

/// "1.5 GiB": the unit every message of these checks uses.
std::string formatGiB(double bytes);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_MEMORYCHECK_H
