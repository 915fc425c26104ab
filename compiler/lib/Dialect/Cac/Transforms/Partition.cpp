//===- Partition.cpp - Group estimator operations into kernels ------------===//
//
// Each phase runs over one grid: per sequence (token, seg and seq values),
// per group, per node, or once for the batch. An operation goes into the
// earliest phase of its grid that comes after the phases of its operands, or
// into a new one right after them. Inputs, parameters and constants stay
// outside the kernels.
//
//===----------------------------------------------------------------------===//

#include "cac/Dialect/Cac/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace cac::ir {
#define GEN_PASS_DEF_CACPARTITION
#include "cac/Dialect/Cac/Transforms/Passes.h.inc"
} // namespace cac::ir

using namespace mlir;
using namespace cac::ir;

namespace {

/// The grid a value's computation runs on: one unit per group, per tree
/// node, one for the whole batch, or one per sequence (token, seg and seq
/// values).
Domain gridOf(Domain d) {
  if (d == Domain::Group || d == Domain::Node || d == Domain::Batch)
    return d;
  return Domain::Seq;
}

/// Node operations that read their operand at other nodes: the operand must
/// be complete, so it comes from an earlier kernel.
bool readsOtherNodes(Operation *op) {
  return isa<ParentOp, ChildMeanOp, TreeMeanOp>(op);
}

/// Operations that read their operand at the other sequences of the group
/// (or, batch_top_k, at a token of any sequence): the operand must be
/// complete, so it comes from an earlier kernel (or is an input).
bool readsOtherSeqs(Operation *op) {
  return isa<GroupRankOp, GroupPosSumOp, GroupKeyOp, BatchTopKOp>(op);
}

/// Operations that stay outside kernels: inputs, and scalar computations
/// (parameters, literals and arithmetic on them), which every kernel can
/// recompute for free.
bool isTopLevel(Operation *op) {
  if (isa<InputOp>(op))
    return true;
  return op->getNumResults() == 1 &&
         cast<FieldType>(op->getResult(0).getType()).getDomain() ==
             Domain::Scalar;
}

Domain domainOf(Operation *op) {
  if (auto out = dyn_cast<OutputOp>(op))
    return cast<FieldType>(out.getValue().getType()).getDomain();
  return cast<FieldType>(op->getResult(0).getType()).getDomain();
}

struct PartitionPass
    : public cac::ir::impl::CacPartitionBase<PartitionPass> {
  void runOnOperation() override {
    Block &body = getOperation().getBodyBlock();
    if (!body.getOps<KernelOp>().empty())
      return; // Already partitioned.
    phase.clear();
    grids.clear();
    memberClones.clear();
    assignPhases(body);
    clonePosSumOperands(body);
    cloneCheap(body);
    buildKernels(body);
  }

  /// Each op's phase, and each phase's grid (of the estimator in hand).
  llvm::DenseMap<Operation *, int64_t> phase;
  SmallVector<Domain> grids;
  /// The maps computed at the group's members (clonePosSumOperands): their
  /// operands are read at each member, so cloneCheap leaves them stored.
  llvm::SmallPtrSet<Operation *, 8> memberClones;

  void assignPhases(Block &body) {
    // Each phase is one kernel with one grid. An op joins the first phase
    // of its grid at or after its operands' (strictly after for a node op
    // that reads its operand at other nodes); a new phase is opened when
    // there is none.
    for (Operation &op : body) {
      if (isTopLevel(&op))
        continue;
      int64_t lo = 0;
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp(); def && phase.count(def)) {
          bool after =
              (readsOtherNodes(&op) &&
               cast<FieldType>(v.getType()).getDomain() == Domain::Node) ||
              readsOtherSeqs(&op);
          lo = std::max(lo, phase[def] + (after ? 1 : 0));
        }
      Domain g = gridOf(domainOf(&op));
      int64_t want = -1;
      for (int64_t q = lo; q < int64_t(grids.size()); ++q)
        if (grids[q] == g) {
          want = q;
          break;
        }
      if (want < 0) {
        // A new phase right after its operands' (not after every phase so
        // far): the ops that read it can then join the phases after it. The
        // phases from there on move one later.
        int64_t at = 0;
        for (Value v : op.getOperands())
          if (Operation *def = v.getDefiningOp(); def && phase.count(def))
            at = std::max(at, phase[def] + 1);
        for (auto &[o, p] : phase)
          if (p >= at)
            ++p;
        grids.insert(grids.begin() + at, g);
        want = at;
      }
      phase[&op] = want;
    }
  }

  /// The token values an earlier kernel must store for `v` to be computed
  /// at another member of the group (group_pos_sum's operand): 0 for a
  /// broadcast of a sequence, group or scalar value, which a later kernel
  /// reads at the member; the sum over the operands for an elementwise map
  /// of a sequence kernel; 1 for any other token value (an input, or a value
  /// the earlier kernel stores); -1 where the member cannot compute it.
  int64_t memberLeaves(Value v) {
    auto t = dyn_cast<FieldType>(v.getType());
    if (!t)
      return -1;
    Operation *def = v.getDefiningOp();
    if (t.getDomain() != Domain::Token)
      return t.getDomain() == Domain::Node ? -1 : 0;
    if (!def || !phase.count(def))
      return 1;
    if (auto bc = dyn_cast<BroadcastOp>(def)) {
      Domain from = cast<FieldType>(bc.getOperand().getType()).getDomain();
      return from == Domain::Token  ? memberLeaves(bc.getOperand())
             : from == Domain::Node ? -1
                                    : 0;
    }
    if (!memberMap(def))
      return 1;
    int64_t n = 0;
    for (Value o : def->getOperands()) {
      int64_t k = memberLeaves(o);
      if (k < 0)
        return -1;
      n += k;
    }
    return n;
  }

  /// Whether the member computation clones `def` (a map or a broadcast).
  static bool memberMap(Operation *def) {
    return isa<BroadcastOp, BinaryOp, UnaryOp, CmpOp, SelectOp, CastOp>(def);
  }

  /// Clones into phase `into`, before `at`, the maps and broadcasts that
  /// memberLeaves walks through from `v`; returns the clone of `v` (or `v`,
  /// a leaf).
  Value cloneForMembers(Value v, Operation *at, int64_t into) {
    Operation *def = v.getDefiningOp();
    if (!def || !phase.count(def) || !memberMap(def))
      return v;
    OpBuilder cb(at);
    Operation *copy = cb.clone(*def);
    phase[copy] = into;
    memberClones.insert(copy);
    for (OpOperand &o : copy->getOpOperands())
      if (cast<FieldType>(o.get().getType()).getDomain() == Domain::Token)
        o.set(cloneForMembers(o.get(), copy, into));
    return copy->getResult(0);
  }

  /// Erases `op` where nothing reads it any more, then so its operands.
  void eraseUnread(Operation *op) {
    if (!op || !phase.count(op) || !memberMap(op) || !op->use_empty())
      return;
    memberClones.erase(op);
    SmallVector<Operation *> defs;
    for (Value o : op->getOperands())
      defs.push_back(o.getDefiningOp());
    phase.erase(op);
    op->erase();
    for (Operation *d : defs)
      eraseUnread(d);
  }

  void clonePosSumOperands(Block &body) {
    // A group_pos_sum reads its operand at the group's other members, from
    // a buffer an earlier kernel stored. Where that operand is a map of at
    // most one stored token value and of values each member has (OTB's
    // reward * W, and the constant 1 of group_pos_count), the
    // group_pos_sum's kernel computes it at each member instead: the
    // earlier kernel stores one buffer or none, and the members' sums read
    // that one.
    SmallVector<GroupPosSumOp> sums(body.getOps<GroupPosSumOp>());
    for (GroupPosSumOp s : sums) {
      Value x = s.getInput();
      Operation *def = x.getDefiningOp();
      int64_t n = memberLeaves(x);
      if (n < 0 || n > 1 || !def || !phase.count(def) || !memberMap(def))
        continue;
      s->setOperand(0, cloneForMembers(x, s, phase[s]));
      eraseUnread(def);
    }
  }

  void cloneCheap(Block &body) {
    // Cheap values made from top-level operands (broadcast parameters,
    // positions, lengths, and broadcasts of those; a sequence kernel's
    // elementwise maps of inputs and such values, and uniform's hash) are
    // recomputed in each kernel that reads them rather than stored in a
    // buffer between kernels: a later kernel reads the inputs again instead
    // of the earlier kernel writing the value and the later one reading it.
    SmallVector<Operation *> cheap;
    llvm::SmallPtrSet<Operation *, 16> isCheap;
    for (Operation &op : body) {
      // A broadcast may also read a seq, group, batch or node value of an
      // earlier kernel, which is stored anyway.
      bool cheapOperands = llvm::all_of(op.getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || !phase.count(def) || isCheap.contains(def) ||
               (isa<BroadcastOp>(op) && phase.count(&op) &&
                phase[def] < phase[&op] &&
                cast<FieldType>(v.getType()).getDomain() != Domain::Token);
      });
      bool map =
          isa<BinaryOp, UnaryOp, CmpOp, SelectOp, CastOp, UniformOp>(op) &&
          gridOf(domainOf(&op)) == Domain::Seq;
      if (phase.count(&op) && cheapOperands &&
          (map || isa<BroadcastOp, PositionOp, LengthOp>(op))) {
        cheap.push_back(&op);
        isCheap.insert(&op);
      }
    }
    // Users before their operands: the operands of a clone (a length under a
    // broadcast) are cloned next to it in turn. One clone per kernel, before
    // its first user there.
    for (Operation *op : llvm::reverse(cheap)) {
      llvm::MapVector<int64_t, SmallVector<OpOperand *>> usesIn;
      for (OpOperand &use : op->getUses()) {
        Operation *user = use.getOwner();
        int64_t up = phase.lookup(user);
        // An operation that reads other sequences reads the stored value.
        if (up == phase[op] || grids[up] != grids[phase[op]] ||
            readsOtherSeqs(user) || memberClones.contains(user))
          continue;
        usesIn[up].push_back(&use);
      }
      for (auto &[up, uses] : usesIn) {
        Operation *first = uses.front()->getOwner();
        for (OpOperand *use : uses)
          if (use->getOwner()->isBeforeInBlock(first))
            first = use->getOwner();
        OpBuilder cb(first);
        Operation *copy = cb.clone(*op);
        phase[copy] = up;
        for (OpOperand *use : uses)
          use->set(copy->getResult(0));
      }
      if (op->use_empty()) {
        phase.erase(op);
        op->erase();
      }
    }
  }

  void buildKernels(Block &body) {
    // Inputs, parameters and constants first, then the kernels in order.
    OpBuilder b(&getContext());
    SmallVector<Operation *> topLevel, rest;
    for (Operation &op : body)
      (isTopLevel(&op) ? topLevel : rest).push_back(&op);
    for (Operation *op : topLevel)
      op->moveBefore(&body, body.end());

    llvm::MapVector<int64_t, SmallVector<Operation *>> byPhase;
    for (int64_t p = 0; p < int64_t(grids.size()); ++p)
      byPhase[p];
    for (Operation *op : rest)
      byPhase[phase[op]].push_back(op);

    for (auto &[p, ops] : byPhase) {
      if (ops.empty())
        continue;
      // Values defined in this phase and used outside it are yielded.
      SmallVector<Value> escaping;
      llvm::SmallPtrSet<Operation *, 16> inPhase(ops.begin(), ops.end());
      for (Operation *op : ops)
        for (Value r : op->getResults())
          for (Operation *user : r.getUsers())
            if (!inPhase.contains(user)) {
              escaping.push_back(r);
              break;
            }
      b.setInsertionPointToEnd(&body);
      Location loc = ops.front()->getLoc();
      SmallVector<Type> types;
      for (Value v : escaping)
        types.push_back(v.getType());
      auto kernel = b.create<KernelOp>(loc, types, grids[p], p);
      Block *kb = new Block();
      kernel.getBody().push_back(kb);
      for (Operation *op : ops)
        op->moveBefore(kb, kb->end());
      b.setInsertionPointToEnd(kb);
      b.create<YieldOp>(loc, escaping);
      for (auto [v, r] : llvm::zip(escaping, kernel.getResults()))
        v.replaceUsesWithIf(r, [&](OpOperand &use) {
          return use.getOwner()->getParentOp() != kernel.getOperation() &&
                 !isa<YieldOp>(use.getOwner());
        });
    }
  }
};

} // namespace
