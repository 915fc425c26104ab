//===- Rollouts.h - Rollout plans: group, chain, tree, forest ---*- C++ -*-===//
//
// A rollout plan decides how one RL step samples its sequences
// (docs/training.md, "Rollout plans"):
//
//   group   n independent samples per prompt (GRPO, PPO, SAE, SAPO, SPPO);
//   chain   n samples per prompt, then `samples` Monte-Carlo continuations
//           from every segment start the estimator picks, forked from the
//           rollout's KV cache at that token position (SPO-chain, VinePPO);
//   tree    fixed branch factors per depth and segment length M; a child
//           that stops before M tokens is an early leaf (SPO-tree);
//   forest  `trees` trees per prompt that branch where the entropy exceeds a
//           threshold, with a leaf budget per tree (TreeAdv).
//
// Continuations always fork the parent's KV cache (Decoder::fork/forkAt);
// boundaries are token positions, never re-tokenized text. Every plan counts
// the tokens the model computed (prompt prefills, sampled tokens, tokens
// re-fed at a fork) against the tokens of the flattened paths (each path's
// prompt and response, as if generated on its own).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_ROLLOUTS_H
#define CAC_RUNTIME_TRAIN_ROLLOUTS_H

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Train/TrainFile.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cac::rt::train {

/// One generated response (a root-to-leaf path for trees) and what the loss
/// needs of it.
struct Rollout {
  std::vector<int64_t> prompt, response;
  /// One per response token (0 on observation tokens).
  std::vector<float> logp, entropy;
  /// Per response token, 1 for an observation token (a tool's reply in a
  /// multi-turn rollout); empty when the response has none. The packed
  /// arrays of the estimator and the loss hold the actions only
  /// (padRollouts).
  std::vector<uint8_t> obs;
  double reward = 0;
  bool correct = false;
  /// The prompt's index in the step (the GRPO group).
  int64_t group = 0;
  /// Tool calls closed, answered (turns), that evaluated, and that the tool
  /// failed on (GeneratedSequence).
  int64_t toolCalls = 0, toolTurns = 0, toolOk = 0, toolFailed = 0;

  /// Whether response token \p t is an observation token.
  bool isObs(size_t t) const { return t < obs.size() && obs[t] != 0; }
  /// The response's action tokens (the ones the policy sampled): its
  /// length in the packed arrays.
  int64_t actions() const;
};

/// Token accounting of one step.
struct PlanStats {
  /// Positions the model ran: prompt prefills, every sampled token that was
  /// fed back, and the token re-fed when a cache is forked mid-sequence.
  int64_t tokensComputed = 0;
  /// Prompt + response tokens of every path (estimator sequence and, for
  /// chains, every Monte-Carlo continuation with its prefix), i.e. what
  /// independent generation of the same paths would run.
  int64_t tokensFlattened = 0;
  /// Response tokens sampled (each tree token once).
  int64_t tokensSampled = 0;
  /// Response tokens of the flattened paths.
  int64_t tokensFlattenedResponse = 0;
  /// Tree plans: nodes (roots included) and leaves; chain: MC states
  /// sampled (distinct prefix queries) and rollouts.
  int64_t nodes = 0, leaves = 0;
  /// Chain: segment starts whose prefix query was another rollout's of the
  /// same prompt, so they shared its continuations (de-duplication).
  int64_t sharedQueries = 0;
};

/// What a plan produced for one RL step.
struct RolloutBatch {
  /// The estimator's sequences (root-to-leaf paths for tree plans), grouped
  /// by prompt.
  std::vector<Rollout> rolls;
  /// Tree plans: the parent of each node (-1 for a root) and, per rollout,
  /// the node owning each response token (shared prefixes carry the same
  /// node in every path).
  std::vector<int64_t> nodeParent;
  std::vector<std::vector<int64_t>> tokenNode;
  /// Chain plan: the Monte-Carlo value of each segment, by-segment layout
  /// (segment j of rollout b at offset(b) + j; docs/bundle.md), and the
  /// segment starts it was estimated at.
  std::vector<float> mcValue;
  std::vector<std::vector<int64_t>> segStarts;
  PlanStats stats;
};

/// What a plan needs to sample and score.
struct PlanContext {
  TransformerLM model{nullptr};
  /// Sampling options of the rollouts (temperature, top-p/k, max tokens,
  /// stop tokens); the plans set maxNewTokens per segment themselves.
  SamplingOptions options;
  const Tokenizer *tokenizer = nullptr;
  at::Generator *gen = nullptr;
  /// When set (data-parallel training), every plan samples with these
  /// uniforms instead of `gen`: `uniform(prompt, stream, t)` draws response
  /// token t of stream `stream` of prompt `prompt` (its index in `prompts`).
  /// Streams are numbered within their prompt in an order that depends only
  /// on that prompt's own samples (group and chain: the samples 0..n-1, then
  /// chain's Monte-Carlo continuations; tree and forest: the nodes in
  /// creation order), so a prompt's rollouts do not depend on which worker
  /// samples it or on the other prompts of its batch.
  std::function<float(int64_t prompt, int64_t stream, int64_t t)> uniform;
  /// The reward of a completion of prompt \p group.
  std::function<double(int64_t group, const std::string &text)> reward;
};

/// Why \p spec cannot feed estimator \p name (empty when it can): a chain
/// plan needs an `mc_value : seg` input and only it provides one; tree and
/// forest plans provide the `tree` structure a node estimator needs; the
/// tree plan trains per node and takes no critic.
std::string planMismatch(const RolloutSpec &spec, const std::string &name,
                         bool readsMcValue, bool needsTree, bool hasCritic);

/// group: \p n independent samples per prompt (each prompt prefilled once).
RolloutBatch sampleGroups(const PlanContext &ctx,
                          const std::vector<std::vector<int64_t>> &prompts,
                          int64_t n);

/// The segment starts of each rollout (token positions), as the estimator's
/// segmentation picks them.
using SegmentStartsFn = std::function<std::vector<std::vector<int64_t>>(
    const std::vector<Rollout> &)>;

/// chain: spec.n samples per prompt, then spec.samples continuations from the
/// state before every segment start (forked from the rollout's retained KV
/// cache); mcValue is the mean reward of a segment's continuations (the
/// sampled rollout itself does not count, estimators.md §2.3). With
/// spec.dedup, segment starts of one prompt's rollouts whose prefixes are
/// the same tokens are one query: its continuations are sampled once and
/// its value serves each of them.
RolloutBatch sampleChain(const PlanContext &ctx,
                         const std::vector<std::vector<int64_t>> &prompts,
                         const RolloutSpec &spec,
                         const SegmentStartsFn &segmentStarts);

/// tree: SPO-tree's Algorithm 1 (estimators.md §3.2). Node 0..P-1 are the
/// prompts (roots, no tokens); every other node is a segment of at most
/// spec.segLen tokens; a child that stops before its segment is full is a
/// leaf; the last depth runs to the stop token or max_tokens.
RolloutBatch sampleTree(const PlanContext &ctx,
                        const std::vector<std::vector<int64_t>> &prompts,
                        const RolloutSpec &spec);

/// forest: TreeAdv's entropy-branched trees (estimators.md §6.2), spec.trees
/// per prompt with spec.n / spec.trees leaves each, branching threshold
/// \p tau. Each tree's first segment is a root node (parent -1).
RolloutBatch sampleForest(const PlanContext &ctx,
                          const std::vector<std::vector<int64_t>> &prompts,
                          const RolloutSpec &spec, double tau);

/// SPO-tree trains every node once (estimators.md §3.3): context = the
/// prompt and the node's history, response = the node's tokens. Given the
/// per-token outputs of the estimator on the flattened paths (packed, in
/// rollout order), returns the node samples whose \p keep token output has a
/// nonzero entry (all nodes when \p keep is empty), with their outputs
/// gathered in the same packed order. \p outputs are packed per-token
/// vectors over the paths (adv, weight, ...).
std::vector<Rollout>
nodeSamples(const RolloutBatch &batch,
            const std::vector<std::vector<float>> &outputs,
            const std::vector<float> &keep,
            std::vector<std::vector<float>> &sampleOutputs);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_ROLLOUTS_H
