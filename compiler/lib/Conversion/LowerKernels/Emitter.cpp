//===- Emitter.cpp - Building blocks of the kernel emitters ---------------===//

#include "Emitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace cac::lowering {

Value Emitter::entryScratch(Type elem, int64_t count) {
  Operation *fn = b.getInsertionBlock()->getParentOp();
  while (!isa<func::FuncOp, gpu::GPUFuncOp>(fn))
    fn = fn->getParentOp();
  OpBuilder ab = OpBuilder::atBlockBegin(&fn->getRegion(0).front());
  Value n = ab.create<arith::ConstantOp>(loc, ab.getI64IntegerAttr(count));
  return ab.create<LLVM::AllocaOp>(
      loc, LLVM::LLVMPointerType::get(b.getContext()), elem, n,
      /*alignment=*/16);
}

Value Emitter::loadBuffer(Value v, Value idx) {
  Value x = load(args[abi.storage.lookup(v)], idx, ft);
  if (elemOf(v).isInteger(1))
    return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, x,
                                   fconst(0.0));
  return x;
}

Operation *Emitter::storeBuffer(unsigned arg, Value v, Value idx) {
  if (v.getType().isInteger(1))
    v = b.create<arith::UIToFPOp>(loc, ft, v);
  return store(v, args[arg], idx);
}

Value Emitter::binary(BinaryOp bin, ArrayRef<Value> x) {
  Location l = bin->getLoc();
  switch (bin.getKind()) {
  case BinaryKind::Add:
    return b.create<arith::AddFOp>(l, x[0], x[1]);
  case BinaryKind::Sub:
    return b.create<arith::SubFOp>(l, x[0], x[1]);
  case BinaryKind::Mul:
    return b.create<arith::MulFOp>(l, x[0], x[1]);
  case BinaryKind::Div:
    return b.create<arith::DivFOp>(l, x[0], x[1]);
  case BinaryKind::Min:
    return b.create<arith::MinimumFOp>(l, x[0], x[1]);
  case BinaryKind::Max:
    return b.create<arith::MaximumFOp>(l, x[0], x[1]);
  case BinaryKind::Pow:
    return b.create<math::PowFOp>(l, x[0], x[1]);
  case BinaryKind::And:
    return b.create<arith::AndIOp>(l, x[0], x[1]);
  case BinaryKind::Or:
    return b.create<arith::OrIOp>(l, x[0], x[1]);
  case BinaryKind::Mod: {
    // Floored modulo, the sign of the divisor (Python's %).
    Value q =
        b.create<math::FloorOp>(l, b.create<arith::DivFOp>(l, x[0], x[1]));
    return b.create<arith::SubFOp>(l, x[0],
                                   b.create<arith::MulFOp>(l, x[1], q));
  }
  }
  llvm_unreachable("unknown binary kind");
}

Value Emitter::unary(UnaryOp un, ArrayRef<Value> x) {
  Location l = un->getLoc();
  switch (un.getKind()) {
  case UnaryKind::Neg:
    return b.create<arith::NegFOp>(l, x[0]);
  case UnaryKind::Exp:
    return b.create<math::ExpOp>(l, x[0]);
  case UnaryKind::Log:
    return b.create<math::LogOp>(l, x[0]);
  case UnaryKind::Sqrt:
    return b.create<math::SqrtOp>(l, x[0]);
  case UnaryKind::Abs:
    return b.create<math::AbsFOp>(l, x[0]);
  case UnaryKind::Sigmoid: {
    Value e = b.create<math::ExpOp>(l, b.create<arith::NegFOp>(l, x[0]));
    return b.create<arith::DivFOp>(l, fconst(1.0),
                                   b.create<arith::AddFOp>(l, fconst(1.0), e));
  }
  case UnaryKind::Not: {
    Value one = b.create<arith::ConstantOp>(l, b.getBoolAttr(true));
    return b.create<arith::XOrIOp>(l, x[0], one);
  }
  case UnaryKind::Floor:
    return b.create<math::FloorOp>(l, x[0]);
  case UnaryKind::Ceil:
    return b.create<math::CeilOp>(l, x[0]);
  case UnaryKind::StopGrad: // the identity; only the gradient stops
    return x[0];
  }
  llvm_unreachable("unknown unary kind");
}

Value Emitter::compare(CmpOp cmp, ArrayRef<Value> x) {
  arith::CmpFPredicate p = arith::CmpFPredicate::OEQ; // set below
  switch (cmp.getPredicate()) {
  case CmpPredicate::LT:
    p = arith::CmpFPredicate::OLT;
    break;
  case CmpPredicate::LE:
    p = arith::CmpFPredicate::OLE;
    break;
  case CmpPredicate::GT:
    p = arith::CmpFPredicate::OGT;
    break;
  case CmpPredicate::GE:
    p = arith::CmpFPredicate::OGE;
    break;
  case CmpPredicate::EQ:
    p = arith::CmpFPredicate::OEQ;
    break;
  case CmpPredicate::NE:
    p = arith::CmpFPredicate::UNE;
    break;
  }
  return b.create<arith::CmpFOp>(cmp->getLoc(), p, x[0], x[1]);
}

Value Emitter::elementwise(Operation *op, ArrayRef<Value> x) {
  Location l = op->getLoc();
  if (auto bin = dyn_cast<BinaryOp>(op))
    return binary(bin, x);
  if (auto un = dyn_cast<UnaryOp>(op))
    return unary(un, x);
  if (auto cmp = dyn_cast<CmpOp>(op))
    return compare(cmp, x);
  if (isa<SelectOp>(op))
    return b.create<arith::SelectOp>(l, x[0], x[1], x[2]);
  if (isa<CastOp>(op))
    return b.create<arith::UIToFPOp>(l, ft, x[0]);
  if (isa<BroadcastOp>(op))
    return x[0];
  llvm_unreachable("not an elementwise operation");
}

Value Emitter::scalar(Value v) {
  auto it = scalars.find(v);
  if (it != scalars.end())
    return it->second;
  OpBuilder::InsertionGuard guard(b);
  if (anchor)
    b.setInsertionPoint(anchor);
  Operation *op = v.getDefiningOp();
  Value r;
  if (isa<ParamOp>(op)) {
    r = args[abi.paramArg.lookup(v)];
  } else if (auto c = dyn_cast<ConstantOp>(op)) {
    r = constantOf(c);
  } else {
    SmallVector<Value> x;
    for (Value o : op->getOperands())
      x.push_back(scalar(o));
    r = elementwise(op, x);
  }
  scalars[v] = r;
  return r;
}

void eraseImplicitYield(scf::ForOp forOp) {
  Block *body = forOp.getBody();
  if (!body->empty() && isa<scf::YieldOp>(body->back()))
    body->back().erase();
}

bool isElementwise(Operation *op) {
  return isa<BinaryOp, UnaryOp, CmpOp, SelectOp, CastOp>(op);
}

SmallVector<Value> IndexOps::range(
    Value lo, Value hi, ValueRange inits,
    llvm::function_ref<SmallVector<Value>(Value, ValueRange)> step) {
  auto f = b.create<scf::ForOp>(e.loc, lo, hi, e.i64(1), inits);
  eraseImplicitYield(f);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(f.getBody());
    b.create<scf::YieldOp>(e.loc,
                           step(f.getInductionVar(), f.getRegionIterArgs()));
  }
  return SmallVector<Value>(f.getResults().begin(), f.getResults().end());
}

void IndexOps::each(Value lo, Value hi, llvm::function_ref<void(Value)> body) {
  range(lo, hi, {}, [&](Value i, ValueRange) {
    body(i);
    return SmallVector<Value>{};
  });
}

void IndexOps::when(Value cond, llvm::function_ref<void()> body) {
  auto ifOp = b.create<scf::IfOp>(e.loc, cond, /*withElse=*/false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  body();
}

Value IndexOps::ifElse(Value cond, llvm::function_ref<Value()> thenFn,
                       llvm::function_ref<Value()> elseFn) {
  auto ifOp = b.create<scf::IfOp>(e.loc, TypeRange{b.getI64Type()}, cond,
                                  /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  b.create<scf::YieldOp>(e.loc, thenFn());
  b.setInsertionPointToStart(&ifOp.getElseRegion().front());
  b.create<scf::YieldOp>(e.loc, elseFn());
  return ifOp.getResult(0);
}

Value IndexOps::startOf(unsigned ends, Value k) {
  Value first = cmpI(arith::CmpIPredicate::eq, k, e.i64(0));
  Value prev =
      b.create<arith::SelectOp>(e.loc, first, e.i64(0), sub(k, e.i64(1)));
  return b.create<arith::SelectOp>(e.loc, first, e.i64(0), idx(ends, prev));
}

} // namespace cac::lowering
