//===- CudaDriver.cpp - dlopen'ed libcuda
//----------------------------------===//

#include "cac/Runtime/Kernels/CudaDriver.h"
#include "cac/Runtime/Kernels/Manifest.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace cac::rt {

struct CudaDriver::Contexts {
  std::mutex mutex;
  std::map<int, cu::Context> byOrdinal;
};

namespace {

template <typename Fn> bool resolve(void *handle, Fn &fn, const char *name) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return fn != nullptr;
}

} // namespace

CudaDriver::CudaDriver() : contexts_(new Contexts()) {
#ifdef CAC_DISABLE_CUDA
  reason_ = "this runtime was built with CAC_ENABLE_CUDA=OFF";
  return;
#endif
  // CAC_LIBCUDA lets tests and unusual installs point at another library.
  const char *override = std::getenv("CAC_LIBCUDA");
  const char *candidates[] = {override, "libcuda.so.1", "libcuda.so"};
  std::string errors;
  for (const char *name : candidates) {
    if (!name || !*name)
      continue;
    dlerror();
    handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle_)
      break;
    const char *err = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (err ? err : name);
  }
  if (!handle_) {
    reason_ = "the CUDA driver (libcuda.so.1) could not be loaded: " + errors;
    return;
  }
  bool ok =
      resolve(handle_, cuInit, "cuInit") &&
      resolve(handle_, cuDeviceGetCount, "cuDeviceGetCount") &&
      resolve(handle_, cuDeviceGet, "cuDeviceGet") &&
      resolve(handle_, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
      resolve(handle_, cuCtxGetCurrent, "cuCtxGetCurrent") &&
      resolve(handle_, cuCtxSetCurrent, "cuCtxSetCurrent") &&
      resolve(handle_, cuCtxSynchronize, "cuCtxSynchronize") &&
      resolve(handle_, cuModuleLoadDataEx, "cuModuleLoadDataEx") &&
      resolve(handle_, cuModuleGetFunction, "cuModuleGetFunction") &&
      resolve(handle_, cuModuleUnload, "cuModuleUnload") &&
      resolve(handle_, cuLaunchKernel, "cuLaunchKernel") &&
      resolve(handle_, cuStreamSynchronize, "cuStreamSynchronize") &&
      resolve(handle_, cuGetErrorName, "cuGetErrorName") &&
      resolve(handle_, cuGetErrorString, "cuGetErrorString");
  if (!ok) {
    reason_ = "libcuda.so.1 lacks a driver entry point this runtime needs";
    return;
  }
  // Versioned names, as cuda.h maps them; optional.
  resolve(handle_, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  resolve(handle_, cuMemAlloc, "cuMemAlloc_v2");
  resolve(handle_, cuMemFree, "cuMemFree_v2");
  resolve(handle_, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  resolve(handle_, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  resolve(handle_, cuMemGetInfo, "cuMemGetInfo_v2");
  resolve(handle_, cuEventCreate, "cuEventCreate");
  resolve(handle_, cuEventRecord, "cuEventRecord");
  resolve(handle_, cuEventSynchronize, "cuEventSynchronize");
  // CUDA 12.8 added _v2 (cuda.h 13 maps the name to it); older drivers
  // have the first form only.
  if (!resolve(handle_, cuEventElapsedTime, "cuEventElapsedTime_v2"))
    resolve(handle_, cuEventElapsedTime, "cuEventElapsedTime");
  resolve(handle_, cuEventDestroy, "cuEventDestroy_v2");

  cu::Result r = cuInit(0);
  if (r != cu::kSuccess) {
    reason_ = "cuInit failed: " + describe(r);
    return;
  }
  r = cuDeviceGetCount(&deviceCount_);
  if (r != cu::kSuccess || deviceCount_ <= 0) {
    reason_ = r != cu::kSuccess ? "cuDeviceGetCount failed: " + describe(r)
                                : "no CUDA device";
    deviceCount_ = 0;
    return;
  }
  available_ = true;
}

const CudaDriver &CudaDriver::get() {
  // Never destroyed: kernels may be unloaded from static destructors.
  static const CudaDriver *driver = new CudaDriver();
  return *driver;
}

std::string CudaDriver::describe(cu::Result r) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName)
    cuGetErrorName(r, &name);
  if (cuGetErrorString)
    cuGetErrorString(r, &text);
  std::string s = name ? name : "CUresult " + std::to_string(r);
  if (text)
    s += std::string(" (") + text + ")";
  return s;
}

void CudaDriver::check(cu::Result r, const std::string &what) const {
  if (r != cu::kSuccess)
    throw BundleError(what + ": " + describe(r));
}

void CudaDriver::requireAvailable(const std::string &what) const {
  if (!available_)
    throw BundleError(what + ": " + reason_);
}

cu::Context CudaDriver::primaryContext(int ordinal) const {
  requireAvailable("CUDA");
  if (ordinal < 0 || ordinal >= deviceCount_)
    throw BundleError("CUDA: device " + std::to_string(ordinal) +
                      " does not exist (" + std::to_string(deviceCount_) +
                      " devices)");
  std::lock_guard<std::mutex> lock(contexts_->mutex);
  auto it = contexts_->byOrdinal.find(ordinal);
  if (it != contexts_->byOrdinal.end())
    return it->second;
  cu::Device dev = 0;
  check(cuDeviceGet(&dev, ordinal),
        "cuDeviceGet(" + std::to_string(ordinal) + ")");
  cu::Context ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  contexts_->byOrdinal[ordinal] = ctx;
  return ctx;
}

ScopedContext::ScopedContext(cu::Context ctx) {
  const CudaDriver &d = CudaDriver::get();
  d.check(d.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
  if (previous_ != ctx) {
    d.check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    restore_ = true;
  }
}

ScopedContext::~ScopedContext() {
  if (restore_)
    CudaDriver::get().cuCtxSetCurrent(previous_);
}

} // namespace cac::rt
