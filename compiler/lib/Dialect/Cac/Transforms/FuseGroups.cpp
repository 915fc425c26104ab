//===- FuseGroups.cpp - Group kernels that seq kernels compute ------------===//
//
// The decision to compute a group kernel inside the seq kernels that read it
// is taken here and recorded in the IR (`cac.fused`), so that the lowering
// has one thing to follow and a test can show it.
//
//===----------------------------------------------------------------------===//

#include "cac/Dialect/Cac/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace cac::ir {
#define GEN_PASS_DEF_CACFUSEGROUPS
#include "cac/Dialect/Cac/Transforms/Passes.h.inc"
} // namespace cac::ir

using namespace mlir;
using namespace cac::ir;

bool cac::ir::isFusableGroupKernel(KernelOp kernel) {
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

namespace {

struct FuseGroupsPass
    : public cac::ir::impl::CacFuseGroupsBase<FuseGroupsPass> {
  void runOnOperation() override {
    EstimatorOp est = getOperation();
    UnitAttr fused = UnitAttr::get(&getContext());
    for (auto kernel : est.getBodyBlock().getOps<KernelOp>())
      if (isFusableGroupKernel(kernel))
        kernel->setAttr(kFusedAttrName, fused);
  }
};

} // namespace
