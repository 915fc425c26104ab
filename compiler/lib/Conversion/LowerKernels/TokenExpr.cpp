//===- TokenExpr.cpp - A seq kernel's values at a token -------------------===//
//
// Token values are expressions evaluated on demand at a token index (an i64
// into the packed batch), memoized per token; seq-level values once per
// unit. Only scans, ranks, inputs and earlier kernels' results are loaded.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

Value SeqKernelEmitter::evalOuter(Value v) {
  auto it = outerMemo.find(v);
  if (it != outerMemo.end())
    return it->second;
  Value r = computeOuter(v);
  outerMemo[v] = r;
  return r;
}

Value SeqKernelEmitter::computeOuter(Value v) {
  Operation *op = v.getDefiningOp();
  if (!inKernel(v)) {
    Domain d = domainOf(v);
    if (d == Domain::Scalar)
      return e.scalar(v);
    assert(d == Domain::Seq || d == Domain::Group || d == Domain::Batch);
    if (d == Domain::Batch)
      return e.loadBuffer(v, e.i64(0));
    return e.loadBuffer(v, d == Domain::Group ? group : unit);
  }
  if (isa<LengthOp>(op))
    return e.toFloat(len);
  if (auto r = dyn_cast<GroupRankOp>(op))
    return groupRank(r);
  if (auto k = dyn_cast<GroupKeyOp>(op))
    return groupKey(k);
  if (isa<ReduceOp>(op))
    llvm_unreachable("reduction read before its loop was emitted");
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return evalOuter(arm);
  SmallVector<Value> x;
  for (Value o : op->getOperands())
    x.push_back(evalOuter(o));
  return e.elementwise(op, x);
}

Value SeqKernelEmitter::evalTok(Value v, Value t) {
  auto key = std::make_pair(v, t);
  auto it = tokenMemo.find(key);
  if (it != tokenMemo.end())
    return it->second;
  Value r = computeTok(v, t);
  tokenMemo[key] = r;
  return r;
}

Value SeqKernelEmitter::computeTok(Value v, Value t) {
  Domain d = domainOf(v);
  if (d != Domain::Token)
    return evalOuter(v);
  if (!inKernel(v)) {
    if (tileLoads)
      tileLoads->insert(v);
    return e.loadBuffer(v, t);
  }
  Operation *op = v.getDefiningOp();
  if (isa<ScanOp, RankOp>(op)) {
    if (tileLoads && threads->prefetchWritten)
      tileLoads->insert(v);
    loadedScans.insert(op);
    return e.loadBuffer(v, t);
  }
  if (auto it = storedEarlier.find(v); it != storedEarlier.end()) {
    Value x = e.load(e.args[it->second], t, e.ft);
    if (!elemOf(v).isInteger(1))
      return x;
    return b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::UNE, x,
                                   e.fconst(0.0));
  }
  if (isa<PositionOp>(op))
    return e.toFloat(b.create<arith::SubIOp>(e.loc, t, start));
  if (auto s = dyn_cast<GroupPosSumOp>(op))
    return groupPosSum(s, t);
  if (auto k = dyn_cast<BatchTopKOp>(op))
    return batchTopK(k, t);
  if (auto u = dyn_cast<UniformOp>(op))
    return uniform(u, t);
  if (auto s = dyn_cast<ShiftOp>(op))
    return shiftTok(s, t);
  if (auto bc = dyn_cast<BroadcastOp>(op)) {
    Domain from = domainOf(bc.getOperand());
    if (from == Domain::Node) { // an earlier node kernel stored it
      if (runToken && t == runToken)
        return runValues.lookup(bc.getOperand());
      return e.loadBuffer(bc.getOperand(), e.loadI32AsI64(kTokenNode, t));
    }
    return from == Domain::Token ? evalTok(bc.getOperand(), t)
                                 : evalOuter(bc.getOperand());
  }
  if (auto g = dyn_cast<SegGatherOp>(op)) {
    // Segment j of sequence b is at seq_offsets[b] + j (docs/bundle.md);
    // j never exceeds the token's position, so the index stays inside the
    // sequence's slots.
    Value idx = target.integerCompares() ? intTok(g.getIndex(), t) : Value();
    if (!idx)
      idx = b.create<arith::FPToSIOp>(e.loc, b.getI64Type(),
                                      evalTok(g.getIndex(), t));
    Value at = b.create<arith::AddIOp>(e.loc, start, idx);
    return e.load(e.args[abi.storage.lookup(g.getInput())], at, e.ft);
  }
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return evalTok(arm, t);
  if (auto cmp = dyn_cast<CmpOp>(op)) {
    if (Value v = topKMember(cmp, t))
      return v;
    // Positions against lengths (is_last, is_first, position < k), where
    // the target compares them as the integers they are.
    Value l = target.integerCompares() ? intTok(cmp.getLhs(), t) : Value();
    Value r = l ? intTok(cmp.getRhs(), t) : l;
    if (l && r)
      return b.create<arith::CmpIOp>(e.loc, intPredicate(cmp), l, r);
  }
  SmallVector<Value> x;
  for (Value o : op->getOperands())
    x.push_back(evalTok(o, t));
  return e.elementwise(op, x);
}

/// Whether evaluating token value `v` reads a scan or a rank (a load of a
/// buffer this kernel wrote), divides or calls a transcendental function
/// (exp, log, sigmoid): then a value an earlier loop stored is loaded
/// instead (SPO-chain's segment starts, read at the next token by its
/// reverse loop, would recompute the cutpoint count's modulo; an
/// objective's gradient loops, its ratio).
bool SeqKernelEmitter::costlyToRecompute(Value v, DenseSet<Value> &seen) {
  if (!inKernel(v) || domainOf(v) != Domain::Token || !seen.insert(v).second)
    return false;
  Operation *op = v.getDefiningOp();
  if (isa<ScanOp, RankOp>(op))
    return true;
  if (auto bin = dyn_cast<BinaryOp>(op);
      bin &&
      (bin.getKind() == BinaryKind::Div || bin.getKind() == BinaryKind::Mod ||
       bin.getKind() == BinaryKind::Pow))
    return true;
  if (auto un = dyn_cast<UnaryOp>(op);
      un && (un.getKind() == UnaryKind::Exp || un.getKind() == UnaryKind::Log ||
             un.getKind() == UnaryKind::Sigmoid))
    return true;
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return costlyToRecompute(arm, seen);
  if (!isElementwise(op) && !isa<ShiftOp, BroadcastOp, SegGatherOp>(op))
    return false;
  return llvm::any_of(op->getOperands(),
                      [&](Value o) { return costlyToRecompute(o, seen); });
}

/// After loop `l`: the values it stored that later loops load rather than
/// recompute, with the operands that the stored selects take in this
/// version (the same values).
void SeqKernelEmitter::noteStores(const Loop &l) {
  for (const Item &it : l.items) {
    DenseSet<Value> seen;
    if (it.kind != Item::Store || domainOf(it.value) != Domain::Token ||
        !costlyToRecompute(it.value, seen))
      continue;
    for (Value v = it.value; v && inKernel(v);) {
      storedEarlier.try_emplace(v, it.buffer);
      // A boolean stored as its float (the segment starts) is that float
      // compared with 0.
      if (auto cast = v.getDefiningOp<CastOp>();
          cast && elemOf(cast.getOperand()).isInteger(1))
        storedEarlier.try_emplace(cast.getOperand(), it.buffer);
      auto sel = v.getDefiningOp<SelectOp>();
      v = sel ? fixedArm(sel, version) : Value();
    }
  }
}

/// Adds to `seen` the token values that evaluating `v` evaluates in this
/// version (a select it fixes reads its taken operand only), down to the
/// scans and ranks it loads (included, not their operands).
void SeqKernelEmitter::reachedFrom(Value v, DenseSet<Value> &seen) {
  if (!inKernel(v) || domainOf(v) != Domain::Token || !seen.insert(v).second)
    return;
  Operation *op = v.getDefiningOp();
  if (isa<ScanOp, RankOp>(op))
    return;
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return reachedFrom(arm, seen);
  for (Value o : op->getOperands())
    reachedFrom(o, seen);
}

/// The token values that the items of `l` evaluate.
DenseSet<Value> SeqKernelEmitter::reachedBy(const Loop &l) {
  DenseSet<Value> reached;
  for (const Item &it : l.items) {
    if (it.kind == Item::Store)
      reachedFrom(it.value, reached);
    else if (it.kind != Item::Rank)
      for (Value o : it.op->getOperands())
        reachedFrom(o, reached);
  }
  return reached;
}

void SeqKernelEmitter::forgetTokens() {
  tokenMemo.clear();
  intMemo.clear();
  shiftedFrom.clear();
  nestedIndex.clear();
}

/// `next(x, fill)`, `prev(x, fill)` (a shift by `offset`) at token `t`: `x`
/// at t + offset where that token is in the sequence, else the fill at t.
///
/// The first kPathShifts shifts of a nest index from the index they are
/// given; a deeper one from the nest's base token by the sum of the
/// offsets, one index per sum: nests of `next` and `prev` (`let a2 =
/// next(a1) + prev(a1)`, ...) then make a number of indices linear in the
/// depth, not one per path through them. (Three covers the nests that the
/// segment rules make with `next` and `prev`.)
Value SeqKernelEmitter::shiftTok(ShiftOp s, Value t) {
  // I64Attr accessors return uint64_t: read the offset as signed, or
  // `prev` (-1) would be taken for a forward shift.
  int64_t offset = int64_t(s.getOffset());
  if (auto it = back.find(t); it != back.end() && offset == backOffset) {
    // In range (see emitLoop): the previous token of the iteration, or
    // the token before the iteration.
    Value t2 = it->second ? it->second
                          : b.create<arith::AddIOp>(e.loc, t, e.i64(offset));
    shiftedFrom.try_emplace(t2, ShiftedIndex{t, offset, 1});
    return evalTok(s.getOperand(), t2);
  }
  ShiftedIndex at{t, offset, 1};
  if (auto it = shiftedFrom.find(t); it != shiftedFrom.end())
    at = {it->second.base, it->second.offset + offset, it->second.depth + 1};
  // The result matters only where every enclosing shift was in range, so
  // that `t` is its base plus its offset, inside the sequence (elsewhere an
  // enclosing shift takes its fill): a nest back at its base (`next` of
  // `prev`, the segment ends' shift of the segment starts) reads the base
  // with no bounds check, which also keeps the index affine for LLVM's
  // vectorizer.
  if (at.depth > 1 && at.offset == 0)
    return evalTok(s.getOperand(), at.base);
  Value in, tc;
  if (at.depth <= kPathShifts) {
    std::tie(in, tc) = shiftIndexFrom(t, offset);
    shiftedFrom[tc] = at;
  } else {
    auto [it, isNew] = nestedIndex.try_emplace({at.base, at.offset});
    if (isNew) {
      it->second = shiftIndexFrom(at.base, at.offset);
      shiftedFrom[it->second.second] = at;
    }
    std::tie(in, tc) = it->second;
  }
  Value a = evalTok(s.getOperand(), tc);
  Value f = evalTok(s.getFill(), t);
  return b.create<arith::SelectOp>(e.loc, in, a, f);
}

/// Whether token `t` + `offset` is in the sequence, and that token if so,
/// else `t` (a token of the sequence: the bound that `offset` moves towards
/// decides).
std::pair<Value, Value> SeqKernelEmitter::shiftIndexFrom(Value t,
                                                         int64_t offset) {
  Value t2 = b.create<arith::AddIOp>(e.loc, t, e.i64(offset));
  Value in =
      offset > 0
          ? b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, t2, end)
          : b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sge, t2,
                                    start);
  return {in, b.create<arith::SelectOp>(e.loc, in, t2, t)};
}

arith::CmpIPredicate SeqKernelEmitter::intPredicate(CmpOp cmp) {
  switch (cmp.getPredicate()) {
  case CmpPredicate::LT:
    return arith::CmpIPredicate::slt;
  case CmpPredicate::LE:
    return arith::CmpIPredicate::sle;
  case CmpPredicate::GT:
    return arith::CmpIPredicate::sgt;
  case CmpPredicate::GE:
    return arith::CmpIPredicate::sge;
  case CmpPredicate::EQ:
    return arith::CmpIPredicate::eq;
  case CmpPredicate::NE:
    return arith::CmpIPredicate::ne;
  }
  llvm_unreachable("unknown predicate");
}

/// `v` at token `t` as an i64, where it is an integer by construction:
/// the token's position, the sequence's length, integral literals, the
/// integer counts of a loop's integer copy (intCount), and sums,
/// differences and selects of these; a null Value otherwise. (Their floats
/// are exact below 2^24 tokens a sequence, so the comparison is the same.)
Value SeqKernelEmitter::intTok(Value v, Value t) {
  auto key = std::make_pair(v, t);
  if (auto it = intMemo.find(key); it != intMemo.end())
    return it->second;
  Value r = computeIntTok(v, t);
  intMemo[key] = r;
  return r;
}

Value SeqKernelEmitter::computeIntTok(Value v, Value t) {
  Operation *op = v.getDefiningOp();
  if (!op)
    return Value();
  if (auto c = dyn_cast<ConstantOp>(op)) {
    auto f = dyn_cast<FloatAttr>(c.getValue());
    if (!f)
      return Value();
    double d = f.getValueAsDouble();
    if (d != std::floor(d) || std::fabs(d) > 9.0e15)
      return Value();
    return e.i64(int64_t(d));
  }
  if (!inKernel(v))
    return Value();
  if (Value r = intCount(v, t))
    return r;
  if (isa<PositionOp>(op))
    return b.create<arith::SubIOp>(e.loc, t, start);
  if (isa<LengthOp>(op))
    return len;
  if (auto bc = dyn_cast<BroadcastOp>(op))
    return intTok(bc.getOperand(), t);
  if (auto bin = dyn_cast<BinaryOp>(op)) {
    if (bin.getKind() != BinaryKind::Add && bin.getKind() != BinaryKind::Sub)
      return Value();
    Value x = intTok(bin.getLhs(), t);
    Value y = x ? intTok(bin.getRhs(), t) : x;
    if (!y)
      return Value();
    if (bin.getKind() == BinaryKind::Add)
      return b.create<arith::AddIOp>(e.loc, x, y);
    return b.create<arith::SubIOp>(e.loc, x, y);
  }
  return Value();
}

} // namespace cac::lowering
