//===- KernelEmission.cpp - One function per kernel -----------------------===//
//
// Each `cac.kernel` of the estimator becomes one function over its grid
// units; a bundle with node kernels gets the tree builder first. Kernels are
// named by launch order, NAME_k0, NAME_k1, ...: a fused group kernel leaves
// no gap.
//
//===----------------------------------------------------------------------===//

#include "GroupKernel.h"
#include "LowerKernelsImpl.h"
#include "SeqKernel.h"
#include "TreeKernels.h"
#include "cac/Dialect/Cac/Transforms/Passes.h"

namespace cac::lowering {
namespace {

/// Where the functions go and how they are shaped.
struct Lowering {
  ModuleOp module;
  EstimatorOp est;
  const LowerOptions &o;
  const Abi &abi;
  ArrayRef<KernelOp> fusedKernels;
  OpBuilder &b;
  KernelTarget &target;

  cac::abi::KernelSpec emitTree();
  cac::abi::KernelSpec emitKernel(KernelOp kernel, StringRef name,
                                  bool carries = false);
};

/// Whether seq-split is on with a block of at least two tokens per tile
/// (a part before the last one then holds its carries' two numbers).
bool splitEnabled(const LowerOptions &o) {
  return o.seqSplit > 0 && o.seqBlock > 0 && o.seqBlock * o.seqItems >= 2;
}

/// Whether `kernel` gets the NAME_carries kernel before it: a split kernel
/// with a scan.
bool needsCarries(const LowerOptions &o, KernelOp kernel) {
  if (!splitEnabled(o) || !splittable(kernel))
    return false;
  bool scans = false;
  kernel.walk([&](ScanOp) { scans = true; });
  return scans;
}

} // namespace

/// What kernel `kernel` stores: its outputs and the values later kernels
/// read, token values apart from the others.
static void storesOf(KernelOp kernel, const Abi &abi,
                     SmallVectorImpl<Store> &tokenStores,
                     SmallVectorImpl<Store> &outerStores) {
  auto addStore = [&](Value v, unsigned buf) {
    (domainOf(v) == Domain::Token ? tokenStores : outerStores)
        .push_back({v, buf});
  };
  for (Operation &op : kernel.getBody().front())
    if (auto out = dyn_cast<OutputOp>(op))
      addStore(out.getValue(), abi.outputBuffer.lookup(out));
  auto yield = cast<YieldOp>(kernel.getBody().front().getTerminator());
  for (Value v : yield.getValues()) {
    unsigned buf = abi.storage.lookup(v);
    bool already = llvm::any_of(tokenStores,
                                [&](auto &p) {
                                  return p.first == v && p.second == buf;
                                }) ||
                   llvm::any_of(outerStores, [&](auto &p) {
                     return p.first == v && p.second == buf;
                   });
    if (!already)
      addStore(v, buf);
  }
}

cac::abi::KernelSpec Lowering::emitTree() {
  std::string name = est.getSymName().str() + "_tree";
  Location loc = est.getLoc();
  Type ft = abi.floatType;
  // One unit for the batch: a block where seq kernels run in blocks, so
  // that its threads split the passes and meet at barriers.
  const bool perBlock = target.blockPerSequence();
  auto emitBody = [&](OpBuilder &ib, ArrayRef<Value> args, Value,
                      const BlockThreads *threads) {
    Emitter em(ib, loc, ft, args, abi);
    emitTreeBuilder(em, *abi.tree, threads);
  };
  target.createKernel(b, loc, name, abi, emitBody, perBlock);
  int64_t threads = perBlock ? o.seqBlock : o.blockSize;
  return {name,     cac::abi::Grid::Batch, threads,
          perBlock, std::nullopt,          std::nullopt};
}

/// Kernel `kernel` as function `name`; with `carries`, its NAME_carries
/// kernel instead (SeqSplit.cpp), which the CPU, one thread per sequence,
/// does not need: its function there does nothing.
cac::abi::KernelSpec Lowering::emitKernel(KernelOp kernel, StringRef name,
                                          bool carries) {
  SmallVector<Store> tokenStores, outerStores;
  storesOf(kernel, abi, tokenStores, outerStores);
  Type ft = abi.floatType;
  // A batch kernel's one unit is a block too: its threads split the
  // sequences.
  const bool perBlock =
      target.blockPerSequence() &&
      (kernel.getGrid() == Domain::Seq || kernel.getGrid() == Domain::Batch);
  const bool split = perBlock && splitEnabled(o) && splittable(kernel);
  auto emitBody = [&](OpBuilder &ib, ArrayRef<Value> args, Value unit,
                      const BlockThreads *threads) {
    if (carries && !split)
      return;
    Emitter em(ib, kernel.getLoc(), ft, args, abi);
    if (kernel.getGrid() == Domain::Seq) {
      SeqKernelEmitter se(em, kernel, abi, target, tokenStores, outerStores,
                          threads, fusedKernels);
      if (split)
        se.splitInto(o.seqSplit, carries);
      se.emit(unit);
    } else if (kernel.getGrid() == Domain::Node) {
      emitNodeKernel(em, kernel, abi, outerStores, unit);
    } else if (kernel.getGrid() == Domain::Batch) {
      GroupKernelEmitter ge(em, kernel, outerStores);
      Value storer;
      if (threads) {
        ge.inBlock(threads->tid, threads->size,
                   [&, threads](ReduceKind k, Value acc) {
                     return blockReduce(em, *threads, k, acc);
                   });
        storer = ib.create<arith::CmpIOp>(
            kernel.getLoc(), arith::CmpIPredicate::eq, threads->tid, em.i64(0));
      }
      ge.emitBatch(storer);
    } else {
      GroupKernelEmitter(em, kernel, outerStores).emit(unit);
    }
  };
  target.createKernel(b, kernel.getLoc(), name, abi, emitBody, perBlock);
  cac::abi::KernelSpec k{name.str(),
                         *cac::abi::gridOf(toAbi(kernel.getGrid())),
                         perBlock ? o.seqBlock : o.blockSize,
                         perBlock,
                         std::nullopt,
                         std::nullopt};
  if (perBlock && kernel.getGrid() == Domain::Seq) {
    k.items = o.seqItems;
    k.layout = o.seqLayout;
  }
  if (split) {
    k.split = o.seqSplit;
    k.carries = carries;
  }
  return k;
}

/// The group kernels that cac-fuse-groups marked: the seq kernels that read
/// them compute their values.
static FailureOr<llvm::DenseSet<Operation *>> fusedGroups(EstimatorOp est) {
  llvm::DenseSet<Operation *> fused;
  for (auto kernel : est.getBodyBlock().getOps<KernelOp>()) {
    if (!kernel->hasAttr(kFusedAttrName))
      continue;
    if (!isFusableGroupKernel(kernel))
      return kernel.emitOpError(
          "is marked cac.fused but is not a group kernel that reads no other "
          "kernel, writes no output and is read by seq kernels only");
    fused.insert(kernel);
  }
  return fused;
}

LogicalResult lowerEstimator(ModuleOp module, EstimatorOp est,
                             const LowerOptions &o) {
  FailureOr<llvm::DenseSet<Operation *>> marked = fusedGroups(est);
  if (failed(marked))
    return failure();
  const llvm::DenseSet<Operation *> &fused = *marked;
  Abi abi = planAbi(est, fused, splitEnabled(o));
  Block &body = est.getBodyBlock();
  OpBuilder b(module.getContext());
  b.setInsertionPointToEnd(module.getBody());
  std::unique_ptr<KernelTarget> target = createKernelTarget(o, abi.floatType);
  if (!target)
    return module.emitError("cac-lower-kernels: unknown target '")
           << o.target << "'";
  target->prepareModule(module, b, est.getLoc());
  SmallVector<KernelOp> fusedKernels;
  for (auto kernel : body.getOps<KernelOp>())
    if (fused.contains(kernel))
      fusedKernels.push_back(kernel);
  Lowering lowering{module, est, o, abi, fusedKernels, b, *target};
  std::vector<cac::abi::KernelSpec> kernels;
  if (abi.tree)
    kernels.push_back(lowering.emitTree());
  unsigned launched = 0;
  for (auto kernel : body.getOps<KernelOp>()) {
    if (fused.contains(kernel))
      continue;
    std::string name =
        est.getSymName().str() + "_k" + std::to_string(launched++);
    if (needsCarries(o, kernel))
      kernels.push_back(lowering.emitKernel(kernel, name + "_carries",
                                            /*carries=*/true));
    kernels.push_back(lowering.emitKernel(kernel, name));
  }
  module->setAttr("cac.manifest",
                  b.getStringAttr(manifestText(est, abi, std::move(kernels))));
  return success();
}

} // namespace cac::lowering
