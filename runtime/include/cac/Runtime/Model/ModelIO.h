//===- ModelIO.h - Loading and saving Hugging Face model folders -*- C++ -*-===//
//
// A model folder is what Hugging Face writes: `config.json` plus either
// `model.safetensors` or shards listed by `model.safetensors.index.json`
// (`{"weight_map": {tensor name: shard file}}`). Tensors carry HF names and
// are converted to the parameters' dtype while loading; every tensor that is
// missing, unexpected or of the wrong shape is reported by name.
//
// loadPretrained allocates the parameters once, in the target dtype on the
// target device, after checking that they fit there, and reads the files
// tensor by tensor into them: the host holds at most one tensor's stored
// bytes besides the parameters themselves (none for a CPU target in the
// stored dtype).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_MODELIO_H
#define CAC_RUNTIME_MODEL_MODELIO_H

#include "cac/Runtime/Model/Safetensors.h"
#include "cac/Runtime/Model/Transformer.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cac::rt {

/// What a weight load matched.
struct LoadReport {
  /// Parameters filled from the files.
  std::vector<std::string> loaded;
  /// Model parameters no file provides.
  std::vector<std::string> missing;
  /// File tensors the model has no parameter for.
  std::vector<std::string> unexpected;
  /// "name: file [a, b] vs model [c, d]" for tensors of the wrong shape.
  std::vector<std::string> mismatched;
  /// File tensors deliberately skipped (lm_head.weight of a tied model,
  /// rotary inv_freq buffers).
  std::vector<std::string> ignored;
  /// Parameters initialized fresh on purpose (a value head requested for a
  /// policy checkpoint that has none).
  std::vector<std::string> initialized;
  /// The largest host buffer one tensor passed through on its way into its
  /// parameter (its stored bytes); 0 when every tensor was read in place.
  uint64_t largestStagingBytes = 0;

  bool ok() const {
    return missing.empty() && unexpected.empty() && mismatched.empty();
  }
  /// One line per non-empty category, names listed (long lists elided).
  std::string summary() const;
};

/// Whether loadPretrained gives the model a value head.
enum class ValueHeadMode {
  /// Exactly when the files contain `value_head.weight`.
  Auto,
  /// Always; initialized fresh when the files have none.
  With,
  /// Never; `value_head.*` tensors in the files are unexpected.
  Without,
};

/// The memory still free on a device (bytes), -1 where it cannot be told.
using AvailableMemoryFn = std::function<double(const torch::Device &)>;

/// Options of loadPretrained.
struct LoadOptions {
  /// Throw when the report is not ok() (otherwise return it).
  bool strict = true;
  ValueHeadMode valueHead = ValueHeadMode::Auto;
  /// Where and in which dtype the parameters are allocated and loaded
  /// (default: CPU, float32). A dtype the device cannot run
  /// (checkModelDtype) is refused before anything is read.
  std::optional<torch::Device> device;
  std::optional<at::ScalarType> dtype;
  /// What the target device has free. Unset: availableHostMemory() for the
  /// CPU, unknown (no check) elsewhere; cac-run passes the trainer's
  /// availableMemory, which reads a CUDA device's free memory.
  AvailableMemoryFn availableMemory;
};

/// The bytes of the parameters of a model of \p config (with a value head
/// if \p valueHead) in \p dtype.
double parameterBytes(const ModelConfig &config, bool valueHead,
                      at::ScalarType dtype);

/// Where each tensor of a model folder lives: reads
/// `model.safetensors.index.json` if present, else lists
/// `model.safetensors`. Throws naming the folder if neither exists, the index
/// is malformed, or a shard is missing.
std::map<std::string, std::filesystem::path>
weightFiles(const std::filesystem::path &folder);

/// Fills \p model's parameters from the safetensors of \p folder. With
/// \p strict a non-ok report throws std::runtime_error listing the problems
/// by name (the parameters that did match are loaded either way).
LoadReport loadWeights(TransformerLMImpl &model,
                       const std::filesystem::path &folder,
                       bool strict = true);

/// Fills \p model's parameters from tensors in memory (HF names).
LoadReport loadWeights(TransformerLMImpl &model, const NamedTensors &tensors,
                       bool strict = true,
                       const std::string &source = "state dict");

/// Builds a model from `folder/config.json` and loads its weights. Throws,
/// before allocating, naming the folder, the bytes needed and the bytes
/// available, when the parameters would not fit on the target device.
/// Parameters no file provides (with strict off) and a requested value head
/// the files lack are initialized as initWeights does.
TransformerLM loadPretrained(const std::filesystem::path &folder,
                             const LoadOptions &options = {},
                             LoadReport *report = nullptr);

/// The parameters by HF name (detached views, not copies).
NamedTensors stateDict(const TransformerLMImpl &model);

/// Writes `folder/config.json` and `folder/model.safetensors` (each
/// atomically), creating the folder. Tensors are stored in \p dtype if given,
/// else in the parameters' dtype. loadPretrained reads the folder back.
void savePretrained(const TransformerLMImpl &model,
                    const std::filesystem::path &folder,
                    std::optional<at::ScalarType> dtype = std::nullopt);

/// Copies the tokenizer files of a HF folder (tokenizer.json,
/// tokenizer_config.json, special_tokens_map.json, generation_config.json;
/// those present) into \p to.
void copyTokenizerFiles(const std::filesystem::path &from,
                        const std::filesystem::path &to);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_MODELIO_H
