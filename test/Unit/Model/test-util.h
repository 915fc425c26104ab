//===- test-util.h - Fixtures for the model-stack unit tests ----*- C++ -*-===//
//
// Temporary folders, tiny models and an error-message matcher shared by the
// tests of cac_runtime_model. Everything is built in the test: no network, no
// downloaded weights.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TEST_UNIT_RUNTIME_TEST_UTIL_H
#define CAC_TEST_UNIT_RUNTIME_TEST_UTIL_H

#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Model/Transformer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace cac::rt::test {

/// A fresh folder under the system temp dir, removed (with its contents) by
/// the destructor.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::filesystem::path &path() const { return path_; }
  std::filesystem::path operator/(const std::string &name) const {
    return path_ / name;
  }

private:
  std::filesystem::path path_;
};

/// Writes \p bytes to \p path (creating parent folders).
void writeFile(const std::filesystem::path &path, std::string_view bytes);
/// Reads a whole file.
std::string readFile(const std::filesystem::path &path);
/// Cuts \p path down to its first \p size bytes.
void truncateFile(const std::filesystem::path &path, uint64_t size);

/// A tiny Llama-style config: hidden 16, 2 layers, 4 query heads sharing 2
/// KV heads (head dim 4), SwiGLU 24, untied LM head.
ModelConfig tinyConfig(int64_t vocabSize = 32,
                       const std::string &modelType = "llama");

/// A model of \p config with weights drawn from a generator seeded with
/// \p seed, with a larger std than the default so that logits differ enough
/// between tokens for greedy decoding and sampling tests to be meaningful.
TransformerLM tinyModel(const ModelConfig &config, uint64_t seed = 1,
                        bool valueHead = false, double std = 0.3);

/// The message of the std::exception \p fn throws, or "<no exception>".
std::string errorOf(const std::function<void()> &fn);

/// Fails the test unless \p fn throws a std::exception whose message
/// contains every one of \p parts.
void expectError(const std::function<void()> &fn,
                 std::initializer_list<std::string> parts);

/// The elements of a 1-D integer tensor.
std::vector<int64_t> toLongs(const at::Tensor &t);

/// Counts the bytes LibTorch allocates on the CPU while it lives: installs
/// a counting wrapper as c10's CPU allocator and puts the previous one back
/// when destroyed. Only allocations made while it is installed count (their
/// frees count whenever they happen).
class CpuAllocationCounter {
public:
  CpuAllocationCounter();
  ~CpuAllocationCounter();
  CpuAllocationCounter(const CpuAllocationCounter &) = delete;
  CpuAllocationCounter &operator=(const CpuAllocationCounter &) = delete;
  /// The most bytes held at once by the allocations counted.
  int64_t peakBytes() const;
  /// The bytes of the counted allocations still held.
  int64_t currentBytes() const;
};

/// Largest absolute difference of two tensors of the same shape (as double).
double maxAbsDiff(const at::Tensor &a, const at::Tensor &b);

} // namespace cac::rt::test

/// expectError with the caller's line in the failure trace.
#define EXPECT_ERROR(...)                                                      \
  do {                                                                         \
    SCOPED_TRACE("EXPECT_ERROR");                                              \
    ::cac::rt::test::expectError(__VA_ARGS__);                                 \
  } while (0)

#endif // CAC_TEST_UNIT_RUNTIME_TEST_UTIL_H
