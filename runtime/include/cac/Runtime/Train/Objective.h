//===- Objective.h - PPO surrogate, aggregation, KL, value loss -*- C++ -*-===//
//
// The per-token pieces of the policy and critic losses (estimators.md §0.2
// and §1.1) on packed tensors: one entry per response token, sequences one
// after the other, `tokenSeq[i]` the sequence of token i.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_OBJECTIVE_H
#define CAC_RUNTIME_TRAIN_OBJECTIVE_H

#include "cac/Runtime/Train/TrainFile.h"

#include <ATen/ATen.h>

namespace cac::rt::train {

/// f(w, A) = min(w*A, clip(w, 1-epsLow, 1+epsHigh)*A), elementwise. The
/// gradient flows through w where the unclipped term is the minimum.
at::Tensor clippedSurrogate(const at::Tensor &ratio, const at::Tensor &adv,
                            double epsLow, double epsHigh);

/// Where clippedSurrogate cuts the gradient (the clipped term is strictly
/// smaller), as a bool tensor.
at::Tensor clippedMask(const at::Tensor &ratio, const at::Tensor &adv,
                       double epsLow, double epsHigh);

/// Reduces per-token values \p x [N] of \p numSeqs sequences (token i belongs
/// to sequence \p tokenSeq[i], int64) to a scalar:
///   token-mean              sum x / N
///   seq-mean-token-mean     (1/B) sum_i (1/T_i) sum_t x
///   seq-mean-token-sum      (1/B) sum_i sum_t x
///   seq-mean-token-sum-norm (1/B) sum_i sum_t x / normLength
/// Sequences without tokens count in B but contribute nothing.
at::Tensor aggregate(const at::Tensor &x, const at::Tensor &tokenSeq,
                     int64_t numSeqs, Aggregation mode, double normLength = 1);

/// aggregate() of \p x * \p weight with the weights as the mask of the
/// compiled objectives (docs/language.md, Objectives): token-mean divides by
/// the sum of the weights instead of N (SPO's masked token-mean,
/// estimators.md §0.2), seq-mean-token-mean divides each sequence's sum by
/// its weight sum, and the seq-mean modes count in B only the sequences whose
/// weights sum to more than 0 (verl's agg_loss: its seq_mask). A batch whose
/// weights are all zero gives 0 (with a zero gradient).
at::Tensor aggregateMasked(const at::Tensor &x, const at::Tensor &weight,
                           const at::Tensor &tokenSeq, int64_t numSeqs,
                           Aggregation mode, double normLength);

/// Mean binary cross-entropy -[R log v + (1 - R) log(1 - v)] of the success
/// probabilities \p prob against the rewards \p target in [0, 1] (SPPO's
/// critic loss); \p prob is clamped to [1e-6, 1 - 1e-6].
at::Tensor bceLoss(const at::Tensor &prob, const at::Tensor &target);

/// Per-token KL estimate of the current policy from the reference, with
/// d = logp - logpRef: k1 = d; k3 = exp(-d) + d - 1 (d clamped to ±20 and k3
/// to at most 10, as verl does).
at::Tensor klEstimate(const at::Tensor &logp, const at::Tensor &logpRef,
                      KlSpec::Kind kind);

/// Clipped value loss 0.5 * max((V - G)^2, (clip(V, V_old ± clip) - G)^2);
/// \p clip <= 0 gives the plain 0.5 * (V - G)^2.
at::Tensor valueLoss(const at::Tensor &values, const at::Tensor &oldValues,
                     const at::Tensor &returns, double clip);

/// (x - mean) / sqrt(var + 1e-8) over all of \p x (unbiased variance).
at::Tensor whiten(const at::Tensor &x);

/// whiten() with the mean and variance taken over the tokens where
/// \p weight is nonzero (SPO's code whitens over the masked tokens); applied
/// to every token.
at::Tensor whitenMasked(const at::Tensor &x, const at::Tensor &weight);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_OBJECTIVE_H
