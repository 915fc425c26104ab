//===- Sema.cpp - Names, types and domains of a .cac estimator ------------===//

#include "cac/DSL/Sema.h"
#include "cac/DSL/Parser.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

using namespace cac;
using namespace cac::ast;

namespace {

struct BuiltinInfo {
  const char *name;
  Builtin id;
};

constexpr BuiltinInfo kBuiltins[] = {
    {"exp", Builtin::Exp},
    {"log", Builtin::Log},
    {"sqrt", Builtin::Sqrt},
    {"abs", Builtin::Abs},
    {"sigmoid", Builtin::Sigmoid},
    {"floor", Builtin::Floor},
    {"ceil", Builtin::Ceil},
    {"rank", Builtin::Rank},
    {"top_k", Builtin::TopK},
    {"mod", Builtin::Mod},
    {"min", Builtin::Min},
    {"max", Builtin::Max},
    {"pow", Builtin::Pow},
    {"clip", Builtin::Clip},
    {"select", Builtin::Select},
    {"float", Builtin::Float},
    {"sg", Builtin::StopGrad},
    {"kl_k1", Builtin::KlK1},
    {"kl_k2", Builtin::KlK2},
    {"kl_k3", Builtin::KlK3},
    {"next", Builtin::Next},
    {"prev", Builtin::Prev},
    {"scan", Builtin::Scan},
    {"rscan", Builtin::RScan},
    {"cumsum", Builtin::CumSum},
    {"rcumsum", Builtin::RCumSum},
    {"pos", Builtin::Pos},
    {"is_first", Builtin::IsFirst},
    {"is_last", Builtin::IsLast},
    {"length", Builtin::Length},
    {"after", Builtin::After},
    {"every", Builtin::Every},
    {"nth", Builtin::Nth},
    {"balanced", Builtin::Balanced},
    {"seg_start", Builtin::SegStart},
    {"seg_end", Builtin::SegEnd},
    {"seg_len", Builtin::SegLen},
    {"seg_pos", Builtin::SegPos},
    {"num_segs", Builtin::NumSegs},
    {"seg_sum", Builtin::SegSum},
    {"seg_mean", Builtin::SegMean},
    {"seg_first", Builtin::SegFirst},
    {"seg_last", Builtin::SegLast},
    {"is_root", Builtin::IsRoot},
    {"is_leaf", Builtin::IsLeaf},
    {"num_children", Builtin::NumChildren},
    {"leaf_mean", Builtin::LeafMean},
    {"subtree_mean", Builtin::SubtreeMean},
    {"subtree_max", Builtin::SubtreeMax},
    {"subtree_count", Builtin::SubtreeCount},
    {"child_mean", Builtin::ChildMean},
    {"tree_mean", Builtin::TreeMean},
    {"parent", Builtin::Parent},
    {"seq_sum", Builtin::SeqSum},
    {"seq_mean", Builtin::SeqMean},
    {"seq_min", Builtin::SeqMin},
    {"seq_max", Builtin::SeqMax},
    {"seq_first", Builtin::SeqFirst},
    {"seq_last", Builtin::SeqLast},
    {"group_sum", Builtin::GroupSum},
    {"group_mean", Builtin::GroupMean},
    {"group_min", Builtin::GroupMin},
    {"group_max", Builtin::GroupMax},
    {"group_var", Builtin::GroupVar},
    {"group_std", Builtin::GroupStd},
    {"group_var_unbiased", Builtin::GroupVarUnbiased},
    {"group_std_unbiased", Builtin::GroupStdUnbiased},
    {"group_count", Builtin::GroupCount},
    {"group_loo_mean", Builtin::GroupLooMean},
};

/// What a name in the body refers to.
struct Symbol {
  enum class Kind { Input, Param, Let, Output } kind;
  Type type;
  Location loc;
};

class Sema {
public:
  Sema(Estimator &est, mlir::MLIRContext &ctx) : est(est), ctx(ctx) {}

  mlir::LogicalResult run() {
    bool ok = true;
    for (Import &imp : est.imports) {
      if (!imp.module) {
        error(imp.loc) << "import '" << imp.alias << "' was not resolved";
        return mlir::failure();
      }
      if (imp.module->isObjective) {
        error(imp.loc) << "'" << imp.path << "' is an objective; only "
                       << "estimators can be imported";
        ok = false;
      }
      if (!imports.try_emplace(imp.alias, &imp).second) {
        error(imp.loc) << "the alias '" << imp.alias << "' is already used";
        ok = false;
      }
    }
    bool anyOutput = false;
    for (Stmt &s : est.stmts) {
      if (!checkStmt(s))
        ok = false;
      anyOutput |= s.kind == Stmt::Kind::Output;
    }
    if (ok && est.isObjective && !lossLoc) {
      error(est.loc) << "objective '" << est.name
                     << "' declares no loss; add `loss(INPUT) = EXPR`";
      ok = false;
    }
    if (ok && !anyOutput && !est.isObjective) {
      error(est.loc) << "estimator '" << est.name
                     << "' declares no output; add `output NAME : DOMAIN = "
                        "EXPR`";
      ok = false;
    }
    return mlir::success(ok);
  }

private:
  mlir::InFlightDiagnostic error(const Location &loc) {
    return mlir::emitError(toLocation(ctx, loc));
  }
  void note(mlir::InFlightDiagnostic &d, const Location &loc,
            llvm::StringRef msg) {
    d.attachNote(toLocation(ctx, loc)) << msg;
  }

  static std::string describe(const Type &t) {
    std::string s = domainName(t.domain).str();
    if (t.elem == ElemKind::Bool)
      s += " predicate";
    return s;
  }

  bool declare(Stmt &s, Symbol::Kind kind) {
    if (lookupBuiltin(s.name)) {
      error(s.nameLoc) << "'" << s.name
                       << "' is a built-in function and cannot be redefined";
      return false;
    }
    auto it = symbols.find(s.name);
    if (it != symbols.end()) {
      auto d = error(s.nameLoc) << "'" << s.name << "' is already defined";
      note(d, it->second.loc, "previous definition is here");
      return false;
    }
    symbols[s.name] = Symbol{kind, s.type, s.nameLoc};
    return true;
  }

  std::optional<Domain> declaredDomain(const Stmt &s) {
    auto d = parseDomain(s.domainName);
    if (!d) {
      error(s.domainLoc) << "unknown domain '" << s.domainName
                         << "'; expected one of token, seg, seq, group, node";
      return std::nullopt;
    }
    return d;
  }

  bool checkStmt(Stmt &s) {
    switch (s.kind) {
    case Stmt::Kind::Input: {
      auto d = declaredDomain(s);
      if (!d)
        return false;
      if (*d == Domain::Node && s.name != "tree") {
        error(s.domainLoc) << "inputs of domain '" << s.domainName
                           << "' are not supported yet (`input tree : node` "
                              "declares the rollout tree)";
        return false;
      }
      if (s.name == "tree") {
        if (*d != Domain::Node) {
          error(s.domainLoc) << "the tree input 'tree' must have domain "
                                "'node' (the batch's rollout tree)";
          return false;
        }
        hasTreeInput = true;
      }
      if (s.name == "group") {
        if (*d != Domain::Seq) {
          error(s.domainLoc) << "the grouping input 'group' must have domain "
                                "'seq' (one prompt id per sequence)";
          return false;
        }
        hasGroupInput = true;
      }
      s.type = {*d, ElemKind::Float};
      return declare(s, Symbol::Kind::Input);
    }
    case Stmt::Kind::Param:
      if (s.defaultValue && !std::isfinite(*s.defaultValue)) {
        error(s.nameLoc) << "the default of '" << s.name
                         << "' is out of range (it overflows a double)";
        return false;
      }
      s.type = {Domain::Scalar, ElemKind::Float};
      return declare(s, Symbol::Kind::Param);
    case Stmt::Kind::Let: {
      if (!checkExpr(*s.value))
        return false;
      s.type = s.value->type;
      if (!s.domainName.empty()) {
        auto d = declaredDomain(s);
        if (!d || !domainUsable(*d, s.domainLoc))
          return false;
        if (!broadcastsTo(s.type.domain, *d)) {
          error(s.value->loc)
              << "'" << s.name << "' is declared '" << s.domainName
              << "' but its value has domain '" << domainName(s.type.domain)
              << "'";
          return false;
        }
        s.type.domain = *d;
      }
      return declare(s, Symbol::Kind::Let);
    }
    case Stmt::Kind::Segments: {
      if (segmentsLoc) {
        auto d = error(s.loc) << "the segments are already defined";
        note(d, *segmentsLoc, "previous definition is here");
        return false;
      }
      if (!checkExpr(*s.value))
        return false;
      if (s.value->type.domain != Domain::Token &&
          s.value->type.domain != Domain::Scalar) {
        error(s.value->loc)
            << "'segments' takes a token predicate (true where a segment "
               "starts), but this value has domain '"
            << domainName(s.value->type.domain) << "'";
        return false;
      }
      if (!requireBool(*s.value, "'segments'"))
        return false;
      s.type = {Domain::Token, ElemKind::Bool};
      segmentsLoc = s.loc;
      return true;
    }
    case Stmt::Kind::Loss:
      return checkLoss(s);
    case Stmt::Kind::Output: {
      if (est.isObjective &&
          (s.name == "loss" || s.name == "loss_count" ||
           llvm::StringRef(s.name).starts_with("grad_"))) {
        error(s.nameLoc) << "'" << s.name << "' is an output the objective "
                         << "defines itself (loss, loss_count, grad_INPUT); "
                         << "choose another name";
        return false;
      }
      auto d = declaredDomain(s);
      if (!d || !domainUsable(*d, s.domainLoc))
        return false;
      if (!checkExpr(*s.value))
        return false;
      if (!broadcastsTo(s.value->type.domain, *d)) {
        error(s.value->loc)
            << "output '" << s.name << "' has domain '" << s.domainName
            << "' but its value has domain '"
            << domainName(s.value->type.domain)
            << "'; reduce it first (e.g. seq_mean, group_mean)";
        return false;
      }
      s.type = {*d, ElemKind::Float};
      if (outputs.count(s.name)) {
        error(s.nameLoc) << "output '" << s.name << "' is already defined";
        return false;
      }
      outputs.insert(s.name);
      // Outputs can be read by later statements like lets.
      if (!symbols.count(s.name))
        return declare(s, Symbol::Kind::Output);
      return true;
    }
    }
    return false;
  }

  /// `loss(X, mask = P, aggregation = "MODE") = EXPR` (objectives only).
  bool checkLoss(Stmt &s) {
    if (!est.isObjective) {
      error(s.loc) << "a loss belongs in an objective: declare the file "
                   << "with `objective NAME { ... }` instead of `estimator`";
      return false;
    }
    if (lossLoc) {
      auto d = error(s.loc) << "the loss is already defined";
      note(d, *lossLoc, "previous definition is here");
      return false;
    }
    lossLoc = s.loc;
    bool ok = true;
    for (auto &[key, at] : s.badOptions) {
      error(at) << (key == "mask" || key == "aggregation"
                        ? "'" + key + "' is given twice or in the wrong form"
                        : "unknown loss option '" + key + "'")
                << "; the options are `mask = PREDICATE` and `aggregation = "
                << "\"MODE\"`";
      ok = false;
    }
    auto sym = symbols.find(s.name);
    if (sym == symbols.end() || sym->second.kind != Symbol::Kind::Input) {
      error(s.nameLoc) << "the loss is differentiated by an input, and '"
                       << s.name << "' is "
                       << (sym == symbols.end() ? "not defined"
                                                : "not an input")
                       << "; declare it first, e.g. `input " << s.name
                       << " : token`";
      return false;
    }
    Domain wrt = sym->second.type.domain;
    if (wrt != Domain::Token && wrt != Domain::Seq) {
      error(s.nameLoc) << "the loss can be differentiated by a 'token' or "
                       << "'seq' input, but '" << s.name << "' has domain '"
                       << domainName(wrt) << "'";
      return false;
    }
    if (!checkExpr(*s.value) || !requireFloat(*s.value, "the loss"))
      return false;
    Domain d = s.value->type.domain;
    if (d != Domain::Token && d != Domain::Seq) {
      error(s.value->loc)
          << "the loss is one number per token or per sequence, but this "
          << "value has domain '" << domainName(d) << "'"
          << (d == Domain::Scalar ? " (it does not depend on the batch)"
                                  : "");
      return false;
    }
    s.type = {d, ElemKind::Float};
    if (s.mask) {
      if (!checkExpr(*s.mask) || !requireBool(*s.mask, "the loss mask"))
        return false;
      if (!broadcastsTo(s.mask->type.domain, d)) {
        error(s.mask->loc) << "the mask of a '" << domainName(d)
                           << "' loss must be a '" << domainName(d)
                           << "' predicate (or coarser), but this one has "
                           << "domain '" << domainName(s.mask->type.domain)
                           << "'";
        return false;
      }
    }
    if (!s.aggregation.empty()) {
      if (d == Domain::Seq ? s.aggregation != "seq-mean"
                           : aggregationCode(s.aggregation) < 0) {
        auto diag = error(s.aggregationLoc)
                    << "unknown aggregation '" << s.aggregation << "' for a "
                    << domainName(d) << " loss; expected ";
        if (d == Domain::Seq)
          diag << "\"seq-mean\" (a sequence loss is averaged over the "
                  "sequences)";
        else
          diag << "one of \"token-mean\", \"seq-mean-token-mean\", "
                  "\"seq-mean-token-sum\", \"seq-mean-token-sum-norm\"";
        return false;
      }
    }
    for (const char *reserved : {"aggregation", "norm_len"})
      if (symbols.count(reserved) && d == Domain::Token) {
        error(symbols[reserved].loc)
            << "'" << reserved << "' is the parameter of the loss's "
            << "aggregation; choose another name";
        return false;
      }
    if (d == Domain::Token)
      for (const char *reserved : {"aggregation", "norm_len"})
        symbols[reserved] =
            Symbol{Symbol::Kind::Param, {Domain::Scalar, ElemKind::Float},
                   s.loc};
    return ok;
  }

  bool requireFloat(Expr &e, llvm::StringRef what) {
    if (e.type.elem == ElemKind::Float)
      return true;
    error(e.loc) << what << " expects a number, but this is a "
                 << describe(e.type) << "; use float(...) to convert";
    return false;
  }
  bool requireBool(Expr &e, llvm::StringRef what) {
    if (e.type.elem == ElemKind::Bool)
      return true;
    error(e.loc) << what << " expects a predicate (a comparison), but this is "
                 << "a " << describe(e.type);
    return false;
  }

  std::optional<Domain> join(Expr &at, llvm::ArrayRef<Expr *> operands,
                             llvm::StringRef what) {
    Domain d = Domain::Scalar;
    Expr *dExpr = nullptr;
    for (Expr *o : operands) {
      auto j = joinDomains(d, o->type.domain);
      if (!j) {
        auto diag = error(at.loc)
                    << "domain mismatch in " << what << ": a '"
                    << domainName(d) << "' value and a '"
                    << domainName(o->type.domain)
                    << "' value; reduce or broadcast one of them explicitly";
        if (dExpr)
          note(diag, dExpr->loc,
               ("the '" + domainName(d) + "' value is here").str());
        note(diag, o->loc,
             ("the '" + domainName(o->type.domain) + "' value is here").str());
        return std::nullopt;
      }
      if (*j != d)
        dExpr = o;
      d = *j;
    }
    return d;
  }

  bool checkExpr(Expr &e) {
    switch (e.kind) {
    case Expr::Kind::Number:
      if (!std::isfinite(e.number)) {
        error(e.loc) << "number out of range (it overflows a double)";
        return false;
      }
      e.type = {Domain::Scalar, ElemKind::Float};
      return true;
    case Expr::Kind::Bool:
      e.type = {Domain::Scalar, ElemKind::Bool};
      return true;
    case Expr::Kind::Name:
      return checkName(e);
    case Expr::Kind::Unary: {
      if (!checkExpr(*e.args[0]))
        return false;
      if (e.op == Expr::Op::Neg ? !requireFloat(*e.args[0], "'-'")
                                : !requireBool(*e.args[0], "'not'"))
        return false;
      e.type = e.args[0]->type;
      return true;
    }
    case Expr::Kind::Binary:
      return checkBinary(e);
    case Expr::Kind::Call:
      return checkCall(e);
    }
    return false;
  }

  bool checkName(Expr &e) {
    if (!e.qualifier.empty())
      return checkImported(e);
    auto it = symbols.find(e.name);
    if (it != symbols.end()) {
      if (e.name == "tree" && it->second.kind == Symbol::Kind::Input) {
        error(e.loc) << "'tree' is the rollout tree, not a number; use "
                        "leaf_mean(...), tree_mean(...) and the other tree "
                        "functions";
        return false;
      }
      if (e.name == "group" && it->second.kind == Symbol::Kind::Input) {
        error(e.loc) << "'group' is the grouping key, not a number; use "
                        "group_mean(...) and the other group_* reductions";
        return false;
      }
      e.type = it->second.type;
      if (e.type.domain == Domain::Seg && !domainUsable(Domain::Seg, e.loc))
        return false;
      return true;
    }
    if (auto b = lookupBuiltin(e.name)) {
      switch (*b) {
      case Builtin::Pos:
      case Builtin::IsFirst:
      case Builtin::IsLast:
      case Builtin::Length:
      case Builtin::GroupCount:
      case Builtin::IsRoot:
      case Builtin::IsLeaf:
      case Builtin::NumChildren:
      case Builtin::SubtreeCount:
      case Builtin::SegStart:
      case Builtin::SegEnd:
      case Builtin::SegLen:
      case Builtin::SegPos:
      case Builtin::NumSegs:
        // Zero-argument built-ins can be written without parentheses.
        e.kind = Expr::Kind::Call;
        return checkCall(e);
      default:
        error(e.loc) << "'" << e.name << "' is a function; call it with "
                     << "arguments: " << e.name << "(...)";
        return false;
      }
    }
    error(e.loc) << "unknown name '" << e.name << "'";
    return false;
  }

  bool checkBinary(Expr &e) {
    if (!checkExpr(*e.args[0]) || !checkExpr(*e.args[1]))
      return false;
    const char *spelling = opSpelling(e.op);
    std::string what = std::string("'") + spelling + "'";
    bool logical = e.op == Expr::Op::And || e.op == Expr::Op::Or;
    for (auto &a : e.args)
      if (logical ? !requireBool(*a, what) : !requireFloat(*a, what))
        return false;
    auto d = join(e, {e.args[0].get(), e.args[1].get()}, what);
    if (!d)
      return false;
    bool cmp = e.op >= Expr::Op::Lt && e.op <= Expr::Op::Ne;
    e.type = {*d, (cmp || logical) ? ElemKind::Bool : ElemKind::Float};
    return true;
  }

  bool arity(Expr &e, size_t lo, size_t hi) {
    size_t n = e.args.size();
    if (n >= lo && n <= hi)
      return true;
    auto d = error(e.loc) << "'" << e.name << "' takes ";
    if (lo == hi)
      d << lo;
    else
      d << lo << " to " << hi;
    d << " argument" << (hi == 1 ? "" : "s") << ", but " << n
      << (n == 1 ? " was" : " were") << " given";
    return false;
  }

  bool checkCall(Expr &e) {
    auto b = lookupBuiltin(e.name);
    if (!b) {
      if (symbols.count(e.name))
        error(e.loc) << "'" << e.name << "' is a value, not a function";
      else
        error(e.loc) << "unknown function '" << e.name << "'";
      return false;
    }
    for (size_t i = 0; i < e.argNames.size(); ++i)
      if (!e.argNames[i].empty()) {
        error(e.args[i]->loc) << "'" << e.name
                              << "' takes no keyword arguments";
        return false;
      }
    for (auto &a : e.args)
      if (!checkExpr(*a))
        return false;
    std::string what = "'" + e.name + "'";
    if (usesGroups(*b) && !hasGroupInput) {
      error(e.loc) << what
                   << " needs the grouping input; declare `input group : seq`";
      return false;
    }
    if (*b >= Builtin::IsRoot && *b <= Builtin::Parent && !hasTreeInput) {
      error(e.loc) << what
                   << " needs the rollout tree; declare `input tree : node`";
      return false;
    }
    auto floats = [&](size_t from = 0) {
      for (size_t i = from; i < e.args.size(); ++i)
        if (!requireFloat(*e.args[i], what))
          return false;
      return true;
    };
    auto allOperands = [&](size_t from = 0) {
      std::vector<Expr *> ops;
      for (size_t i = from; i < e.args.size(); ++i)
        ops.push_back(e.args[i].get());
      return ops;
    };
    switch (*b) {
    case Builtin::Exp:
    case Builtin::Log:
    case Builtin::Sqrt:
    case Builtin::Abs:
    case Builtin::Sigmoid:
    case Builtin::Floor:
    case Builtin::Ceil:
      if (!arity(e, 1, 1) || !floats())
        return false;
      e.type = e.args[0]->type;
      return true;
    case Builtin::Min:
    case Builtin::Max:
    case Builtin::Pow:
    case Builtin::Mod:
    case Builtin::Clip: {
      size_t n = *b == Builtin::Clip ? 3 : 2;
      if (!arity(e, n, n) || !floats())
        return false;
      auto d = join(e, allOperands(), what);
      if (!d)
        return false;
      e.type = {*d, ElemKind::Float};
      return true;
    }
    case Builtin::Select: {
      if (!arity(e, 3, 3) || !requireBool(*e.args[0], what))
        return false;
      if (e.args[1]->type.elem != e.args[2]->type.elem) {
        error(e.args[2]->loc)
            << "both branches of 'select' must be numbers or both "
               "predicates; this is a "
            << describe(e.args[2]->type) << " and the other a "
            << describe(e.args[1]->type);
        return false;
      }
      auto d = join(e, allOperands(), what);
      if (!d)
        return false;
      e.type = {*d, e.args[1]->type.elem};
      return true;
    }
    case Builtin::Float:
      if (!arity(e, 1, 1) || !requireBool(*e.args[0], what))
        return false;
      e.type = {e.args[0]->type.domain, ElemKind::Float};
      return true;
    case Builtin::StopGrad:
      if (!arity(e, 1, 1) || !floats())
        return false;
      e.type = e.args[0]->type;
      return true;
    case Builtin::KlK1:
    case Builtin::KlK2:
    case Builtin::KlK3: {
      if (!arity(e, 2, 2) || !floats())
        return false;
      auto d = join(e, allOperands(), what);
      if (!d)
        return false;
      e.type = {*d, ElemKind::Float};
      return true;
    }
    case Builtin::Next:
    case Builtin::Prev:
    case Builtin::Scan:
    case Builtin::RScan: {
      bool shift = *b == Builtin::Next || *b == Builtin::Prev;
      if (!arity(e, shift ? 1 : 2, 2) || !floats())
        return false;
      if (!requireSequenceDomain(*e.args[0], what))
        return false;
      if (e.args.size() == 2 &&
          !broadcastsTo(e.args[1]->type.domain, e.args[0]->type.domain)) {
        error(e.args[1]->loc)
            << "the second argument of " << what << " has domain '"
            << domainName(e.args[1]->type.domain)
            << "', which does not broadcast to the first argument's '"
            << domainName(e.args[0]->type.domain) << "'";
        return false;
      }
      e.type = e.args[0]->type;
      return true;
    }
    case Builtin::CumSum:
    case Builtin::RCumSum:
      if (!arity(e, 1, 1) || !floats() ||
          !requireSequenceDomain(*e.args[0], what))
        return false;
      e.type = e.args[0]->type;
      return true;
    case Builtin::Pos:
    case Builtin::IsFirst:
    case Builtin::IsLast:
      if (!arity(e, 0, 0))
        return false;
      e.type = {Domain::Token, *b == Builtin::Pos ? ElemKind::Float
                                                  : ElemKind::Bool};
      return true;
    case Builtin::Length:
      if (!arity(e, 0, 0))
        return false;
      e.type = {Domain::Seq, ElemKind::Float};
      return true;
    case Builtin::SeqSum:
    case Builtin::SeqMean:
    case Builtin::SeqMin:
    case Builtin::SeqMax:
    case Builtin::SeqFirst:
    case Builtin::SeqLast:
      if (!arity(e, 1, 1) || !floats())
        return false;
      if (e.args[0]->type.domain != Domain::Token &&
          e.args[0]->type.domain != Domain::Seg) {
        error(e.args[0]->loc)
            << what << " reduces a 'token' or 'seg' value to 'seq', but this "
            << "value has domain '" << domainName(e.args[0]->type.domain)
            << "'";
        return false;
      }
      e.type = {Domain::Seq, ElemKind::Float};
      return true;
    case Builtin::SegSum:
    case Builtin::SegMean:
    case Builtin::SegFirst:
    case Builtin::SegLast:
      if (!arity(e, 1, 1) || !floats() || !domainUsable(Domain::Seg, e.loc))
        return false;
      if (e.args[0]->type.domain != Domain::Token) {
        error(e.args[0]->loc)
            << what << " reduces a 'token' value to 'seg', but this value "
            << "has domain '" << domainName(e.args[0]->type.domain) << "'";
        return false;
      }
      e.type = {Domain::Seg, ElemKind::Float};
      return true;
    case Builtin::SegStart:
    case Builtin::SegEnd:
      if (!arity(e, 0, 0) || !domainUsable(Domain::Seg, e.loc))
        return false;
      e.type = {Domain::Token, ElemKind::Bool};
      return true;
    case Builtin::SegLen:
    case Builtin::SegPos:
      if (!arity(e, 0, 0) || !domainUsable(Domain::Seg, e.loc))
        return false;
      e.type = {Domain::Seg, ElemKind::Float};
      return true;
    case Builtin::NumSegs:
      if (!arity(e, 0, 0) || !domainUsable(Domain::Seg, e.loc))
        return false;
      e.type = {Domain::Seq, ElemKind::Float};
      return true;
    case Builtin::Rank:
      if (!arity(e, 1, 1) || !floats() ||
          !requireTokenValue(*e.args[0], what))
        return false;
      e.type = {Domain::Token, ElemKind::Float};
      return true;
    case Builtin::TopK:
      if (!arity(e, 2, 2) || !floats() ||
          !requireTokenValue(*e.args[0], what) ||
          !requireCoarse(*e.args[1], what))
        return false;
      e.type = {Domain::Token, ElemKind::Bool};
      return true;
    case Builtin::After:
      if (!arity(e, 1, 1) || !requireBool(*e.args[0], what) ||
          !requireTokenDomain(*e.args[0], what))
        return false;
      e.type = {Domain::Token, ElemKind::Bool};
      return true;
    case Builtin::Every:
      if (!arity(e, 1, 1) || !floats() || !requireCoarse(*e.args[0], what))
        return false;
      e.type = {Domain::Token, ElemKind::Bool};
      return true;
    case Builtin::Nth:
    case Builtin::Balanced:
      if (!arity(e, 2, 2) || !requireBool(*e.args[0], what) ||
          !requireTokenDomain(*e.args[0], what) ||
          !requireFloat(*e.args[1], what) ||
          !requireCoarse(*e.args[1], what))
        return false;
      e.type = {Domain::Token, ElemKind::Bool};
      return true;
    case Builtin::GroupCount:
      if (!arity(e, 0, 0))
        return false;
      e.type = {Domain::Group, ElemKind::Float};
      return true;
    case Builtin::GroupSum:
    case Builtin::GroupMean:
    case Builtin::GroupMin:
    case Builtin::GroupMax:
    case Builtin::GroupVar:
    case Builtin::GroupStd:
    case Builtin::GroupVarUnbiased:
    case Builtin::GroupStdUnbiased:
    case Builtin::GroupLooMean:
      if (!arity(e, 1, 1) || !floats())
        return false;
      if (e.args[0]->type.domain != Domain::Seq) {
        error(e.args[0]->loc)
            << what << " reduces a 'seq' value over its group, but this "
            << "value has domain '" << domainName(e.args[0]->type.domain)
            << "'"
            << (e.args[0]->type.domain == Domain::Token
                    ? "; reduce it to 'seq' first (e.g. seq_mean)"
                    : "");
        return false;
      }
      e.type = {*b == Builtin::GroupLooMean ? Domain::Seq : Domain::Group,
                ElemKind::Float};
      return true;
    case Builtin::IsRoot:
    case Builtin::IsLeaf:
      if (!arity(e, 0, 0))
        return false;
      e.type = {Domain::Node, ElemKind::Bool};
      return true;
    case Builtin::NumChildren:
    case Builtin::SubtreeCount:
      if (!arity(e, 0, 0))
        return false;
      e.type = {Domain::Node, ElemKind::Float};
      return true;
    case Builtin::LeafMean:
    case Builtin::SubtreeMean:
    case Builtin::SubtreeMax:
      if (!arity(e, 1, 1) || !floats())
        return false;
      if (e.args[0]->type.domain != Domain::Seq &&
          e.args[0]->type.domain != Domain::Scalar) {
        error(e.args[0]->loc)
            << what << " reduces a 'seq' value (one per root-to-leaf path) "
            << "onto the tree's nodes, but this value has domain '"
            << domainName(e.args[0]->type.domain) << "'";
        return false;
      }
      e.type = {Domain::Node, ElemKind::Float};
      return true;
    case Builtin::ChildMean:
    case Builtin::TreeMean:
    case Builtin::Parent:
      if (!arity(e, 1, *b == Builtin::Parent ? 2 : 1) || !floats())
        return false;
      for (auto &a : e.args)
        if (a->type.domain != Domain::Node && a->type.domain != Domain::Scalar) {
          error(a->loc) << what << " runs over the tree's nodes, but this "
                        << "value has domain '" << domainName(a->type.domain)
                        << "'";
          return false;
        }
      e.type = {Domain::Node, ElemKind::Float};
      return true;
    }
    return false;
  }

  bool requireSequenceDomain(Expr &e, llvm::StringRef what) {
    if (e.type.domain == Domain::Token || e.type.domain == Domain::Seg)
      return true;
    error(e.loc) << what << " runs along the tokens or the segments of a "
                 << "sequence, but this value has domain '"
                 << domainName(e.type.domain) << "'";
    return false;
  }

  bool requireTokenDomain(Expr &e, llvm::StringRef what) {
    if (e.type.domain == Domain::Token)
      return true;
    error(e.loc) << what << " takes a token predicate, but this value has "
                 << "domain '" << domainName(e.type.domain) << "'";
    return false;
  }

  /// `alias.name`: an output of an imported estimator. Its inputs bind to
  /// this estimator's inputs of the same names, which must be declared
  /// (before the first use) with the same domains; its parameters become
  /// parameters named `alias_param`.
  bool checkImported(Expr &e) {
    auto it = imports.find(e.qualifier);
    if (it == imports.end()) {
      error(e.loc) << "unknown module '" << e.qualifier
                   << "'; import it first: `import \"FILE.cac\" as "
                   << e.qualifier << "`";
      return false;
    }
    const Import &imp = *it->second;
    const Estimator &mod = *imp.module;
    if (!checkedImports.count(e.qualifier)) {
      for (const Stmt &s : mod.stmts) {
        if (s.kind == Stmt::Kind::Input) {
          auto sym = symbols.find(s.name);
          if (sym == symbols.end() ||
              sym->second.kind != Symbol::Kind::Input ||
              sym->second.type.domain != s.type.domain) {
            error(e.loc) << "'" << e.qualifier << "' ('" << imp.path
                         << "') reads the input '" << s.name << "' : "
                         << domainName(s.type.domain) << "; declare `input "
                         << s.name << " : " << domainName(s.type.domain)
                         << "` before using it";
            return false;
          }
          if (s.name == "group")
            hasGroupInput = true;
        } else if (s.kind == Stmt::Kind::Param) {
          std::string name = e.qualifier + "_" + s.name;
          if (symbols.count(name)) {
            error(e.loc) << "the parameter '" << s.name << "' of '"
                         << e.qualifier << "' becomes '" << name
                         << "', which is already defined";
            return false;
          }
          symbols[name] = Symbol{Symbol::Kind::Param, s.type, s.nameLoc};
        }
      }
      checkedImports.insert(e.qualifier);
    }
    for (const Stmt &s : mod.stmts)
      if (s.kind == Stmt::Kind::Output && s.name == e.name) {
        e.type = s.type;
        // Its segments are the imported estimator's own: here a seg output is
        // the segment's value on each token.
        if (e.type.domain == Domain::Seg)
          e.type.domain = Domain::Token;
        return true;
      }
    auto d = error(e.loc) << "'" << e.qualifier << "' has no output '"
                          << e.name << "' (outputs:";
    for (const Stmt &s : mod.stmts)
      if (s.kind == Stmt::Kind::Output)
        d << " " << s.name;
    d << ")";
    return false;
  }

  bool requireTokenValue(Expr &e, llvm::StringRef what) {
    if (e.type.domain == Domain::Token)
      return true;
    error(e.loc) << what << " ranks the tokens of each sequence, but this "
                 << "value has domain '" << domainName(e.type.domain) << "'";
    return false;
  }

  /// A count or period: a parameter, a literal or a per-sequence value.
  bool requireCoarse(Expr &e, llvm::StringRef what) {
    if (e.type.domain == Domain::Scalar || e.type.domain == Domain::Seq)
      return true;
    error(e.loc) << what << " takes a number per sequence (a parameter or a "
                 << "'seq' value) here, but this value has domain '"
                 << domainName(e.type.domain) << "'";
    return false;
  }

  /// The seg domain exists once the `segments` statement has defined it.
  bool domainUsable(Domain d, const Location &at) {
    if (d != Domain::Seg || segmentsLoc)
      return true;
    error(at) << "'seg' values need the segments of each sequence: define "
                 "them first with `segments = PREDICATE` (true where a "
                 "segment starts)";
    return false;
  }

  Estimator &est;
  mlir::MLIRContext &ctx;
  llvm::StringMap<Symbol> symbols;
  llvm::StringSet<> outputs;
  bool hasGroupInput = false;
  bool hasTreeInput = false;
  llvm::StringMap<const Import *> imports;
  llvm::StringSet<> checkedImports;
  std::optional<Location> segmentsLoc;
  std::optional<Location> lossLoc;
};

} // namespace

std::optional<Builtin> cac::lookupBuiltin(llvm::StringRef name) {
  for (const BuiltinInfo &b : kBuiltins)
    if (name == b.name)
      return b.id;
  return std::nullopt;
}

const char *const cac::kAggregationModes[4] = {
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
    "seq-mean-token-sum-norm"};

int cac::aggregationCode(llvm::StringRef mode) {
  for (int i = 0; i < 4; ++i)
    if (mode == kAggregationModes[i])
      return i;
  return -1;
}

bool cac::usesGroups(Builtin b) {
  return b >= Builtin::GroupSum && b <= Builtin::GroupLooMean;
}

mlir::LogicalResult cac::analyze(Estimator &est, mlir::MLIRContext &context) {
  return Sema(est, context).run();
}
