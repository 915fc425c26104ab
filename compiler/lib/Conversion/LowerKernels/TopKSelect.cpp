//===- TopKSelect.cpp - top_k(x, k) as a radix select per sequence --------===//
//
// `top_k(x, k)` is `rank(x) < k` (CacOps.td). A rank that only such a
// comparison reads, against one k per sequence, needs no sort: with m the
// number of ranks below k, the tokens it selects are those whose key
// (descendingKey: a larger x has a smaller unsigned key) is below the key K
// of the token of rank m - 1, and of those whose key is K, the ones up to
// that token `last` (ties go to the lower index):
//   top_k(x, k)[t] = key(x[t]) <u K  or  (key(x[t]) == K and t <= last).
// A most-significant-digit radix select finds (K, last) per sequence: per
// digit, a histogram of the keys that share the digits found so far gives
// the next digit of K and the rank left inside it. Nothing is sorted or
// scattered; the test is evaluated where it is read, from x again.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"
#include "cac/Conversion/BlockKernels.h"

#include "mlir/Dialect/Math/IR/Math.h"

namespace cac::lowering {

Value topKBound(RankOp rank) {
  Value r = rank.getResult(), k;
  for (Operation *u : r.getUsers()) {
    auto cmp = dyn_cast<CmpOp>(u);
    if (!cmp || cmp.getPredicate() != CmpPredicate::LT || cmp.getLhs() != r ||
        cmp.getRhs() == r || (k && cmp.getRhs() != k))
      return {};
    k = cmp.getRhs();
  }
  if (!k)
    return {};
  Value kv = k;
  if (domainOf(k) == Domain::Token) {
    auto bc = k.getDefiningOp<BroadcastOp>();
    if (!bc)
      return {};
    kv = bc.getOperand();
  }
  if (domainOf(kv) == Domain::Token || domainOf(kv) == Domain::Node)
    return {};
  // Known before the rank's loop: no reduction of this kernel reaches k.
  auto kernel = rank->getParentOfType<KernelOp>();
  SmallVector<Value> work{kv};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!definedIn(kernel, v) || !seen.insert(v).second)
      continue;
    Operation *op = v.getDefiningOp();
    if (isa<ReduceOp>(op) || domainOf(v) == Domain::Token)
      return {};
    llvm::append_range(work, op->getOperands());
  }
  return kv;
}

SmallVector<Digit> digitsOf(unsigned bits, unsigned width) {
  SmallVector<Digit> ds;
  for (unsigned hi = bits; hi > 0;) {
    unsigned w = std::min(width, hi);
    ds.push_back({hi, hi - w, w});
    hi -= w;
  }
  return ds;
}

Value digitOf(Emitter &e, Value key, const Digit &g) {
  OpBuilder &b = e.b;
  Type it = key.getType();
  auto iconst = [&](int64_t v) -> Value {
    return b.create<arith::ConstantOp>(e.loc, b.getIntegerAttr(it, v));
  };
  Value sh = b.create<arith::ShRUIOp>(e.loc, key, iconst(g.shift));
  Value v = b.create<arith::AndIOp>(e.loc, sh, iconst((1 << g.width) - 1));
  return it.isInteger(64)
             ? v
             : b.create<arith::ExtUIOp>(e.loc, b.getI64Type(), v).getResult();
}

void DigitHistograms::zero() {
  OpBuilder &b = e.b;
  Value z = b.create<arith::ConstantOp>(e.loc, b.getI32IntegerAttr(0));
  IndexOps(e).each(e.i64(0), e.i64(kBins * kCopies),
                   [&](Value h) { e.store(z, hist, h); });
}

void DigitHistograms::bump(Value i, Value digit, Value by) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value copy = b.create<arith::AndIOp>(loc, i, e.i64(kCopies - 1));
  Value slot = b.create<arith::AddIOp>(
      loc, digit, b.create<arith::MulIOp>(loc, copy, e.i64(kBins)));
  Value c = e.load(hist, slot, b.getI32Type());
  e.store(b.create<arith::AddIOp>(loc, c, by), hist, slot);
}

std::pair<Value, Value> DigitHistograms::find(Value r) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type i64 = b.getI64Type();
  Value z = e.i64(0);
  SmallVector<Value> acc = IndexOps(e).range(
      z, e.i64(kBins), {z, z, z},
      [&](Value h, ValueRange a) -> SmallVector<Value> {
        Value cum = a[0];
        for (int64_t k = 0; k < kCopies; ++k) {
          Value slot = b.create<arith::AddIOp>(loc, h, e.i64(k * kBins));
          cum = b.create<arith::AddIOp>(
              loc, cum,
              b.create<arith::ExtUIOp>(loc, i64,
                                       e.load(hist, slot, b.getI32Type())));
        }
        Value passed =
            b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sle, cum, r);
        Value digit = b.create<arith::AddIOp>(
            loc, a[1], b.create<arith::ExtUIOp>(loc, i64, passed));
        Value base = b.create<arith::SelectOp>(loc, passed, cum, a[2]);
        return {cum, digit, base};
      });
  return {acc[1], b.create<arith::SubIOp>(loc, r, acc[2])};
}

/// m = #{r in 0..len-1 : r < k}: ceil(k) clamped to [0, len], 0 for NaN.
Value SeqKernelEmitter::topKCount(Value kv) {
  Location loc = e.loc;
  Value k = evalOuter(kv);
  Value c = b.create<math::CeilOp>(loc, k);
  Value pos =
      b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, c, e.fconst(0.0));
  c = b.create<arith::SelectOp>(loc, pos, c, e.fconst(0.0));
  Value lenF = e.toFloat(len);
  Value over = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, c, lenF);
  c = b.create<arith::SelectOp>(loc, over, lenF, c);
  return b.create<arith::FPToSIOp>(loc, b.getI64Type(), c);
}

/// (K, last) for sequence with m tokens selected: the select `some` builds
/// where 0 < m < len, else no token (m = 0: no key is below 0, no token
/// before the sequence) or every token (all keys up to the largest, up to
/// the last token).
void SeqKernelEmitter::emitTopKCut(RankOp rank, Value m,
                                   llvm::function_ref<CutFn> some) {
  Location loc = e.loc;
  Type it = b.getIntegerType(e.ft.getIntOrFloatBitWidth());
  Value none =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sle, m, e.i64(0));
  Value all = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, m, len);
  Value either = b.create<arith::OrIOp>(loc, none, all);
  auto ifOp = b.create<scf::IfOp>(loc, TypeRange{it, b.getI64Type()}, either,
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    auto iconst = [&](int64_t v) -> Value {
      return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, v));
    };
    Value key = b.create<arith::SelectOp>(loc, all, iconst(-1), iconst(0));
    Value last = b.create<arith::SelectOp>(
        loc, all, b.create<arith::SubIOp>(loc, end, e.i64(1)),
        b.create<arith::SubIOp>(loc, start, e.i64(1)));
    b.create<scf::YieldOp>(loc, ValueRange{key, last});
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    auto [k, l] = some(b.create<arith::SubIOp>(loc, m, e.i64(1)));
    b.create<scf::YieldOp>(loc, ValueRange{k, l});
  }
  topKCuts[rank.getOperation()] = {ifOp.getResult(0), ifOp.getResult(1)};
}

/// The select by one thread (the CPU's seq kernels, the GPU's with one
/// thread per sequence), on 8-bit digits. The first digit's pass reads x,
/// stores the keys in the candidates' buffer and counts the digits; the
/// next pass keeps the keys with the digit found (the candidates, with
/// their positions, in token order, compacted in place), and each later
/// digit counts and narrows the candidates only. When one key is left, the
/// candidates are its ties in token order, and the remaining rank picks
/// `last`. The counters are four histograms of 256 on the stack, token i
/// counting in histogram i mod 4: consecutive tokens of one digit then add
/// to different counters, not to one whose last store the next add waits
/// for.
void SeqKernelEmitter::emitTopKSelect(RankOp rank, Value kv) {
  Location loc = e.loc;
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  Type it = b.getIntegerType(bits);
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  Abi::RankScratch sc = abi.rankScratch.lookup(rank.getOperation());
  Value candK = e.args[sc.keysB], candP = e.args[sc.permA];
  IndexOps ix(e);
  auto iconst = [&](Type t, int64_t v) -> Value {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
  };
  auto at = [&](Value i) { return b.create<arith::AddIOp>(loc, start, i); };
  DigitHistograms hist(e);
  Value one = iconst(i32, 1);
  // Keeps the candidates j < n whose digit g is `digit`, in order, with
  // their positions (from posAt); returns how many.
  auto keep = [&](Value n, const Digit &g, Value digit,
                  llvm::function_ref<Value(Value)> posAt) {
    return ix
        .range(e.i64(0), n, {e.i64(0)},
               [&](Value j, ValueRange a) -> SmallVector<Value> {
                 Value d = e.load(candK, at(j), it);
                 Value p = posAt(j);
                 Value is = b.create<arith::CmpIOp>(
                     loc, arith::CmpIPredicate::eq, digitOf(e, d, g), digit);
                 e.store(d, candK, at(a[0]));
                 e.store(p, candP, at(a[0]));
                 return {b.create<arith::AddIOp>(
                     loc, a[0], b.create<arith::ExtUIOp>(loc, i64, is))};
               })
        .front();
  };
  Value m = topKCount(kv);
  emitTopKCut(rank, m, [&](Value r) -> std::pair<Value, Value> {
    SmallVector<Digit> ds = digitsOf(bits, 8);
    hist.zero();
    ix.each(e.i64(0), len, [&](Value i) {
      Value d = rankKey(evalTok(rank.getInput(), at(i)));
      e.store(d, candK, at(i));
      hist.bump(i, digitOf(e, d, ds[0]), one);
    });
    auto [digit, rest] = hist.find(r);
    Value n = keep(len, ds[0], digit, [&](Value i) -> Value {
      return bits == 64 ? i : b.create<arith::TruncIOp>(loc, it, i).getResult();
    });
    auto posOfCand = [&](Value j) { return e.load(candP, at(j), it); };
    for (const Digit &g : ArrayRef(ds).drop_front()) {
      hist.zero();
      ix.each(e.i64(0), n, [&](Value j) {
        hist.bump(j, digitOf(e, e.load(candK, at(j), it), g), one);
      });
      std::tie(digit, rest) = hist.find(rest);
      n = keep(n, g, digit, posOfCand);
    }
    Value key = e.load(candK, start, it);
    Value pos = e.load(candP, at(rest), it);
    if (bits != 64)
      pos = b.create<arith::ExtUIOp>(loc, i64, pos);
    return {key, at(pos)};
  });
  // The flags, 1 or 0 per token, in the positions' buffer (free again): a
  // test read at several tokens of several loops (SAPO's segment bounds)
  // is then one load, not the key computed again from x.
  ix.each(e.i64(0), len, [&](Value i) {
    Value t = at(i);
    Value in = topKTest(rank, t);
    e.store(b.create<arith::SelectOp>(loc, in, e.fconst(1.0), e.fconst(0.0)),
            candP, t);
  });
  topKFlags[rank.getOperation()] = candP;
}

/// Whether r is in [lo, lo + n).
static Value holds(OpBuilder &b, Location loc, Value lo, Value n, Value r) {
  Value ge = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, r, lo);
  Value lt = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, r,
                                     b.create<arith::AddIOp>(loc, lo, n));
  return b.create<arith::AndIOp>(loc, ge, lt);
}

/// Hands `vs` (i64s below 2^31) of the thread where `cond` holds to the
/// whole block, through the first slots of shared memory; the barriers
/// free the slots and what came before them.
SmallVector<Value> SeqKernelEmitter::blockHandOver(Value cond,
                                                   ArrayRef<Value> vs) {
  Location loc = e.loc;
  Type i32 = b.getI32Type();
  auto slot = [&](size_t k) {
    return e.ptrAt(threads->shared, e.i64(int64_t(k)), i32);
  };
  threads->barrier();
  IndexOps(e).when(cond, [&] {
    for (auto [k, v] : llvm::enumerate(vs))
      b.create<LLVM::StoreOp>(loc, b.create<arith::TruncIOp>(loc, i32, v),
                              slot(k));
  });
  threads->barrier();
  SmallVector<Value> out;
  for (size_t k = 0; k < vs.size(); ++k)
    out.push_back(b.create<arith::ExtSIOp>(
        loc, b.getI64Type(), b.create<LLVM::LoadOp>(loc, i32, slot(k))));
  threads->barrier();
  return out;
}

/// The sum of the per-thread counts `c` (i64) of the threads before this
/// one (a block scan, exact in floats below 2^24).
Value SeqKernelEmitter::blockPrefixSum(Value c) {
  auto scanned = blockScan(e.fconst(1.0), e.toFloat(c));
  return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(), std::get<1>(scanned));
}

/// The position of the tie of rank r among the tokens whose key is `key`,
/// in token order: each thread counts the ties of its contiguous chunk, a
/// block scan finds the chunk that holds rank r, and its thread finds the
/// token and hands it to the block.
Value SeqKernelEmitter::blockTie(RankOp rank, Value key, Value r) {
  Location loc = e.loc;
  Type i64 = b.getI64Type();
  IndexOps ix(e);
  const int64_t size = threads->size;
  Value chunk = b.create<arith::DivSIOp>(
      loc, b.create<arith::AddIOp>(loc, len, e.i64(size - 1)), e.i64(size));
  Value c0 = b.create<arith::MinSIOp>(
      loc, b.create<arith::MulIOp>(loc, threads->tid, chunk), len);
  Value c1 = b.create<arith::MinSIOp>(
      loc, b.create<arith::AddIOp>(loc, c0, chunk), len);
  auto isTie = [&](Value i) -> Value {
    Value d = rankKey(
        evalTok(rank.getInput(), b.create<arith::AddIOp>(loc, start, i)));
    Value is = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, d, key);
    return b.create<arith::ExtUIOp>(loc, i64, is);
  };
  Value ties = ix.range(c0, c1, {e.i64(0)},
                        [&](Value i, ValueRange a) -> SmallVector<Value> {
                          return {b.create<arith::AddIOp>(loc, a[0], isTie(i))};
                        })
                   .front();
  Value lo = blockPrefixSum(ties);
  Value mine = holds(b, loc, lo, ties, r);
  Value pos = ix.ifElse(
      mine,
      [&] {
        Value want = b.create<arith::SubIOp>(loc, r, lo);
        return ix
            .range(c0, c1, {e.i64(0), e.i64(0)},
                   [&](Value i, ValueRange a) -> SmallVector<Value> {
                     Value is = isTie(i);
                     Value hit = b.create<arith::CmpIOp>(
                         loc, arith::CmpIPredicate::eq, a[0], want);
                     Value at = b.create<arith::AndIOp>(
                         loc, hit,
                         b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne,
                                                 is, e.i64(0)));
                     return {b.create<arith::AddIOp>(loc, a[0], is),
                             b.create<arith::SelectOp>(loc, at, i, a[1])};
                   })
            .back();
      },
      [&] { return e.i64(0); });
  return blockHandOver(mine, {pos})[0];
}

/// The select by a block's threads (the GPU's seq kernels): the digits'
/// histograms in shared memory (as many counters of 4 bytes as fit before
/// its exchange area: 256, 8-bit digits, in the default blocks), each
/// thread adding its tokens (one per row of `size`, so that a warp's loads
/// are contiguous) whose key has the prefix found so far, with shared
/// atomics. Per digit: the counters are zeroed (barrier), counted
/// (barrier); each thread sums its own run of counters; a block scan of
/// the sums (blockScan) finds the thread whose run holds the rank, which
/// finds the digit and the rank left in it and hands both to the block
/// through shared memory. Then each thread counts K's ties in its
/// contiguous chunk (in token order), a block scan finds the chunk of the
/// tie of the remaining rank, and its thread hands over that token. The
/// keys are read from x at every digit; nothing is stored. Every barrier
/// is reached by all threads: trip counts and branches around them depend
/// on the sequence only.
void SeqKernelEmitter::emitTopKSelectBlock(RankOp rank, Value kv) {
  Location loc = e.loc;
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  Type it = b.getIntegerType(bits);
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  const int64_t size = threads->size;
  // 4-byte counters before the exchange area: a power of 2, at most 256.
  const int64_t room = blockExchangeOffset(size) * int64_t(bits / 8) / 4;
  unsigned width = 1;
  while (width < 8 && (int64_t(2) << width) <= room)
    ++width;
  const int64_t bins = int64_t(1) << width;
  const int64_t perThread = std::max<int64_t>(1, bins / size);
  IndexOps ix(e);
  Value tid = threads->tid;
  auto iconst = [&](Type t, int64_t v) -> Value {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
  };
  auto at = [&](Value i) { return b.create<arith::AddIOp>(loc, start, i); };
  auto slot = [&](Value i) { return e.ptrAt(threads->shared, i, i32); };
  auto keyAt = [&](Value i) {
    return rankKey(evalTok(rank.getInput(), at(i)));
  };
  auto toI64 = [&](Value v) -> Value {
    return v.getType() == i64
               ? v
               : b.create<arith::ExtUIOp>(loc, i64, v).getResult();
  };
  Value m = topKCount(kv);
  emitTopKCut(rank, m, [&](Value r) -> std::pair<Value, Value> {
    threads->barrier(); // shared memory is free
    Value prefix = iconst(it, 0);
    for (const Digit &g : digitsOf(bits, width)) {
      // Zeroed counters.
      {
        auto f = b.create<scf::ForOp>(loc, tid, e.i64(bins), e.i64(size));
        OpBuilder::InsertionGuard ig(b);
        b.setInsertionPoint(f.getBody()->getTerminator());
        b.create<LLVM::StoreOp>(loc, iconst(i32, 0), slot(f.getInductionVar()));
      }
      threads->barrier();
      // This thread's tokens with the prefix, counted by digit.
      {
        auto f = b.create<scf::ForOp>(loc, tid, len, e.i64(size));
        OpBuilder::InsertionGuard ig(b);
        b.setInsertionPoint(f.getBody()->getTerminator());
        Value d = keyAt(f.getInductionVar());
        auto add = [&] {
          Value dig = b.create<arith::AndIOp>(
              loc, b.create<arith::ShRUIOp>(loc, d, iconst(it, g.shift)),
              iconst(it, (int64_t(1) << g.width) - 1));
          b.create<LLVM::AtomicRMWOp>(loc, LLVM::AtomicBinOp::add,
                                      slot(toI64(dig)), iconst(i32, 1),
                                      LLVM::AtomicOrdering::monotonic);
        };
        if (g.high == bits) {
          add();
        } else {
          Value high = b.create<arith::ShRUIOp>(loc, d, iconst(it, g.high));
          ix.when(b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, high,
                                          prefix),
                  add);
        }
      }
      threads->barrier();
      // This thread's run of counters, and the digit holding r if the run
      // holds it.
      Value first = b.create<arith::MulIOp>(loc, tid, e.i64(perThread));
      SmallVector<Value> cs;
      Value sum = e.i64(0);
      for (int64_t q = 0; q < perThread; ++q) {
        Value h = b.create<arith::AddIOp>(loc, first, e.i64(q));
        Value in = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, h,
                                           e.i64(bins));
        Value hc = b.create<arith::SelectOp>(loc, in, h, e.i64(0));
        Value c = b.create<arith::ExtUIOp>(
            loc, i64, b.create<LLVM::LoadOp>(loc, i32, slot(hc)));
        cs.push_back(b.create<arith::SelectOp>(loc, in, c, e.i64(0)));
        sum = b.create<arith::AddIOp>(loc, sum, cs.back());
      }
      threads->barrier(); // the counters are read: blockScan may reuse them
      Value lo = blockPrefixSum(sum);
      Value cum = lo, digit = first, base = lo;
      for (int64_t q = 0; q < perThread; ++q) {
        Value next = b.create<arith::AddIOp>(loc, cum, cs[q]);
        Value passed =
            b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sle, next, r);
        digit = b.create<arith::AddIOp>(loc, digit, toI64(passed));
        base = b.create<arith::SelectOp>(loc, passed, next, base);
        cum = next;
      }
      SmallVector<Value> got =
          blockHandOver(holds(b, loc, lo, sum, r),
                        {digit, b.create<arith::SubIOp>(loc, r, base)});
      digit = got[0];
      r = got[1];
      Value d = bits == 64
                    ? digit
                    : b.create<arith::TruncIOp>(loc, it, digit).getResult();
      prefix = b.create<arith::OrIOp>(
          loc, b.create<arith::ShLIOp>(loc, prefix, iconst(it, g.width)), d);
    }
    return {prefix, at(blockTie(rank, prefix, r))};
  });
}

/// Whether top_k(x, k) holds at token `t` by the cut of `rank`.
Value SeqKernelEmitter::topKTest(RankOp rank, Value t) {
  Location loc = e.loc;
  auto [key, last] = topKCuts.lookup(rank.getOperation());
  Value d = rankKey(evalTok(rank.getInput(), t));
  Value below = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, d, key);
  Value tie = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, d, key);
  Value upTo = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sle, t, last);
  return b.create<arith::OrIOp>(loc, below,
                                b.create<arith::AndIOp>(loc, tie, upTo));
}

/// Whether top_k(x, k) holds at token `t`, where `cmp` is a top_k whose
/// rank was selected: its stored flag (one thread) or its test (a block,
/// where the load of x costs what the load of a flag would); null for any
/// other comparison.
Value SeqKernelEmitter::topKMember(CmpOp cmp, Value t) {
  auto rank = cmp.getLhs().getDefiningOp<RankOp>();
  if (!rank || !topKCuts.count(rank.getOperation()))
    return {};
  if (Value flags = topKFlags.lookup(rank.getOperation())) {
    Value f = e.load(flags, t, e.ft);
    return b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::ONE, f,
                                   e.fconst(0.0));
  }
  return topKTest(rank, t);
}

} // namespace cac::lowering
