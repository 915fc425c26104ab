//===- IntegerScans.cpp - Counts of 0/1 values as integers ----------------===//
//
// The segment rules count: a segment's index is a scan of its starts with
// decay 1, `seg_first` of a predicate a scan that restarts at each start,
// a sequence's number of segments or cutpoints a sum of 0/1 values. In
// floats each is an add (or an FMA) carried from token to token, four
// cycles a token on the CPU, and a later loop that reads such a scan loads
// it back from a scratch buffer that the first loop wrote. In a loop walked
// by one thread (the CPU: KernelTarget::integerCounts):
//   - a scan whose input and decay are 0/1 values (booleans as floats,
//     the literals 0 and 1, selects between them) is carried as an i64,
//     `y = x + (d ? y' : 0)`, and so is a sum or mean of 0/1 values in the
//     same loop; their floats are the integers' conversions;
//   - such a scan that a later loop of the same direction reads only at
//     its own token is counted again there, from its input, rather than
//     loaded, where that input reads no other scan or rank (other replayed
//     scans aside) and does not divide;
//   - a scratch scan that nothing then loads is not stored.
// The floats of these scans and sums are integers no larger than the
// sequence's length, exact in the float type up to exactLimit: the loop
// takes the integers where the sequence is at most that long, and keeps
// the float loop for longer ones (the same copy as SerialCounters.cpp's).
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// Whether token value `v` is 0 or 1 at every token: a boolean as a float,
/// the literals 0 and 1, or a select between such values.
bool SeqKernelEmitter::isBitValued(Value v) {
  if (isConstant(v, 0.0) || isConstant(v, 1.0))
    return true;
  Operation *op = v.getDefiningOp();
  if (!op || !inKernel(v))
    return false;
  if (auto cast = dyn_cast<CastOp>(op))
    return elemOf(cast.getOperand()).isInteger(1) &&
           isa<FloatType>(elemOf(cast.getResult()));
  if (auto sel = dyn_cast<SelectOp>(op)) {
    if (Value arm = fixedArm(sel, version))
      return isBitValued(arm);
    return isBitValued(sel.getTrueValue()) && isBitValued(sel.getFalseValue());
  }
  return false;
}

/// A value that isBitValued holds, at token `t`, as an i1.
Value SeqKernelEmitter::bitTok(Value v, Value t) {
  if (isConstant(v, 0.0) || isConstant(v, 1.0))
    return b.create<arith::ConstantOp>(e.loc,
                                       b.getBoolAttr(isConstant(v, 1.0)));
  Operation *op = v.getDefiningOp();
  if (auto cast = dyn_cast<CastOp>(op))
    return evalTok(cast.getOperand(), t);
  auto sel = cast<SelectOp>(op);
  if (Value arm = fixedArm(sel, version))
    return bitTok(arm, t);
  Value c = evalTok(sel.getCondition(), t);
  return b.create<arith::SelectOp>(e.loc, c, bitTok(sel.getTrueValue(), t),
                                   bitTok(sel.getFalseValue(), t));
}

bool SeqKernelEmitter::isIntScan(Operation *op) {
  auto scan = dyn_cast<ScanOp>(op);
  return scan && target.integerCounts() && isBitValued(scan.getInput()) &&
         isBitValued(scan.getDecay());
}

bool SeqKernelEmitter::isIntSum(const Item &it) {
  if (it.kind != Item::Reduce || !target.integerCounts())
    return false;
  auto red = cast<ReduceOp>(it.op);
  return (red.getKind() == ReduceKind::Sum ||
          red.getKind() == ReduceKind::Mean) &&
         isBitValued(red.getOperand());
}

/// Whether loop `l` counts as integers: it holds an integer scan, and on a
/// target that takes loops of scans in chunks (ChunkedScans.cpp) no scan of
/// other values (a loop with one, SAPO's loss's forward loop, takes chunks
/// in floats). Its integer copy then takes its sums of 0/1 values as
/// integers too; a loop without a scan keeps them in floats, which LLVM
/// vectorizes as they are (an objective's loss).
bool SeqKernelEmitter::countsInts(const Loop &l) {
  bool ints = false, floats = false;
  for (const Item &it : l.items)
    if (it.kind == Item::Scan)
      (isIntScan(it.op) ? ints : floats) = true;
  return ints && !(floats && !threads && target.scanChunk() > 0);
}

/// Collects the scans and ranks that evaluating `v` at a token reads, at
/// their offsets from it, as the loops evaluate it (values an earlier loop
/// stored are loaded); returns whether it divides on the way (a division,
/// modulo or power, which a replay would repeat at every token).
bool SeqKernelEmitter::scanReads(Value v, int64_t off, ScanReads &reads,
                                 DenseSet<std::pair<Value, int64_t>> &seen) {
  if (!inKernel(v) || domainOf(v) != Domain::Token || storedEarlier.count(v) ||
      !seen.insert({v, off}).second)
    return false;
  Operation *op = v.getDefiningOp();
  if (isa<ScanOp, RankOp>(op)) {
    reads[op].insert(off);
    return false;
  }
  if (auto s = dyn_cast<ShiftOp>(op))
    return scanReads(s.getOperand(), off + int64_t(s.getOffset()), reads,
                     seen) |
           scanReads(s.getFill(), off, reads, seen);
  if (auto g = dyn_cast<SegGatherOp>(op))
    return scanReads(g.getIndex(), off, reads, seen);
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return scanReads(arm, off, reads, seen);
  bool divides = false;
  if (auto bin = dyn_cast<BinaryOp>(op))
    divides = bin.getKind() == BinaryKind::Div ||
              bin.getKind() == BinaryKind::Mod ||
              bin.getKind() == BinaryKind::Pow;
  for (Value o : op->getOperands())
    divides |= scanReads(o, off, reads, seen);
  return divides;
}

/// The integer scans of earlier loops that loop `index` replays, in program
/// order: read by the loop only at their own token, in its direction, and
/// countable from values the loop evaluates without loading another scan
/// (other replays aside) or a rank and without dividing.
SmallVector<Operation *> SeqKernelEmitter::replaysOf(size_t index) {
  const Loop &l = loops[index];
  if (!target.integerCounts())
    return {};
  ScanReads reads;
  DenseSet<std::pair<Value, int64_t>> seen;
  for (const Item &it : l.items) {
    if (it.kind == Item::Store)
      scanReads(it.value, 0, reads, seen);
    else
      for (Value o : it.op->getOperands())
        scanReads(o, 0, reads, seen);
  }
  llvm::SetVector<Operation *> cands;
  for (size_t k = 0; k < index; ++k) {
    if (!countsInts(loops[k]))
      continue;
    for (const Item &it : loops[k].items)
      if (it.kind == Item::Scan && isIntScan(it.op) &&
          cast<ScanOp>(it.op).getReverse() == l.reverse) {
        auto r = reads.find(it.op);
        if (r != reads.end() && r->second.size() == 1 && r->second.count(0))
          cands.insert(it.op);
      }
  }
  // What each candidate's count reads must be replayed too.
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : SmallVector<Operation *>(cands.begin(), cands.end())) {
      auto scan = cast<ScanOp>(op);
      ScanReads own;
      DenseSet<std::pair<Value, int64_t>> ownSeen;
      bool ok = !(scanReads(scan.getInput(), 0, own, ownSeen) |
                  scanReads(scan.getDecay(), 0, own, ownSeen));
      for (auto &[dep, offs] : own)
        ok &=
            dep != op && cands.count(dep) && offs.size() == 1 && offs.count(0);
      if (!ok) {
        cands.remove(op);
        changed = true;
      }
    }
  }
  SmallVector<Operation *> out(cands.begin(), cands.end());
  llvm::sort(out,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return out;
}

/// The carried value an item starts from in the integer copy of a loop.
Value SeqKernelEmitter::intInit(const Item &it) {
  if ((it.kind == Item::Scan && isIntScan(it.op)) || isIntSum(it))
    return e.i64(0);
  if (it.kind == Item::Scan)
    return e.fconst(0.0);
  return reduceInit(cast<ReduceOp>(it.op));
}

/// An integer scan over the iteration's tokens `ts` from the carry `prev`:
/// memoizes each token's value (as an integer and as a float), stores the
/// float in `buffer` when given, and returns the last integer.
Value SeqKernelEmitter::emitIntScanStep(Operation *op, ArrayRef<Value> ts,
                                        Value prev,
                                        std::optional<unsigned> buffer) {
  auto scan = cast<ScanOp>(op);
  Value y = prev;
  for (Value t : ts) {
    Value x = b.create<arith::ExtUIOp>(e.loc, b.getI64Type(),
                                       bitTok(scan.getInput(), t));
    Value kept = y;
    if (!isConstant(scan.getDecay(), 1.0))
      kept = b.create<arith::SelectOp>(e.loc, bitTok(scan.getDecay(), t), y,
                                       e.i64(0));
    y = b.create<arith::AddIOp>(e.loc, x, kept);
    Value f = e.toFloat(y);
    tokenMemo[{scan.getResult(), t}] = f;
    intMemo[{scan.getResult(), t}] = y;
    if (buffer)
      scanStores[op].push_back(e.storeBuffer(*buffer, f, t));
  }
  return y;
}

/// In the integer copy of a loop, `v` at token `t` as an i64 where it is a
/// count: an integer scan of the loop or a replayed one (emitIntScanStep
/// memoized it), a sum of 0/1 values of an earlier loop, or a select
/// between such integers (intTok); a null Value otherwise.
Value SeqKernelEmitter::intCount(Value v, Value t) {
  if (!intMode)
    return Value();
  Operation *op = v.getDefiningOp();
  if (auto red = dyn_cast<ReduceOp>(op)) {
    if (red.getKind() != ReduceKind::Sum ||
        domainOf(red.getOperand()) != Domain::Token ||
        !isBitValued(red.getOperand()))
      return Value();
    return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(), evalOuter(v));
  }
  auto sel = dyn_cast<SelectOp>(op);
  if (!sel || domainOf(v) != Domain::Token)
    return Value();
  if (Value arm = fixedArm(sel, version))
    return intTok(arm, t);
  Value x = intTok(sel.getTrueValue(), t);
  Value y = x ? intTok(sel.getFalseValue(), t) : x;
  if (!y)
    return Value();
  return b.create<arith::SelectOp>(e.loc, evalTok(sel.getCondition(), t), x, y);
}

/// An integer sum of 0/1 values over the iteration's tokens.
Value SeqKernelEmitter::emitIntSumStep(const Item &it, ArrayRef<Value> ts,
                                       Value acc) {
  Value x = cast<ReduceOp>(it.op).getOperand();
  for (Value t : ts)
    acc = b.create<arith::AddIOp>(
        e.loc, acc,
        b.create<arith::ExtUIOp>(e.loc, b.getI64Type(), bitTok(x, t)));
  return acc;
}

/// Drops the stores of the scans that this version stored in a scratch
/// buffer of their own and never loaded.
void SeqKernelEmitter::eraseDeadScanStores() {
  for (auto &[op, stores] : scanStores) {
    unsigned buf = abi.storage.lookup(op->getResult(0));
    bool scratch =
        abi.buffers[buf - abi.firstBuffer].role == BufferRole::Scratch;
    bool yielded = llvm::any_of(op->getUsers(),
                                [](Operation *u) { return isa<YieldOp>(u); });
    if (!scratch || yielded || loadedScans.count(op))
      continue;
    for (Operation *s : stores)
      s->erase();
  }
}

} // namespace cac::lowering
