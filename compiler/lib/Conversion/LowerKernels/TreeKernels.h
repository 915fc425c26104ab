//===- TreeKernels.h - Node kernels and the tree builder --------*- C++ -*-===//

#ifndef CAC_CONVERSION_LOWERKERNELS_TREEKERNELS_H
#define CAC_CONVERSION_LOWERKERNELS_TREEKERNELS_H

#include "Emitter.h"
#include "KernelTarget.h"
#include "Schedule.h"

namespace cac::lowering {

/// The body of the bundle's first kernel when it has node kernels, a batch
/// kernel: builds the tree's arrays `t` (TreeBuilder.cpp) with the block
/// `threads`, or with one thread when it is null.
void emitTreeBuilder(Emitter &e, const Abi::TreeScratch &t,
                     const BlockThreads *threads);

/// The body of node kernel `kernel` for node `unit`: its values `stores`,
/// stored (NodeKernel.cpp).
void emitNodeKernel(Emitter &e, KernelOp kernel, const Abi &abi,
                    ArrayRef<Store> stores, Value unit);

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_TREEKERNELS_H
