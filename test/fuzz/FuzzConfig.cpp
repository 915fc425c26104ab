//===- FuzzConfig.cpp - libFuzzer target over config.json loading ----------===//
//
// cac-fuzz-config: feeds arbitrary bytes, as a model folder's config.json, to
// what loading a model does before it allocates anything:
// ModelConfig::fromFile (read, JSON parse, the fields and their types),
// validate() (sizes, heads, the memory the weights would take) and, for a
// config that passes, its config.json form again (toJson, which must read
// back to the same config). Errors are std::runtime_error naming the field;
// any other exception, a crash, a sanitizer report or a hang is a bug.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "cac/Runtime/Model/Config.h"

#include <cstdint>
#include <stdexcept>

using namespace cac::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cac::fuzz::MemFile file(data, size);
  ModelConfig config;
  try {
    config = ModelConfig::fromFile(file.path());
    config.validate("fuzz");
  } catch (const std::runtime_error &) {
    return 0;
  }
  (void)config.headDimension();
  // What savePretrained writes must load back as the same model.
  ModelConfig again = ModelConfig::fromJson(config.toJson(), "round trip");
  if (!(again == config))
    __builtin_trap();
  return 0;
}
