//===- CudaAllocatorCache.cpp - LibTorch's cached CUDA blocks -------------===//
//
// Only this file of the runtime includes the CUDA caching allocator's
// header (CudaAllocatorCache.h says why).
//
//===----------------------------------------------------------------------===//

#include "CudaAllocatorCache.h"

#if CAC_HAVE_CUDA_ALLOCATOR_STATS
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#endif

namespace cac::rt::train {

double cachedUnallocatedCuda(int ordinal) {
#if CAC_HAVE_CUDA_ALLOCATOR_STATS
  c10::cuda::CUDACachingAllocator::CUDAAllocator *a =
      c10::cuda::CUDACachingAllocator::get();
  if (!a || !a->initialized())
    return 0;
  try {
    const auto stats =
        a->getDeviceStats(static_cast<c10::DeviceIndex>(ordinal));
    // Entry 0 of each StatArray is StatType::AGGREGATE, all pools together
    // (the enum's namespace moved between LibTorch releases, its value not).
    int64_t cached =
        stats.reserved_bytes[0].current - stats.allocated_bytes[0].current;
    return static_cast<double>(std::max<int64_t>(cached, 0));
  } catch (const std::exception &) {
    return 0;
  }
#else
  (void)ordinal;
  return 0;
#endif
}

} // namespace cac::rt::train
