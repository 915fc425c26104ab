//===- PackedBatch.h - The packed (CSR) batch structure ---------*- C++ -*-===//
//
// Kernels see a batch as packed rows plus a few int32 structure arrays
// (docs/bundle.md, "The batch layout the kernels see"). PackedBatch builds
// those arrays from what a trainer has at hand (sequence lengths or a padded
// mask, arbitrary prompt ids, a rollout tree), validates them, and converts
// tensors between the padded [B, T] and the packed [N] layouts.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_PACKEDBATCH_H
#define CAC_RUNTIME_KERNELS_PACKEDBATCH_H

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace cac::rt {

/// The structure of a batch of B sequences with N tokens in total, G groups
/// and (for tree estimators) K nodes. All structure arrays are int32 and live
/// on one device. Without groups, every sequence is in one group (id 0).
class PackedBatch {
public:
  /// An empty batch (B = N = 0, one group).
  PackedBatch();

  /// Sequence b has `lengths[b]` tokens (any integer dtype, [B]).
  static PackedBatch fromLengths(const at::Tensor &lengths);
  static PackedBatch fromLengths(const std::vector<int64_t> &lengths);

  /// Sequence b owns the positions t of row b where `mask[b, t]` is nonzero,
  /// in order; padding may be anywhere (left, right, holes). The mask is kept
  /// so that pack()/unpack() use it.
  static PackedBatch fromMask(const at::Tensor &mask);

  /// Groups sequences by arbitrary integer ids ([B]): the dense group of a
  /// sequence is the rank of its id among the sorted distinct ids, which
  /// groupIds() returns so results can be reported by original id.
  PackedBatch &setGroups(const at::Tensor &groupIds);

  /// Attaches a rollout tree: `nodeParent` [K] (-1 for a root) and
  /// `tokenNode`, the node owning each token, packed [N] or padded [B, T]
  /// (packed with this batch's layout). Validates parent indices, acyclicity
  /// and every token's node.
  PackedBatch &setTree(const at::Tensor &nodeParent,
                       const at::Tensor &tokenNode);

  /// A copy whose structure arrays live on `device` (shares when equal).
  /// With `nonBlocking`, host arrays go to a CUDA device from pinned memory
  /// without waiting for the stream (the caller's Python package: no host
  /// synchronisation per call).
  PackedBatch to(const at::Device &device, bool nonBlocking = false) const;
  at::Device device() const { return seqOffsets_.device(); }

  int64_t numSeqs() const { return numSeqs_; }
  int64_t numGroups() const { return numGroups_; }
  int64_t numTokens() const { return numTokens_; }
  int64_t numNodes() const { return numNodes_; }
  bool hasTree() const { return nodeParent_.defined(); }
  /// True when groups were given with setGroups().
  bool hasGroups() const { return hasGroups_; }
  /// Longest sequence (the T of unpack()).
  int64_t maxLength() const { return maxLength_; }
  /// The first sequence with no token, -1 when every one has some.
  int64_t firstEmptySeq() const { return firstEmptySeq_; }

  const at::Tensor &seqOffsets() const { return seqOffsets_; }     ///< [B+1]
  const at::Tensor &seqGroup() const { return seqGroup_; }         ///< [B]
  const at::Tensor &groupOffsets() const { return groupOffsets_; } ///< [G+1]
  const at::Tensor &groupMembers() const { return groupMembers_; } ///< [B]
  /// The sorted distinct original group ids, int64 [G].
  const at::Tensor &groupIds() const { return groupIds_; }
  const at::Tensor &nodeParent() const { return nodeParent_; } ///< [K]
  const at::Tensor &tokenNode() const { return tokenNode_; }   ///< [N]
  /// int64 [B] token counts.
  const at::Tensor &lengths() const { return lengths_; }
  /// The padded mask this batch was built from; undefined for fromLengths().
  const at::Tensor &mask() const { return mask_; }

  /// The bool [B, T] mask of the padded layout: the stored mask, or
  /// right-padding with T = max(maxLength(), t) when built from lengths.
  at::Tensor paddedMask(int64_t t = -1) const;

  /// [B, T, ...] padded → [N, ...] packed, in this batch's layout (for
  /// fromLengths batches T may exceed the longest sequence).
  at::Tensor pack(const at::Tensor &padded) const;

  /// [N, ...] packed → [B, T, ...] padded, `fill` at padding positions.
  /// T is the stored mask's width, else max(maxLength(), t).
  at::Tensor unpack(const at::Tensor &packed, double fill = 0.0,
                    int64_t t = -1) const;

  /// [N, ...] packed → one tensor per sequence (views).
  std::vector<at::Tensor> split(const at::Tensor &packed) const;

  /// int64 [N]: the sequence of each packed token.
  at::Tensor tokenSeq() const;

private:
  explicit PackedBatch(const std::vector<int64_t> &lengths);
  void setLengths(const std::vector<int64_t> &lengths);

  int64_t numSeqs_ = 0, numGroups_ = 1, numTokens_ = 0, numNodes_ = 0;
  int64_t maxLength_ = 0, firstEmptySeq_ = -1;
  bool hasGroups_ = false;
  at::Tensor seqOffsets_, seqGroup_, groupOffsets_, groupMembers_, groupIds_;
  at::Tensor nodeParent_, tokenNode_, lengths_, mask_;
};

/// [B, T, ...] padded + [B, T] mask → [N, ...] packed (row-major order of
/// the mask's nonzeros).
at::Tensor packPadded(const at::Tensor &padded, const at::Tensor &mask);

/// Inverse of packPadded: [N, ...] → [B, T, ...] with `fill` elsewhere.
at::Tensor unpackPacked(const at::Tensor &packed, const at::Tensor &mask,
                        double fill = 0.0);

/// bool [B, T] right-padding mask of int `lengths` [B]; T = max length when
/// `maxLen` < 0.
at::Tensor maskFromLengths(const at::Tensor &lengths, int64_t maxLen = -1);

/// Concatenates per-sequence 1-D tensors into one packed [N] tensor.
at::Tensor packRagged(const std::vector<at::Tensor> &rows);

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_PACKEDBATCH_H
