//===- CpuModule.h - Kernels of a bundle's host.so --------------*- C++ -*-===//
//
// The CPU half of a bundle: a shared object with one entry point per kernel,
// `extern "C" void NAME(void **params)`, which runs the grid units
// [*(int64_t *)params[0], *(int64_t *)params[1]) one after the other
// (docs/bundle.md). CpuModule opens it, resolves the kernels and runs a grid,
// splitting it over a small thread pool with disjoint unit ranges.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_CPUMODULE_H
#define CAC_RUNTIME_KERNELS_CPUMODULE_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cac::rt {

/// A loaded host.so and its resolved kernel entry points.
class CpuModule {
public:
  using KernelFn = void (*)(void **params);

  /// dlopens `path` and dlsyms every name in `kernels` (in that order).
  /// Throws BundleError naming the file and the missing symbol.
  static std::unique_ptr<CpuModule>
  load(const std::string &path, const std::vector<std::string> &kernels);

  ~CpuModule();
  CpuModule(const CpuModule &) = delete;
  CpuModule &operator=(const CpuModule &) = delete;

  const std::string &path() const { return path_; }
  size_t numKernels() const { return functions_.size(); }
  const std::string &kernelName(size_t i) const { return names_.at(i); }
  KernelFn function(size_t i) const { return functions_.at(i); }

  /// Runs kernel `i` over the units [0, numUnits). `params` is the full
  /// argument array; its first two entries (unit_begin, unit_end) are
  /// replaced, per chunk, by pointers to that chunk's own range, so the
  /// caller's array is never written. With `numThreads` > 1 the range is cut
  /// into chunks run concurrently on a shared pool (the caller works too).
  void launch(size_t i, int64_t numUnits, void *const *params, size_t numParams,
              int numThreads = 1) const;

private:
  CpuModule() = default;

  std::string path_;
  void *handle_ = nullptr;
  std::vector<std::string> names_;
  std::vector<KernelFn> functions_;
};

/// Threads of the shared CPU pool, caller included (at least 1).
int cpuPoolThreads();

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_CPUMODULE_H
