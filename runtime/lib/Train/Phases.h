//===- Phases.h - The trainer's phases and the data they pass ---*- C++ -*-===//
//
// One RL step is five phases over typed data (docs/training.md):
//
//   sampleStep  (RolloutPhase.cpp)   -> StepBatch    the step's rollouts
//   score       (Scoring.cpp)        -> Scores       rollout-time logp, values,
//                                                    reference logp
//   estimate    (EstimatorPhase.cpp) -> Advantages   the estimator's outputs,
//                                                    per trained sample
//   update      (UpdatePhase.cpp)    -> UpdateStats  PPO epochs over
//                                                    minibatches
//   stepMetrics (StepMetrics.cpp)    -> the metrics row
//
// besides the SFT warm start (WarmStart.cpp), evaluation (Evaluation.cpp),
// checkpoints (Checkpointing.cpp), the models and optimizer (Models.cpp) and
// the setup of the task and bundles (TaskSource.cpp, EstimatorSetup.cpp).
// Every phase runs in a World (World.h): a lone process is a world of one.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_LIB_TRAIN_PHASES_H
#define CAC_LIB_TRAIN_PHASES_H

#include "TrainerState.h"

#include "cac/Runtime/Model/Checkpoint.h"
#include "cac/Runtime/Train/Rollouts.h"

#include <nlohmann/json.hpp>

namespace cac::rt::train {

//===--- Packing ----------------------------------------------------------===//

/// Right-padded [b, L] ids of prompt + response rows, and where each
/// response action token's logp / value sits in the model's [b, L-1]
/// outputs: the packed [N] arrays hold the actions only, so observation
/// tokens reach no estimator or loss (this is where they are compacted
/// away).
struct Padded {
  at::Tensor ids, mask; // [b, L] int64, bool
  at::Tensor pos, resp; // [b, Tmax] int64 indices into [b, L-1], bool
  at::Tensor tokenSeq;  // [N] int64, local sequence index
  int64_t numTokens = 0;
};

Padded padRollouts(const std::vector<const Rollout *> &rows, int64_t padId,
                   at::Device device);
/// [b, L-1] (or [b, L]) per-position values -> packed [N] response values.
at::Tensor gatherResponse(const at::Tensor &perPos, const Padded &p);
/// The packed [N] log-probabilities of \p p's action tokens under \p model
/// from its hidden states \p hidden [b, L, H] at \p temperature: the values
/// of gatherResponse(tokenLogProbs(model->lmHead(hidden), p.ids,
/// temperature), p), with the head run over the action positions only and
/// in chunks (headLogProbs), so no [b, L, vocab] logits are made, forward or
/// backward.
at::Tensor responseLogProbs(TransformerLM &model, const at::Tensor &hidden,
                            const Padded &p, double temperature);
/// The per-response-token floats of \p rows (\p field of each: logp,
/// entropy) packed as padRollouts packs tokens: actions only.
at::Tensor packActions(const std::vector<Rollout> &rows,
                       std::vector<float> Rollout::*field, at::Device device);
/// Per packed action token of \p rows, 1 on the first action of a turn (a
/// rollout's first action and every action right after an observation),
/// else 0: the `turn_start` input (docs/language.md, "Observation tokens").
at::Tensor turnStarts(const std::vector<Rollout> &rows, at::Device device);
/// A host copy of \p t as floats.
std::vector<float> hostFloats(const at::Tensor &t);

//===--- Models and optimizer (Models.cpp) --------------------------------===//

/// The model \p m names: a fresh one on the CPU (the same weights whatever
/// the device), a folder's loaded in float32 straight onto \p device (its
/// free memory checked first, availableMemory).
TransformerLM makeModel(const TaskSource &task, const ModelSpec &m,
                        bool valueHead, at::Device device);
/// Applies the file's update_dtype and activation_checkpointing to \p model
/// (the policy, a critic model, the reference): how its passes over whole
/// sequences compute and what its training passes keep.
void setUpdateOptions(TransformerLM &model, const TrainConfig &cfg);
/// The config makeModel builds \p m from (a folder's config.json read
/// alone), to check what it needs before allocating it.
ModelConfig modelConfig(const TaskSource &task, const ModelSpec &m);
/// Builds the optimizer of the SFT phase (\p rl false: the policy) or of the
/// RL phase (the policy and a critic model).
void buildOptimizer(TrainerState &s, bool rl);
/// Sets every group's learning rate to its base times \p factor; returns
/// the policy's.
double setLr(TrainerState &s, double factor);
/// Sums the gradients over the world, clips, steps and zeroes them;
/// returns the pre-clip norm, or NaN where a non-finite norm skipped the
/// update (--skip-nonfinite; without it a non-finite norm throws).
double optimizerStep(TrainerState &s);
/// Snapshots the reference (where read) and builds the RL optimizer.
void enterRl(TrainerState &s);
/// Per-token values of \p model's value head for the padded rows.
at::Tensor values(TransformerLM &model, const Padded &pd);
/// The model rollouts and evaluations sample from: the policy, or with
/// rollout_dtype other than float32 its copy in that dtype, copied again
/// from the policy whenever the policy's weights changed since (an update,
/// a checkpoint load).
TransformerLM &rolloutPolicy(TrainerState &s);

//===--- Setup (EstimatorSetup.cpp) ---------------------------------------===//

/// Compiles (rank 0) and loads the estimator bundle; checks its parameters,
/// inputs and outputs against the training file.
bool loadEstimator(TrainerState &s, DiagnosticEngine &diag);
/// Compiles and loads `objective = "FILE.cac"`.
bool loadObjective(TrainerState &s, DiagnosticEngine &diag);

//===--- SFT, evaluation, checkpoints -------------------------------------===//

/// One SFT step on the task's worked solutions; its metrics row.
nlohmann::json sftStep(TrainerState &s, int64_t sftIndex);
/// Greedy held-out accuracy (NaN without an eval set); sets lastEvalSteps
/// and evalSamples.
double evaluate(TrainerState &s);
/// Adds eval_steps_frac where the last evaluation measured it.
void addEvalSteps(const TrainerState &s, nlohmann::json &row);
/// The last eval's completions to samples.jsonl, at \p stepNo (RL step
/// \p rlStep).
void logSamples(TrainerState &s, int64_t stepNo, int64_t rlStep);
std::filesystem::path checkpointDir(const TrainerState &s);
/// Writes the checkpoint (rank 0; every worker calls it, for the replay
/// buffer's gather).
void saveCheckpointNow(TrainerState &s);
/// Restores the last checkpoint; returns the step it was taken at.
int64_t resume(TrainerState &s);

//===--- RL phases --------------------------------------------------------===//

/// Sums over the step's rollouts (this rank's, then the world's).
struct RolloutTotals {
  /// `tokens` counts actions (observation tokens are not the policy's).
  double reward = 0, correct = 0, entropy = 0, tokens = 0, paths = 0;
  /// Tool calls closed, answered, evaluated and failed by the tool
  /// (`tools = ..` only).
  double toolCalls = 0, toolTurns = 0, toolOk = 0, toolFailed = 0;
  /// Sum over actions of |sampler logp - policy logp| (a rollout dtype
  /// other than float32 only).
  double logpDiff = 0;
};

/// The rollouts of one step on this rank: the prompts [p0, p0 + P) of the
/// global batch with every rollout of each (whole groups, chains, trees).
struct StepBatch {
  int64_t rlIndex = 0, p0 = 0;
  RolloutBatch plan;
  RolloutTotals totals;
};

/// What the estimator and the loss read of a set of rollouts, packed.
struct Scores {
  Padded all;
  at::Tensor oldLogp, entropy;
  /// Token critic: V(S_t) per token; prompt critic (SPPO): the success
  /// probability sigmoid(V) read before the first response token, per
  /// sequence.
  at::Tensor oldValues;
  at::Tensor refLogp;
};

/// The step's samples across the world, in rank order (worker r holds a
/// contiguous run of prompts, so this is the order of one process): each
/// one's tokens, sums of weight and value_weight (the minibatches'
/// normalisers) and group.
struct SampleTable {
  /// This rank's first sample and every rank's (and the total).
  int64_t first = 0, total = 0;
  std::vector<int64_t> rankStart;
  std::vector<double> tokens, weight, valueWeight;
  std::vector<int64_t> group;
};

/// The estimator's outputs per trained sample (a path, or an SPO-tree node
/// sample), the advantage whitened where the file asks.
struct Advantages {
  /// The samples trained and their scores (an SPO-tree step re-scores its
  /// node samples).
  std::vector<Rollout> rolls;
  Scores scores;
  at::Tensor adv, ret, weight, valueWeight;
  /// Token offsets of each sample in the packed arrays.
  std::vector<int64_t> offsets;
  SampleTable table;
  /// The advantage's moments before whitening (adv_mean, adv_std).
  Moments raw;
};

//===--- Non-finite values (NonFinite.cpp) --------------------------------===//

/// "step N (RL step K)" of the step being run, for errors.
std::string describeStep(const TrainerState &s);
/// Every element of \p t is finite (an undefined or empty tensor is).
bool allFinite(const at::Tensor &t);
/// The policy on a non-finite \p what (\p bad on this rank): throws a
/// TrainError naming the step and \p what (with \p hint), or, with
/// --skip-nonfinite, returns true on every rank where any rank saw it and
/// counts the skip.
bool skipNonFinite(TrainerState &s, const std::string &what, bool bad,
                   const std::string &hint = "");
/// skipNonFinite for the elements of \p t, saying NaN or inf.
bool skipNonFiniteTensor(TrainerState &s, const std::string &what,
                         const at::Tensor &t, const std::string &hint = "");
/// The first parameter of \p model that holds a NaN or inf, as "NAME (NaN)";
/// empty where all are finite (or there is no model).
std::string firstNonFiniteParameter(TransformerLM &model);
/// Throws where the policy's or the critic's weights are not finite.
void checkWeights(TrainerState &s);

/// Sums over the step's minibatch updates (this rank's part of each).
struct UpdateStats {
  double pgLoss = 0, valueLoss = 0, kl = 0, loss = 0, clipFrac = 0, ratio = 0,
         gradNorm = 0;
  int64_t updates = 0;
};

/// Throws a TrainError with the numbers where the models of configs
/// \p policy and \p critic (null without a critic model) cannot train in
/// the memory available on the run's device: their weights, gradients,
/// AdamW's moments and the policy's reference copy where the run reads
/// logp_ref (estimateTrainingMemory), and, with RL steps, the update's
/// activations over a minibatch of sequences of \p promptTokens prompt
/// tokens and max_tokens new ones (estimateActivationMemory), against
/// availableMemory. Before anything is allocated.
void checkTrainingMemory(const TrainerState &s, const ModelConfig &policy,
                         const ModelConfig *critic, int64_t promptTokens);

/// On the CPU: throws a TrainError naming the numbers and the fields to
/// lower where the step's rollouts of \p numPrompts prompts (at least the
/// plan's rows per prompt each, of at least \p promptTokens prompt tokens)
/// cannot fit in the available memory (MemAvailable).
void checkRolloutMemory(const TrainerState &s, int64_t rlIndex,
                        int64_t numPrompts, int64_t promptTokens);

/// Generate: samples the step's rollouts and rewards them.
StepBatch sampleStep(TrainerState &s, int64_t rlIndex);
/// The plan's token accounting (the world's) into \p row.
void addPlanStats(const TrainerState &s, nlohmann::json &row, PlanStats st);
/// Score: rollout-time logp and entropy, the critic's values and the
/// reference's logp.
Scores score(TrainerState &s, const std::vector<Rollout> &rolls);
/// The packed [N] log-probabilities of \p rows' action tokens under
/// \p model at the rollouts' temperature, without autograd: forwards over
/// groups of rows whose largest per-layer activations (float32 attention
/// probabilities, the MLP's intermediates) stay near 1 GiB, each through
/// responseLogProbs (no full logits).
at::Tensor rolloutLogProbs(TrainerState &s, TransformerLM &model,
                           const std::vector<const Rollout *> &rows);
/// The world's mean KL per token in the reward (kl_reward, kl_coef into
/// \p row); 0 unless the KL is in the reward.
double rewardKl(TrainerState &s, const Scores &sc, nlohmann::json &row);
/// Runs the estimator bundle on \p rolls; \p plan supplies the chain plan's
/// `mc_value` and the tree plans' node structure.
TensorMap runEstimator(TrainerState &s, const std::vector<Rollout> &rolls,
                       const Scores &sc, const RolloutBatch &plan);
/// Estimate: the estimator's outputs for the step (through the replay
/// buffer for SPO-tree), the sample table, whitening; replay and node
/// counts into \p row.
Advantages estimate(TrainerState &s, StepBatch &batch, Scores sc,
                    nlohmann::json &row);
/// Update: PPO epochs over minibatches.
UpdateStats update(TrainerState &s, const Advantages &a);
/// Metrics: the step's row from the world's totals (returned); updates
/// the adaptive KL coefficient.
RolloutTotals stepMetrics(TrainerState &s, nlohmann::json &row,
                          RolloutTotals totals, UpdateStats u, double stepKl);

} // namespace cac::rt::train

#endif // CAC_LIB_TRAIN_PHASES_H
