//===- RankSort.cpp - rank(x) as a radix sort per sequence ----------------===//
//
// rank[t] = #{u : x[u] > x[t] or (x[u] == x[t] and u < t)}: the position of
// token t when the sequence is sorted by x descending, ties by the lower
// index. A stable LSD radix sort of (key, position) pairs, by one thread
// (emitRankSort) or by a block's threads (emitRankSortBlock); both give the
// same ranks.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"


namespace cac::lowering {

/// The descending order's key of x (Emitter.h): the float's bits, ordered so
/// that a larger x gives a smaller unsigned key (-0.0 is made +0.0 first, so
/// the two tie; every NaN +NaN, which sorts before +inf).
Value descendingKey(Emitter &e, Value x) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  Type it = b.getIntegerType(bits);
  auto iconst = [&](int64_t v) -> Value {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, v));
  };
  x = b.create<arith::AddFOp>(loc, x, e.fconst(0.0)); // -0.0 -> +0.0
  // Every NaN (x86's default NaN has the sign bit set) as +NaN, which
  // sorts before +inf.
  Value isNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, x, x);
  Value qnan = b.create<arith::ConstantOp>(
      loc,
      b.getFloatAttr(
          e.ft, APFloat::getQNaN(cast<FloatType>(e.ft).getFloatSemantics())));
  x = b.create<arith::SelectOp>(loc, isNan, qnan, x);
  Value raw = b.create<arith::BitcastOp>(loc, it, x);
  Value neg =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, raw, iconst(0));
  // Descending: negative floats keep their bits (larger x, smaller
  // magnitude, smaller bits), the others flip all but the sign bit.
  Value flip = b.create<arith::SelectOp>(
      loc, neg, iconst(0),
      iconst(bits == 64 ? std::numeric_limits<int64_t>::max()
                        : std::numeric_limits<int32_t>::max()));
  return b.create<arith::XOrIOp>(loc, raw, flip);
}

/// The rank's sort key of x.
Value SeqKernelEmitter::rankKey(Value x) { return descendingKey(e, x); }

/// The rank's sort as a block of threads runs it (the GPU's seq kernels,
/// where one thread sorting alone leaves the block idle): the same stable
/// LSD radix sort of the same
/// keys, on 4-bit digits (8 passes in f32, 16 in f64, so the sorted pair
/// ends in the first arrays), with the sequence cut into one contiguous
/// chunk per thread, in token order. Per pass:
///   each thread counts its chunk's digits (16 counters in registers);
///   a block-wide scan of the 16 counts (blockDigitSlots: one barrier)
///     gives each thread its first output slot for each digit: the keys
///     of smaller digits (all threads) and of the same digit in the
///     threads before it;
///   each thread scatters its chunk in token order. Stable, as chunks are
///     in token order: the ranks are emitRankSort's exactly.
/// Then rank[start + P[k]] = k per chunk. Every barrier is reached by all
/// threads (trip counts depend on the sequence only); the caller's
/// barrier follows.
void SeqKernelEmitter::emitRankSortBlock(RankOp rank) {
  if (Value k = topKBound(rank))
    return emitTopKSelectBlock(rank, k);
  Location loc = e.loc;
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  const unsigned passes = bits / 4;
  constexpr int64_t digits = 16;
  Type it = b.getIntegerType(bits);
  Abi::RankScratch sc = abi.rankScratch.lookup(rank.getOperation());
  Value keys[2] = {e.args[abi.storage.lookup(rank.getResult())],
                   e.args[sc.keysB]};
  Value perm[2] = {e.args[sc.permA], e.args[sc.permB]};
  auto at = [&](Value i) { return b.create<arith::AddIOp>(loc, start, i); };
  auto min = [&](Value x, Value y) {
    return b.create<arith::MinSIOp>(loc, x, y);
  };
  IndexOps ix(e);
  const int64_t size = threads->size;
  Value chunk = b.create<arith::DivSIOp>(
      loc, b.create<arith::AddIOp>(loc, len, e.i64(size - 1)), e.i64(size));
  Value c0 = min(b.create<arith::MulIOp>(loc, threads->tid, chunk), len);
  Value c1 = min(b.create<arith::AddIOp>(loc, c0, chunk), len);
  ix.each(c0, c1, [&](Value i) {
    Value t = at(i);
    e.store(rankKey(evalTok(rank.getInput(), t)), keys[0], t);
    e.store(e.toFloat(i), perm[0], t);
  });
  threads->barrier();
  for (unsigned p = 0; p < passes; ++p) {
    Value srcK = keys[p % 2], dstK = keys[1 - p % 2];
    Value srcP = perm[p % 2], dstP = perm[1 - p % 2];
    auto digitOf = [&](Value key) -> Value {
      Value sh = b.create<arith::ShRUIOp>(
          loc, key,
          b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, 4 * p)));
      Value dig = b.create<arith::AndIOp>(
          loc, sh, b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, 15)));
      return bits == 64 ? dig
                        : b.create<arith::ExtUIOp>(loc, b.getI64Type(), dig)
                              .getResult();
    };
    // This thread's count of each digit (floats: exact below 2^24).
    SmallVector<Value> zeros(digits, e.fconst(0.0));
    SmallVector<Value> counts = ix.range(
        c0, c1, zeros, [&](Value i, ValueRange acc) -> SmallVector<Value> {
          Value dig = digitOf(e.load(srcK, at(i), it));
          SmallVector<Value> next;
          for (int64_t k = 0; k < digits; ++k) {
            Value is = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                               dig, e.i64(k));
            next.push_back(b.create<arith::SelectOp>(
                loc, is, b.create<arith::AddFOp>(loc, acc[k], e.fconst(1.0)),
                acc[k]));
          }
          return next;
        });
    // Its first slot of each digit (the end-of-pass barrier frees the
    // shared memory again).
    SmallVector<Value> slots = blockDigitSlots(counts);
    ix.range(
        c0, c1, slots, [&](Value i, ValueRange slot) -> SmallVector<Value> {
          Value t = at(i);
          Value key = e.load(srcK, t, it);
          Value dig = digitOf(key);
          Value pos = slot[0];
          SmallVector<Value> next;
          for (int64_t k = 0; k < digits; ++k) {
            Value is = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                               dig, e.i64(k));
            if (k)
              pos = b.create<arith::SelectOp>(loc, is, slot[k], pos);
            next.push_back(b.create<arith::SelectOp>(
                loc, is, b.create<arith::AddFOp>(loc, slot[k], e.fconst(1.0)),
                slot[k]));
          }
          Value out = at(b.create<arith::FPToSIOp>(loc, b.getI64Type(), pos));
          e.store(key, dstK, out);
          e.store(e.load(srcP, t, e.ft), dstP, out);
          return next;
        });
    threads->barrier();
  }
  // Ranks from the sorted permutation (in perm[0]: an even pass count).
  ix.each(c0, c1, [&](Value k) {
    Value p = e.load(perm[0], at(k), e.ft);
    Value pos = b.create<arith::FPToSIOp>(loc, b.getI64Type(), p);
    e.store(e.toFloat(k), keys[0], at(pos));
  });
}

/// rank[t] = #{u : x[u] > x[t] or (x[u] == x[t] and u < t)}, the position
/// of token t when the sequence is sorted by x descending, ties by the lower
/// index. An LSD radix sort of (key, position) pairs per sequence, one byte
/// of the key per pass (4 passes in f32, 8 in f64), O(T) per pass:
///   key  d = the float's bits, ordered so that a larger x gives a smaller
///        unsigned d (-0.0 is made +0.0 first, so the two tie; every NaN
///        +NaN, which sorts before +inf, as in torch.sort(descending=True));
///   one loop writes K = d (in the rank's own buffer), P[t] = t - start and
///   the byte histograms of every pass (a [passes x 256] i32 array on the
///   stack, zeroed per sequence);
///   each pass turns its histogram into offsets and scatters (K, P) by the
///   byte, in token order (stable: ties keep the lower index first), from
///   one pair of arrays to the other; a pass whose byte is the same for
///   every key is skipped;
///   rank[start + P[k]] = k (the keys are dead by then).
/// A radix sort, not a merge sort: a merge step is bound by a chain of
/// dependent loads. Positions are stored as floats: exact below 2^24
/// tokens per sequence in f32.
void SeqKernelEmitter::emitRankSort(RankOp rank) {
  if (Value k = topKBound(rank))
    return emitTopKSelect(rank, k);
  Location loc = e.loc;
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  const unsigned passes = bits / 8;
  Type it = b.getIntegerType(bits);
  Type i32 = b.getI32Type();
  Value keysA = e.args[abi.storage.lookup(rank.getResult())];
  Abi::RankScratch sc = abi.rankScratch.lookup(rank.getOperation());
  Value keysB = e.args[sc.keysB], permA = e.args[sc.permA],
        permB = e.args[sc.permB];
  Value zero = e.i64(0), one = e.i64(1);
  auto at = [&](Value i) { return b.create<arith::AddIOp>(loc, start, i); };
  auto iconst = [&](Type t, int64_t v) -> Value {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
  };
  IndexOps ix(e);
  // The histograms: [passes x 256] i32.
  Value hist = e.entryScratch(b.getI32Type(), int64_t(passes) * 256);
  auto digit = [&](Value d, unsigned p) -> Value {
    Value sh = b.create<arith::ShRUIOp>(loc, d, iconst(it, 8 * p));
    Value byte = b.create<arith::AndIOp>(loc, sh, iconst(it, 255));
    Value idx =
        bits == 64
            ? byte
            : b.create<arith::ExtUIOp>(loc, b.getI64Type(), byte).getResult();
    return b.create<arith::AddIOp>(loc, idx, e.i64(int64_t(p) * 256));
  };
  auto bump = [&](Value slot) {
    Value c = e.load(hist, slot, i32);
    e.store(b.create<arith::AddIOp>(loc, c, iconst(i32, 1)), hist, slot);
    return c;
  };
  // Zeroed histograms.
  ix.range(zero, e.i64(int64_t(passes) * 256), {},
           [&](Value h, ValueRange) -> SmallVector<Value> {
             e.store(iconst(i32, 0), hist, h);
             return {};
           });
  // Keys, the identity permutation and the histograms of every byte.
  ix.range(zero, len, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
    Value t = at(i);
    Value d = rankKey(evalTok(rank.getInput(), t));
    e.store(d, keysA, t);
    e.store(e.toFloat(i), permA, t);
    for (unsigned p = 0; p < passes; ++p)
      bump(digit(d, p));
    return {};
  });
  // The passes, from (keys, perm) of `flipped` to the other pair.
  Value flipped = iconst(b.getI1Type(), 0);
  Value lenI32 = b.create<arith::TruncIOp>(loc, i32, len);
  for (unsigned p = 0; p < passes; ++p) {
    Value srcK = b.create<arith::SelectOp>(loc, flipped, keysB, keysA);
    Value dstK = b.create<arith::SelectOp>(loc, flipped, keysA, keysB);
    Value srcP = b.create<arith::SelectOp>(loc, flipped, permB, permA);
    Value dstP = b.create<arith::SelectOp>(loc, flipped, permA, permB);
    // Needed unless the sequence is shorter than 2 or every key has the
    // first key's byte.
    Value longer =
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, len, one);
    auto need = b.create<scf::IfOp>(loc, TypeRange{b.getI1Type()}, longer,
                                    /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&need.getThenRegion().front());
      Value d0 = e.load(srcK, start, it);
      Value c = e.load(hist, digit(d0, p), i32);
      b.create<scf::YieldOp>(
          loc, ValueRange{b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne,
                                                  c, lenI32)});
      b.setInsertionPointToStart(&need.getElseRegion().front());
      b.create<scf::YieldOp>(loc, ValueRange{iconst(b.getI1Type(), 0)});
    }
    Value run = need.getResult(0);
    auto pass = b.create<scf::IfOp>(loc, run, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&pass.getThenRegion().front());
      // Exclusive prefix sums: the byte's first output slot.
      ix.range(e.i64(int64_t(p) * 256), e.i64(int64_t(p + 1) * 256),
               {iconst(i32, 0)},
               [&](Value h, ValueRange acc) -> SmallVector<Value> {
                 Value c = e.load(hist, h, i32);
                 e.store(acc[0], hist, h);
                 return {b.create<arith::AddIOp>(loc, acc[0], c)};
               });
      ix.range(zero, len, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
        Value t = at(i);
        Value d = e.load(srcK, t, it);
        Value pos =
            b.create<arith::ExtSIOp>(loc, b.getI64Type(), bump(digit(d, p)));
        Value out = at(pos);
        e.store(d, dstK, out);
        e.store(e.load(srcP, t, e.ft), dstP, out);
        return {};
      });
    }
    flipped = b.create<arith::XOrIOp>(loc, flipped, run);
  }
  // Ranks from the sorted permutation, into the rank's buffer.
  Value sorted = b.create<arith::SelectOp>(loc, flipped, permB, permA);
  ix.range(zero, len, {}, [&](Value k, ValueRange) -> SmallVector<Value> {
    Value p = e.load(sorted, at(k), e.ft);
    Value pos = b.create<arith::FPToSIOp>(loc, b.getI64Type(), p);
    e.store(e.toFloat(k), keysA, at(pos));
    return {};
  });
}

} // namespace cac::lowering
