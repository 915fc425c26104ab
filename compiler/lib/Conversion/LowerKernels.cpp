//===- LowerKernels.cpp - Partitioned estimators to CPU/GPU functions -----===//
//
// Each `cac.kernel` becomes one function over grid units (docs/bundle.md).
//
// A `seq` kernel handles one sequence per unit. Its token values are not
// stored unless they must be (outputs, values later kernels read, scans):
// they are expressions evaluated on demand at a token index inside loops over
// the sequence. Scans and token -> seq reductions are the operations that need
// a loop; they are scheduled greedily into as few loops as their dependences
// allow (a reverse scan and everything that reads it at the same or the next
// token share one reverse loop). Stores of token outputs join the loop where
// their inputs become available.
//
// A `group` kernel handles one group per unit: a first pass over the member
// sequences accumulates sums, minima and maxima, a second pass (only when
// needed) the squared deviations for variances.
//
//===----------------------------------------------------------------------===//

#include "cac/Conversion/Passes.h"
#include "cac/Conversion/BlockKernels.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/JSON.h"

#include <functional>
#include <optional>
#include <tuple>

namespace cac {
#define GEN_PASS_DEF_CACLOWERKERNELS
#include "cac/Conversion/Passes.h.inc"
} // namespace cac

using namespace mlir;
using namespace cac::ir;

namespace {

//===----------------------------------------------------------------------===//
// The argument list shared by all kernels of an estimator
//===----------------------------------------------------------------------===//

enum class ArgKind { I64, Ptr, Param };

struct AbiArg {
  std::string name;
  ArgKind kind;
};

struct Buffer {
  std::string name;
  std::string role; // input | output | scratch
  Domain domain;
  /// A seg output stored on the tokens of its segments (docs/bundle.md).
  bool segOnTokens = false;
};

/// Fixed leading arguments (docs/bundle.md).
enum FixedArg : unsigned {
  kUnitBegin,
  kUnitEnd,
  kNumSeqs,
  kNumGroups,
  kNumTokens,
  kNumNodes,
  kSeqOffsets,
  kSeqGroup,
  kGroupOffsets,
  kGroupMembers,
  kNodeParent,
  kTokenNode,
  kNumFixed
};

const char *const kFixedNames[kNumFixed] = {
    "unit_begin",    "unit_end",      "num_seqs",    "num_groups",
    "num_tokens",    "num_nodes",     "seq_offsets", "seq_group",
    "group_offsets", "group_members", "node_parent", "token_node"};

struct Abi {
  std::vector<AbiArg> args;
  std::vector<Buffer> buffers;
  std::vector<std::pair<std::string, std::optional<double>>> params;
  /// Where a value is stored: index into `args`.
  DenseMap<Value, unsigned> storage;
  /// Argument index of each parameter op's value.
  DenseMap<Value, unsigned> paramArg;
  /// The scratch token buffers of each rank's radix sort: two permutations
  /// and a second key array (the first is the rank's own buffer), written
  /// and read alternately.
  struct RankScratch {
    unsigned permA, permB, keysB;
  };
  DenseMap<Operation *, RankScratch> rankScratch;
  /// The tree's structure in the layout the node kernels read, built once
  /// per call by the bundle's first kernel (TreeBuilder) from `node_parent`
  /// and `token_node`; scratch buffers of node (K) or seq (B) length holding
  /// indices as floats:
  ///   childEnd[k]  end of node k's children in `children` (CSR, node ids
  ///                ascending; they start at childEnd[k - 1], 0 for k = 0);
  ///   order        the nodes breadth-first (roots first, in id order);
  ///   size[k]      nodes in k's subtree, k included;
  ///   pre[k]       k's position in a preorder walk (roots in id order,
  ///                children in id order), so the subtree of k is the
  ///                positions [pre[k], pre[k] + size[k]);
  ///   preNode[p]   the node at preorder position p;
  ///   seqEnd[p], seqByPre
  ///                the non-empty sequences grouped by the preorder position
  ///                of their leaf (the node of their last token), CSR like
  ///                the children.
  /// Each tree operation then visits only what it needs (children, the
  /// subtree's nodes or sequences) instead of every node or sequence.
  struct TreeScratch {
    unsigned childEnd, children, order, size, pre, preNode, seqEnd, seqByPre;
  };
  std::optional<TreeScratch> tree;
  unsigned firstBuffer = kNumFixed;
  bool needsGroups = false;
  bool needsTree = false;

  unsigned addBuffer(StringRef name, StringRef role, Domain d) {
    buffers.push_back({name.str(), role.str(), d});
    return kNumFixed + buffers.size() - 1;
  }
};

Domain domainOf(Value v) { return cast<FieldType>(v.getType()).getDomain(); }
Type elemOf(Value v) { return cast<FieldType>(v.getType()).getElementType(); }

//===----------------------------------------------------------------------===//
// Emission helpers
//===----------------------------------------------------------------------===//

class Emitter {
public:
  Emitter(OpBuilder &b, Location loc, Type floatType, ArrayRef<Value> args,
          const Abi &abi)
      : b(b), loc(loc), ft(floatType), args(args.begin(), args.end()),
        abi(abi) {}

  Value i64(int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(v));
  }
  Value fconst(double v) {
    return b.create<arith::ConstantOp>(loc, b.getFloatAttr(ft, v));
  }
  /// The address of element `idx` of `base`, in `base`'s address space
  /// (shared memory is address space 3 on the GPU).
  Value ptrAt(Value base, Value idx, Type elem) {
    return b.create<LLVM::GEPOp>(loc, base.getType(), elem, base,
                                 ValueRange{idx});
  }
  Value load(Value base, Value idx, Type elem) {
    return b.create<LLVM::LoadOp>(loc, elem, ptrAt(base, idx, elem));
  }
  void store(Value v, Value base, Value idx) {
    b.create<LLVM::StoreOp>(loc, v, ptrAt(base, idx, v.getType()));
  }
  Value loadI32AsI64(unsigned arg, Value idx) {
    Value v = load(args[arg], idx, b.getI32Type());
    return b.create<arith::ExtSIOp>(loc, b.getI64Type(), v);
  }
  /// Loads a stored value; predicates are stored as 1/0 numbers.
  Value loadBuffer(Value v, Value idx) {
    Value x = load(args[abi.storage.lookup(v)], idx, ft);
    if (elemOf(v).isInteger(1))
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, x,
                                     fconst(0.0));
    return x;
  }
  void storeBuffer(unsigned arg, Value v, Value idx) {
    if (v.getType().isInteger(1))
      v = b.create<arith::UIToFPOp>(loc, ft, v);
    store(v, args[arg], idx);
  }
  Value toFloat(Value i) { return b.create<arith::SIToFPOp>(loc, ft, i); }

  /// Builds the elementwise operation `op` on already evaluated operands.
  Value elementwise(Operation *op, ArrayRef<Value> x) {
    Location l = op->getLoc();
    if (auto bin = dyn_cast<BinaryOp>(op)) {
      switch (bin.getKind()) {
      case BinaryKind::Add:
        return b.create<arith::AddFOp>(l, x[0], x[1]);
      case BinaryKind::Sub:
        return b.create<arith::SubFOp>(l, x[0], x[1]);
      case BinaryKind::Mul:
        return b.create<arith::MulFOp>(l, x[0], x[1]);
      case BinaryKind::Div:
        return b.create<arith::DivFOp>(l, x[0], x[1]);
      case BinaryKind::Min:
        return b.create<arith::MinimumFOp>(l, x[0], x[1]);
      case BinaryKind::Max:
        return b.create<arith::MaximumFOp>(l, x[0], x[1]);
      case BinaryKind::Pow:
        return b.create<math::PowFOp>(l, x[0], x[1]);
      case BinaryKind::And:
        return b.create<arith::AndIOp>(l, x[0], x[1]);
      case BinaryKind::Or:
        return b.create<arith::OrIOp>(l, x[0], x[1]);
      case BinaryKind::Mod: {
        // Floored modulo, the sign of the divisor (Python's %).
        Value q = b.create<math::FloorOp>(
            l, b.create<arith::DivFOp>(l, x[0], x[1]));
        return b.create<arith::SubFOp>(
            l, x[0], b.create<arith::MulFOp>(l, x[1], q));
      }
      }
    }
    if (auto un = dyn_cast<UnaryOp>(op)) {
      switch (un.getKind()) {
      case UnaryKind::Neg:
        return b.create<arith::NegFOp>(l, x[0]);
      case UnaryKind::Exp:
        return b.create<math::ExpOp>(l, x[0]);
      case UnaryKind::Log:
        return b.create<math::LogOp>(l, x[0]);
      case UnaryKind::Sqrt:
        return b.create<math::SqrtOp>(l, x[0]);
      case UnaryKind::Abs:
        return b.create<math::AbsFOp>(l, x[0]);
      case UnaryKind::Sigmoid: {
        Value e = b.create<math::ExpOp>(l, b.create<arith::NegFOp>(l, x[0]));
        return b.create<arith::DivFOp>(
            l, fconst(1.0), b.create<arith::AddFOp>(l, fconst(1.0), e));
      }
      case UnaryKind::Not: {
        Value one = b.create<arith::ConstantOp>(l, b.getBoolAttr(true));
        return b.create<arith::XOrIOp>(l, x[0], one);
      }
      case UnaryKind::Floor:
        return b.create<math::FloorOp>(l, x[0]);
      case UnaryKind::Ceil:
        return b.create<math::CeilOp>(l, x[0]);
      case UnaryKind::StopGrad: // the identity; only the gradient stops
        return x[0];
      }
    }
    if (auto cmp = dyn_cast<CmpOp>(op)) {
      arith::CmpFPredicate p = arith::CmpFPredicate::OEQ; // set below
      switch (cmp.getPredicate()) {
      case CmpPredicate::LT:
        p = arith::CmpFPredicate::OLT;
        break;
      case CmpPredicate::LE:
        p = arith::CmpFPredicate::OLE;
        break;
      case CmpPredicate::GT:
        p = arith::CmpFPredicate::OGT;
        break;
      case CmpPredicate::GE:
        p = arith::CmpFPredicate::OGE;
        break;
      case CmpPredicate::EQ:
        p = arith::CmpFPredicate::OEQ;
        break;
      case CmpPredicate::NE:
        p = arith::CmpFPredicate::UNE;
        break;
      }
      return b.create<arith::CmpFOp>(l, p, x[0], x[1]);
    }
    if (isa<SelectOp>(op))
      return b.create<arith::SelectOp>(l, x[0], x[1], x[2]);
    if (isa<CastOp>(op))
      return b.create<arith::UIToFPOp>(l, ft, x[0]);
    if (isa<BroadcastOp>(op))
      return x[0];
    llvm_unreachable("not an elementwise operation");
  }

  Value constantOf(ConstantOp c) {
    TypedAttr a = cast<TypedAttr>(c.getValue());
    return b.create<arith::ConstantOp>(c.getLoc(), a);
  }

  /// A scalar value (parameters, literals and arithmetic on them).
  Value scalar(Value v) {
    auto it = scalars.find(v);
    if (it != scalars.end())
      return it->second;
    // Scalars are computed once, at the top of the unit's body, so that any
    // loop can use them.
    OpBuilder::InsertionGuard guard(b);
    if (anchor)
      b.setInsertionPoint(anchor);
    Operation *op = v.getDefiningOp();
    Value r;
    if (isa<ParamOp>(op)) {
      r = args[abi.paramArg.lookup(v)];
    } else if (auto c = dyn_cast<ConstantOp>(op)) {
      r = constantOf(c);
    } else {
      SmallVector<Value> x;
      for (Value o : op->getOperands())
        x.push_back(scalar(o));
      r = elementwise(op, x);
    }
    scalars[v] = r;
    return r;
  }
  DenseMap<Value, Value> scalars;
  /// Scalars are inserted before this operation (the first of the body).
  Operation *anchor = nullptr;

  OpBuilder &b;
  Location loc;
  Type ft;
  SmallVector<Value> args;
  const Abi &abi;
};

/// scf.for without loop-carried values comes with a terminator; the
/// emitters add their own.
void eraseImplicitYield(scf::ForOp forOp) {
  Block *body = forOp.getBody();
  if (!body->empty() && isa<scf::YieldOp>(body->back()))
    body->back().erase();
}

/// Helpers shared by the rank sort and the tree kernels: indices stored as
/// floats in scratch buffers, loops over ranges, conditionals.
class IndexOps {
public:
  explicit IndexOps(Emitter &e) : e(e), b(e.b) {}

  Value idx(unsigned buf, Value i) {
    return b.create<arith::FPToSIOp>(e.loc, b.getI64Type(),
                                     e.load(e.args[buf], i, e.ft));
  }
  void setIdx(unsigned buf, Value i, Value v) {
    e.store(e.toFloat(v), e.args[buf], i);
  }
  Value cmpI(arith::CmpIPredicate p, Value x, Value y) {
    return b.create<arith::CmpIOp>(e.loc, p, x, y);
  }
  Value add(Value x, Value y) { return b.create<arith::AddIOp>(e.loc, x, y); }
  Value sub(Value x, Value y) { return b.create<arith::SubIOp>(e.loc, x, y); }
  /// for i in [lo, hi): accs = step(i, accs).
  SmallVector<Value>
  range(Value lo, Value hi, ValueRange inits,
        llvm::function_ref<SmallVector<Value>(Value, ValueRange)> step) {
    auto f = b.create<scf::ForOp>(e.loc, lo, hi, e.i64(1), inits);
    eraseImplicitYield(f);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(f.getBody());
      b.create<scf::YieldOp>(e.loc,
                             step(f.getInductionVar(), f.getRegionIterArgs()));
    }
    return SmallVector<Value>(f.getResults().begin(), f.getResults().end());
  }
  void each(Value lo, Value hi, llvm::function_ref<void(Value)> body) {
    range(lo, hi, {}, [&](Value i, ValueRange) {
      body(i);
      return SmallVector<Value>{};
    });
  }
  void when(Value cond, llvm::function_ref<void()> body) {
    auto ifOp = b.create<scf::IfOp>(e.loc, cond, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    body();
  }
  /// cond ? thenFn() : elseFn(), each yielding one i64 (only the taken
  /// branch runs, so it may load where the other may not).
  Value ifElse(Value cond, llvm::function_ref<Value()> thenFn,
               llvm::function_ref<Value()> elseFn) {
    auto ifOp = b.create<scf::IfOp>(e.loc, TypeRange{b.getI64Type()}, cond,
                                    /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    b.create<scf::YieldOp>(e.loc, thenFn());
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    b.create<scf::YieldOp>(e.loc, elseFn());
    return ifOp.getResult(0);
  }
  /// The start of entry k of a CSR whose ends are in `ends`: ends[k - 1],
  /// 0 for k = 0.
  Value startOf(unsigned ends, Value k) {
    Value first = cmpI(arith::CmpIPredicate::eq, k, e.i64(0));
    Value prev = b.create<arith::SelectOp>(e.loc, first, e.i64(0),
                                           sub(k, e.i64(1)));
    return b.create<arith::SelectOp>(e.loc, first, e.i64(0), idx(ends, prev));
  }

  Emitter &e;
  OpBuilder &b;
};

bool isElementwise(Operation *op) {
  return isa<BinaryOp, UnaryOp, CmpOp, SelectOp, CastOp>(op);
}

//===----------------------------------------------------------------------===//
// seq kernels
//===----------------------------------------------------------------------===//

struct Dep {
  Operation *op;  ///< A ScanOp, RankOp or a token -> seq ReduceOp.
  int64_t offset; ///< Token offset at which a scan is read.
  bool seqLevel;  ///< Read after its loop completed.
};

struct Item {
  enum Kind { Scan, Reduce, Rank, Store } kind;
  Operation *op = nullptr; ///< Scan, Reduce, Rank.
  Value value;             ///< Store: the token value.
  unsigned buffer = 0;     ///< Store, Scan, Rank: where it goes.
};

struct Loop {
  bool reverse = false;
  bool directionFixed = false;
  std::vector<Item> items;
};

/// The threads of a block that work on one unit together. On the GPU they
/// are the block's threads, with shared memory and bar.sync; in the CPU
/// simulation (target cuda-sim) they are simulated threads (cac::
/// simulateBlock) that run the same function, each with its own `tid`, and
/// meet in `cac_sim_barrier`.
struct BlockThreads {
  int64_t size = 0;  ///< threads per block, a power of 2
  int64_t items = 1; ///< tokens per thread in a tile
  /// Which tokens of a tile thread tid takes, for j < items: j * size + tid
  /// (striped) or tid * items + j (blocked); auto: striped in loops without
  /// a scan, blocked in loops with one.
  enum class Layout { Blocked, Striped, Auto } layout = Layout::Auto;
  /// Each tile asks L2 for the next tile's tokens of every buffer the loop
  /// reads (PTX prefetch; the GPU only).
  bool prefetch = false;
  /// With prefetch: also the buffers the kernel wrote in an earlier loop.
  bool prefetchWritten = true;
  Value tid;         ///< i64 in [0, size)
  Value shared;      ///< blockSharedElements(size) elements of the float type
  std::function<void()> barrier;
  /// The value `v` (a float) of lane `lane - delta` of the warp, or of lane
  /// `lane ^ delta` with `xorMode`; lanes with lane < delta get their own
  /// `v` back. All threads of the block call it at the same point.
  std::function<Value(Value v, int64_t delta, bool xorMode)> shuffle;

  /// Lanes per warp: 32, or the whole block when it is smaller.
  int64_t warp() const { return std::min<int64_t>(32, size); }
};

BlockThreads::Layout layoutOf(StringRef name) {
  return name == "blocked"   ? BlockThreads::Layout::Blocked
         : name == "striped" ? BlockThreads::Layout::Striped
                             : BlockThreads::Layout::Auto;
}

class SeqKernelEmitter {
public:
  SeqKernelEmitter(Emitter &e, KernelOp kernel, const Abi &abi,
                   ArrayRef<std::pair<Value, unsigned>> tokenStores,
                   ArrayRef<std::pair<Value, unsigned>> seqStores,
                   const BlockThreads *threads = nullptr,
                   ArrayRef<KernelOp> fusedGroups = {},
                   bool cpu = true)
      : e(e), b(e.b), kernel(kernel), abi(abi), tokenStores(tokenStores),
        seqStores(seqStores), threads(threads), fusedGroups(fusedGroups),
        cpu(cpu) {}

  void emit(Value unit) {
    this->unit = unit;
    e.anchor = e.i64(0).getDefiningOp();
    schedule();
    start = e.loadI32AsI64(kSeqOffsets, unit);
    Value next = b.create<arith::AddIOp>(e.loc, unit, e.i64(1));
    end = e.loadI32AsI64(kSeqOffsets, next);
    len = b.create<arith::SubIOp>(e.loc, end, start);
    if (abi.needsGroups)
      group = e.loadI32AsI64(kSeqGroup, unit);
    emitFusedGroups();
    if (!threads) {
      for (Loop &l : loops)
        emitLoop(l);
      for (auto [v, buf] : seqStores)
        e.storeBuffer(buf, evalOuter(v), unit);
      return;
    }
    for (size_t i = 0; i < loops.size(); ++i) {
      if (i)
        threads->barrier();
      emitBlockLoop(loops[i]);
    }
    // Every thread has the sequence's values; thread 0 stores them.
    SmallVector<std::pair<Value, unsigned>> values;
    for (auto [v, buf] : seqStores)
      values.push_back({evalOuter(v), buf});
    if (!values.empty())
      IndexOps(e).when(isThread0(), [&] {
        for (auto [v, buf] : values)
          e.storeBuffer(buf, v, unit);
      });
  }

private:
  /// The values of the fused group kernels this kernel reads, computed for
  /// this sequence's group before anything else (by every thread of a
  /// block, each reading the same members).
  void emitFusedGroups();

  bool inKernel(Value v) {
    Operation *def = v.getDefiningOp();
    return def && def->getParentOp() == kernel.getOperation();
  }

  void tokenDeps(Value v, int64_t off, SmallVectorImpl<Dep> &deps) {
    if (!inKernel(v))
      return;
    Operation *op = v.getDefiningOp();
    if (isa<ScanOp, RankOp>(op)) {
      deps.push_back({op, off, false});
      return;
    }
    if (auto s = dyn_cast<ShiftOp>(op)) {
      tokenDeps(s.getOperand(), off + int64_t(s.getOffset()), deps);
      tokenDeps(s.getFill(), off, deps);
      return;
    }
    if (auto bc = dyn_cast<BroadcastOp>(op)) {
      if (domainOf(bc.getOperand()) == Domain::Token)
        tokenDeps(bc.getOperand(), off, deps);
      else
        outerDeps(bc.getOperand(), deps);
      return;
    }
    if (auto g = dyn_cast<SegGatherOp>(op)) {
      tokenDeps(g.getIndex(), off, deps);
      return;
    }
    if (isElementwise(op))
      for (Value o : op->getOperands())
        tokenDeps(o, off, deps);
  }

  void outerDeps(Value v, SmallVectorImpl<Dep> &deps) {
    if (!inKernel(v))
      return;
    Operation *op = v.getDefiningOp();
    if (auto r = dyn_cast<ReduceOp>(op)) {
      deps.push_back({op, 0, true});
      return;
    }
    for (Value o : op->getOperands())
      outerDeps(o, deps);
  }

  /// Puts `item` in the last loop if its dependences allow, else in a new
  /// one. A dependence read at another token of the same loop fixes that
  /// loop's direction (t+1 needs a reverse loop, t-1 a forward one), so that
  /// no later item can turn it around.
  void place(Item item, SmallVectorImpl<Dep> &deps,
             std::optional<bool> direction) {
    size_t minLoop = 0;
    for (const Dep &d : deps) {
      size_t l = loopOf.lookup(d.op);
      const Loop &dl = loops[l];
      bool sameOk = !d.seqLevel &&
                    (d.offset == 0 || !dl.directionFixed ||
                     (d.offset > 0) == dl.reverse);
      minLoop = std::max(minLoop, sameOk ? l : l + 1);
    }
    bool useLast = !loops.empty() && loops.size() - 1 >= minLoop;
    std::optional<bool> need = direction;
    if (useLast) {
      size_t last = loops.size() - 1;
      for (const Dep &d : deps) {
        if (loopOf.lookup(d.op) != last || d.offset == 0)
          continue;
        bool reverse = d.offset > 0;
        if (need && *need != reverse) {
          useLast = false;
          break;
        }
        need = reverse;
      }
      if (useLast && need && loops.back().directionFixed &&
          loops.back().reverse != *need)
        useLast = false;
    }
    if (!useLast) {
      loops.emplace_back();
      need = direction;
    }
    Loop &l = loops.back();
    if (need && !l.directionFixed) {
      l.reverse = *need;
      l.directionFixed = true;
    }
    if (item.op)
      loopOf[item.op] = loops.size() - 1;
    l.items.push_back(item);
  }

  void schedule() {
    DenseMap<Value, unsigned> storeOf;
    for (auto [v, buf] : tokenStores)
      storeOf[v] = buf;
    for (Operation &op : kernel.getBody().front()) {
      SmallVector<Dep> deps;
      if (auto scan = dyn_cast<ScanOp>(op)) {
        tokenDeps(scan.getInput(), 0, deps);
        tokenDeps(scan.getDecay(), 0, deps);
        Item it{Item::Scan, &op, {}, abi.storage.lookup(scan.getResult())};
        place(it, deps, scan.getReverse());
      } else if (auto rank = dyn_cast<RankOp>(op)) {
        // Every token's rank reads the whole sequence: what the input
        // depends on must be complete before the rank's loop starts.
        tokenDeps(rank.getInput(), 0, deps);
        for (Dep &d : deps)
          d.seqLevel = true;
        Item it{Item::Rank, &op, {}, abi.storage.lookup(rank.getResult())};
        place(it, deps, std::nullopt);
      } else if (auto red = dyn_cast<ReduceOp>(op)) {
        if (domainOf(red.getOperand()) != Domain::Token)
          continue;
        tokenDeps(red.getOperand(), 0, deps);
        place(Item{Item::Reduce, &op, {}, 0}, deps, std::nullopt);
      }
      // Token stores are placed right after the op that defines their value
      // (or first, for values defined outside the kernel).
      for (Value r : op.getResults())
        placeStoresOf(r, storeOf);
    }
    for (auto [v, buf] : tokenStores)
      if (!inKernel(v) && !placedStores.count({v, buf})) {
        SmallVector<Dep> deps;
        placedStores.insert({v, buf});
        place(Item{Item::Store, nullptr, v, buf}, deps, std::nullopt);
      }
  }

  void placeStoresOf(Value r, DenseMap<Value, unsigned> &storeOf) {
    for (auto [v, buf] : tokenStores) {
      if (v != r || placedStores.count({v, buf}))
        continue;
      // A scan or a rank writes its own storage.
      if (isa<ScanOp, RankOp>(r.getDefiningOp()) &&
          abi.storage.lookup(r) == buf) {
        placedStores.insert({v, buf});
        continue;
      }
      SmallVector<Dep> deps;
      tokenDeps(v, 0, deps);
      placedStores.insert({v, buf});
      place(Item{Item::Store, nullptr, v, buf}, deps, std::nullopt);
    }
  }

  // Seq-level values needed by a loop are computed before it.
  void prepareOuter(Value v, DenseSet<Value> &seen) {
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
    for (Value o : op->getOperands())
      prepareOuter(o, seen);
  }

  /// The seq-level values the items of a loop read, computed before it.
  void prepareLoopOuter(Loop &l) {
    DenseSet<Value> seen;
    for (Item &it : l.items) {
      if (it.kind == Item::Store)
        prepareOuter(it.value, seen);
      else
        for (Value o : it.op->getOperands())
          prepareOuter(o, seen);
    }
  }

  /// Tokens one iteration of a CPU loop takes when it `unrolls` (see
  /// emitLoop).
  static constexpr int64_t kUnroll = 4;

  /// Whether the loop takes kUnroll tokens an iteration: when one of its
  /// scans discounts, by the same factor at every token (GAE's gamma *
  /// lambda), so that the iteration's decay products are loop invariants
  /// and the carry's one FMA per token, its speed limit, becomes one per
  /// kUnroll tokens (GAE 1.2-1.6x faster, docs/benchmarks.md). Measured and left
  /// one token an iteration: a decay that varies by token (SAE: a multiply
  /// more per token unrolled, 5-10% slower) and counting scans, decay 1
  /// (VinePPO's segment ids: 15-20% slower).
  bool unrolls(const Loop &l) {
    for (const Item &it : l.items) {
      if (it.kind != Item::Scan)
        continue;
      Value c = cast<ScanOp>(it.op).getDecay();
      if (isTokenInvariant(c) && !isConstant(c, 1.0))
        return true;
    }
    return false;
  }

  /// Whether `v` is the literal `x` (or its broadcast).
  static bool isConstant(Value v, double x) {
    while (auto bc = v.getDefiningOp<BroadcastOp>())
      v = bc.getOperand();
    auto c = v.getDefiningOp<ConstantOp>();
    auto f = c ? dyn_cast<FloatAttr>(c.getValue()) : FloatAttr();
    return f && f.getValueAsDouble() == x;
  }

  /// Whether `v` has one value for all the tokens of a sequence.
  bool isTokenInvariant(Value v) {
    if (domainOf(v) != Domain::Token)
      return true;
    auto bc = v.getDefiningOp<BroadcastOp>();
    return bc && domainOf(bc.getOperand()) != Domain::Token &&
           domainOf(bc.getOperand()) != Domain::Node;
  }

  static bool isChainReduce(ReduceOp red) {
    switch (red.getKind()) {
    case ReduceKind::Sum:
    case ReduceKind::Mean:
    case ReduceKind::Min:
    case ReduceKind::Max:
      return true;
    default:
      return false;
    }
  }

  /// The loop over the sequence's tokens, one thread walking them. A scan
  /// y_t = x_t + c_t * y_(t-1) carries one FMA from token to token, and that
  /// latency, not memory, bounded GAE on the CPU. So a loop that `unrolls`
  /// takes its first token alone, then kUnroll tokens an iteration: per
  /// scan the partial y_j = Y_j + P_j * carry, with Y_j and P_j (the scan of
  /// the iteration's own tokens and the product of their decays) computed
  /// apart from the carry, leaves one FMA on the carried path per kUnroll
  /// tokens; a sum, mean, min or max adds the kUnroll tokens pairwise before
  /// the carry. The tokens left over ((len - 1) mod kUnroll) take a third
  /// loop, one at a time.
  void emitLoop(Loop &l) {
    prepareLoopOuter(l);
    // A rank reads its whole sequence: it is sorted before the loop, whose
    // items then read the stored ranks.
    for (Item &it : l.items)
      if (it.kind == Item::Rank)
        emitRankSort(cast<RankOp>(it.op));
    // Loop-carried values: one per scan, one per reduction.
    SmallVector<Value> carried;
    for (Item &it : l.items) {
      if (it.kind == Item::Scan)
        carried.push_back(e.fconst(0.0));
      else if (it.kind == Item::Reduce)
        carried.push_back(reduceInit(cast<ReduceOp>(it.op)));
    }
    if (unrolls(l)) {
      // The first token alone; after it, the token one step back (t + 1 in
      // a reverse loop, t - 1 in a forward one) is always in the sequence,
      // so `next` and `prev` read it without a bounds check, and within an
      // iteration they reuse the value computed for the previous token.
      Value first = b.create<arith::MinSIOp>(e.loc, len, e.i64(1));
      carried = emitTokenLoop(l, e.i64(0), first, 1, carried, false);
      Value rest = b.create<arith::SubIOp>(e.loc, len, first);
      Value main = b.create<arith::SubIOp>(
          e.loc, len,
          b.create<arith::RemSIOp>(e.loc, rest, e.i64(kUnroll)));
      carried = emitTokenLoop(l, first, main, kUnroll, carried, true);
      carried = emitTokenLoop(l, main, len, 1, carried, true);
    } else {
      carried = emitTokenLoop(l, e.i64(0), len, 1, carried, false);
    }
    unsigned carry = 0;
    for (Item &it : l.items) {
      if (it.kind == Item::Scan) {
        ++carry;
      } else if (it.kind == Item::Reduce) {
        auto red = cast<ReduceOp>(it.op);
        outerMemo[red.getResult()] = reduceFinish(red, carried[carry++]);
      }
    }
  }

  /// One scf.for over positions [lo, hi) of the sequence (counted from its
  /// first token, or from its last in a reverse loop), `step` tokens an
  /// iteration; returns the carried values after it.
  SmallVector<Value> emitTokenLoop(Loop &l, Value lo, Value hi, int64_t step,
                                   ArrayRef<Value> inits, bool backInRange) {
    auto forOp =
        b.create<scf::ForOp>(e.loc, lo, hi, e.i64(step), ValueRange(inits));
    eraseImplicitYield(forOp);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(forOp.getBody());
    Value i = forOp.getInductionVar();
    // The iteration's tokens, in the loop's order.
    SmallVector<Value> ts;
    for (int64_t j = 0; j < step; ++j) {
      Value ij = j ? b.create<arith::AddIOp>(e.loc, i, e.i64(j)) : i;
      if (l.reverse)
        ts.push_back(b.create<arith::SubIOp>(
            e.loc, b.create<arith::SubIOp>(e.loc, end, e.i64(1)), ij));
      else
        ts.push_back(b.create<arith::AddIOp>(e.loc, start, ij));
    }
    tokenMemo.clear();
    back.clear();
    if (backInRange)
      for (size_t j = 0; j < ts.size(); ++j)
        back[ts[j]] = j ? ts[j - 1] : Value();
    backOffset = l.reverse ? 1 : -1;
    // The carry is the loop's critical path: allow LLVM to fuse a multiply
    // and an add into one FMA (one rounding, half the latency).
    auto contract = arith::FastMathFlagsAttr::get(
        b.getContext(), arith::FastMathFlags::contract);
    auto fma = [&](Value x, Value c, Value y) {
      return b.create<arith::AddFOp>(
          e.loc, x, b.create<arith::MulFOp>(e.loc, c, y, contract), contract);
    };
    SmallVector<Value> yields;
    unsigned carry = 0;
    // Items are taken in order, each for all the iteration's tokens: an item
    // reads only earlier items, at this token (memoized) or at a neighbour
    // (stored already, by this iteration or an earlier one).
    for (Item &it : l.items) {
      switch (it.kind) {
      case Item::Scan: {
        auto scan = cast<ScanOp>(it.op);
        Value prev = forOp.getRegionIterArgs()[carry++];
        Value partial, decay, y;
        for (Value t : ts) {
          Value x = evalTok(scan.getInput(), t);
          Value c = evalTok(scan.getDecay(), t);
          if (ts.size() == 1) {
            y = fma(x, c, prev);
          } else {
            partial = partial ? fma(x, c, partial) : x;
            decay = decay ? b.create<arith::MulFOp>(e.loc, c, decay) : c;
            y = fma(partial, decay, prev);
          }
          e.storeBuffer(it.buffer, y, t);
          tokenMemo[{scan.getResult(), t}] = y;
        }
        yields.push_back(y);
        break;
      }
      case Item::Rank: // stored by emitRankSort before the loop
        break;
      case Item::Reduce: {
        auto red = cast<ReduceOp>(it.op);
        Value acc = forOp.getRegionIterArgs()[carry++];
        if (ts.size() > 1 && isChainReduce(red)) {
          // Pairwise over the iteration's tokens, then one step of the carry.
          SmallVector<Value> xs;
          for (Value t : ts)
            xs.push_back(evalTok(red.getOperand(), t));
          while (xs.size() > 1) {
            SmallVector<Value> half;
            for (size_t k = 0; k + 1 < xs.size(); k += 2)
              half.push_back(reduceStep(red, xs[k], xs[k + 1], ts[0]));
            if (xs.size() % 2)
              half.push_back(xs.back());
            xs = std::move(half);
          }
          acc = reduceStep(red, acc, xs[0], ts[0]);
        } else {
          for (Value t : ts)
            acc = reduceStep(red, acc, evalTok(red.getOperand(), t), t);
        }
        yields.push_back(acc);
        break;
      }
      case Item::Store:
        for (Value t : ts)
          e.storeBuffer(it.buffer, evalTok(it.value, t), t);
        break;
      }
    }
    b.create<scf::YieldOp>(e.loc, yields);
    back.clear();
    SmallVector<Value> out(forOp.getResults().begin(),
                           forOp.getResults().end());
    return out;
  }

  /// Affine steps y -> a*y + b. The step `(la, lb)` after `(ea, eb)`:
  /// y -> la*(ea*y + eb) + lb.
  std::pair<Value, Value> affineAfter(Value ea, Value eb, Value la, Value lb) {
    return {b.create<arith::MulFOp>(e.loc, la, ea),
            applyAffine(la, lb, eb)};
  }
  /// a*y + b.
  Value applyAffine(Value a, Value bv, Value y) {
    return b.create<arith::AddFOp>(e.loc, bv,
                                   b.create<arith::MulFOp>(e.loc, a, y));
  }

  Value isThread0() {
    return b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq,
                                   threads->tid, e.i64(0));
  }
  Value sharedAt(Value i) { return e.ptrAt(threads->shared, i, e.ft); }
  Value loadShared(Value i) {
    return b.create<LLVM::LoadOp>(e.loc, e.ft, sharedAt(i));
  }
  void storeShared(Value v, Value i) {
    b.create<LLVM::StoreOp>(e.loc, v, sharedAt(i));
  }

  /// A loop of the schedule as a block of threads runs it. The sequence is
  /// cut into tiles of size * items tokens, visited in the loop's direction;
  /// in a tile, thread `tid` has the `items` consecutive positions from
  /// tid * items (positions count in the loop's direction, so a reverse
  /// loop's position p is token end - 1 - p). Per tile, each item of the
  /// loop is done by all threads before the next item starts:
  ///   a scan y = x + c * y_prev composes its affine steps (c, x): each
  ///     thread composes its own tokens' steps, a block-wide scan (blockScan:
  ///     warp shuffles, then the warps' partials through shared memory)
  ///     gives each thread the composition of the steps before its own,
  ///     applied to the carry from the previous tile; the thread then walks
  ///     its tokens again from that start and stores y. A barrier follows,
  ///     so later items may read the scan at any token it has reached
  ///     (other offsets are loaded);
  ///   a reduction accumulates per thread across tiles and is combined
  ///     across the block after the last tile (blockReduce; `first`/`last`
  ///     are read at the sequence's first/last token instead);
  ///   a store evaluates its value and stores it.
  /// Positions past the sequence's end evaluate at its last token (so every
  /// load stays inside the sequence), count as the identity step (c = 1,
  /// x = 0), join no reduction and store nothing. Every barrier is reached by
  /// all threads of the block: trip counts depend on the sequence only.
  void emitBlockLoop(Loop &l) {
    prepareLoopOuter(l);
    // A rank reads its whole sequence: the block sorts it before the loop.
    bool hasRank = llvm::any_of(
        l.items, [](const Item &it) { return it.kind == Item::Rank; });
    if (hasRank) {
      bool first = true;
      for (Item &it : l.items) {
        if (it.kind != Item::Rank)
          continue;
        if (!first)
          threads->barrier();
        emitRankSortBlock(cast<RankOp>(it.op));
        first = false;
      }
      threads->barrier();
    }
    auto isFirstLast = [](ReduceOp r) {
      return r.getKind() == ReduceKind::First ||
             r.getKind() == ReduceKind::Last;
    };
    // Loop-carried values: each scan's carry (the same in every thread),
    // each reduction's per-thread partial.
    SmallVector<Value> inits;
    for (Item &it : l.items) {
      if (it.kind == Item::Scan)
        inits.push_back(e.fconst(0.0));
      else if (it.kind == Item::Reduce && !isFirstLast(cast<ReduceOp>(it.op)))
        inits.push_back(reduceInit(cast<ReduceOp>(it.op)));
    }
    const int64_t size = threads->size, items = threads->items;
    Value tileLen = e.i64(size * items);
    Value tiles = b.create<arith::DivSIOp>(
        e.loc,
        b.create<arith::AddIOp>(e.loc, len, e.i64(size * items - 1)),
        tileLen);
    // The thread's first position in a tile and the step to its next one:
    // blocked, tid * items + j; striped, j * size + tid (a warp's j-th loads
    // and stores are then 32 contiguous tokens). A scan costs one block scan
    // per tile when blocked and one per row when striped: on an H200
    // (docs/benchmarks.md) striped made GRPO's broadcast 2.2x faster and
    // GAE's scan 1.6x slower, hence auto.
    bool hasScan = llvm::any_of(
        l.items, [](const Item &it) { return it.kind == Item::Scan; });
    const bool striped =
        threads->layout == BlockThreads::Layout::Striped ||
        (threads->layout == BlockThreads::Layout::Auto && !hasScan);
    Value first =
        striped ? threads->tid
                : b.create<arith::MulIOp>(e.loc, threads->tid, e.i64(items))
                      .getResult();
    const int64_t stride = striped ? size : 1;
    Value lastPos = b.create<arith::SubIOp>(e.loc, len, e.i64(1));
    Value lastTok = b.create<arith::SubIOp>(e.loc, end, e.i64(1));
    auto forOp = b.create<scf::ForOp>(e.loc, e.i64(0), tiles, e.i64(1), inits);
    eraseImplicitYield(forOp);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(forOp.getBody());
      Value base = b.create<arith::AddIOp>(
          e.loc,
          b.create<arith::MulIOp>(e.loc, forOp.getInductionVar(), tileLen),
          first);
      llvm::SetVector<Value> loads;
      if (threads->prefetch)
        tileLoads = &loads;
      tokenMemo.clear();
      SmallVector<Value> ts, ins;
      for (int64_t j = 0; j < items; ++j) {
        Value p = b.create<arith::AddIOp>(e.loc, base, e.i64(j * stride));
        Value in =
            b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, p, len);
        Value pc = b.create<arith::SelectOp>(e.loc, in, p, lastPos);
        Value t;
        if (l.reverse)
          t = b.create<arith::SubIOp>(e.loc, lastTok, pc);
        else
          t = b.create<arith::AddIOp>(e.loc, start, pc);
        ts.push_back(t);
        ins.push_back(in);
      }
      SmallVector<Value> yields;
      unsigned carry = 0;
      for (Item &it : l.items) {
        switch (it.kind) {
        case Item::Scan: {
          auto scan = cast<ScanOp>(it.op);
          SmallVector<Value> xs, cs;
          Value a = e.fconst(1.0), bb = e.fconst(0.0);
          // Every load of the tile first, then the scans.
          for (int64_t j = 0; j < items; ++j) {
            Value x = evalTok(scan.getInput(), ts[j]);
            Value c = evalTok(scan.getDecay(), ts[j]);
            xs.push_back(
                b.create<arith::SelectOp>(e.loc, ins[j], x, e.fconst(0.0)));
            cs.push_back(
                b.create<arith::SelectOp>(e.loc, ins[j], c, e.fconst(1.0)));
            if (!striped)
              std::tie(a, bb) = affineAfter(a, bb, cs[j], xs[j]);
          }
          Value prev = forOp.getRegionIterArgs()[carry++];
          if (striped) {
            // One block-wide scan per row of `size` tokens, the carry
            // passed from row to row.
            for (int64_t j = 0; j < items; ++j) {
              if (j)
                threads->barrier(); // the previous row's shared memory
              auto [exA, exB, totA, totB] = blockScan(cs[j], xs[j]);
              Value yj = applyAffine(cs[j], xs[j], applyAffine(exA, exB, prev));
              IndexOps(e).when(ins[j],
                               [&] { e.storeBuffer(it.buffer, yj, ts[j]); });
              tokenMemo[{scan.getResult(), ts[j]}] = yj;
              prev = applyAffine(totA, totB, prev);
            }
            yields.push_back(prev);
            threads->barrier();
            break;
          }
          auto [exA, exB, totA, totB] = blockScan(a, bb);
          Value y = applyAffine(exA, exB, prev);
          for (int64_t j = 0; j < items; ++j) {
            y = applyAffine(cs[j], xs[j], y);
            Value yj = y;
            IndexOps(e).when(ins[j],
                             [&] { e.storeBuffer(it.buffer, yj, ts[j]); });
            tokenMemo[{scan.getResult(), ts[j]}] = yj;
          }
          yields.push_back(applyAffine(totA, totB, prev));
          threads->barrier();
          break;
        }
        case Item::Rank: // sorted before the loop
          break;
        case Item::Reduce: {
          auto red = cast<ReduceOp>(it.op);
          if (isFirstLast(red))
            break;
          Value acc = forOp.getRegionIterArgs()[carry++];
          for (int64_t j = 0; j < items; ++j) {
            Value stepped =
                reduceStep(red, acc, evalTok(red.getOperand(), ts[j]), ts[j]);
            acc = b.create<arith::SelectOp>(e.loc, ins[j], stepped, acc);
          }
          yields.push_back(acc);
          break;
        }
        case Item::Store:
          for (int64_t j = 0; j < items; ++j) {
            Value v = evalTok(it.value, ts[j]);
            IndexOps(e).when(ins[j],
                             [&] { e.storeBuffer(it.buffer, v, ts[j]); });
          }
          break;
        }
      }
      tileLoads = nullptr;
      if (!loads.empty()) {
        // The next tile's first token of this thread, for each buffer read
        // (in every layout a thread's tokens of a tile share one or a few
        // 128-byte lines with its warp's), asked for before this tile's
        // loads so that L2 has them when the next tile starts.
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointAfter(base.getDefiningOp());
        Value p = b.create<arith::AddIOp>(e.loc, base, tileLen);
        Value in =
            b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, p, len);
        IndexOps(e).when(in, [&] {
          Value t = l.reverse
                        ? b.create<arith::SubIOp>(e.loc, lastTok, p).getResult()
                        : b.create<arith::AddIOp>(e.loc, start, p).getResult();
          for (Value v : loads) {
            Value addr = b.create<LLVM::PtrToIntOp>(
                e.loc, b.getI64Type(),
                e.ptrAt(e.args[abi.storage.lookup(v)], t, e.ft));
            b.create<LLVM::InlineAsmOp>(
                e.loc, TypeRange{}, ValueRange{addr}, "prefetch.L2 [$0];", "l",
                /*has_side_effects=*/true, /*is_align_stack=*/false,
                /*asm_dialect=*/nullptr, /*operand_attrs=*/nullptr);
          }
        });
      }
      b.create<scf::YieldOp>(e.loc, yields);
      tokenMemo.clear();
    }
    unsigned carry = 0;
    for (Item &it : l.items) {
      if (it.kind == Item::Scan) {
        ++carry;
        continue;
      }
      if (it.kind != Item::Reduce)
        continue;
      auto red = cast<ReduceOp>(it.op);
      if (isFirstLast(red)) {
        // The value at the sequence's first or last token (0 when empty),
        // which every thread can evaluate: what it reads is complete.
        Value some = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt,
                                             len, e.i64(0));
        auto ifOp = b.create<scf::IfOp>(e.loc, TypeRange{e.ft}, some,
                                        /*withElse=*/true);
        {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(&ifOp.getThenRegion().front());
          // A new index value, so that nothing memoized at `start` or
          // `end - 1` (defined in this branch only) is reused outside it.
          Value t;
          if (red.getKind() == ReduceKind::First)
            t = b.create<arith::AddIOp>(e.loc, start, e.i64(0));
          else
            t = b.create<arith::SubIOp>(e.loc, end, e.i64(1));
          b.create<scf::YieldOp>(e.loc, evalTok(red.getOperand(), t));
          tokenMemo.clear();
          b.setInsertionPointToStart(&ifOp.getElseRegion().front());
          b.create<scf::YieldOp>(e.loc, e.fconst(0.0));
        }
        outerMemo[red.getResult()] = ifOp.getResult(0);
        continue;
      }
      outerMemo[red.getResult()] =
          reduceFinish(red, blockReduce(red, forOp.getResult(carry++)));
    }
  }

  /// The block-wide scan of each thread's affine step (a, b): y -> a*y + b.
  /// Returns the composition of the steps of the threads before this one
  /// (the identity for thread 0) and of all the block's steps. A warp scans
  /// its lanes' steps with shuffles (Kogge-Stone, log2(32) rounds, no
  /// barrier); each warp's last lane puts the warp's composition in shared
  /// memory; after one barrier every thread composes the warps before its
  /// own (at most 32 broadcast reads). Shared memory is free again after the
  /// caller's next barrier.
  std::tuple<Value, Value, Value, Value> blockScan(Value a, Value bv) {
    const int64_t size = threads->size, w = threads->warp(),
                  warps = size / w;
    Value tid = threads->tid;
    Value lane = b.create<arith::RemSIOp>(e.loc, tid, e.i64(w));
    Value warp = b.create<arith::DivSIOp>(e.loc, tid, e.i64(w));
    for (int64_t d = 1; d < w; d *= 2) {
      Value a0 = threads->shuffle(a, d, false);
      Value b0 = threads->shuffle(bv, d, false);
      Value has = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sge,
                                          lane, e.i64(d));
      auto [na, nb] = affineAfter(a0, b0, a, bv);
      a = b.create<arith::SelectOp>(e.loc, has, na, a);
      bv = b.create<arith::SelectOp>(e.loc, has, nb, bv);
    }
    // The lanes before this one: the inclusive value of lane - 1.
    Value pa = threads->shuffle(a, 1, false);
    Value pb = threads->shuffle(bv, 1, false);
    Value notFirst = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt,
                                             lane, e.i64(0));
    Value exA = b.create<arith::SelectOp>(e.loc, notFirst, pa, e.fconst(1.0));
    Value exB = b.create<arith::SelectOp>(e.loc, notFirst, pb, e.fconst(0.0));
    Value last = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq,
                                         lane, e.i64(w - 1));
    IndexOps(e).when(last, [&] {
      storeShared(a, warp);
      storeShared(bv, b.create<arith::AddIOp>(e.loc, warp, e.i64(size)));
    });
    threads->barrier();
    // The warps before this one, and all warps.
    Value wa = e.fconst(1.0), wb = e.fconst(0.0);
    Value ta = wa, tb = wb;
    for (int64_t k = 0; k < warps; ++k) {
      Value ka = loadShared(e.i64(k)), kb = loadShared(e.i64(size + k));
      auto [na, nb] = affineAfter(ta, tb, ka, kb);
      ta = na;
      tb = nb;
      if (k + 1 == warps)
        break;
      // After warp k, the prefix of warps k + 1 and later includes it.
      Value before = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sgt,
                                             warp, e.i64(k));
      wa = b.create<arith::SelectOp>(e.loc, before, ta, wa);
      wb = b.create<arith::SelectOp>(e.loc, before, tb, wb);
    }
    auto [xa, xb] = affineAfter(wa, wb, exA, exB);
    return {xa, xb, ta, tb};
  }

  /// Combines the threads' partials of a token -> seq reduction: a butterfly
  /// of shuffles in each warp (every lane ends with the same value), the
  /// warps' values through shared memory, combined by every thread in the
  /// same order; every thread gets the result.
  Value blockReduce(ReduceOp red, Value acc) {
    return blockReduce(red.getKind(), acc);
  }
  Value blockReduce(ReduceKind kind, Value acc) {
    const int64_t size = threads->size, w = threads->warp(),
                  warps = size / w;
    auto combine = [&](Value x, Value y) -> Value {
      switch (kind) {
      case ReduceKind::Min:
        return b.create<arith::MinimumFOp>(e.loc, x, y);
      case ReduceKind::Max:
        return b.create<arith::MaximumFOp>(e.loc, x, y);
      default: // sum, mean, count
        return b.create<arith::AddFOp>(e.loc, x, y);
      }
    };
    for (int64_t d = w / 2; d >= 1; d /= 2)
      acc = combine(acc, threads->shuffle(acc, d, true));
    if (warps == 1)
      return acc;
    Value tid = threads->tid;
    Value lane = b.create<arith::RemSIOp>(e.loc, tid, e.i64(w));
    Value warp = b.create<arith::DivSIOp>(e.loc, tid, e.i64(w));
    Value first = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq,
                                          lane, e.i64(0));
    IndexOps(e).when(first, [&] { storeShared(acc, warp); });
    threads->barrier();
    Value r = loadShared(e.i64(0));
    for (int64_t k = 1; k < warps; ++k)
      r = combine(r, loadShared(e.i64(k)));
    threads->barrier();
    return r;
  }

  /// The rank's sort key of x: the float's bits, ordered so that a larger x
  /// gives a smaller unsigned key (-0.0 is made +0.0 first, so the two tie;
  /// every NaN +NaN, which sorts before +inf).
  Value rankKey(Value x) {
    Location loc = e.loc;
    const unsigned bits = e.ft.getIntOrFloatBitWidth();
    Type it = b.getIntegerType(bits);
    auto iconst = [&](int64_t v) -> Value {
      return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, v));
    };
    x = b.create<arith::AddFOp>(loc, x, e.fconst(0.0)); // -0.0 -> +0.0
    // Every NaN (x86's default NaN has the sign bit set) as +NaN, which
    // sorts before +inf.
    Value isNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, x, x);
    Value qnan = b.create<arith::ConstantOp>(
        loc, b.getFloatAttr(e.ft, APFloat::getQNaN(
                                      cast<FloatType>(e.ft).getFloatSemantics())));
    x = b.create<arith::SelectOp>(loc, isNan, qnan, x);
    Value raw = b.create<arith::BitcastOp>(loc, it, x);
    Value neg =
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, raw, iconst(0));
    // Descending: negative floats keep their bits (larger x, smaller
    // magnitude, smaller bits), the others flip all but the sign bit.
    Value flip = b.create<arith::SelectOp>(
        loc, neg, iconst(0),
        iconst(bits == 64 ? std::numeric_limits<int64_t>::max()
                          : std::numeric_limits<int32_t>::max()));
    return b.create<arith::XOrIOp>(loc, raw, flip);
  }

  /// For each thread's counts c[k] of the 16 digits, its first output slot
  /// of each digit: the keys of smaller digits in all threads, plus those of
  /// digit k in the threads before it. One warp scan per digit (shuffles),
  /// the warps' totals through shared memory ([k * warps + warp]), one
  /// barrier.
  SmallVector<Value> blockDigitSlots(ArrayRef<Value> counts) {
    Location loc = e.loc;
    const int64_t size = threads->size, w = threads->warp(),
                  warps = size / w, digits = counts.size();
    Value tid = threads->tid;
    Value lane = b.create<arith::RemSIOp>(loc, tid, e.i64(w));
    Value warp = b.create<arith::DivSIOp>(loc, tid, e.i64(w));
    SmallVector<Value> incl(counts.begin(), counts.end());
    for (int64_t d = 1; d < w; d *= 2) {
      Value has = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, lane,
                                          e.i64(d));
      for (int64_t k = 0; k < digits; ++k) {
        Value prev = threads->shuffle(incl[k], d, false);
        incl[k] = b.create<arith::SelectOp>(
            loc, has, b.create<arith::AddFOp>(loc, incl[k], prev), incl[k]);
      }
    }
    Value last = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane,
                                         e.i64(w - 1));
    IndexOps(e).when(last, [&] {
      for (int64_t k = 0; k < digits; ++k)
        storeShared(incl[k],
                    b.create<arith::AddIOp>(loc, warp, e.i64(k * warps)));
    });
    threads->barrier();
    SmallVector<Value> slots;
    Value base = e.fconst(0.0);
    for (int64_t k = 0; k < digits; ++k) {
      // The same digit in this warp's lanes before this one, and in the
      // warps before this one; then all of the digit.
      Value mine = b.create<arith::SubFOp>(loc, incl[k], counts[k]);
      Value total = e.fconst(0.0);
      for (int64_t v = 0; v < warps; ++v) {
        Value t = loadShared(e.i64(k * warps + v));
        Value earlier = b.create<arith::CmpIOp>(
            loc, arith::CmpIPredicate::sgt, warp, e.i64(v));
        mine = b.create<arith::SelectOp>(
            loc, earlier, b.create<arith::AddFOp>(loc, mine, t), mine);
        total = b.create<arith::AddFOp>(loc, total, t);
      }
      slots.push_back(b.create<arith::AddFOp>(loc, base, mine));
      base = b.create<arith::AddFOp>(loc, base, total);
    }
    return slots;
  }

  /// The rank's sort as a block of threads runs it (the GPU's seq kernels;
  /// before 2026-11-26 thread 0 ran emitRankSort alone, 38 ms for SAPO at
  /// 4096 x 4096 on an H200): the same stable LSD radix sort of the same
  /// keys, on 4-bit digits (8 passes in f32, 16 in f64, so the sorted pair
  /// ends in the first arrays), with the sequence cut into one contiguous
  /// chunk per thread, in token order. Per pass:
  ///   each thread counts its chunk's digits (16 counters in registers);
  ///   a block-wide scan of the 16 counts (blockDigitSlots: one barrier)
  ///     gives each thread its first output slot for each digit: the keys
  ///     of smaller digits (all threads) and of the same digit in the
  ///     threads before it;
  ///   each thread scatters its chunk in token order. Stable, as chunks are
  ///     in token order: the ranks are emitRankSort's exactly.
  /// Then rank[start + P[k]] = k per chunk. Every barrier is reached by all
  /// threads (trip counts depend on the sequence only); the caller's
  /// barrier follows.
  void emitRankSortBlock(RankOp rank) {
    Location loc = e.loc;
    const unsigned bits = e.ft.getIntOrFloatBitWidth();
    const unsigned passes = bits / 4;
    constexpr int64_t digits = 16;
    Type it = b.getIntegerType(bits);
    Abi::RankScratch sc = abi.rankScratch.lookup(rank.getOperation());
    Value keys[2] = {e.args[abi.storage.lookup(rank.getResult())],
                     e.args[sc.keysB]};
    Value perm[2] = {e.args[sc.permA], e.args[sc.permB]};
    auto at = [&](Value i) { return b.create<arith::AddIOp>(loc, start, i); };
    auto min = [&](Value x, Value y) {
      return b.create<arith::MinSIOp>(loc, x, y);
    };
    IndexOps ix(e);
    const int64_t size = threads->size;
    Value chunk = b.create<arith::DivSIOp>(
        loc, b.create<arith::AddIOp>(loc, len, e.i64(size - 1)), e.i64(size));
    Value c0 = min(b.create<arith::MulIOp>(loc, threads->tid, chunk), len);
    Value c1 = min(b.create<arith::AddIOp>(loc, c0, chunk), len);
    ix.each(c0, c1, [&](Value i) {
      Value t = at(i);
      e.store(rankKey(evalTok(rank.getInput(), t)), keys[0], t);
      e.store(e.toFloat(i), perm[0], t);
    });
    threads->barrier();
    for (unsigned p = 0; p < passes; ++p) {
      Value srcK = keys[p % 2], dstK = keys[1 - p % 2];
      Value srcP = perm[p % 2], dstP = perm[1 - p % 2];
      auto digitOf = [&](Value key) -> Value {
        Value sh = b.create<arith::ShRUIOp>(
            loc, key,
            b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, 4 * p)));
        Value dig = b.create<arith::AndIOp>(
            loc, sh, b.create<arith::ConstantOp>(loc, b.getIntegerAttr(it, 15)));
        return bits == 64 ? dig
                          : b.create<arith::ExtUIOp>(loc, b.getI64Type(), dig)
                                .getResult();
      };
      // This thread's count of each digit (floats: exact below 2^24).
      SmallVector<Value> zeros(digits, e.fconst(0.0));
      SmallVector<Value> counts = ix.range(
          c0, c1, zeros, [&](Value i, ValueRange acc) -> SmallVector<Value> {
            Value dig = digitOf(e.load(srcK, at(i), it));
            SmallVector<Value> next;
            for (int64_t k = 0; k < digits; ++k) {
              Value is = b.create<arith::CmpIOp>(
                  loc, arith::CmpIPredicate::eq, dig, e.i64(k));
              next.push_back(b.create<arith::SelectOp>(
                  loc, is, b.create<arith::AddFOp>(loc, acc[k], e.fconst(1.0)),
                  acc[k]));
            }
            return next;
          });
      // Its first slot of each digit (the end-of-pass barrier frees the
      // shared memory again).
      SmallVector<Value> slots = blockDigitSlots(counts);
      ix.range(c0, c1, slots,
               [&](Value i, ValueRange slot) -> SmallVector<Value> {
                 Value t = at(i);
                 Value key = e.load(srcK, t, it);
                 Value dig = digitOf(key);
                 Value pos = slot[0];
                 SmallVector<Value> next;
                 for (int64_t k = 0; k < digits; ++k) {
                   Value is = b.create<arith::CmpIOp>(
                       loc, arith::CmpIPredicate::eq, dig, e.i64(k));
                   if (k)
                     pos = b.create<arith::SelectOp>(loc, is, slot[k], pos);
                   next.push_back(b.create<arith::SelectOp>(
                       loc, is,
                       b.create<arith::AddFOp>(loc, slot[k], e.fconst(1.0)),
                       slot[k]));
                 }
                 Value out =
                     at(b.create<arith::FPToSIOp>(loc, b.getI64Type(), pos));
                 e.store(key, dstK, out);
                 e.store(e.load(srcP, t, e.ft), dstP, out);
                 return next;
               });
      threads->barrier();
    }
    // Ranks from the sorted permutation (in perm[0]: an even pass count).
    ix.each(c0, c1, [&](Value k) {
      Value p = e.load(perm[0], at(k), e.ft);
      Value pos = b.create<arith::FPToSIOp>(loc, b.getI64Type(), p);
      e.store(e.toFloat(k), keys[0], at(pos));
    });
  }

  /// rank[t] = #{u : x[u] > x[t] or (x[u] == x[t] and u < t)}, the position
  /// of token t when the sequence is sorted by x descending, ties by the lower
  /// index. An LSD radix sort of (key, position) pairs per sequence, one byte
  /// of the key per pass (4 passes in f32, 8 in f64), O(T) per pass:
  ///   key  d = the float's bits, ordered so that a larger x gives a smaller
  ///        unsigned d (-0.0 is made +0.0 first, so the two tie; every NaN
  ///        +NaN, which sorts before +inf, as in torch.sort(descending=True));
  ///   one loop writes K = d (in the rank's own buffer), P[t] = t - start and
  ///   the byte histograms of every pass (a [passes x 256] i32 array on the
  ///   stack, zeroed per sequence);
  ///   each pass turns its histogram into offsets and scatters (K, P) by the
  ///   byte, in token order (stable: ties keep the lower index first), from
  ///   one pair of arrays to the other; a pass whose byte is the same for
  ///   every key is skipped;
  ///   rank[start + P[k]] = k (the keys are dead by then).
  /// It replaced a bottom-up merge sort whose merge steps were bound by a
  /// chain of dependent loads: SAPO at 256 x 4096 took ~60 ms, see
  /// docs/benchmarks.md. Positions are stored as floats: exact below 2^24
  /// tokens per sequence in f32.
  void emitRankSort(RankOp rank) {
    Location loc = e.loc;
    MLIRContext *ctx = b.getContext();
    auto ptrTy = LLVM::LLVMPointerType::get(ctx);
    const unsigned bits = e.ft.getIntOrFloatBitWidth();
    const unsigned passes = bits / 8;
    Type it = b.getIntegerType(bits);
    Type i32 = b.getI32Type();
    Value keysA = e.args[abi.storage.lookup(rank.getResult())];
    Abi::RankScratch sc = abi.rankScratch.lookup(rank.getOperation());
    Value keysB = e.args[sc.keysB], permA = e.args[sc.permA],
          permB = e.args[sc.permB];
    Value zero = e.i64(0), one = e.i64(1);
    auto at = [&](Value i) { return b.create<arith::AddIOp>(loc, start, i); };
    auto iconst = [&](Type t, int64_t v) -> Value {
      return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
    };
    IndexOps ix(e);
    // The histograms: [passes x 256] i32 in the function's entry block (an
    // alloca in the unit loop would grow the stack per unit).
    Value hist;
    {
      Operation *fn = b.getInsertionBlock()->getParentOp();
      while (!isa<func::FuncOp, gpu::GPUFuncOp>(fn))
        fn = fn->getParentOp();
      OpBuilder ab = OpBuilder::atBlockBegin(&fn->getRegion(0).front());
      Value n = ab.create<arith::ConstantOp>(
          loc, ab.getI64IntegerAttr(int64_t(passes) * 256));
      hist = ab.create<LLVM::AllocaOp>(loc, ptrTy, i32, n, /*alignment=*/16);
    }
    auto digit = [&](Value d, unsigned p) -> Value {
      Value sh = b.create<arith::ShRUIOp>(loc, d, iconst(it, 8 * p));
      Value byte = b.create<arith::AndIOp>(loc, sh, iconst(it, 255));
      Value idx = bits == 64 ? byte
                             : b.create<arith::ExtUIOp>(loc, b.getI64Type(),
                                                        byte).getResult();
      return b.create<arith::AddIOp>(loc, idx, e.i64(int64_t(p) * 256));
    };
    auto bump = [&](Value slot) {
      Value c = e.load(hist, slot, i32);
      e.store(b.create<arith::AddIOp>(loc, c, iconst(i32, 1)), hist, slot);
      return c;
    };
    // Zeroed histograms.
    ix.range(zero, e.i64(int64_t(passes) * 256), {},
            [&](Value h, ValueRange) -> SmallVector<Value> {
              e.store(iconst(i32, 0), hist, h);
              return {};
            });
    // Keys, the identity permutation and the histograms of every byte.
    ix.range(zero, len, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
      Value t = at(i);
      Value d = rankKey(evalTok(rank.getInput(), t));
      e.store(d, keysA, t);
      e.store(e.toFloat(i), permA, t);
      for (unsigned p = 0; p < passes; ++p)
        bump(digit(d, p));
      return {};
    });
    // The passes, from (keys, perm) of `flipped` to the other pair.
    Value flipped = iconst(b.getI1Type(), 0);
    Value lenI32 = b.create<arith::TruncIOp>(loc, i32, len);
    for (unsigned p = 0; p < passes; ++p) {
      Value srcK = b.create<arith::SelectOp>(loc, flipped, keysB, keysA);
      Value dstK = b.create<arith::SelectOp>(loc, flipped, keysA, keysB);
      Value srcP = b.create<arith::SelectOp>(loc, flipped, permB, permA);
      Value dstP = b.create<arith::SelectOp>(loc, flipped, permA, permB);
      // Needed unless the sequence is shorter than 2 or every key has the
      // first key's byte.
      Value longer = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt,
                                             len, one);
      auto need = b.create<scf::IfOp>(loc, TypeRange{b.getI1Type()}, longer,
                                      /*withElse=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&need.getThenRegion().front());
        Value d0 = e.load(srcK, start, it);
        Value c = e.load(hist, digit(d0, p), i32);
        b.create<scf::YieldOp>(
            loc, ValueRange{b.create<arith::CmpIOp>(
                     loc, arith::CmpIPredicate::ne, c, lenI32)});
        b.setInsertionPointToStart(&need.getElseRegion().front());
        b.create<scf::YieldOp>(loc, ValueRange{iconst(b.getI1Type(), 0)});
      }
      Value run = need.getResult(0);
      auto pass = b.create<scf::IfOp>(loc, run, /*withElse=*/false);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&pass.getThenRegion().front());
        // Exclusive prefix sums: the byte's first output slot.
        ix.range(e.i64(int64_t(p) * 256), e.i64(int64_t(p + 1) * 256),
                {iconst(i32, 0)},
                [&](Value h, ValueRange acc) -> SmallVector<Value> {
                  Value c = e.load(hist, h, i32);
                  e.store(acc[0], hist, h);
                  return {b.create<arith::AddIOp>(loc, acc[0], c)};
                });
        ix.range(zero, len, {}, [&](Value i, ValueRange) -> SmallVector<Value> {
          Value t = at(i);
          Value d = e.load(srcK, t, it);
          Value pos = b.create<arith::ExtSIOp>(loc, b.getI64Type(),
                                               bump(digit(d, p)));
          Value out = at(pos);
          e.store(d, dstK, out);
          e.store(e.load(srcP, t, e.ft), dstP, out);
          return {};
        });
      }
      flipped = b.create<arith::XOrIOp>(loc, flipped, run);
    }
    // Ranks from the sorted permutation, into the rank's buffer.
    Value sorted = b.create<arith::SelectOp>(loc, flipped, permB, permA);
    ix.range(zero, len, {}, [&](Value k, ValueRange) -> SmallVector<Value> {
      Value p = e.load(sorted, at(k), e.ft);
      Value pos = b.create<arith::FPToSIOp>(loc, b.getI64Type(), p);
      e.store(e.toFloat(k), keysA, at(pos));
      return {};
    });
  }

  Value reduceInit(ReduceOp red) {
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
  Value reduceStep(ReduceOp red, Value acc, Value x, Value t) {
    switch (red.getKind()) {
    case ReduceKind::Sum:
    case ReduceKind::Mean:
      // On the CPU the sum may be reassociated, so that LLVM's loop
      // vectorizer keeps partial sums in vector lanes: without it a loop
      // holding a sum (an objective's loss, GSPO's sequence ratio) stays
      // scalar, stores and all. The GPU's sums are block reductions.
      if (cpu)
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
      Value first = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq,
                                            t, start);
      return b.create<arith::SelectOp>(e.loc, first, x, acc);
    }
    case ReduceKind::Last: {
      Value last = b.create<arith::CmpIOp>(
          e.loc, arith::CmpIPredicate::eq, t,
          b.create<arith::SubIOp>(e.loc, end, e.i64(1)));
      return b.create<arith::SelectOp>(e.loc, last, x, acc);
    }
    case ReduceKind::Count:
      return b.create<arith::AddFOp>(e.loc, acc, e.fconst(1.0));
    default:
      llvm_unreachable("not a token -> seq reduction");
    }
  }

  Value reduceFinish(ReduceOp red, Value acc) {
    if (red.getKind() != ReduceKind::Mean)
      return acc;
    Value n = e.toFloat(b.create<arith::MaxSIOp>(e.loc, len, e.i64(1)));
    return b.create<arith::DivFOp>(e.loc, acc, n);
  }

  Value evalOuter(Value v) {
    auto it = outerMemo.find(v);
    if (it != outerMemo.end())
      return it->second;
    Value r = computeOuter(v);
    outerMemo[v] = r;
    return r;
  }

  Value computeOuter(Value v) {
    Operation *op = v.getDefiningOp();
    if (!inKernel(v)) {
      Domain d = domainOf(v);
      if (d == Domain::Scalar)
        return e.scalar(v);
      assert(d == Domain::Seq || d == Domain::Group);
      return e.loadBuffer(v, d == Domain::Group ? group : unit);
    }
    if (isa<LengthOp>(op))
      return e.toFloat(len);
    if (isa<ReduceOp>(op))
      llvm_unreachable("reduction read before its loop was emitted");
    SmallVector<Value> x;
    for (Value o : op->getOperands())
      x.push_back(evalOuter(o));
    return e.elementwise(op, x);
  }

  Value evalTok(Value v, Value t) {
    auto key = std::make_pair(v, t);
    auto it = tokenMemo.find(key);
    if (it != tokenMemo.end())
      return it->second;
    Value r = computeTok(v, t);
    tokenMemo[key] = r;
    return r;
  }

  Value computeTok(Value v, Value t) {
    Domain d = domainOf(v);
    if (d != Domain::Token)
      return evalOuter(v);
    if (!inKernel(v)) {
      if (tileLoads)
        tileLoads->insert(v);
      return e.loadBuffer(v, t);
    }
    Operation *op = v.getDefiningOp();
    if (isa<ScanOp, RankOp>(op)) {
      if (tileLoads && threads->prefetchWritten)
        tileLoads->insert(v);
      return e.loadBuffer(v, t);
    }
    if (isa<PositionOp>(op))
      return e.toFloat(b.create<arith::SubIOp>(e.loc, t, start));
    if (auto s = dyn_cast<ShiftOp>(op)) {
      // I64Attr accessors return uint64_t: read the offset as signed, or
      // `prev` (-1) would be taken for a forward shift.
      int64_t offset = int64_t(s.getOffset());
      if (auto it = back.find(t); it != back.end() && offset == backOffset) {
        // In range (see emitLoop): the previous token of the iteration, or
        // the token before the iteration.
        Value t2 = it->second ? it->second
                              : b.create<arith::AddIOp>(e.loc, t,
                                                        e.i64(offset));
        return evalTok(s.getOperand(), t2);
      }
      Value t2 = b.create<arith::AddIOp>(e.loc, t, e.i64(offset));
      Value in = offset > 0
                     ? b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt,
                                               t2, end)
                     : b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::sge,
                                               t2, start);
      Value tc = b.create<arith::SelectOp>(e.loc, in, t2, t);
      Value a = evalTok(s.getOperand(), tc);
      Value f = evalTok(s.getFill(), t);
      return b.create<arith::SelectOp>(e.loc, in, a, f);
    }
    if (auto bc = dyn_cast<BroadcastOp>(op)) {
      Domain from = domainOf(bc.getOperand());
      if (from == Domain::Node) // an earlier node kernel stored it
        return e.loadBuffer(bc.getOperand(), e.loadI32AsI64(kTokenNode, t));
      return from == Domain::Token ? evalTok(bc.getOperand(), t)
                                   : evalOuter(bc.getOperand());
    }
    if (auto g = dyn_cast<SegGatherOp>(op)) {
      // Segment j of sequence b is at seq_offsets[b] + j (docs/bundle.md);
      // j never exceeds the token's position, so the index stays inside the
      // sequence's slots.
      Value idx = b.create<arith::FPToSIOp>(e.loc, b.getI64Type(),
                                            evalTok(g.getIndex(), t));
      Value at = b.create<arith::AddIOp>(e.loc, start, idx);
      return e.load(e.args[abi.storage.lookup(g.getInput())], at, e.ft);
    }
    if (auto cmp = dyn_cast<CmpOp>(op)) {
      // Positions against lengths (is_last, is_first, position < k) on the
      // CPU: compared as the integers they are, not as floats, so that LLVM
      // sees a condition on the induction variable (and peels the iteration
      // it holds in) instead of a conversion and a float compare per token.
      // The GPU keeps the float compare: on an H200, GAE's kernel with i64
      // compares (or i32 ones) ran 2-5% slower at 16.8M tokens, though its
      // SASS had fewer instructions (docs/benchmarks.md, 2026-11-26).
      Value l = cpu ? intTok(cmp.getLhs(), t) : Value();
      Value r = l ? intTok(cmp.getRhs(), t) : l;
      if (l && r)
        return b.create<arith::CmpIOp>(e.loc, intPredicate(cmp), l, r);
    }
    SmallVector<Value> x;
    for (Value o : op->getOperands())
      x.push_back(evalTok(o, t));
    return e.elementwise(op, x);
  }

  static arith::CmpIPredicate intPredicate(CmpOp cmp) {
    switch (cmp.getPredicate()) {
    case CmpPredicate::LT:
      return arith::CmpIPredicate::slt;
    case CmpPredicate::LE:
      return arith::CmpIPredicate::sle;
    case CmpPredicate::GT:
      return arith::CmpIPredicate::sgt;
    case CmpPredicate::GE:
      return arith::CmpIPredicate::sge;
    case CmpPredicate::EQ:
      return arith::CmpIPredicate::eq;
    case CmpPredicate::NE:
      return arith::CmpIPredicate::ne;
    }
    llvm_unreachable("unknown predicate");
  }

  /// `v` at token `t` as an i64, where it is an integer by construction:
  /// the token's position, the sequence's length, integral literals, and
  /// sums and differences of these; a null Value otherwise. (Their floats
  /// are exact below 2^24 tokens a sequence, so the comparison is the same.)
  Value intTok(Value v, Value t) {
    Operation *op = v.getDefiningOp();
    if (!op)
      return Value();
    if (auto c = dyn_cast<ConstantOp>(op)) {
      auto f = dyn_cast<FloatAttr>(c.getValue());
      if (!f)
        return Value();
      double d = f.getValueAsDouble();
      if (d != std::floor(d) || std::fabs(d) > 9.0e15)
        return Value();
      return e.i64(int64_t(d));
    }
    if (!inKernel(v))
      return Value();
    if (isa<PositionOp>(op))
      return b.create<arith::SubIOp>(e.loc, t, start);
    if (isa<LengthOp>(op))
      return len;
    if (auto bc = dyn_cast<BroadcastOp>(op))
      return intTok(bc.getOperand(), t);
    if (auto bin = dyn_cast<BinaryOp>(op)) {
      if (bin.getKind() != BinaryKind::Add && bin.getKind() != BinaryKind::Sub)
        return Value();
      Value x = intTok(bin.getLhs(), t);
      Value y = x ? intTok(bin.getRhs(), t) : x;
      if (!y)
        return Value();
      if (bin.getKind() == BinaryKind::Add)
        return b.create<arith::AddIOp>(e.loc, x, y);
      return b.create<arith::SubIOp>(e.loc, x, y);
    }
    return Value();
  }

  Emitter &e;
  OpBuilder &b;
  KernelOp kernel;
  const Abi &abi;
  ArrayRef<std::pair<Value, unsigned>> tokenStores, seqStores;
  const BlockThreads *threads;
  ArrayRef<KernelOp> fusedGroups;
  /// The CPU target (not the GPU, nor its simulation): positions and
  /// lengths are compared as integers, token -> seq sums are reassociable.
  bool cpu;
  std::vector<Loop> loops;
  DenseMap<Operation *, size_t> loopOf;
  DenseSet<std::pair<Value, unsigned>> placedStores;
  Value unit, start, end, len, group;
  DenseMap<Value, Value> outerMemo;
  DenseMap<std::pair<Value, Value>, Value> tokenMemo;
  /// In a CPU loop past its first token: each token of the iteration -> the
  /// token one step back, already computed in this iteration (null for the
  /// iteration's first token: one step back is the previous iteration's).
  DenseMap<Value, Value> back;
  int64_t backOffset = 0;
  /// While a tile's body is emitted: the token buffers it reads.
  llvm::SetVector<Value> *tileLoads = nullptr;
};

//===----------------------------------------------------------------------===//
// group kernels
//===----------------------------------------------------------------------===//

class GroupKernelEmitter {
public:
  GroupKernelEmitter(Emitter &e, KernelOp kernel, const Abi &abi,
                     ArrayRef<std::pair<Value, unsigned>> stores)
      : e(e), b(e.b), kernel(kernel), stores(stores) {}

  void emit(Value unit) {
    e.anchor = e.i64(0).getDefiningOp();
    compute(unit);
    for (auto [v, buf] : stores)
      e.storeBuffer(buf, eval(v), group);
  }

  /// The kernel's reductions and values for group `unit`, at the insertion
  /// point (scalars go to the caller's anchor).
  void compute(Value unit) {
    group = unit;
    mstart = e.loadI32AsI64(kGroupOffsets, unit);
    Value next = b.create<arith::AddIOp>(e.loc, unit, e.i64(1));
    mend = e.loadI32AsI64(kGroupOffsets, next);
    n = b.create<arith::SubIOp>(e.loc, mend, mstart);
    nf = e.toFloat(n);

    SmallVector<ReduceOp> reds;
    for (Operation &op : kernel.getBody().front())
      if (auto r = dyn_cast<ReduceOp>(op))
        reds.push_back(r);
    // Pass 1: sums, minima, maxima, first and last members.
    SmallVector<ReduceOp> pass1(reds), pass2;
    for (ReduceOp r : reds)
      if (isSecondPass(r.getKind()))
        pass2.push_back(r);
    SmallVector<Value> acc1 = memberLoop(pass1, /*secondPass=*/false);
    for (auto [r, a] : llvm::zip(pass1, acc1))
      means[r] = finishFirst(r, a);
    if (!pass2.empty()) {
      SmallVector<Value> acc2 = memberLoop(pass2, /*secondPass=*/true);
      for (auto [r, a] : llvm::zip(pass2, acc2))
        memo[r.getResult()] = finishSecond(r, a);
    }
    for (ReduceOp r : pass1)
      if (!isSecondPass(r.getKind()))
        memo[r.getResult()] = means[r];
  }

  /// A value of the kernel (after compute).
  Value value(Value v) { return eval(v); }

  /// Runs the member loops over the threads of a block: thread `tid` of
  /// `size` takes every size-th member, and `combine` (called by every
  /// thread at the same point) combines the threads' partials of a
  /// reduction of that kind.
  void inBlock(Value tid, int64_t size,
               std::function<Value(ReduceKind, Value)> combine) {
    blockTid = tid;
    blockSize = size;
    blockCombine = std::move(combine);
  }

private:
  static bool isSecondPass(ReduceKind k) {
    return k == ReduceKind::Var || k == ReduceKind::Std ||
           k == ReduceKind::VarUnbiased || k == ReduceKind::StdUnbiased;
  }

  SmallVector<Value> memberLoop(ArrayRef<ReduceOp> reds, bool secondPass) {
    SmallVector<Value> inits;
    for (ReduceOp r : reds) {
      if (!secondPass && r.getKind() == ReduceKind::Min)
        inits.push_back(e.fconst(std::numeric_limits<double>::infinity()));
      else if (!secondPass && r.getKind() == ReduceKind::Max)
        inits.push_back(e.fconst(-std::numeric_limits<double>::infinity()));
      else
        inits.push_back(e.fconst(0.0));
    }
    // In a block (fused into a seq kernel on the GPU) thread tid takes
    // members tid, tid + size, ... and the block combines the partials:
    // a member's value and the first/last selections are 0 elsewhere, so
    // they combine as sums like the rest.
    Value lo = blockCombine ? blockTid : e.i64(0);
    Value step = blockCombine ? e.i64(blockSize) : e.i64(1);
    auto forOp = b.create<scf::ForOp>(e.loc, lo, n, step, inits);
    eraseImplicitYield(forOp);
    SmallVector<Value> results;
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(forOp.getBody());
      Value j = forOp.getInductionVar();
      Value member = e.loadI32AsI64(kGroupMembers,
                                    b.create<arith::AddIOp>(e.loc, mstart, j));
      SmallVector<Value> yields;
      for (auto [k, rc] : llvm::enumerate(reds)) {
        ReduceOp r = rc;
        Value acc = forOp.getRegionIterArgs()[k];
        Value x = seqAt(r.getOperand(), member);
        Value next;
        if (secondPass) {
          Value d = b.create<arith::SubFOp>(e.loc, x, means[r]);
          next = b.create<arith::AddFOp>(e.loc, acc,
                                         b.create<arith::MulFOp>(e.loc, d, d));
        } else {
          switch (r.getKind()) {
          case ReduceKind::Min:
            next = b.create<arith::MinimumFOp>(e.loc, acc, x);
            break;
          case ReduceKind::Max:
            next = b.create<arith::MaximumFOp>(e.loc, acc, x);
            break;
          case ReduceKind::Count:
            next = b.create<arith::AddFOp>(e.loc, acc, e.fconst(1.0));
            break;
          case ReduceKind::First: {
            Value c = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq,
                                              j, e.i64(0));
            next = b.create<arith::SelectOp>(e.loc, c, x, acc);
            break;
          }
          case ReduceKind::Last: {
            Value c = b.create<arith::CmpIOp>(
                e.loc, arith::CmpIPredicate::eq, j,
                b.create<arith::SubIOp>(e.loc, n, e.i64(1)));
            next = b.create<arith::SelectOp>(e.loc, c, x, acc);
            break;
          }
          default: // Sum, Mean and the first pass of Var/Std: a sum.
            next = b.create<arith::AddFOp>(e.loc, acc, x);
            break;
          }
        }
        yields.push_back(next);
      }
      b.create<scf::YieldOp>(e.loc, yields);
    }
    for (auto [k, rc] : llvm::enumerate(reds)) {
      ReduceOp r = rc;
      Value acc = forOp.getResult(k);
      if (blockCombine) {
        bool asSum = r.getKind() == ReduceKind::First ||
                     r.getKind() == ReduceKind::Last || secondPass;
        acc = blockCombine(asSum ? ReduceKind::Sum : r.getKind(), acc);
      }
      results.push_back(acc);
    }
    return results;
  }

  /// After pass 1: the reduction's value, or for Var/Std the group mean.
  Value finishFirst(ReduceOp r, Value acc) {
    switch (r.getKind()) {
    case ReduceKind::Mean:
    case ReduceKind::Var:
    case ReduceKind::Std:
    case ReduceKind::VarUnbiased:
    case ReduceKind::StdUnbiased: {
      Value denom = e.toFloat(b.create<arith::MaxSIOp>(e.loc, n, e.i64(1)));
      return b.create<arith::DivFOp>(e.loc, acc, denom);
    }
    default:
      return acc;
    }
  }

  Value finishSecond(ReduceOp r, Value ss) {
    bool unbiased = r.getKind() == ReduceKind::VarUnbiased ||
                    r.getKind() == ReduceKind::StdUnbiased;
    Value cnt = unbiased ? b.create<arith::SubIOp>(e.loc, n, e.i64(1)) : n;
    Value denom = e.toFloat(b.create<arith::MaxSIOp>(e.loc, cnt, e.i64(1)));
    Value var = b.create<arith::DivFOp>(e.loc, ss, denom);
    if (r.getKind() == ReduceKind::Std ||
        r.getKind() == ReduceKind::StdUnbiased)
      return b.create<math::SqrtOp>(e.loc, var);
    return var;
  }

  /// A seq value at member sequence `seq` (defined before this kernel).
  Value seqAt(Value v, Value seq) {
    if (domainOf(v) == Domain::Scalar)
      return e.scalar(v);
    return e.loadBuffer(v, seq);
  }

  Value eval(Value v) {
    auto it = memo.find(v);
    if (it != memo.end())
      return it->second;
    Operation *op = v.getDefiningOp();
    Value r;
    if (op->getParentOp() != kernel.getOperation()) {
      if (domainOf(v) == Domain::Scalar)
        r = e.scalar(v);
      else
        r = e.loadBuffer(v, group);
    } else {
      SmallVector<Value> x;
      for (Value o : op->getOperands())
        x.push_back(eval(o));
      r = e.elementwise(op, x);
    }
    memo[v] = r;
    return r;
  }

  Emitter &e;
  OpBuilder &b;
  KernelOp kernel;
  ArrayRef<std::pair<Value, unsigned>> stores;
  Value group, mstart, mend, n, nf;
  Value blockTid;
  int64_t blockSize = 1;
  std::function<Value(ReduceKind, Value)> blockCombine;
  llvm::DenseMap<ReduceOp, Value> means;
  DenseMap<Value, Value> memo;
};

void SeqKernelEmitter::emitFusedGroups() {
  for (KernelOp g : fusedGroups) {
    bool read = llvm::any_of(g.getResults(), [&](Value r) {
      return llvm::any_of(r.getUsers(), [&](Operation *u) {
        return u->getParentOfType<KernelOp>() == kernel;
      });
    });
    if (!read)
      continue;
    GroupKernelEmitter ge(e, g, abi, {});
    if (threads)
      ge.inBlock(threads->tid, threads->size,
                 [&](ReduceKind k, Value acc) { return blockReduce(k, acc); });
    ge.compute(group);
    auto yield = cast<YieldOp>(g.getBody().front().getTerminator());
    for (auto [inner, outer] : llvm::zip(yield.getValues(), g.getResults()))
      outerMemo[outer] = ge.value(inner);
  }
}

//===----------------------------------------------------------------------===//
// node kernels
//===----------------------------------------------------------------------===//

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
                    return SmallVector<Value>{b.create<arith::SelectOp>(
                        e.loc, root, add(n[0], one), n[0])};
                  })[0];
    Value reached =
        range(zero, K, {roots}, [&](Value h, ValueRange n) {
          Value next = ifElse(
              cmpI(P::slt, h, n[0]),
              [&] {
                Value k = idx(t.order, h);
                return range(startOf(t.childEnd, k), idx(t.childEnd, k),
                             {n[0]}, [&](Value c, ValueRange nn) {
                               setIdx(t.order, nn[0], idx(t.children, c));
                               return SmallVector<Value>{add(nn[0], one)};
                             })[0];
              },
              [&] { return n[0]; });
          return SmallVector<Value>{next};
        })[0];
    // Nodes not reached from a root (a cycle; the batch loaders reject
    // them) keep an empty subtree.
    each(zero, K, [&](Value k) {
      setIdx(t.size, k, zero);
      setIdx(t.pre, k, zero);
    });
    // Subtree sizes, children before parents (reverse breadth-first).
    each(zero, reached, [&](Value i) {
      Value k = idx(t.order, sub(sub(reached, one), i));
      Value sz = range(startOf(t.childEnd, k), idx(t.childEnd, k), {one},
                       [&](Value c, ValueRange acc) {
                         return SmallVector<Value>{add(
                             acc[0], idx(t.size, idx(t.children, c)))};
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

/// One unit per tree node. Node values from earlier kernels are read from
/// their buffers at any node; structure comes from `node_parent` and the
/// TreeBuilder kernel's arrays (Abi::TreeScratch): a node's children, the
/// nodes of its subtree and the sequences whose leaves lie in it are ranges
/// there. So num_children is O(1), child_mean O(children), tree_mean
/// O(subtree nodes * depth) and the path reductions O(sequences in the
/// subtree): a batch's node kernels do O(K * depth^2 + B * depth) work in
/// all, not O(K^2) (they scanned every node or sequence per node before,
/// 260 ms for SPO-tree at 8192 sequences on the CPU; docs/benchmarks.md).
class NodeKernelEmitter {
public:
  NodeKernelEmitter(Emitter &e, KernelOp kernel, const Abi &abi,
                    ArrayRef<std::pair<Value, unsigned>> stores)
      : e(e), b(e.b), ix(e), t(*abi.tree), kernel(kernel),
        stores(stores) {}

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
      Block *before = b.createBlock(&loop.getBefore(), {}, {i64, e.ft},
                                    {e.loc, e.loc});
      Value a = before->getArgument(0);
      Value go = b.create<arith::AndIOp>(
          e.loc, ix.cmpI(arith::CmpIPredicate::sge, a, e.i64(0)),
          ix.cmpI(arith::CmpIPredicate::ne, a, node));
      b.create<scf::ConditionOp>(e.loc, go, before->getArguments());
      Block *after = b.createBlock(&loop.getAfter(), {}, {i64, e.ft},
                                   {e.loc, e.loc});
      Value p = parentOf(after->getArgument(0));
      Value w = after->getArgument(1);
      if (nc) {
        Value hasParent = ix.cmpI(arith::CmpIPredicate::sge, p, e.i64(0));
        Value safe = b.create<arith::SelectOp>(e.loc, hasParent, p, e.i64(0));
        Value divided =
            b.create<arith::DivFOp>(e.loc, w, atNode(nc, safe));
        w = b.create<arith::SelectOp>(e.loc, hasParent, divided, w);
      }
      b.create<scf::YieldOp>(e.loc, ValueRange{p, w});
    }
    Value reached =
        ix.cmpI(arith::CmpIPredicate::eq, loop.getResult(0), node);
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
      auto acc = ix.range(childBegin, childEnd, {zero, zero},
                          [&](Value i, ValueRange a) {
                            Value x = atNode(c.getOperand(),
                                             ix.idx(t.children, i));
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
        Value leaf = b.create<arith::CmpFOp>(
            e.loc, arith::CmpFPredicate::OEQ,
            atNode(tm.getNumChildren(), m), zero);
        auto [reached, w] = walkUp(m, tm.getNumChildren());
        Value take = b.create<arith::AndIOp>(e.loc, leaf, reached);
        Value x = b.create<arith::MulFOp>(
            e.loc, w, atNode(tm.getOperand(), m));
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
      Value last = k == PathReduceKind::LeafMean
                       ? preFirst
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
        return SmallVector<Value>{
            next, b.create<arith::AddFOp>(e.loc, a[1], one)};
      });
      if (k == PathReduceKind::SubtreeSum)
        return acc[0];
      if (k == PathReduceKind::SubtreeMax) {
        Value some = b.create<arith::CmpFOp>(
            e.loc, arith::CmpFPredicate::OGT, acc[1], zero);
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

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct LowerKernelsPass
    : public cac::impl::CacLowerKernelsBase<LowerKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (target != "cpu" && target != "cuda" && target != "cuda-sim") {
      module.emitError(
          "cac-lower-kernels: target must be cpu, cuda or cuda-sim, not '")
          << target << "'";
      return signalPassFailure();
    }
    if (!cac::isValidSeqBlock(seqBlock)) {
      module.emitError("cac-lower-kernels: seq-block must be 0 or a power "
                       "of 2 up to 1024, not ")
          << seqBlock.getValue();
      return signalPassFailure();
    }
    if (!cac::isValidSeqItems(seqItems)) {
      module.emitError("cac-lower-kernels: seq-items must be in [1, 16], not ")
          << seqItems.getValue();
      return signalPassFailure();
    }
    if (!cac::isValidSeqMinBlocks(seqMinBlocks)) {
      module.emitError("cac-lower-kernels: seq-min-blocks must be in [0, 32], "
                       "not ")
          << seqMinBlocks.getValue();
      return signalPassFailure();
    }
    if (!cac::isValidSeqLayout(seqLayout)) {
      module.emitError("cac-lower-kernels: seq-layout must be auto, blocked "
                       "or striped, not '")
          << seqLayout.getValue() << "'";
      return signalPassFailure();
    }
    SmallVector<EstimatorOp> ests(module.getOps<EstimatorOp>());
    if (ests.size() != 1) {
      module.emitError("expected exactly one cac.estimator");
      return signalPassFailure();
    }
    if (failed(lower(module, ests.front())))
      return signalPassFailure();
    ests.front().erase();
  }

  LogicalResult lower(ModuleOp module, EstimatorOp est) {
    Abi abi;
    for (unsigned i = 0; i < kNumFixed; ++i)
      abi.args.push_back(
          {kFixedNames[i], i < kSeqOffsets ? ArgKind::I64 : ArgKind::Ptr});
    Type ft;
    Block &body = est.getBodyBlock();

    // Inputs, then outputs, then scratch.
    for (auto in : body.getOps<InputOp>()) {
      abi.storage[in.getResult()] =
          abi.addBuffer(in.getName(), "input", domainOf(in.getResult()));
      ft = elemOf(in.getResult());
    }
    // Each output op gets a buffer; the value it writes is stored there.
    DenseMap<Operation *, unsigned> outputBuffer;
    est.walk([&](OutputOp out) {
      bool seg = out->hasAttr("cac.seg");
      unsigned arg = abi.addBuffer(out.getName(), "output",
                                   seg ? Domain::Seg : domainOf(out.getValue()));
      abi.buffers.back().segOnTokens = seg;
      outputBuffer[out] = arg;
      if (!abi.storage.count(out.getValue()))
        abi.storage[out.getValue()] = arg;
      ft = elemOf(out.getValue());
    });
    // With fuse-groups, a group kernel that reads only inputs and scalars,
    // writes no output and is read by seq kernels only is not emitted: the
    // seq kernels compute its values for their sequence's group.
    DenseSet<Operation *> fused;
    if (fuseGroups)
      for (auto kernel : body.getOps<KernelOp>()) {
        if (kernel.getGrid() != Domain::Group)
          continue;
        bool ok = true;
        kernel.walk([&](Operation *op) {
          if (isa<OutputOp>(op))
            ok = false;
          for (Value o : op->getOperands())
            if (Operation *def = o.getDefiningOp(); def && isa<KernelOp>(def))
              ok = false;
        });
        for (Value r : kernel.getResults())
          for (Operation *user : r.getUsers()) {
            auto uk = user->getParentOfType<KernelOp>();
            if (!uk || uk.getGrid() != Domain::Seq)
              ok = false;
          }
        if (ok)
          fused.insert(kernel);
      }
    // Kernel results read by later kernels, and scans, need storage.
    unsigned scratch = 0;
    auto newScratch = [&](Domain d) {
      return abi.addBuffer("_t" + std::to_string(scratch++), "scratch", d);
    };
    for (auto kernel : body.getOps<KernelOp>()) {
      if (kernel.getGrid() == Domain::Group)
        abi.needsGroups = true;
      if (fused.contains(kernel))
        continue;
      auto yield = cast<YieldOp>(kernel.getBody().front().getTerminator());
      for (auto [inner, outer] :
           llvm::zip(yield.getValues(), kernel.getResults())) {
        if (!abi.storage.count(inner))
          abi.storage[inner] = newScratch(domainOf(inner));
        abi.storage[outer] = abi.storage[inner];
      }
      kernel.walk([&](ScanOp s) {
        if (!abi.storage.count(s.getResult()))
          abi.storage[s.getResult()] = newScratch(Domain::Token);
      });
      kernel.walk([&](RankOp r) {
        if (!abi.storage.count(r.getResult()))
          abi.storage[r.getResult()] = newScratch(Domain::Token);
        unsigned pa = newScratch(Domain::Token);
        unsigned pb = newScratch(Domain::Token);
        abi.rankScratch[r] = {pa, pb, newScratch(Domain::Token)};
      });
      if (kernel.getGrid() == Domain::Group)
        abi.needsGroups = true;
      if (kernel.getGrid() == Domain::Node)
        abi.needsTree = true;
    }
    if (abi.needsTree) {
      auto nodeBuf = [&] { return newScratch(Domain::Node); };
      Abi::TreeScratch t;
      t.childEnd = nodeBuf();
      t.children = nodeBuf();
      t.order = nodeBuf();
      t.size = nodeBuf();
      t.pre = nodeBuf();
      t.preNode = nodeBuf();
      t.seqEnd = nodeBuf();
      t.seqByPre = newScratch(Domain::Seq);
      abi.tree = t;
    }
    for (auto &b : abi.buffers)
      abi.args.push_back({b.name, ArgKind::Ptr});
    for (auto p : body.getOps<ParamOp>()) {
      abi.paramArg[p.getResult()] = abi.args.size();
      abi.args.push_back({p.getName().str(), ArgKind::Param});
      std::optional<double> def;
      if (auto d = p.getDefaultValue())
        def = d->convertToDouble();
      abi.params.push_back({p.getName().str(), def});
      ft = elemOf(p.getResult());
    }
    if (!ft)
      ft = Float32Type::get(&getContext());
    // Any broadcast from group, or group kernel, needs the group arrays.
    est.walk([&](BroadcastOp bc) {
      if (domainOf(bc.getOperand()) == Domain::Group)
        abi.needsGroups = true;
    });

    OpBuilder b(&getContext());
    b.setInsertionPointToEnd(module.getBody());
    Location loc = est.getLoc();
    gpu::GPUModuleOp gpuModule;
    if (target == "cuda") {
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      b.getUnitAttr());
      gpuModule = b.create<gpu::GPUModuleOp>(loc, "cac_kernels");
    }
    // Seq kernels run a block per sequence (seq-block threads) on the GPU
    // and in its CPU simulation.
    const bool blockSeq = target != "cpu" && seqBlock > 0;
    if (blockSeq)
      declareBlockSupport(module, gpuModule, loc, ft);

    llvm::json::Array kernelsJson;
    if (abi.tree) {
      std::string name = est.getSymName().str() + "_tree";
      auto emitTree = [&](OpBuilder &ib, ArrayRef<Value> args, Value unit,
                          const BlockThreads *) {
        Emitter em(ib, loc, ft, args, abi);
        TreeBuilder(em, *abi.tree).emit(unit);
      };
      if (target != "cuda")
        emitCpuFunction(b, loc, name, abi, ft, emitTree);
      else
        emitGpuFunction(gpuModule, loc, name, abi, ft, emitTree, false);
      llvm::json::Object k;
      k["name"] = name;
      k["grid"] = "node";
      k["block"] = blockSize.getValue();
      k["unit"] = "thread";
      kernelsJson.push_back(std::move(k));
    }
    SmallVector<KernelOp> fusedKernels;
    for (auto kernel : body.getOps<KernelOp>())
      if (fused.contains(kernel))
        fusedKernels.push_back(kernel);
    // Kernels are named by their launch order (k0, k1, ..): a fused group
    // kernel leaves no gap.
    unsigned launched = 0;
    for (auto kernel : body.getOps<KernelOp>()) {
      if (fused.contains(kernel))
        continue;
      std::string name =
          est.getSymName().str() + "_k" + std::to_string(launched++);
      // What this kernel stores.
      SmallVector<std::pair<Value, unsigned>> tokenStores, outerStores;
      auto addStore = [&](Value v, unsigned buf) {
        (domainOf(v) == Domain::Token ? tokenStores : outerStores)
            .push_back({v, buf});
      };
      for (Operation &op : kernel.getBody().front())
        if (auto out = dyn_cast<OutputOp>(op))
          addStore(out.getValue(), outputBuffer[out]);
      auto yield = cast<YieldOp>(kernel.getBody().front().getTerminator());
      for (Value v : yield.getValues()) {
        unsigned buf = abi.storage.lookup(v);
        bool already = llvm::any_of(tokenStores, [&](auto &p) {
                         return p.first == v && p.second == buf;
                       }) ||
                       llvm::any_of(outerStores, [&](auto &p) {
                         return p.first == v && p.second == buf;
                       });
        if (!already)
          addStore(v, buf);
      }

      const bool perBlock = blockSeq && kernel.getGrid() == Domain::Seq;
      auto emitBody = [&](OpBuilder &ib, ArrayRef<Value> args, Value unit,
                          const BlockThreads *threads) {
        Emitter em(ib, kernel.getLoc(), ft, args, abi);
        if (kernel.getGrid() == Domain::Seq) {
          SeqKernelEmitter(em, kernel, abi, tokenStores, outerStores, threads,
                           fusedKernels, /*cpu=*/target == "cpu")
              .emit(unit);
        } else if (kernel.getGrid() == Domain::Node) {
          NodeKernelEmitter(em, kernel, abi, outerStores).emit(unit);
        } else {
          GroupKernelEmitter(em, kernel, abi, outerStores).emit(unit);
        }
      };

      if (target == "cuda")
        emitGpuFunction(gpuModule, kernel.getLoc(), name, abi, ft, emitBody,
                        perBlock);
      else if (perBlock)
        emitSimFunction(b, kernel.getLoc(), name, abi, ft, emitBody);
      else
        emitCpuFunction(b, kernel.getLoc(), name, abi, ft, emitBody);

      llvm::json::Object k;
      k["name"] = name;
      k["grid"] = stringifyDomain(kernel.getGrid()).str();
      k["block"] = perBlock ? seqBlock.getValue() : blockSize.getValue();
      k["unit"] = perBlock ? "block" : "thread";
      if (perBlock) {
        k["items"] = seqItems.getValue();
        k["layout"] = seqLayout.getValue();
      }
      kernelsJson.push_back(std::move(k));
    }

    module->setAttr("cac.manifest",
                    b.getStringAttr(manifest(est, abi, ft, kernelsJson)));
    return success();
  }

  using BodyFn = llvm::function_ref<void(OpBuilder &, ArrayRef<Value>,
                                         Value unit, const BlockThreads *)>;

  static constexpr const char *kSharedName = "cac_shared";
  static constexpr const char *kSimBarrier = cac::kSimBarrierSymbol;
  static constexpr const char *kSimWarpBarrier = cac::kSimWarpBarrierSymbol;

  /// What block kernels use: on the GPU a shared-memory array in the
  /// gpu.module; in the simulation the barrier function's declaration.
  void declareBlockSupport(ModuleOp module, gpu::GPUModuleOp gpuModule,
                           Location loc, Type ft) {
    auto ptrTy = LLVM::LLVMPointerType::get(module.getContext());
    if (gpuModule) {
      OpBuilder b = OpBuilder::atBlockBegin(gpuModule.getBody());
      auto arrTy = LLVM::LLVMArrayType::get(
          ft, uint64_t(cac::blockSharedElements(seqBlock)));
      auto g = b.create<LLVM::GlobalOp>(loc, arrTy, /*isConstant=*/false,
                                        LLVM::Linkage::Internal, kSharedName,
                                        Attribute(), /*alignment=*/16,
                                        /*addrSpace=*/3);
      (void)g;
      return;
    }
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    for (const char *name : {kSimBarrier, kSimWarpBarrier})
      b.create<LLVM::LLVMFuncOp>(
          loc, name,
          LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(b.getContext()),
                                      {ptrTy}));
  }

  Type argType(OpBuilder &b, const AbiArg &a, Type ft) {
    switch (a.kind) {
    case ArgKind::I64:
      return b.getI64Type();
    case ArgKind::Ptr:
      return LLVM::LLVMPointerType::get(b.getContext());
    case ArgKind::Param:
      return ft;
    }
    return {};
  }

  /// The arguments of a CPU entry, loaded from its void** array.
  SmallVector<Value> loadCpuArgs(OpBuilder &ib, Location loc, Value argv,
                                 const Abi &abi, Type ft) {
    auto ptrTy = LLVM::LLVMPointerType::get(ib.getContext());
    SmallVector<Value> args;
    for (auto [i, a] : llvm::enumerate(abi.args)) {
      Value idx = ib.create<arith::ConstantOp>(loc, ib.getI64IntegerAttr(i));
      Value slot =
          ib.create<LLVM::GEPOp>(loc, ptrTy, ptrTy, argv, ValueRange{idx});
      Value valuePtr = ib.create<LLVM::LoadOp>(loc, ptrTy, slot);
      args.push_back(
          ib.create<LLVM::LoadOp>(loc, argType(ib, a, ft), valuePtr));
    }
    return args;
  }

  /// A block kernel in the CPU simulation: `NAME(void** params, i64 tid,
  /// ptr shared, ptr barrier)`, called by `seq-block` threads at once with
  /// the same unit range; each unit ends with a barrier so that the next
  /// one may reuse shared memory.
  void emitSimFunction(OpBuilder &b, Location loc, StringRef name,
                       const Abi &abi, Type ft, BodyFn body) {
    auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
    auto fn = b.create<func::FuncOp>(
        loc, name,
        b.getFunctionType({ptrTy, b.getI64Type(), ptrTy, ptrTy}, {}));
    fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
    Block *entry = fn.addEntryBlock();
    OpBuilder ib = OpBuilder::atBlockBegin(entry);
    SmallVector<Value> args =
        loadCpuArgs(ib, loc, entry->getArgument(0), abi, ft);
    Value bar = entry->getArgument(3);
    BlockThreads threads;
    threads.size = seqBlock;
    threads.items = seqItems;
    threads.layout = layoutOf(seqLayout);
    threads.tid = entry->getArgument(1);
    threads.shared = entry->getArgument(2);
    Value one = ib.create<arith::ConstantOp>(loc, ib.getI64IntegerAttr(1));
    auto loop = ib.create<scf::ForOp>(loc, args[kUnitBegin], args[kUnitEnd],
                                      one);
    {
      OpBuilder lb = OpBuilder::atBlockBegin(loop.getBody());
      lb.setInsertionPoint(loop.getBody()->getTerminator());
      threads.barrier = [&lb, loc, bar] {
        lb.create<LLVM::CallOp>(loc, TypeRange{}, kSimBarrier,
                                ValueRange{bar});
      };
      // A shuffle through the exchange area of shared memory: each thread
      // writes its value, and after a barrier of its warp reads its source
      // lane's (another warp barrier before the area is written again). Only
      // the warp waits, as on the GPU, so a block barrier that the kernel
      // needs is not supplied by its shuffles.
      auto warpBarrier = [&lb, loc, bar] {
        lb.create<LLVM::CallOp>(loc, TypeRange{}, kSimWarpBarrier,
                                ValueRange{bar});
      };
      threads.shuffle = [&lb, loc, &threads, ft,
                         warpBarrier](Value v, int64_t delta,
                                      bool xorMode) -> Value {
        auto i64 = [&](int64_t x) -> Value {
          return lb.create<arith::ConstantOp>(loc, lb.getI64IntegerAttr(x));
        };
        Value tid = threads.tid;
        Value area = lb.create<LLVM::GEPOp>(
            loc, threads.shared.getType(), ft, threads.shared,
            ValueRange{i64(cac::blockExchangeOffset(threads.size))});
        auto at = [&](Value i) {
          return lb.create<LLVM::GEPOp>(loc, area.getType(), ft, area,
                                        ValueRange{i});
        };
        lb.create<LLVM::StoreOp>(loc, v, at(tid));
        warpBarrier();
        Value lane = lb.create<arith::RemSIOp>(loc, tid, i64(threads.warp()));
        Value src, valid;
        if (xorMode) {
          src = lb.create<arith::XOrIOp>(loc, tid, i64(delta));
          valid = lb.create<arith::ConstantOp>(loc, lb.getBoolAttr(true));
        } else {
          valid = lb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge,
                                           lane, i64(delta));
          src = lb.create<arith::SelectOp>(
              loc, valid, lb.create<arith::SubIOp>(loc, tid, i64(delta)),
              tid);
        }
        Value r = lb.create<LLVM::LoadOp>(loc, ft, at(src));
        warpBarrier();
        return lb.create<arith::SelectOp>(loc, valid, r, v);
      };
      body(lb, args, loop.getInductionVar(), &threads);
      threads.barrier();
    }
    ib.create<func::ReturnOp>(loc);
  }

  void emitCpuFunction(OpBuilder &b, Location loc, StringRef name,
                       const Abi &abi, Type ft, BodyFn body) {
    auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
    auto fn = b.create<func::FuncOp>(loc, name,
                                     b.getFunctionType({ptrTy}, {}));
    fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
    Block *entry = fn.addEntryBlock();
    OpBuilder ib = OpBuilder::atBlockBegin(entry);
    Value argv = entry->getArgument(0);
    SmallVector<Value> args = loadCpuArgs(ib, loc, argv, abi, ft);
    Value one = ib.create<arith::ConstantOp>(loc, ib.getI64IntegerAttr(1));
    auto loop = ib.create<scf::ForOp>(loc, args[kUnitBegin], args[kUnitEnd],
                                      one);
    {
      OpBuilder lb = OpBuilder::atBlockBegin(loop.getBody());
      lb.setInsertionPoint(loop.getBody()->getTerminator());
      body(lb, args, loop.getInductionVar(), nullptr);
    }
    ib.create<func::ReturnOp>(loc);
  }

  /// A gpu.func kernel. With `perBlock`, one block of seq-block threads per
  /// unit: unit = unit_begin + blockIdx.x; otherwise one thread per unit:
  /// unit = unit_begin + blockIdx.x * blockDim.x + threadIdx.x. Units at or
  /// past unit_end do nothing (a whole block at once with `perBlock`, so
  /// that its barriers are reached by all its threads or none).
  void emitGpuFunction(gpu::GPUModuleOp mod, Location loc, StringRef name,
                       const Abi &abi, Type ft, BodyFn body, bool perBlock) {
    OpBuilder b = OpBuilder::atBlockEnd(mod.getBody());
    b.setInsertionPoint(mod.getBody()->getTerminator());
    SmallVector<Type> types;
    for (const AbiArg &a : abi.args)
      types.push_back(argType(b, a, ft));
    auto fn = b.create<gpu::GPUFuncOp>(loc, name, b.getFunctionType(types, {}));
    fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    Block &entry = fn.getBody().front();
    OpBuilder ib = OpBuilder::atBlockBegin(&entry);
    SmallVector<Value> args(entry.getArguments().begin(),
                            entry.getArguments().end());
    auto i64 = [&](Value index) -> Value {
      return ib.create<arith::IndexCastOp>(loc, ib.getI64Type(), index);
    };
    Value tid = i64(ib.create<gpu::ThreadIdOp>(loc, gpu::Dimension::x));
    Value bid = i64(ib.create<gpu::BlockIdOp>(loc, gpu::Dimension::x));
    BlockThreads threads;
    Value lin = bid;
    if (perBlock) {
      // The launch must use exactly seq-block threads (.reqntid in PTX).
      fn.setKnownBlockSizeAttr(ib.getDenseI32ArrayAttr(
          {int32_t(seqBlock.getValue()), 1, 1}));
      if (seqMinBlocks > 0)
        fn->setAttr("nvvm.minctasm",
                    ib.getI32IntegerAttr(int32_t(seqMinBlocks.getValue())));
      threads.size = seqBlock;
      threads.items = seqItems;
      threads.layout = layoutOf(seqLayout);
      threads.prefetch = seqPrefetch;
      threads.prefetchWritten = seqPrefetchWritten;
      threads.tid = tid;
      auto shared = ib.create<LLVM::AddressOfOp>(
          loc, LLVM::LLVMPointerType::get(ib.getContext(), 3), kSharedName);
      threads.shared = shared;
    } else {
      Value bdim = i64(ib.create<gpu::BlockDimOp>(loc, gpu::Dimension::x));
      lin = ib.create<arith::AddIOp>(
          loc, ib.create<arith::MulIOp>(loc, bid, bdim), tid);
    }
    Value unit = ib.create<arith::AddIOp>(loc, args[kUnitBegin], lin);
    Value inRange = ib.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt,
                                             unit, args[kUnitEnd]);
    auto ifOp = ib.create<scf::IfOp>(loc, inRange, /*withElse=*/false);
    {
      OpBuilder tb = ifOp.getThenBodyBuilder();
      threads.barrier = [&tb, loc] { tb.create<gpu::BarrierOp>(loc); };
      const int64_t width = threads.warp();
      threads.shuffle = [&tb, loc, width](Value v, int64_t delta,
                                          bool xorMode) -> Value {
        auto i32 = [&](int64_t x) -> Value {
          return tb.create<arith::ConstantOp>(loc, tb.getI32IntegerAttr(x));
        };
        auto sh = tb.create<gpu::ShuffleOp>(
            loc, v, i32(delta), i32(width),
            xorMode ? gpu::ShuffleMode::XOR : gpu::ShuffleMode::UP);
        return tb.create<arith::SelectOp>(loc, sh.getValid(),
                                          sh.getShuffleResult(), v);
      };
      body(tb, args, unit, perBlock ? &threads : nullptr);
    }
    ib.create<gpu::ReturnOp>(loc);
  }

  std::string manifest(EstimatorOp est, const Abi &abi, Type ft,
                       llvm::json::Array &kernels) {
    llvm::json::Object m;
    m["format"] = "cac-bundle-1";
    m["estimator"] = est.getSymName().str();
    if (auto fl = dyn_cast<FileLineColLoc>(est.getLoc()))
      m["source"] = fl.getFilename().str();
    std::string dtype = ft.isF64() ? "f64" : "f32";
    m["dtype"] = dtype;
    llvm::json::Array needs;
    if (abi.needsGroups)
      needs.push_back("groups");
    if (abi.needsTree)
      needs.push_back("tree");
    m["needs"] = std::move(needs);
    if (auto obj = est->getAttrOfType<DictionaryAttr>("cac.objective")) {
      // The host scales `loss` and `grad_<wrt>` (docs/language.md).
      std::string wrt = cast<StringAttr>(obj.get("wrt")).str();
      m["objective"] = llvm::json::Object{
          {"wrt", wrt},
          {"gradient", "grad_" + wrt},
          {"loss_domain", cast<StringAttr>(obj.get("loss_domain")).str()}};
    }
    llvm::json::Array bufs;
    for (const Buffer &bf : abi.buffers) {
      llvm::json::Object o{{"name", bf.name},
                           {"role", bf.role},
                           {"domain", stringifyDomain(bf.domain).str()},
                           {"dtype", dtype}};
      if (bf.domain == Domain::Seg)
        o["layout"] = bf.segOnTokens ? "by-token" : "by-segment";
      bufs.push_back(std::move(o));
    }
    m["buffers"] = std::move(bufs);
    llvm::json::Array params;
    for (auto &[name, def] : abi.params) {
      llvm::json::Object p{{"name", name}};
      p["default"] = def ? llvm::json::Value(*def) : llvm::json::Value(nullptr);
      params.push_back(std::move(p));
    }
    m["params"] = std::move(params);
    llvm::json::Array args;
    for (const AbiArg &a : abi.args) {
      const char *kind = a.kind == ArgKind::I64   ? "i64"
                         : a.kind == ArgKind::Ptr ? "ptr"
                                                  : "param";
      llvm::json::Object o{{"name", a.name}, {"kind", kind}};
      if (a.kind == ArgKind::Param)
        o["dtype"] = dtype;
      args.push_back(std::move(o));
    }
    m["args"] = std::move(args);
    m["kernels"] = std::move(kernels);
    std::string s;
    llvm::raw_string_ostream os(s);
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(m)));
    return os.str();
  }
};

} // namespace
