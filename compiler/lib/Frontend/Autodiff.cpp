//===- Autodiff.cpp - Reverse-mode gradients of cac fields ----------------===//
//
// The body of a `cac.estimator` is one block in program order, so reverse
// mode is a walk of that block backwards from the loss: each operation whose
// result has an adjoint adds its operands' contributions (the rules below).
// The rules are those of PyTorch's autograd for the same LibTorch operations
// the eager backend evaluates (ties of min/max split the gradient in half, abs
// has gradient 0 at 0, ...), so that the compiled gradient can be checked
// against autograd of the eager form (test/reference/check_objective.py).
//
//===----------------------------------------------------------------------===//

#include "cac/Frontend/Autodiff.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
namespace cir = cac::ir;

namespace {

class Differentiator {
public:
  Differentiator(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  Value run(Value loss, Value seed, Value wrt) {
    Block *block = wrt.getParentBlock();
    // Forward: which values depend on `wrt` through differentiable ops.
    active.insert(wrt);
    for (Operation &op : *block) {
      if (!propagatesActivity(&op))
        continue;
      bool any = llvm::any_of(op.getOperands(),
                              [&](Value v) { return active.contains(v); });
      if (any)
        for (Value r : op.getResults())
          if (isFloat(r))
            active.insert(r);
    }
    if (!active.contains(loss))
      return {};
    accumulate(loss, seed);
    // Backward, from the last operation of the block (the adjoint ops are
    // appended after it and are not visited).
    llvm::SmallVector<Operation *> ops;
    for (Operation &op : *block)
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      if (op->getNumResults() != 1)
        continue;
      Value r = op->getResult(0);
      auto it = adjoint.find(r);
      if (it == adjoint.end() || !active.contains(r) || r == wrt)
        continue;
      if (failed(backprop(op, it->second)))
        return {};
    }
    return adjoint.lookup(wrt);
  }

  bool failedOnOp = false;

private:
  static cir::FieldType typeOf(Value v) {
    return cast<cir::FieldType>(v.getType());
  }
  static bool isFloat(Value v) {
    return isa<FloatType>(typeOf(v).getElementType());
  }

  /// Operations whose (float) results can carry a gradient from their
  /// operands. Comparisons, casts of predicates, ranks (in a sequence or a
  /// group), floor/ceil and stop-gradient have zero gradient; structure
  /// (positions, lengths, segment gathers of inputs, counts) does not depend
  /// on values.
  static bool propagatesActivity(Operation *op) {
    if (auto u = dyn_cast<cir::UnaryOp>(op))
      return u.getKind() != cir::UnaryKind::Floor &&
             u.getKind() != cir::UnaryKind::Ceil &&
             u.getKind() != cir::UnaryKind::StopGrad &&
             u.getKind() != cir::UnaryKind::Not;
    if (auto r = dyn_cast<cir::ReduceOp>(op))
      return r.getKind() != cir::ReduceKind::Count;
    if (auto k = dyn_cast<cir::GroupKeyOp>(op))
      return k.getKind() != cir::ReduceKind::Count;
    return !isa<cir::CmpOp, cir::CastOp, cir::RankOp, cir::GroupRankOp,
                cir::BatchKthOp, cir::BatchTopKOp, cir::UniformOp,
                cir::SegGatherOp, cir::InputOp, cir::ParamOp, cir::ConstantOp,
                cir::PositionOp, cir::LengthOp, cir::NumChildrenOp,
                cir::OutputOp>(op);
  }

  // --- Builders (operands are broadcast to a common domain). ---
  Value constant(double v) {
    FloatType ft = cast<FloatType>(typeOf(anyFloat).getElementType());
    return b.create<cir::ConstantOp>(
        loc, cir::FieldType::get(b.getContext(), cir::Domain::Scalar, ft),
        b.getFloatAttr(ft, v));
  }
  Value broadcast(Value v, cir::Domain to) {
    if (typeOf(v).getDomain() == to)
      return v;
    return b.create<cir::BroadcastOp>(
        loc, cir::FieldType::get(b.getContext(), to, typeOf(v).getElementType()),
        v);
  }
  cir::Domain joined(std::initializer_list<Value> vs) {
    cir::Domain d = cir::Domain::Scalar;
    for (Value v : vs)
      if (cir::broadcastsTo(d, typeOf(v).getDomain()))
        d = typeOf(v).getDomain();
    return d;
  }
  Value bin(cir::BinaryKind k, Value x, Value y) {
    cir::Domain d = joined({x, y});
    x = broadcast(x, d);
    y = broadcast(y, d);
    return b.create<cir::BinaryOp>(loc, k, x, y);
  }
  Value add(Value x, Value y) { return bin(cir::BinaryKind::Add, x, y); }
  Value sub(Value x, Value y) { return bin(cir::BinaryKind::Sub, x, y); }
  Value mul(Value x, Value y) { return bin(cir::BinaryKind::Mul, x, y); }
  Value div(Value x, Value y) { return bin(cir::BinaryKind::Div, x, y); }
  Value neg(Value x) {
    return b.create<cir::UnaryOp>(loc, cir::UnaryKind::Neg, x);
  }
  Value unary(cir::UnaryKind k, Value x) {
    return b.create<cir::UnaryOp>(loc, k, x);
  }
  Value cmp(cir::CmpPredicate p, Value x, Value y) {
    cir::Domain d = joined({x, y});
    x = broadcast(x, d);
    y = broadcast(y, d);
    return b.create<cir::CmpOp>(
        loc, cir::FieldType::get(b.getContext(), d, b.getI1Type()), p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    cir::Domain d = joined({c, x, y});
    c = broadcast(c, d);
    x = broadcast(x, d);
    y = broadcast(y, d);
    return b.create<cir::SelectOp>(loc, x.getType(), c, x, y);
  }
  Value shift(Value x, int64_t by, Value fill) {
    fill = broadcast(fill, typeOf(x).getDomain());
    return b.create<cir::ShiftOp>(loc, x.getType(), x, by, fill);
  }
  Value reduceSum(Value x, cir::Domain to) {
    return b.create<cir::ReduceOp>(
        loc, cir::FieldType::get(b.getContext(), to, typeOf(x).getElementType()),
        cir::ReduceKind::Sum, x);
  }
  Value position() {
    return b.create<cir::PositionOp>(
        loc, cir::FieldType::get(b.getContext(), cir::Domain::Token,
                                 typeOf(anyFloat).getElementType()));
  }
  Value length() {
    return b.create<cir::LengthOp>(
        loc, cir::FieldType::get(b.getContext(), cir::Domain::Seq,
                                 typeOf(anyFloat).getElementType()));
  }

  /// Sums a gradient of a finer domain down to `to` (the adjoint of a
  /// broadcast).
  FailureOr<Value> sumTo(Operation *op, Value g, cir::Domain to) {
    cir::Domain from = typeOf(g).getDomain();
    if (from == to)
      return g;
    if (from == cir::Domain::Token &&
        (to == cir::Domain::Seq || to == cir::Domain::Group)) {
      Value s = reduceSum(g, cir::Domain::Seq);
      return to == cir::Domain::Seq ? s : reduceSum(s, cir::Domain::Group);
    }
    if (from == cir::Domain::Seq && to == cir::Domain::Group)
      return reduceSum(g, cir::Domain::Group);
    if ((from == cir::Domain::Token || from == cir::Domain::Seq) &&
        to == cir::Domain::Batch) {
      Value s = from == cir::Domain::Seq ? g : reduceSum(g, cir::Domain::Seq);
      return reduceSum(s, cir::Domain::Batch);
    }
    return fail(op, "cannot carry a gradient from " +
                        stringifyDomain(from).str() + " back to " +
                        stringifyDomain(to).str());
  }

  void accumulate(Value v, Value g) {
    if (!active.contains(v))
      return;
    g = broadcast(g, typeOf(v).getDomain());
    auto [it, fresh] = adjoint.try_emplace(v, g);
    if (!fresh)
      it->second = add(it->second, g);
  }

  LogicalResult fail(Operation *op, const std::string &msg) {
    op->emitError() << "the loss is not differentiable here: " << msg;
    failedOnOp = true;
    return failure();
  }

  LogicalResult backprop(Operation *op, Value g) {
    anyFloat = g;
    Value r = op->getResult(0);
    Value zero = constant(0.0);
    if (auto bo = dyn_cast<cir::BinaryOp>(op))
      return backpropBinary(bo, g, r, zero);
    if (auto u = dyn_cast<cir::UnaryOp>(op))
      return backpropUnary(u, g, r, zero);
    if (auto s = dyn_cast<cir::SelectOp>(op)) {
      accumulate(s.getTrueValue(), select(s.getCondition(), g, zero));
      accumulate(s.getFalseValue(), select(s.getCondition(), zero, g));
      return success();
    }
    if (auto bc = dyn_cast<cir::BroadcastOp>(op)) {
      Value x = bc.getOperand();
      if (!active.contains(x))
        return success();
      auto s = sumTo(op, g, typeOf(x).getDomain());
      if (failed(s))
        return failure();
      accumulate(x, *s);
      return success();
    }
    if (auto red = dyn_cast<cir::ReduceOp>(op))
      return backpropReduce(red, g);
    if (auto sh = dyn_cast<cir::ShiftOp>(op))
      return backpropShift(sh, g, zero);
    if (auto sc = dyn_cast<cir::ScanOp>(op))
      return backpropScan(sc, g, r, zero);
    if (auto ps = dyn_cast<cir::GroupPosSumOp>(op)) {
      // Its own adjoint: x[j, t] adds to every y[i, t] of its group.
      Value gt = broadcast(g, cir::Domain::Token);
      accumulate(ps.getInput(),
                 b.create<cir::GroupPosSumOp>(loc, gt.getType(), gt));
      return success();
    }
    if (isa<cir::GroupKeyOp>(op))
      return fail(op, "group_key_sum and group_key_mean have no gradient rule");
    return fail(op, "'" + op->getName().getStringRef().str() +
                        "' has no gradient rule (tree operations cannot be "
                        "differentiated yet)");
  }

  /// The rule of a binary op: `r` is its result, `zero` the constant 0
  /// that backprop made before dispatching.
  LogicalResult backpropBinary(cir::BinaryOp bo, Value g, Value r, Value zero) {
    Operation *op = bo.getOperation();
    Value x = bo.getLhs(), y = bo.getRhs();
    switch (bo.getKind()) {
    case cir::BinaryKind::Add:
      accumulate(x, g);
      accumulate(y, g);
      return success();
    case cir::BinaryKind::Sub:
      accumulate(x, g);
      if (active.contains(y))
        accumulate(y, neg(g));
      return success();
    case cir::BinaryKind::Mul:
      if (active.contains(x))
        accumulate(x, mul(g, y));
      if (active.contains(y))
        accumulate(y, mul(g, x));
      return success();
    case cir::BinaryKind::Div:
      if (active.contains(x))
        accumulate(x, div(g, y));
      if (active.contains(y))
        accumulate(y, neg(div(mul(g, r), y)));
      return success();
    case cir::BinaryKind::Min:
    case cir::BinaryKind::Max: {
      // Each side gets g where it is the result, g/2 on ties (PyTorch's
      // minimum/maximum).
      bool isMin = bo.getKind() == cir::BinaryKind::Min;
      Value half = mul(g, constant(0.5));
      Value tie = cmp(cir::CmpPredicate::EQ, x, y);
      Value shared = select(tie, half, g);
      if (active.contains(x))
        accumulate(
            x, select(cmp(isMin ? cir::CmpPredicate::GT : cir::CmpPredicate::LT,
                          x, y),
                      zero, shared));
      if (active.contains(y))
        accumulate(
            y, select(cmp(isMin ? cir::CmpPredicate::LT : cir::CmpPredicate::GT,
                          x, y),
                      zero, shared));
      return success();
    }
    case cir::BinaryKind::Pow: {
      if (active.contains(x)) {
        // y * x^(y-1), and 0 where y == 0.
        Value d = mul(y, bin(cir::BinaryKind::Pow, x, sub(y, constant(1.0))));
        accumulate(
            x, select(cmp(cir::CmpPredicate::EQ, y, zero), zero, mul(g, d)));
      }
      if (active.contains(y)) {
        // x^y * log(x), and 0 where x == 0 and y >= 0.
        Value d = mul(r, unary(cir::UnaryKind::Log, x));
        Value cut = b.create<cir::BinaryOp>(
            loc, cir::BinaryKind::And,
            broadcast(cmp(cir::CmpPredicate::EQ, x, zero),
                      typeOf(r).getDomain()),
            broadcast(cmp(cir::CmpPredicate::GE, y, zero),
                      typeOf(r).getDomain()));
        accumulate(y, select(cut, zero, mul(g, d)));
      }
      return success();
    }
    case cir::BinaryKind::Mod:
      if (active.contains(y))
        return fail(op, "'mod' has no gradient with respect to its "
                        "divisor here");
      accumulate(x, g);
      return success();
    case cir::BinaryKind::And:
    case cir::BinaryKind::Or:
      return success();
    }
    return success();
  }

  LogicalResult backpropUnary(cir::UnaryOp u, Value g, Value r, Value zero) {
    Value x = u.getOperand();
    switch (u.getKind()) {
    case cir::UnaryKind::Neg:
      accumulate(x, neg(g));
      return success();
    case cir::UnaryKind::Exp:
      accumulate(x, mul(g, r));
      return success();
    case cir::UnaryKind::Log:
      accumulate(x, div(g, x));
      return success();
    case cir::UnaryKind::Sqrt:
      accumulate(x, div(g, mul(r, constant(2.0))));
      return success();
    case cir::UnaryKind::Abs: {
      Value one = constant(1.0);
      Value sgn = select(
          cmp(cir::CmpPredicate::GT, x, zero), one,
          select(cmp(cir::CmpPredicate::LT, x, zero), constant(-1.0), zero));
      accumulate(x, mul(g, sgn));
      return success();
    }
    case cir::UnaryKind::Sigmoid:
      accumulate(x, mul(g, mul(r, sub(constant(1.0), r))));
      return success();
    default:
      return success();
    }
  }

  LogicalResult backpropShift(cir::ShiftOp sh, Value g, Value zero) {
    // y[t] = x[t+k] inside the sequence, fill[t] outside it.
    int64_t k = sh.getOffset();
    accumulate(sh.getOperand(), shift(g, -k, zero));
    if (active.contains(sh.getFill())) {
      Value shifted = add(position(), constant(double(k)));
      Value outside = k >= 0 ? cmp(cir::CmpPredicate::GE, shifted, length())
                             : cmp(cir::CmpPredicate::LT, shifted, zero);
      accumulate(sh.getFill(), select(outside, g, zero));
    }
    return success();
  }

  LogicalResult backpropScan(cir::ScanOp sc, Value g, Value r, Value zero) {
    // y[t] = x[t] + c[t] * y[t -+ 1]: the adjoint of x is the scan of g in
    // the other direction with the decay shifted by one token; that of c
    // is it times the neighbour y the recurrence read.
    bool rev = sc.getReverse();
    Value c = sc.getDecay();
    Value gx = b.create<cir::ScanOp>(loc, g.getType(), g,
                                     shift(c, rev ? -1 : 1, zero), !rev);
    accumulate(sc.getInput(), gx);
    if (active.contains(c))
      accumulate(c, mul(gx, shift(r, rev ? 1 : -1, zero)));
    return success();
  }

  LogicalResult backpropReduce(cir::ReduceOp red, Value g) {
    Operation *op = red.getOperation();
    Value x = red.getOperand();
    cir::Domain from = typeOf(x).getDomain();
    Value gb = broadcast(g, from);
    switch (red.getKind()) {
    case cir::ReduceKind::Sum:
      accumulate(x, gb);
      return success();
    case cir::ReduceKind::Mean: {
      Value n = from == cir::Domain::Token
                    ? length()
                    : b.create<cir::ReduceOp>(
                          loc, typeOf(red.getResult()), cir::ReduceKind::Count,
                          x);
      accumulate(x, broadcast(div(g, n), from));
      return success();
    }
    case cir::ReduceKind::First:
    case cir::ReduceKind::Last:
      if (from == cir::Domain::Token) {
        Value pos = position();
        Value at = red.getKind() == cir::ReduceKind::First
                       ? cmp(cir::CmpPredicate::EQ, pos, constant(0.0))
                       : cmp(cir::CmpPredicate::EQ, pos,
                             sub(length(), constant(1.0)));
        accumulate(x, select(at, gb, constant(0.0)));
        return success();
      }
      break;
    default:
      break;
    }
    return fail(op, "the reduction '" +
                        stringifyReduceKind(red.getKind()).str() + "' from " +
                        stringifyDomain(from).str() +
                        " has no gradient rule (sum, mean, first and last "
                        "have)");
  }

  OpBuilder &b;
  Location loc;
  Value anyFloat;
  llvm::DenseSet<Value> active;
  llvm::DenseMap<Value, Value> adjoint;
};

} // namespace

Value cac::differentiate(OpBuilder &builder, Location loc, Value loss,
                         Value seed, Value wrt) {
  Differentiator d(builder, loc);
  Value g = d.run(loss, seed, wrt);
  if (!g && !d.failedOnOp)
    emitError(loc) << "the loss does not depend on the input it is "
                      "differentiated by (or only through sg, comparisons, "
                      "floor/ceil or ranks)";
  return g;
}
