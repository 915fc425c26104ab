//===- BlockKernels.h - What block kernels and their simulation share -*- C++ -*-===//
//
// The contract between the lowering of block-per-sequence kernels
// (Conversion/LowerKernels/) and the CPU runner that simulates their threads
// (Eval/Runner.cpp): docs/pipeline.md, "Seq kernels on the GPU".
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_BLOCKKERNELS_H
#define CAC_CONVERSION_BLOCKKERNELS_H

#include <cstdint>

namespace cac {

/// Where the simulation's exchange area for shuffles starts, in elements
/// (of the bundle's float type) of a block's shared memory: after the warps'
/// partials, two arrays of `threads` (of which the first threads / 32
/// elements are used) or the rank sort's 16 digit totals per warp (16 for a
/// block of one warp), whichever is larger.
inline int64_t blockExchangeOffset(int64_t threads) {
  int64_t warps = threads < 32 ? 1 : threads / 32;
  return 2 * threads > 16 * warps ? 2 * threads : 16 * warps;
}
/// The shared-memory elements of a block of `threads` threads: the
/// partials, then the exchange area (one element per thread).
inline int64_t blockSharedElements(int64_t threads) {
  return blockExchangeOffset(threads) + threads;
}

/// The host function `void(void *barrier)` that simulated block kernels
/// call at each barrier.
inline constexpr const char *kSimBarrierSymbol = "cac_sim_barrier";
/// The one they call inside a warp shuffle: it waits for the threads of the
/// caller's warp only (min(32, block) consecutive threads), as a shuffle
/// synchronizes a warp and nothing else on the GPU.
inline constexpr const char *kSimWarpBarrierSymbol = "cac_sim_warp_barrier";

} // namespace cac

#endif // CAC_CONVERSION_BLOCKKERNELS_H
