//===- CudaDriver.h - The CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// The runtime builds without a GPU and without linking libcuda: like IREE's
// dynamic symbol tables, it dlopens libcuda.so.1 on first use and looks up
// the few entry points it needs. The types below are the driver's ABI,
// declared here so that no CUDA header is needed to build.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_CUDADRIVER_H
#define CAC_RUNTIME_KERNELS_CUDADRIVER_H

#include <cstddef>
#include <string>

namespace cac::rt {

/// The driver API types (ABI-compatible with cuda.h).
namespace cu {
using Result = int;                   ///< CUresult; 0 is CUDA_SUCCESS
using Device = int;                   ///< CUdevice
using DevicePtr = unsigned long long; ///< CUdeviceptr
struct CtxSt;
struct ModSt;
struct FuncSt;
struct StreamSt;
struct EventSt;
using Context = CtxSt *;   ///< CUcontext
using Module = ModSt *;    ///< CUmodule
using Function = FuncSt *; ///< CUfunction
using Stream = StreamSt *; ///< CUstream
using Event = EventSt *;   ///< CUevent
using JitOption = int;     ///< CUjit_option

constexpr Result kSuccess = 0;
constexpr Result kErrorNoDevice = 100;
constexpr JitOption kJitInfoLogBuffer = 3;
constexpr JitOption kJitInfoLogBufferSizeBytes = 4;
constexpr JitOption kJitErrorLogBuffer = 5;
constexpr JitOption kJitErrorLogBufferSizeBytes = 6;
} // namespace cu

/// The process-wide table of driver entry points.
class CudaDriver {
public:
  /// Loads libcuda.so.1 and calls cuInit(0) on first use. Never throws:
  /// check available() / unavailableReason().
  static const CudaDriver &get();

  /// True when libcuda loaded, cuInit succeeded and there is a device.
  bool available() const { return available_; }
  /// Why available() is false ("libcuda.so.1 not found: ...").
  const std::string &unavailableReason() const { return reason_; }
  int deviceCount() const { return deviceCount_; }

  /// "CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)".
  std::string describe(cu::Result r) const;
  /// Throws BundleError "WHAT: NAME (description)" unless r is success.
  void check(cu::Result r, const std::string &what) const;
  /// Throws BundleError with unavailableReason() unless available().
  void requireAvailable(const std::string &what) const;

  /// The primary context of device `ordinal` (the one the runtime API and
  /// LibTorch use), retained once per process and kept. Throws BundleError.
  cu::Context primaryContext(int ordinal) const;

  // Entry points (null when the library is absent). The optional ones
  // (memory, for tests, tools and the memory checks) may be null on exotic
  // drivers.
  cu::Result (*cuInit)(unsigned) = nullptr;
  cu::Result (*cuDeviceGetCount)(int *) = nullptr;
  cu::Result (*cuDeviceGet)(cu::Device *, int) = nullptr;
  cu::Result (*cuDevicePrimaryCtxRetain)(cu::Context *, cu::Device) = nullptr;
  cu::Result (*cuDevicePrimaryCtxRelease)(cu::Device) = nullptr;
  cu::Result (*cuCtxGetCurrent)(cu::Context *) = nullptr;
  cu::Result (*cuCtxSetCurrent)(cu::Context) = nullptr;
  cu::Result (*cuCtxSynchronize)() = nullptr;
  cu::Result (*cuModuleLoadDataEx)(cu::Module *, const void *, unsigned,
                                   cu::JitOption *, void **) = nullptr;
  cu::Result (*cuModuleGetFunction)(cu::Function *, cu::Module,
                                    const char *) = nullptr;
  cu::Result (*cuModuleUnload)(cu::Module) = nullptr;
  cu::Result (*cuLaunchKernel)(cu::Function, unsigned, unsigned, unsigned,
                               unsigned, unsigned, unsigned, unsigned,
                               cu::Stream, void **, void **) = nullptr;
  cu::Result (*cuStreamSynchronize)(cu::Stream) = nullptr;
  cu::Result (*cuGetErrorName)(cu::Result, const char **) = nullptr;
  cu::Result (*cuGetErrorString)(cu::Result, const char **) = nullptr;
  cu::Result (*cuMemAlloc)(cu::DevicePtr *, size_t) = nullptr;
  cu::Result (*cuMemFree)(cu::DevicePtr) = nullptr;
  cu::Result (*cuMemcpyHtoD)(cu::DevicePtr, const void *, size_t) = nullptr;
  cu::Result (*cuMemcpyDtoH)(void *, cu::DevicePtr, size_t) = nullptr;
  /// Free and total memory of the current context's device.
  cu::Result (*cuMemGetInfo)(size_t *, size_t *) = nullptr;
  // Events, for benchmarks that time the device rather than the host.
  cu::Result (*cuEventCreate)(cu::Event *, unsigned) = nullptr;
  cu::Result (*cuEventRecord)(cu::Event, cu::Stream) = nullptr;
  cu::Result (*cuEventSynchronize)(cu::Event) = nullptr;
  cu::Result (*cuEventElapsedTime)(float *, cu::Event, cu::Event) = nullptr;
  cu::Result (*cuEventDestroy)(cu::Event) = nullptr;

private:
  CudaDriver();
  void *handle_ = nullptr;
  struct Contexts;
  Contexts *contexts_ = nullptr; ///< retained primary contexts, by ordinal
  bool available_ = false;
  int deviceCount_ = 0;
  std::string reason_;
};

/// Sets a context current for a scope and restores the previous one after.
class ScopedContext {
public:
  explicit ScopedContext(cu::Context ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;

private:
  cu::Context previous_ = nullptr;
  bool restore_ = false;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_CUDADRIVER_H
