//===- Architectures.cpp - Public model shapes for random models ----------===//
//
// Each entry is the config.json of the public checkpoint: sizes, heads,
// RoPE, norms, tying and biases. Weights are never part of it.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Architectures.h"

namespace cac::rt {

namespace {

struct Entry {
  const char *name;
  ModelConfig (*make)();
};

ModelConfig qwen25(int64_t hidden, int64_t layers, int64_t heads,
                   int64_t ffn) {
  ModelConfig c;
  c.modelType = "qwen2";
  c.vocabSize = 151936;
  c.hiddenSize = hidden;
  c.intermediateSize = ffn;
  c.numHiddenLayers = layers;
  c.numAttentionHeads = heads;
  c.numKeyValueHeads = 2;
  c.maxPositionEmbeddings = 32768;
  c.rmsNormEps = 1e-6;
  c.ropeTheta = 1000000.0;
  c.tieWordEmbeddings = true;
  c.attentionBias = true; // qwen2's q/k/v projections
  return c;
}

ModelConfig llama32_1b() {
  ModelConfig c;
  c.modelType = "llama";
  c.vocabSize = 128256;
  c.hiddenSize = 2048;
  c.intermediateSize = 8192;
  c.numHiddenLayers = 16;
  c.numAttentionHeads = 32;
  c.numKeyValueHeads = 8;
  c.headDim = 64;
  c.maxPositionEmbeddings = 131072;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 500000.0;
  c.ropeScaling.type = "llama3";
  c.ropeScaling.factor = 32.0;
  c.ropeScaling.lowFreqFactor = 1.0;
  c.ropeScaling.highFreqFactor = 4.0;
  c.ropeScaling.originalMaxPositionEmbeddings = 8192;
  c.tieWordEmbeddings = true;
  return c;
}

const Entry kEntries[] = {
    {"qwen2.5-0.5b", [] { return qwen25(896, 24, 14, 4864); }},
    {"qwen2.5-1.5b", [] { return qwen25(1536, 28, 12, 8960); }},
    {"llama-3.2-1b", llama32_1b},
};

} // namespace

const std::vector<std::string> &publicArchitectureNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Entry &e : kEntries)
      v.push_back(e.name);
    return v;
  }();
  return names;
}

std::optional<ModelConfig> publicArchitecture(const std::string &name) {
  for (const Entry &e : kEntries)
    if (name == e.name)
      return e.make();
  return std::nullopt;
}

} // namespace cac::rt
