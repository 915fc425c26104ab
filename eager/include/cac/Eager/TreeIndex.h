//===- TreeIndex.h - Per-node indices of the eager tree operations -*- C++ -*-===//
//
// What the eager backend's shifted tree means (docs/pipeline.md, Trees) need
// per node and cannot get from one tensor operation: the first child, and the
// first sequence reaching the node. Walks on the host, O(K + B).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EAGER_TREEINDEX_H
#define CAC_EAGER_TREEINDEX_H

#include <torch/torch.h>

namespace cac {

/// The first child (lowest id) of each node of the forest `parent` ([K]
/// int64, -1 at a root); -1 for a leaf.
torch::Tensor firstChildren(const torch::Tensor &parent);

/// For each node, `xs` ([B]) of the first sequence in batch order whose leaf
/// (`leaf`, [B] node ids) is the node (`leafOnly`) or lies in its subtree;
/// 0 where there is none. In `xs`'s dtype.
torch::Tensor pathFirsts(const torch::Tensor &parent, const torch::Tensor &xs,
                         const torch::Tensor &leaf, bool leafOnly);

} // namespace cac

#endif // CAC_EAGER_TREEINDEX_H
