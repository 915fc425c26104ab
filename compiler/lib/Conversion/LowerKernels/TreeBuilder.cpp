//===- TreeBuilder.cpp - The tree's arrays for the node kernels -----------===//
//
// The bundle's first kernel when it has node kernels builds Abi::TreeScratch
// from `node_parent` and `token_node` in O(K + B) work. It is a batch kernel:
// one block on the GPU, whose threads split every pass and meet at barriers
// between passes; one thread on the CPU, which runs the same passes in
// order. Only two steps are not a pass over nodes or sequences: the prefix
// sums (CSR ends, the roots' preorder offsets) are block scans, and each
// root's tree is walked depth-first by one thread (the trees of a forest in
// parallel), without a stack: a node's next sibling is the next entry of its
// parent's children, whose position the children pass records.
//
// Scatters by key (children by parent, sequences by their leaf) count and
// place with atomic adds, which order each key's entries by thread timing;
// a rank pass then puts every entry at its place in ascending id order, so
// the arrays, and every sum the node kernels take over them, are the same on
// every run and every target.
//
//===----------------------------------------------------------------------===//

#include "TreeKernels.h"

namespace cac::lowering {
namespace {

using P = arith::CmpIPredicate;

class TreeBuilder : IndexOps {
public:
  TreeBuilder(Emitter &e, const Abi::TreeScratch &t,
              const BlockThreads *threads)
      : IndexOps(e), t(t), threads(threads) {}

  void emit() {
    e.anchor = e.i64(0).getDefiningOp();
    buildChildren();
    buildPreorder();
    buildSequences();
  }

private:
  Value parentOf(Value n) { return e.loadI32AsI64(kNodeParent, n); }
  Value isRoot(Value n) { return cmpI(P::slt, parentOf(n), e.i64(0)); }

  /// for i in [lo, hi), split over the block's threads (i = lo + tid,
  /// lo + tid + size, ...), or all of it on one thread.
  void forAll(Value lo, Value hi, llvm::function_ref<void(Value)> body) {
    if (!threads) {
      each(lo, hi, body);
      return;
    }
    Value start = add(lo, threads->tid);
    auto f = b.create<scf::ForOp>(e.loc, start, hi, e.i64(threads->size));
    eraseImplicitYield(f);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(f.getBody());
    body(f.getInductionVar());
    b.create<scf::YieldOp>(e.loc);
  }

  /// Every thread's writes of the pass before are seen by the pass after.
  void sync() {
    if (threads)
      threads->barrier();
  }

  /// buf[i] += 1; returns the value before (one read-modify-write of all the
  /// block's threads).
  Value fetchInc(unsigned buf, Value i) {
    if (!threads) {
      Value old = idx(buf, i);
      setIdx(buf, i, add(old, e.i64(1)));
      return old;
    }
    Value old = b.create<LLVM::AtomicRMWOp>(
        e.loc, LLVM::AtomicBinOp::fadd, e.ptrAt(e.args[buf], i, e.ft),
        e.fconst(1.0), LLVM::AtomicOrdering::monotonic);
    return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(), old);
  }

  Value loadShared(Value i) {
    return b.create<LLVM::LoadOp>(e.loc, e.ft,
                                  e.ptrAt(threads->shared, i, e.ft));
  }
  void storeShared(Value v, Value i) {
    b.create<LLVM::StoreOp>(e.loc, v, e.ptrAt(threads->shared, i, e.ft));
  }

  /// The inclusive prefix sum of buf[0, n), in place. A block gives each
  /// thread a contiguous chunk: the chunks' totals are scanned in shared
  /// memory (log2(size) rounds), then each thread rewrites its chunk from
  /// its offset. The sums are of counts, exact in either float type.
  void scan(unsigned buf, Value n) {
    if (!threads) {
      range(e.i64(0), n, {e.i64(0)}, [&](Value k, ValueRange acc) {
        Value a = add(acc[0], idx(buf, k));
        setIdx(buf, k, a);
        return SmallVector<Value>{a};
      });
      return;
    }
    Value size = e.i64(threads->size), tid = threads->tid;
    Value chunk =
        b.create<arith::DivSIOp>(e.loc, add(n, e.i64(threads->size - 1)), size);
    auto clamp = [&](Value v) {
      return b.create<arith::MinSIOp>(e.loc, v, n).getResult();
    };
    Value lo = clamp(b.create<arith::MulIOp>(e.loc, tid, chunk));
    Value hi = clamp(add(lo, chunk));
    Value total = range(lo, hi, {e.i64(0)}, [&](Value k, ValueRange acc) {
      return SmallVector<Value>{add(acc[0], idx(buf, k))};
    })[0];
    storeShared(e.toFloat(total), tid);
    sync();
    for (int64_t d = 1; d < threads->size; d *= 2) {
      Value has = cmpI(P::sge, tid, e.i64(d));
      Value other = ifElse(
          has, [&] { return toIndex(loadShared(sub(tid, e.i64(d)))); },
          [&] { return e.i64(0); });
      Value v = add(toIndex(loadShared(tid)), other);
      sync();
      storeShared(e.toFloat(v), tid);
      sync();
    }
    Value offset = ifElse(
        cmpI(P::sgt, tid, e.i64(0)),
        [&] { return toIndex(loadShared(sub(tid, e.i64(1)))); },
        [&] { return e.i64(0); });
    range(lo, hi, {offset}, [&](Value k, ValueRange acc) {
      Value a = add(acc[0], idx(buf, k));
      setIdx(buf, k, a);
      return SmallVector<Value>{a};
    });
    sync();
  }
  Value toIndex(Value f) {
    return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(), f);
  }

  /// The place of `id` among the entries [lo, hi) of `buf` in ascending
  /// order: lo plus the number of smaller ids there.
  Value rankIn(unsigned buf, Value lo, Value hi, Value id) {
    return range(lo, hi, {lo}, [&](Value j, ValueRange acc) {
      Value less = cmpI(P::slt, idx(buf, j), id);
      Value inc = b.create<arith::ExtUIOp>(e.loc, b.getI64Type(), less);
      return SmallVector<Value>{add(acc[0], inc)};
    })[0];
  }

  /// childEnd and children (CSR, children in id order); `preNode` holds
  /// each non-root's position in `children` for the walks. `order` is a
  /// block's scatter target, `size` the cursors.
  void buildChildren() {
    Value K = e.args[kNumNodes], zero = e.i64(0);
    forAll(zero, K, [&](Value k) {
      setIdx(t.childEnd, k, zero);
      setIdx(t.seqEnd, k, zero);
    });
    sync();
    forAll(zero, K, [&](Value m) {
      Value p = parentOf(m);
      when(cmpI(P::sge, p, zero), [&] { fetchInc(t.childEnd, p); });
    });
    sync();
    scan(t.childEnd, K);
    forAll(zero, K,
           [&](Value k) { setIdx(t.size, k, startOf(t.childEnd, k)); });
    sync();
    // One thread places the children in id order at once; a block's
    // scatter is put in order by a rank pass.
    unsigned scatter = threads ? t.order : t.children;
    forAll(zero, K, [&](Value m) {
      Value p = parentOf(m);
      when(cmpI(P::sge, p, zero), [&] {
        Value pos = fetchInc(t.size, p);
        setIdx(scatter, pos, m);
        if (!threads)
          setIdx(t.preNode, m, pos);
      });
    });
    sync();
    forAll(zero, K, [&](Value m) {
      Value p = parentOf(m);
      if (threads)
        when(cmpI(P::sge, p, zero), [&] {
          Value pos =
              rankIn(t.order, startOf(t.childEnd, p), idx(t.childEnd, p), m);
          setIdx(t.children, pos, m);
          setIdx(t.preNode, m, pos);
        });
      // Nodes no root reaches (a cycle; the batch loaders reject them)
      // keep an empty subtree at position 0.
      setIdx(t.size, m, zero);
      setIdx(t.pre, m, zero);
    });
    sync();
  }

  /// An scf.if yielding `n` i64 values; only the taken branch runs.
  SmallVector<Value> ifElseN(Value cond, unsigned n,
                             llvm::function_ref<SmallVector<Value>()> thenFn,
                             llvm::function_ref<SmallVector<Value>()> elseFn) {
    SmallVector<Type> types(n, b.getI64Type());
    auto ifOp = b.create<scf::IfOp>(e.loc, types, cond, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    b.create<scf::YieldOp>(e.loc, thenFn());
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    b.create<scf::YieldOp>(e.loc, elseFn());
    return SmallVector<Value>(ifOp.getResults());
  }

  /// Walks root r's tree depth-first, children in id order: each node gets
  /// its preorder position counted from r (`pre`), its subtree size when
  /// the walk leaves it (`size`) and its root (`order`). The state is the
  /// node, the positions handed out and the step: 0 enter the node, 1 leave
  /// it, 2 done. Each node is entered and left once: O(nodes of the tree).
  void walk(Value r) {
    Value zero = e.i64(0), one = e.i64(1);
    SmallVector<Type> types(3, b.getI64Type());
    auto loop = b.create<scf::WhileOp>(e.loc, types, ValueRange{r, zero, zero});
    {
      OpBuilder::InsertionGuard g(b);
      Block *before =
          b.createBlock(&loop.getBefore(), {}, types, {e.loc, e.loc, e.loc});
      Value running = cmpI(P::ne, before->getArgument(2), e.i64(2));
      b.create<scf::ConditionOp>(e.loc, running, before->getArguments());
      Block *after =
          b.createBlock(&loop.getAfter(), {}, types, {e.loc, e.loc, e.loc});
      Value x = after->getArgument(0), c = after->getArgument(1);
      Value enter = cmpI(P::eq, after->getArgument(2), zero);
      SmallVector<Value> next = ifElseN(
          enter, 3,
          [&]() -> SmallVector<Value> {
            setIdx(t.pre, x, c);
            setIdx(t.order, x, r);
            Value first = startOf(t.childEnd, x);
            Value has = cmpI(P::slt, first, idx(t.childEnd, x));
            Value child = ifElse(
                has, [&] { return idx(t.children, first); }, [&] { return x; });
            Value step = b.create<arith::SelectOp>(e.loc, has, zero, one);
            return {child, add(c, one), step};
          },
          [&]() -> SmallVector<Value> {
            setIdx(t.size, x, sub(c, idx(t.pre, x)));
            return ifElseN(
                cmpI(P::eq, x, r), 3,
                [&]() -> SmallVector<Value> {
                  return {x, c, e.i64(2)};
                },
                [&]() -> SmallVector<Value> {
                  Value p = parentOf(x);
                  Value sib = add(idx(t.preNode, x), one);
                  Value more = cmpI(P::slt, sib, idx(t.childEnd, p));
                  Value y = ifElse(
                      more, [&] { return idx(t.children, sib); },
                      [&] { return p; });
                  Value step =
                      b.create<arith::SelectOp>(e.loc, more, zero, one);
                  return {y, c, step};
                });
          });
      b.create<scf::YieldOp>(e.loc, next);
    }
  }

  /// size and pre (roots one after the other in id order) and preNode.
  void buildPreorder() {
    Value K = e.args[kNumNodes], zero = e.i64(0);
    forAll(zero, K, [&](Value k) { when(isRoot(k), [&] { walk(k); }); });
    sync();
    // The roots' tree sizes, scanned: root r's trees start at
    // preNode[r] - size[r].
    forAll(zero, K, [&](Value k) {
      Value root = isRoot(k);
      Value v = b.create<arith::SelectOp>(e.loc, root, idx(t.size, k), zero);
      setIdx(t.preNode, k, v);
    });
    sync();
    scan(t.preNode, K);
    forAll(zero, K, [&](Value k) {
      when(cmpI(P::sgt, idx(t.size, k), zero), [&] {
        Value r = idx(t.order, k);
        Value offset = sub(idx(t.preNode, r), idx(t.size, r));
        setIdx(t.pre, k, add(idx(t.pre, k), offset));
      });
    });
    sync();
    forAll(zero, K, [&](Value p) { setIdx(t.preNode, p, e.i64(-1)); });
    sync();
    forAll(zero, K, [&](Value k) {
      when(cmpI(P::sgt, idx(t.size, k), zero),
           [&] { setIdx(t.preNode, idx(t.pre, k), k); });
    });
  }

  /// The leaf of sequence s (its last token's node), and whether it has one.
  std::pair<Value, Value> leafOf(Value s) {
    Value first = e.loadI32AsI64(kSeqOffsets, s);
    Value last = sub(e.loadI32AsI64(kSeqOffsets, add(s, e.i64(1))), e.i64(1));
    Value nonEmpty = cmpI(P::sge, last, first);
    Value safe = b.create<arith::SelectOp>(e.loc, nonEmpty, last, first);
    // An empty sequence at the end of the batch has first == num_tokens:
    // never load there.
    Value leaf = ifElse(
        nonEmpty, [&] { return e.loadI32AsI64(kTokenNode, safe); },
        [&] { return e.i64(0); });
    return {leaf, nonEmpty};
  }

  /// seqEnd and seqByPre: the non-empty sequences by their leaf's preorder
  /// position, in id order within one. `seqScatter` is a block's scatter
  /// target, `order` the cursors.
  void buildSequences() {
    Value K = e.args[kNumNodes], B = e.args[kNumSeqs], zero = e.i64(0);
    auto withLeaf = [&](Value s, llvm::function_ref<void(Value)> body) {
      std::pair<Value, Value> leafHas = leafOf(s);
      when(leafHas.second, [&] { body(idx(t.pre, leafHas.first)); });
    };
    forAll(zero, B, [&](Value s) {
      withLeaf(s, [&](Value q) { fetchInc(t.seqEnd, q); });
    });
    sync();
    scan(t.seqEnd, K);
    forAll(zero, K, [&](Value q) { setIdx(t.order, q, startOf(t.seqEnd, q)); });
    sync();
    unsigned scatter = threads ? t.seqScatter : t.seqByPre;
    forAll(zero, B, [&](Value s) {
      withLeaf(s, [&](Value q) { setIdx(scatter, fetchInc(t.order, q), s); });
    });
    if (!threads)
      return;
    sync();
    forAll(zero, B, [&](Value s) {
      withLeaf(s, [&](Value q) {
        Value pos =
            rankIn(t.seqScatter, startOf(t.seqEnd, q), idx(t.seqEnd, q), s);
        setIdx(t.seqByPre, pos, s);
      });
    });
  }

  const Abi::TreeScratch &t;
  const BlockThreads *threads;
};

} // namespace

void emitTreeBuilder(Emitter &e, const Abi::TreeScratch &t,
                     const BlockThreads *threads) {
  TreeBuilder(e, t, threads).emit();
}

} // namespace cac::lowering
