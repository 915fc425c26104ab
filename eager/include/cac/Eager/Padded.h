//===- Padded.h - The eager backend on padded LibTorch tensors --*- C++ -*-===//
//
// The tensor-level interface of the eager backend, for benchmarks and tests
// that want to time or feed the tensor computation without the JSON batch.
// Includes LibTorch: compile with -fexceptions (cac_enable_exceptions).
//
// Layout (docs/eager.md):
//   token values  [B, T]  T = the longest sequence; `mask` is true on real
//                          tokens, false on padding (inputs are zero there)
//   seq values    [B]
//   group values  [G]     dense group order (Batch::seqGroup)
//   node values   [K]     tree node ids
//   scalars       0-d
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EAGER_PADDED_H
#define CAC_EAGER_PADDED_H

#include "cac/Eval/Batch.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace cac {

/// A batch in the eager backend's padded layout.
struct PaddedBatch {
  int64_t numSeqs = 0, maxLen = 0, numGroups = 0;
  torch::Tensor lengths;      ///< [B] int64, every entry >= 1
  torch::Tensor mask;         ///< [B, T] bool
  torch::Tensor seqGroup;     ///< [B] int64, dense group of each sequence
  torch::Tensor groupCount;   ///< [G] int64, members of each group
  torch::Tensor groupFirst;   ///< [G] int64, lowest member sequence index
  torch::Tensor groupLast;    ///< [G] int64, highest member sequence index
  torch::Tensor groupMembers; ///< [B] int64, sequences by group, ascending
  torch::Tensor groupMask;    ///< [G, M] bool, M = the largest group: row g
                              ///< holds groupCount[g] leading trues
  std::map<std::string, torch::Tensor> token; ///< [B, T], zero padded
  std::map<std::string, torch::Tensor> seq;   ///< [B]
  /// Inputs of the seg domain: [B, S] (S = the most segments of a sequence),
  /// zero padded; segCount [B] int64 segments of each sequence.
  std::map<std::string, torch::Tensor> seg;
  torch::Tensor segCount;
  /// The rollout tree, when the batch has one: K nodes, the parent of each
  /// ([K] int64, -1 for a root) and the node of each token ([B, T] int64, 0
  /// on padding).
  int64_t numNodes = 0;
  torch::Tensor nodeParent, tokenNode;
  std::map<std::string, double> params;
};

/// Converts a packed batch to the padded layout, arrays in `dtype`
/// (torch::kFloat32 or torch::kFloat64).
PaddedBatch padBatch(const Batch &batch, torch::ScalarType dtype);

/// The element type of the estimator's fields: kFloat32 or kFloat64.
torch::ScalarType eagerDtype(mlir::ModuleOp module);

/// One output in the padded layout (token outputs [B, T], padding undefined).
struct PaddedOutput {
  std::string name;
  std::string domain; ///< token | seq | group | seg (seg: [B, T], the
                      ///< segment's value on each of its tokens)
  torch::Tensor values;
};

/// Runs the estimator of `module` on a padded batch whose arrays have the
/// estimator's dtype (eagerDtype).
/// With `autograd`, see runEager.
llvm::Expected<std::vector<PaddedOutput>>
runEagerPadded(mlir::ModuleOp module, const PaddedBatch &batch,
               bool autograd = false);

/// Packs padded outputs back: token outputs to [N] (row major by sequence).
std::vector<OutputArray> unpadOutputs(const PaddedBatch &batch,
                                      const std::vector<PaddedOutput> &outs);

} // namespace cac

#endif // CAC_EAGER_PADDED_H
