//===- Schedule.h - The loops of a seq kernel -------------------*- C++ -*-===//
//
// A seq kernel's scans, ranks, token -> seq reductions and token stores,
// scheduled greedily into as few loops over the sequence as their
// dependences allow. The schedule depends on the kernel and on where values
// are stored only, not on the target.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_SCHEDULE_H
#define CAC_CONVERSION_LOWERKERNELS_SCHEDULE_H

#include "Abi.h"

namespace cac::lowering {

/// What an item reads of another item: a scan or rank at a token offset, or
/// a reduction once its loop completed.
struct Dep {
  Operation *op;  ///< A ScanOp, RankOp or a token -> seq ReduceOp.
  int64_t offset; ///< Token offset at which a scan is read.
  bool seqLevel;  ///< Read after its loop completed.
};

/// What a loop does at each token.
struct Item {
  enum Kind { Scan, Reduce, Rank, Store } kind;
  Operation *op = nullptr; ///< Scan, Reduce, Rank.
  Value value;             ///< Store: the token value.
  unsigned buffer = 0;     ///< Store, Scan, Rank: where it goes.
  /// Scan: read only by the later items of its own loop, at their own
  /// token, and neither an output nor a kernel result: a loop walked by one
  /// thread need not store it.
  bool unstored = false;
};

/// One loop over a sequence's tokens, forward or reverse.
struct Loop {
  bool reverse = false;
  bool directionFixed = false;
  std::vector<Item> items;
};

/// A (token value, buffer) pair that a kernel stores.
using Store = std::pair<Value, unsigned>;

/// The uniform conditions (scalar i1 values: parameters compared with
/// literals) that one version of a seq kernel fixes, with their values there.
using Version = DenseMap<Value, bool>;

/// The operand that `sel` takes in `version`, where its condition is one the
/// version fixes; null otherwise.
Value fixedArm(SelectOp sel, const Version &version);

/// The loops of seq kernel `kernel`, in order. Items are placed in program
/// order: each joins the last loop when its dependences allow (a value read
/// at the next token is available in a reverse loop), else it opens a new
/// loop; a dependence read at another token of the same loop fixes that
/// loop's direction. Token stores join the loop where their value becomes
/// available. `storage` says where scans and ranks are stored (a store into
/// a scan's or a rank's own buffer is the scan's or the rank's).
/// In `version`, a select whose condition it fixes depends on the taken
/// operand only.
std::vector<Loop> scheduleLoops(KernelOp kernel,
                                const DenseMap<Value, unsigned> &storage,
                                ArrayRef<Store> tokenStores,
                                const Version &version = Version());

/// The uniform conditions of `kernel`'s token selects on which the kernel is
/// emitted once per combination of their values, each version with its own
/// schedule: those (at most kMaxVersionConditions) where some version takes
/// fewer loops over the sequence than the kernel as a whole, because the
/// operand it drops needed a pass of its own (SPO-chain's `balanced`
/// segmentation reads the count of cutpoints, `nth` does not), or fewer
/// scans, ranks or reductions (SAPO's V at the segment's first or last
/// token: each a scan). Empty when no version saves either.
SmallVector<Value> versionConditions(KernelOp kernel,
                                     const DenseMap<Value, unsigned> &storage,
                                     ArrayRef<Store> tokenStores);
constexpr unsigned kMaxVersionConditions = 2;

/// Whether `v` is defined in the body of `kernel`.
inline bool definedIn(KernelOp kernel, Value v) {
  Operation *def = v.getDefiningOp();
  return def && def->getParentOp() == kernel.getOperation();
}

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_SCHEDULE_H
