//===- CpuTarget.cpp - The CPU target -------------------------------------===//
//
// `void NAME(void** params)` functions, one thread walking each unit; no
// blocks. Positions and lengths are compared as integers, so that LLVM sees
// conditions on the induction variable (and peels the iteration they hold
// in) instead of a conversion and a float compare per token; token -> seq
// sums may be reassociated, so that LLVM's loop vectorizer keeps partial
// sums in vector lanes (without it a loop holding a sum, an objective's loss
// or GSPO's sequence ratio, stays scalar, stores and all); counts of 0/1
// values (segment indices, cutpoint counts) are carried as integers; loops
// of scans take chunks, so that their other work is vectorized.
//
//===----------------------------------------------------------------------===//

#include "KernelTarget.h"

namespace cac::lowering {
namespace {

class CpuTarget : public KernelTarget {
public:
  using KernelTarget::KernelTarget;

  bool blockPerSequence() const override { return false; }
  bool integerCompares() const override { return true; }
  bool reassociableSums() const override { return true; }
  /// 16 nodes are one 64-byte line of token_node.
  int64_t nodeRunChunk() const override { return 16; }
  bool integerCounts() const override { return true; }
  /// 256 floats an array: the chunk's inputs and values stay in L1.
  int64_t scanChunk() const override { return 256; }

  void prepareModule(ModuleOp, OpBuilder &, Location) override {}
  void createKernel(OpBuilder &b, Location loc, StringRef name, const Abi &abi,
                    BodyFn body, bool perBlock) override {
    assert(!perBlock && "the CPU has no blocks");
    createCpuFunction(b, loc, name, abi, ft, body);
  }

  void barrier(const BlockThreads &) const override {
    llvm_unreachable("the CPU has no blocks");
  }
  Value shuffle(const BlockThreads &, Value, int64_t, bool) const override {
    llvm_unreachable("the CPU has no blocks");
  }
};

} // namespace

std::unique_ptr<KernelTarget> createCpuTarget(const LowerOptions &o, Type ft) {
  return std::make_unique<CpuTarget>(o, ft);
}

} // namespace cac::lowering
