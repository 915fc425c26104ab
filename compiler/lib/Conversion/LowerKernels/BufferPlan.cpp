//===- BufferPlan.cpp - Arguments and buffers of a bundle's kernels -------===//
//
// Inputs, then outputs, then scratch (kernel results that later kernels
// read, scans, ranks' sort buffers, the tree's arrays), then parameters: the
// order of the bundle's buffers and arguments (docs/bundle.md).
//
//===----------------------------------------------------------------------===//

#include "Abi.h"

using namespace mlir;
using namespace cac::ir;

namespace cac::lowering {

/// The tree's scratch arrays (Abi::TreeScratch), in this order.
static Abi::TreeScratch planTree(llvm::function_ref<unsigned(Domain)> scratch) {
  auto nodeBuf = [&] { return scratch(Domain::Node); };
  Abi::TreeScratch t;
  t.childEnd = nodeBuf();
  t.children = nodeBuf();
  t.order = nodeBuf();
  t.size = nodeBuf();
  t.pre = nodeBuf();
  t.preNode = nodeBuf();
  t.seqEnd = nodeBuf();
  t.seqByPre = scratch(Domain::Seq);
  t.seqScatter = scratch(Domain::Seq);
  return t;
}

/// Kernel results read by later kernels, and scans and ranks, need storage.
static void planScratch(Block &body, const llvm::DenseSet<Operation *> &fused,
                        bool split, Abi &abi) {
  unsigned scratch = 0;
  auto newScratch = [&](Domain d) {
    return abi.addBuffer("_t" + std::to_string(scratch++), BufferRole::Scratch, d);
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
    // The sweep that computes a tree_mean reads the children's values back.
    kernel.walk([&](TreeMeanOp tm) {
      if (!abi.storage.count(tm.getResult()))
        abi.storage[tm.getResult()] = newScratch(Domain::Node);
    });
    kernel.walk([&](RankOp r) {
      if (topKBound(r)) {
        unsigned pos = newScratch(Domain::Token);
        abi.rankScratch[r] = {pos, pos, newScratch(Domain::Token)};
        return;
      }
      if (!abi.storage.count(r.getResult()))
        abi.storage[r.getResult()] = newScratch(Domain::Token);
      unsigned pa = newScratch(Domain::Token);
      unsigned pb = newScratch(Domain::Token);
      abi.rankScratch[r] = {pa, pb, newScratch(Domain::Token)};
    });
    if (kernel.getGrid() == Domain::Node)
      abi.needsTree = true;
    if (split && splittable(kernel))
      kernel.walk(
          [&](ScanOp s) { abi.splitCarries[s] = newScratch(Domain::Token); });
  }
  if (abi.needsTree)
    abi.tree = planTree(newScratch);
}

Abi planAbi(EstimatorOp est, const llvm::DenseSet<Operation *> &fused,
            bool split) {
  Abi abi;
  for (const cac::abi::FixedArgInfo &f : cac::abi::kFixedArgs)
    abi.args.push_back({f.name, f.kind});
  Type ft;
  Block &body = est.getBodyBlock();
  for (auto in : body.getOps<InputOp>()) {
    abi.storage[in.getResult()] =
        abi.addBuffer(in.getName(), BufferRole::Input, domainOf(in.getResult()));
    ft = elemOf(in.getResult());
  }
  // Each output op gets a buffer; the value it writes is stored there.
  est.walk([&](OutputOp out) {
    bool seg = out->hasAttr("cac.seg");
    unsigned arg = abi.addBuffer(out.getName(), BufferRole::Output,
                                 seg ? Domain::Seg : domainOf(out.getValue()));
    abi.buffers.back().segOnTokens = seg;
    abi.outputBuffer[out] = arg;
    if (!abi.storage.count(out.getValue()))
      abi.storage[out.getValue()] = arg;
    ft = elemOf(out.getValue());
  });
  planScratch(body, fused, split, abi);
  for (auto &b : abi.buffers)
    abi.args.push_back({b.name, ArgKind::Ptr});
  for (auto p : body.getOps<ParamOp>()) {
    abi.paramArg[p.getResult()] = abi.args.size();
    abi.args.push_back({p.getName().str(), ArgKind::Scalar});
    std::optional<double> def;
    if (auto d = p.getDefaultValue())
      def = d->convertToDouble();
    abi.params.push_back({p.getName().str(), def});
    ft = elemOf(p.getResult());
  }
  abi.floatType = ft ? ft : Float32Type::get(est.getContext());
  // Any broadcast from group, group kernel, or read across the group needs
  // the group arrays.
  est.walk([&](Operation *op) {
    if (auto bc = dyn_cast<BroadcastOp>(op);
        bc && domainOf(bc.getOperand()) == Domain::Group)
      abi.needsGroups = true;
    if (isa<GroupRankOp, GroupPosSumOp, GroupKeyOp>(op))
      abi.needsGroups = true;
  });
  return abi;
}

} // namespace cac::lowering
