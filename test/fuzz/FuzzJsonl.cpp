//===- FuzzJsonl.cpp - libFuzzer target over the JSONL dataset readers -----===//
//
// cac-fuzz-jsonl: feeds arbitrary bytes, as a file, to the two dataset
// readers of a training file's task: loadJsonl (`jsonl(FILE, prompt = ..,
// answer = .., solution = ..)`, with the default keys and with keys of the
// training file's choosing) and loadGsm8k (`gsm8k(FILE)`). Each must return
// problems or throw std::runtime_error "FILE:LINE: what is wrong" (what
// cac-run prints); any other exception, a crash, a sanitizer report or a hang
// is a bug.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "cac/Runtime/Tasks/Tasks.h"

#include <cstdint>
#include <stdexcept>

using namespace cac::rt;

namespace {

template <typename Load> void expectProblemsOrError(Load load) {
  try {
    std::vector<Problem> problems = load();
    // A dataset that loads has problems, each with a prompt.
    if (problems.empty())
      __builtin_trap();
  } catch (const std::runtime_error &) {
    // The readers' documented error: a message naming the file and line.
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cac::fuzz::MemFile file(data, size);
  expectProblemsOrError([&] { return loadJsonl(file.path(), JsonlKeys()); });
  JsonlKeys other;
  other.prompt = "question";
  other.answer = "answer";
  other.solution = "answer";
  expectProblemsOrError([&] { return loadJsonl(file.path(), other); });
  expectProblemsOrError([&] { return loadGsm8k(file.path()); });
  return 0;
}
