//===- Eager.cpp - Estimators as LibTorch tensor operations --------------===//
//
// Walks a `cac.estimator` body in order and evaluates each operation on whole
// tensors in a padded layout (docs/eager.md):
//
//   token  [B, T]   with the batch's mask (padding content is "don't care":
//                   every operation that could read it masks it)
//   seq    [B]
//   group  [G]
//   scalar 0-d
//
// The semantics are those of the compiled kernels
// (compiler/lib/Conversion/LowerKernels/): shifts read inside the
// sequence or the fill, scans start from 0 beyond the sequence, token -> seq
// reductions cover the real tokens only, seq -> group reductions run over the
// members in ascending sequence order, means and variances divide by
// max(n, 1) (max(n - 1, 1) for the unbiased ones), and group and tree means
// are shifted by their first term (exact over equal values).
//
//===----------------------------------------------------------------------===//

#include "cac/Eager/Eager.h"
#include "cac/Eager/BatchOps.h"
#include "cac/Eager/GroupOps.h"
#include "cac/Eager/TreeIndex.h"

#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir;
using namespace cac::ir;

namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

std::string locString(Location loc) {
  if (auto fl = dyn_cast<FileLineColLoc>(loc))
    return (fl.getFilename().str() + ":" + std::to_string(fl.getLine()) + ":" +
            std::to_string(fl.getColumn()));
  if (auto nl = dyn_cast<NameLoc>(loc))
    return locString(nl.getChildLoc());
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations()) {
      std::string s = locString(l);
      if (!s.empty() && s != "unknown location")
        return s;
    }
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return os.str();
}

std::string opName(Operation *op) {
  return op->getName().getStringRef().str();
}

llvm::Error opError(Operation *op, const llvm::Twine &what) {
  return err("eager backend: '" + opName(op) + "' at " +
             locString(op->getLoc()) + ": " + what);
}

llvm::Error unsupported(Operation *op, const llvm::Twine &why = "") {
  std::string msg = "eager backend: unsupported operation '" + opName(op) +
                    "' at " + locString(op->getLoc());
  if (!why.isTriviallyEmpty())
    msg += ": " + why.str();
  return err(msg);
}

std::optional<torch::ScalarType> scalarTypeOf(Type t) {
  if (t.isF32())
    return torch::kFloat32;
  if (t.isF64())
    return torch::kFloat64;
  if (t.isInteger(1))
    return torch::kBool;
  return std::nullopt;
}

FieldType fieldOf(Value v) { return dyn_cast<FieldType>(v.getType()); }

EstimatorOp theEstimator(ModuleOp module, std::string &why) {
  EstimatorOp est;
  unsigned n = 0;
  module.walk([&](EstimatorOp e) {
    est = e;
    ++n;
  });
  if (n != 1) {
    why = "eager backend: expected exactly one cac.estimator, found " +
          std::to_string(n);
    return {};
  }
  return est;
}

//===----------------------------------------------------------------------===//
// The evaluator
//===----------------------------------------------------------------------===//

class Evaluator {
public:
  Evaluator(const cac::PaddedBatch &pb, torch::ScalarType ft)
      : pb(pb), ft(ft), B(pb.numSeqs), T(pb.maxLen), G(pb.numGroups),
        K(pb.numNodes) {}

  llvm::Error run(EstimatorOp est, std::vector<cac::PaddedOutput> &outs) {
    // Parameters: the cac.param operations in order, with their defaults.
    std::vector<std::pair<std::string, std::optional<double>>> declared;
    SmallVector<ParamOp> paramOps;
    est.walk([&](ParamOp p) {
      std::optional<double> def;
      if (auto d = p.getDefaultValue())
        def = d->convertToDouble();
      declared.push_back({p.getName().str(), def});
      paramOps.push_back(p);
    });
    cac::Batch forParams;
    forParams.params = pb.params;
    auto values = cac::resolveParams(forParams, declared);
    if (!values)
      return values.takeError();
    for (auto [p, v] : llvm::zip(paramOps, *values))
      paramValue[p.getResult()] = v;
    this->outs = &outs;
    return evalBlock(est.getBodyBlock());
  }

private:
  llvm::Error evalBlock(Block &block) {
    for (Operation &op : block) {
      try {
        if (auto e = evalOp(&op))
          return e;
      } catch (const c10::Error &ex) {
        return opError(&op, llvm::Twine("LibTorch failed: ") +
                                ex.what_without_backtrace());
      } catch (const std::exception &ex) {
        return opError(&op, ex.what());
      }
    }
    return llvm::Error::success();
  }

  torch::Tensor get(Value v) { return env.lookup(v); }

  llvm::Error set(Operation *op, Value v, torch::Tensor t) {
    if (!t.defined())
      return opError(op, "produced no value");
    env[v] = std::move(t);
    return llvm::Error::success();
  }

  // Shape of a domain, or nullopt for domains the eager backend lacks.
  static bool supportedDomain(Domain d) {
    return d == Domain::Scalar || d == Domain::Token || d == Domain::Seq ||
           d == Domain::Group || d == Domain::Node || d == Domain::Batch;
  }

  /// Moves `t` from domain `from` to the finer domain `to`.
  llvm::Expected<torch::Tensor> broadcast(Operation *op, torch::Tensor t,
                                          Domain from, Domain to) {
    if (from == to)
      return t;
    if (!supportedDomain(from) || !supportedDomain(to))
      return unsupported(op, "broadcast from " + stringifyDomain(from) +
                                 " to " + stringifyDomain(to) +
                                 " (seg and node are not supported)");
    // A batch value is one number, held like a scalar.
    if (from == Domain::Scalar || from == Domain::Batch) {
      switch (to) {
      case Domain::Batch:
        return t;
      case Domain::Token:
        return t.expand({B, T});
      case Domain::Seq:
        return t.expand({B});
      case Domain::Group:
        return t.expand({G});
      case Domain::Node:
        return t.expand({K});
      default:
        break;
      }
    }
    if (from == Domain::Node && to == Domain::Token) {
      if (!pb.tokenNode.defined())
        return opError(op, "the batch has no rollout tree");
      return t.index_select(0, pb.tokenNode.reshape({-1})).view({B, T});
    }
    if (from == Domain::Group && (to == Domain::Seq || to == Domain::Token)) {
      torch::Tensor s = t.index_select(0, pb.seqGroup);
      return to == Domain::Seq ? s : s.unsqueeze(1).expand({B, T});
    }
    if (from == Domain::Seq && to == Domain::Token)
      return t.unsqueeze(1).expand({B, T});
    return opError(op, "cannot broadcast from " + stringifyDomain(from) +
                           " to " + stringifyDomain(to));
  }

  /// The operands of an elementwise operation, brought to its result domain.
  llvm::Error operands(Operation *op, Domain d,
                       SmallVectorImpl<torch::Tensor> &x) {
    for (Value o : op->getOperands()) {
      FieldType f = fieldOf(o);
      if (!f)
        return unsupported(op, "operand is not a cac field");
      auto t = broadcast(op, get(o), f.getDomain(), d);
      if (!t)
        return t.takeError();
      x.push_back(*t);
    }
    return llvm::Error::success();
  }

  torch::Tensor lengthsAs(torch::ScalarType t) { return pb.lengths.to(t); }

  llvm::Error evalOp(Operation *op) {
    // Structure.
    if (auto in = dyn_cast<InputOp>(op))
      return evalInput(in);
    if (auto p = dyn_cast<ParamOp>(op)) {
      auto st = scalarTypeOf(fieldOf(p.getResult()).getElementType());
      return set(op, p.getResult(),
                 torch::scalar_tensor(paramValue.lookup(p.getResult()),
                                      torch::TensorOptions().dtype(*st)));
    }
    if (auto out = dyn_cast<OutputOp>(op))
      return evalOutput(out);
    if (auto k = dyn_cast<KernelOp>(op)) {
      Block &body = k.getBody().front();
      if (auto e = evalBlock(body))
        return e;
      auto yield = cast<YieldOp>(body.getTerminator());
      for (auto [inner, outer] : llvm::zip(yield.getValues(), k.getResults()))
        env[outer] = get(inner);
      return llvm::Error::success();
    }
    if (isa<YieldOp>(op))
      return llvm::Error::success();

    if (op->getNumResults() != 1)
      return unsupported(op);
    Value r = op->getResult(0);
    FieldType rf = fieldOf(r);
    if (!rf)
      return unsupported(op, "its result is not a cac field");
    Domain d = rf.getDomain();
    auto rt = scalarTypeOf(rf.getElementType());
    if (!rt)
      return unsupported(op, "element type must be f32, f64 or i1");
    if (!supportedDomain(d))
      return unsupported(op, "the " + stringifyDomain(d) +
                                 " domain is not supported yet");

    if (auto c = dyn_cast<ConstantOp>(op)) {
      Attribute a = c.getValue();
      auto opts = torch::TensorOptions().dtype(*rt);
      if (auto f = dyn_cast<FloatAttr>(a))
        return set(op, r, torch::scalar_tensor(f.getValueAsDouble(), opts));
      if (auto i = dyn_cast<IntegerAttr>(a))
        return set(op, r,
                   torch::scalar_tensor(i.getValue().getBoolValue(), opts));
      return unsupported(op, "constant attribute");
    }
    if (auto bc = dyn_cast<BroadcastOp>(op)) {
      auto t = broadcast(op, get(bc.getOperand()),
                         fieldOf(bc.getOperand()).getDomain(), d);
      if (!t)
        return t.takeError();
      return set(op, r, *t);
    }
    if (isa<PositionOp>(op)) {
      if (d != Domain::Token)
        return opError(op, "position is a token value");
      return set(op, r,
                 torch::arange(T, torch::TensorOptions().dtype(*rt))
                     .unsqueeze(0)
                     .expand({B, T}));
    }
    if (isa<LengthOp>(op)) {
      if (d != Domain::Seq)
        return opError(op, "length is a seq value");
      return set(op, r, lengthsAs(*rt));
    }
    if (isa<BinaryOp, UnaryOp, CmpOp, SelectOp, CastOp>(op)) {
      SmallVector<torch::Tensor, 3> x;
      if (auto e = operands(op, d, x))
        return e;
      auto t = elementwise(op, x, *rt);
      if (!t)
        return t.takeError();
      return set(op, r, *t);
    }
    if (auto g = dyn_cast<SegGatherOp>(op))
      return evalSegGather(g);
    if (auto r = dyn_cast<RankOp>(op))
      return evalRank(r);
    if (isa<GroupRankOp, GroupPosSumOp, GroupKeyOp, BatchKthOp, BatchTopKOp,
            UniformOp>(op))
      return set(op, r, cac::evalAcrossSeqs(pb, op, *rt, env));
    if (isa<NumChildrenOp, ParentOp, ChildMeanOp, TreeMeanOp, PathReduceOp>(
            op)) {
      if (!pb.nodeParent.defined())
        return opError(op, "the estimator needs a rollout tree: give \"tree\" "
                           "in the batch");
      return set(op, r, evalTree(op, *rt));
    }
    if (auto s = dyn_cast<ShiftOp>(op))
      return evalShift(s, d);
    if (auto s = dyn_cast<ScanOp>(op))
      return evalScan(s, d);
    if (auto red = dyn_cast<ReduceOp>(op))
      return evalReduce(red, d, *rt);
    return unsupported(op);
  }

  /// Each token reads its segment's value of a seg input; 0 past the
  /// segments the input has (the kernels read the zeroed slots there).
  llvm::Error evalSegGather(SegGatherOp g) {
    Operation *op = g.getOperation();
    torch::Tensor vals = get(g.getInput());                   // [B, S]
    torch::Tensor idx = get(g.getIndex()).to(torch::kInt64); // [B, T]
    int64_t S = vals.size(1);
    if (S == 0)
      return set(op, g.getResult(), torch::zeros({B, T}, vals.options()));
    torch::Tensor ok = (idx >= 0) & (idx < pb.segCount.unsqueeze(1));
    torch::Tensor safe = torch::where(ok, idx, torch::zeros_like(idx));
    torch::Tensor x = torch::gather(vals, 1, safe.clamp_max(S - 1));
    return set(op, g.getResult(),
               torch::where(ok, x, torch::zeros_like(x)));
  }

  /// The tree operations, level by level (nodes, or sequences up their
  /// paths).
  torch::Tensor evalTree(Operation *op, torch::ScalarType rt) {
    auto opts = torch::TensorOptions().dtype(rt);
    torch::Tensor parent = pb.nodeParent;
    torch::Tensor hasParent = parent >= 0;
    torch::Tensor children = torch::arange(K, parent.options())
                                 .masked_select(hasParent);
    torch::Tensor parents = parent.masked_select(hasParent);
    auto childSum = [&](torch::Tensor v) {
      return torch::zeros({K}, v.options())
          .index_add_(0, parents, v.index_select(0, children));
    };
    torch::Tensor nc = childSum(torch::ones({K}, opts));
    // Means are shifted by their first term, x0 + sum(x - x0) / n, as the
    // kernels: a mean of equal values is that value exactly.
    auto shiftedMean = [](torch::Tensor x0, torch::Tensor devSum,
                          torch::Tensor cnt) {
      return torch::where(cnt > 0, x0 + devSum / cnt.clamp_min(1),
                          torch::zeros_like(devSum));
    };
    torch::Tensor firstChild = cac::firstChildren(pb.nodeParent).clamp_min(0);
    torch::Tensor safeParent = parent.clamp_min(0);
    auto childMean = [&](torch::Tensor v) {
      torch::Tensor x0 = v.index_select(0, firstChild);
      return shiftedMean(x0, childSum(v - x0.index_select(0, safeParent)), nc);
    };
    if (isa<NumChildrenOp>(op))
      return nc;
    if (auto p = dyn_cast<ParentOp>(op)) {
      torch::Tensor v = get(p.getOperand()).expand({K});
      torch::Tensor fill = get(p.getFill()).expand({K});
      return torch::where(hasParent, v.index_select(0, parent.clamp_min(0)),
                          fill);
    }
    if (auto c = dyn_cast<ChildMeanOp>(op))
      return childMean(get(c.getOperand()).expand({K}).contiguous());
    if (auto tm = dyn_cast<TreeMeanOp>(op)) {
      // Deepest level first: each inner node becomes its children's mean.
      torch::Tensor depth = torch::zeros({K}, parent.options());
      torch::Tensor a = parent.clone();
      for (int64_t i = 0; i < K && (a >= 0).any().item<bool>(); ++i) {
        depth += (a >= 0).to(torch::kInt64);
        a = torch::where(a >= 0, parent.index_select(0, a.clamp_min(0)), a);
      }
      torch::Tensor y = get(tm.getOperand()).expand({K}).clone();
      int64_t maxDepth = K ? depth.max().item<int64_t>() : 0;
      for (int64_t d = maxDepth - 1; d >= 0; --d) {
        torch::Tensor at = (depth == d) & (nc > 0);
        y = torch::where(at, childMean(y), y);
      }
      return y;
    }
    auto pr = cast<PathReduceOp>(op);
    torch::Tensor x = get(pr.getOperand()).expand({B});
    torch::Tensor last = (pb.lengths - 1).unsqueeze(1);
    torch::Tensor leaf = pb.tokenNode.gather(1, last).squeeze(1); // [B]
    // Each sequence's value goes to its leaf (leaf_mean) or to every node
    // on the path from its leaf to the root, one level per step: O(B *
    // depth), not a [B, K] membership matrix.
    torch::Tensor sum = torch::zeros({K}, opts), cnt = torch::zeros({K}, opts);
    torch::Tensor mx = torch::full(
        {K}, -std::numeric_limits<double>::infinity(), opts);
    torch::Tensor a = leaf.clone();
    torch::Tensor xs = x.to(rt);
    const bool leafOnly = pr.getKind() == PathReduceKind::LeafMean;
    const bool isMean = leafOnly || pr.getKind() == PathReduceKind::SubtreeMean;
    torch::Tensor x0 =
        isMean ? cac::pathFirsts(pb.nodeParent, xs, leaf, leafOnly)
               : torch::zeros({K}, opts);
    for (int64_t i = 0; i <= K && (a >= 0).any().item<bool>(); ++i) {
      torch::Tensor on = a >= 0;
      torch::Tensor at = a.masked_select(on), v = xs.masked_select(on);
      sum.index_add_(0, at, v - x0.index_select(0, at));
      cnt.index_add_(0, at, torch::ones_like(v));
      if (pr.getKind() == PathReduceKind::SubtreeMax) {
        // A max per node over this level's entries (torch's scatter_reduce
        // would do it, but 1.13 prints a "beta" warning on first use).
        torch::Tensor vd = v.to(torch::kDouble).contiguous();
        torch::Tensor ad = at.contiguous();
        torch::Tensor md = mx.to(torch::kDouble).contiguous();
        auto va = vd.accessor<double, 1>();
        auto aa = ad.accessor<int64_t, 1>();
        auto ma = md.accessor<double, 1>();
        for (int64_t j = 0; j < va.size(0); ++j)
          ma[aa[j]] = std::max(ma[aa[j]], va[j]);
        mx = md.to(rt);
      }
      if (leafOnly)
        break;
      a = torch::where(on, parent.index_select(0, a.clamp_min(0)), a);
    }
    switch (pr.getKind()) {
    case PathReduceKind::SubtreeSum:
      return sum;
    case PathReduceKind::SubtreeMax:
      return torch::where(cnt > 0, mx, torch::zeros_like(mx));
    default:
      return shiftedMean(x0, sum, cnt);
    }
  }

  /// Descending rank inside each sequence, ties by the lower index: a stable
  /// descending sort with padding last.
  llvm::Error evalRank(RankOp r) {
    torch::Tensor x = get(r.getInput());
    torch::Tensor key = torch::where(
        pb.mask, x,
        torch::scalar_tensor(-std::numeric_limits<double>::infinity(),
                             x.options()));
    torch::Tensor order =
        std::get<1>(torch::sort(key, /*stable=*/true, /*dim=*/1,
                                /*descending=*/true));
    torch::Tensor ranks = torch::empty_like(order);
    ranks.scatter_(1, order,
                   torch::arange(T, order.options()).unsqueeze(0).expand({B, T}));
    return set(r.getOperation(), r.getResult(), ranks.to(x.scalar_type()));
  }

  llvm::Error evalInput(InputOp in) {
    Operation *op = in.getOperation();
    FieldType f = fieldOf(in.getResult());
    Domain d = f.getDomain();
    std::string name = in.getName().str();
    if (d == Domain::Seg) {
      auto it = pb.seg.find(name);
      if (it == pb.seg.end())
        return err("the batch has no seg input '" + name + "' (\"seg\": {\"" +
                   name + "\": ...})");
      auto st = scalarTypeOf(f.getElementType());
      return set(op, in.getResult(), it->second.to(*st));
    }
    if (d != Domain::Token && d != Domain::Seq)
      return unsupported(op, "inputs of domain " + stringifyDomain(d) +
                                 " are not supported");
    const auto &src = d == Domain::Token ? pb.token : pb.seq;
    auto it = src.find(name);
    std::string dom = stringifyDomain(d).str();
    if (it == src.end())
      return err("the batch has no " + dom + " input '" + name + "' (\"" +
                 dom + "\": {\"" + name + "\": ...})");
    auto st = scalarTypeOf(f.getElementType());
    if (!st || *st == torch::kBool)
      return unsupported(op, "inputs are numbers (f32 or f64)");
    return set(op, in.getResult(), it->second.to(*st));
  }

  llvm::Error evalOutput(OutputOp out) {
    Operation *op = out.getOperation();
    FieldType f = fieldOf(out.getValue());
    Domain d = f.getDomain();
    if (d != Domain::Token && d != Domain::Seq && d != Domain::Group &&
        d != Domain::Node)
      return unsupported(op, "outputs of domain " + stringifyDomain(d) +
                                 " are not supported");
    torch::Tensor t = get(out.getValue());
    if (t.scalar_type() == torch::kBool) // predicates are written as 1 / 0
      t = t.to(ft);
    // A seg output is held on the tokens of its segments.
    std::string dom = out->hasAttr("cac.seg") ? "seg" : stringifyDomain(d).str();
    outs->push_back({out.getName().str(), dom, t});
    return llvm::Error::success();
  }

  llvm::Expected<torch::Tensor> elementwise(Operation *op,
                                            ArrayRef<torch::Tensor> x,
                                            torch::ScalarType rt) {
    if (auto bin = dyn_cast<BinaryOp>(op)) {
      switch (bin.getKind()) {
      case BinaryKind::Add:
        return x[0] + x[1];
      case BinaryKind::Sub:
        return x[0] - x[1];
      case BinaryKind::Mul:
        return x[0] * x[1];
      case BinaryKind::Div:
        return x[0] / x[1];
      case BinaryKind::Min: // NaN-propagating, as arith.minimumf
        return torch::minimum(x[0], x[1]);
      case BinaryKind::Max:
        return torch::maximum(x[0], x[1]);
      case BinaryKind::Pow:
        return torch::pow(x[0], x[1]);
      case BinaryKind::And:
        return torch::logical_and(x[0], x[1]);
      case BinaryKind::Or:
        return torch::logical_or(x[0], x[1]);
      case BinaryKind::Mod: // floored, as the kernels compute it
        return x[0] - x[1] * torch::floor(x[0] / x[1]);
      }
      return unsupported(op, "binary kind");
    }
    if (auto un = dyn_cast<UnaryOp>(op)) {
      switch (un.getKind()) {
      case UnaryKind::Neg:
        return -x[0];
      case UnaryKind::Exp:
        return torch::exp(x[0]);
      case UnaryKind::Log:
        return torch::log(x[0]);
      case UnaryKind::Sqrt:
        return torch::sqrt(x[0]);
      case UnaryKind::Abs:
        return torch::abs(x[0]);
      case UnaryKind::Sigmoid: // 1 / (1 + exp(-x)), as the kernels compute it
        return torch::reciprocal(torch::exp(-x[0]) + 1.0);
      case UnaryKind::Not:
        return torch::logical_not(x[0]);
      case UnaryKind::Floor:
        return torch::floor(x[0]);
      case UnaryKind::Ceil:
        return torch::ceil(x[0]);
      case UnaryKind::StopGrad:
        return x[0].detach();
      }
      return unsupported(op, "unary kind");
    }
    if (auto cmp = dyn_cast<CmpOp>(op)) {
      // Ordered comparisons (false on NaN), `ne` unordered, as the kernels.
      switch (cmp.getPredicate()) {
      case CmpPredicate::LT:
        return torch::lt(x[0], x[1]);
      case CmpPredicate::LE:
        return torch::le(x[0], x[1]);
      case CmpPredicate::GT:
        return torch::gt(x[0], x[1]);
      case CmpPredicate::GE:
        return torch::ge(x[0], x[1]);
      case CmpPredicate::EQ:
        return torch::eq(x[0], x[1]);
      case CmpPredicate::NE:
        return torch::ne(x[0], x[1]);
      }
      return unsupported(op, "comparison predicate");
    }
    if (isa<SelectOp>(op))
      return torch::where(x[0], x[1], x[2]);
    if (isa<CastOp>(op))
      return x[0].to(rt);
    return unsupported(op);
  }

  /// `shift x by k fill f`: x[t + k] inside the sequence, else f[t].
  llvm::Error evalShift(ShiftOp s, Domain d) {
    Operation *op = s.getOperation();
    if (d != Domain::Token)
      return unsupported(op, "shifts along " + stringifyDomain(d) +
                                 " values are not supported");
    int64_t k = s.getOffset();
    torch::Tensor x = get(s.getOperand());
    torch::Tensor fill = get(s.getFill());
    torch::Tensor shifted = torch::zeros({B, T}, x.options());
    int64_t n = T - std::abs(k);
    if (n > 0) {
      if (k >= 0)
        shifted.narrow(1, 0, n).copy_(x.narrow(1, k, n));
      else
        shifted.narrow(1, -k, n).copy_(x.narrow(1, 0, n));
    }
    auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64))
                   .unsqueeze(0);
    torch::Tensor inside = k >= 0 ? (pos + k) < pb.lengths.unsqueeze(1)
                                  : (pos + k) >= 0;
    return set(op, s.getResult(), torch::where(inside, shifted, fill));
  }

  /// Linear recurrence along each sequence, one token column per step for
  /// the whole batch: y[t] = x[t] + c[t] * y[t -+ 1], zero beyond the
  /// sequence.
  llvm::Error evalScan(ScanOp s, Domain d) {
    Operation *op = s.getOperation();
    if (d != Domain::Token)
      return unsupported(op, "scans along " + stringifyDomain(d) +
                                 " values are not supported");
    bool reverse = s.getReverse();
    // Zero x and c on padding: a reverse scan then starts each row from
    // y = 0 at its last token, and padding stays 0.
    torch::Tensor zero = torch::zeros({}, get(s.getInput()).options());
    torch::Tensor x =
        torch::where(pb.mask, get(s.getInput()), zero).t().contiguous();
    torch::Tensor c =
        torch::where(pb.mask, get(s.getDecay()), zero).t().contiguous();
    if (torch::GradMode::is_enabled() && (x.requires_grad() || c.requires_grad())) {
      // Autograd (runEager's `autograd`): no out= operations.
      std::vector<torch::Tensor> ys(T);
      torch::Tensor prev = torch::zeros({B}, x.options());
      for (int64_t i = 0; i < T; ++i) {
        int64_t t = reverse ? T - 1 - i : i;
        prev = x.select(0, t) + c.select(0, t) * prev;
        ys[t] = prev;
      }
      return set(op, s.getResult(), torch::stack(ys).t());
    }
    torch::Tensor y = torch::empty({T, B}, x.options());
    torch::Tensor prev = torch::zeros({B}, x.options());
    torch::Tensor tmp = torch::empty({B}, x.options());
    for (int64_t i = 0; i < T; ++i) {
      int64_t t = reverse ? T - 1 - i : i;
      torch::Tensor yt = y.select(0, t);
      torch::mul_out(tmp, c.select(0, t), prev);
      torch::add_out(yt, x.select(0, t), tmp);
      prev = yt;
    }
    return set(op, s.getResult(), y.t());
  }

  llvm::Error evalReduce(ReduceOp red, Domain to, torch::ScalarType rt) {
    Operation *op = red.getOperation();
    Domain from = fieldOf(red.getOperand()).getDomain();
    torch::Tensor x = get(red.getOperand());
    ReduceKind k = red.getKind();
    if (from == Domain::Token && to == Domain::Seq)
      return set(op, red.getResult(), tokenToSeq(x, k, rt));
    if (from == Domain::Seq && to == Domain::Group)
      return set(op, red.getResult(), seqToGroup(x, k, rt));
    if (from == Domain::Seq && to == Domain::Batch)
      return set(op, red.getResult(), seqToBatch(x, k, rt));
    return unsupported(op, "reduction from " + stringifyDomain(from) + " to " +
                               stringifyDomain(to));
  }

  torch::Tensor tokenToSeq(torch::Tensor x, ReduceKind k,
                           torch::ScalarType rt) {
    auto fill = [&](double v) {
      return torch::where(pb.mask, x, torch::scalar_tensor(v, x.options()));
    };
    const double inf = std::numeric_limits<double>::infinity();
    switch (k) {
    case ReduceKind::Sum:
      return fill(0.0).sum(1);
    case ReduceKind::Mean:
      return fill(0.0).sum(1) / lengthsAs(rt).clamp_min(1);
    case ReduceKind::Min:
      return fill(inf).amin(1);
    case ReduceKind::Max:
      return fill(-inf).amax(1);
    case ReduceKind::First:
      return x.select(1, 0).contiguous();
    case ReduceKind::Last:
      return x.gather(1, (pb.lengths - 1).unsqueeze(1)).squeeze(1);
    case ReduceKind::Count:
      return lengthsAs(rt);
    default:
      throw std::runtime_error(
          ("reduction '" + stringifyReduceKind(k) +
           "' is not defined from token to seq")
              .str());
    }
  }

  /// Seq values laid out [G, M] by group (members in ascending order),
  /// `pad` on the unused slots.
  torch::Tensor byGroup(torch::Tensor x, double pad) {
    torch::Tensor m = pb.groupMask;
    return torch::full(m.sizes(), pad, x.options())
        .masked_scatter_(m, x.index_select(0, pb.groupMembers));
  }

  /// A variance (or std) of kind `k` from the sum of squared deviations
  /// `ss` over `n` terms: / max(n, 1), / max(n - 1, 1) for the unbiased ones.
  static torch::Tensor finishVariance(torch::Tensor ss, torch::Tensor n,
                                      ReduceKind k) {
    bool unbiased =
        k == ReduceKind::VarUnbiased || k == ReduceKind::StdUnbiased;
    torch::Tensor var = ss / (unbiased ? n - 1 : n).clamp_min(1);
    if (k == ReduceKind::Std || k == ReduceKind::StdUnbiased)
      return torch::sqrt(var);
    return var;
  }

  torch::Tensor seqToGroup(torch::Tensor x, ReduceKind k,
                           torch::ScalarType rt) {
    auto sum = [&](torch::Tensor v) {
      return torch::zeros({G}, v.options()).index_add_(0, pb.seqGroup, v);
    };
    torch::Tensor n = pb.groupCount.to(rt);
    // Means shifted by the group's first member, as the kernels: a mean of
    // equal values is that value exactly.
    auto mean = [&] {
      torch::Tensor x0 = x.index_select(0, pb.groupFirst);
      return x0 + sum(x - x0.index_select(0, pb.seqGroup)) / n.clamp_min(1);
    };
    switch (k) {
    case ReduceKind::Sum:
      return sum(x);
    case ReduceKind::Mean:
      return mean();
    case ReduceKind::Min:
      return byGroup(x, std::numeric_limits<double>::infinity()).amin(1);
    case ReduceKind::Max:
      return byGroup(x, -std::numeric_limits<double>::infinity()).amax(1);
    case ReduceKind::First:
      return x.index_select(0, pb.groupFirst);
    case ReduceKind::Last:
      return x.index_select(0, pb.groupLast);
    case ReduceKind::Count:
      return n;
    case ReduceKind::Var:
    case ReduceKind::Std:
    case ReduceKind::VarUnbiased:
    case ReduceKind::StdUnbiased: {
      // Two passes as the kernels: the mean, then the squared deviations.
      torch::Tensor dev = x - mean().index_select(0, pb.seqGroup);
      return finishVariance(sum(dev * dev), n, k);
    }
    }
    throw std::runtime_error("unknown reduction");
  }

  /// Over all the sequences: a 0-dimensional tensor, as a scalar's.
  torch::Tensor seqToBatch(torch::Tensor x, ReduceKind k,
                           torch::ScalarType rt) {
    torch::Tensor n = torch::scalar_tensor(double(B), x.options().dtype(rt));
    // Shifted by the first sequence, as the kernels' batch kernel (the group
    // kernel's passes): exact over equal values.
    auto mean = [&] {
      torch::Tensor x0 = x.select(0, 0);
      return x0 + (x - x0).sum() / n.clamp_min(1);
    };
    switch (k) {
    case ReduceKind::Sum:
      return x.sum();
    case ReduceKind::Mean:
      return mean();
    case ReduceKind::Min:
      return x.amin();
    case ReduceKind::Max:
      return x.amax();
    case ReduceKind::First:
      return x.select(0, 0);
    case ReduceKind::Last:
      return x.select(0, B - 1);
    case ReduceKind::Count:
      return n;
    case ReduceKind::Var:
    case ReduceKind::Std:
    case ReduceKind::VarUnbiased:
    case ReduceKind::StdUnbiased: {
      torch::Tensor dev = x - mean();
      return finishVariance((dev * dev).sum(), n, k);
    }
    }
    throw std::runtime_error("unknown reduction");
  }

  const cac::PaddedBatch &pb;
  torch::ScalarType ft;
  int64_t B, T, G, K;
  llvm::DenseMap<Value, torch::Tensor> env;
  llvm::DenseMap<Value, double> paramValue;
  std::vector<cac::PaddedOutput> *outs = nullptr;
};

torch::Tensor int64Tensor(const std::vector<int64_t> &v) {
  return torch::tensor(v,
                       torch::TensorOptions().dtype(torch::kInt64));
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

cac::PaddedBatch cac::padBatch(const Batch &batch, torch::ScalarType dtype) {
  PaddedBatch pb;
  int64_t B = batch.numSeqs, G = batch.numGroups();
  pb.numSeqs = B;
  pb.numGroups = G;
  std::vector<int64_t> lens(static_cast<size_t>(B)), groups(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    lens[b] = batch.seqOffsets[b + 1] - batch.seqOffsets[b];
    pb.maxLen = std::max(pb.maxLen, lens[b]);
    groups[b] = batch.seqGroup[b];
  }
  std::vector<int64_t> count(static_cast<size_t>(G)), first(static_cast<size_t>(G)),
      last(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) {
    int32_t lo = batch.groupOffsets[g], hi = batch.groupOffsets[g + 1];
    count[g] = hi - lo;
    first[g] = hi > lo ? batch.groupMembers[lo] : 0;
    last[g] = hi > lo ? batch.groupMembers[hi - 1] : 0;
  }
  int64_t maxGroup = 0;
  for (int64_t c : count)
    maxGroup = std::max(maxGroup, c);
  pb.lengths = int64Tensor(lens);
  pb.groupMembers = int64Tensor(
      std::vector<int64_t>(batch.groupMembers.begin(), batch.groupMembers.end()));
  pb.groupMask =
      torch::arange(maxGroup, torch::TensorOptions().dtype(torch::kInt64))
          .unsqueeze(0) < int64Tensor(count).unsqueeze(1);
  pb.seqGroup = int64Tensor(groups);
  pb.groupCount = int64Tensor(count);
  pb.groupFirst = int64Tensor(first);
  pb.groupLast = int64Tensor(last);
  pb.mask = torch::arange(pb.maxLen, torch::TensorOptions().dtype(torch::kInt64))
                .unsqueeze(0) < pb.lengths.unsqueeze(1);
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // Packed rows -> [B, width] zero padded, real entries where `mask` holds.
  auto padRows = [&](const std::vector<double> &v, const torch::Tensor &mask,
                     int64_t width) {
    torch::Tensor packed =
        torch::from_blob(const_cast<double *>(v.data()), {int64_t(v.size())},
                         f64)
            .to(dtype);
    torch::Tensor padded =
        torch::zeros({B, width}, torch::TensorOptions().dtype(dtype));
    padded.masked_scatter_(mask, packed);
    return padded;
  };
  for (const auto &kv : batch.token)
    pb.token[kv.first().str()] = padRows(kv.second, pb.mask, pb.maxLen);
  for (const auto &kv : batch.seq) {
    const std::vector<double> &v = kv.second;
    pb.seq[kv.first().str()] =
        torch::from_blob(const_cast<double *>(v.data()), {int64_t(v.size())},
                         f64)
            .to(dtype)
            .clone();
  }
  // Seg inputs: [B, S] zero padded.
  std::vector<int64_t> segCount(static_cast<size_t>(B), 0);
  int64_t maxSegs = 0;
  if (!batch.segOffsets.empty())
    for (int64_t b = 0; b < B; ++b) {
      segCount[b] = batch.segOffsets[b + 1] - batch.segOffsets[b];
      maxSegs = std::max(maxSegs, segCount[b]);
    }
  pb.segCount = int64Tensor(segCount);
  torch::Tensor segMask =
      torch::arange(maxSegs, torch::TensorOptions().dtype(torch::kInt64))
          .unsqueeze(0) < pb.segCount.unsqueeze(1);
  for (const auto &kv : batch.seg)
    pb.seg[kv.first().str()] = padRows(kv.second, segMask, maxSegs);
  if (!batch.nodeParent.empty()) {
    pb.numNodes = batch.numNodes;
    std::vector<int64_t> parent(batch.nodeParent.begin(),
                                batch.nodeParent.end());
    pb.nodeParent = int64Tensor(parent);
    std::vector<int64_t> nodes(batch.tokenNode.begin(), batch.tokenNode.end());
    pb.tokenNode = torch::zeros({B, pb.maxLen},
                                torch::TensorOptions().dtype(torch::kInt64));
    pb.tokenNode.masked_scatter_(pb.mask, int64Tensor(nodes));
  }
  pb.params = batch.params;
  return pb;
}

torch::ScalarType cac::eagerDtype(ModuleOp module) {
  torch::ScalarType t = torch::kFloat32;
  bool found = false;
  module.walk([&](Operation *op) {
    if (found)
      return;
    for (Value r : op->getResults())
      if (auto f = fieldOf(r)) {
        auto st = scalarTypeOf(f.getElementType());
        if (st && *st != torch::kBool) {
          t = *st;
          found = true;
          return;
        }
      }
  });
  return t;
}

llvm::Expected<std::vector<cac::PaddedOutput>>
cac::runEagerPadded(ModuleOp module, const PaddedBatch &batch,
                    bool autograd) {
  std::string why;
  EstimatorOp est = theEstimator(module, why);
  if (!est)
    return err(why);
  if (!autograd) {
    torch::NoGradGuard noGrad;
    std::vector<PaddedOutput> outs;
    Evaluator ev(batch, eagerDtype(module));
    if (auto e = ev.run(est, outs))
      return std::move(e);
    return outs;
  }
  auto obj = est->getAttrOfType<DictionaryAttr>("cac.objective");
  if (!obj)
    return err("the autograd gradient needs an objective (`objective NAME "
               "{ ... loss(INPUT) = ... }`)");
  std::string wrt = cast<StringAttr>(obj.get("wrt")).str();
  // The input the loss is differentiated by becomes a leaf that requires
  // its gradient; everything else is shared with `batch`.
  PaddedBatch pb = batch;
  auto &arrays = pb.token.count(wrt) ? pb.token : pb.seq;
  auto it = arrays.find(wrt);
  if (it == arrays.end())
    return err("the batch has no input '" + wrt + "'");
  torch::Tensor x = it->second.detach().clone().requires_grad_(true);
  it->second = x;
  torch::AutoGradMode enable(true);
  std::vector<PaddedOutput> outs;
  Evaluator ev(pb, eagerDtype(module));
  if (auto e = ev.run(est, outs))
    return std::move(e);
  PaddedOutput *loss = nullptr, *grad = nullptr;
  for (PaddedOutput &o : outs) {
    if (o.name == "loss")
      loss = &o;
    if (o.name == "grad_" + wrt)
      grad = &o;
  }
  if (!loss || !grad)
    return err("the objective has no outputs loss and grad_" + wrt);
  loss->values.sum().backward();
  torch::Tensor g = x.grad();
  grad->values = g.defined() ? g.detach() : torch::zeros_like(x).detach();
  loss->values = loss->values.detach();
  for (PaddedOutput &o : outs)
    o.values = o.values.detach();
  return outs;
}

std::vector<cac::OutputArray>
cac::unpadOutputs(const PaddedBatch &batch,
                  const std::vector<PaddedOutput> &outs) {
  std::vector<OutputArray> result;
  for (const PaddedOutput &o : outs) {
    torch::Tensor t = o.values;
    if (o.domain == "token" || o.domain == "seg")
      t = t.expand({batch.numSeqs, batch.maxLen}).masked_select(batch.mask);
    else if (o.domain == "seq")
      t = t.expand({batch.numSeqs});
    else if (o.domain == "group")
      t = t.expand({batch.numGroups});
    else if (o.domain == "node")
      t = t.expand({batch.numNodes});
    t = t.to(torch::kFloat64).contiguous();
    const double *p = t.data_ptr<double>();
    result.push_back({o.name, o.domain, std::vector<double>(p, p + t.numel())});
  }
  return result;
}

llvm::Expected<std::vector<cac::OutputArray>>
cac::runEager(ModuleOp module, const Batch &batch, bool autograd) {
  try {
    std::string why;
    if (!theEstimator(module, why))
      return err(why);
    PaddedBatch pb = padBatch(batch, eagerDtype(module));
    auto outs = runEagerPadded(module, pb, autograd);
    if (!outs)
      return outs.takeError();
    return unpadOutputs(pb, *outs);
  } catch (const std::exception &ex) {
    return err(llvm::Twine("eager backend: LibTorch failed: ") + ex.what());
  }
}
