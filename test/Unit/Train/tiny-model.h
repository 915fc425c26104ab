//===- tiny-model.h - The decoder tests' model ------------------*- C++ -*-===//
//
// A two-layer model of a 24-token vocabulary, shared by the tests of the
// rollout decoder (rollouts-test.cpp) and of tool use (tool-use-test.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TEST_UNIT_TRAIN_TINY_MODEL_H
#define CAC_TEST_UNIT_TRAIN_TINY_MODEL_H

#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Model/Transformer.h"

#include <torch/utils.h>

#include <cstdint>

namespace cac::rt::test {

/// Initialized from torch's global generator seeded with \p seed; in eval
/// mode.
inline TransformerLM tinyDecoderModel(uint64_t seed = 7) {
  torch::manual_seed(seed);
  ModelConfig c;
  c.modelType = "llama";
  c.vocabSize = 24;
  c.hiddenSize = 16;
  c.intermediateSize = 32;
  c.numHiddenLayers = 2;
  c.numAttentionHeads = 2;
  c.numKeyValueHeads = 1;
  c.maxPositionEmbeddings = 64;
  c.rmsNormEps = 1e-5;
  c.tieWordEmbeddings = true;
  c.validate("test model");
  TransformerLM m(c, false);
  m->eval();
  return m;
}

} // namespace cac::rt::test

#endif // CAC_TEST_UNIT_TRAIN_TINY_MODEL_H
