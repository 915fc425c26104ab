//===- Bundle.h - Loading and running a compiled kernel bundle --*- C++ -*-===//
//
// A bundle is a directory written by `cac compile --bundle DIR`: manifest.json
// plus host.so and/or kernels.ptx (docs/bundle.md). Bundle loads it;
// BundleEstimator binds LibTorch tensors to the manifest's argument list,
// allocates outputs and scratch, and runs the kernels in order on the CPU
// (host.so) or the GPU (kernels.ptx) depending on where the tensors live.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_BUNDLE_H
#define CAC_RUNTIME_KERNELS_BUNDLE_H

#include "cac/Runtime/Kernels/CpuModule.h"
#include "cac/Runtime/Kernels/CudaModule.h"
#include "cac/Runtime/Kernels/Manifest.h"
#include "cac/Runtime/Kernels/PackedBatch.h"

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cac::rt {

using TensorMap = std::map<std::string, at::Tensor>;
using ParamMap = std::map<std::string, double>;

/// A loaded bundle directory.
class Bundle {
public:
  /// Reads DIR/manifest.json, opens DIR/host.so if present (resolving every
  /// kernel, so a missing symbol fails here) and reads DIR/kernels.ptx if
  /// present (JIT-loaded on first CUDA use). A bundle needs at least one.
  static std::shared_ptr<Bundle> load(const std::string &dir);

  /// A bundle from parts already in memory (tests, tools, the compiler's
  /// in-process path). Either module may be null.
  Bundle(Manifest manifest, std::string dir, std::unique_ptr<CpuModule> cpu,
         std::unique_ptr<CudaModule> cuda);

  const Manifest &manifest() const { return manifest_; }
  const std::string &directory() const { return dir_; }
  bool hasCpu() const { return cpu_ != nullptr; }
  bool hasCuda() const { return cuda_ != nullptr; }
  /// Throws BundleError when the bundle has no host.so / kernels.ptx.
  const CpuModule &cpu() const;
  const CudaModule &cuda() const;

private:
  Manifest manifest_;
  std::string dir_;
  std::unique_ptr<CpuModule> cpu_;
  std::unique_ptr<CudaModule> cuda_;
};

/// How BundleEstimator::run executes.
struct RunOptions {
  /// CPU threads; 0 chooses from the number of tokens and
  /// at::get_num_threads().
  int numThreads = 0;
  /// With numThreads == 0: tokens per thread below which fewer threads run.
  int64_t minTokensPerThread = 16384;
  /// CUstream to launch on. Unset: LibTorch's current stream of the device
  /// when this runtime was built against a CUDA LibTorch, else the legacy
  /// default stream (nullptr).
  std::optional<void *> stream;
  /// Waits for the stream before returning (CUDA only; CPU is synchronous).
  bool synchronize = false;
  /// Return scratch buffers too (for debugging kernels).
  bool returnScratch = false;
  /// Outputs and scratch are allocated uninitialised: the kernels write
  /// every element of every output (docs/bundle.md). Set, they are first
  /// filled with this value instead; NaN checks that contract (a test, or a
  /// suspected kernel bug).
  std::optional<double> fillOutputs;
  /// Ignore inputs and parameters the bundle does not declare instead of
  /// rejecting them (a trainer passing everything it has).
  bool allowExtra = false;
  /// CPU: keep the scratch buffers (the intermediate arrays kernels pass
  /// each other) for the next call instead of freeing them. Freed, the
  /// allocator hands them back to the system, and each call pays a page
  /// fault per 4 KiB of scratch when the kernels first write it. One call at
  /// a time uses the kept buffers (a concurrent call of the same estimator
  /// allocates its own); BundleEstimator::releaseScratch frees them. CUDA
  /// scratch comes from LibTorch's caching allocator either way.
  bool keepScratch = true;
};

/// The CPU scratch buffers a BundleEstimator keeps between calls.
struct ScratchCache;

/// Runs a bundle's kernels on LibTorch tensors.
class BundleEstimator {
public:
  explicit BundleEstimator(std::shared_ptr<const Bundle> bundle);
  /// Bundle::load(dir) wrapped.
  static BundleEstimator load(const std::string &dir);

  const Bundle &bundle() const { return *bundle_; }
  const Manifest &manifest() const { return bundle_->manifest(); }
  const std::string &name() const { return bundle_->manifest().estimator; }
  std::vector<std::string> inputNames() const;
  std::vector<std::string> outputNames() const;
  std::vector<std::string> paramNames() const;

  /// Runs every kernel in manifest order and returns the outputs by name.
  ///
  /// `inputs` holds one tensor per declared input: token and seg inputs packed
  /// [N] (or padded [B, T], packed with `batch`'s layout), seq inputs [B],
  /// group inputs [G], node inputs [K]; any real or integer dtype (converted
  /// to the buffer's dtype). All inputs live on one device, which picks the
  /// module: CPU → host.so, CUDA → kernels.ptx. `batch` is moved there if
  /// needed. `params` overrides the manifest defaults; a parameter without a
  /// default must be given. Outputs come back packed on that device in the
  /// buffer's dtype (token/seg [N], seq [B], group [G], node [K]).
  ///
  /// Throws BundleError naming the input / parameter and the expected vs
  /// actual size.
  TensorMap run(const TensorMap &inputs, const PackedBatch &batch,
                const ParamMap &params = {},
                const RunOptions &options = {}) const;

  /// Frees the CPU scratch buffers kept from earlier calls
  /// (RunOptions::keepScratch); copies of this estimator share them.
  void releaseScratch() const;
  /// Bytes of CPU scratch kept (0 while a call holds them).
  int64_t keptScratchBytes() const;

private:
  std::shared_ptr<const Bundle> bundle_;
  std::shared_ptr<ScratchCache> scratch_;
};

/// The number of elements of a domain for a batch.
int64_t domainSize(Domain d, const PackedBatch &batch);

/// at::ScalarType of a manifest dtype.
at::ScalarType scalarType(DType t);

/// True when this library was built with LibTorch's CUDA stream support.
bool builtWithTorchCuda();

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_BUNDLE_H
