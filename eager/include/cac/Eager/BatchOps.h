//===- BatchOps.h - Eager batch_top_k and uniform ---------------*- C++ -*-===//
//
// The eager forms of the operations that order the whole batch's tokens
// (cac.batch_kth, cac.batch_top_k) and of the seeded uniform draw, on the
// padded layout (Padded.h). docs/language.md defines them.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EAGER_BATCHOPS_H
#define CAC_EAGER_BATCHOPS_H

#include "cac/Eager/Padded.h"

#include "llvm/ADT/DenseMap.h"

namespace cac {

/// The token index (row major over the real tokens) of the k-th token in
/// the descending order of `x` ([B, T]), ties by the lower index, as a 0-d
/// tensor of x's dtype; -1 when k (0-d) rounds down below 1.
torch::Tensor batchKth(const PaddedBatch &pb, const torch::Tensor &x,
                       const torch::Tensor &k);

/// [B, T] bool: the tokens no later than token `kth` (batchKth) in that
/// order; none when kth is -1.
torch::Tensor batchTopK(const PaddedBatch &pb, const torch::Tensor &x,
                        const torch::Tensor &kth);

/// [B, T] in `dtype`: the uniform draw of each token from `seed` (0-d).
torch::Tensor uniformDraw(const PaddedBatch &pb, const torch::Tensor &seed,
                          torch::ScalarType dtype);

/// The value of `op`, one of the operations that read other sequences
/// (group_rank, group_pos_sum, group_key, batch_kth, batch_top_k) or draw per token
/// (uniform), its result of dtype `dtype`; `env` holds its operands' values.
torch::Tensor evalAcrossSeqs(const PaddedBatch &pb, mlir::Operation *op,
                             torch::ScalarType dtype,
                             const llvm::DenseMap<mlir::Value, torch::Tensor> &env);

} // namespace cac

#endif // CAC_EAGER_BATCHOPS_H
