//===- ChunkedLogProbs.cpp - Log-probabilities without full logits --------===//
//
// A custom autograd function: forward keeps only the inputs (the hidden
// rows, the head's weight, the targets); backward recomputes each chunk's
// logits. Each chunk runs the same operations as tokenLogProbs on the full
// logits (matmul in the weight's dtype, to float32, divide by the
// temperature, log_softmax, gather), and backward the same as autograd of
// those, so values and gradients differ from the full path only by the
// rounding of the per-chunk sums of d/d weight.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/ChunkedLogProbs.h"
#include "cac/Runtime/Model/ShapeString.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <stdexcept>

namespace cac::rt {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool scales(double temperature) {
  return temperature > 0 && temperature != 1.0;
}

/// The float32 logits of \p hidden [n, H] under \p weight [V, H], divided
/// by \p temperature as tokenLogProbs divides them.
at::Tensor scaledLogits(const at::Tensor &hidden, const at::Tensor &weight,
                        double temperature) {
  at::Tensor l = at::matmul(hidden, weight.t()).to(at::kFloat);
  return scales(temperature) ? l / temperature : l;
}

struct ChunkedLogProbsFn : torch::autograd::Function<ChunkedLogProbsFn> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &hidden,
                            const at::Tensor &weight, const at::Tensor &targets,
                            double temperature, int64_t chunkRows) {
    int64_t n = hidden.size(0);
    at::Tensor out = at::empty({n}, hidden.options().dtype(at::kFloat));
    for (int64_t s = 0; s < n; s += chunkRows) {
      int64_t k = std::min(chunkRows, n - s);
      at::Tensor l = scaledLogits(hidden.narrow(0, s, k), weight, temperature);
      out.narrow(0, s, k).copy_(
          at::log_softmax(l, -1)
              .gather(-1, targets.narrow(0, s, k).unsqueeze(-1))
              .squeeze(-1));
    }
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunkRows"] = chunkRows;
    return out;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1],
                     &targets = saved[2];
    double temperature = ctx->saved_data["temperature"].toDouble();
    int64_t chunkRows = ctx->saved_data["chunkRows"].toInt();
    bool wantHidden = ctx->needs_input_grad(0);
    bool wantWeight = ctx->needs_input_grad(1);
    at::Tensor g = grads[0];
    at::Tensor gradHidden, gradWeight;
    if (!wantHidden && !wantWeight)
      return {gradHidden, gradWeight, at::Tensor(), at::Tensor(), at::Tensor()};
    if (wantHidden)
      gradHidden = at::empty_like(hidden);
    // d/d weight sums over every row: in float32 whatever the weight's
    // dtype, so that the chunks' partial sums round once.
    if (wantWeight)
      gradWeight =
          at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    int64_t n = hidden.size(0);
    for (int64_t s = 0; s < n; s += chunkRows) {
      int64_t k = std::min(chunkRows, n - s);
      at::Tensor h = hidden.narrow(0, s, k);
      at::Tensor gk = g.narrow(0, s, k).unsqueeze(-1);
      // Autograd of log_softmax(l).gather(t): onehot(t) * g - softmax(l) * g.
      at::Tensor dl = at::log_softmax(scaledLogits(h, weight, temperature), -1)
                          .exp_()
                          .mul_(-gk);
      dl.scatter_add_(-1, targets.narrow(0, s, k).unsqueeze(-1), gk);
      if (scales(temperature))
        dl.div_(temperature);
      dl = dl.to(weight.scalar_type());
      if (wantHidden)
        gradHidden.narrow(0, s, k).copy_(at::matmul(dl, weight));
      if (wantWeight) {
        if (weight.scalar_type() == at::kFloat)
          gradWeight.addmm_(dl.t(), h);
        else
          gradWeight.add_(at::matmul(dl.t(), h));
      }
    }
    if (wantWeight)
      gradWeight = gradWeight.to(weight.scalar_type());
    return {gradHidden, gradWeight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

} // namespace

int64_t logProbChunkRows(int64_t vocabSize, int64_t budgetBytes) {
  int64_t row = std::max<int64_t>(vocabSize, 1) * 4;
  return std::max<int64_t>(budgetBytes / row, 1);
}

at::Tensor chunkedTokenLogProbs(const at::Tensor &hidden,
                                const at::Tensor &weight,
                                const at::Tensor &targets, double temperature,
                                int64_t chunkRows) {
  if (hidden.dim() != 2 || weight.dim() != 2 || targets.dim() != 1 ||
      hidden.size(1) != weight.size(1) || targets.size(0) != hidden.size(0))
    throw std::runtime_error("chunkedTokenLogProbs: hidden " +
                             shapeString(hidden.sizes()) + ", head weight " +
                             shapeString(weight.sizes()) + " and targets " +
                             shapeString(targets.sizes()) + " do not match");
  if (hidden.scalar_type() != weight.scalar_type())
    throw std::runtime_error(
        "chunkedTokenLogProbs: hidden states and head weight differ in dtype");
  if (chunkRows < 1)
    throw std::runtime_error("chunkedTokenLogProbs: chunk rows " +
                             std::to_string(chunkRows) + " < 1");
  at::Tensor t = targets.to(hidden.device(), at::kLong);
  return ChunkedLogProbsFn::apply(hidden, weight, t, temperature, chunkRows);
}

} // namespace cac::rt
