//===- GroupReads.cpp - Seq kernel values read across the group ----------===//
//
// group_rank, group_key and group_pos_sum read their operands at the other
// sequences of the unit's group. cac-partition puts them after the kernel that
// stores the operand (or reads an input), so they walk the group's members
// (group_offsets, group_members) and load the stored values directly; on
// the GPU every thread of the block walks them (they are not tile data).
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// The member sequences of the unit's group: `step(member, accs)` for each,
/// in ascending sequence order, accumulating one float.
static Value overMembers(Emitter &e, Value group,
                         llvm::function_ref<Value(Value, Value)> step) {
  IndexOps ix(e);
  Value lo = e.loadI32AsI64(kGroupOffsets, group);
  Value hi = e.loadI32AsI64(kGroupOffsets, ix.add(group, e.i64(1)));
  return ix.range(lo, hi, {e.fconst(0.0)},
                  [&](Value k, ValueRange acc) -> SmallVector<Value> {
                    Value j = e.loadI32AsI64(kGroupMembers, k);
                    return {step(j, acc[0])};
                  })[0];
}

/// The number of members j with x[j] > x[i], or x[j] == x[i] and j < i.
Value SeqKernelEmitter::groupRank(GroupRankOp r) {
  Value x = r.getInput();
  assert(!inKernel(x) && "cac-partition stores a group rank's operand");
  Value xi = evalOuter(x);
  return overMembers(e, group, [&](Value j, Value acc) {
    Value xj = e.loadBuffer(x, j);
    Value above =
        b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OGT, xj, xi);
    Value tie =
        b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OEQ, xj, xi);
    Value lower =
        b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, j, unit);
    Value before = b.create<arith::OrIOp>(
        e.loc, above, b.create<arith::AndIOp>(e.loc, tie, lower));
    return b.create<arith::AddFOp>(
        e.loc, acc,
        b.create<arith::SelectOp>(e.loc, before, e.fconst(1.0), e.fconst(0.0)));
  });
}

/// Over the members j whose key equals the unit's (or that are the unit): the
/// sum of x[j], their mean (shifted by x[unit], so exact over equal values)
/// or their number.
Value SeqKernelEmitter::groupKey(GroupKeyOp k) {
  Value x = k.getInput(), key = k.getKey();
  assert(!inKernel(x) && !inKernel(key) &&
         "cac-partition stores a group_key's operands");
  ReduceKind kind = k.getKind();
  Value ki = evalOuter(key);
  Value xi = kind == ReduceKind::Mean ? evalOuter(x) : Value();
  IndexOps ix(e);
  Value lo = e.loadI32AsI64(kGroupOffsets, group);
  Value hi = e.loadI32AsI64(kGroupOffsets, ix.add(group, e.i64(1)));
  Value zero = e.fconst(0.0);
  SmallVector<Value> acc = ix.range(
      lo, hi, {zero, zero}, [&](Value m, ValueRange a) -> SmallVector<Value> {
        Value j = e.loadI32AsI64(kGroupMembers, m);
        Value same = b.create<arith::OrIOp>(
            e.loc,
            b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OEQ,
                                    e.loadBuffer(key, j), ki),
            b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, j, unit));
        Value n = b.create<arith::AddFOp>(
            e.loc, a[1],
            b.create<arith::SelectOp>(e.loc, same, e.fconst(1.0), zero));
        if (kind == ReduceKind::Count)
          return {a[0], n};
        Value xj = e.loadBuffer(x, j);
        if (kind == ReduceKind::Mean)
          xj = b.create<arith::SubFOp>(e.loc, xj, xi);
        return {
            b.create<arith::AddFOp>(
                e.loc, a[0], b.create<arith::SelectOp>(e.loc, same, xj, zero)),
            n};
      });
  if (kind == ReduceKind::Count)
    return acc[1];
  if (kind == ReduceKind::Sum)
    return acc[0];
  return b.create<arith::AddFOp>(
      e.loc, xi, b.create<arith::DivFOp>(e.loc, acc[0], acc[1]));
}

/// group_pos_sum's operand `v` at member `j`'s token `tok`: cac-partition
/// leaves it stored by an earlier kernel, or a map of such token values and
/// of broadcasts of values each member has (a sequence value, read at the
/// member; the group's; a scalar), which this kernel computes at the member
/// (OTB's reward * W).
Value SeqKernelEmitter::memberValue(Value v, Value j, Value tok) {
  if (!inKernel(v)) {
    Domain d = domainOf(v);
    if (d == Domain::Token)
      return e.loadBuffer(v, tok);
    return d == Domain::Seq ? e.loadBuffer(v, j) : evalOuter(v);
  }
  Operation *op = v.getDefiningOp();
  if (auto bc = dyn_cast<BroadcastOp>(op))
    return memberValue(bc.getOperand(), j, tok);
  assert(isElementwise(op) && "cac-partition clones maps for the members");
  SmallVector<Value> x;
  for (Value o : op->getOperands())
    x.push_back(memberValue(o, j, tok));
  return e.elementwise(op, x);
}

/// The sum of x at token t's position over the members that reach it.
Value SeqKernelEmitter::groupPosSum(GroupPosSumOp s, Value t) {
  Value x = s.getInput();
  IndexOps ix(e);
  Value p = ix.sub(t, start);
  return overMembers(e, group, [&](Value j, Value acc) {
    Value sj = e.loadI32AsI64(kSeqOffsets, j);
    Value ej = e.loadI32AsI64(kSeqOffsets, ix.add(j, e.i64(1)));
    Value at = ix.add(sj, p);
    Value reaches = ix.cmpI(arith::CmpIPredicate::slt, at, ej);
    // A member that ends before the position adds nothing (and is read at
    // its first token, which exists).
    Value v =
        memberValue(x, j, b.create<arith::SelectOp>(e.loc, reaches, at, sj));
    return b.create<arith::AddFOp>(
        e.loc, acc,
        b.create<arith::SelectOp>(e.loc, reaches, v, e.fconst(0.0)));
  });
}

} // namespace cac::lowering
