//===- NodeKernel.cpp - Node kernels: one unit per tree node --------------===//

#include "TreeKernels.h"

namespace cac::lowering {
namespace {

/// One unit per tree node. Node values from earlier kernels are read from
/// their buffers at any node; structure comes from `node_parent` and the
/// TreeBuilder kernel's arrays (Abi::TreeScratch): a node's children and the
/// sequences whose leaves lie in its subtree are ranges there. So
/// num_children is O(1), child_mean O(children) and the path reductions
/// O(sequences in the subtree).
///
/// tree_mean is its children's tree_mean, so it needs them first: a kernel
/// that computes one is a sweep, where the unit of each root visits its
/// tree's nodes in reverse preorder (children before their parents;
/// positions [pre[r], pre[r] + size[r])) and evaluates the whole kernel at
/// each, reading the children's tree_mean from its buffer. The trees of a
/// forest are swept in parallel, each in O(nodes + edges) and in the same
/// order whatever the number of trees, so every node's arithmetic is too.
///
/// Means are shifted by their first term, x0 + sum(x - x0) / n: a mean of
/// equal values is that value exactly, so a tree of equal rewards has A = 0,
/// not a rounding residue.
class NodeKernelEmitter {
public:
  NodeKernelEmitter(Emitter &e, KernelOp kernel, const Abi &abi,
                    ArrayRef<std::pair<Value, unsigned>> stores)
      : e(e), b(e.b), ix(e), abi(abi), t(*abi.tree), kernel(kernel),
        stores(stores) {}

  void emit(Value unit) {
    e.anchor = e.i64(0).getDefiningOp();
    bool sweep = false;
    kernel.walk([&](TreeMeanOp) { sweep = true; });
    if (!sweep) {
      node = unit;
      storeAll();
      return;
    }
    using P = arith::CmpIPredicate;
    // Nodes no root reaches (a cycle) are in no root's range: never visited.
    ix.when(ix.cmpI(P::slt, parentOf(unit), e.i64(0)), [&] {
      Value last = ix.sub(ix.add(ix.idx(t.pre, unit), ix.idx(t.size, unit)),
                          e.i64(1));
      ix.each(e.i64(0), ix.idx(t.size, unit), [&](Value i) {
        node = ix.idx(t.preNode, ix.sub(last, i));
        memo.clear();
        storeAll();
      });
    });
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

  void storeAll() {
    for (auto [v, buf] : stores)
      e.storeBuffer(buf, eval(v), node);
  }

  /// The mean of the terms of [lo, hi), `term(i)` each, as the first term
  /// plus the mean of the differences from it (exact when all are equal);
  /// 0 for an empty range.
  Value shiftedMean(Value lo, Value hi, llvm::function_ref<Value(Value)> term) {
    using P = arith::CmpIPredicate;
    Value zero = e.fconst(0.0);
    Value some = ix.cmpI(P::slt, lo, hi);
    auto first = b.create<scf::IfOp>(e.loc, TypeRange{e.ft}, some,
                                      /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(first.thenBlock());
      b.create<scf::YieldOp>(e.loc, term(lo));
      b.setInsertionPointToStart(first.elseBlock());
      b.create<scf::YieldOp>(e.loc, zero);
    }
    Value x0 = first.getResult(0);
    auto acc = ix.range(lo, hi, {zero}, [&](Value i, ValueRange a) {
      Value d = b.create<arith::SubFOp>(e.loc, term(i), x0);
      return SmallVector<Value>{b.create<arith::AddFOp>(e.loc, a[0], d)};
    });
    Value n = e.toFloat(ix.sub(hi, lo));
    Value safe = b.create<arith::SelectOp>(e.loc, some, n, e.fconst(1.0));
    return b.create<arith::AddFOp>(
        e.loc, x0, b.create<arith::DivFOp>(e.loc, acc[0], safe));
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
    Value childBegin, childEnd;
    if (isa<NumChildrenOp, ChildMeanOp, TreeMeanOp>(op)) {
      childBegin = ix.startOf(t.childEnd, node);
      childEnd = ix.idx(t.childEnd, node);
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
    if (auto c = dyn_cast<ChildMeanOp>(op))
      return shiftedMean(childBegin, childEnd, [&](Value i) {
        return atNode(c.getOperand(), ix.idx(t.children, i));
      });
    if (auto tm = dyn_cast<TreeMeanOp>(op))
      return treeMean(tm, childBegin, childEnd);
    if (auto pr = dyn_cast<PathReduceOp>(op))
      return pathReduce(pr);
    SmallVector<Value> x;
    for (Value o : op->getOperands())
      x.push_back(eval(o));
    return e.elementwise(op, x);
  }

  /// A leaf's operand, an inner node's mean of its children's tree_mean
  /// (stored by the sweep before it reaches this node), 0 on a node no root
  /// reaches (a cycle; the batch loaders reject them). Stored at once for
  /// the parent.
  Value treeMean(TreeMeanOp tm, Value childBegin, Value childEnd) {
    using P = arith::CmpIPredicate;
    auto found = abi.storage.find(tm.getResult());
    assert(found != abi.storage.end() && "planScratch stores every tree_mean");
    unsigned buf = found->second;
    Value leaf = ix.cmpI(P::sge, childBegin, childEnd);
    Value inner = shiftedMean(childBegin, childEnd, [&](Value i) {
      return e.loadBuffer(tm.getResult(), ix.idx(t.children, i));
    });
    Value v = b.create<arith::SelectOp>(e.loc, leaf,
                                        atNode(tm.getOperand(), node), inner);
    Value reached = ix.cmpI(P::sgt, ix.idx(t.size, node), e.i64(0));
    v = b.create<arith::SelectOp>(e.loc, reached, v, e.fconst(0.0));
    e.storeBuffer(buf, v, node);
    return v;
  }

  /// Over the sequences whose leaf is this node (leaf_mean), or any node of
  /// its subtree (preorder positions [pre, pre + size)); empty sequences
  /// have no leaf and are in neither.
  Value pathReduce(PathReduceOp pr) {
    using P = arith::CmpIPredicate;
    PathReduceKind k = pr.getKind();
    Value preFirst = ix.idx(t.pre, node);
    Value preEnd = ix.add(preFirst, ix.idx(t.size, node));
    Value lo = ix.startOf(t.seqEnd, preFirst);
    Value last = k == PathReduceKind::LeafMean ? preFirst
                                               : ix.sub(preEnd, e.i64(1));
    Value some = ix.cmpI(P::slt, preFirst, preEnd);
    Value safeLast = b.create<arith::SelectOp>(e.loc, some, last, preFirst);
    Value hi =
        b.create<arith::SelectOp>(e.loc, some, ix.idx(t.seqEnd, safeLast), lo);
    auto term = [&](Value i) {
      return e.loadBuffer(pr.getOperand(), ix.idx(t.seqByPre, i));
    };
    if (k == PathReduceKind::LeafMean || k == PathReduceKind::SubtreeMean)
      return shiftedMean(lo, hi, term);
    bool max = k == PathReduceKind::SubtreeMax;
    Value init = max ? e.fconst(-std::numeric_limits<double>::infinity())
                     : e.fconst(0.0);
    Value acc = ix.range(lo, hi, {init}, [&](Value i, ValueRange a) {
      Value x = term(i);
      return SmallVector<Value>{
          max ? Value(b.create<arith::MaximumFOp>(e.loc, a[0], x))
              : Value(b.create<arith::AddFOp>(e.loc, a[0], x))};
    })[0];
    if (!max)
      return acc;
    // No sequence: 0, not -inf.
    return b.create<arith::SelectOp>(e.loc, ix.cmpI(P::slt, lo, hi), acc,
                                     e.fconst(0.0));
  }

  Emitter &e;
  OpBuilder &b;
  IndexOps ix;
  const Abi &abi;
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
