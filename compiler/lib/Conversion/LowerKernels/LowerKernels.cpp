//===- LowerKernels.cpp - The cac-lower-kernels pass ----------------------===//
//
// Each `cac.kernel` of a partitioned estimator becomes one function over its
// grid units (docs/bundle.md, docs/pipeline.md): CPU functions, CUDA
// kernels or the CPU simulation of the CUDA kernels, by the `target` option.
// LowerKernelsImpl.h lists the parts.
//
//===----------------------------------------------------------------------===//

#include "LowerKernelsImpl.h"
#include "cac/Conversion/BlockKernels.h"

namespace cac {
#define GEN_PASS_DEF_CACLOWERKERNELS
#include "cac/Conversion/Passes.h.inc"
} // namespace cac

using namespace mlir;
using namespace cac::ir;

namespace {

struct LowerKernelsPass
    : public cac::impl::CacLowerKernelsBase<LowerKernelsPass> {
  using Base::Base;

  /// The options as one struct, or failure (reported) if one is invalid.
  FailureOr<cac::CacLowerKernelsOptions> options(ModuleOp module) {
    auto fail = [&](StringRef what) {
      module.emitError("cac-lower-kernels: ") << what;
      return failure();
    };
    if (target != "cpu" && target != "cuda" && target != "cuda-sim")
      return fail("target must be cpu, cuda or cuda-sim, not '" + target + "'");
    if (!cac::isValidSeqBlock(seqBlock))
      return fail("seq-block must be 0 or a power of 2 up to 1024, not " +
                  std::to_string(seqBlock.getValue()));
    if (!cac::isValidSeqItems(seqItems))
      return fail("seq-items must be in [1, 16], not " +
                  std::to_string(seqItems.getValue()));
    if (!cac::isValidSeqMinBlocks(seqMinBlocks))
      return fail("seq-min-blocks must be in [0, 32], not " +
                  std::to_string(seqMinBlocks.getValue()));
    if (!cac::isValidSeqLayout(seqLayout))
      return fail("seq-layout must be auto, blocked or striped, not '" +
                  seqLayout + "'");
    cac::CacLowerKernelsOptions o;
    o.target = target;
    o.blockSize = blockSize;
    o.seqBlock = seqBlock;
    o.seqItems = seqItems;
    o.seqPrefetch = seqPrefetch;
    o.seqPrefetchWritten = seqPrefetchWritten;
    o.seqMinBlocks = seqMinBlocks;
    o.seqLayout = seqLayout;
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
