//===- CpuMath.cpp - The cac-cpu-math pass --------------------------------===//
//
// f32 `math.exp` and `math.log` in arithmetic, so that the CPU's vectorized
// loops hold no call (Passes.td says why, where and how accurate). The exp's
// steps, for x:
//
//   n = roundeven(x * log2(e)), x clamped to [-104, 89] first
//   r = x - n * ln2_hi - n * ln2_lo          (two FMAs; n * ln2_hi is exact)
//   p = 1 + r + r^2/2! + ... + r^7/7!        (Estrin: pairs, r^2, r^4)
//   exp(x) = p * 2^(n >> 1) * 2^(n - (n >> 1)), each power built as
//            ((k + 127) << 23) in the bits of a float
//
// and NaN where x is NaN. The log's, for x:
//
//   x scaled by 2^23 where it is subnormal (its exponent taken back)
//   m, e: the bits' mantissa as a float in [1/2, 1) and the exponent to
//         match; m doubled (e - 1) below sqrt(1/2), so m in [0.707, 1.414)
//   f = m - 1, log(1 + f) = f - f^2/2 + f^3 p(f)  (p: degree 8, Horner)
//   log(x) = log(1 + f) + e ln2_lo + e ln2_hi  (ln2_hi = 0.693359375)
//
// then -inf at 0, +inf at +inf, NaN below 0 and at NaN.
//
//===----------------------------------------------------------------------===//

#include "cac/Conversion/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>
#include <type_traits>

namespace cac {
#define GEN_PASS_DEF_CACCPUMATH
#include "cac/Conversion/Passes.h.inc"
} // namespace cac

using namespace mlir;

namespace {

/// Builds the expansion of one exp or log of type `type` (f32 or a vector of
/// f32).
class MathBuilder {
public:
  MathBuilder(PatternRewriter &b, Location loc, Type type)
      : b(b), loc(loc), type(type) {
    auto vec = dyn_cast<VectorType>(type);
    intType = vec ? Type(vec.clone(b.getI32Type())) : Type(b.getI32Type());
  }

  Value exp(Value x) {
    // Outside [-104, 89] the result is 0 or +inf already; the clamp keeps
    // n and the two exponents in range. A NaN passes both compares.
    Value lo = f(-104.0f), hi = f(89.0f);
    Value xc = select(cmp(arith::CmpFPredicate::OLT, x, lo), lo, x);
    xc = select(cmp(arith::CmpFPredicate::OGT, xc, hi), hi, xc);
    Value n = b.create<math::RoundEvenOp>(
        loc, b.create<arith::MulFOp>(loc, xc, f(1.44269504088896341f)));
    // ln2 = 0x1.62e4p-1 + 0x1.7f7d1cp-20: the first part has 15 significant
    // bits, so its product with |n| <= 150 is exact.
    Value r = fma(n, f(-0x1.62e4p-1f), xc);
    r = fma(n, f(-0x1.7f7d1cp-20f), r);
    // exp(r) for |r| <= ln2/2: the Taylor terms to r^7 (the r^8 term is
    // below 6e-9 of the result), in Estrin's order: four pairs, then r^2 and
    // r^4 joining them: four FMAs deep instead of Horner's seven. In the
    // vector loops both orders measured alike; Horner's rounds closer (0.85
    // ulp at most over cpu-exp.test's sweep, against 1.62).
    Value r2 = b.create<arith::MulFOp>(loc, r, r);
    Value r4 = b.create<arith::MulFOp>(loc, r2, r2);
    Value p01 = fma(r, f(1.0f), f(1.0f));
    Value p23 = fma(r, f(1.0f / 6), f(0.5f));
    Value p45 = fma(r, f(1.0f / 120), f(1.0f / 24));
    Value p67 = fma(r, f(1.0f / 5040), f(1.0f / 720));
    Value p03 = fma(p23, r2, p01);
    Value p47 = fma(p67, r2, p45);
    Value p = fma(p47, r4, p03);
    Value k = b.create<arith::FPToSIOp>(loc, intType, n);
    Value k1 = b.create<arith::ShRSIOp>(loc, k, i(1));
    Value k2 = b.create<arith::SubIOp>(loc, k, k1);
    Value y = b.create<arith::MulFOp>(loc, p, powerOf2(k1));
    y = b.create<arith::MulFOp>(loc, y, powerOf2(k2));
    return select(cmp(arith::CmpFPredicate::UNO, x, x), x, y);
  }

  Value log(Value x) {
    Value tiny = cmp(arith::CmpFPredicate::OLT, x, f(0x1p-126f));
    Value xs = select(tiny, b.create<arith::MulFOp>(loc, x, f(0x1p23f)), x);
    Value bits = b.create<arith::BitcastOp>(loc, intType, xs);
    // The exponent of m in [1/2, 1): the biased exponent less 126.
    Value e = b.create<arith::SubIOp>(
        loc,
        b.create<arith::AndIOp>(loc, b.create<arith::ShRUIOp>(loc, bits, i(23)),
                                i(0xff)),
        select(tiny, i(126 + 23), i(126)));
    Value m = b.create<arith::BitcastOp>(
        loc, type,
        b.create<arith::OrIOp>(
            loc, b.create<arith::AndIOp>(loc, bits, i(0x007fffff)),
            i(0x3f000000)));
    Value low = cmp(arith::CmpFPredicate::OLT, m, f(0.707106781186547524f));
    e = select(low, b.create<arith::SubIOp>(loc, e, i(1)), e);
    // m + m is exact, and so is either subtraction (Sterbenz).
    Value fm = b.create<arith::SubFOp>(
        loc, select(low, b.create<arith::AddFOp>(loc, m, m), m), f(1.0f));
    Value z = b.create<arith::MulFOp>(loc, fm, fm);
    Value p = f(7.0376836292e-2f);
    for (float c : {-1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
                    1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f,
                    -2.4999993993e-1f, 3.3333331174e-1f})
      p = fma(p, fm, f(c));
    Value y =
        b.create<arith::MulFOp>(loc, b.create<arith::MulFOp>(loc, p, fm), z);
    Value fe = b.create<arith::SIToFPOp>(loc, type, e);
    y = fma(fe, f(-2.12194440e-4f), y);
    y = fma(z, f(-0.5f), y);
    Value r = b.create<arith::AddFOp>(loc, fm, y);
    r = fma(fe, f(0.693359375f), r);
    const float inf = std::numeric_limits<float>::infinity();
    r = select(cmp(arith::CmpFPredicate::OEQ, x, f(inf)), f(inf), r);
    r = select(cmp(arith::CmpFPredicate::OEQ, x, f(0.0f)), f(-inf), r);
    r = select(cmp(arith::CmpFPredicate::OLT, x, f(0.0f)),
               f(std::numeric_limits<float>::quiet_NaN()), r);
    return select(cmp(arith::CmpFPredicate::UNO, x, x), x, r);
  }

private:
  Value f(float v) {
    return b.create<arith::ConstantOp>(loc, splat(b.getF32FloatAttr(v)));
  }
  Value i(int32_t v) {
    return b.create<arith::ConstantOp>(loc, splat(b.getI32IntegerAttr(v)));
  }
  TypedAttr splat(TypedAttr a) {
    if (auto vec = dyn_cast<VectorType>(type))
      return DenseElementsAttr::get(vec.clone(a.getType()), a);
    return a;
  }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return b.create<arith::CmpFOp>(loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return b.create<arith::SelectOp>(loc, c, x, y);
  }
  Value fma(Value x, Value y, Value z) {
    return b.create<math::FmaOp>(loc, x, y, z);
  }
  /// 2^k for integers k in [-126, 127].
  Value powerOf2(Value k) {
    Value bits = b.create<arith::ShLIOp>(
        loc, b.create<arith::AddIOp>(loc, k, i(127)), i(23));
    return b.create<arith::BitcastOp>(loc, type, bits);
  }

  PatternRewriter &b;
  Location loc;
  Type type;
  Type intType;
};

/// Whether `yielded`, the value loop-carried in `carried`, is a reduction
/// that LLVM's vectorizer takes: a reassociable float sum, a min, a max or
/// an integer sum of the carried value and one other, with no other use of
/// the carried value.
static bool isVectorizableReduction(BlockArgument carried, Value yielded) {
  Operation *op = yielded.getDefiningOp();
  if (!op || op->getNumOperands() != 2 || !carried.hasOneUse() ||
      !llvm::is_contained(op->getOperands(), Value(carried)))
    return false;
  if (auto add = dyn_cast<arith::AddFOp>(op))
    return arith::bitEnumContainsAll(add.getFastmath(),
                                     arith::FastMathFlags::reassoc);
  return isa<arith::MinimumFOp, arith::MaximumFOp, arith::MinNumFOp,
             arith::MaxNumFOp, arith::AddIOp>(op);
}

/// Whether `op` is in a loop that LLVM vectorizes: an scf.for whose carried
/// values are all reductions. A loop that carries a scan (GAE's, SAE's, a
/// segment method's) runs one token after another, bound by the latency of
/// its chains; there an inline exp's longer chain costs more than a call
/// (vtrace-GAE 1.3x slower), so it keeps libm's.
static bool inVectorizableLoop(Operation *op) {
  auto loop = op->getParentOfType<scf::ForOp>();
  if (!loop)
    return false;
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (auto [carried, yielded] :
       llvm::zip(loop.getRegionIterArgs(), yield.getOperands()))
    if (!isVectorizableReduction(carried, yielded))
      return false;
  return true;
}

/// An f32 exp or log in a vectorized loop (or of a vector), expanded.
template <typename MathOp> struct ExpandF32 : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(MathOp op, PatternRewriter &b) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32() ||
        (!isa<VectorType>(type) && !inVectorizableLoop(op)))
      return failure();
    MathBuilder mb(b, op.getLoc(), type);
    b.replaceOp(op, std::is_same_v<MathOp, math::ExpOp>
                        ? mb.exp(op.getOperand())
                        : mb.log(op.getOperand()));
    return success();
  }
};

struct CacCpuMath : cac::impl::CacCpuMathBase<CacCpuMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandF32<math::ExpOp>, ExpandF32<math::LogOp>>(&getContext());
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
