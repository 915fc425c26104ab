//===- BlockLoop.cpp - A seq kernel's loop walked by a block --------------===//
//
// The GPU's seq kernels (and their CPU simulation) run one block of threads
// per sequence: each loop of the schedule walks the sequence tile by tile
// (docs/pipeline.md, "Seq kernels on the GPU").
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// Affine steps y -> a*y + b. The step `(la, lb)` after `(ea, eb)`:
/// y -> la*(ea*y + eb) + lb.
std::pair<Value, Value> SeqKernelEmitter::affineAfter(Value ea, Value eb,
                                                      Value la, Value lb) {
  return {b.create<arith::MulFOp>(e.loc, la, ea), applyAffine(la, lb, eb)};
}

/// a*y + b.
Value SeqKernelEmitter::applyAffine(Value a, Value bv, Value y) {
  return b.create<arith::AddFOp>(e.loc, bv,
                                 b.create<arith::MulFOp>(e.loc, a, y));
}

static bool isFirstLast(ReduceOp r) {
  return r.getKind() == ReduceKind::First || r.getKind() == ReduceKind::Last;
}

/// A rank reads its whole sequence: the block sorts it before the loop.
void SeqKernelEmitter::emitBlockRanks(Loop &l) {
  bool hasRank = llvm::any_of(
      l.items, [](const Item &it) { return it.kind == Item::Rank; });
  if (!hasRank)
    return;
  bool first = true;
  for (Item &it : l.items) {
    if (it.kind != Item::Rank)
      continue;
    if (!first)
      threads->barrier();
    emitRankSortBlock(cast<RankOp>(it.op));
    first = false;
  }
  threads->barrier();
}

/// A loop of the schedule as a block of threads runs it. The sequence is
/// cut into tiles of size * items tokens, visited in the loop's direction;
/// in a tile, thread `tid` has the `items` consecutive positions from
/// tid * items (positions count in the loop's direction, so a reverse
/// loop's position p is token end - 1 - p). Per tile, each item of the
/// loop is done by all threads before the next item starts:
///   a scan y = x + c * y_prev composes its affine steps (c, x): each
///     thread composes its own tokens' steps, a block-wide scan (blockScan:
///     warp shuffles, then the warps' partials through shared memory)
///     gives each thread the composition of the steps before its own,
///     applied to the carry from the previous tile; the thread then walks
///     its tokens again from that start and stores y. A barrier follows,
///     so later items may read the scan at any token it has reached
///     (other offsets are loaded);
///   a reduction accumulates per thread across tiles and is combined across
///     the block after the last tile (blockReduce; `first`/`last` are read
///     at the sequence's first/last token instead);
///   a store evaluates its value and stores it.
/// Positions past the sequence's end evaluate at its last token (so every
/// load stays inside the sequence), count as the identity step (c = 1,
/// x = 0), join no reduction and store nothing. Every barrier is reached by
/// all threads of the block: trip counts depend on the sequence only.
void SeqKernelEmitter::emitBlockLoop(Loop &l) {
  prepareLoopOuter(l);
  emitBlockRanks(l);
  // Loop-carried values: each scan's carry (the same in every thread),
  // each reduction's per-thread partial.
  SmallVector<Value> inits;
  for (Item &it : l.items) {
    if (it.kind == Item::Scan)
      inits.push_back(e.fconst(0.0));
    else if (it.kind == Item::Reduce && !isFirstLast(cast<ReduceOp>(it.op)))
      inits.push_back(reduceInit(cast<ReduceOp>(it.op)));
  }
  Tiles tl = blockTiles();
  Value tileLen = tl.tileLen, tiles = tl.tiles;
  // The thread's first position in a tile and the step to its next one:
  // blocked, tid * items + j; striped, j * size + tid (a warp's j-th loads
  // and stores are then 32 contiguous tokens). A scan costs one block scan
  // per tile when blocked and one per row when striped, so striped suits
  // loops without a scan and blocked the others, hence auto
  // (docs/benchmarks.md).
  bool hasScan = llvm::any_of(
      l.items, [](const Item &it) { return it.kind == Item::Scan; });
  const bool striped =
      threads->layout == BlockThreads::Layout::Striped ||
      (threads->layout == BlockThreads::Layout::Auto && !hasScan);
  TileStart at = tileStart(striped);
  Value first = at.first, lastPos = at.lastPos, lastTok = at.lastTok;
  const int64_t stride = striped ? threads->size : 1;
  // A split sequence's part walks its own tiles, from the carries of the
  // parts before it.
  std::optional<PartTiles> pt;
  if (part) {
    pt = partTiles(tiles, tileLen);
    splitCarries(l, *pt, tiles, inits);
  }
  auto forOp = b.create<scf::ForOp>(e.loc, pt ? pt->lo : e.i64(0),
                                    pt ? pt->hi : tiles, e.i64(1), inits);
  eraseImplicitYield(forOp);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(forOp.getBody());
    Value base = b.create<arith::AddIOp>(
        e.loc, b.create<arith::MulIOp>(e.loc, forOp.getInductionVar(), tileLen),
        first);
    llvm::SetVector<Value> loads;
    if (threads->prefetch)
      tileLoads = &loads;
    forgetTokens();
    SmallVector<Value> ts, ins;
    tileTokens(base, stride, lastPos, lastTok, l.reverse, ts, ins);
    SmallVector<Value> yields =
        emitTileItems(l, forOp.getRegionIterArgs(), ts, ins, striped);
    tileLoads = nullptr;
    if (!loads.empty())
      emitTilePrefetch(loads, base, tileLen, lastTok, l.reverse);
    b.create<scf::YieldOp>(e.loc, yields);
    forgetTokens();
  }
  finishBlockReductions(l, forOp);
}

SeqKernelEmitter::Tiles SeqKernelEmitter::blockTiles() {
  const int64_t tileSize = threads->size * threads->items;
  Value tileLen = e.i64(tileSize);
  Value tiles = b.create<arith::DivSIOp>(
      e.loc, b.create<arith::AddIOp>(e.loc, len, e.i64(tileSize - 1)), tileLen);
  return {tileLen, tiles};
}

SeqKernelEmitter::TileStart SeqKernelEmitter::tileStart(bool striped) {
  Value first = striped ? threads->tid
                        : b.create<arith::MulIOp>(e.loc, threads->tid,
                                                  e.i64(threads->items))
                              .getResult();
  Value lastPos = b.create<arith::SubIOp>(e.loc, len, e.i64(1));
  Value lastTok = b.create<arith::SubIOp>(e.loc, end, e.i64(1));
  return {first, lastPos, lastTok};
}

/// This thread's `items` tokens of the tile whose first position for it is
/// `base`, `stride` positions apart (`ts`, clamped to the sequence's last
/// position), and whether each is inside the sequence (`ins`).
void SeqKernelEmitter::tileTokens(Value base, int64_t stride, Value lastPos,
                                  Value lastTok, bool reverse,
                                  SmallVectorImpl<Value> &ts,
                                  SmallVectorImpl<Value> &ins) {
  for (int64_t j = 0; j < threads->items; ++j) {
    Value p = b.create<arith::AddIOp>(e.loc, base, e.i64(j * stride));
    Value in =
        b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, p, len);
    Value pc = b.create<arith::SelectOp>(e.loc, in, p, lastPos);
    Value t;
    if (reverse)
      t = b.create<arith::SubIOp>(e.loc, lastTok, pc);
    else
      t = b.create<arith::AddIOp>(e.loc, start, pc);
    ts.push_back(t);
    ins.push_back(in);
  }
}

/// The loop's items for one tile, at this thread's positions (tokens `ts`,
/// `ins` saying which are inside the sequence); returns the carried values.
SmallVector<Value> SeqKernelEmitter::emitTileItems(Loop &l, ValueRange carried,
                                                   ArrayRef<Value> ts,
                                                   ArrayRef<Value> ins,
                                                   bool striped) {
  const int64_t items = threads->items;
  SmallVector<Value> yields;
  unsigned carry = 0;
  for (Item &it : l.items) {
    switch (it.kind) {
    case Item::Scan:
      yields.push_back(emitTileScan(it, carried[carry++], ts, ins, striped));
      break;
    case Item::Rank: // sorted before the loop
      break;
    case Item::Reduce: {
      auto red = cast<ReduceOp>(it.op);
      if (isFirstLast(red))
        break;
      Value acc = carried[carry++];
      for (int64_t j = 0; j < items; ++j) {
        Value stepped =
            reduceStep(red, acc, evalTok(red.getOperand(), ts[j]), ts[j]);
        acc = b.create<arith::SelectOp>(e.loc, ins[j], stepped, acc);
      }
      yields.push_back(acc);
      break;
    }
    case Item::Store:
      for (int64_t j = 0; j < items; ++j) {
        Value v = evalTok(it.value, ts[j]);
        IndexOps(e).when(ins[j], [&] { e.storeBuffer(it.buffer, v, ts[j]); });
      }
      break;
    }
  }
  return yields;
}

/// A scan's tile: stores y at this thread's tokens; returns the carry to
/// the next tile (the same in every thread).
Value SeqKernelEmitter::emitTileScan(const Item &it, Value prev,
                                     ArrayRef<Value> ts, ArrayRef<Value> ins,
                                     bool striped) {
  const int64_t items = threads->items;
  auto scan = cast<ScanOp>(it.op);
  SmallVector<Value> xs, cs;
  Value a = e.fconst(1.0), bb = e.fconst(0.0);
  // Every load of the tile first, then the scans.
  for (int64_t j = 0; j < items; ++j) {
    Value x = evalTok(scan.getInput(), ts[j]);
    Value c = evalTok(scan.getDecay(), ts[j]);
    xs.push_back(b.create<arith::SelectOp>(e.loc, ins[j], x, e.fconst(0.0)));
    cs.push_back(b.create<arith::SelectOp>(e.loc, ins[j], c, e.fconst(1.0)));
    if (!striped)
      std::tie(a, bb) = affineAfter(a, bb, cs[j], xs[j]);
  }
  if (striped) {
    // One block-wide scan per row of `size` tokens, the carry passed from
    // row to row.
    for (int64_t j = 0; j < items; ++j) {
      if (j)
        threads->barrier(); // the previous row's shared memory
      auto [exA, exB, totA, totB] = blockScan(cs[j], xs[j]);
      Value yj = applyAffine(cs[j], xs[j], applyAffine(exA, exB, prev));
      IndexOps(e).when(ins[j], [&] { e.storeBuffer(it.buffer, yj, ts[j]); });
      tokenMemo[{scan.getResult(), ts[j]}] = yj;
      prev = applyAffine(totA, totB, prev);
    }
    threads->barrier();
    return prev;
  }
  auto [exA, exB, totA, totB] = blockScan(a, bb);
  Value y = applyAffine(exA, exB, prev);
  for (int64_t j = 0; j < items; ++j) {
    y = applyAffine(cs[j], xs[j], y);
    Value yj = y;
    IndexOps(e).when(ins[j], [&] { e.storeBuffer(it.buffer, yj, ts[j]); });
    tokenMemo[{scan.getResult(), ts[j]}] = yj;
  }
  Value next = applyAffine(totA, totB, prev);
  threads->barrier();
  return next;
}

/// The next tile's first token of this thread, for each buffer read (in
/// every layout a thread's tokens of a tile share one or a few 128-byte
/// lines with its warp's), asked for before this tile's loads so that L2
/// has them when the next tile starts.
void SeqKernelEmitter::emitTilePrefetch(const llvm::SetVector<Value> &loads,
                                        Value base, Value tileLen,
                                        Value lastTok, bool reverse) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(base.getDefiningOp());
  Value p = b.create<arith::AddIOp>(e.loc, base, tileLen);
  Value in = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, p, len);
  IndexOps(e).when(in, [&] {
    Value t = reverse ? b.create<arith::SubIOp>(e.loc, lastTok, p).getResult()
                      : b.create<arith::AddIOp>(e.loc, start, p).getResult();
    for (Value v : loads) {
      Value addr = b.create<LLVM::PtrToIntOp>(
          e.loc, b.getI64Type(),
          e.ptrAt(e.args[abi.storage.lookup(v)], t, e.ft));
      target.prefetchL2(b, e.loc, addr);
    }
  });
}

/// After the last tile: each reduction's value, in every thread.
void SeqKernelEmitter::finishBlockReductions(Loop &l, scf::ForOp forOp) {
  unsigned carry = 0;
  for (Item &it : l.items) {
    if (it.kind == Item::Scan) {
      ++carry;
      continue;
    }
    if (it.kind != Item::Reduce)
      continue;
    auto red = cast<ReduceOp>(it.op);
    if (isFirstLast(red)) {
      // The value at the sequence's first or last token (0 when empty),
      // which every thread can evaluate: what it reads is complete.
      Value some = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt,
                                           len, e.i64(0));
      auto ifOp = b.create<scf::IfOp>(e.loc, TypeRange{e.ft}, some,
                                      /*withElse=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&ifOp.getThenRegion().front());
        // A new index value, so that nothing memoized at `start` or
        // `end - 1` (defined in this branch only) is reused outside it.
        Value t;
        if (red.getKind() == ReduceKind::First)
          t = b.create<arith::AddIOp>(e.loc, start, e.i64(0));
        else
          t = b.create<arith::SubIOp>(e.loc, end, e.i64(1));
        b.create<scf::YieldOp>(e.loc, evalTok(red.getOperand(), t));
        forgetTokens();
        b.setInsertionPointToStart(&ifOp.getElseRegion().front());
        b.create<scf::YieldOp>(e.loc, e.fconst(0.0));
      }
      outerMemo[red.getResult()] = ifOp.getResult(0);
      continue;
    }
    outerMemo[red.getResult()] =
        reduceFinish(red, blockReduce(red, forOp.getResult(carry++)));
  }
}

} // namespace cac::lowering
