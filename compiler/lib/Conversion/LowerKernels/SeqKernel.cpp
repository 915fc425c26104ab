//===- SeqKernel.cpp - Seq kernels: the unit, seq values, reductions ------===//

#include "SeqKernel.h"
#include "GroupKernel.h"

namespace cac::lowering {

void SeqKernelEmitter::emit(Value unit) {
  if (split)
    unit = splitUnit(unit);
  this->unit = unit;
  e.anchor = e.i64(0).getDefiningOp();
  start = e.loadI32AsI64(kSeqOffsets, unit);
  Value next = b.create<arith::AddIOp>(e.loc, unit, e.i64(1));
  end = e.loadI32AsI64(kSeqOffsets, next);
  len = b.create<arith::SubIOp>(e.loc, end, start);
  if (abi.needsGroups)
    group = e.loadI32AsI64(kSeqGroup, unit);
  emitFusedGroups();
  SmallVector<Value> conds =
      versionConditions(kernel, abi.storage, tokenStores);
  DenseMap<Value, Value> outer = outerMemo;
  emitVersions(conds, outer);
}

/// One version of the body per combination of the uniform conditions
/// `conds`, chosen by scf.if (once per sequence, not per token).
void SeqKernelEmitter::emitVersions(ArrayRef<Value> conds,
                                    const DenseMap<Value, Value> &outer) {
  if (conds.empty()) {
    // Values computed in another version's region do not dominate this one.
    outerMemo = outer;
    batchCuts.clear();
    forgetTokens();
    emitBody();
    return;
  }
  auto ifOp = b.create<scf::IfOp>(e.loc, e.scalar(conds[0]),
                                  /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  for (bool taken : {true, false}) {
    b.setInsertionPointToStart(taken ? ifOp.thenBlock() : ifOp.elseBlock());
    version[conds[0]] = taken;
    emitVersions(conds.drop_front(), outer);
  }
  version.erase(conds[0]);
}

/// The loops of the schedule for the current version, then the seq values.
void SeqKernelEmitter::emitBody() {
  loops = scheduleLoops(kernel, abi.storage, tokenStores, version);
  storedEarlier.clear();
  scanStores.clear();
  loadedScans.clear();
  if (!threads) {
    for (size_t i = 0; i < loops.size(); ++i) {
      emitLoop(i);
      noteStores(loops[i]);
    }
    for (auto [v, buf] : seqStores)
      e.storeBuffer(buf, evalOuter(v), unit);
    if (target.integerCounts())
      eraseDeadScanStores();
    return;
  }
  assert((!split || loops.size() <= 1) && "a split kernel is one loop");
  for (size_t i = 0; i < loops.size(); ++i) {
    if (i)
      threads->barrier();
    if (carriesPass)
      emitBlockCarries(loops[i]);
    else
      emitBlockLoop(loops[i]);
    noteStores(loops[i]);
  }
  if (carriesPass)
    return;
  // Every thread has the sequence's values; thread 0 stores them.
  SmallVector<std::pair<Value, unsigned>> values;
  for (auto [v, buf] : seqStores)
    values.push_back({evalOuter(v), buf});
  if (!values.empty())
    IndexOps(e).when(seqStorer(), [&] {
      for (auto [v, buf] : values)
        e.storeBuffer(buf, v, unit);
    });
}

/// The values of the fused group kernels this kernel reads, computed for
/// this sequence's group before anything else (by every thread of a block,
/// each reading the same members).
void SeqKernelEmitter::emitFusedGroups() {
  for (KernelOp g : fusedGroups) {
    bool read = llvm::any_of(g.getResults(), [&](Value r) {
      return llvm::any_of(r.getUsers(), [&](Operation *u) {
        return u->getParentOfType<KernelOp>() == kernel;
      });
    });
    if (!read)
      continue;
    GroupKernelEmitter ge(e, g, {});
    if (threads)
      ge.inBlock(threads->tid, threads->size,
                 [&](ReduceKind k, Value acc) { return blockReduce(k, acc); });
    ge.compute(group);
    auto yield = cast<YieldOp>(g.getBody().front().getTerminator());
    for (auto [inner, outer] : llvm::zip(yield.getValues(), g.getResults()))
      outerMemo[outer] = ge.value(inner);
  }
}

/// Seq-level values needed by a loop are computed before it.
void SeqKernelEmitter::prepareOuter(Value v, DenseSet<Value> &seen) {
  if (!seen.insert(v).second)
    return;
  if (!inKernel(v))
    return;
  Operation *op = v.getDefiningOp();
  if (auto bc = dyn_cast<BroadcastOp>(op);
      bc && domainOf(bc.getResult()) == Domain::Token &&
      domainOf(bc.getOperand()) != Domain::Token) {
    // A node value is read per token, at the token's node.
    if (domainOf(bc.getOperand()) != Domain::Node)
      evalOuter(bc.getOperand());
    return;
  }
  if (isa<ReduceOp>(op))
    return;
  if (auto k = dyn_cast<BatchTopKOp>(op)) {
    batchCut(k);
    return;
  }
  if (auto sel = dyn_cast<SelectOp>(op))
    if (Value arm = fixedArm(sel, version))
      return prepareOuter(arm, seen);
  for (Value o : op->getOperands())
    prepareOuter(o, seen);
}

/// The seq-level values the items of a loop read, computed before it.
void SeqKernelEmitter::prepareLoopOuter(Loop &l) {
  DenseSet<Value> seen;
  for (Item &it : l.items) {
    if (it.kind == Item::Store)
      prepareOuter(it.value, seen);
    else
      for (Value o : it.op->getOperands())
        prepareOuter(o, seen);
  }
}

Value SeqKernelEmitter::reduceInit(ReduceOp red) {
  switch (red.getKind()) {
  case ReduceKind::Min:
    return e.fconst(std::numeric_limits<double>::infinity());
  case ReduceKind::Max:
    return e.fconst(-std::numeric_limits<double>::infinity());
  default:
    return e.fconst(0.0);
  }
}

/// One step of a token -> seq reduction at token `t` (an absolute token
/// index, so that first/last hold in forward and reverse loops alike).
Value SeqKernelEmitter::reduceStep(ReduceOp red, Value acc, Value x, Value t) {
  switch (red.getKind()) {
  case ReduceKind::Sum:
  case ReduceKind::Mean:
    if (target.reassociableSums())
      return b.create<arith::AddFOp>(
          e.loc, acc, x,
          arith::FastMathFlagsAttr::get(b.getContext(),
                                        arith::FastMathFlags::reassoc));
    return b.create<arith::AddFOp>(e.loc, acc, x);
  case ReduceKind::Min:
    return b.create<arith::MinimumFOp>(e.loc, acc, x);
  case ReduceKind::Max:
    return b.create<arith::MaximumFOp>(e.loc, acc, x);
  case ReduceKind::First: {
    Value first =
        b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, t, start);
    return b.create<arith::SelectOp>(e.loc, first, x, acc);
  }
  case ReduceKind::Last: {
    Value last =
        b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, t,
                                b.create<arith::SubIOp>(e.loc, end, e.i64(1)));
    return b.create<arith::SelectOp>(e.loc, last, x, acc);
  }
  case ReduceKind::Count:
    return b.create<arith::AddFOp>(e.loc, acc, e.fconst(1.0));
  default:
    llvm_unreachable("not a token -> seq reduction");
  }
}

Value SeqKernelEmitter::reduceFinish(ReduceOp red, Value acc) {
  if (red.getKind() != ReduceKind::Mean)
    return acc;
  Value n = e.toFloat(b.create<arith::MaxSIOp>(e.loc, len, e.i64(1)));
  return b.create<arith::DivFOp>(e.loc, acc, n);
}

} // namespace cac::lowering
