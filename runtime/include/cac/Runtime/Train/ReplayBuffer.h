//===- ReplayBuffer.h - SPO-tree's replay buffer of node samples -*- C++ -*-===//
//
// SPO-tree (its App. D; estimators.md §3.5) samples many paths per question,
// and training on all of a question's nodes in one step over-fits to it. Its
// replay buffer spreads them over the following steps instead: each RL step
//
//   1. adds the step's kept node samples, stamped with the step;
//   2. drops the entries sampled `steps` or more steps ago;
//   3. takes at most `take` entries of each question, at random;
//   4. trains on them and removes them.
//
// The random choice is a hash of (seed, step, question, entry), and the taken
// entries come out ordered by (prompt slot, sampling step, entry), so what a
// step trains on does not depend on how the questions are split between
// data-parallel workers. `steps = 0` turns the buffer off: every step trains
// on all of its own samples, in the order the plan produced them.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_REPLAYBUFFER_H
#define CAC_RUNTIME_TRAIN_REPLAYBUFFER_H

#include "cac/Runtime/Train/Rollouts.h"

#include <cstdint>
#include <vector>

namespace cac::rt::train {

/// One node sample in the buffer: what the update needs of it, and where it
/// came from.
struct ReplayEntry {
  /// Context (prompt and the node's history), the node's tokens, their
  /// sampling-time log-probabilities and entropies, and the path's reward.
  Rollout sample;
  /// The estimator's per-token outputs on the node's tokens (adv; weight,
  /// empty when the estimator has none).
  std::vector<float> adv, weight;
  /// The RL step that sampled it, its prompt's position in that step's
  /// global batch (the question is the pair), and its index among that
  /// question's entries.
  int64_t step = 0, slot = 0, ordinal = 0;
};

class ReplayBuffer {
public:
  /// \p steps: how many steps an entry may wait (0: no buffer); \p take: the
  /// most entries of one question trained per step (0: all).
  ReplayBuffer(int64_t steps = 0, int64_t take = 0);

  bool enabled() const { return steps_ > 0; }

  /// Adds one step's samples (ordered as the plan produced them; their
  /// ordinal within their question is set here).
  void add(std::vector<ReplayEntry> entries);

  struct Taken {
    std::vector<ReplayEntry> entries;
    /// Entries dropped as too old before the take.
    int64_t dropped = 0;
  };

  /// Steps 2-4 at RL step \p step: drops the stale entries, then removes and
  /// returns up to `take` entries of each question, chosen by
  /// hash(\p seed, step, question, ordinal), ordered by (slot, step,
  /// ordinal).
  Taken take(int64_t step, uint64_t seed);

  const std::vector<ReplayEntry> &entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

  /// The entries flattened into numbers (tokens, floats and counters are
  /// exact in double) and back: the checkpoint's `replay` tensor, and how
  /// data-parallel workers gather their buffers for rank 0's checkpoint with
  /// a sum all-reduce. unpack throws std::runtime_error on a truncated or
  /// inconsistent array.
  static std::vector<double> pack(const std::vector<ReplayEntry> &entries);
  static std::vector<ReplayEntry> unpack(const std::vector<double> &packed);

  /// Replaces the entries with those of \p entries whose slot is in
  /// [slotBegin, slotEnd) (a data-parallel worker's prompts).
  void load(std::vector<ReplayEntry> entries, int64_t slotBegin,
            int64_t slotEnd);

private:
  int64_t steps_, take_;
  std::vector<ReplayEntry> entries_;
};

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_REPLAYBUFFER_H
