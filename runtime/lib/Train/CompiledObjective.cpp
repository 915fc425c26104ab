//===- CompiledObjective.cpp - A .cac objective as the update's loss ------===//

#include "cac/Runtime/Train/CompiledObjective.h"

using namespace cac::rt;
using namespace cac::rt::train;

CompiledObjective::CompiledObjective(std::shared_ptr<const Bundle> bundle)
    : estimator_(std::move(bundle)) {
  const Manifest &m = estimator_.manifest();
  bool hasLoss = false, hasCount = false;
  for (const BufferSpec &b : m.buffers) {
    if (b.role != BufferRole::Output)
      continue;
    if (b.name == "loss")
      hasLoss = true;
    else if (b.name == "loss_count")
      hasCount = true;
    else if (b.name.rfind("grad_", 0) == 0) {
      if (!wrt_.empty())
        throw BundleError("objective '" + m.estimator +
                          "' has two gradient outputs");
      wrt_ = b.name.substr(5);
    }
  }
  if (!hasLoss || !hasCount || wrt_.empty())
    throw BundleError("'" + m.estimator +
                      "' is not an objective: it has no outputs loss, "
                      "loss_count and grad_<input> (declare it with "
                      "`objective NAME { ... loss(INPUT) = ... }`)");
  // The loss's own domain: loss_count is per sequence in both cases; a
  // token loss declares the aggregation parameter, a seq loss does not.
  seqLoss_ = true;
  for (const std::string &p : estimator_.paramNames())
    if (p == "aggregation")
      seqLoss_ = false;
}

double CompiledObjective::normalizer(const at::Tensor &lossCount,
                                     int aggregation) const {
  if (seqLoss_ || aggregation == 0)
    return lossCount.sum().item<double>();
  // The sequences with an element that counts (verl's seq_mask).
  return (lossCount > 0).sum().item<double>();
}

CompiledObjective::Result
CompiledObjective::run(const TensorMap &inputs, const PackedBatch &batch,
                       const ParamMap &params,
                       std::optional<double> normalizer) const {
  TensorMap outs = estimator_.run(inputs, batch, params);
  Result r;
  r.lossSum = outs.at("loss");
  r.lossCount = outs.at("loss_count");
  int aggregation = 0;
  if (auto it = params.find("aggregation"); it != params.end())
    aggregation = int(it->second);
  else
    for (const auto &p : estimator_.manifest().params)
      if (p.name == "aggregation" && p.defaultValue)
        aggregation = int(*p.defaultValue);
  r.outputs = std::move(outs);
  setNormalizer(r, normalizer ? *normalizer
                              : this->normalizer(r.lossCount, aggregation));
  return r;
}

void CompiledObjective::setNormalizer(Result &r, double normalizer) const {
  r.normalizer = normalizer;
  // Nothing counts: the loss and its gradient are 0.
  double scale = normalizer > 0 ? 1.0 / normalizer : 0.0;
  r.loss = (r.lossSum.sum() * scale).detach();
  r.grad = (r.outputs.at("grad_" + wrt_) * scale).detach();
}

at::Tensor CompiledObjective::surrogate(const at::Tensor &wrtWithGrad,
                                        const Result &r) {
  at::Tensor g = r.grad.to(wrtWithGrad.scalar_type())
                     .to(wrtWithGrad.device())
                     .reshape(wrtWithGrad.sizes());
  at::Tensor linear = (wrtWithGrad * g).sum();
  // value: r.loss; gradient: g.
  return linear + (r.loss.to(linear.scalar_type()).to(linear.device()) -
                   linear.detach());
}
