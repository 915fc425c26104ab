//===- GroupKernel.h - Group kernels: one unit per group --------*- C++ -*-===//
//
// A group kernel loops over the member sequences of its group: a first pass
// accumulates sums, minima, maxima, first and last members, a second (only
// when needed) the squared deviations for variances. A fused group kernel
// (cac-fuse-groups) runs the same passes inside a seq kernel, for the
// sequence's group, split over the block's threads on the GPU. A batch
// kernel is the group of all the sequences: one unit, run by one block on
// the GPU (after the seq kernels have reduced token values per sequence, so
// the block combines B partials: a grid-wide reduction in two launches).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_GROUPKERNEL_H
#define CAC_CONVERSION_LOWERKERNELS_GROUPKERNEL_H

#include "Emitter.h"
#include "Schedule.h"

#include <functional>

namespace cac::lowering {

class GroupKernelEmitter {
public:
  GroupKernelEmitter(Emitter &e, KernelOp kernel, ArrayRef<Store> stores)
      : e(e), b(e.b), kernel(kernel), stores(stores) {}

  /// The kernel's body for group `unit`: its values, stored.
  void emit(Value unit);

  /// The body of a batch kernel (its one unit): the same passes over all the
  /// batch's sequences, the values stored at index 0 (by thread 0 of a
  /// block, whose threads split the sequences with `inBlock`).
  void emitBatch(Value isStorer);

  /// The kernel's reductions and values for group `unit`, at the insertion
  /// point (scalars go to the caller's anchor).
  void compute(Value unit);

  /// A value of the kernel (after compute).
  Value value(Value v) { return eval(v); }

  /// Runs the member loops over the threads of a block: thread `tid` of
  /// `size` takes every size-th member, and `combine` (called by every
  /// thread at the same point) combines the threads' partials of a
  /// reduction of that kind.
  void inBlock(Value tid, int64_t size,
               std::function<Value(ReduceKind, Value)> combine) {
    blockTid = tid;
    blockSize = size;
    blockCombine = std::move(combine);
  }

private:
  static bool isSecondPass(ReduceKind k) {
    return k == ReduceKind::Var || k == ReduceKind::Std ||
           k == ReduceKind::VarUnbiased || k == ReduceKind::StdUnbiased;
  }
  /// Means (and the means of variances) are shifted by the group's first
  /// member, x0 + sum(x - x0) / n: a mean of equal values is that value
  /// exactly, so their deviations and variance are exactly 0.
  static bool isShifted(ReduceKind k) {
    return k == ReduceKind::Mean || isSecondPass(k);
  }
  Value firstMember(Value v);
  SmallVector<Value> memberLoop(ArrayRef<ReduceOp> reds, bool secondPass);
  Value firstPassStep(ReduceOp r, Value acc, Value x, Value j);
  Value finishFirst(ReduceOp r, Value acc);
  Value finishSecond(ReduceOp r, Value ss);
  Value seqAt(Value v, Value seq);
  /// The token index a batch_top_k selection ends at (BatchSelect.cpp).
  Value batchKth(BatchKthOp op);
  /// The index of the token of rank kc - 1 (kc >= 1, a float) by one
  /// thread's radix select on 8-bit digits.
  Value kthByDigits(Value x, Value kc);
  Value eval(Value v);

  Emitter &e;
  OpBuilder &b;
  KernelOp kernel;
  ArrayRef<Store> stores;
  Value group, mstart, mend, n, nf;
  /// A batch kernel: the members are sequences 0..B-1.
  bool wholeBatch = false;
  Value blockTid;
  int64_t blockSize = 1;
  std::function<Value(ReduceKind, Value)> blockCombine;
  llvm::DenseMap<ReduceOp, Value> means, shifts;
  DenseMap<Value, Value> memo;
};

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_GROUPKERNEL_H
