//===- Architectures.h - Public model shapes for random models --*- C++ -*-===//
//
// The published architectures of a few open models (their config.json
// numbers), so that tests and benchmarks can build a model of the real
// shape with random weights where no weights can be downloaded:
// `random("qwen2.5-0.5b", layers = 2)` in a training file.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_ARCHITECTURES_H
#define CAC_RUNTIME_MODEL_ARCHITECTURES_H

#include "cac/Runtime/Model/Config.h"

#include <optional>
#include <string>
#include <vector>

namespace cac::rt {

/// The names publicArchitecture knows, in the order docs list them.
const std::vector<std::string> &publicArchitectureNames();

/// The config of the public model \p name (e.g. "qwen2.5-0.5b"), every
/// layer included and no special token ids; nullopt for an unknown name.
std::optional<ModelConfig> publicArchitecture(const std::string &name);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_ARCHITECTURES_H
