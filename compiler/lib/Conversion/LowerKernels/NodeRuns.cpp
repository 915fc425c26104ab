//===- NodeRuns.cpp - A serial loop reading node values, in node runs -----===//
//
// A token reads a node value at its node: a load of token_node[t], then a
// load of the value there. That dependent load per token is a gather, which
// keeps LLVM from vectorizing the loop, and it bounded TreeAdv's and
// SPO-tree's last kernel (a node value broadcast to the tokens) on the CPU.
// But a sequence's tokens walk a root-to-leaf path, so a token's node
// changes only where the path enters the next node: where the target asks
// for it (KernelTarget::nodeRunChunk), a loop of token stores that reads
// node values takes its tokens in chunks, and a chunk whose tokens all have
// one node loads each node value once, before its tokens; their loop then
// stores broadcasts and vectorizes. Any other chunk, and the tokens after
// the last whole chunk, load per token. Which branch a chunk takes changes
// where a value is loaded from, never the value, so the results are the
// same as per token.
//
//===----------------------------------------------------------------------===//

#include "SeqKernel.h"

namespace cac::lowering {

/// Whether the token value `v` reads a node value (at any token).
static bool readsNode(KernelOp kernel, Value v, DenseSet<Value> &seen) {
  if (!definedIn(kernel, v) || !seen.insert(v).second)
    return false;
  Operation *op = v.getDefiningOp();
  if (auto bc = dyn_cast<BroadcastOp>(op);
      bc && domainOf(bc.getOperand()) == Domain::Node)
    return true;
  return llvm::any_of(op->getOperands(),
                      [&](Value o) { return readsNode(kernel, o, seen); });
}

/// A loop of token stores only (no scans, reductions or ranks, which carry
/// or read across the chunks), one thread walking it, that reads node
/// values.
bool SeqKernelEmitter::takesNodeRuns(const Loop &l) {
  if (threads || target.nodeRunChunk() <= 0)
    return false;
  bool node = false;
  DenseSet<Value> seen;
  for (const Item &it : l.items) {
    if (it.kind != Item::Store)
      return false;
    node = node || readsNode(kernel, it.value, seen);
  }
  return node;
}

/// The loop's positions [0, len) in chunks of nodeRunChunk() tokens, each
/// with the node-run check, then the tokens left over one at a time.
void SeqKernelEmitter::emitNodeRuns(Loop &l) {
  const int64_t w = target.nodeRunChunk();
  Value whole = b.create<arith::SubIOp>(
      e.loc, len, b.create<arith::RemSIOp>(e.loc, len, e.i64(w)));
  auto chunks = b.create<scf::ForOp>(e.loc, e.i64(0), whole, e.i64(w));
  eraseImplicitYield(chunks);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value c = chunks.getInductionVar();
    // The chunk's tokens, lowest first, in either direction.
    Value first =
        l.reverse
            ? Value(b.create<arith::SubIOp>(
                  e.loc, end, b.create<arith::AddIOp>(e.loc, c, e.i64(w))))
            : Value(b.create<arith::AddIOp>(e.loc, start, c));
    // All nodes equal the first: the OR of their XORs with it is 0 (a
    // reduction that LLVM's SLP vectorizer turns into vector loads).
    Type i32 = b.getI32Type();
    SmallVector<Value> diffs;
    Value node0 = e.load(e.args[kTokenNode], first, i32);
    for (int64_t j = 0; j < w; ++j) {
      Value at = j ? b.create<arith::AddIOp>(e.loc, first, e.i64(j)) : first;
      Value n = j ? e.load(e.args[kTokenNode], at, i32) : node0;
      diffs.push_back(b.create<arith::XOrIOp>(e.loc, n, node0));
    }
    while (diffs.size() > 1) {
      SmallVector<Value> half;
      for (size_t k = 0; k + 1 < diffs.size(); k += 2)
        half.push_back(b.create<arith::OrIOp>(e.loc, diffs[k], diffs[k + 1]));
      if (diffs.size() % 2)
        half.push_back(diffs.back());
      diffs = std::move(half);
    }
    Value uniform = b.create<arith::CmpIOp>(
        e.loc, arith::CmpIPredicate::eq, diffs[0],
        b.create<arith::ConstantOp>(e.loc, b.getI32IntegerAttr(0)));
    Value next = b.create<arith::AddIOp>(e.loc, c, e.i64(w));
    auto ifOp = b.create<scf::IfOp>(e.loc, uniform, /*withElseRegion=*/true);
    b.create<scf::YieldOp>(e.loc);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value node = b.create<arith::ExtSIOp>(e.loc, b.getI64Type(), node0);
    runValues.clear();
    kernel.walk([&](BroadcastOp bc) {
      Value v = bc.getOperand();
      if (domainOf(v) == Domain::Node && !runValues.count(v))
        runValues[v] = e.loadBuffer(v, node);
    });
    emitRunTokens(l, c, next, /*sameNode=*/true);
    runValues.clear();
    b.setInsertionPointToStart(ifOp.elseBlock());
    emitRunTokens(l, c, next, /*sameNode=*/false);
  }
  emitRunTokens(l, whole, len, /*sameNode=*/false);
}

/// The loop's stores at positions [lo, hi), one token an iteration; with
/// `sameNode` every node value read at the iteration's token is the one
/// loaded before the loop (runValues).
void SeqKernelEmitter::emitRunTokens(Loop &l, Value lo, Value hi,
                                     bool sameNode) {
  auto forOp = b.create<scf::ForOp>(e.loc, lo, hi, e.i64(1));
  eraseImplicitYield(forOp);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(forOp.getBody());
  Value i = forOp.getInductionVar();
  Value t = l.reverse
                ? Value(b.create<arith::SubIOp>(
                      e.loc, b.create<arith::SubIOp>(e.loc, end, e.i64(1)), i))
                : Value(b.create<arith::AddIOp>(e.loc, start, i));
  forgetTokens();
  back.clear();
  runToken = sameNode ? t : Value();
  for (Item &it : l.items)
    e.storeBuffer(it.buffer, evalTok(it.value, t), t);
  runToken = Value();
  b.create<scf::YieldOp>(e.loc);
}

} // namespace cac::lowering
