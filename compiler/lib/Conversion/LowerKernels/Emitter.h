//===- Emitter.h - Building blocks of the kernel emitters -------*- C++ -*-===//
//
// Emitter: loads and stores on the bundle's buffers, constants, the
// elementwise operations and the scalars (parameters, literals) of one kernel
// function. IndexOps: indices stored as floats, loops over ranges and
// conditionals, for the rank sort and the tree kernels.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_EMITTER_H
#define CAC_CONVERSION_LOWERKERNELS_EMITTER_H

#include "Abi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace cac::lowering {

class Emitter {
public:
  Emitter(OpBuilder &b, Location loc, Type floatType, ArrayRef<Value> args,
          const Abi &abi)
      : b(b), loc(loc), ft(floatType), args(args.begin(), args.end()),
        abi(abi) {}

  Value i64(int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(v));
  }
  Value fconst(double v) {
    return b.create<arith::ConstantOp>(loc, b.getFloatAttr(ft, v));
  }
  /// The address of element `idx` of `base`, in `base`'s address space
  /// (shared memory is address space 3 on the GPU).
  Value ptrAt(Value base, Value idx, Type elem) {
    return b.create<LLVM::GEPOp>(loc, base.getType(), elem, base,
                                 ValueRange{idx});
  }
  Value load(Value base, Value idx, Type elem) {
    return b.create<LLVM::LoadOp>(loc, elem, ptrAt(base, idx, elem));
  }
  Operation *store(Value v, Value base, Value idx) {
    return b.create<LLVM::StoreOp>(loc, v, ptrAt(base, idx, v.getType()));
  }
  Value loadI32AsI64(unsigned arg, Value idx) {
    Value v = load(args[arg], idx, b.getI32Type());
    return b.create<arith::ExtSIOp>(loc, b.getI64Type(), v);
  }
  /// Loads a stored value; predicates are stored as 1/0 numbers.
  Value loadBuffer(Value v, Value idx);
  Operation *storeBuffer(unsigned arg, Value v, Value idx);
  Value toFloat(Value i) { return b.create<arith::SIToFPOp>(loc, ft, i); }

  /// Builds the elementwise operation `op` on already evaluated operands.
  Value elementwise(Operation *op, ArrayRef<Value> x);

  Value constantOf(ConstantOp c) {
    TypedAttr a = cast<TypedAttr>(c.getValue());
    return b.create<arith::ConstantOp>(c.getLoc(), a);
  }

  /// \p count elements of type \p elem in the kernel function's entry
  /// block (an alloca in the unit loop would grow the stack per unit).
  Value entryScratch(Type elem, int64_t count);

  /// A scalar value (parameters, literals and arithmetic on them), computed
  /// once, before `anchor`, so that any loop can use it.
  Value scalar(Value v);
  DenseMap<Value, Value> scalars;
  /// Scalars are inserted before this operation (the first of the body).
  Operation *anchor = nullptr;

  OpBuilder &b;
  Location loc;
  Type ft;
  SmallVector<Value> args;
  const Abi &abi;

private:
  Value binary(BinaryOp op, ArrayRef<Value> x);
  Value unary(UnaryOp op, ArrayRef<Value> x);
  Value compare(CmpOp op, ArrayRef<Value> x);
};

/// scf.for without loop-carried values comes with a terminator; the
/// emitters add their own.
void eraseImplicitYield(scf::ForOp forOp);

bool isElementwise(Operation *op);

/// The key of x in the descending order of rank and batch_top_k, an integer
/// of x's width: a larger x has a smaller unsigned key, -0.0 ties with 0.0,
/// and every NaN comes before +inf (RankSort.cpp).
Value descendingKey(Emitter &e, Value x);

/// The digits of a most-significant-digit radix select, most significant
/// first: `width` bits each, the last one narrower where `width` does not
/// divide the key's bits.
struct Digit {
  unsigned high;  ///< bits above the digit (the prefix found so far)
  unsigned shift; ///< the digit's lowest bit
  unsigned width;
};
SmallVector<Digit> digitsOf(unsigned bits, unsigned width);
/// Digit `g` of `key` (an integer of the float type's width) as an i64.
Value digitOf(Emitter &e, Value key, const Digit &g);

/// The counters of a radix select by one thread on 8-bit digits
/// (TopKSelect.cpp, BatchSelect.cpp): kCopies histograms of kBins i32 on the
/// stack, item i counting in histogram i mod kCopies, so that consecutive
/// items of one digit add to different counters, not to one whose last
/// store the next add waits for.
class DigitHistograms {
public:
  static constexpr int64_t kBins = 256, kCopies = 4;
  explicit DigitHistograms(Emitter &e)
      : e(e), hist(e.entryScratch(e.b.getI32Type(), kBins * kCopies)) {}
  /// Every counter 0.
  void zero();
  /// Adds `by` (an i32) to digit `digit`'s counter of item `i`'s copy.
  void bump(Value i, Value digit, Value by);
  /// The digit holding rank `r` (0-based, in the digits' order) of the
  /// items counted, and r inside it (both i64).
  std::pair<Value, Value> find(Value r);

private:
  Emitter &e;
  Value hist;
};

/// Helpers shared by the rank sort and the tree kernels: indices stored as
/// floats in scratch buffers, loops over ranges, conditionals.
class IndexOps {
public:
  explicit IndexOps(Emitter &e) : e(e), b(e.b) {}

  Value idx(unsigned buf, Value i) {
    return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(),
                                     e.load(e.args[buf], i, e.ft));
  }
  void setIdx(unsigned buf, Value i, Value v) {
    e.store(e.toFloat(v), e.args[buf], i);
  }
  Value cmpI(arith::CmpIPredicate p, Value x, Value y) {
    return b.create<arith::CmpIOp>(e.loc, p, x, y);
  }
  Value add(Value x, Value y) { return b.create<arith::AddIOp>(e.loc, x, y); }
  Value sub(Value x, Value y) { return b.create<arith::SubIOp>(e.loc, x, y); }
  /// for i in [lo, hi): accs = step(i, accs).
  SmallVector<Value>
  range(Value lo, Value hi, ValueRange inits,
        llvm::function_ref<SmallVector<Value>(Value, ValueRange)> step);
  void each(Value lo, Value hi, llvm::function_ref<void(Value)> body);
  void when(Value cond, llvm::function_ref<void()> body);
  /// cond ? thenFn() : elseFn(), each yielding one i64 (only the taken
  /// branch runs, so it may load where the other may not).
  Value ifElse(Value cond, llvm::function_ref<Value()> thenFn,
               llvm::function_ref<Value()> elseFn);
  /// The start of entry k of a CSR whose ends are in `ends`: ends[k - 1],
  /// 0 for k = 0.
  Value startOf(unsigned ends, Value k);

  Emitter &e;
  OpBuilder &b;
};

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_EMITTER_H
