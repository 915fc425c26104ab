//===- Passes.td - Transformations of the cac dialect --------*- tablegen -*-===//

#ifndef CAC_TRANSFORMS_PASSES_TD
#define CAC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def CacPartition : Pass<"cac-partition", "::cac::ir::EstimatorOp"> {
  let summary = "Groups the operations of an estimator into kernels";
  let description = [{
    Assigns every operation to a phase: per-sequence work (token, seg and seq
    values: elementwise maps, shifts, scans, token -> seq reductions) runs in
    `seq` kernels; reductions over groups of sequences run in `group`
    kernels. A new kernel starts only where a value needs all sequences of a
    group (seq -> group) or a group value flows back to sequences. Values that
    cross kernels become the kernels' results. GAE is one kernel; GRPO is
    three (per-sequence, per-group, per-sequence).
  }];
  let dependentDialects = ["::cac::ir::CacDialect"];
}

#endif // CAC_TRANSFORMS_PASSES_TD
