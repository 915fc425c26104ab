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

def CacFuseGroups : Pass<"cac-fuse-groups", "::cac::ir::EstimatorOp"> {
  let summary = "Marks the group kernels that seq kernels compute themselves";
  let description = [{
    Runs after `cac-partition`. A `group` kernel that reads only inputs,
    parameters and literals (no other kernel's results), writes no output
    and whose results are read by `seq` kernels only gets the unit attribute
    `cac.fused`: it is not launched, and each `seq` kernel that reads its
    results computes them for its own sequence's group before its token
    loops (GRPO's mean and variance, RLOO's sum and count, TreeAdv's group
    statistics). `cac-lower-kernels` follows the attribute. One launch and
    one scratch buffer fewer per fused kernel, for n reads of each member's
    values per group of n sequences instead of one.
  }];
  let dependentDialects = ["::cac::ir::CacDialect"];
}

#endif // CAC_TRANSFORMS_PASSES_TD
