//===- NodeKernel.cpp - Node kernels: one unit per tree node --------------===//

#include "TreeKernels.h"

namespace cac::lowering {
namespace {

/// One unit per tree node. Node values from earlier kernels are read from
/// their buffers at any node; structure comes from `node_parent` and the
/// TreeBuilder kernel's arrays (Abi::TreeScratch): a node's children, the
/// nodes of its subtree and the sequences whose leaves lie in it are ranges
/// there. So num_children is O(1), child_mean O(children), tree_mean
/// O(subtree nodes * depth) and the path reductions O(sequences in the
/// subtree): a batch's node kernels do O(K * depth^2 + B * depth) work in
/// all, not the O(K^2) of scanning every node or sequence per node.
class NodeKernelEmitter {
public:
  NodeKernelEmitter(Emitter &e, KernelOp kernel, const Abi &abi,
                    ArrayRef<std::pair<Value, unsigned>> stores)
      : e(e), b(e.b), ix(e), t(*abi.tree), kernel(kernel), stores(stores) {}

  void emit(Value unit) {
    node = unit;
    e.anchor = e.i64(0).getDefiningOp();
    for (auto [v, buf] : stores)
      e.storeBuffer(buf, eval(v), node);
  }

private:
  Value parentOf(Value n) { return e.loadI32AsI64(kNodeParent, n); }

  /// A node value at another node `idx`: stored by an earlier kernel, or a
  /// broadcast parameter or literal that the partition cloned into this one.
  Value atNode(Value v, Value idx) {
    Operation *op = v.getDefiningOp();
    if (op && op->getParentOp() == kernel.getOperation()) {
      auto bc = cast<BroadcastOp>(op);
      assert(domainOf(bc.getOperand()) == Domain::Scalar &&
             "cac-partition puts node values read at other nodes in earlier "
             "kernels");
      return e.scalar(bc.getOperand());
    }
    return e.loadBuffer(v, idx);
  }

  /// Walks from node `from` towards the root until it reaches this unit's
  /// node or passes the root. Returns (reached, weight), the weight being the
  /// product of 1 / nc[parent] over the steps taken (1 without `nc`).
  std::pair<Value, Value> walkUp(Value from, Value nc) {
    Type i64 = b.getI64Type();
    auto loop = b.create<scf::WhileOp>(e.loc, TypeRange{i64, e.ft},
                                       ValueRange{from, e.fconst(1.0)});
    {
      OpBuilder::InsertionGuard g(b);
      Block *before =
          b.createBlock(&loop.getBefore(), {}, {i64, e.ft}, {e.loc, e.loc});
      Value a = before->getArgument(0);
      Value go = b.create<arith::AndIOp>(
          e.loc, ix.cmpI(arith::CmpIPredicate::sge, a, e.i64(0)),
          ix.cmpI(arith::CmpIPredicate::ne, a, node));
      b.create<scf::ConditionOp>(e.loc, go, before->getArguments());
      Block *after =
          b.createBlock(&loop.getAfter(), {}, {i64, e.ft}, {e.loc, e.loc});
      Value p = parentOf(after->getArgument(0));
      Value w = after->getArgument(1);
      if (nc) {
        Value hasParent = ix.cmpI(arith::CmpIPredicate::sge, p, e.i64(0));
        Value safe = b.create<arith::SelectOp>(e.loc, hasParent, p, e.i64(0));
        Value divided = b.create<arith::DivFOp>(e.loc, w, atNode(nc, safe));
        w = b.create<arith::SelectOp>(e.loc, hasParent, divided, w);
      }
      b.create<scf::YieldOp>(e.loc, ValueRange{p, w});
    }
    Value reached = ix.cmpI(arith::CmpIPredicate::eq, loop.getResult(0), node);
    return {reached, loop.getResult(1)};
  }

  Value mean(Value sum, Value count) {
    Value some = b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OGT,
                                         count, e.fconst(0.0));
    Value safe = b.create<arith::SelectOp>(e.loc, some, count, e.fconst(1.0));
    return b.create<arith::SelectOp>(
        e.loc, some, b.create<arith::DivFOp>(e.loc, sum, safe), e.fconst(0.0));
  }

  Value eval(Value v) {
    auto it = memo.find(v);
    if (it != memo.end())
      return it->second;
    Value r = compute(v);
    memo[v] = r;
    return r;
  }

  Value compute(Value v) {
    Operation *op = v.getDefiningOp();
    if (op->getParentOp() != kernel.getOperation())
      return domainOf(v) == Domain::Scalar ? e.scalar(v)
                                           : e.loadBuffer(v, node);
    Value one = e.fconst(1.0), zero = e.fconst(0.0);
    Value childBegin, childEnd, preFirst, preEnd;
    if (isa<NumChildrenOp, ChildMeanOp>(op)) {
      childBegin = ix.startOf(t.childEnd, node);
      childEnd = ix.idx(t.childEnd, node);
    }
    if (isa<TreeMeanOp, PathReduceOp>(op)) {
      preFirst = ix.idx(t.pre, node);
      preEnd = ix.add(preFirst, ix.idx(t.size, node));
    }
    if (isa<NumChildrenOp>(op))
      return e.toFloat(ix.sub(childEnd, childBegin));
    if (auto p = dyn_cast<ParentOp>(op)) {
      Value par = parentOf(node);
      Value root = ix.cmpI(arith::CmpIPredicate::slt, par, e.i64(0));
      Value safe = b.create<arith::SelectOp>(e.loc, root, node, par);
      Value x = atNode(p.getOperand(), safe);
      return b.create<arith::SelectOp>(e.loc, root, eval(p.getFill()), x);
    }
    if (auto c = dyn_cast<ChildMeanOp>(op)) {
      auto acc = ix.range(
          childBegin, childEnd, {zero, zero}, [&](Value i, ValueRange a) {
            Value x = atNode(c.getOperand(), ix.idx(t.children, i));
            return SmallVector<Value>{
                b.create<arith::AddFOp>(e.loc, a[0], x),
                b.create<arith::AddFOp>(e.loc, a[1], one)};
          });
      return mean(acc[0], acc[1]);
    }
    if (auto tm = dyn_cast<TreeMeanOp>(op)) {
      // The leaves of the subtree, each weighted by the product of
      // 1 / num_children over the inner nodes on the way down to it.
      return ix.range(preFirst, preEnd, {zero}, [&](Value p, ValueRange a) {
        Value m = ix.idx(t.preNode, p);
        Value leaf =
            b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OEQ,
                                    atNode(tm.getNumChildren(), m), zero);
        auto [reached, w] = walkUp(m, tm.getNumChildren());
        Value take = b.create<arith::AndIOp>(e.loc, leaf, reached);
        Value x = b.create<arith::MulFOp>(e.loc, w, atNode(tm.getOperand(), m));
        return SmallVector<Value>{b.create<arith::SelectOp>(
            e.loc, take, b.create<arith::AddFOp>(e.loc, a[0], x), a[0])};
      })[0];
    }
    if (auto pr = dyn_cast<PathReduceOp>(op)) {
      PathReduceKind k = pr.getKind();
      Value init = k == PathReduceKind::SubtreeMax
                       ? e.fconst(-std::numeric_limits<double>::infinity())
                       : zero;
      // The sequences whose leaf is this node (leaf_mean), or any node of
      // its subtree (positions [preFirst, preEnd)); empty sequences have no
      // leaf and are in neither.
      Value lo = ix.startOf(t.seqEnd, preFirst);
      Value last = k == PathReduceKind::LeafMean ? preFirst
                                                 : ix.sub(preEnd, ix.e.i64(1));
      Value some = ix.cmpI(arith::CmpIPredicate::slt, preFirst, preEnd);
      Value safeLast = b.create<arith::SelectOp>(e.loc, some, last, preFirst);
      Value hi = b.create<arith::SelectOp>(e.loc, some,
                                           ix.idx(t.seqEnd, safeLast), lo);
      auto acc = ix.range(lo, hi, {init, zero}, [&](Value i, ValueRange a) {
        Value s = ix.idx(t.seqByPre, i);
        Value x = e.loadBuffer(pr.getOperand(), s);
        Value next = k == PathReduceKind::SubtreeMax
                         ? Value(b.create<arith::MaximumFOp>(e.loc, a[0], x))
                         : Value(b.create<arith::AddFOp>(e.loc, a[0], x));
        return SmallVector<Value>{next,
                                  b.create<arith::AddFOp>(e.loc, a[1], one)};
      });
      if (k == PathReduceKind::SubtreeSum)
        return acc[0];
      if (k == PathReduceKind::SubtreeMax) {
        Value some = b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::OGT,
                                             acc[1], zero);
        return b.create<arith::SelectOp>(e.loc, some, acc[0], zero);
      }
      return mean(acc[0], acc[1]);
    }
    SmallVector<Value> x;
    for (Value o : op->getOperands())
      x.push_back(eval(o));
    return e.elementwise(op, x);
  }

  Emitter &e;
  OpBuilder &b;
  IndexOps ix;
  const Abi::TreeScratch &t;
  KernelOp kernel;
  ArrayRef<std::pair<Value, unsigned>> stores;
  Value node;
  DenseMap<Value, Value> memo;
};

} // namespace

void emitNodeKernel(Emitter &e, KernelOp kernel, const Abi &abi,
                    ArrayRef<Store> stores, Value unit) {
  NodeKernelEmitter(e, kernel, abi, stores).emit(unit);
}

} // namespace cac::lowering
