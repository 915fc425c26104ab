//===- CudaModule.h - Kernels of a bundle's kernels.ptx ---------*- C++ -*-===//
//
// The GPU half of a bundle: PTX text with one `.entry` per kernel, each
// taking one `.param` per argument of the bundle's argument list. CudaModule
// JIT-loads it with cuModuleLoadDataEx in a device's primary context (once
// per device) and launches kernels with cuLaunchKernel on a given stream.
// All driver calls go through the dlopen'ed CudaDriver.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_CUDAMODULE_H
#define CAC_RUNTIME_KERNELS_CUDAMODULE_H

#include "cac/Runtime/Kernels/Manifest.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cac::rt {

/// PTX kernels, loaded lazily on each device they run on.
class CudaModule {
public:
  /// Keeps the PTX text; no driver call happens until prepare()/launch().
  /// `origin` names the PTX in errors.
  CudaModule(std::string ptx, std::vector<KernelSpec> kernels,
             std::string origin = "kernels.ptx");

  /// Reads a PTX file.
  static std::unique_ptr<CudaModule> load(const std::string &path,
                                          std::vector<KernelSpec> kernels);

  ~CudaModule();
  CudaModule(const CudaModule &) = delete;
  CudaModule &operator=(const CudaModule &) = delete;

  const std::string &origin() const { return origin_; }
  const std::string &ptx() const { return ptx_; }
  size_t numKernels() const { return kernels_.size(); }
  const KernelSpec &kernel(size_t i) const { return kernels_.at(i); }

  /// Loads the module on device `ordinal` and resolves every kernel, once.
  /// Throws BundleError with the CUresult name and the JIT error log.
  void prepare(int ordinal) const;

  /// Launches kernel `i` over units [0, numUnits) with the manifest's block
  /// size: grid ceil(numUnits / block). `params` is the full argument array
  /// (values are copied by the driver at launch); entries 0 and 1 are
  /// replaced by this launch's unit range. `stream` is a CUstream (nullptr:
  /// the legacy default stream). Asynchronous, like any launch.
  void launch(int ordinal, size_t i, int64_t numUnits, void *const *params,
              size_t numParams, void *stream) const;

  /// Waits for `stream` on device `ordinal`.
  void synchronize(int ordinal, void *stream) const;

private:
  struct Loaded;
  const Loaded &loaded(int ordinal) const;

  std::string ptx_;
  std::vector<KernelSpec> kernels_;
  std::string origin_;
  mutable std::mutex mutex_;
  mutable std::map<int, std::unique_ptr<Loaded>> devices_;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_CUDAMODULE_H
