//===- ModelDtype.h - The names of model dtypes -----------------*- C++ -*-===//
//
// The dtypes a model runs in, by name: one list for the training file's
// `rollout_dtype`, the Transformer's parseModelDtype and the benchmarks.
// Without LibTorch, so that the training-file reader (and its fuzz target)
// can check a name.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_MODELDTYPE_H
#define CAC_RUNTIME_MODEL_MODELDTYPE_H

#include <stdexcept>
#include <string>

namespace cac::rt {

/// The canonical name of the model dtype \p name: "float32" (for "float32",
/// "f32", "fp32"), "bfloat16" (for "bfloat16", "bf16") or "float16" (for
/// "float16", "f16", "fp16"). Throws std::runtime_error naming the accepted
/// names otherwise. Whether a device runs a dtype is checkModelDtype's
/// question (Transformer.h), asked once the device is known.
inline std::string canonicalModelDtype(const std::string &name) {
  if (name == "float32" || name == "f32" || name == "fp32")
    return "float32";
  if (name == "bfloat16" || name == "bf16")
    return "bfloat16";
  if (name == "float16" || name == "f16" || name == "fp16")
    return "float16";
  throw std::runtime_error(
      "unknown model dtype '" + name +
      "' (float32, bfloat16 or float16; also f32, fp32, bf16, f16, fp16)");
}

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_MODELDTYPE_H
