//===- CompiledObjective.h - A .cac objective as the update's loss -*- C++ -*-===//
//
// An objective compiled by `cac compile --bundle` (docs/language.md,
// "Objectives") gives, for a minibatch, per-sequence sums of its weighted
// loss, the counts its aggregation divides by, and the gradient of the sums
// with respect to its differentiable input (`grad_<wrt>`), all computed by the
// compiled kernels. This class runs it and turns the result into a LibTorch
// loss whose backward pass puts that gradient on the model's tensor: no
// hand-written backward for the objective.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_COMPILEDOBJECTIVE_H
#define CAC_RUNTIME_TRAIN_COMPILEDOBJECTIVE_H

#include "cac/Runtime/Kernels/Bundle.h"

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>

namespace cac::rt::train {

class CompiledObjective {
public:
  /// Throws BundleError when the bundle is not an objective (no outputs
  /// `loss`, `loss_count` and one `grad_<input>`).
  explicit CompiledObjective(std::shared_ptr<const Bundle> bundle);

  const BundleEstimator &bundle() const { return estimator_; }
  /// The input the loss is differentiated by (e.g. "logp_new").
  const std::string &wrt() const { return wrt_; }
  /// A seq loss (averaged over the sequences) rather than a token loss.
  bool seqLoss() const { return seqLoss_; }

  struct Result {
    at::Tensor loss;      ///< 0-d, the aggregated loss (detached)
    at::Tensor grad;      ///< d loss / d wrt, laid out like the wrt input
    at::Tensor lossSum;   ///< [B] the kernels' per-sequence weighted sums
    at::Tensor lossCount; ///< [B] the elements that count, per sequence
    double normalizer = 1;
    TensorMap outputs;    ///< every output of the kernels, as they gave it
  };

  /// Runs the objective. `inputs` holds every input it declares, the wrt
  /// input's current value included (detached). The normaliser is the
  /// minibatch's own unless `normalizer` is given (a data-parallel worker
  /// passes the global one, so that the summed gradients are the global
  /// gradient).
  Result run(const TensorMap &inputs, const PackedBatch &batch,
             const ParamMap &params = {},
             std::optional<double> normalizer = std::nullopt) const;

  /// Divides \p r's loss and gradient by \p normalizer instead of the one
  /// it was run with (0: nothing counts, both become 0). A data-parallel
  /// worker runs with its own minibatch normaliser, then sets the sum of
  /// every worker's (the one-process normaliser), so that the summed
  /// gradients are the one-process gradient.
  void setNormalizer(Result &r, double normalizer) const;

  /// The normaliser of the aggregation `aggregation` (the parameter's code:
  /// 0 token-mean, 1 seq-mean-token-mean, 2 seq-mean-token-sum,
  /// 3 seq-mean-token-sum-norm): the sum of `lossCount` for token-mean and
  /// seq losses, else the number of sequences with `lossCount` > 0, as
  /// verl leaves fully masked sequences out (cac::objectiveNormalizer).
  double normalizer(const at::Tensor &lossCount, int aggregation) const;

  /// A scalar whose value is `r.loss` and whose gradient with respect to
  /// `wrtWithGrad` (the model's tensor of the wrt input, same layout) is
  /// `r.grad`: call backward() on it (alone or added to other losses).
  static at::Tensor surrogate(const at::Tensor &wrtWithGrad, const Result &r);

private:
  BundleEstimator estimator_;
  std::string wrt_;
  bool seqLoss_ = false;
};

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_COMPILEDOBJECTIVE_H
