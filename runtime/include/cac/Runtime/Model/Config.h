//===- Config.h - Transformer configuration (HF config.json) ----*- C++ -*-===//
//
// The hyper-parameters of a Llama/Qwen2-family decoder, read from and written
// to a Hugging Face `config.json`.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CONFIG_H
#define CAC_RUNTIME_MODEL_CONFIG_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cac::rt {

/// RoPE frequency scaling (`rope_scaling` of config.json).
struct RopeScaling {
  /// "none", "linear" or "llama3".
  std::string type = "none";
  double factor = 1.0;
  /// llama3 only.
  double lowFreqFactor = 1.0, highFreqFactor = 4.0;
  int64_t originalMaxPositionEmbeddings = 8192;
};

/// A decoder-only transformer of the Llama/Qwen2 family.
struct ModelConfig {
  /// "llama" or "qwen2".
  std::string modelType = "llama";
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numHiddenLayers = 0;
  int64_t numAttentionHeads = 0;
  int64_t numKeyValueHeads = 0;
  /// 0: hiddenSize / numAttentionHeads.
  int64_t headDim = 0;
  int64_t maxPositionEmbeddings = 2048;
  double rmsNormEps = 1e-6;
  double ropeTheta = 10000.0;
  RopeScaling ropeScaling;
  bool tieWordEmbeddings = false;
  /// Bias on q/k/v projections (always for qwen2; `attention_bias` for
  /// llama). The output projection never has one.
  bool attentionBias = false;
  /// Bias on the MLP projections (`mlp_bias`, llama only).
  bool mlpBias = false;
  std::optional<int64_t> bosTokenId;
  std::vector<int64_t> eosTokenIds;
  std::optional<int64_t> padTokenId;

  /// The per-head dimension.
  int64_t headDimension() const {
    return headDim > 0 ? headDim : hiddenSize / numAttentionHeads;
  }

  /// Parses a config.json object; \p source names it in errors. Missing or
  /// invalid required fields, unsupported model types, activations or RoPE
  /// scalings throw std::runtime_error naming the field.
  static ModelConfig fromJson(const nlohmann::json &j,
                              const std::string &source = "config.json");
  /// Reads a config.json file.
  static ModelConfig fromFile(const std::filesystem::path &path);
  /// The built-in small model for the embedded arithmetic task: hidden 128,
  /// 4 layers, 4 heads, 2 KV heads, SwiGLU 384, tied embeddings.
  static ModelConfig builtinSmall(int64_t vocabSize);

  /// The number of weights of the model this config describes (embeddings,
  /// every layer's projections, biases and norms, the final norm, an untied
  /// output head), as a double: a config.json's products can overflow
  /// int64.
  double numParameters() const;

  /// Throws std::runtime_error (prefixed with \p source) if the numbers are
  /// inconsistent (non-positive sizes, heads not dividing, odd head dim).
  void validate(const std::string &source = "config") const;
  /// The config.json form (loadable by fromJson and by Hugging Face).
  nlohmann::json toJson() const;

  bool operator==(const ModelConfig &o) const {
    return toJson() == o.toJson();
  }
  bool operator!=(const ModelConfig &o) const { return !(*this == o); }
};

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CONFIG_H
