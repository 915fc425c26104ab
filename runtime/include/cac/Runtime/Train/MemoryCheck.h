//===- MemoryCheck.h - What a rollout step holds in memory ------*- C++ -*-===//
//
// The estimate behind the refusal of a rollout step that cannot fit
// (docs/reliability.md, "Bounded inputs").
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_MEMORYCHECK_H
#define CAC_RUNTIME_TRAIN_MEMORYCHECK_H

#include "cac/Runtime/Model/Config.h"

#include <cstdint>

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

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_MEMORYCHECK_H
