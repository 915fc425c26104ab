//===- CudaAllocatorCache.h - LibTorch's cached CUDA blocks -----*- C++ -*-===//
//
// The bytes LibTorch's CUDA caching allocator holds reserved but not
// allocated, which the driver counts as used (MemoryCheck.cpp adds them to
// the driver's free memory). Its own file: the allocator's header brings
// cuda.h, whose API-version macros rename CudaDriver's members (cuMemGetInfo
// becomes cuMemGetInfo_v2) in any file that includes both.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_CUDAALLOCATORCACHE_H
#define CAC_RUNTIME_TRAIN_CUDAALLOCATORCACHE_H

namespace cac::rt::train {

/// Bytes the caching allocator holds on CUDA device \p ordinal reserved but
/// not allocated (blocks freed by tensors, kept for reuse); 0 before its
/// first use, and where this LibTorch has no CUDA allocator statistics.
double cachedUnallocatedCuda(int ordinal);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_CUDAALLOCATORCACHE_H
