//===- LowerKernels.cpp - The cac-lower-kernels pass ----------------------===//
//
// Each `cac.kernel` of a partitioned estimator becomes one function over its
// grid units (docs/bundle.md, docs/pipeline.md): CPU functions, CUDA
// kernels or the CPU simulation of the CUDA kernels, by the `target` option.
// LowerKernelsImpl.h lists the parts.
//
//===----------------------------------------------------------------------===//

#include "LowerKernelsImpl.h"

namespace cac {
#define GEN_PASS_DEF_CACLOWERKERNELS
#include "cac/Conversion/Passes.h.inc"
} // namespace cac

using namespace mlir;
using namespace cac::ir;

std::string cac::lowerKernelsOptionsError(const CacLowerKernelsOptions &o) {
  auto isPowerOf2 = [](int64_t x) { return x > 0 && (x & (x - 1)) == 0; };
  if (o.target != "cpu" && o.target != "cuda" && o.target != "cuda-sim")
    return "target must be cpu, cuda or cuda-sim, not '" + o.target + "'";
  if (o.seqBlock < 0 || o.seqBlock > 1024 ||
      (o.seqBlock != 0 && !isPowerOf2(o.seqBlock)))
    return "seq-block must be 0 or a power of 2 up to 1024, not " +
           std::to_string(o.seqBlock);
  if (o.seqItems < 1 || o.seqItems > 16)
    return "seq-items must be in [1, 16], not " + std::to_string(o.seqItems);
  if (o.seqMinBlocks < 0 || o.seqMinBlocks > 32)
    return "seq-min-blocks must be in [0, 32], not " +
           std::to_string(o.seqMinBlocks);
  if (o.seqSplit < 0 || o.seqSplit > (int64_t(1) << 30))
    return "seq-split must be in [0, 2^30], not " + std::to_string(o.seqSplit);
  if (o.seqLayout != "auto" && o.seqLayout != "blocked" &&
      o.seqLayout != "striped")
    return "seq-layout must be auto, blocked or striped, not '" + o.seqLayout +
           "'";
  return "";
}

namespace {

struct LowerKernelsPass
    : public cac::impl::CacLowerKernelsBase<LowerKernelsPass> {
  using Base::Base;

  /// The options as one struct, or failure (reported) if one is invalid.
  FailureOr<cac::CacLowerKernelsOptions> options(ModuleOp module) {
    cac::CacLowerKernelsOptions o;
    o.target = target;
    o.blockSize = blockSize;
    o.seqBlock = seqBlock;
    o.seqItems = seqItems;
    o.seqPrefetch = seqPrefetch;
    o.seqPrefetchWritten = seqPrefetchWritten;
    o.seqMinBlocks = seqMinBlocks;
    o.seqLayout = seqLayout;
    o.seqSplit = seqSplit;
    if (std::string err = cac::lowerKernelsOptionsError(o); !err.empty()) {
      module.emitError("cac-lower-kernels: ") << err;
      return failure();
    }
    return o;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<cac::CacLowerKernelsOptions> o = options(module);
    if (failed(o))
      return signalPassFailure();
    SmallVector<EstimatorOp> ests(module.getOps<EstimatorOp>());
    if (ests.size() != 1) {
      module.emitError("expected exactly one cac.estimator");
      return signalPassFailure();
    }
    if (failed(cac::lowering::lowerEstimator(module, ests.front(), *o)))
      return signalPassFailure();
    ests.front().erase();
  }
};

} // namespace
