//===- GroupFusion.cpp - Which group kernels the seq kernels compute ------===//

#include "LowerKernelsImpl.h"

namespace cac::lowering {

/// A group kernel that reads only inputs and scalars, writes no output and
/// is read by seq kernels only is not emitted: the seq kernels compute its
/// values for their sequence's group.
static bool isFusable(KernelOp kernel) {
  if (kernel.getGrid() != Domain::Group)
    return false;
  bool ok = true;
  kernel.walk([&](Operation *op) {
    if (isa<OutputOp>(op))
      ok = false;
    for (Value o : op->getOperands())
      if (Operation *def = o.getDefiningOp(); def && isa<KernelOp>(def))
        ok = false;
  });
  for (Value r : kernel.getResults())
    for (Operation *user : r.getUsers()) {
      auto uk = user->getParentOfType<KernelOp>();
      if (!uk || uk.getGrid() != Domain::Seq)
        ok = false;
    }
  return ok;
}

llvm::DenseSet<Operation *> findFusedGroups(EstimatorOp est) {
  llvm::DenseSet<Operation *> fused;
  for (auto kernel : est.getBodyBlock().getOps<KernelOp>())
    if (isFusable(kernel))
      fused.insert(kernel);
  return fused;
}

} // namespace cac::lowering
