//===- Batch.h - Rollout batches for `cac eval` -----------------*- C++ -*-===//
//
// The JSON batch format of docs/language.md (ragged rows, no padding), held
// packed (CSR) as the kernels see it, and the JSON output. No LibTorch here:
// the eager backend converts to tensors itself.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_EVAL_BATCH_H
#define CAC_EVAL_BATCH_H

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cac {

/// A batch of B sequences with N tokens in all, packed.
struct Batch {
  int64_t numSeqs = 0;
  int64_t numTokens = 0;
  /// Tokens of sequence b are [seqOffsets[b], seqOffsets[b+1]).
  std::vector<int32_t> seqOffsets;
  /// Dense group index of each sequence, and the groups' member lists.
  std::vector<int32_t> seqGroup, groupOffsets, groupMembers;
  /// The original group ids, ascending; groupIds[g] names dense group g.
  std::vector<int64_t> groupIds;
  /// Named arrays by domain, packed: token arrays have N entries, seq B.
  llvm::StringMap<std::vector<double>> token, seq;
  /// Inputs of the seg domain, one value per segment, packed: the values of
  /// sequence b are [segOffsets[b], segOffsets[b+1]) (every seg input has the
  /// same number of segments per sequence). Empty without seg inputs.
  llvm::StringMap<std::vector<double>> seg;
  std::vector<int32_t> segOffsets;
  /// The rollout tree ("tree" in the JSON), empty without one: the parent of
  /// each of the K nodes (-1 for a root) and the node of each token, packed.
  std::vector<int32_t> nodeParent, tokenNode;
  int64_t numNodes = 0;
  /// Parameters given in the file or on the command line.
  std::map<std::string, double> params;
  /// Observation tokens ("obs" in the JSON; empty when there are none): 1
  /// for a token that is part of the sequence but not an action (tool
  /// output in a multi-turn rollout), packed like the token arrays.
  std::vector<uint8_t> obs;

  int64_t numGroups() const { return int64_t(groupIds.size()); }
};

/// Parses the JSON batch `text` (from `fileName`, for messages).
llvm::Expected<Batch> parseBatchJson(llvm::StringRef text,
                                     llvm::StringRef fileName);

/// The batch without its observation tokens: every token array, the tree's
/// token nodes and the sequence offsets keep only the action tokens (and
/// `obs` is empty). The estimator runs on this batch, so its scans, shifts,
/// positions and lengths see the actions only: a recurrence carries across
/// an observation unchanged (docs/language.md, "Observation tokens").
Batch actionsOnly(const Batch &batch);

struct OutputArray;
/// Puts outputs computed on actionsOnly(full) back on the tokens of `full`:
/// token (and by-token seg) outputs are 0 on observation tokens.
void expandToFull(const Batch &full, std::vector<OutputArray> &outputs);

/// One output array of an estimator.
struct OutputArray {
  std::string name;
  /// token | seq | group | node | seg (seg outputs hold the segment's value on each
  /// of its tokens: N values, printed once per segment).
  std::string domain;
  std::vector<double> values;
};

/// With seg inputs, checks that every sequence has as many segment values as
/// the estimator's segmentation (the output "_seg_start") gives segments.
llvm::Error checkSegmentCounts(const Batch &batch,
                               const std::vector<OutputArray> &outputs);

/// What an objective's manifest (or `cac.objective` attribute) says.
struct ObjectiveInfo {
  std::string wrt;        ///< the input the loss is differentiated by
  std::string lossDomain; ///< token | seq
};

/// The aggregation of an objective's loss: the scalar loss is
/// sum(loss) / normalizer and the gradient grad_<wrt> / normalizer, where
/// the normalizer is the sum of loss_count over the (mini)batch for
/// "token-mean" (code 0) and for a seq loss, and the number of sequences
/// with loss_count > 0 for the seq-mean modes (codes 1-3: verl's agg_loss
/// leaves fully masked sequences out; "seq-mean-token-sum-norm"'s
/// 1 / norm_len is applied by the kernel). docs/language.md, Objectives.
double objectiveNormalizer(const ObjectiveInfo &info, int aggregation,
                           const std::vector<double> &lossCount);

/// The summary `cac eval` prints for an objective: divides grad_<wrt> in
/// `outputs` by the normalizer (so that it is the gradient of the printed
/// loss) and returns {"loss", "normalizer", "aggregation", "wrt"} as JSON.
llvm::Expected<std::string> finishObjective(const ObjectiveInfo &info,
                                            int aggregation,
                                            const Batch &batch,
                                            std::vector<OutputArray> &outputs);

/// Resolves the value of each manifest parameter from the batch (file and
/// command line) and the defaults. Fails naming a required parameter that
/// has no value, or a given parameter the estimator does not declare.
llvm::Expected<std::vector<double>>
resolveParams(const Batch &batch,
              const std::vector<std::pair<std::string, std::optional<double>>>
                  &declared);

} // namespace cac

#endif // CAC_EVAL_BATCH_H
