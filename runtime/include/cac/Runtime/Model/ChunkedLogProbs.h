//===- ChunkedLogProbs.h - Log-probs without full logits -------*- C++ -*-===//
//
// The log-probability of a chosen token under an LM head, computed a chunk
// of rows at a time: log_softmax(hidden @ weight^T / temperature)[target]
// without the [rows, vocab] logits of every row at once. At a real
// vocabulary those logits dominate an update's memory (Qwen2.5's 151936
// tokens over one minibatch of 32 x 576 positions: 11 GB per float32 copy,
// and autograd keeps several).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHUNKEDLOGPROBS_H
#define CAC_RUNTIME_MODEL_CHUNKEDLOGPROBS_H

#include <ATen/ATen.h>

#include <cstdint>

namespace cac::rt {

/// The bytes of one chunk's float32 logits: a chunk holds about three such
/// tensors at once (the logits, their log-softmax and, backward, the
/// gradient), so the head's transient memory stays under 1 GiB whatever the
/// batch, and a chunk of a 152K vocabulary still has ~440 rows, enough for
/// the matmul to run at full speed.
constexpr int64_t kLogProbChunkBytes = int64_t(256) << 20;

/// The rows of one chunk: the most whose float32 logits over \p vocabSize
/// tokens fit in \p budgetBytes, at least 1.
int64_t logProbChunkRows(int64_t vocabSize,
                         int64_t budgetBytes = kLogProbChunkBytes);

/// Log-probabilities [N] (float32) of \p targets [N] (int64) under the
/// logits hidden @ weight^T of \p hidden [N, H] and the head \p weight
/// [V, H] (same dtype), divided by \p temperature where it is positive and
/// not 1: what tokenLogProbs computes from the full logits, \p chunkRows
/// rows at a time. The logits are taken to float32 before the temperature
/// and the log-softmax, as tokenLogProbs does.
///
/// Differentiable in \p hidden and \p weight: backward recomputes each
/// chunk's logits and gives d/d hidden and d/d weight (accumulated over the
/// chunks in float32), so no [N, V] tensor is kept between forward and
/// backward either. Throws std::runtime_error on mismatched shapes.
at::Tensor chunkedTokenLogProbs(const at::Tensor &hidden,
                                const at::Tensor &weight,
                                const at::Tensor &targets, double temperature,
                                int64_t chunkRows);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CHUNKEDLOGPROBS_H
