//===- Objective.cpp - PPO surrogate, aggregation, KL, value loss ---------===//

#include "cac/Runtime/Train/Objective.h"

#include <stdexcept>

namespace cac::rt::train {

at::Tensor clippedSurrogate(const at::Tensor &ratio, const at::Tensor &adv,
                            double epsLow, double epsHigh) {
  at::Tensor clipped = at::clamp(ratio, 1.0 - epsLow, 1.0 + epsHigh);
  return at::minimum(ratio * adv, clipped * adv);
}

at::Tensor clippedMask(const at::Tensor &ratio, const at::Tensor &adv,
                       double epsLow, double epsHigh) {
  at::Tensor clipped = at::clamp(ratio, 1.0 - epsLow, 1.0 + epsHigh);
  return (clipped * adv) < (ratio * adv);
}

at::Tensor aggregate(const at::Tensor &x, const at::Tensor &tokenSeq,
                     int64_t numSeqs, Aggregation mode, double normLength) {
  if (x.dim() != 1 || tokenSeq.dim() != 1 || x.size(0) != tokenSeq.size(0))
    throw std::invalid_argument("aggregate: x and tokenSeq must be [N]");
  if (numSeqs <= 0 || x.size(0) == 0)
    return x.sum() * 0.0; // keeps the graph (and a zero gradient)
  if (mode == Aggregation::TokenMean)
    return x.sum() / static_cast<double>(x.size(0));
  at::Tensor idx = tokenSeq.to(at::kLong);
  at::Tensor perSeq = at::zeros({numSeqs}, x.options()).index_add(0, idx, x);
  switch (mode) {
  case Aggregation::SeqMeanTokenMean: {
    at::Tensor counts = at::zeros({numSeqs}, x.options())
                            .index_add(0, idx, at::ones_like(x, x.options()));
    return (perSeq / counts.clamp_min(1.0)).sum() /
           static_cast<double>(numSeqs);
  }
  case Aggregation::SeqMeanTokenSum:
    return perSeq.sum() / static_cast<double>(numSeqs);
  case Aggregation::SeqMeanTokenSumNorm:
    return perSeq.sum() / (static_cast<double>(numSeqs) * normLength);
  case Aggregation::TokenMean:
    break;
  }
  return x.mean();
}

at::Tensor aggregateMasked(const at::Tensor &x, const at::Tensor &weight,
                           const at::Tensor &tokenSeq, int64_t numSeqs,
                           Aggregation mode, double normLength) {
  if (weight.sizes() != x.sizes())
    throw std::invalid_argument("aggregateMasked: x and weight differ in size");
  at::Tensor xw = x * weight;
  if (x.size(0) == 0 || numSeqs <= 0)
    return xw.sum() * 0.0;
  if (mode == Aggregation::TokenMean)
    return xw.sum() / weight.sum().clamp_min(1.0);
  at::Tensor idx = tokenSeq.to(at::kLong);
  at::Tensor perSeq = at::zeros({numSeqs}, x.options()).index_add(0, idx, xw);
  at::Tensor wSum = at::zeros({numSeqs}, weight.options())
                        .index_add(0, idx, weight.detach());
  at::Tensor kept = wSum > 0;
  // A sequence the weights remove entirely neither adds nor counts in B, as
  // the compiled objectives' mask and verl's agg_loss (its seq_mask).
  double b = kept.sum().item<double>();
  if (b == 0)
    return xw.sum() * 0.0;
  switch (mode) {
  case Aggregation::SeqMeanTokenMean: {
    // The unkept sequences divide by 1, not 0: their sums are 0 anyway, and a
    // 0 / 0 there would put NaN into the gradient.
    at::Tensor den = at::where(kept, wSum, at::ones_like(wSum));
    return (perSeq / den.to(x.scalar_type())).sum() / b;
  }
  case Aggregation::SeqMeanTokenSum:
    return perSeq.sum() / b;
  case Aggregation::SeqMeanTokenSumNorm:
    return perSeq.sum() / (b * normLength);
  case Aggregation::TokenMean:
    break;
  }
  return xw.sum() / weight.sum().clamp_min(1.0);
}

at::Tensor bceLoss(const at::Tensor &prob, const at::Tensor &target) {
  at::Tensor v = prob.clamp(1e-6, 1.0 - 1e-6);
  return -(target * at::log(v) + (1.0 - target) * at::log(1.0 - v)).mean();
}

at::Tensor klEstimate(const at::Tensor &logp, const at::Tensor &logpRef,
                      KlSpec::Kind kind) {
  at::Tensor d = logp - logpRef;
  if (kind == KlSpec::Kind::K1)
    return d;
  if (kind == KlSpec::Kind::K3) {
    at::Tensor dc = at::clamp(d, -20.0, 20.0);
    return at::clamp(at::exp(-dc) + dc - 1.0, -10.0, 10.0);
  }
  return at::zeros_like(logp);
}

at::Tensor valueLoss(const at::Tensor &values, const at::Tensor &oldValues,
                     const at::Tensor &returns, double clip) {
  at::Tensor plain = (values - returns).pow(2);
  if (clip <= 0)
    return 0.5 * plain;
  at::Tensor vc = oldValues + at::clamp(values - oldValues, -clip, clip);
  return 0.5 * at::maximum(plain, (vc - returns).pow(2));
}

at::Tensor whiten(const at::Tensor &x) {
  if (x.numel() < 2)
    return x - x.mean();
  return (x - x.mean()) / at::sqrt(x.var() + 1e-8);
}

at::Tensor whitenMasked(const at::Tensor &x, const at::Tensor &weight) {
  at::Tensor sel = x.masked_select(weight != 0);
  if (sel.numel() < 2)
    return sel.numel() == 1 ? x - sel.mean() : x;
  return (x - sel.mean()) / at::sqrt(sel.var() + 1e-8);
}

} // namespace cac::rt::train
