//===- MLIRGen.cpp - From the AST to the cac dialect ----------------------===//
//
// Sema has already checked names, types and domains; this walk turns each
// expression into cac operations, making every implicit broadcast explicit.
//
//===----------------------------------------------------------------------===//

#include "cac/Frontend/MLIRGen.h"
#include "cac/DSL/Parser.h"
#include "cac/DSL/Sema.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace cac;
using cac::ast::Estimator;
using cac::ast::Expr;
using cac::ast::Stmt;
namespace cir = cac::ir;

namespace {

cir::Domain toIR(cac::Domain d) {
  switch (d) {
  case cac::Domain::Scalar:
    return cir::Domain::Scalar;
  case cac::Domain::Token:
    return cir::Domain::Token;
  case cac::Domain::Seg:
    return cir::Domain::Seg;
  case cac::Domain::Seq:
    return cir::Domain::Seq;
  case cac::Domain::Group:
    return cir::Domain::Group;
  case cac::Domain::Node:
    return cir::Domain::Node;
  }
  return cir::Domain::Scalar;
}

class Generator {
public:
  Generator(MLIRContext &ctx, FloatType ft)
      : ctx(ctx), builder(&ctx), floatType(ft) {}

  OwningOpRef<ModuleOp> gen(const Estimator &est) {
    Location loc = toLocation(ctx, est.loc);
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    builder.setInsertionPointToEnd(module->getBody());
    auto estOp = builder.create<cir::EstimatorOp>(loc, est.name);
    Block *body = new Block();
    estOp.getBody().push_back(body);
    builder.setInsertionPointToStart(body);
    for (const Stmt &s : est.stmts)
      genStmt(s);
    return module;
  }

private:
  Location loc(const ast::Location &l) { return toLocation(ctx, l); }

  cir::FieldType field(cir::Domain d, bool pred = false) {
    return cir::FieldType::get(&ctx, d,
                               pred ? Type(builder.getI1Type()) : floatType);
  }
  cir::FieldType field(const ast::Type &t) {
    return field(toIR(t.domain), t.elem == ElemKind::Bool);
  }
  static cir::FieldType typeOf(Value v) {
    return cast<cir::FieldType>(v.getType());
  }

  Value constant(Location l, double v) {
    return builder.create<cir::ConstantOp>(l, field(cir::Domain::Scalar),
                                           builder.getFloatAttr(floatType, v));
  }

  Value broadcast(Location l, Value v, cir::Domain to) {
    cir::FieldType t = typeOf(v);
    if (t.getDomain() == to)
      return v;
    return builder.create<cir::BroadcastOp>(
        l, cir::FieldType::get(&ctx, to, t.getElementType()), v);
  }

  void genStmt(const Stmt &s) {
    Location l = loc(s.loc);
    switch (s.kind) {
    case Stmt::Kind::Input:
      if (s.name == "group")
        return; // The grouping key is batch structure, not a number.
      symbols[s.name] =
          builder.create<cir::InputOp>(l, field(s.type), s.name);
      return;
    case Stmt::Kind::Param: {
      FloatAttr def;
      if (s.defaultValue)
        def = builder.getF64FloatAttr(*s.defaultValue);
      symbols[s.name] =
          builder.create<cir::ParamOp>(l, field(s.type), s.name, def);
      return;
    }
    case Stmt::Kind::Let:
      symbols[s.name] =
          broadcast(l, genExpr(*s.value), toIR(s.type.domain));
      return;
    case Stmt::Kind::Output: {
      Value v = genExpr(*s.value);
      if (typeOf(v).getElementType().isInteger(1))
        v = builder.create<cir::CastOp>(l, field(typeOf(v).getDomain()), v);
      v = broadcast(l, v, toIR(s.type.domain));
      builder.create<cir::OutputOp>(l, s.name, v);
      if (!symbols.count(s.name))
        symbols[s.name] = v;
      return;
    }
    }
  }

  Value binary(Location l, cir::BinaryKind k, Value a, Value b) {
    cir::Domain d = joined({a, b});
    a = broadcast(l, a, d);
    b = broadcast(l, b, d);
    return builder.create<cir::BinaryOp>(l, k, a, b);
  }

  cir::Domain joined(std::initializer_list<Value> vs) {
    cir::Domain d = cir::Domain::Scalar;
    for (Value v : vs) {
      cir::Domain vd = typeOf(v).getDomain();
      if (cir::broadcastsTo(d, vd))
        d = vd;
    }
    return d;
  }

  Value cmp(Location l, cir::CmpPredicate p, Value a, Value b) {
    cir::Domain d = joined({a, b});
    a = broadcast(l, a, d);
    b = broadcast(l, b, d);
    return builder.create<cir::CmpOp>(l, field(d, true), p, a, b);
  }

  Value select(Location l, Value c, Value a, Value b) {
    cir::Domain d = joined({c, a, b});
    c = broadcast(l, c, d);
    a = broadcast(l, a, d);
    b = broadcast(l, b, d);
    return builder.create<cir::SelectOp>(l, a.getType(), c, a, b);
  }

  Value reduce(Location l, cir::ReduceKind k, Value v, cir::Domain to) {
    return builder.create<cir::ReduceOp>(l, field(to), k, v);
  }

  Value genExpr(const Expr &e) {
    Location l = loc(e.loc);
    switch (e.kind) {
    case Expr::Kind::Number:
      return constant(l, e.number);
    case Expr::Kind::Bool:
      return builder.create<cir::ConstantOp>(
          l, field(cir::Domain::Scalar, true),
          builder.getBoolAttr(e.number != 0));
    case Expr::Kind::Name:
      return symbols.lookup(e.name);
    case Expr::Kind::Unary: {
      Value v = genExpr(*e.args[0]);
      return builder.create<cir::UnaryOp>(
          l, e.op == Expr::Op::Neg ? cir::UnaryKind::Neg : cir::UnaryKind::Not,
          v);
    }
    case Expr::Kind::Binary: {
      Value a = genExpr(*e.args[0]);
      Value b = genExpr(*e.args[1]);
      switch (e.op) {
      case Expr::Op::Add:
        return binary(l, cir::BinaryKind::Add, a, b);
      case Expr::Op::Sub:
        return binary(l, cir::BinaryKind::Sub, a, b);
      case Expr::Op::Mul:
        return binary(l, cir::BinaryKind::Mul, a, b);
      case Expr::Op::Div:
        return binary(l, cir::BinaryKind::Div, a, b);
      case Expr::Op::And:
        return binary(l, cir::BinaryKind::And, a, b);
      case Expr::Op::Or:
        return binary(l, cir::BinaryKind::Or, a, b);
      case Expr::Op::Lt:
        return cmp(l, cir::CmpPredicate::LT, a, b);
      case Expr::Op::Le:
        return cmp(l, cir::CmpPredicate::LE, a, b);
      case Expr::Op::Gt:
        return cmp(l, cir::CmpPredicate::GT, a, b);
      case Expr::Op::Ge:
        return cmp(l, cir::CmpPredicate::GE, a, b);
      case Expr::Op::Eq:
        return cmp(l, cir::CmpPredicate::EQ, a, b);
      case Expr::Op::Ne:
        return cmp(l, cir::CmpPredicate::NE, a, b);
      default:
        break;
      }
      return {};
    }
    case Expr::Kind::Call:
      return genCall(e, l);
    }
    return {};
  }

  Value position(Location l) {
    return builder.create<cir::PositionOp>(l, field(cir::Domain::Token));
  }
  Value length(Location l) {
    return builder.create<cir::LengthOp>(l, field(cir::Domain::Seq));
  }

  Value genCall(const Expr &e, Location l) {
    Builtin b = *lookupBuiltin(e.name);
    std::vector<Value> a;
    for (const auto &arg : e.args)
      a.push_back(genExpr(*arg));
    auto unary = [&](cir::UnaryKind k) {
      return builder.create<cir::UnaryOp>(l, k, a[0]);
    };
    switch (b) {
    case Builtin::Exp:
      return unary(cir::UnaryKind::Exp);
    case Builtin::Log:
      return unary(cir::UnaryKind::Log);
    case Builtin::Sqrt:
      return unary(cir::UnaryKind::Sqrt);
    case Builtin::Abs:
      return unary(cir::UnaryKind::Abs);
    case Builtin::Sigmoid:
      return unary(cir::UnaryKind::Sigmoid);
    case Builtin::Min:
      return binary(l, cir::BinaryKind::Min, a[0], a[1]);
    case Builtin::Max:
      return binary(l, cir::BinaryKind::Max, a[0], a[1]);
    case Builtin::Pow:
      return binary(l, cir::BinaryKind::Pow, a[0], a[1]);
    case Builtin::Clip:
      return binary(l, cir::BinaryKind::Max,
                    binary(l, cir::BinaryKind::Min, a[0], a[2]), a[1]);
    case Builtin::Select:
      return select(l, a[0], a[1], a[2]);
    case Builtin::Float:
      return builder.create<cir::CastOp>(l, field(typeOf(a[0]).getDomain()),
                                         a[0]);
    case Builtin::Next:
    case Builtin::Prev: {
      Value fill = a.size() > 1 ? a[1] : constant(l, 0.0);
      fill = broadcast(l, fill, typeOf(a[0]).getDomain());
      return builder.create<cir::ShiftOp>(l, a[0].getType(), a[0],
                                          b == Builtin::Next ? 1 : -1, fill);
    }
    case Builtin::Scan:
    case Builtin::RScan:
    case Builtin::CumSum:
    case Builtin::RCumSum: {
      bool reverse = b == Builtin::RScan || b == Builtin::RCumSum;
      Value decay = a.size() > 1 ? a[1] : constant(l, 1.0);
      decay = broadcast(l, decay, typeOf(a[0]).getDomain());
      return builder.create<cir::ScanOp>(l, a[0].getType(), a[0], decay,
                                         reverse);
    }
    case Builtin::Pos:
      return position(l);
    case Builtin::Length:
      return length(l);
    case Builtin::IsFirst:
      return cmp(l, cir::CmpPredicate::EQ, position(l), constant(l, 0.0));
    case Builtin::IsLast:
      return cmp(l, cir::CmpPredicate::EQ, position(l),
                 binary(l, cir::BinaryKind::Sub, length(l), constant(l, 1.0)));
    case Builtin::SeqSum:
      return reduce(l, cir::ReduceKind::Sum, a[0], cir::Domain::Seq);
    case Builtin::SeqMean:
      return reduce(l, cir::ReduceKind::Mean, a[0], cir::Domain::Seq);
    case Builtin::SeqMin:
      return reduce(l, cir::ReduceKind::Min, a[0], cir::Domain::Seq);
    case Builtin::SeqMax:
      return reduce(l, cir::ReduceKind::Max, a[0], cir::Domain::Seq);
    case Builtin::SeqFirst:
      return reduce(l, cir::ReduceKind::First, a[0], cir::Domain::Seq);
    case Builtin::SeqLast:
      return reduce(l, cir::ReduceKind::Last, a[0], cir::Domain::Seq);
    case Builtin::GroupSum:
      return reduce(l, cir::ReduceKind::Sum, a[0], cir::Domain::Group);
    case Builtin::GroupMean:
      return reduce(l, cir::ReduceKind::Mean, a[0], cir::Domain::Group);
    case Builtin::GroupMin:
      return reduce(l, cir::ReduceKind::Min, a[0], cir::Domain::Group);
    case Builtin::GroupMax:
      return reduce(l, cir::ReduceKind::Max, a[0], cir::Domain::Group);
    case Builtin::GroupVar:
      return reduce(l, cir::ReduceKind::Var, a[0], cir::Domain::Group);
    case Builtin::GroupStd:
      return reduce(l, cir::ReduceKind::Std, a[0], cir::Domain::Group);
    case Builtin::GroupVarUnbiased:
      return reduce(l, cir::ReduceKind::VarUnbiased, a[0], cir::Domain::Group);
    case Builtin::GroupStdUnbiased:
      return reduce(l, cir::ReduceKind::StdUnbiased, a[0], cir::Domain::Group);
    case Builtin::GroupCount:
      return groupCount(l);
    case Builtin::GroupLooMean: {
      // (sum of the group - own value) / (count - 1), and 0 for a group of
      // one sequence.
      Value sum = reduce(l, cir::ReduceKind::Sum, a[0], cir::Domain::Group);
      Value n = groupCount(l);
      Value others = binary(l, cir::BinaryKind::Sub, n, constant(l, 1.0));
      Value mean = binary(l, cir::BinaryKind::Div,
                          binary(l, cir::BinaryKind::Sub, sum, a[0]),
                          binary(l, cir::BinaryKind::Max, others,
                                 constant(l, 1.0)));
      return select(l, cmp(l, cir::CmpPredicate::GT, others, constant(l, 0.0)),
                    mean, constant(l, 0.0));
    }
    }
    return {};
  }

  Value groupCount(Location l) {
    // The count ignores the values it reduces; any seq value will do.
    return reduce(l, cir::ReduceKind::Count, length(l), cir::Domain::Group);
  }

  MLIRContext &ctx;
  OpBuilder builder;
  FloatType floatType;
  llvm::StringMap<Value> symbols;
};

} // namespace

OwningOpRef<ModuleOp> cac::mlirGen(MLIRContext &context,
                                   const Estimator &est, FloatType floatType) {
  context.getOrLoadDialect<cir::CacDialect>();
  return Generator(context, floatType).gen(est);
}
