//===- CudaModule.cpp - PTX loading and launching through the driver ------===//

#include "cac/Runtime/Kernels/CudaModule.h"
#include "cac/Runtime/Kernels/CudaDriver.h"

#include <fstream>
#include <limits>
#include <sstream>

namespace cac::rt {

struct CudaModule::Loaded {
  cu::Context ctx = nullptr;
  cu::Module module = nullptr;
  std::vector<cu::Function> functions;
};

CudaModule::CudaModule(std::string ptx, std::vector<KernelSpec> kernels,
                       std::string origin)
    : ptx_(std::move(ptx)), kernels_(std::move(kernels)),
      origin_(std::move(origin)) {
  // MLIR's gpu.binary keeps a trailing NUL; the driver wants exactly one.
  while (!ptx_.empty() && ptx_.back() == '\0')
    ptx_.pop_back();
}

std::unique_ptr<CudaModule> CudaModule::load(const std::string &path,
                                             std::vector<KernelSpec> kernels) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw BundleError(path + ": cannot open the PTX");
  std::stringstream ss;
  ss << in.rdbuf();
  return std::make_unique<CudaModule>(ss.str(), std::move(kernels), path);
}

CudaModule::~CudaModule() {
  const CudaDriver &d = CudaDriver::get();
  for (auto &entry : devices_) {
    Loaded &l = *entry.second;
    if (!l.module)
      continue;
    // Errors are ignored: at exit the driver may already be shutting down.
    cu::Context previous = nullptr;
    if (d.cuCtxGetCurrent(&previous) != cu::kSuccess)
      continue;
    d.cuCtxSetCurrent(l.ctx);
    d.cuModuleUnload(l.module);
    d.cuCtxSetCurrent(previous);
  }
}

void CudaModule::prepare(int ordinal) const { (void)loaded(ordinal); }

const CudaModule::Loaded &CudaModule::loaded(int ordinal) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = devices_.find(ordinal);
  if (it != devices_.end())
    return *it->second;

  const CudaDriver &d = CudaDriver::get();
  d.requireAvailable(origin_ + ": cannot run CUDA kernels");
  auto l = std::make_unique<Loaded>();
  l->ctx = d.primaryContext(ordinal);
  ScopedContext scope(l->ctx);

  char errorLog[8192] = {0}, infoLog[4096] = {0};
  cu::JitOption options[] = {
      cu::kJitErrorLogBuffer, cu::kJitErrorLogBufferSizeBytes,
      cu::kJitInfoLogBuffer, cu::kJitInfoLogBufferSizeBytes};
  void *values[] = {errorLog, reinterpret_cast<void *>(sizeof(errorLog)),
                    infoLog, reinterpret_cast<void *>(sizeof(infoLog))};
  cu::Result r =
      d.cuModuleLoadDataEx(&l->module, ptx_.c_str(), 4, options, values);
  if (r != cu::kSuccess) {
    std::string msg = origin_ + ": cuModuleLoadDataEx on device " +
                      std::to_string(ordinal) + " failed: " + d.describe(r);
    if (errorLog[0])
      msg += "\nJIT log:\n" + std::string(errorLog);
    throw BundleError(msg);
  }
  for (const KernelSpec &k : kernels_) {
    cu::Function f = nullptr;
    r = d.cuModuleGetFunction(&f, l->module, k.name.c_str());
    if (r != cu::kSuccess) {
      d.cuModuleUnload(l->module);
      throw BundleError(origin_ + ": kernel '" + k.name +
                        "' of the manifest is not in the PTX "
                        "(cuModuleGetFunction: " +
                        d.describe(r) + ")");
    }
    l->functions.push_back(f);
  }
  return *devices_.emplace(ordinal, std::move(l)).first->second;
}

void CudaModule::launch(int ordinal, size_t i, int64_t numUnits,
                        void *const *params, size_t numParams,
                        void *stream) const {
  if (i >= kernels_.size())
    throw BundleError(origin_ + ": no kernel #" + std::to_string(i));
  if (numParams < 2)
    throw BundleError(origin_ + ": the argument list has no unit range");
  if (numUnits <= 0)
    return;
  const Loaded &l = loaded(ordinal);
  const CudaDriver &d = CudaDriver::get();
  const KernelSpec &k = kernels_[i];
  const int64_t block = k.block;
  // One thread per unit, or one block per unit (docs/bundle.md).
  const int64_t unitsPerBlock = k.perBlock ? 1 : block;
  // gridDim.x is at most 2^31-1; larger grids go as several launches.
  const int64_t maxUnits =
      int64_t(std::numeric_limits<int32_t>::max()) * unitsPerBlock;

  ScopedContext scope(l.ctx);
  std::vector<void *> local(params, params + numParams);
  for (int64_t begin = 0; begin < numUnits; begin += maxUnits) {
    int64_t range[2] = {begin, std::min(numUnits, begin + maxUnits)};
    local[abi::kUnitBegin] = &range[0];
    local[abi::kUnitEnd] = &range[1];
    unsigned grid = static_cast<unsigned>(
        (range[1] - range[0] + unitsPerBlock - 1) / unitsPerBlock);
    d.check(d.cuLaunchKernel(
                l.functions[i], grid, 1, 1, static_cast<unsigned>(block), 1, 1,
                0, static_cast<cu::Stream>(stream), local.data(), nullptr),
            origin_ + ": cuLaunchKernel(" + k.name + ", grid " +
                std::to_string(grid) + ", block " + std::to_string(block) +
                ")");
  }
}

void CudaModule::synchronize(int ordinal, void *stream) const {
  const Loaded &l = loaded(ordinal);
  const CudaDriver &d = CudaDriver::get();
  ScopedContext scope(l.ctx);
  d.check(d.cuStreamSynchronize(static_cast<cu::Stream>(stream)),
          origin_ + ": cuStreamSynchronize");
}

} // namespace cac::rt
