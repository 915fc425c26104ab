//===- Sema.cpp - Names, types and domains of a .cac estimator ------------===//

#include "cac/DSL/Sema.h"
#include "cac/DSL/Parser.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstdio>

using namespace cac;
using namespace cac::ast;

namespace {

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
    if (*d == Domain::Batch) {
      error(s.domainLoc) << "'batch' values are made by the batch_* "
                            "reductions and broadcast from there; declare "
                            "this one token, seg, seq or group";
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
      // Zero-argument built-ins can be written without parentheses.
      if (builtinInfo(*b).maxArgs == 0) {
        e.kind = Expr::Kind::Call;
        return checkCall(e);
      }
      error(e.loc) << "'" << e.name << "' is a function; call it with "
                   << "arguments: " << e.name << "(...)";
      return false;
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
    const BuiltinInfo &info = builtinInfo(*b);
    std::string what = "'" + e.name + "'";
    if (info.needs == BuiltinNeeds::Group && !hasGroupInput) {
      error(e.loc) << what
                   << " needs the grouping input; declare `input group : seq`";
      return false;
    }
    if (info.needs == BuiltinNeeds::Tree && !hasTreeInput) {
      error(e.loc) << what
                   << " needs the rollout tree; declare `input tree : node`";
      return false;
    }
    if (!arity(e, info.minArgs, info.maxArgs))
      return false;
    if (ruleTakesNumbers(info.rule))
      for (auto &a : e.args)
        if (!requireFloat(*a, what))
          return false;
    if (info.needs == BuiltinNeeds::Segments &&
        !domainUsable(Domain::Seg, e.loc))
      return false;
    if (!checkRule(e, info, what))
      return false;
    // The rules that derive the result's type from the arguments have set it.
    if (info.domain)
      e.type.domain = *info.domain;
    if (info.elem)
      e.type.elem = *info.elem;
    return true;
  }

  /// The domain rule of a built-in (Builtins.def), once the argument count
  /// and kinds are right.
  bool checkRule(Expr &e, const BuiltinInfo &info, llvm::StringRef what) {
    switch (info.rule) {
    case BuiltinRule::Elementwise: {
      auto d = join(e, operands(e), what);
      if (!d)
        return false;
      e.type = {*d, ElemKind::Float};
      return true;
    }
    case BuiltinRule::Select:
      return checkSelect(e, what);
    case BuiltinRule::ToFloat:
      if (!requireBool(*e.args[0], what))
        return false;
      e.type = {e.args[0]->type.domain, ElemKind::Float};
      return true;
    case BuiltinRule::AlongSequence:
      return checkAlongSequence(e, what);
    case BuiltinRule::Structure:
      return true;
    case BuiltinRule::SeqReduce:
    case BuiltinRule::SegReduce:
    case BuiltinRule::GroupReduce:
    case BuiltinRule::GroupPositions:
    case BuiltinRule::BatchReduce:
    case BuiltinRule::PathReduce:
      return checkReduced(*e.args[0], info.rule, what);
    case BuiltinRule::GroupKeyed:
      for (auto &a : e.args)
        if (!checkReduced(*a, BuiltinRule::GroupReduce, what))
          return false;
      return true;
    case BuiltinRule::Rank:
      // top_k(x, k) also takes the count k.
      return requireTokenValue(*e.args[0], what) &&
             (e.args.size() < 2 || requireCoarse(*e.args[1], what));
    case BuiltinRule::BatchTopK:
      return requireDomain(*e.args[0], {Domain::Token}, what,
                           "picks tokens of the whole batch") &&
             requireDomain(*e.args[1], {Domain::Scalar, Domain::Batch}, what,
                           "takes one count for the whole batch (a "
                           "parameter, a literal or a batch value)");
    case BuiltinRule::Draw:
      return requireDomain(*e.args[0], {Domain::Scalar}, what,
                           "takes a seed (a parameter or a literal)");
    case BuiltinRule::Segmentation:
      return checkSegmentation(e, info.id, what);
    case BuiltinRule::NodeMap:
      for (auto &a : e.args)
        if (a->type.domain != Domain::Node &&
            a->type.domain != Domain::Scalar) {
          error(a->loc) << what << " runs over the tree's nodes, but this "
                        << "value has domain '" << domainName(a->type.domain)
                        << "'";
          return false;
        }
      return true;
    }
    return false;
  }

  static std::vector<Expr *> operands(Expr &e) {
    std::vector<Expr *> ops;
    for (auto &a : e.args)
      ops.push_back(a.get());
    return ops;
  }

  bool checkSelect(Expr &e, llvm::StringRef what) {
    if (!requireBool(*e.args[0], what))
      return false;
    if (e.args[1]->type.elem != e.args[2]->type.elem) {
      error(e.args[2]->loc)
          << "both branches of 'select' must be numbers or both "
             "predicates; this is a "
          << describe(e.args[2]->type) << " and the other a "
          << describe(e.args[1]->type);
      return false;
    }
    auto d = join(e, operands(e), what);
    if (!d)
      return false;
    e.type = {*d, e.args[1]->type.elem};
    return true;
  }

  /// next, prev, scan, rscan, cumsum, rcumsum: the first argument's type,
  /// which the second (a fill or decay) must broadcast to.
  bool checkAlongSequence(Expr &e, llvm::StringRef what) {
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

  /// The argument of a reduction to another domain.
  bool checkReduced(Expr &arg, BuiltinRule rule, llvm::StringRef what) {
    Domain d = arg.type.domain;
    std::string has = "value has domain '" + domainName(d).str() + "'";
    switch (rule) {
    case BuiltinRule::SeqReduce:
      if (d == Domain::Token || d == Domain::Seg)
        return true;
      error(arg.loc) << what << " reduces a 'token' or 'seg' value to 'seq', "
                     << "but this " << has;
      return false;
    case BuiltinRule::SegReduce:
      if (d == Domain::Token)
        return true;
      error(arg.loc) << what << " reduces a 'token' value to 'seg', but this "
                     << has;
      return false;
    case BuiltinRule::GroupReduce:
      if (d == Domain::Seq)
        return true;
      error(arg.loc) << what << " reduces a 'seq' value over its group, but "
                     << "this " << has
                     << (d == Domain::Token
                             ? "; reduce it to 'seq' first (e.g. seq_mean)"
                             : "");
      return false;
    case BuiltinRule::GroupPositions:
      if (d == Domain::Token)
        return true;
      error(arg.loc) << what << " sums a 'token' value over the group's "
                     << "sequences at each position, but this " << has;
      return false;
    case BuiltinRule::BatchReduce:
      if (d == Domain::Seq || d == Domain::Token)
        return true;
      error(arg.loc) << what << " reduces a 'seq' value over all the "
                     << "sequences or a 'token' value over all the tokens of "
                     << "the batch, but this " << has;
      return false;
    case BuiltinRule::PathReduce:
    default:
      if (d == Domain::Seq || d == Domain::Scalar)
        return true;
      error(arg.loc) << what << " reduces a 'seq' value (one per root-to-leaf "
                     << "path) onto the tree's nodes, but this " << has;
      return false;
    }
  }

  /// The segmentation rules: every(M) takes a period; after(p), nth(p, n)
  /// and balanced(p, K) a token predicate, the last two then a count.
  bool checkSegmentation(Expr &e, Builtin b, llvm::StringRef what) {
    size_t count = 0;
    if (b != Builtin::Every) {
      if (!requireBool(*e.args[0], what) ||
          !requireTokenDomain(*e.args[0], what))
        return false;
      count = 1;
    }
    for (size_t i = count; i < e.args.size(); ++i)
      if (!requireFloat(*e.args[i], what) ||
          !requireCoarse(*e.args[i], what) ||
          !requirePositiveCount(*e.args[i], what))
        return false;
    return true;
  }

  /// A period or count written as a number must be a whole number of at
  /// least 1: every(0) would divide by zero, balanced(p, 0) make no
  /// segment. (A parameter's value is the caller's to check.)
  bool requirePositiveCount(Expr &e, llvm::StringRef what) {
    double v;
    if (e.kind == Expr::Kind::Number)
      v = e.number;
    else if (e.kind == Expr::Kind::Unary && e.op == Expr::Op::Neg &&
             e.args[0]->kind == Expr::Kind::Number)
      v = -e.args[0]->number;
    else
      return true;
    if (v >= 1 && v == std::floor(v))
      return true;
    char got[32];
    std::snprintf(got, sizeof(got), "%g", v);
    error(e.loc) << what << ": the "
                 << (what == "'every'" ? "period" : "count")
                 << " is out of range: it must be a whole number of at least "
                 << "1, got " << got;
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

  /// An argument whose domain must be one of `ok`; `wants` says what the
  /// built-in takes there.
  bool requireDomain(Expr &e, std::initializer_list<Domain> ok,
                     llvm::StringRef what, llvm::StringRef wants) {
    if (llvm::is_contained(ok, e.type.domain))
      return true;
    error(e.loc) << what << " " << wants << ", but this value has domain '"
                 << domainName(e.type.domain) << "'";
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

const char *const cac::kAggregationModes[4] = {
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
    "seq-mean-token-sum-norm"};

int cac::aggregationCode(llvm::StringRef mode) {
  for (int i = 0; i < 4; ++i)
    if (mode == kAggregationModes[i])
      return i;
  return -1;
}

mlir::LogicalResult cac::analyze(Estimator &est, mlir::MLIRContext &context) {
  return Sema(est, context).run();
}
