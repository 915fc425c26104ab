//===- MLIRGen.cpp - From the AST to the cac dialect ----------------------===//
//
// Sema has already checked names, types and domains; this walk turns each
// expression into cac operations, making every implicit broadcast explicit.
//
//===----------------------------------------------------------------------===//

#include "cac/Frontend/MLIRGen.h"
#include "cac/Frontend/Autodiff.h"
#include "cac/DSL/Parser.h"
#include "cac/DSL/Sema.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

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
  case cac::Domain::Batch:
    return cir::Domain::Batch;
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
    current = &est;
    estimatorOp = estOp;
    for (const Stmt &s : est.stmts)
      genStmt(s);
    if (failedGen)
      return nullptr;
    genSegmentOutput(loc);
    return module;
  }

private:
  /// An imported estimator, generated inline where its first output is
  /// used: its inputs are the importer's values of the same names, its
  /// parameters are named `alias_param`, and its outputs become the
  /// importer's `alias.name` values (no cac.output).
  Value genImported(const Expr &e) {
    std::string key = e.qualifier + "." + e.name;
    if (Value v = symbols.lookup(key))
      return v;
    const ast::Import *imp = nullptr;
    for (const ast::Import &i : current->imports)
      if (i.alias == e.qualifier)
        imp = &i;
    if (!imp || generatedImports.count(e.qualifier))
      return {};
    generatedImports.insert(e.qualifier);
    Generator child(ctx, floatType);
    child.builder.setInsertionPoint(builder.getInsertionBlock(),
                                    builder.getInsertionPoint());
    child.current = imp->module.get();
    child.imported = true;
    child.paramPrefix = paramPrefix + e.qualifier + "_";
    for (const Stmt &st : imp->module->stmts) {
      if (st.kind != Stmt::Kind::Input)
        continue;
      if (Value v = symbols.lookup(st.name))
        child.symbols[st.name] = v;
      else if (Value v = segInputs.lookup(st.name))
        child.segInputs[st.name] = v;
    }
    child.firstSeqInput = firstSeqInput;
    child.turnStarts = turnStarts;
    for (const Stmt &st : imp->module->stmts)
      child.genStmt(st);
    turnStarts = child.turnStarts;
    for (auto &kv : child.outputs)
      symbols[e.qualifier + "." + kv.first().str()] = kv.second;
    // The importer reads the imported parameters as `alias_param`.
    for (const Stmt &st : imp->module->stmts)
      if (st.kind == Stmt::Kind::Param)
        symbols[e.qualifier + "_" + st.name] = child.symbols.lookup(st.name);
    return symbols.lookup(key);
  }

  Location loc(const ast::Location &l) { return toLocation(ctx, l); }

  cir::FieldType field(cir::Domain d, bool pred = false) {
    return cir::FieldType::get(&ctx, d,
                               pred ? Type(builder.getI1Type()) : floatType);
  }
  cir::FieldType field(const ast::Type &t) {
    return field(repr(t.domain), t.elem == ElemKind::Bool);
  }
  /// Segment values live on the tokens of their segment (every token holds
  /// its segment's value); only seg inputs keep the seg domain in the IR.
  static cir::Domain repr(cac::Domain d) {
    return d == cac::Domain::Seg ? cir::Domain::Token : toIR(d);
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
      if (s.name == "group" || s.name == "tree")
        return; // The grouping key and the tree are batch structure.
      if (imported)
        return; // Bound to the importer's inputs (genImported).
      if (s.type.domain == cac::Domain::Seg) {
        // Read on the tokens once the segments exist (genName).
        segInputs[s.name] = builder.create<cir::InputOp>(
            l, field(cir::Domain::Seg), s.name);
        return;
      }
      symbols[s.name] =
          builder.create<cir::InputOp>(l, field(s.type), s.name);
      if (!firstSeqInput && s.type.domain == cac::Domain::Seq)
        firstSeqInput = symbols[s.name];
      return;
    case Stmt::Kind::Param: {
      FloatAttr def;
      if (s.defaultValue)
        def = builder.getF64FloatAttr(*s.defaultValue);
      symbols[s.name] = builder.create<cir::ParamOp>(
          l, field(s.type), paramPrefix + s.name, def);
      return;
    }
    case Stmt::Kind::Let:
      symbols[s.name] =
          broadcast(l, genExpr(*s.value), repr(s.type.domain));
      return;
    case Stmt::Kind::Segments: {
      Value starts = broadcast(l, genExpr(*s.value), cir::Domain::Token);
      segStart = binary(l, cir::BinaryKind::Or, starts, isFirst(l));
      // A token ends its segment when the next one starts another (or it is
      // the last token of the sequence).
      Value nextStart = builder.create<cir::ShiftOp>(
          l, field(cir::Domain::Token), toFloat(l, segStart), 1,
          broadcast(l, constant(l, 1.0), cir::Domain::Token));
      segEnd = cmp(l, cir::CmpPredicate::GT, nextStart, constant(l, 0.5));
      segId = binary(l, cir::BinaryKind::Sub, scan(l, toFloat(l, segStart),
                                                   constant(l, 1.0), false),
                     constant(l, 1.0));
      return;
    }
    case Stmt::Kind::Loss:
      genLoss(s, l);
      return;
    case Stmt::Kind::Output: {
      Value v = genExpr(*s.value);
      if (typeOf(v).getElementType().isInteger(1))
        v = builder.create<cir::CastOp>(l, field(typeOf(v).getDomain()), v);
      v = broadcast(l, v, repr(s.type.domain));
      if (imported) {
        outputs[s.name] = v;
        if (!symbols.count(s.name))
          symbols[s.name] = v;
        return;
      }
      auto out = builder.create<cir::OutputOp>(l, s.name, v);
      if (s.type.domain == cac::Domain::Seg)
        out->setAttr("cac.seg", builder.getUnitAttr());
      if (!symbols.count(s.name))
        symbols[s.name] = v;
      return;
    }
    }
  }

  /// `loss(X, mask = M, aggregation = "MODE") = L`: the outputs `loss` (per
  /// sequence, the weighted sum of its elements' losses), `loss_count` (per
  /// sequence, the elements that count) and `grad_X`, the gradient of
  ///
  ///     sum over the elements i of w[i] * L[i],   w = float(M) * c
  ///
  /// with c = 1 / loss_count of the sequence for "seq-mean-token-mean",
  /// 1 / norm_len for "seq-mean-token-sum-norm" and 1 otherwise. The host
  /// divides both by the batch's sum of loss_count ("token-mean", and every
  /// seq loss) or by the number of sequences (the seq-mean modes),
  /// cac::objectiveNormalizer.
  void genLoss(const Stmt &s, Location l) {
    Value wrt = symbols.lookup(s.name);
    cir::Domain d = repr(s.type.domain);
    Value loss = broadcast(l, genExpr(*s.value), d);
    Value one = constant(l, 1.0);
    Value mask = s.mask ? toFloat(l, broadcast(l, genExpr(*s.mask), d))
                        : broadcast(l, one, d);
    Value weight, perSeq, count;
    if (d == cir::Domain::Token) {
      int code = s.aggregation.empty() ? 0 : aggregationCode(s.aggregation);
      Value agg = builder.create<cir::ParamOp>(
          l, field(cir::Domain::Scalar), paramPrefix + "aggregation",
          builder.getF64FloatAttr(code));
      Value normLen = builder.create<cir::ParamOp>(
          l, field(cir::Domain::Scalar), paramPrefix + "norm_len",
          builder.getF64FloatAttr(0.0));
      symbols["aggregation"] = agg;
      symbols["norm_len"] = normLen;
      count = reduce(l, cir::ReduceKind::Sum, mask, cir::Domain::Seq);
      Value perMean = binary(l, cir::BinaryKind::Div, one,
                             binary(l, cir::BinaryKind::Max, count, one));
      Value perNorm = binary(l, cir::BinaryKind::Div, one,
                             binary(l, cir::BinaryKind::Max, normLen, one));
      Value c = select(
          l, cmp(l, cir::CmpPredicate::EQ, agg, constant(l, 1.0)), perMean,
          select(l, cmp(l, cir::CmpPredicate::EQ, agg, constant(l, 3.0)),
                 perNorm, one));
      weight = binary(l, cir::BinaryKind::Mul, mask, c);
      perSeq = reduce(l, cir::ReduceKind::Sum,
                      binary(l, cir::BinaryKind::Mul, weight, loss),
                      cir::Domain::Seq);
    } else {
      count = mask;
      weight = mask;
      perSeq = binary(l, cir::BinaryKind::Mul, weight, loss);
    }
    builder.create<cir::OutputOp>(l, "loss", perSeq);
    builder.create<cir::OutputOp>(l, "loss_count", count);
    Value grad = differentiate(builder, l, loss, weight, wrt);
    if (!grad) {
      failedGen = true;
      return;
    }
    builder.create<cir::OutputOp>(l, "grad_" + s.name, grad);
    estimatorOp->setAttr(
        "cac.objective",
        builder.getDictionaryAttr(
            {builder.getNamedAttr("wrt", builder.getStringAttr(s.name)),
             builder.getNamedAttr(
                 "loss_domain",
                 builder.getStringAttr(cir::stringifyDomain(d)))}));
  }

  /// The segment starts as an output "_seg_start" (1 where a segment starts):
  /// cac eval prints them as "segments" and uses them to print seg outputs.
  void genSegmentOutput(Location l) {
    if (segStart)
      builder.create<cir::OutputOp>(l, "_seg_start", toFloat(l, segStart));
  }

  Value toFloat(Location l, Value pred) {
    if (!typeOf(pred).getElementType().isInteger(1))
      return pred;
    return builder.create<cir::CastOp>(l, field(typeOf(pred).getDomain()),
                                       pred);
  }

  Value scan(Location l, Value x, Value decay, bool reverse) {
    cir::Domain d = joined({x, decay});
    x = broadcast(l, x, d);
    decay = broadcast(l, decay, d);
    return builder.create<cir::ScanOp>(l, x.getType(), x, decay, reverse);
  }

  /// A scan that only steps at segment starts (forward) or ends (reverse):
  /// y = x + c * y_prev at the marked tokens, y = y_prev elsewhere. On a
  /// segment value (constant over each segment) this is the scan along the
  /// segments.
  Value segScan(Location l, Value x, Value decay, bool reverse) {
    Value at = reverse ? segEnd : segStart;
    Value zero = constant(l, 0.0), one = constant(l, 1.0);
    return scan(l, select(l, at, x, zero), select(l, at, decay, one),
                reverse);
  }

  Value isFirst(Location l) {
    return cmp(l, cir::CmpPredicate::EQ, position(l), constant(l, 0.0));
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
    // exp(x) < c  ==  x < log(c) for a scalar c (also for c <= 0: log gives
    // -inf or NaN and both sides are false), so a probability threshold
    // costs a compare per token instead of an exp (SAE, SPO). Not for > and
    // >=, where c < 0 would make the two sides differ.
    if ((p == cir::CmpPredicate::LT || p == cir::CmpPredicate::LE) &&
        typeOf(b).getDomain() == cir::Domain::Scalar)
      if (auto e = a.getDefiningOp<cir::UnaryOp>();
          e && e.getKind() == cir::UnaryKind::Exp) {
        a = e.getOperand();
        b = builder.create<cir::UnaryOp>(l, cir::UnaryKind::Log, b);
      }
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
      if (!e.qualifier.empty())
        return genImported(e);
      return genName(e, l);
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

  Value genName(const Expr &e, Location l) {
    if (Value v = symbols.lookup(e.name))
      return v;
    auto it = segInputs.find(e.name);
    if (it == segInputs.end())
      return {};
    // A seg input, read at each token's segment.
    Value v = builder.create<cir::SegGatherOp>(
        l, field(cir::Domain::Token), it->second, segId);
    symbols[e.name] = v;
    return v;
  }

  Value position(Location l) {
    return builder.create<cir::PositionOp>(l, field(cir::Domain::Token));
  }
  Value length(Location l) {
    return builder.create<cir::LengthOp>(l, field(cir::Domain::Seq));
  }

  /// A call of a built-in, as the Lowering column of Builtins.def says: one
  /// cac op of the kind Op (a reduction to the result's domain D), or the
  /// generator function lowerOp.
  Value genCall(const Expr &e, Location l) {
    Builtin b = *lookupBuiltin(e.name);
    std::vector<Value> a;
    for (const auto &arg : e.args)
      a.push_back(genExpr(*arg));
    bool onSegs = !e.args.empty() && e.args[0]->type.domain == cac::Domain::Seg;
    if (onSegs)
      if (Value v = genSegCall(b, a, l))
        return v;
#define LOWER_Unary(Op, D)                                                     \
  builder.create<cir::UnaryOp>(l, cir::UnaryKind::Op, a[0])
#define LOWER_Binary(Op, D) binary(l, cir::BinaryKind::Op, a[0], a[1])
#define LOWER_Reduce(Op, D) reduce(l, cir::ReduceKind::Op, a[0], cir::Domain::D)
#define LOWER_PathReduce(Op, D) pathReduce(l, cir::PathReduceKind::Op, a[0])
#define LOWER_Special(Op, D) lower##Op(b, a, l)
    switch (b) {
#define BUILTIN(Id, Name, MinArgs, MaxArgs, Rule, Domain, Elem, Needs,         \
                Lowering, Op)                                                  \
  case Builtin::Id:                                                            \
    return LOWER_##Lowering(Op, Domain);
#include "cac/DSL/Builtins.def"
    }
#undef LOWER_Unary
#undef LOWER_Binary
#undef LOWER_Reduce
#undef LOWER_PathReduce
#undef LOWER_Special
    return {};
  }

  // The built-ins that become several ops (Special in Builtins.def), one
  // function per family.

  Value lowerClip(Builtin, ArrayRef<Value> a, Location l) {
    return binary(l, cir::BinaryKind::Max,
                  binary(l, cir::BinaryKind::Min, a[0], a[2]), a[1]);
  }

  Value lowerSelect(Builtin, ArrayRef<Value> a, Location l) {
    return select(l, a[0], a[1], a[2]);
  }

  Value lowerToFloat(Builtin, ArrayRef<Value> a, Location l) {
    return builder.create<cir::CastOp>(l, field(typeOf(a[0]).getDomain()),
                                       a[0]);
  }

  Value lowerKl(Builtin b, ArrayRef<Value> a, Location l) {
    // d = logp - logp_ref; k1 = d, k2 = d^2 / 2, k3 = exp(-d) + d - 1 with
    // verl's clamps (-d to +-20, k3 to +-10).
    Value d = binary(l, cir::BinaryKind::Sub, a[0], a[1]);
    if (b == Builtin::KlK1)
      return d;
    if (b == Builtin::KlK2)
      return binary(l, cir::BinaryKind::Mul, constant(l, 0.5),
                    binary(l, cir::BinaryKind::Mul, d, d));
    auto clamp = [&](Value x, double c) {
      return binary(l, cir::BinaryKind::Max,
                    binary(l, cir::BinaryKind::Min, x, constant(l, c)),
                    constant(l, -c));
    };
    Value m =
        clamp(builder.create<cir::UnaryOp>(l, cir::UnaryKind::Neg, d), 20.0);
    Value k3 = binary(
        l, cir::BinaryKind::Sub,
        binary(l, cir::BinaryKind::Sub,
               builder.create<cir::UnaryOp>(l, cir::UnaryKind::Exp, m), m),
        constant(l, 1.0));
    return clamp(k3, 10.0);
  }

  /// next, prev.
  Value lowerShift(Builtin b, ArrayRef<Value> a, Location l) {
    Value fill = a.size() > 1 ? a[1] : constant(l, 0.0);
    fill = broadcast(l, fill, typeOf(a[0]).getDomain());
    return builder.create<cir::ShiftOp>(l, a[0].getType(), a[0],
                                        b == Builtin::Next ? 1 : -1, fill);
  }

  /// scan, rscan, cumsum, rcumsum.
  Value lowerScan(Builtin b, ArrayRef<Value> a, Location l) {
    bool reverse = b == Builtin::RScan || b == Builtin::RCumSum;
    Value decay = a.size() > 1 ? a[1] : constant(l, 1.0);
    decay = broadcast(l, decay, typeOf(a[0]).getDomain());
    return builder.create<cir::ScanOp>(l, a[0].getType(), a[0], decay, reverse);
  }

  /// machine_eps: 2^-23 in f32, 2^-52 in f64, so that a tolerance written
  /// with it scales with the precision the estimator runs in.
  Value lowerMachineEps(Builtin, ArrayRef<Value>, Location l) {
    return constant(l, floatType.isF64() ? 0x1p-52 : 0x1p-23);
  }

  /// pos, is_first, is_last, length.
  Value lowerPosition(Builtin b, ArrayRef<Value>, Location l) {
    switch (b) {
    case Builtin::Pos:
      return position(l);
    case Builtin::Length:
      return length(l);
    case Builtin::IsFirst:
      return cmp(l, cir::CmpPredicate::EQ, position(l), constant(l, 0.0));
    default:
      return cmp(l, cir::CmpPredicate::EQ, position(l),
                 binary(l, cir::BinaryKind::Sub, length(l), constant(l, 1.0)));
    }
  }

  /// rank(x), top_k(x, k).
  Value lowerRank(Builtin b, ArrayRef<Value> a, Location l) {
    if (b == Builtin::Rank)
      return builder.create<cir::RankOp>(l, a[0].getType(), a[0]);
    return cmp(l, cir::CmpPredicate::LT,
               builder.create<cir::RankOp>(l, a[0].getType(), a[0]), a[1]);
  }

  /// after, every, nth, balanced.
  Value lowerSegmentation(Builtin b, ArrayRef<Value> a, Location l) {
    switch (b) {
    case Builtin::After: {
      Value prev = builder.create<cir::ShiftOp>(
          l, field(cir::Domain::Token), toFloat(l, a[0]), -1,
          broadcast(l, constant(l, 0.0), cir::Domain::Token));
      return cmp(l, cir::CmpPredicate::GT, prev, constant(l, 0.5));
    }
    case Builtin::Every:
      return cmp(l, cir::CmpPredicate::EQ,
                 binary(l, cir::BinaryKind::Mod, position(l), a[0]),
                 constant(l, 0.0));
    case Builtin::Nth: {
      // The 1st, (n+1)-th, (2n+1)-th ... token where the predicate holds.
      Value j = binary(l, cir::BinaryKind::Sub,
                       scan(l, toFloat(l, a[0]), constant(l, 1.0), false),
                       constant(l, 1.0));
      return binary(l, cir::BinaryKind::And, a[0],
                    cmp(l, cir::CmpPredicate::EQ,
                        binary(l, cir::BinaryKind::Mod, j, a[1]),
                        constant(l, 0.0)));
    }
    default:
      return balanced(l, a[0], a[1]);
    }
  }

  /// turn_start: the batch's token field `turn_start` (1 at the first action
  /// of each turn; cac eval derives it from the observations), read once.
  Value lowerTurnStart(Builtin, ArrayRef<Value>, Location l) {
    if (!turnStarts)
      turnStarts = builder.create<cir::InputOp>(l, field(cir::Domain::Token),
                                                "turn_start");
    return cmp(l, cir::CmpPredicate::GT, turnStarts, constant(l, 0.0));
  }

  /// seg_start, seg_end, seg_pos, seg_len, num_segs.
  Value lowerSegStructure(Builtin b, ArrayRef<Value>, Location l) {
    switch (b) {
    case Builtin::SegStart:
      return segStart;
    case Builtin::SegEnd:
      return segEnd;
    case Builtin::SegPos:
      return segId;
    case Builtin::SegLen:
      return segSum(l, broadcast(l, constant(l, 1.0), cir::Domain::Token));
    default:
      return reduce(l, cir::ReduceKind::Sum, toFloat(l, segStart),
                    cir::Domain::Seq);
    }
  }

  /// seg_sum, seg_mean, seg_first, seg_last.
  Value lowerSegReduce(Builtin b, ArrayRef<Value> a, Location l) {
    switch (b) {
    case Builtin::SegSum:
      return segSum(l, a[0]);
    case Builtin::SegMean:
      return binary(
          l, cir::BinaryKind::Div, segSum(l, a[0]),
          segSum(l, broadcast(l, constant(l, 1.0), cir::Domain::Token)));
    case Builtin::SegFirst:
      return segScan(l, a[0], constant(l, 0.0), false);
    default:
      return segScan(l, a[0], constant(l, 0.0), true);
    }
  }

  Value lowerGroupCount(Builtin, ArrayRef<Value>, Location l) {
    return groupCount(l);
  }

  Value lowerGroupLooMean(Builtin, ArrayRef<Value> a, Location l) {
    // (sum of the group - own value) / (count - 1), and 0 for a group of
    // one sequence.
    Value sum = reduce(l, cir::ReduceKind::Sum, a[0], cir::Domain::Group);
    Value n = groupCount(l, a[0]);
    Value others = binary(l, cir::BinaryKind::Sub, n, constant(l, 1.0));
    Value mean = binary(
        l, cir::BinaryKind::Div, binary(l, cir::BinaryKind::Sub, sum, a[0]),
        binary(l, cir::BinaryKind::Max, others, constant(l, 1.0)));
    return select(l, cmp(l, cir::CmpPredicate::GT, others, constant(l, 0.0)),
                  mean, constant(l, 0.0));
  }

  /// group_second_max: the largest value left when the group's largest
  /// (one of them, if tied) is taken out. Where the maximum is tied it is
  /// the maximum; else the maximum of the others, with the group's minimum
  /// standing in for the maximum (never above the others' maximum, and the
  /// value itself for a group of one).
  Value lowerGroupSecondMax(Builtin, ArrayRef<Value> a, Location l) {
    Value x = a[0];
    Value m = reduce(l, cir::ReduceKind::Max, x, cir::Domain::Group);
    Value isMax = cmp(l, cir::CmpPredicate::EQ, x, m);
    Value tied = cmp(
        l, cir::CmpPredicate::GT,
        reduce(l, cir::ReduceKind::Sum, toFloat(l, isMax), cir::Domain::Group),
        constant(l, 1.0));
    Value lo = reduce(l, cir::ReduceKind::Min, x, cir::Domain::Group);
    Value others = reduce(l, cir::ReduceKind::Max, select(l, isMax, lo, x),
                          cir::Domain::Group);
    return select(l, tied, m, others);
  }

  /// group_key_sum, group_key_mean, group_key_count (of the key itself).
  Value lowerGroupKey(Builtin b, ArrayRef<Value> a, Location l) {
    cir::ReduceKind k = b == Builtin::GroupKeySum    ? cir::ReduceKind::Sum
                        : b == Builtin::GroupKeyMean ? cir::ReduceKind::Mean
                                                     : cir::ReduceKind::Count;
    Value key = a.back();
    return builder.create<cir::GroupKeyOp>(l, key.getType(), k, a[0], key);
  }

  Value lowerGroupRank(Builtin, ArrayRef<Value> a, Location l) {
    return builder.create<cir::GroupRankOp>(l, a[0].getType(), a[0]);
  }

  /// group_pos_sum, group_pos_mean, group_pos_count: sums over the group's
  /// tokens at a token's position (the count sums ones).
  Value lowerGroupPositions(Builtin b, ArrayRef<Value> a, Location l) {
    auto sum = [&](Value x) {
      return builder.create<cir::GroupPosSumOp>(l, x.getType(), x);
    };
    auto count = [&] {
      return sum(broadcast(l, constant(l, 1.0), cir::Domain::Token));
    };
    if (b == Builtin::GroupPosCount)
      return count();
    if (b == Builtin::GroupPosSum)
      return sum(a[0]);
    return binary(l, cir::BinaryKind::Div, sum(a[0]), count());
  }

  /// batch_*: a seq value reduces over the batch's sequences in one batch
  /// kernel. A token value first reduces per sequence (the seq kernels'
  /// block reductions), so that the batch kernel combines B partials, not N
  /// tokens; a variance takes two such rounds, the squared deviations from
  /// the batch mean in the second, as a group's does.
  Value lowerBatchReduce(Builtin b, ArrayRef<Value> a, Location l) {
    using K = cir::ReduceKind;
    K kind = b == Builtin::BatchSum           ? K::Sum
             : b == Builtin::BatchMean        ? K::Mean
             : b == Builtin::BatchMin         ? K::Min
             : b == Builtin::BatchMax         ? K::Max
             : b == Builtin::BatchCount       ? K::Count
             : b == Builtin::BatchVar         ? K::Var
             : b == Builtin::BatchStd         ? K::Std
             : b == Builtin::BatchVarUnbiased ? K::VarUnbiased
                                              : K::StdUnbiased;
    Value x = a[0];
    if (typeOf(x).getDomain() == cir::Domain::Seq)
      return reduce(l, kind, x, cir::Domain::Batch);
    auto overTokens = [&](K k, Value v) {
      return reduce(l, k, reduce(l, k, v, cir::Domain::Seq),
                    cir::Domain::Batch);
    };
    if (kind == K::Sum || kind == K::Min || kind == K::Max)
      return overTokens(kind, x);
    Value n = reduce(l, K::Sum, length(l), cir::Domain::Batch);
    if (kind == K::Count)
      return n;
    Value one = constant(l, 1.0);
    Value mean = binary(l, cir::BinaryKind::Div, overTokens(K::Sum, x),
                        binary(l, cir::BinaryKind::Max, n, one));
    if (kind == K::Mean)
      return mean;
    Value d = binary(l, cir::BinaryKind::Sub, x, mean);
    Value ss = overTokens(K::Sum, binary(l, cir::BinaryKind::Mul, d, d));
    bool unbiased = kind == K::VarUnbiased || kind == K::StdUnbiased;
    Value cnt = unbiased ? binary(l, cir::BinaryKind::Sub, n, one) : n;
    // n - 1 = 0 (one token) leaves ss = 0: a variance of 0, as a group's.
    Value var = binary(l, cir::BinaryKind::Div, ss,
                       binary(l, cir::BinaryKind::Max, cnt, one));
    if (kind == K::Std || kind == K::StdUnbiased)
      return builder.create<cir::UnaryOp>(l, cir::UnaryKind::Sqrt, var);
    return var;
  }

  /// batch_top_k: the batch kernel finds the k-th token of the order, and
  /// each token compares itself with it.
  Value lowerBatchTopK(Builtin, ArrayRef<Value> a, Location l) {
    Value kth = builder.create<cir::BatchKthOp>(l, field(cir::Domain::Batch),
                                                a[0], a[1]);
    return builder.create<cir::BatchTopKOp>(
        l, field(cir::Domain::Token, /*pred=*/true), a[0], kth);
  }

  Value lowerUniform(Builtin, ArrayRef<Value> a, Location l) {
    return builder.create<cir::UniformOp>(l, field(cir::Domain::Token), a[0]);
  }

  /// is_root, is_leaf, num_children, subtree_count.
  Value lowerTreeStructure(Builtin b, ArrayRef<Value>, Location l) {
    switch (b) {
    case Builtin::IsRoot: {
      Value one = broadcast(l, constant(l, 1.0), cir::Domain::Node);
      Value zero = broadcast(l, constant(l, 0.0), cir::Domain::Node);
      return cmp(l, cir::CmpPredicate::LT,
                 builder.create<cir::ParentOp>(l, one.getType(), one, zero),
                 constant(l, 0.5));
    }
    case Builtin::IsLeaf:
      return cmp(l, cir::CmpPredicate::EQ, numChildren(l), constant(l, 0.0));
    case Builtin::NumChildren:
      return numChildren(l);
    default:
      return pathReduce(l, cir::PathReduceKind::SubtreeSum, constant(l, 1.0));
    }
  }

  /// child_mean, tree_mean, parent.
  Value lowerNodeMap(Builtin b, ArrayRef<Value> a, Location l) {
    Value v = broadcast(l, a[0], cir::Domain::Node);
    if (b == Builtin::ChildMean)
      return builder.create<cir::ChildMeanOp>(l, v.getType(), v);
    if (b == Builtin::TreeMean)
      return builder.create<cir::TreeMeanOp>(l, v.getType(), v, numChildren(l));
    Value fill =
        broadcast(l, a.size() > 1 ? a[1] : constant(l, 0.0), cir::Domain::Node);
    return builder.create<cir::ParentOp>(l, v.getType(), v, fill);
  }

  /// Sum over each segment, on every token of the segment: a running sum
  /// restarted at segment starts, then its value at the segment's end
  /// carried back over the segment.
  Value segSum(Location l, Value x) {
    Value zero = constant(l, 0.0), one = constant(l, 1.0);
    Value run = scan(l, x, select(l, segStart, zero, one), false);
    return segScan(l, run, zero, true);
  }

  /// `next(x, fill)` / `prev(x, fill)` of a seg input `x` with a fill that is
  /// the same on every token: the input read at the segment index + 1 (- 1),
  /// the fill where there is no such segment. The same values as the scan
  /// along the segments (genSegCall), without a scan: VinePPO's and
  /// SPO-chain's `next(mc_value, reward)` becomes a gather in a loop
  /// without a carried value. Null for other operands.
  Value neighbourGather(ArrayRef<Value> a, bool next, Location l) {
    auto g = a[0].getDefiningOp<cir::SegGatherOp>();
    if (!g || g.getIndex() != segId ||
        (a.size() > 1 && typeOf(a[1]).getDomain() != cir::Domain::Scalar &&
         typeOf(a[1]).getDomain() != cir::Domain::Seq))
      return {};
    Value one = constant(l, 1.0);
    Value fill = broadcast(l, a.size() > 1 ? a[1] : constant(l, 0.0),
                           cir::Domain::Token);
    // segId is (inclusive count of segment starts) - 1: id + 1 is the count.
    Value idx = next ? segId.getDefiningOp()->getOperand(0)
                     : binary(l, cir::BinaryKind::Sub, segId, one);
    // The neighbour exists: segment id + 1 below the number of segments, or
    // id - 1 at least 0.
    Value exists = next
                       ? cmp(l, cir::CmpPredicate::LT, idx,
                             reduce(l, cir::ReduceKind::Sum,
                                    toFloat(l, segStart), cir::Domain::Seq))
                       : cmp(l, cir::CmpPredicate::GT, segId, constant(l, 0.0));
    // Where it does not, the token's own segment is read (a slot of the
    // sequence) and not used.
    Value safe = select(l, exists, idx, segId);
    Value v = builder.create<cir::SegGatherOp>(l, field(cir::Domain::Token),
                                               g.getInput(), safe);
    return select(l, exists, v, fill);
  }

  /// The built-ins applied to a segment value (represented on tokens): they
  /// run along the segments instead of the tokens. Null for the others.
  Value genSegCall(Builtin b, std::vector<Value> &a, Location l) {
    Value zero = constant(l, 0.0);
    switch (b) {
    case Builtin::Next:
    case Builtin::Prev: {
      bool next = b == Builtin::Next;
      if (Value v = neighbourGather(a, next, l))
        return v;
      Value fill = broadcast(l, a.size() > 1 ? a[1] : zero, cir::Domain::Token);
      Value shifted = builder.create<cir::ShiftOp>(
          l, a[0].getType(), a[0], next ? 1 : -1, fill);
      // The neighbouring token of a segment's end (start) belongs to the
      // next (previous) segment.
      return segScan(l, shifted, zero, next);
    }
    case Builtin::Scan:
    case Builtin::RScan:
    case Builtin::CumSum:
    case Builtin::RCumSum: {
      bool reverse = b == Builtin::RScan || b == Builtin::RCumSum;
      Value decay = a.size() > 1 ? a[1] : constant(l, 1.0);
      return segScan(l, a[0], decay, reverse);
    }
    case Builtin::SeqSum:
    case Builtin::SeqMean: {
      Value sum = reduce(l, cir::ReduceKind::Sum,
                         select(l, segStart, a[0], zero), cir::Domain::Seq);
      if (b == Builtin::SeqSum)
        return sum;
      Value n = reduce(l, cir::ReduceKind::Sum, toFloat(l, segStart),
                       cir::Domain::Seq);
      return binary(l, cir::BinaryKind::Div, sum, n);
    }
    default:
      // seq_min/max/first/last see the same values on the tokens.
      return {};
    }
  }

  /// SPO-chain's count mode: the cutpoints (where `p` holds) are dealt into
  /// n = min(K, U) segments, segment k holding floor(U/n) + [k < U mod n] of
  /// them; true at the first cutpoint of every segment but the first (which
  /// starts at the sequence's first token).
  Value balanced(Location l, Value p, Value k) {
    Value zero = constant(l, 0.0), one = constant(l, 1.0);
    Value pf = toFloat(l, p);
    Value u = reduce(l, cir::ReduceKind::Sum, pf, cir::Domain::Seq);
    Value n = binary(l, cir::BinaryKind::Min, k, u);
    Value q = builder.create<cir::UnaryOp>(
        l, cir::UnaryKind::Floor,
        binary(l, cir::BinaryKind::Div, u,
               binary(l, cir::BinaryKind::Max, n, one)));
    Value r = binary(l, cir::BinaryKind::Sub, u,
                     binary(l, cir::BinaryKind::Mul, q, n));
    Value big = binary(l, cir::BinaryKind::Mul, r,
                       binary(l, cir::BinaryKind::Add, q, one));
    Value j = binary(l, cir::BinaryKind::Sub, scan(l, pf, one, false), one);
    Value firstPart = cmp(l, cir::CmpPredicate::LT, j, big);
    Value startA = cmp(l, cir::CmpPredicate::EQ,
                       binary(l, cir::BinaryKind::Mod, j,
                              binary(l, cir::BinaryKind::Add, q, one)),
                       zero);
    Value startB = cmp(l, cir::CmpPredicate::EQ,
                       binary(l, cir::BinaryKind::Mod,
                              binary(l, cir::BinaryKind::Sub, j, big),
                              binary(l, cir::BinaryKind::Max, q, one)),
                       zero);
    Value isStart = select(l, firstPart, startA, startB);
    Value later = cmp(l, cir::CmpPredicate::GT, j, zero);
    Value some = cmp(l, cir::CmpPredicate::GT, n, zero);
    return binary(l, cir::BinaryKind::And,
                  binary(l, cir::BinaryKind::And, p, later),
                  binary(l, cir::BinaryKind::And, isStart, some));
  }

  Value numChildren(Location l) {
    return builder.create<cir::NumChildrenOp>(l, field(cir::Domain::Node));
  }

  Value pathReduce(Location l, cir::PathReduceKind k, Value x) {
    return builder.create<cir::PathReduceOp>(
        l, field(cir::Domain::Node), k, broadcast(l, x, cir::Domain::Seq));
  }

  /// The count ignores the values it reduces: count a seq value the group
  /// kernel reads anyway (`like`), so that no kernel runs just to store one.
  Value groupCount(Location l, Value like = {}) {
    Value x = like && typeOf(like).getDomain() == cir::Domain::Seq &&
                      !typeOf(like).getElementType().isInteger(1)
                  ? like
              : firstSeqInput ? firstSeqInput
                              : length(l);
    return reduce(l, cir::ReduceKind::Count, x, cir::Domain::Group);
  }

  MLIRContext &ctx;
  OpBuilder builder;
  FloatType floatType;
  llvm::StringMap<Value> symbols;
  /// Inputs of the seg domain, and the segment structure (token fields).
  llvm::StringMap<Value> segInputs;
  Value segStart, segEnd, segId;
  /// The first input of the seq domain, if any (what group_count counts).
  Value firstSeqInput;
  /// The implicit token input read by turn_start, once it is read.
  Value turnStarts;
  /// The estimator being generated; for an imported one, its outputs (by
  /// name) and the prefix of its parameters.
  const Estimator *current = nullptr;
  bool imported = false;
  std::string paramPrefix;
  llvm::StringMap<Value> outputs;
  llvm::StringSet<> generatedImports;
  cir::EstimatorOp estimatorOp;
  bool failedGen = false;
};

} // namespace

OwningOpRef<ModuleOp> cac::mlirGen(MLIRContext &context,
                                   const Estimator &est, FloatType floatType) {
  context.getOrLoadDialect<cir::CacDialect>();
  return Generator(context, floatType).gen(est);
}
