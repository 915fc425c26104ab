//===- ChunkedScans.cpp - A one-thread loop of scans, in chunks -----------===//
//
// On the CPU a scan's carried FMA leaves the rest of its loop's work (the
// scan's input at each token: GAE's delta, SAE's decay; the stores and sums
// that read the scan) in scalar code, one token after another. A loop of
// scans takes chunks of scanChunk() tokens instead. Its scans are put in
// levels (a scan whose input or decay reads no scan of the loop is at level
// 0; one that reads scans of the loop, one above the highest of them), and
// each chunk is walked twice per level, then once more:
//   the level's scans' inputs and decays at the chunk's tokens, into arrays
//     of the function's stack (no carried value: LLVM vectorizes the loop),
//     reading the lower levels' scans from their buffers or arrays;
//   the level's scans, eight tokens an iteration (four where a decay varies
//     by token) with SerialLoop.cpp's partials, reading those arrays: the
//     FMAs of the carry, a load and a store;
//   after the last level, the stores and reductions, reading the scans'
//     values from their buffers (or from an array, for a scan no buffer
//     holds): vectorized again.
// The chunk's arrays stay in L1, so the extra walks cost loads and stores
// there, not memory traffic.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// Whether loop `l` takes chunks: a one-thread loop of float scans, or one
/// that reads group_pos_sums (ChunkedGroupSums.cpp), on a target that
/// chunks them. A loop that counts in integers (countsInts, both its
/// copies) or carries counters is walked once.
bool SeqKernelEmitter::takesChunks(const Loop &l) {
  if (threads || target.scanChunk() <= 0 || intMode || !counters.empty() ||
      !replayed.empty() || countsInts(l) || !modCounters(l).empty())
    return false;
  return llvm::any_of(l.items,
                      [](const Item &it) { return it.kind == Item::Scan; }) ||
         !posSumsOf(l).empty();
}

/// Each scan's level in loop `l` (0 where its input and decay read no scan
/// of the loop, else one above the highest level they read), into its
/// chunk arrays; returns the number of levels.
unsigned SeqKernelEmitter::scanLevels(const Loop &l) {
  unsigned levels = 0;
  for (const Item &it : l.items) {
    if (it.kind != Item::Scan)
      continue;
    auto scan = cast<ScanOp>(it.op);
    DenseSet<Value> reached;
    reachedFrom(scan.getInput(), reached);
    reachedFrom(scan.getDecay(), reached);
    unsigned level = 0;
    for (Value v : reached)
      if (auto below = chunkArrays.find(v.getDefiningOp());
          below != chunkArrays.end() && below->first != it.op)
        level = std::max(level, below->second.level + 1);
    chunkArrays[it.op].level = level;
    levels = std::max(levels, level + 1);
  }
  return levels;
}

/// The arrays of `l`'s scans: an input or decay that is computed at each
/// token (not a load, not one value for the sequence) gets one, and so does
/// a scan that its buffer does not hold, and each group_pos_sum the loop
/// reads. The loops of the kernel function take them from one pool, as no
/// two run at once.
void SeqKernelEmitter::chunkScratch(Loop &l) {
  size_t used = 0;
  auto array = [&]() {
    if (used == chunkPool.size())
      chunkPool.push_back(e.entryScratch(e.ft, target.scanChunk()));
    return chunkPool[used++];
  };
  auto computed = [&](Value v) {
    return inKernel(v) && !isTokenInvariant(v) &&
           !isa<ScanOp, RankOp>(v.getDefiningOp()) && !storedEarlier.count(v);
  };
  chunkArrays.clear();
  posSumArrays.clear();
  for (Operation *op : posSumsOf(l))
    posSumArrays[op] = array();
  for (const Item &it : l.items) {
    if (it.kind != Item::Scan)
      continue;
    auto scan = cast<ScanOp>(it.op);
    ChunkArrays a;
    if (computed(scan.getInput()))
      a.input = array();
    if (computed(scan.getDecay()))
      a.decay = array();
    if (it.unstored)
      a.value = array();
    chunkArrays[it.op] = a;
  }
}

/// The loop's positions [lo, hi) in chunks; `carried` and the result are
/// the items' carried values, in the items' order.
SmallVector<Value> SeqKernelEmitter::emitChunkedLoop(Loop &l, Value lo,
                                                     Value hi,
                                                     ArrayRef<Value> carried,
                                                     bool backInRange) {
  chunkScratch(l);
  unsigned levels = scanLevels(l);
  const int64_t n = target.scanChunk();
  auto chunks =
      b.create<scf::ForOp>(e.loc, lo, hi, e.i64(n), ValueRange(carried));
  eraseImplicitYield(chunks);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(chunks.getBody());
  chunkBase = chunks.getInductionVar();
  Value chunkEnd = b.create<arith::MinSIOp>(
      e.loc, b.create<arith::AddIOp>(e.loc, chunkBase, e.i64(n)), hi);
  emitPosSumArrays(l, chunkEnd);
  if (llvm::none_of(l.items,
                    [](const Item &it) { return it.kind == Item::Scan; })) {
    // No scan: one walk of the chunk, reading the sums' arrays.
    SmallVector<Value> inits(chunks.getRegionIterArgs().begin(),
                             chunks.getRegionIterArgs().end());
    SmallVector<Value> out =
        emitTokenLoop(l, chunkBase, chunkEnd, 1, inits, backInRange);
    b.create<scf::YieldOp>(e.loc, out);
    return finishChunks(chunks);
  }
  SmallVector<Value> scanned, reduceInits;
  bool after = false;
  for (auto [it, v] :
       llvm::zip(llvm::make_filter_range(l.items,
                                         [](const Item &it) {
                                           return it.kind == Item::Scan ||
                                                  it.kind == Item::Reduce;
                                         }),
                 chunks.getRegionIterArgs()))
    (it.kind == Item::Scan ? scanned : reduceInits).push_back(v);
  for (const Item &it : l.items)
    after = after || it.kind == Item::Reduce || it.kind == Item::Store;
  for (chunkLevel = 0; chunkLevel < levels; ++chunkLevel)
    emitChunkLevel(l, chunkEnd, scanned, backInRange);
  SmallVector<Value> reduced = reduceInits;
  if (after) {
    phase = Phase::After;
    reduced =
        emitTokenLoop(l, chunkBase, chunkEnd, 1, reduceInits, backInRange);
  }
  phase = Phase::All;
  SmallVector<Value> yields;
  unsigned s = 0, r = 0;
  for (const Item &it : l.items)
    if (it.kind == Item::Scan)
      yields.push_back(scanned[s++]);
    else if (it.kind == Item::Reduce)
      yields.push_back(reduced[r++]);
  b.create<scf::YieldOp>(e.loc, yields);
  return finishChunks(chunks);
}

/// The chunk's walks of the scans at level `chunkLevel`: their inputs, then
/// the scans; `scanned` holds every scan's carry, in the items' order, and
/// gets this level's after the chunk.
void SeqKernelEmitter::emitChunkLevel(Loop &l, Value chunkEnd,
                                      SmallVectorImpl<Value> &scanned,
                                      bool backInRange) {
  SmallVector<Value> inits;
  SmallVector<unsigned> slots;
  bool inputs = false;
  // Eight tokens an iteration where every decay is the same at every token;
  // four where one varies (a product of decays more per token: measured
  // 1.1x faster for SAE).
  int64_t step = kChunkUnroll;
  unsigned slot = 0;
  for (const Item &it : l.items) {
    if (it.kind != Item::Scan)
      continue;
    const ChunkArrays &a = chunkArrays[it.op];
    if (a.level == chunkLevel) {
      inputs = inputs || a.input || a.decay;
      if (!isTokenInvariant(cast<ScanOp>(it.op).getDecay()))
        step = kUnroll;
      inits.push_back(scanned[slot]);
      slots.push_back(slot);
    }
    ++slot;
  }
  if (inputs) {
    phase = Phase::Inputs;
    emitTokenLoop(l, chunkBase, chunkEnd, 1, {}, backInRange);
  }
  phase = Phase::Scans;
  Value left = b.create<arith::RemSIOp>(
      e.loc, b.create<arith::SubIOp>(e.loc, chunkEnd, chunkBase), e.i64(step));
  Value whole = b.create<arith::SubIOp>(e.loc, chunkEnd, left);
  SmallVector<Value> out =
      emitTokenLoop(l, chunkBase, whole, step, inits, backInRange);
  out = emitTokenLoop(l, whole, chunkEnd, 1, out, backInRange);
  for (auto [k, v] : llvm::zip(slots, out))
    scanned[k] = v;
}

/// The chunked loop's results, after its body.
SmallVector<Value> SeqKernelEmitter::finishChunks(scf::ForOp chunks) {
  chunkArrays.clear();
  posSumArrays.clear();
  chunkBase = Value();
  return SmallVector<Value>(chunks.getResults().begin(),
                            chunks.getResults().end());
}

/// In a chunk's walk, before its items: the group_pos_sums, the level's
/// scans' inputs and decays (in the walk of its scans) and the values of
/// the lower levels' scans without a buffer (every level's, in the walk
/// after them) at the iteration's tokens `ts` (at offsets `at` in the
/// chunk), loaded from their arrays.
void SeqKernelEmitter::memoizeChunk(Loop &l, ArrayRef<Value> ts,
                                    ArrayRef<Value> at) {
  SmallVector<std::pair<Value, Value>> loads; // (array, value)
  for (auto [op, array] : posSumArrays)
    loads.push_back({array, op->getResult(0)});
  for (const Item &it : l.items) {
    if (it.kind != Item::Scan)
      continue;
    auto scan = cast<ScanOp>(it.op);
    const ChunkArrays &a = chunkArrays[it.op];
    if (phase == Phase::Scans && a.level == chunkLevel) {
      loads.push_back({a.input, scan.getInput()});
      loads.push_back({a.decay, scan.getDecay()});
    }
    if (phase == Phase::After || a.level < chunkLevel)
      loads.push_back({a.value, scan.getResult()});
  }
  for (auto [array, v] : loads)
    if (array)
      for (auto [t, i] : llvm::zip(ts, at))
        tokenMemo[{v, t}] = e.load(array, i, e.ft);
}

/// The walk of the inputs: a scan's input and decay at the tokens `ts`,
/// into the scan's arrays at the offsets `at`.
void SeqKernelEmitter::storeScanInputs(const Item &it, ArrayRef<Value> ts,
                                       ArrayRef<Value> at) {
  auto scan = cast<ScanOp>(it.op);
  const ChunkArrays &a = chunkArrays[it.op];
  for (auto [t, i] : llvm::zip(ts, at)) {
    if (a.input)
      e.store(evalTok(scan.getInput(), t), a.input, i);
    if (a.decay)
      e.store(evalTok(scan.getDecay(), t), a.decay, i);
  }
}

/// The walk of the scans: a scan without a buffer keeps its values at the
/// tokens `ts` in its array (at the offsets `at`), for the walk after it.
void SeqKernelEmitter::storeScanValues(const Item &it, ArrayRef<Value> ts,
                                       ArrayRef<Value> at) {
  const ChunkArrays &a = chunkArrays[it.op];
  if (!a.value)
    return;
  for (auto [t, i] : llvm::zip(ts, at))
    e.store(evalTok(it.op->getResult(0), t), a.value, i);
}

} // namespace cac::lowering
