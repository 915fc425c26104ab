//===- LowerKernelsImpl.h - The parts of cac-lower-kernels ------*- C++ -*-===//
//
// The pass (LowerKernels.cpp) plans the bundle's arguments (BufferPlan.cpp),
// creates one function per kernel (KernelEmission.cpp: the target's function
// (KernelTarget.h) around the bodies of SeqKernel.h, GroupKernel.h and
// TreeKernels.h) and writes the manifest (Manifest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_LOWERKERNELSIMPL_H
#define CAC_CONVERSION_LOWERKERNELS_LOWERKERNELSIMPL_H

#include "KernelTarget.h"

#include <optional>

namespace cac::lowering {

/// Lowers `est` into functions in `module` and sets the module's
/// `cac.manifest` (KernelEmission.cpp).
LogicalResult lowerEstimator(ModuleOp module, EstimatorOp est,
                             const LowerOptions &o);

/// A kernel as the manifest lists it.
struct KernelEntry {
  std::string name;
  std::string grid;  ///< seq, group or node
  int64_t block = 0; ///< threads per block
  std::string unit;  ///< thread or block: what runs one unit
  /// Block kernels: tokens per thread in a tile, and their layout.
  std::optional<int64_t> items;
  std::string layout;
};

/// The bundle's JSON manifest (docs/bundle.md) (Manifest.cpp).
std::string writeManifest(EstimatorOp est, const Abi &abi,
                          ArrayRef<KernelEntry> kernels);

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_LOWERKERNELSIMPL_H
