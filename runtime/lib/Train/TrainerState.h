//===- TrainerState.h - What the trainer's phases share ---------*- C++ -*-===//
//
// The state of one run, in the parts that the phases of Phases.h read and
// write: the task (problems, prompts, rewards), the estimator and objective
// bundles and what they read, the models and their optimizer, and the run's
// progress (step, evaluations, logs, clocks). Private to cac_runtime_train.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_LIB_TRAIN_TRAINERSTATE_H
#define CAC_LIB_TRAIN_TRAINERSTATE_H

#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Model/ChatTemplate.h"
#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Tasks/Tasks.h"
#include "cac/Runtime/Model/Tokenizer.h"
#include "cac/Runtime/Model/Transformer.h"
#include "cac/Runtime/Train/CompiledObjective.h"
#include "cac/Runtime/Train/Metrics.h"
#include "cac/Runtime/Train/ReplayBuffer.h"
#include "cac/Runtime/Tasks/RewardCommand.h"
#include "cac/Runtime/Tasks/ToolCommand.h"
#include "cac/Runtime/Train/Trainer.h"
#include "cac/Runtime/Tasks/TwoOperandTask.h"
#include "cac/Runtime/Train/World.h"

#include <torch/optim/adamw.h>

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cac::rt::train {

using Clock = std::chrono::steady_clock;

/// Seconds since \p since.
double seconds(Clock::time_point since);
/// \p v printed with the printf format \p f.
std::string fmt(const char *f, double v);

/// The task's side of a run: its problems, how a problem becomes a prompt
/// and a target, and the reward of a completion (TaskSource.cpp).
struct TaskSource {
  const TrainConfig *cfg = nullptr;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ArithmeticTask> arith;
  std::optional<TwoOperandTask> twoOp;
  /// `reward = command(..)`: the program that scores completions.
  std::unique_ptr<RewardCommand> rewardCommand;
  /// `tools = command(..)`: the program that answers tool calls.
  std::unique_ptr<ToolCommand> toolCommand;
  /// gsm8k and jsonl: the files' problems.
  std::vector<Problem> dataTrain, dataEval;
  bool jsonlTask = false;
  std::vector<Problem> evalSet;
  int64_t eosId = -1, padId = 0;
  /// `chat = template(..)`: the template prompts go through, and the
  /// variables it gets.
  std::optional<ChatTemplate> chat;
  nlohmann::ordered_json chatVariables;

  /// Loads the tokenizer, the problems and the reward and tool programs of
  /// \p config; false after a diagnostic at a field of the file.
  bool load(const TrainConfig &config, DiagnosticEngine &diag);

  Problem trainProblem(uint64_t index) const;
  std::string promptText(const Problem &p) const;
  std::string targetText(const Problem &p) const;
  /// The SFT target's tokens and, per token, 1 for an observation token (not
  /// trained): with a tool on, an arithmetic task's solution is the call of
  /// its prompt's expression and the tool's reply
  /// (`<calc>347*29</calc><r>10063</r>`); else targetText's tokens.
  std::vector<int64_t> targetTokens(const Problem &p,
                                    std::vector<uint8_t> &obs) const;
  double reward(const Problem &p, const std::string &completion) const;
  std::vector<int64_t> encodePrompt(const Problem &p) const;
  SamplingOptions samplingOptions(bool greedy) const;

private:
  void checkDataset() const;
  bool loadChat(DiagnosticEngine &diag);
  bool startTool(DiagnosticEngine &diag);
  /// "FILE:LINE:COL: tools": where errors of the tool program point.
  std::string toolField() const;
};

/// The estimator bundle and the compiled objective, and what they read and
/// write (EstimatorSetup.cpp).
struct EstimatorSetup {
  std::shared_ptr<Bundle> bundle;
  std::optional<BundleEstimator> estimator;
  ParamMap params;
  Domain advDomain = Domain::Token;
  bool hasRet = false;
  /// The estimator's extra inputs/outputs (Rollouts.h, docs/training.md):
  /// a seq-level `value` (SPPO's prompt critic, BCE), a `mc_value : seg`
  /// (chain plan), a token `weight` masking the policy loss, a token
  /// `value_weight` masking the value loss.
  bool promptCritic = false, readsMc = false, hasWeight = false,
       hasValueWeight = false;
  /// The estimator reads `reward : token`: R on each sequence's last token,
  /// minus the KL penalty with `kl = ..(in_reward = 1)`.
  bool denseReward = false;
  /// `objective = "FILE.cac"`: the compiled objective, its parameters, and
  /// the inputs it reads besides logp_new.
  std::optional<CompiledObjective> objective;
  ParamMap objectiveParams;
  std::vector<std::string> objectiveInputs;
  /// The objective reads `group`: minibatches are whole groups.
  bool groupMinibatches = false;
};

/// The policy, the frozen reference, the critic and their optimizer
/// (Models.cpp).
struct ModelSet {
  TransformerLM policy{nullptr}, reference{nullptr}, critic{nullptr};
  /// The policy's copy in the rollout dtype (null while rollouts sample
  /// from the policy itself; rolloutPolicy() makes and refreshes it), and
  /// the policy's weight versions it was copied at.
  TransformerLM rollout{nullptr};
  int64_t rolloutVersion = -1;
  /// The estimator, the objective or the KL term reads logp_ref.
  bool needReference = false;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<double> baseLr;
  bool rlOptimizer = false;
};

/// One run of a training file.
struct TrainerState {
  TrainConfig cfg;
  TrainerOptions opts;
  World world;

  TaskSource task;
  EstimatorSetup est;
  ModelSet models;
  /// SPO-tree's replay buffer (the tree plan; off unless replay_steps > 0):
  /// this worker's node samples waiting to be trained.
  ReplayBuffer replay;
  /// The KL penalty's coefficient in the reward (adaptive with a target;
  /// checkpointed).
  double klCoef = 0;

  at::Generator sampleGen, shuffleGen;
  int64_t step = 0; // completed steps (SFT and RL together)
  /// Updates the step being run skipped for a non-finite value
  /// (--skip-nonfinite; NonFinite.cpp).
  int64_t nonFiniteSkips = 0;
  double evalStart = std::numeric_limits<double>::quiet_NaN();
  double evalEnd = std::numeric_limits<double>::quiet_NaN();
  /// The fraction of the last evaluation's greedy answers written in steps
  /// (arith(digits, steps > 0) only; NaN otherwise).
  double lastEvalSteps = std::numeric_limits<double>::quiet_NaN();
  /// The last eval's completions for samples.jsonl (rank 0's first ones).
  std::vector<nlohmann::json> evalSamples;
  std::unique_ptr<MetricsLog> log;
  std::unique_ptr<SampleLog> samples;
  std::unique_ptr<ProgressBar> bar;
  Clock::time_point runStart;
  double elapsedBefore = 0;

  /// Where the models, batches, estimator and update run (TrainerOptions).
  at::Device device() const { return opts.device; }
  /// Waits for the work queued on a GPU, so that a phase's time counts its
  /// kernels (a launch returns before the kernel runs).
  void syncForTiming() const;
  /// A host vector as a tensor on the run's device.
  template <typename T>
  at::Tensor onDevice(const std::vector<T> &v, at::ScalarType type) const {
    return at::tensor(v, type).to(device());
  }
  /// The run's wall-clock seconds, resumed runs' included.
  double elapsed() const { return elapsedBefore + seconds(runStart); }
};

} // namespace cac::rt::train

#endif // CAC_LIB_TRAIN_TRAINERSTATE_H
