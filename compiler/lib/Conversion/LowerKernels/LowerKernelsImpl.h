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

#include "cac/Abi/Manifest.h"

#include <optional>

namespace cac::lowering {

/// Lowers `est` into functions in `module` and sets the module's
/// `cac.manifest` (KernelEmission.cpp).
LogicalResult lowerEstimator(ModuleOp module, EstimatorOp est,
                             const LowerOptions &o);

/// The bundle's manifest.json (docs/bundle.md), written by the kernel ABI's
/// one writer (Manifest.cpp).
std::string manifestText(EstimatorOp est, const Abi &abi,
                         std::vector<cac::abi::KernelSpec> kernels);

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_LOWERKERNELSIMPL_H
