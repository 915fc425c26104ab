//===- BlockKernels.h - What block kernels and their simulation share -*- C++ -*-===//
//
// The contract between the lowering of block-per-sequence kernels
// (LowerKernels.cpp) and the CPU runner that simulates their threads
// (Eval/Runner.cpp): docs/pipeline.md, "Seq kernels on the GPU".
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_BLOCKKERNELS_H
#define CAC_CONVERSION_BLOCKKERNELS_H

#include <cstdint>

namespace cac {

/// The shared-memory elements (of the bundle's float type) of a block of
/// `threads` threads: the warps' partials (two arrays of `threads`, of which
/// the first threads / 32 elements are used), then the simulation's exchange
/// area for shuffles.
inline int64_t blockSharedElements(int64_t threads) { return 3 * threads; }

/// The host function `void(void *barrier)` that simulated block kernels
/// call at each barrier.
inline constexpr const char *kSimBarrierSymbol = "cac_sim_barrier";

} // namespace cac

#endif // CAC_CONVERSION_BLOCKKERNELS_H
