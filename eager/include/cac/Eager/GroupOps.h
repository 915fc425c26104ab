//===- GroupOps.h - Eager operations across a group's sequences -*- C++ -*-===//
//
// The eager forms of the operations that read the other sequences of a group
// (group_rank, group_key, group_pos_sum), on the padded layout (Padded.h).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EAGER_GROUPOPS_H
#define CAC_EAGER_GROUPOPS_H

#include "cac/Eager/Padded.h"

namespace cac {

/// For each sequence ([B] values `x`), the number of sequences j of its group
/// with x[j] > x[i], or x[j] == x[i] and j < i, in `x`'s dtype.
torch::Tensor groupRanks(const PaddedBatch &pb, const torch::Tensor &x);

/// What group_key reduces: the sum, the mean or the number of the values.
enum class GroupKeyKind { Sum, Mean, Count };

/// For each sequence ([B] values `x` and `key`), over the sequences j of its
/// group with key[j] == key[i] (and j == i): the sum of x[j], their mean
/// (x[i] + sum (x[j] - x[i]) / n, exact over equal values) or their number.
torch::Tensor groupKeyReduce(const PaddedBatch &pb, const torch::Tensor &x,
                             const torch::Tensor &key, GroupKeyKind kind);

/// For each token ([B, T] values `x`), the sum of `x` at its position over
/// the sequences of its group that reach it (differentiable).
torch::Tensor groupPositionSums(const PaddedBatch &pb, const torch::Tensor &x);

} // namespace cac

#endif // CAC_EAGER_GROUPOPS_H
