//===- SerialLoop.cpp - A seq kernel's loop walked by one thread ----------===//
//
// The CPU's seq kernels, and the GPU's with one thread per sequence
// (seq-block=0): each loop of the schedule is an scf.for over the
// sequence's tokens.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// Whether the loop takes kUnroll tokens an iteration: when one of its
/// scans discounts, by the same factor at every token (GAE's gamma *
/// lambda), so that the iteration's decay products are loop invariants and
/// the carry's one FMA per token, its speed limit, becomes one per kUnroll
/// tokens. One token an iteration stays faster for a decay that varies by
/// token (SAE: unrolled, it costs a multiply more per token) and for
/// counting scans, decay 1 (VinePPO's segment ids).
bool SeqKernelEmitter::unrolls(const Loop &l) {
  for (const Item &it : l.items) {
    if (it.kind != Item::Scan)
      continue;
    Value c = cast<ScanOp>(it.op).getDecay();
    if (isTokenInvariant(c) && !isConstant(c, 1.0))
      return true;
  }
  return false;
}

/// Whether `v` is the literal `x` (or its broadcast).
bool SeqKernelEmitter::isConstant(Value v, double x) {
  while (auto bc = v.getDefiningOp<BroadcastOp>())
    v = bc.getOperand();
  auto c = v.getDefiningOp<ConstantOp>();
  auto f = c ? dyn_cast<FloatAttr>(c.getValue()) : FloatAttr();
  return f && f.getValueAsDouble() == x;
}

/// Whether `v` has one value for all the tokens of a sequence.
bool SeqKernelEmitter::isTokenInvariant(Value v) {
  if (domainOf(v) != Domain::Token)
    return true;
  auto bc = v.getDefiningOp<BroadcastOp>();
  return bc && domainOf(bc.getOperand()) != Domain::Token &&
         domainOf(bc.getOperand()) != Domain::Node;
}

bool SeqKernelEmitter::isChainReduce(ReduceOp red) {
  switch (red.getKind()) {
  case ReduceKind::Sum:
  case ReduceKind::Mean:
  case ReduceKind::Min:
  case ReduceKind::Max:
    return true;
  default:
    return false;
  }
}

/// The loop over the sequence's tokens, one thread walking them. A scan
/// y_t = x_t + c_t * y_(t-1) carries one FMA from token to token, and that
/// latency, not memory, bounded GAE on the CPU. So a loop that `unrolls`
/// takes its first token alone, then kUnroll tokens an iteration: per scan
/// the partial y_j = Y_j + P_j * carry, with Y_j and P_j (the scan of the
/// iteration's own tokens and the product of their decays) computed apart
/// from the carry, leaves one FMA on the carried path per kUnroll tokens; a
/// sum, mean, min or max adds the kUnroll tokens pairwise before the carry.
/// The tokens left over ((len - 1) mod kUnroll) take a third loop, one at a
/// time.
void SeqKernelEmitter::emitLoop(size_t index) {
  Loop &l = loops[index];
  prepareLoopOuter(l);
  replayed = replaysOf(index);
  DenseSet<Value> seen;
  for (Operation *op : replayed)
    for (Value o : op->getOperands())
      prepareOuter(o, seen);
  // A rank reads its whole sequence: it is sorted before the loop, whose
  // items then read the stored ranks.
  for (Item &it : l.items)
    if (it.kind == Item::Rank)
      emitRankSort(cast<RankOp>(it.op));
  // Loop-carried values: one per scan, one per reduction.
  SmallVector<Value> carried;
  for (Item &it : l.items) {
    if (it.kind == Item::Scan)
      carried.push_back(e.fconst(0.0));
    else if (it.kind == Item::Reduce)
      carried.push_back(reduceInit(cast<ReduceOp>(it.op)));
  }
  SmallVector<ModCounter> found = modCounters(l);
  bool ints = !replayed.empty() || countsInts(l);
  if (found.empty() && !ints) {
    carried = emitLoopTokens(l, carried);
  } else {
    // The counters and integers hold where the float modulo and the
    // float counts are exact (countersApply, IntegerScans.cpp); elsewhere
    // the loop computes them in floats, in a second copy of the loop.
    Value fast = found.empty()
                     ? b.create<arith::CmpIOp>(
                           e.loc, arith::CmpIPredicate::sle, len,
                           e.i64(static_cast<int64_t>(exactLimit(e.ft))))
                     : countersApply(found);
    auto ifOp = b.create<scf::IfOp>(e.loc, ValueRange(carried).getTypes(), fast,
                                    /*withElseRegion=*/true);
    // Without results (a loop of stores and replays) the blocks come with
    // terminators; each copy ends with its own.
    for (Block *blk : {ifOp.thenBlock(), ifOp.elseBlock()})
      if (!blk->empty())
        blk->back().erase();
    OpBuilder::InsertionGuard g(b);
    for (bool withCounters : {true, false}) {
      b.setInsertionPointToStart(withCounters ? ifOp.thenBlock()
                                              : ifOp.elseBlock());
      SmallVector<Value> inits = carried;
      if (withCounters) {
        intMode = true;
        counters = found;
        inits.clear();
        for (Item &it : l.items)
          if (it.kind == Item::Scan || it.kind == Item::Reduce)
            inits.push_back(intInit(it));
        for (const ModCounter &c : found)
          inits.push_back(counterInit(c));
      }
      for (size_t k = 0; k < replayed.size(); ++k)
        inits.push_back(withCounters ? e.i64(0) : e.fconst(0.0));
      SmallVector<Value> out = emitLoopTokens(l, inits);
      counters.clear();
      intMode = false;
      out.resize(carried.size());
      for (Value &v : out)
        if (v.getType().isInteger(64))
          v = e.toFloat(v);
      b.create<scf::YieldOp>(e.loc, out);
    }
    carried.assign(ifOp.getResults().begin(), ifOp.getResults().end());
  }
  replayed.clear();
  unsigned carry = 0;
  for (Item &it : l.items) {
    if (it.kind == Item::Scan) {
      ++carry;
    } else if (it.kind == Item::Reduce) {
      auto red = cast<ReduceOp>(it.op);
      outerMemo[red.getResult()] = reduceFinish(red, carried[carry++]);
    }
  }
}

/// The token loops of `l` from the carried values `carried` (the items',
/// then the counters'); returns them after the last token.
SmallVector<Value>
SeqKernelEmitter::emitLoopTokens(Loop &l, SmallVector<Value> carried) {
  if (takesChunks(l)) {
    if (!readsBehind(l))
      return emitChunkedLoop(l, e.i64(0), len, carried, false);
    Value first = b.create<arith::MinSIOp>(e.loc, len, e.i64(1));
    carried = emitTokenLoop(l, e.i64(0), first, 1, carried, false);
    return emitChunkedLoop(l, first, len, carried, true);
  }
  bool unrolled = unrolls(l);
  if (!unrolled && takesNodeRuns(l)) {
    emitNodeRuns(l);
    return carried;
  }
  if (!unrolled && !readsBehind(l))
    return emitTokenLoop(l, e.i64(0), len, 1, carried, false);
  // The first token alone; after it, the token one step back (t + 1 in a
  // reverse loop, t - 1 in a forward one) is always in the sequence, so
  // `next` and `prev` read it without a bounds check, and within an
  // iteration they reuse the value computed for the previous token.
  Value first = b.create<arith::MinSIOp>(e.loc, len, e.i64(1));
  carried = emitTokenLoop(l, e.i64(0), first, 1, carried, false);
  if (!unrolled)
    return emitTokenLoop(l, first, len, 1, carried, true);
  Value rest = b.create<arith::SubIOp>(e.loc, len, first);
  Value main = b.create<arith::SubIOp>(
      e.loc, len, b.create<arith::RemSIOp>(e.loc, rest, e.i64(kUnroll)));
  carried = emitTokenLoop(l, first, main, kUnroll, carried, true);
  return emitTokenLoop(l, main, len, 1, carried, true);
}

/// Whether the kernel reads a value one token back from where loop `l`
/// walks (`next` in a reverse loop, `prev` in a forward one): then the loop
/// takes its first token alone, and the rest read that token without a
/// bounds check.
bool SeqKernelEmitter::readsBehind(const Loop &l) {
  int64_t behind = l.reverse ? 1 : -1;
  return llvm::any_of(
      kernel.getBody().front().getOps<ShiftOp>(),
      [&](ShiftOp s) { return int64_t(s.getOffset()) == behind; });
}

/// x + c * y, which LLVM may contract into one FMA: the carry is the loop's
/// critical path (one rounding, half the latency).
static Value fma(OpBuilder &b, Location loc, Value x, Value c, Value y) {
  auto contract = arith::FastMathFlagsAttr::get(b.getContext(),
                                                arith::FastMathFlags::contract);
  return b.create<arith::AddFOp>(
      loc, x, b.create<arith::MulFOp>(loc, c, y, contract), contract);
}

/// A scan over the iteration's tokens `ts` from the carry `prev`; stores
/// each token's value in `buffer` (when given), memoizes it and returns the
/// last.
Value SeqKernelEmitter::emitScanStep(Operation *op, ArrayRef<Value> ts,
                                     Value prev,
                                     std::optional<unsigned> buffer) {
  auto scan = cast<ScanOp>(op);
  Value partial, decay, y;
  for (Value t : ts) {
    Value x = evalTok(scan.getInput(), t);
    Value c = evalTok(scan.getDecay(), t);
    if (ts.size() == 1) {
      y = fma(b, e.loc, x, c, prev);
    } else {
      partial = partial ? fma(b, e.loc, x, c, partial) : x;
      decay = decay ? b.create<arith::MulFOp>(e.loc, c, decay) : c;
      y = fma(b, e.loc, partial, decay, prev);
    }
    if (buffer)
      scanStores[op].push_back(e.storeBuffer(*buffer, y, t));
    tokenMemo[{scan.getResult(), t}] = y;
  }
  return y;
}

/// A reduction over the iteration's tokens `ts` from the carry `acc`.
Value SeqKernelEmitter::emitReduceStep(const Item &it, ArrayRef<Value> ts,
                                       Value acc) {
  auto red = cast<ReduceOp>(it.op);
  if (ts.size() > 1 && isChainReduce(red)) {
    // Pairwise over the iteration's tokens, then one step of the carry.
    SmallVector<Value> xs;
    for (Value t : ts)
      xs.push_back(evalTok(red.getOperand(), t));
    while (xs.size() > 1) {
      SmallVector<Value> half;
      for (size_t k = 0; k + 1 < xs.size(); k += 2)
        half.push_back(reduceStep(red, xs[k], xs[k + 1], ts[0]));
      if (xs.size() % 2)
        half.push_back(xs.back());
      xs = std::move(half);
    }
    return reduceStep(red, acc, xs[0], ts[0]);
  }
  for (Value t : ts)
    acc = reduceStep(red, acc, evalTok(red.getOperand(), t), t);
  return acc;
}

/// The buffer that scan item `it` stores its tokens in; none when nothing
/// reads them at another token, in another loop or as an output.
static std::optional<unsigned> storedIn(const Item &it) {
  if (it.unstored)
    return std::nullopt;
  return it.buffer;
}

/// One scf.for over positions [lo, hi) of the sequence (counted from its
/// first token, or from its last in a reverse loop), `step` tokens an
/// iteration; returns the carried values after it.
SmallVector<Value> SeqKernelEmitter::emitTokenLoop(Loop &l, Value lo, Value hi,
                                                   int64_t step,
                                                   ArrayRef<Value> inits,
                                                   bool backInRange) {
  auto forOp =
      b.create<scf::ForOp>(e.loc, lo, hi, e.i64(step), ValueRange(inits));
  eraseImplicitYield(forOp);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(forOp.getBody());
  Value i = forOp.getInductionVar();
  // The iteration's tokens, in the loop's order, and in a chunked loop
  // their offsets in the chunk.
  SmallVector<Value> ts, at;
  for (int64_t j = 0; j < step; ++j) {
    Value ij = j ? b.create<arith::AddIOp>(e.loc, i, e.i64(j)) : i;
    if (chunkBase)
      at.push_back(b.create<arith::SubIOp>(e.loc, ij, chunkBase));
    if (l.reverse)
      ts.push_back(b.create<arith::SubIOp>(
          e.loc, b.create<arith::SubIOp>(e.loc, end, e.i64(1)), ij));
    else
      ts.push_back(b.create<arith::AddIOp>(e.loc, start, ij));
  }
  forgetTokens();
  back.clear();
  if (backInRange)
    for (size_t j = 0; j < ts.size(); ++j)
      back[ts[j]] = j ? ts[j - 1] : Value();
  backOffset = l.reverse ? 1 : -1;
  if (chunkBase)
    memoizeChunk(l, ts, at);
  SmallVector<Value> yields;
  emitTokenItems(l, ts, at, forOp.getRegionIterArgs(), yields);
  b.create<scf::YieldOp>(e.loc, yields);
  back.clear();
  SmallVector<Value> out(forOp.getResults().begin(), forOp.getResults().end());
  return out;
}

/// The items of `l` at the iteration's tokens `ts` (at offsets `at` in a
/// chunk),
/// from the carried values `args`: those of the phase's items (all items',
/// then the counters', then the replayed scans'); appends what the
/// iteration yields to `yields`.
void SeqKernelEmitter::emitTokenItems(Loop &l, ArrayRef<Value> ts,
                                      ArrayRef<Value> at, ValueRange args,
                                      SmallVectorImpl<Value> &yields) {
  unsigned carry = 0;
  ValueRange replayArgs = args.take_back(replayed.size());
  ValueRange counterArgs =
      args.drop_back(replayed.size()).take_back(counters.size());
  SmallVector<Value> counterYields(counterArgs.begin(), counterArgs.end());
  // The replayed scans first: items read them at their own token.
  SmallVector<Value> replayYields;
  for (auto [op, prev] : llvm::zip(replayed, replayArgs))
    replayYields.push_back(intMode ? emitIntScanStep(op, ts, prev, {})
                                   : emitScanStep(op, ts, prev, {}));
  bool scans = phase == Phase::All || phase == Phase::Scans;
  bool after = phase == Phase::All || phase == Phase::After;
  // Items are taken in order, each for all the iteration's tokens: an item
  // reads only earlier items, at this token (memoized) or at a neighbour
  // (stored already, by this iteration or an earlier one).
  for (Item &it : l.items) {
    switch (it.kind) {
    case Item::Scan:
      // A chunk's walks of inputs and scans take one level's scans.
      if ((phase == Phase::Inputs || phase == Phase::Scans) &&
          chunkArrays[it.op].level != chunkLevel)
        break;
      if (phase == Phase::Inputs)
        storeScanInputs(it, ts, at);
      if (!scans)
        break;
      yields.push_back(
          intMode && isIntScan(it.op)
              ? emitIntScanStep(it.op, ts, args[carry++], storedIn(it))
              : emitScanStep(it.op, ts, args[carry++], storedIn(it)));
      if (phase == Phase::Scans)
        storeScanValues(it, ts, at);
      for (auto [k, v] :
           llvm::enumerate(emitCounterSteps(it.op, ts, counterYields)))
        counterYields[k] = v;
      break;
    case Item::Rank: // stored by emitRankSort before the loop
      break;
    case Item::Reduce:
      if (after)
        yields.push_back(intMode && isIntSum(it)
                             ? emitIntSumStep(it, ts, args[carry++])
                             : emitReduceStep(it, ts, args[carry++]));
      break;
    case Item::Store:
      if (after)
        for (Value t : ts)
          e.storeBuffer(it.buffer, evalTok(it.value, t), t);
      break;
    }
  }
  yields.append(counterYields);
  yields.append(replayYields);
}

} // namespace cac::lowering
