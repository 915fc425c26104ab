//===- FuzzSafetensors.cpp - libFuzzer target over the safetensors reader -===//
//
// cac-fuzz-safetensors: feeds arbitrary bytes, as a file, to the reader of
// every model's weights and of a checkpoint's tensors: SafetensorsReader's
// constructor (the 8-byte length, the JSON header, dtypes, shapes, offsets,
// overlaps), then readRaw and read (float conversion) of every tensor it
// lists. Errors are std::runtime_error naming the file and the tensor; any
// other exception (a c10::Error from LibTorch among them), a crash, a
// sanitizer report or a hang is a bug.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "cac/Runtime/Model/Safetensors.h"

#include <cstdint>
#include <stdexcept>

using namespace cac::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cac::fuzz::MemFile file(data, size);
  std::unique_ptr<SafetensorsReader> reader;
  try {
    reader = std::make_unique<SafetensorsReader>(file.path());
  } catch (const std::runtime_error &) {
    return 0;
  }
  for (const std::string &name : reader->names()) {
    const SafetensorsEntry &e = reader->entry(name);
    at::Tensor raw = reader->readRaw(name);
    // What the header promised is what comes back.
    if (raw.sizes() != at::IntArrayRef(e.shape) ||
        raw.scalar_type() != e.dtype)
      __builtin_trap();
    at::Tensor t = reader->read(name);
    if (t.sizes() != raw.sizes())
      __builtin_trap();
  }
  (void)reader->metadata();
  return 0;
}
