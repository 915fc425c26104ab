//===- LayerCheckpoint.cpp - Recomputing a decoder layer in backward ------===//
//
// A custom autograd function whose inputs are the layer's input, the rotary
// tables, the mask bias and the layer's parameters (so that the engine
// accumulates the parameters' gradients as it would without the
// checkpoint, tied or shared ones included). Its forward runs under no-grad
// (custom functions' forwards do), so the layer's intermediates are freed
// as the layer returns; only the inputs are saved. The layer has no
// randomness (no dropout), so the second forward computes the same values.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/LayerCheckpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace cac::rt {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Keeps the layer alive in the graph's saved data (an IValue capsule).
struct LayerHolder : torch::CustomClassHolder {
  explicit LayerHolder(DecoderLayer layer) : layer(std::move(layer)) {}
  DecoderLayer layer;
};

/// The gradient slots before the parameters': x, cos, sin, bias.
constexpr size_t kLeading = 4;

struct LayerCheckpointFn : torch::autograd::Function<LayerCheckpointFn> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x,
                            const at::Tensor &cos, const at::Tensor &sin,
                            const at::Tensor &bias, at::TensorList params,
                            DecoderLayer layer) {
    (void)params; // inputs only so that their gradients have edges
    ctx->save_for_backward({x, cos, sin, bias});
    ctx->saved_data["layer"] =
        at::IValue::make_capsule(c10::make_intrusive<LayerHolder>(layer));
    return layer->forward(x, cos, sin, bias, nullptr);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    auto holder = c10::static_intrusive_pointer_cast<LayerHolder>(
        ctx->saved_data["layer"].toCapsule());
    DecoderLayer &layer = holder->layer;
    std::vector<at::Tensor> params = layer->parameters();
    bool wantX = ctx->needs_input_grad(0);
    // The gradients asked for: x's and those of the parameters that need
    // one, in this order.
    variable_list inputs;
    std::vector<size_t> slot;
    at::Tensor x = saved[0].detach();
    if (wantX) {
      x.requires_grad_(true);
      inputs.push_back(x);
      slot.push_back(0);
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].requires_grad() && ctx->needs_input_grad(kLeading + i)) {
        inputs.push_back(params[i]);
        slot.push_back(kLeading + i);
      }
    // One slot per forward argument: x, cos, sin, bias, each parameter and
    // the layer.
    variable_list out(kLeading + params.size() + 1);
    if (inputs.empty())
      return out;
    at::Tensor y;
    {
      at::AutoGradMode record(true);
      y = layer->forward(x, saved[1], saved[2], saved[3], nullptr);
    }
    variable_list g = torch::autograd::grad({y}, inputs, {grads[0]},
                                            /*retain_graph=*/false,
                                            /*create_graph=*/false,
                                            /*allow_unused=*/true);
    for (size_t k = 0; k < g.size(); ++k)
      out[slot[k]] = g[k];
    return out;
  }
};

} // namespace

at::Tensor checkpointedLayer(DecoderLayer &layer, const at::Tensor &x,
                             const at::Tensor &cos, const at::Tensor &sin,
                             const at::Tensor &bias) {
  std::vector<at::Tensor> params = layer->parameters();
  return LayerCheckpointFn::apply(x, cos, sin, bias, at::TensorList(params),
                                  layer);
}

} // namespace cac::rt
