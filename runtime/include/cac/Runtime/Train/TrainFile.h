//===- TrainFile.h - The `train NAME { ... }` training file -----*- C++ -*-===//
//
// A training file describes one RL run (docs/training.md):
//
//   train arith_grpo {
//     model      = builtin("tiny")
//     task       = arith(min_level = 1, max_level = 2)
//     estimator  = "../../stdlib/grpo.cac"
//     rollout    = group(n = 8, temperature = 1.0, max_tokens = 8)
//     objective  = ppo_clip(eps = 0.2)
//     optimizer  = adamw(lr = 3e-4, grad_clip = 1.0)
//     steps      = 100
//   }
//
// It shares the lexical conventions of .cac files (`#` and `//` comments,
// identifiers, numbers, double-quoted strings). A value is a number, a
// string, a name (`none`, `true`, `false`) or a call `f(positional...,
// key = value...)`, whose arguments are values again. parseTrainFile builds
// the syntax tree (TrainFileSyntax.h); buildTrainConfig checks it against
// the schema (this header's specs) and fills TrainConfig. Every problem is reported through DiagnosticEngine with its
// file:line:col; nothing here throws on bad input.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_TRAINFILE_H
#define CAC_RUNTIME_TRAIN_TRAINFILE_H

#include "cac/Runtime/Tasks/Calculator.h"
#include "cac/Runtime/Tasks/Tasks.h"
#include "cac/Runtime/Train/Diagnostics.h"
#include "cac/Runtime/Train/TrainFileSyntax.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cac::rt::train {

//===----------------------------------------------------------------------===//
// The checked configuration
//===----------------------------------------------------------------------===//

/// The policy (or a critic) model.
struct ModelSpec {
  enum class Kind { Builtin, HuggingFace, Random };
  Kind kind = Kind::Builtin;
  /// builtin: "tiny", "small" or "custom" (all sizes given).
  std::string size = "tiny";
  /// random: a public architecture (Model/Architectures.h) with random
  /// weights; `layers` and `maxPositions` replace its own where given
  /// (0: the architecture's), `seed` seeds the weights (else the run's
  /// seed does).
  std::string arch;
  std::optional<int64_t> seed;
  /// random: the folder whose tokenizer.json the task uses (resolved
  /// against the training file's folder); empty: the built-in character
  /// tokenizer.
  std::filesystem::path tokenizerPath;
  int64_t hidden = 64, layers = 2, heads = 4, kvHeads = 2, ffn = 192;
  int64_t maxPositions = 256;
  /// hf: the model folder (resolved against the training file's folder).
  std::filesystem::path path;
  SourceLoc loc;

  /// Whether the task uses the built-in character tokenizer with this
  /// model (builtin models, random ones without a tokenizer folder).
  bool charTokenizer() const {
    return kind == Kind::Builtin ||
           (kind == Kind::Random && tokenizerPath.empty());
  }
  /// The folder of the tokenizer otherwise.
  const std::filesystem::path &tokenizerFolder() const {
    return kind == Kind::Random ? tokenizerPath : path;
  }
};

/// Where prompts and rewards come from.
struct TaskSpec {
  enum class Kind { Arith, Gsm8k, Jsonl };
  Kind kind = Kind::Arith;
  int minLevel = 1, maxLevel = 2;
  /// arith(digits = D, ops = ".."): two-operand problems (TwoOperandTask)
  /// instead of the built-in task's levels; 0: levels.
  int digits = 0;
  std::string ops = "+-";
  /// arith(digits = D, steps = F): the fraction of SFT solutions written in
  /// place-value steps (TwoOperandTask::steppedSolution); 0: all bare.
  double steps = 0.0;
  /// arith(.., lines = 1): stepped SFT solutions break the line after every
  /// '=' (ArithmeticTask::breakLines), one step a line: VinePPO's `newline`
  /// steps. Needs steps written: the levels, or `steps` > 0.
  bool lines = false;
  double evalFraction = 0.1;
  /// gsm8k, jsonl: JSONL files (resolved against the training file's
  /// folder).
  std::filesystem::path trainPath, evalPath;
  /// jsonl: the fields of its objects.
  rt::JsonlKeys keys;
  SourceLoc loc;
};

/// `chat = template(..)`: prompts through a chat template (docs/training.md,
/// "Chat prompts"). The task's prompt becomes the user message, after a
/// system message when one is given, rendered with add_generation_prompt
/// and tokenized without the tokenizer's own special tokens.
struct ChatSpec {
  bool enabled = false;
  /// The folder whose tokenizer_config.json holds the template (resolved
  /// against the training file's folder); empty: the model's tokenizer
  /// folder.
  std::filesystem::path folder;
  /// The system message; empty: none.
  std::string system;
  /// Further variables of the template (`enable_thinking = false`): each
  /// name and its value as JSON text.
  std::vector<std::pair<std::string, std::string>> variables;
  SourceLoc loc;
};

/// One estimator parameter given in the training file.
struct EstimatorParam {
  std::string name;
  double value = 0;
  SourceLoc loc;
};

/// The credit-assignment method: a .cac file compiled to a bundle, or a
/// bundle folder compiled elsewhere.
struct EstimatorSpec {
  enum class Kind { Source, Bundle };
  Kind kind = Kind::Source;
  std::filesystem::path path;
  std::vector<EstimatorParam> params;
  SourceLoc loc;
};

/// A token-level critic trained with a clipped MSE to the estimator's `ret`.
struct CriticSpec {
  enum class Kind {
    None,
    /// A value head on the policy's own trunk.
    ValueHead,
    /// A separate transformer with a value head.
    ValueModel,
  };
  Kind kind = Kind::None;
  ModelSpec model;
  /// Learning rate of a separate critic (0: the policy's).
  double lr = 0;
  /// Weight of the value loss.
  double coef = 0.5;
  /// Clip range of the value around the rollout-time value (0: no clip).
  double clip = 0.2;
  SourceLoc loc;
};

/// How rollouts are generated (the rollout plan, Rollouts.h).
struct RolloutSpec {
  enum class Kind { Group, Chain, Tree, Forest };
  Kind kind = Kind::Group;
  /// group/chain: samples per prompt; forest: leaves per prompt (G).
  int64_t n = 8;
  double temperature = 1.0;
  double topP = 1.0;
  int64_t topK = 0;
  int64_t maxTokens = 16;
  /// chain: Monte-Carlo continuations per segment start (N_mc), and whether
  /// identical prefix queries of a prompt's rollouts share one set of them
  /// (the SPO code's de-duplication; estimators.md §2.3).
  int64_t samples = 4;
  bool dedup = true;
  /// tree: children per node at each depth (W) and tokens per segment (M).
  std::vector<int64_t> branches;
  int64_t segLen = 8;
  /// tree: SPO-tree's replay buffer (ReplayBuffer.h): how many steps a node
  /// sample may wait to be trained (0: no buffer, every step trains all of
  /// its own), and the most samples of one question trained per step (0:
  /// no cap).
  int64_t replaySteps = 0, replayTake = 0;
  /// forest: trees per prompt, children per branch point, the entropy
  /// threshold (tau at RL step s: max(min(tauMin, tau), tau - s * tauStep)),
  /// and the
  /// delimiters after each of which the first high-entropy position may
  /// branch (empty: any high-entropy position may).
  int64_t trees = 1;
  int64_t children = 2;
  /// forest: the children of a branch point draw distinct first tokens
  /// (sampling without replacement, estimators.md §6.2); false: each
  /// samples independently.
  bool distinct = true;
  /// forest: the branching entropy over the renormalised top-k
  /// probabilities (TreeAdv's approximation, k unpublished); 0: the full
  /// vocabulary.
  int64_t entropyTopK = 0;
  double tau = 1.4, tauStep = 0.0, tauMin = 1.0;
  std::vector<std::string> delimiters;
  SourceLoc loc;

  /// "group", "chain", "tree" or "forest".
  const char *kindName() const;
};

/// Where the rollouts' rewards come from: the task's own (exact answer: 1,
/// else 0), or `command("PROGRAM ARGS", timeout = 60)`, a program that
/// scores each completion (RewardCommand.h).
struct RewardSpec {
  enum class Kind { Task, Command };
  Kind kind = Kind::Task;
  std::string command;
  /// Seconds to wait for each answer.
  double timeout = 60.0;
  SourceLoc loc;
};

/// `tools = calculator(max_turns = 3, open = "<calc>", close = "</calc>",
/// result_open = "<r>", result_close = "</r>")`: rollouts may call the
/// calculator; `tools = command("PROGRAM ARGS", timeout = 10, start_timeout
/// = 60, max_bytes = 65536, ..)` (the same tags): a program of the user's
/// answers the calls (ToolCommand.h). The replies are observation tokens
/// (docs/training.md, "Tool use").
struct ToolSpec {
  enum class Kind { Calculator, Command };
  Kind kind = Kind::Calculator;
  /// Calls answered per rollout (0: no tool).
  int64_t maxTurns = 0;
  ToolSyntax syntax;
  /// command(..): the program's command line, the seconds to wait for a
  /// reply and for the program's ready line, and the bytes a reply may
  /// hold.
  std::string command;
  double timeout = 10.0, startTimeout = 60.0;
  int64_t maxBytes = 65536;
  SourceLoc loc;

  bool enabled() const { return maxTurns > 0; }
};

/// The clipped surrogate (estimators.md §0.2).
struct ObjectiveSpec {
  double epsLow = 0.2, epsHigh = 0.2;
  /// `objective = "FILE.cac"` (or cac("FILE.cac", param = value, ...)): a
  /// compiled objective (docs/language.md, Objectives) instead of the
  /// built-in ppo_clip; bundle("DIR", ...) or a folder path: one compiled
  /// elsewhere (`cac compile FILE.cac -o F.ptx --bundle DIR`).
  std::optional<EstimatorSpec> compiled;
  SourceLoc loc;
};

/// How per-token losses are reduced (estimators.md §0.2).
enum class Aggregation {
  TokenMean,
  SeqMeanTokenMean,
  SeqMeanTokenSum,
  /// seq-mean-token-sum divided by a constant length (rollout max_tokens),
  /// as Dr. GRPO does.
  SeqMeanTokenSumNorm,
};
const char *aggregationName(Aggregation a);
std::optional<Aggregation> parseAggregation(const std::string &s);

/// KL to the frozen policy at RL start, added to the loss.
struct KlSpec {
  enum class Kind { None, K1, K3 };
  Kind kind = Kind::None;
  double coef = 0;
  /// In the reward (verl's use_kl_in_reward): -coef * KL(pi_old || pi_ref)
  /// on every token's reward, for an estimator with `reward : token`,
  /// instead of a loss term.
  bool inReward = false;
  /// In the reward: an adaptive coefficient (Ziegler et al.; verl's and
  /// OpenRLHF's AdaptiveKLController) when target > 0: after each step,
  /// coef *= 1 + clip(KL / target - 1, -0.2, 0.2) * sequences / horizon,
  /// KL the step's mean per token.
  double target = 0;
  double horizon = 10000;
  SourceLoc loc;
};

struct OptimizerSpec {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = 0.0;
  /// Max global gradient norm (0: no clipping).
  double gradClip = 1.0;
  SourceLoc loc;
};

struct ScheduleSpec {
  enum class Kind { Constant, Cosine };
  Kind kind = Kind::Constant;
  int64_t warmup = 0;
  /// Cosine: the final learning rate as a fraction of the peak.
  double minRatio = 0.0;
  SourceLoc loc;
};

/// Supervised warm start on the task's worked solutions.
struct SftSpec {
  int64_t steps = 0;
  int64_t batch = 32;
  double lr = 1e-3;
  /// The SFT phase's own schedule (else the run's `schedule`).
  std::optional<ScheduleSpec> schedule;
  SourceLoc loc;
};

/// Held-out greedy evaluation.
struct EvalSpec {
  /// Every this many RL steps (0: only at RL start and end).
  int64_t every = 10;
  int64_t size = 200;
  /// Greedy completions of the first this many eval problems written to
  /// samples.jsonl at every eval (0: none).
  int64_t samples = 8;
  SourceLoc loc;
};

/// Everything a run needs, checked.
struct TrainConfig {
  std::string name;
  /// The training file (relative paths in it are against its folder).
  std::filesystem::path file;
  ModelSpec model;
  TaskSpec task;
  ChatSpec chat;
  RewardSpec reward;
  /// The tool of multi-turn rollouts (none unless `tools` is set).
  ToolSpec tools;
  EstimatorSpec estimator;
  CriticSpec critic;
  RolloutSpec rollout;
  /// Prompts per RL step (each gives rollout.n sequences).
  int64_t prompts = 16;
  ObjectiveSpec objective;
  Aggregation aggregation = Aggregation::TokenMean;
  KlSpec kl;
  /// PPO epochs over the batch and minibatches per epoch.
  int64_t epochs = 1, minibatches = 1;
  /// Whiten advantages over the batch's tokens before the update.
  bool whiten = false;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  SftSpec sft;
  /// RL steps.
  int64_t steps = 0;
  EvalSpec eval;
  /// Checkpoint every this many steps (SFT and RL counted together; 0: only
  /// at the end of each phase).
  int64_t checkpointEvery = 0;
  uint64_t seed = 1;
  /// Output folder (relative to the current directory).
  std::filesystem::path out = "runs/train";
  /// Intra-op CPU threads (0: LibTorch's default).
  int64_t threads = 0;
  /// The dtype the rollouts and evaluations sample in ("float32" or
  /// "bfloat16", modelDtypeName's names). Not float32: a copy of the policy
  /// in that dtype samples, refreshed whenever the policy's weights changed;
  /// the policy itself, its update and the old log-probabilities stay
  /// float32 (docs/training.md, "Rollout dtype").
  std::string rolloutDtype = "float32";
  /// How float32 matrix products may round, PyTorch's
  /// torch.set_float32_matmul_precision: "highest" (float32 throughout),
  /// "high" (TF32 tensor cores on CUDA) or "medium" (bfloat16 inside them),
  /// set for the whole run (docs/training.md, "Float32 matmul precision").
  std::string float32MatmulPrecision = "highest";
  /// The dtype the policy's (and a critic model's) passes over whole
  /// sequences compute in: the update, the SFT warm start, the rescoring of
  /// rollout log-probabilities and the old values ("float32" or
  /// "bfloat16"). bfloat16: the weights are cast where used, the master
  /// weights, their gradients and AdamW's moments stay float32
  /// (docs/training.md, "Update dtype").
  std::string updateDtype = "float32";
  /// Whether the update and the SFT warm start keep only each decoder
  /// layer's input for the backward pass and recompute the layer there
  /// (docs/training.md, "Activation checkpointing").
  bool activationCheckpointing = false;

  /// Where each field was set (for errors found after parsing).
  std::vector<std::pair<std::string, SourceLoc>> fieldLocs;
  SourceLoc locOf(const std::string &field) const;
};

/// Checks \p block against the schema (docs/training.md) and fills a config;
/// reports every problem to \p diag and returns nothing if there was one.
/// \p file is the training file's path (relative paths are against its
/// folder).
std::optional<TrainConfig> buildTrainConfig(const TrainBlock &block,
                                            const std::filesystem::path &file,
                                            DiagnosticEngine &diag);

/// Reads, parses and checks a training file. On failure the rendered
/// diagnostics (or the I/O error) are in \p errors.
std::optional<TrainConfig> loadTrainFile(const std::filesystem::path &file,
                                         std::string &errors);

/// Command-line overrides of training-file fields.
struct Overrides {
  std::optional<int64_t> steps, sftSteps, evalEvery, seed, threads;
  std::optional<std::string> out;
};

/// Applies \p o to \p config (values were checked by the command line).
void applyOverrides(TrainConfig &config, const Overrides &o);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_TRAINFILE_H
