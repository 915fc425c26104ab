//===- KernelTarget.h - What differs between CPU, CUDA and gpu-sim -*- C++
//-*-===//
//
// The kernel emitters are written once; what a target decides is asked of
// its KernelTarget: how a kernel function is created (and the thread ids
// and unit it hands the body), block barriers and warp shuffles, the L2
// prefetch, and the arithmetic policies (integer compares, reassociable
// sums). Three targets: CpuTarget.cpp (`cpu`), CudaTarget.cpp (`cuda`) and
// GpuSimTarget.cpp (`cuda-sim`, the CUDA kernels as CPU functions run by
// simulated threads).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_KERNELTARGET_H
#define CAC_CONVERSION_LOWERKERNELS_KERNELTARGET_H

#include "Abi.h"
#include "cac/Conversion/Passes.h"

#include "mlir/IR/Builders.h"

#include <memory>

namespace cac::lowering {

/// The options of cac-lower-kernels (Passes.td).
using LowerOptions = cac::CacLowerKernelsOptions;

class KernelTarget;
class Emitter;

/// The threads of a block that work on one unit together. On the GPU they
/// are the block's threads, with shared memory and bar.sync; in the CPU
/// simulation (target cuda-sim) they are simulated threads (cac::
/// simulateBlock) that run the same function, each with its own `tid`, and
/// meet in `cac_sim_barrier`.
struct BlockThreads {
  BlockThreads(const KernelTarget &target, OpBuilder &b, Location loc)
      : target(target), b(b), loc(loc) {}

  const KernelTarget &target;
  /// The builder of the kernel's body, where barriers and shuffles go.
  OpBuilder &b;
  Location loc;
  int64_t size = 0;  ///< threads per block, a power of 2
  int64_t items = 1; ///< tokens per thread in a tile
  /// Which tokens of a tile thread tid takes, for j < items: j * size + tid
  /// (striped) or tid * items + j (blocked); auto: striped in loops without
  /// a scan, blocked in loops with one.
  enum class Layout { Blocked, Striped, Auto } layout = Layout::Auto;
  /// Each tile asks L2 for the next tile's tokens of every buffer the loop
  /// reads (KernelTarget::prefetchL2).
  bool prefetch = false;
  /// With prefetch: also the buffers the kernel wrote in an earlier loop.
  bool prefetchWritten = true;
  Value tid;    ///< i64 in [0, size)
  Value shared; ///< blockSharedElements(size) elements of the float type
  /// The simulation's barrier handle (the function's `barrier` argument).
  Value barrierHandle;

  /// Lanes per warp: 32, or the whole block when it is smaller.
  int64_t warp() const { return std::min<int64_t>(32, size); }
  /// Waits for all threads of the block.
  void barrier() const;
  /// The value `v` (a float) of lane `lane - delta` of the warp, or of lane
  /// `lane ^ delta` with `xorMode`; lanes with lane < delta get their own
  /// `v` back. All threads of the block call it at the same point.
  Value shuffle(Value v, int64_t delta, bool xorMode) const;
};

BlockThreads::Layout layoutOf(StringRef name);

/// Builds a kernel's body at the builder's insertion point for unit `unit`,
/// with the function's arguments `args`; `threads` is the unit's block, or
/// null when one thread runs the unit.
using BodyFn = llvm::function_ref<void(OpBuilder &, ArrayRef<Value>, Value unit,
                                       const BlockThreads *)>;

class KernelTarget {
public:
  KernelTarget(const LowerOptions &o, Type ft) : o(o), ft(ft) {}
  virtual ~KernelTarget() = default;

  /// Whether seq kernels run one block of threads per sequence.
  virtual bool blockPerSequence() const = 0;
  /// Positions and lengths compared as the integers they are, so that LLVM
  /// sees conditions on the induction variable.
  virtual bool integerCompares() const = 0;
  /// Token -> seq sums may be reassociated (vectorized partial sums).
  virtual bool reassociableSums() const = 0;
  /// A one-thread loop of token stores that reads node values takes chunks
  /// of this many tokens, each checked for one node (NodeRuns.cpp); 0: one
  /// token at a time.
  virtual int64_t nodeRunChunk() const { return 0; }
  /// A one-thread loop of scans takes chunks of this many tokens (a
  /// multiple of 4), each walked three times: the scans' inputs, the scans,
  /// the stores and sums that read them (ChunkedScans.cpp); 0: one walk.
  virtual int64_t scanChunk() const { return 0; }
  /// A one-thread loop carries its scans and sums of 0/1 values as integers
  /// and replays such scans of earlier loops instead of loading them
  /// (IntegerScans.cpp).
  virtual bool integerCounts() const { return false; }

  /// Prepares `module` before any kernel is created (at the end of its
  /// body, from `b`): containers, and what block kernels use.
  virtual void prepareModule(ModuleOp module, OpBuilder &b, Location loc) = 0;
  /// Creates kernel function `name` running `body` per unit: one block per
  /// unit with `perBlock` (seq kernels of a block-per-sequence target),
  /// else one thread.
  virtual void createKernel(OpBuilder &b, Location loc, StringRef name,
                            const Abi &abi, BodyFn body, bool perBlock) = 0;

  /// A barrier of all the block's threads.
  virtual void barrier(const BlockThreads &t) const = 0;
  /// A warp shuffle (BlockThreads::shuffle).
  virtual Value shuffle(const BlockThreads &t, Value v, int64_t delta,
                        bool xorMode) const = 0;
  /// Asks L2 for the line holding `addr` (an i64); only where
  /// BlockThreads::prefetch is set.
  virtual void prefetchL2(OpBuilder &b, Location loc, Value addr) const {}

protected:
  /// The block of a block-per-sequence kernel, with the options' shape.
  BlockThreads blockOf(OpBuilder &b, Location loc) const;

  const LowerOptions &o;
  Type ft;
};

/// Combines the partials `acc` of a reduction of kind `kind` over the
/// threads of a block (BlockPrimitives.cpp); every thread gets the result.
/// All threads call it at the same point.
Value blockReduce(Emitter &e, const BlockThreads &threads, ReduceKind kind,
                  Value acc);

/// The target named by `o.target` (cpu, cuda or cuda-sim), or null.
std::unique_ptr<KernelTarget> createKernelTarget(const LowerOptions &o,
                                                 Type ft);
std::unique_ptr<KernelTarget> createCpuTarget(const LowerOptions &o, Type ft);
std::unique_ptr<KernelTarget> createCudaTarget(const LowerOptions &o, Type ft);
std::unique_ptr<KernelTarget> createGpuSimTarget(const LowerOptions &o,
                                                 Type ft);

/// A CPU function `void NAME(void** params)` that loops over [unit_begin,
/// unit_end) with one thread (the CPU target's kernels, and the simulation's
/// kernels with one thread per unit).
void createCpuFunction(OpBuilder &b, Location loc, StringRef name,
                       const Abi &abi, Type ft, BodyFn body);
/// The arguments of a CPU entry, loaded from its void** array.
SmallVector<Value> loadCpuArgs(OpBuilder &ib, Location loc, Value argv,
                               const Abi &abi, Type ft);
/// The type of argument `a` in a kernel's signature.
Type argType(OpBuilder &b, const AbiArg &a, Type ft);

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_KERNELTARGET_H
