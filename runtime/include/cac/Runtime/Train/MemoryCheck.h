//===- MemoryCheck.h - What training and a rollout step hold ----*- C++ -*-===//
//
// The estimates behind the refusal of a run or a rollout step that cannot
// fit (docs/reliability.md, "Bounded inputs").
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_MEMORYCHECK_H
#define CAC_RUNTIME_TRAIN_MEMORYCHECK_H

#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Support/HostMemory.h"

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

/// The memory training adds to a model's weights (bytes) besides the
/// activations (estimateActivationMemory): its gradients, AdamW's two
/// moments (all in the weights' dtype) and, where the run reads logp_ref,
/// the reference policy's copy.
struct TrainingMemory {
  double gradients = 0, moments = 0, reference = 0;
  double total() const { return gradients + moments + reference; }
};

/// The estimate for a model of \p parameters parameters of \p dtypeBytes
/// bytes each; \p reference adds a frozen copy of it.
TrainingMemory estimateTrainingMemory(int64_t parameters, int64_t dtypeBytes,
                                      bool reference);

/// The activations of the update's forward and backward pass over one
/// minibatch (bytes): what TransformerLM's forward keeps for the backward
/// pass, layer by layer, and what the largest steps add while they run.
struct ActivationMemory {
  /// Every layer's saved tensors: its inputs and norms, queries, keys,
  /// values and the attention's output, the attention probabilities
  /// (float32, rows x heads x tokens^2) and the MLP's four intermediates.
  double layers = 0;
  /// One layer's attention scores while they are computed and while their
  /// gradient is (two score tensors besides the probabilities).
  double attention = 0;
  /// One chunk of rows' logits over the vocabulary in float32 and their
  /// log-softmax (logProbChunkRows: the LM head runs a chunk at a time,
  /// forward and backward); 0 for a critic model.
  double logits = 0;
  /// The embeddings, the final norm, the rotary tables and the mask bias.
  double other = 0;
  double total() const { return layers + attention + logits + other; }
};

/// The estimate for a minibatch of \p rows rows padded to \p tokens tokens
/// through a model with config \p c computing in a dtype of \p dtypeBytes
/// bytes (its weights', or update_dtype's); \p logits counts the
/// language-model head (the policy) or not (a critic model's value head);
/// \p checkpointed, the layers keep only their inputs and one layer is
/// recomputed at a time (activation_checkpointing).
ActivationMemory estimateActivationMemory(const ModelConfig &c,
                                          int64_t dtypeBytes, int64_t rows,
                                          int64_t tokens, bool logits,
                                          bool checkpointed = false);

/// The parameters' dtype of every model the runtime trains (float32).
constexpr int64_t kParameterBytes = 4;

/// What a pass computing in a dtype of \p dtypeBytes bytes over float32
/// weights adds (bytes): the weights' casts, every layer's (\p
/// checkpointed: one layer's) and the LM head's; 0 in float32.
double weightCastMemory(const ModelConfig &c, int64_t dtypeBytes,
                        bool checkpointed);

/// The memory this process can still allocate on \p device (bytes), -1
/// where it cannot be read. The CPU: availableHostMemory(). A CUDA device:
/// the driver's free memory (cuMemGetInfo), which counts what LibTorch's
/// caching allocator holds as used.
double availableMemory(const c10::Device &device);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_MEMORYCHECK_H
