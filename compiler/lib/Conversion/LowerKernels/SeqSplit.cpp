//===- SeqSplit.cpp - A sequence's tiles over several blocks --------------===//
//
// With `seq-split N`, a seq kernel that is one loop of token maps and scans
// (splittable) cuts each sequence over P = splitParts(N, num_seqs) blocks,
// so that a batch of few long sequences still fills the GPU: unit u is part
// u % P of sequence u / P, and part j walks tiles [j * K, (j + 1) * K) of
// the sequence's `tiles`, K = ceil(tiles / P), in the loop's direction. A
// scan's value at a part's first token needs the parts before it: the
// kernel NAME_carries, launched first with the same units, composes each
// part's steps of each scan (per tile a block scan of the threads' affine
// steps, as in BlockLoop.cpp) and stores the composition (a, b) at the
// part's first two tokens of the scan's carry buffer (Abi::splitCarries);
// the kernel then starts part j from the composition of parts 0 .. j - 1
// applied to 0, a loop of j steps (docs/pipeline.md, "Splitting long
// sequences").
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

#include "cac/Abi/Manifest.h"

namespace cac::lowering {

/// Whether `v` reads a scan of `kernel` (through the kernel's own ops).
static bool readsScan(KernelOp kernel, Value v, DenseMap<Value, bool> &memo) {
  if (!definedIn(kernel, v))
    return false;
  if (auto it = memo.find(v); it != memo.end())
    return it->second;
  Operation *op = v.getDefiningOp();
  bool reads = isa<ScanOp>(op);
  memo[v] = reads;
  for (Value o : op->getOperands())
    if (!reads && readsScan(kernel, o, memo))
      reads = true;
  memo[v] = reads;
  return reads;
}

bool splittable(KernelOp kernel) {
  if (kernel.getGrid() != Domain::Seq)
    return false;
  DenseMap<Value, bool> memo;
  std::optional<bool> reverse;
  for (Operation &op : kernel.getBody().front()) {
    if (isa<RankOp, ReduceOp, SegGatherOp>(op))
      return false;
    if (auto s = dyn_cast<ShiftOp>(op);
        s && (readsScan(kernel, s.getOperand(), memo) ||
              readsScan(kernel, s.getFill(), memo)))
      return false;
    if (auto s = dyn_cast<ScanOp>(op)) {
      if (readsScan(kernel, s.getInput(), memo) ||
          readsScan(kernel, s.getDecay(), memo))
        return false;
      if (reverse && *reverse != s.getReverse())
        return false;
      reverse = s.getReverse();
    }
  }
  return true;
}

/// The sequence of split unit `unit`; sets the unit's part and the
/// sequence's parts: min(ceil(split / max(num_seqs, 1)), kMaxSplitParts),
/// abi::splitParts, by which the runtime sizes the launch.
Value SeqKernelEmitter::splitUnit(Value unit) {
  Value seqs =
      b.create<arith::MaxSIOp>(e.loc, e.args[kNumSeqs], e.i64(1)).getResult();
  Value ceil = b.create<arith::DivSIOp>(
      e.loc, b.create<arith::AddIOp>(e.loc, e.i64(split - 1), seqs), seqs);
  parts =
      b.create<arith::MinSIOp>(e.loc, ceil, e.i64(cac::abi::kMaxSplitParts));
  part = b.create<arith::RemSIOp>(e.loc, unit, parts);
  return b.create<arith::DivSIOp>(e.loc, unit, parts);
}

/// The unit's run of tiles, [part * K, min(tiles, (part + 1) * K)) with
/// K = ceil(tiles / parts) (empty for the parts past the sequence's end).
SeqKernelEmitter::PartTiles SeqKernelEmitter::partTiles(Value tiles,
                                                        Value tileLen) {
  Value k = b.create<arith::DivSIOp>(
      e.loc,
      b.create<arith::AddIOp>(e.loc, tiles,
                              b.create<arith::SubIOp>(e.loc, parts, e.i64(1))),
      parts);
  Value lo = b.create<arith::MulIOp>(e.loc, part, k);
  Value hi = b.create<arith::MinSIOp>(e.loc, tiles,
                                      b.create<arith::AddIOp>(e.loc, lo, k));
  return {lo, hi, b.create<arith::MulIOp>(e.loc, k, tileLen)};
}

/// The token at position `pos` of a loop in direction `reverse`.
Value SeqKernelEmitter::tokenAt(Value pos, bool reverse) {
  if (reverse)
    return b.create<arith::SubIOp>(
        e.loc, b.create<arith::SubIOp>(e.loc, end, e.i64(1)), pos);
  return b.create<arith::AddIOp>(e.loc, start, pos);
}

/// Each scan's carry into the unit's part (in `inits`, the loop's carried
/// values, whose scans come first in item order): the carries kernel's
/// compositions of the parts before it, applied in order to 0. A part
/// past the sequence's end reads none.
void SeqKernelEmitter::splitCarries(Loop &l, const PartTiles &pt, Value tiles,
                                    SmallVectorImpl<Value> &inits) {
  Value some =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, pt.lo, tiles);
  Value before = b.create<arith::SelectOp>(e.loc, some, part, e.i64(0));
  IndexOps ix(e);
  unsigned carry = 0;
  for (Item &it : l.items) {
    if (it.kind == Item::Reduce)
      ++carry; // none in a splittable kernel; kept in step with inits
    if (it.kind != Item::Scan)
      continue;
    Value buf = e.args[abi.splitCarries.lookup(it.op)];
    SmallVector<Value> y =
        ix.range(e.i64(0), before, ValueRange{inits[carry]},
                 [&](Value i, ValueRange acc) -> SmallVector<Value> {
                   Value p0 = b.create<arith::MulIOp>(e.loc, i, pt.partLen);
                   Value t0 = tokenAt(p0, l.reverse);
                   Value t1 = tokenAt(
                       b.create<arith::AddIOp>(e.loc, p0, e.i64(1)), l.reverse);
                   return {applyAffine(e.load(buf, t0, e.ft),
                                       e.load(buf, t1, e.ft), acc[0])};
                 });
    inits[carry++] = y[0];
  }
}

/// The carries kernel's loop: each scan's steps composed over the unit's
/// part, tile by tile (a block scan of the threads' compositions, blocked
/// layout), stored by thread 0 where a later part of the sequence reads
/// them (a part before the last one is K whole tiles, at least two tokens:
/// splitEnabled).
void SeqKernelEmitter::emitBlockCarries(Loop &l) {
  SmallVector<ScanOp> scans;
  for (Item &it : l.items)
    if (it.kind == Item::Scan)
      scans.push_back(cast<ScanOp>(it.op));
  if (scans.empty())
    return;
  prepareLoopOuter(l);
  const int64_t items = threads->items;
  Tiles tl = blockTiles();
  Value tileLen = tl.tileLen, tiles = tl.tiles;
  PartTiles pt = partTiles(tiles, tileLen);
  TileStart at = tileStart(/*striped=*/false);
  Value first = at.first, lastPos = at.lastPos, lastTok = at.lastTok;
  SmallVector<Value> inits;
  for (size_t k = 0; k < scans.size(); ++k) {
    inits.push_back(e.fconst(1.0));
    inits.push_back(e.fconst(0.0));
  }
  // Only a part that a later part follows: the last one (all of the
  // sequence when it has one part) composes nothing.
  Value later =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, pt.hi, tiles);
  Value hi = b.create<arith::SelectOp>(e.loc, later, pt.hi, pt.lo);
  auto forOp = b.create<scf::ForOp>(e.loc, pt.lo, hi, e.i64(1), inits);
  eraseImplicitYield(forOp);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(forOp.getBody());
    Value base = b.create<arith::AddIOp>(
        e.loc, b.create<arith::MulIOp>(e.loc, forOp.getInductionVar(), tileLen),
        first);
    forgetTokens();
    SmallVector<Value> ts, ins, yields;
    tileTokens(base, 1, lastPos, lastTok, l.reverse, ts, ins);
    ValueRange carried = forOp.getRegionIterArgs();
    for (auto [k, scan] : llvm::enumerate(scans)) {
      Value a = e.fconst(1.0), bb = e.fconst(0.0);
      for (int64_t j = 0; j < items; ++j) {
        Value x = evalTok(scan.getInput(), ts[j]);
        Value c = evalTok(scan.getDecay(), ts[j]);
        x = b.create<arith::SelectOp>(e.loc, ins[j], x, e.fconst(0.0));
        c = b.create<arith::SelectOp>(e.loc, ins[j], c, e.fconst(1.0));
        std::tie(a, bb) = affineAfter(a, bb, c, x);
      }
      auto [exA, exB, totA, totB] = blockScan(a, bb);
      (void)exA;
      (void)exB;
      threads->barrier(); // the block scan's shared memory
      auto [na, nb] =
          affineAfter(carried[2 * k], carried[2 * k + 1], totA, totB);
      yields.push_back(na);
      yields.push_back(nb);
    }
    b.create<scf::YieldOp>(e.loc, yields);
    forgetTokens();
  }
  Value lead =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, pt.lo, pt.hi);
  Value stores = b.create<arith::AndIOp>(
      e.loc, isThread0(), b.create<arith::AndIOp>(e.loc, later, lead));
  IndexOps(e).when(stores, [&] {
    Value p0 = b.create<arith::MulIOp>(e.loc, pt.lo, tileLen);
    Value t0 = tokenAt(p0, l.reverse);
    Value t1 = tokenAt(b.create<arith::AddIOp>(e.loc, p0, e.i64(1)), l.reverse);
    for (auto [k, scan] : llvm::enumerate(scans)) {
      Value buf = e.args[abi.splitCarries.lookup(scan)];
      e.store(forOp.getResult(2 * k), buf, t0);
      e.store(forOp.getResult(2 * k + 1), buf, t1);
    }
  });
}

Value SeqKernelEmitter::seqStorer() {
  if (!part)
    return isThread0();
  Value first =
      b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, part, e.i64(0));
  return b.create<arith::AndIOp>(e.loc, isThread0(), first);
}

} // namespace cac::lowering
