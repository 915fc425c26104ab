//===- Abi.h - The argument list shared by an estimator's kernels -*- C++
//-*-===//
//
// What every kernel of a bundle is called with (docs/bundle.md): the fixed
// leading arguments, then one pointer per buffer (inputs, outputs, scratch),
// then the parameters; and where each value of the estimator is stored.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_CONVERSION_LOWERKERNELS_ABI_H
#define CAC_CONVERSION_LOWERKERNELS_ABI_H

#include "cac/Abi/KernelArgs.h"
#include "cac/Dialect/Cac/IR/CacDialect.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>
#include <string>
#include <vector>

namespace cac::lowering {
using namespace mlir;
using namespace cac::ir;

// The argument kinds, buffer roles and fixed leading arguments are the
// kernel ABI's (abi/include/cac/Abi/KernelArgs.h). Its Domain is not brought
// in: the lowering's is the dialect's.
using cac::abi::ArgKind;
using cac::abi::BufferRole;
using cac::abi::FixedArg;
using cac::abi::kGroupMembers;
using cac::abi::kGroupOffsets;
using cac::abi::kNodeParent;
using cac::abi::kNumFixed;
using cac::abi::kNumGroups;
using cac::abi::kNumNodes;
using cac::abi::kNumSeqs;
using cac::abi::kNumTokens;
using cac::abi::kSeqGroup;
using cac::abi::kSeqOffsets;
using cac::abi::kTokenNode;
using cac::abi::kUnitBegin;
using cac::abi::kUnitEnd;

struct AbiArg {
  std::string name;
  ArgKind kind;
};

struct Buffer {
  std::string name;
  BufferRole role;
  Domain domain;
  /// A seg output stored on the tokens of its segments (docs/bundle.md).
  bool segOnTokens = false;
};

/// The k of a rank that only `rank < k` reads (top_k), k one value per
/// sequence that no reduction of the rank's kernel computes: a seq-level or
/// scalar value, which the rank's kernel may evaluate before the rank. Such
/// a rank is a radix select (TopKSelect.cpp), not a sort. Null otherwise.
Value topKBound(RankOp rank);

/// The plan of a bundle's arguments and buffers (BufferPlan.cpp).
struct Abi {
  std::vector<AbiArg> args;
  std::vector<Buffer> buffers;
  std::vector<std::pair<std::string, std::optional<double>>> params;
  /// The element type of the bundle's buffers and parameters.
  Type floatType;
  /// Where a value is stored: index into `args`.
  DenseMap<Value, unsigned> storage;
  /// Argument index of each parameter op's value.
  DenseMap<Value, unsigned> paramArg;
  /// The buffer of each `cac.output` op.
  DenseMap<Operation *, unsigned> outputBuffer;
  /// The scratch token buffers of each rank's radix sort: two permutations
  /// and a second key array (the first is the rank's own buffer), written
  /// and read alternately. A rank read only as top_k (topKBound) has no
  /// buffer of its own; its select by one thread keeps its candidates'
  /// keys in keysB and their positions in permA (permB is permA), where
  /// the flags of top_k go after the select.
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
  ///   order        the builder's own (cursors, each node's root);
  ///   size[k]      nodes in k's subtree, k included;
  ///   pre[k]       k's position in a preorder walk (roots in id order,
  ///                children in id order), so the subtree of k is the
  ///                positions [pre[k], pre[k] + size[k]);
  ///   preNode[p]   the node at preorder position p (-1 past the nodes a
  ///                root reaches);
  ///   seqEnd[p], seqByPre
  ///                the non-empty sequences grouped by the preorder position
  ///                of their leaf (the node of their last token), CSR like
  ///                the children;
  ///   seqScatter   the builder's own (the sequences before they are put
  ///                in order).
  /// Each tree operation then visits only what it needs (children, the
  /// subtree's nodes or sequences) instead of every node or sequence.
  struct TreeScratch {
    unsigned childEnd, children, order, size, pre, preNode, seqEnd, seqByPre,
        seqScatter;
  };
  std::optional<TreeScratch> tree;
  /// With seq-split, each scan of a split kernel (splitsKernel): a scratch
  /// token buffer where the NAME_carries kernel leaves each part's
  /// composition of the scan's steps, (a, b) at the part's first two tokens
  /// in the scan's direction (SeqSplit.cpp).
  DenseMap<Operation *, unsigned> splitCarries;
  unsigned firstBuffer = kNumFixed;
  bool needsGroups = false;
  bool needsTree = false;

  unsigned addBuffer(StringRef name, BufferRole role, Domain d) {
    buffers.push_back({name.str(), role, d});
    return kNumFixed + buffers.size() - 1;
  }
};

inline Domain domainOf(Value v) {
  return cast<FieldType>(v.getType()).getDomain();
}
inline Type elemOf(Value v) {
  return cast<FieldType>(v.getType()).getElementType();
}

/// Plans the arguments and buffers of `est`'s kernels: inputs, outputs, the
/// scratch buffers of the kernel results that later kernels read, of scans,
/// ranks and the tree, then the parameters. The group kernels in `fused`
/// are computed inside seq kernels and get no storage.
/// With `split` (seq-split on, splitEnabled), the scans of the kernels
/// that split (splittable) get a scratch buffer each for their carries.
Abi planAbi(EstimatorOp est, const llvm::DenseSet<Operation *> &fused,
            bool split = false);

/// Whether seq kernel `kernel` may be split over several blocks per
/// sequence (SeqSplit.cpp): no ranks, token -> seq reductions or segment
/// gathers, and its scans all run in one direction, none reading another
/// scan, none read at another token (so that its schedule is one loop of
/// scans and stores, each token's values computed at that token only).
bool splittable(KernelOp kernel);

} // namespace cac::lowering

#endif // CAC_CONVERSION_LOWERKERNELS_ABI_H
