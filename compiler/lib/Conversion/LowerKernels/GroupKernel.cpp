//===- GroupKernel.cpp - Group kernels: one unit per group ----------------===//

#include "GroupKernel.h"

#include "mlir/Dialect/Math/IR/Math.h"

namespace cac::lowering {

void GroupKernelEmitter::emit(Value unit) {
  e.anchor = e.i64(0).getDefiningOp();
  compute(unit);
  for (auto [v, buf] : stores)
    e.storeBuffer(buf, eval(v), group);
}
void GroupKernelEmitter::emitBatch(Value isStorer) {
  e.anchor = e.i64(0).getDefiningOp();
  wholeBatch = true;
  compute(e.i64(0));
  SmallVector<std::pair<Value, unsigned>> values;
  for (auto [v, buf] : stores)
    values.push_back({eval(v), buf});
  auto storeAll = [&] {
    for (auto [v, buf] : values)
      e.storeBuffer(buf, v, group);
  };
  if (isStorer)
    IndexOps(e).when(isStorer, storeAll);
  else
    storeAll();
}

void GroupKernelEmitter::compute(Value unit) {
  group = unit;
  if (wholeBatch) {
    mstart = e.i64(0);
    n = e.args[kNumSeqs];
  } else {
    mstart = e.loadI32AsI64(kGroupOffsets, unit);
    Value next = b.create<arith::AddIOp>(e.loc, unit, e.i64(1));
    mend = e.loadI32AsI64(kGroupOffsets, next);
    n = b.create<arith::SubIOp>(e.loc, mend, mstart);
  }
  nf = e.toFloat(n);

  SmallVector<ReduceOp> reds;
  for (Operation &op : kernel.getBody().front())
    if (auto r = dyn_cast<ReduceOp>(op))
      reds.push_back(r);
  // Pass 1: sums, minima, maxima, first and last members.
  SmallVector<ReduceOp> pass1(reds), pass2;
  for (ReduceOp r : reds)
    if (isSecondPass(r.getKind()))
      pass2.push_back(r);
  for (ReduceOp r : pass1)
    if (isShifted(r.getKind()))
      shifts[r] = firstMember(r.getOperand());
  SmallVector<Value> acc1 = memberLoop(pass1, /*secondPass=*/false);
  for (auto [r, a] : llvm::zip(pass1, acc1))
    means[r] = finishFirst(r, a);
  if (!pass2.empty()) {
    SmallVector<Value> acc2 = memberLoop(pass2, /*secondPass=*/true);
    for (auto [r, a] : llvm::zip(pass2, acc2))
      memo[r.getResult()] = finishSecond(r, a);
  }
  for (ReduceOp r : pass1)
    if (!isSecondPass(r.getKind()))
      memo[r.getResult()] = means[r];
  // A batch kernel's batch_top_k selections, whose counts may read its
  // reductions.
  for (Operation &op : kernel.getBody().front())
    if (auto k = dyn_cast<BatchKthOp>(op))
      memo[k.getResult()] = batchKth(k);
}

SmallVector<Value> GroupKernelEmitter::memberLoop(ArrayRef<ReduceOp> reds,
                                                  bool secondPass) {
  SmallVector<Value> inits;
  for (ReduceOp r : reds) {
    if (!secondPass && r.getKind() == ReduceKind::Min)
      inits.push_back(e.fconst(std::numeric_limits<double>::infinity()));
    else if (!secondPass && r.getKind() == ReduceKind::Max)
      inits.push_back(e.fconst(-std::numeric_limits<double>::infinity()));
    else
      inits.push_back(e.fconst(0.0));
  }
  // In a block (fused into a seq kernel on the GPU) thread tid takes
  // members tid, tid + size, ... and the block combines the partials:
  // a member's value and the first/last selections are 0 elsewhere, so
  // they combine as sums like the rest.
  Value lo = blockCombine ? blockTid : e.i64(0);
  Value step = blockCombine ? e.i64(blockSize) : e.i64(1);
  auto forOp = b.create<scf::ForOp>(e.loc, lo, n, step, inits);
  eraseImplicitYield(forOp);
  SmallVector<Value> results;
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(forOp.getBody());
    Value j = forOp.getInductionVar();
    Value member =
        wholeBatch ? j
                   : e.loadI32AsI64(kGroupMembers,
                                    b.create<arith::AddIOp>(e.loc, mstart, j));
    SmallVector<Value> yields;
    for (auto [k, rc] : llvm::enumerate(reds)) {
      ReduceOp r = rc;
      Value acc = forOp.getRegionIterArgs()[k];
      Value x = seqAt(r.getOperand(), member);
      Value next;
      if (secondPass) {
        Value d = b.create<arith::SubFOp>(e.loc, x, means[r]);
        next = b.create<arith::AddFOp>(e.loc, acc,
                                       b.create<arith::MulFOp>(e.loc, d, d));
      } else {
        next = firstPassStep(r, acc, x, j);
      }
      yields.push_back(next);
    }
    b.create<scf::YieldOp>(e.loc, yields);
  }
  for (auto [k, rc] : llvm::enumerate(reds)) {
    ReduceOp r = rc;
    Value acc = forOp.getResult(k);
    if (blockCombine) {
      bool asSum = r.getKind() == ReduceKind::First ||
                   r.getKind() == ReduceKind::Last || secondPass;
      acc = blockCombine(asSum ? ReduceKind::Sum : r.getKind(), acc);
    }
    results.push_back(acc);
  }
  return results;
}

/// One member's step of a first-pass reduction (`j`: the member's index in
/// the group).
Value GroupKernelEmitter::firstPassStep(ReduceOp r, Value acc, Value x,
                                        Value j) {
  switch (r.getKind()) {
  case ReduceKind::Min:
    return b.create<arith::MinimumFOp>(e.loc, acc, x);
  case ReduceKind::Max:
    return b.create<arith::MaximumFOp>(e.loc, acc, x);
  case ReduceKind::Count:
    return b.create<arith::AddFOp>(e.loc, acc, e.fconst(1.0));
  case ReduceKind::First: {
    Value c =
        b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, j, e.i64(0));
    return b.create<arith::SelectOp>(e.loc, c, x, acc);
  }
  case ReduceKind::Last: {
    Value c =
        b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, j,
                                b.create<arith::SubIOp>(e.loc, n, e.i64(1)));
    return b.create<arith::SelectOp>(e.loc, c, x, acc);
  }
  default: // Sum, Mean and the first pass of Var/Std: a sum.
    if (isShifted(r.getKind()))
      x = b.create<arith::SubFOp>(e.loc, x, shifts[r]);
    return b.create<arith::AddFOp>(e.loc, acc, x);
  }
}

/// The value of seq value `v` at the group's first member (0 for an empty
/// group, which loads nothing).
Value GroupKernelEmitter::firstMember(Value v) {
  Value some =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt, n, e.i64(0));
  auto ifOp = b.create<scf::IfOp>(e.loc, TypeRange{e.ft}, some,
                                  /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  b.create<scf::YieldOp>(
      e.loc, seqAt(v, e.loadI32AsI64(kGroupMembers, mstart)));
  b.setInsertionPointToStart(ifOp.elseBlock());
  b.create<scf::YieldOp>(e.loc, e.fconst(0.0));
  return ifOp.getResult(0);
}

/// After pass 1: the reduction's value, or for Var/Std the group mean.
Value GroupKernelEmitter::finishFirst(ReduceOp r, Value acc) {
  switch (r.getKind()) {
  case ReduceKind::Mean:
  case ReduceKind::Var:
  case ReduceKind::Std:
  case ReduceKind::VarUnbiased:
  case ReduceKind::StdUnbiased: {
    Value denom = e.toFloat(b.create<arith::MaxSIOp>(e.loc, n, e.i64(1)));
    return b.create<arith::AddFOp>(e.loc, shifts[r],
                                   b.create<arith::DivFOp>(e.loc, acc, denom));
  }
  default:
    return acc;
  }
}

Value GroupKernelEmitter::finishSecond(ReduceOp r, Value ss) {
  bool unbiased = r.getKind() == ReduceKind::VarUnbiased ||
                  r.getKind() == ReduceKind::StdUnbiased;
  Value cnt = unbiased ? b.create<arith::SubIOp>(e.loc, n, e.i64(1)) : n;
  Value denom = e.toFloat(b.create<arith::MaxSIOp>(e.loc, cnt, e.i64(1)));
  Value var = b.create<arith::DivFOp>(e.loc, ss, denom);
  if (r.getKind() == ReduceKind::Std || r.getKind() == ReduceKind::StdUnbiased)
    return b.create<math::SqrtOp>(e.loc, var);
  return var;
}

/// A seq value at member sequence `seq` (defined before this kernel).
Value GroupKernelEmitter::seqAt(Value v, Value seq) {
  if (domainOf(v) == Domain::Scalar)
    return e.scalar(v);
  return e.loadBuffer(v, seq);
}

Value GroupKernelEmitter::eval(Value v) {
  auto it = memo.find(v);
  if (it != memo.end())
    return it->second;
  Operation *op = v.getDefiningOp();
  Value r;
  if (op->getParentOp() != kernel.getOperation()) {
    if (domainOf(v) == Domain::Scalar)
      r = e.scalar(v);
    else if (domainOf(v) == Domain::Batch)
      r = e.loadBuffer(v, e.i64(0));
    else
      r = e.loadBuffer(v, group);
  } else {
    SmallVector<Value> x;
    for (Value o : op->getOperands())
      x.push_back(eval(o));
    r = e.elementwise(op, x);
  }
  memo[v] = r;
  return r;
}

} // namespace cac::lowering
