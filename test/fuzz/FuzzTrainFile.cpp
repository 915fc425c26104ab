//===- FuzzTrainFile.cpp - libFuzzer target over the training file ---------===//
//
// cac-fuzz-trainfile: feeds arbitrary bytes to what loadTrainFile does with a
// training file's text (`cac-run FILE`, `cac-run --check FILE`): the syntax
// (parseTrainFile), the schema check that fills a TrainConfig
// (buildTrainConfig) and the rendering of every diagnostic with its source
// line and caret (DiagnosticEngine::render). Bad input must come back as
// diagnostics; a crash, a sanitizer report, an exception or a hang is a bug.
//
// The file is "fuzz/train.cac": relative paths in it (estimator, dataset,
// model) resolve under "fuzz/", which does not exist, so a check that a named
// file exists fails the same way on every run.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/TrainFile.h"

#include <cstdint>
#include <string>

using namespace cac::rt::train;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string source(reinterpret_cast<const char *>(data), size);
  DiagnosticEngine diag("fuzz/train.cac", source);
  std::optional<TrainBlock> block = parseTrainFile(source, diag);
  if (block) {
    std::optional<TrainConfig> config =
        buildTrainConfig(*block, "fuzz/train.cac", diag);
    // A file that checks has no errors, and one that fails has some: the
    // two must agree, or cac-run would train on a half-checked config or
    // stop without saying why.
    if (config.has_value() == diag.hasErrors())
      __builtin_trap();
  } else if (!diag.hasErrors()) {
    __builtin_trap();
  }
  std::string rendered = diag.render();
  (void)rendered;
  return 0;
}
