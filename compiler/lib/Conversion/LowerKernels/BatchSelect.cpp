//===- BatchSelect.cpp - batch_top_k and uniform --------------------------===//
//
// batch_top_k(x, k) is two operations. cac.batch_kth runs in a batch kernel
// (one unit) and finds the k-th token of the descending order
// (descendingKey, ties by the lower token index): the k-th smallest key,
// then the token among those holding it. One thread (the CPU) selects by
// 8-bit digits from the top: a pass over the batch's tokens counts, in
// histograms, the digit of the keys that share the digits found so far,
// and one last pass counts the ties in token order (4 + 1 passes in f32,
// 8 + 1 in f64). A block (the GPU) counts bit by bit instead, its threads
// splitting each pass and adding their counts with the block reduction:
// the key's bits from the top, then the token index's (32 + 1 + 31 passes
// in f32, 64 + 1 + 31 in f64). cac.batch_top_k then compares each token
// with that one in the seq kernels. uniform(seed) hashes (seed, sequence,
// position) with splitmix64's finalizer.
//
//===----------------------------------------------------------------------===//

#include "GroupKernel.h"
#include "SeqKernel.h"

#include "mlir/Dialect/Math/IR/Math.h"

namespace cac::lowering {

/// An unsigned comparison of two descendingKey keys (or two indices).
static Value cmpU(OpBuilder &b, Location loc, arith::CmpIPredicate p, Value x,
                  Value y) {
  return b.create<arith::CmpIOp>(loc, p, x, y);
}

Value GroupKernelEmitter::batchKth(BatchKthOp op) {
  Location loc = e.loc;
  IndexOps ix(e);
  Value x = op.getInput();
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  Type it = b.getIntegerType(bits);
  Value n = e.args[kNumTokens];
  // k rounded down and clamped to [0, N]; NaN and k < 1 select nothing.
  Value kf = eval(op.getCount());
  Value some = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGE, kf,
                                       e.fconst(1.0));
  Value kc = b.create<arith::MinimumFOp>(
      loc, b.create<math::FloorOp>(loc, kf), e.toFloat(n));
  kc = b.create<arith::SelectOp>(loc, some, kc, e.fconst(0.0));

  if (!blockCombine)
    return b.create<arith::SelectOp>(loc, some, e.toFloat(kthByDigits(x, kc)),
                                     e.fconst(-1.0));

  // The number of tokens t where pred(key of x[t], t) holds, the same in
  // every thread of a block.
  auto countWhere = [&](llvm::function_ref<Value(Value, Value)> pred) {
    Value lo = blockCombine ? blockTid : e.i64(0);
    Value step = e.i64(blockCombine ? blockSize : 1);
    auto f = b.create<scf::ForOp>(loc, lo, n, step, ValueRange{e.fconst(0.0)});
    eraseImplicitYield(f);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(f.getBody());
      Value t = f.getInductionVar();
      Value key = descendingKey(e, e.loadBuffer(x, t));
      Value one = b.create<arith::SelectOp>(loc, pred(key, t), e.fconst(1.0),
                                            e.fconst(0.0));
      b.create<scf::YieldOp>(
          loc, ValueRange{b.create<arith::AddFOp>(loc, f.getRegionIterArg(0),
                                                  one)});
    }
    Value c = f.getResult(0);
    return blockCombine ? blockCombine(ReduceKind::Sum, c) : c;
  };
  // Sets the bits of `init` from bit `top` down wherever the tokens that
  // `below(candidate)` counts stay fewer than `want`: the largest value
  // with fewer than `want` below it.
  auto greatestBelow = [&](Type ty, int64_t top, Value want,
                           llvm::function_ref<Value(Value, Value, Value)>
                               below) {
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(ty, 0));
    return ix.range(e.i64(0), e.i64(top + 1), {zero},
                    [&](Value i, ValueRange acc) -> SmallVector<Value> {
                      Value sh = ix.sub(e.i64(top), i);
                      if (ty != b.getI64Type())
                        sh = b.create<arith::TruncIOp>(loc, ty, sh);
                      Value bit = b.create<arith::ShLIOp>(
                          loc,
                          b.create<arith::ConstantOp>(
                              loc, b.getIntegerAttr(ty, 1)),
                          sh);
                      Value cand = b.create<arith::OrIOp>(loc, acc[0], bit);
                      Value c = countWhere([&](Value key, Value t) {
                        return below(cand, key, t);
                      });
                      Value fewer = b.create<arith::CmpFOp>(
                          loc, arith::CmpFPredicate::OLT, c, want);
                      return {b.create<arith::SelectOp>(loc, fewer, cand,
                                                        acc[0])};
                    })[0];
  };
  // The k-th smallest key: the largest with fewer than k keys below it.
  Value kthKey = greatestBelow(
      it, bits - 1, kc, [&](Value cand, Value key, Value) {
        return cmpU(b, loc, arith::CmpIPredicate::ult, key, cand);
      });
  // Of the tokens holding it, the order takes the first k - (keys below).
  Value before = countWhere([&](Value key, Value) {
    return cmpU(b, loc, arith::CmpIPredicate::ult, key, kthKey);
  });
  Value need = b.create<arith::SubFOp>(loc, kc, before);
  // Token indices are below 2^31 (the batch's offsets are i32).
  Value at = greatestBelow(
      b.getI64Type(), 30, need, [&](Value cand, Value key, Value t) {
        return b.create<arith::AndIOp>(
            loc, cmpU(b, loc, arith::CmpIPredicate::eq, key, kthKey),
            cmpU(b, loc, arith::CmpIPredicate::slt, t, cand));
      });
  return b.create<arith::SelectOp>(loc, some, e.toFloat(at), e.fconst(-1.0));
}

Value GroupKernelEmitter::kthByDigits(Value x, Value kc) {
  Location loc = e.loc;
  IndexOps ix(e);
  const unsigned bits = e.ft.getIntOrFloatBitWidth();
  Type it = b.getIntegerType(bits), i64 = b.getI64Type();
  Value n = e.args[kNumTokens];
  auto key = [&](Value t) { return descendingKey(e, e.loadBuffer(x, t)); };
  auto shiftedRight = [&](Value v, unsigned by) -> Value {
    return b.create<arith::ShRUIOp>(
        loc, v, b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, by)));
  };
  DigitHistograms hist(e);
  // r: the rank (0-based, ascending keys) left among the keys that share
  // the digits found so far (`prefix`).
  Value r = b.create<arith::SubIOp>(
      loc, b.create<arith::FPToSIOp>(loc, i64, kc), e.i64(1));
  Value prefix = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, 0));
  for (const Digit &g : digitsOf(bits, 8)) {
    hist.zero();
    ix.each(e.i64(0), n, [&](Value t) {
      Value k = key(t);
      Value in = b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(1));
      if (g.high < bits) {
        unsigned above = g.shift + g.width;
        Value same = cmpU(b, loc, arith::CmpIPredicate::eq,
                          shiftedRight(k, above), shiftedRight(prefix, above));
        in = b.create<arith::ExtUIOp>(loc, b.getI32Type(), same);
      }
      hist.bump(t, digitOf(e, k, g), in);
    });
    auto [digit, rest] = hist.find(r);
    r = rest;
    Value d = bits == 64
                  ? digit
                  : b.create<arith::TruncIOp>(loc, it, digit).getResult();
    prefix = b.create<arith::OrIOp>(
        loc, prefix,
        b.create<arith::ShLIOp>(
            loc, d,
            b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, g.shift))));
  }
  // The token of the key's ties that has r of them before it.
  SmallVector<Value> acc = ix.range(
      e.i64(0), n, {e.i64(0), e.i64(0)},
      [&](Value t, ValueRange a) -> SmallVector<Value> {
        Value tie = cmpU(b, loc, arith::CmpIPredicate::eq, key(t), prefix);
        Value hit = b.create<arith::AndIOp>(
            loc, tie,
            b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, a[0], r));
        return {b.create<arith::AddIOp>(
                    loc, a[0], b.create<arith::ExtUIOp>(loc, i64, tie)),
                b.create<arith::SelectOp>(loc, hit, t, a[1])};
      });
  return acc[1];
}

SeqKernelEmitter::BatchCut SeqKernelEmitter::batchCut(BatchTopKOp op) {
  auto it = batchCuts.find(op);
  if (it != batchCuts.end())
    return it->second;
  Location loc = e.loc;
  Value x = op.getInput();
  assert(!inKernel(x) && "cac-partition stores a batch_top_k's operand");
  Value kth = b.create<arith::FPToSIOp>(loc, b.getI64Type(),
                                        evalOuter(op.getKth()));
  Value some =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, kth, e.i64(0));
  Value at = b.create<arith::SelectOp>(loc, some, kth, e.i64(0));
  // Read before the token loops: only where the sequence has tokens, as
  // an empty batch's x has no token 0.
  Type keyType = b.getIntegerType(e.ft.getIntOrFloatBitWidth());
  Value any =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, len, e.i64(0));
  auto ifOp =
      b.create<scf::IfOp>(loc, TypeRange{keyType}, any, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    b.create<scf::YieldOp>(loc, descendingKey(e, e.loadBuffer(x, at)));
    b.setInsertionPointToStart(ifOp.elseBlock());
    b.create<scf::YieldOp>(loc, ValueRange{b.create<arith::ConstantOp>(
                                    loc, b.getIntegerAttr(keyType, 0))});
  }
  BatchCut c{some, kth, ifOp.getResult(0)};
  batchCuts[op] = c;
  return c;
}

Value SeqKernelEmitter::batchTopK(BatchTopKOp op, Value t) {
  Location loc = e.loc;
  BatchCut c = batchCut(op);
  Value mine = descendingKey(e, evalTok(op.getInput(), t));
  Value ahead = cmpU(b, loc, arith::CmpIPredicate::ult, mine, c.key);
  Value tie = b.create<arith::AndIOp>(
      loc, cmpU(b, loc, arith::CmpIPredicate::eq, mine, c.key),
      cmpU(b, loc, arith::CmpIPredicate::sle, t, c.kth));
  return b.create<arith::AndIOp>(loc, c.some,
                                 b.create<arith::OrIOp>(loc, ahead, tie));
}

/// splitmix64's output function of z + the golden gamma.
static Value splitmix(Emitter &e, Value z) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  auto c = [&](uint64_t v) { return e.i64(static_cast<int64_t>(v)); };
  auto xorShift = [&](Value v, int64_t s) {
    return b.create<arith::XOrIOp>(loc, v,
                                   b.create<arith::ShRUIOp>(loc, v, e.i64(s)));
  };
  z = b.create<arith::AddIOp>(loc, z, c(0x9E3779B97F4A7C15ull));
  z = b.create<arith::MulIOp>(loc, xorShift(z, 30), c(0xBF58476D1CE4E5B9ull));
  z = b.create<arith::MulIOp>(loc, xorShift(z, 27), c(0x94D049BB133111EBull));
  return xorShift(z, 31);
}

Value SeqKernelEmitter::uniform(UniformOp op, Value t) {
  Location loc = e.loc;
  // The seed truncated to an integer, clamped to +-2^62 (NaN: 0).
  Value s = evalOuter(op.getSeed());
  Value nan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, s, s);
  const double lim = 4611686018427387904.0; // 2^62
  s = b.create<arith::MaximumFOp>(
      loc, b.create<arith::MinimumFOp>(loc, s, e.fconst(lim)),
      e.fconst(-lim));
  s = b.create<arith::SelectOp>(loc, nan, e.fconst(0.0), s);
  Value seed = b.create<arith::FPToSIOp>(loc, b.getI64Type(), s);
  Value pos = b.create<arith::SubIOp>(loc, t, start);
  Value h = splitmix(e, seed);
  h = splitmix(e, b.create<arith::XOrIOp>(loc, h, unit));
  h = splitmix(e, b.create<arith::XOrIOp>(loc, h, pos));
  // The top mantissa-width bits, scaled to [0, 1): exact in either width.
  const unsigned digits = e.ft.isF64() ? 53 : 24;
  Value top = b.create<arith::ShRUIOp>(loc, h, e.i64(64 - digits));
  Value u = b.create<arith::UIToFPOp>(loc, e.ft, top);
  return b.create<arith::MulFOp>(loc, u, e.fconst(std::ldexp(1.0, -int(digits))));
}

} // namespace cac::lowering
