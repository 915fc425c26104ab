//===- TreeBuilder.cpp - The tree's arrays for the node kernels -----------===//

#include "TreeKernels.h"

namespace cac::lowering {
namespace {

/// The bundle's first kernel when it has node kernels: builds Abi::TreeScratch
/// from `node_parent` and `token_node` in O(K + B). Unit 0 does all the work
/// (one sequential pass per array; the other units return at once), so on a
/// GPU it is one thread: cheap next to the node kernels it replaces loops in.
class TreeBuilder : IndexOps {
public:
  TreeBuilder(Emitter &e, const Abi::TreeScratch &t) : IndexOps(e), t(t) {}

  void emit(Value unit) {
    e.anchor = e.i64(0).getDefiningOp();
    when(cmpI(arith::CmpIPredicate::eq, unit, e.i64(0)), [&] { build(); });
  }

private:
  Value parentOf(Value n) { return e.loadI32AsI64(kNodeParent, n); }

  /// An inclusive prefix sum of the counts in `buf`, in place.
  void prefix(unsigned buf, Value n) {
    range(e.i64(0), n, {e.i64(0)}, [&](Value k, ValueRange acc) {
      Value a = add(acc[0], idx(buf, k));
      setIdx(buf, k, a);
      return SmallVector<Value>{a};
    });
  }

  /// The leaf of sequence s (its last token's node), and whether it has one.
  std::pair<Value, Value> leafOf(Value s) {
    Value first = e.loadI32AsI64(kSeqOffsets, s);
    Value last = sub(e.loadI32AsI64(kSeqOffsets, add(s, e.i64(1))), e.i64(1));
    Value nonEmpty = cmpI(arith::CmpIPredicate::sge, last, first);
    Value safe = b.create<arith::SelectOp>(e.loc, nonEmpty, last, first);
    // An empty sequence at the end of the batch has first == num_tokens:
    // never load there.
    Value leaf = ifElse(
        nonEmpty, [&] { return e.loadI32AsI64(kTokenNode, safe); },
        [&] { return e.i64(0); });
    return {leaf, nonEmpty};
  }

  void build() {
    Value K = e.args[kNumNodes], B = e.args[kNumSeqs];
    Value zero = e.i64(0), one = e.i64(1);
    using P = arith::CmpIPredicate;
    // Children: counts, ends, then a stable fill with `size` as the cursor.
    each(zero, K, [&](Value k) { setIdx(t.childEnd, k, zero); });
    each(zero, K, [&](Value m) {
      Value p = parentOf(m);
      when(cmpI(P::sge, p, zero),
           [&] { setIdx(t.childEnd, p, add(idx(t.childEnd, p), one)); });
    });
    prefix(t.childEnd, K);
    each(zero, K, [&](Value k) { setIdx(t.size, k, startOf(t.childEnd, k)); });
    each(zero, K, [&](Value m) {
      Value p = parentOf(m);
      when(cmpI(P::sge, p, zero), [&] {
        Value pos = idx(t.size, p);
        setIdx(t.children, pos, m);
        setIdx(t.size, p, add(pos, one));
      });
    });
    // Breadth-first order: the roots, then each node's children.
    Value roots = range(zero, K, {zero}, [&](Value m, ValueRange n) {
      Value root = cmpI(P::slt, parentOf(m), zero);
      when(root, [&] { setIdx(t.order, n[0], m); });
      return SmallVector<Value>{
          b.create<arith::SelectOp>(e.loc, root, add(n[0], one), n[0])};
    })[0];
    Value reached = range(zero, K, {roots}, [&](Value h, ValueRange n) {
      Value next = ifElse(
          cmpI(P::slt, h, n[0]),
          [&] {
            Value k = idx(t.order, h);
            return range(startOf(t.childEnd, k), idx(t.childEnd, k), {n[0]},
                         [&](Value c, ValueRange nn) {
                           setIdx(t.order, nn[0], idx(t.children, c));
                           return SmallVector<Value>{add(nn[0], one)};
                         })[0];
          },
          [&] { return n[0]; });
      return SmallVector<Value>{next};
    })[0];
    // Nodes not reached from a root (a cycle; the batch loaders reject
    // them) keep an empty subtree and no preorder position (preNode -1
    // past the reached ones).
    each(zero, K, [&](Value k) {
      setIdx(t.size, k, zero);
      setIdx(t.pre, k, zero);
      setIdx(t.preNode, k, e.i64(-1));
    });
    // Subtree sizes, children before parents (reverse breadth-first).
    each(zero, reached, [&](Value i) {
      Value k = idx(t.order, sub(sub(reached, one), i));
      Value sz = range(startOf(t.childEnd, k), idx(t.childEnd, k), {one},
                       [&](Value c, ValueRange acc) {
                         return SmallVector<Value>{
                             add(acc[0], idx(t.size, idx(t.children, c)))};
                       })[0];
      setIdx(t.size, k, sz);
    });
    // Preorder positions: the roots one after the other, then each node's
    // children after it, each child after its older siblings' subtrees.
    range(zero, roots, {zero}, [&](Value h, ValueRange acc) {
      Value k = idx(t.order, h);
      setIdx(t.pre, k, acc[0]);
      return SmallVector<Value>{add(acc[0], idx(t.size, k))};
    });
    each(zero, reached, [&](Value h) {
      Value k = idx(t.order, h);
      range(startOf(t.childEnd, k), idx(t.childEnd, k),
            {add(idx(t.pre, k), one)}, [&](Value c, ValueRange acc) {
              Value m = idx(t.children, c);
              setIdx(t.pre, m, acc[0]);
              return SmallVector<Value>{add(acc[0], idx(t.size, m))};
            });
    });
    each(zero, reached, [&](Value h) {
      Value k = idx(t.order, h);
      setIdx(t.preNode, idx(t.pre, k), k);
    });
    // Sequences by their leaf's preorder position (`order` is the cursor).
    each(zero, K, [&](Value q) { setIdx(t.seqEnd, q, zero); });
    each(zero, B, [&](Value s) {
      std::pair<Value, Value> leafHas = leafOf(s);
      Value leaf = leafHas.first;
      when(leafHas.second, [&] {
        Value q = idx(t.pre, leaf);
        setIdx(t.seqEnd, q, add(idx(t.seqEnd, q), one));
      });
    });
    prefix(t.seqEnd, K);
    each(zero, K, [&](Value q) { setIdx(t.order, q, startOf(t.seqEnd, q)); });
    each(zero, B, [&](Value s) {
      std::pair<Value, Value> leafHas = leafOf(s);
      Value leaf = leafHas.first;
      when(leafHas.second, [&] {
        Value q = idx(t.pre, leaf);
        Value pos = idx(t.order, q);
        setIdx(t.seqByPre, pos, s);
        setIdx(t.order, q, add(pos, one));
      });
    });
  }

  const Abi::TreeScratch &t;
};

} // namespace

void emitTreeBuilder(Emitter &e, const Abi::TreeScratch &t, Value unit) {
  TreeBuilder(e, t).emit(unit);
}

} // namespace cac::lowering
