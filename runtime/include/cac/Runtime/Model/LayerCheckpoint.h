//===- LayerCheckpoint.h - A layer recomputed in backward -------*- C++ -*-===//
//
// Activation checkpointing of one decoder layer: its forward keeps only the
// layer's inputs, its backward runs the layer again with autograd recording
// and differentiates that (PyTorch's reentrant torch.utils.checkpoint).
// TransformerLM::setActivationCheckpointing routes every layer through it.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_LAYERCHECKPOINT_H
#define CAC_RUNTIME_MODEL_LAYERCHECKPOINT_H

#include "cac/Runtime/Model/Transformer.h"

namespace cac::rt {

/// \p layer's output for \p x [B, T, H] (cos, sin and the mask bias as
/// DecoderLayerImpl::forward takes them, no cache) with the same value and
/// gradients as layer(x, ...), but whose graph keeps only the inputs: the
/// backward pass runs the layer again and differentiates it with respect to
/// \p x and the layer's parameters that need a gradient. The rotary tables
/// and the bias get no gradient. Not twice differentiable.
at::Tensor checkpointedLayer(DecoderLayer &layer, const at::Tensor &x,
                             const at::Tensor &cos, const at::Tensor &sin,
                             const at::Tensor &bias);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_LAYERCHECKPOINT_H
