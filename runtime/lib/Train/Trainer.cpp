//===- Trainer.cpp - The RL training loop of cac-run ----------------------===//

#include "cac/Runtime/Train/Trainer.h"

#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Model/Checkpoint.h"
#include "cac/Runtime/Model/CpuKernels.h"
#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Support/FileUtil.h"
#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Tasks/Tasks.h"
#include "cac/Runtime/Model/Tokenizer.h"
#include "cac/Runtime/Model/Transformer.h"
#include "cac/Runtime/Train/Distributed.h"
#include "cac/Runtime/Train/Metrics.h"
#include "cac/Runtime/Train/CompiledObjective.h"
#include "cac/Runtime/Train/Objective.h"
#include "cac/Runtime/Train/ReplayBuffer.h"
#include "cac/Runtime/Train/Rollouts.h"
#include "cac/Runtime/Tasks/RewardCommand.h"
#include "cac/Runtime/Tasks/TwoOperandTask.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt::train {

std::string checkDevice(const std::string &spec, c10::Device &out) {
  std::optional<c10::Device> d;
  try {
    d.emplace(spec);
  } catch (const std::exception &) {
  }
  if (!d || (!d->is_cpu() && !d->is_cuda()) || (d->is_cpu() && d->has_index()))
    return "--device expects cpu, cuda or cuda:N, got '" + spec + "'";
  if (d->is_cuda()) {
    if (!torch::cuda::is_available())
      return "--device " + spec +
             ": this LibTorch sees no CUDA device (Debian's libtorch is "
             "CPU-only; build cac-run against a CUDA LibTorch on a GPU "
             "machine, docs/training.md)";
    int64_t n = static_cast<int64_t>(torch::cuda::device_count());
    if (d->has_index() && d->index() >= n)
      return "--device " + spec + ": this machine has " + std::to_string(n) +
             " CUDA device" + (n == 1 ? "" : "s");
    if (!d->has_index())
      d.emplace(c10::kCUDA, 0);
  }
  out = *d;
  return {};
}

double scheduleFactor(const ScheduleSpec &s, int64_t step, int64_t total) {
  if (s.warmup > 0 && step < s.warmup)
    return static_cast<double>(step + 1) / static_cast<double>(s.warmup + 1);
  if (s.kind == ScheduleSpec::Kind::Constant)
    return 1.0;
  int64_t span = total - s.warmup;
  if (span <= 1)
    return 1.0;
  double progress =
      static_cast<double>(step - s.warmup) / static_cast<double>(span - 1);
  progress = std::clamp(progress, 0.0, 1.0);
  return s.minRatio +
         (1.0 - s.minRatio) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// Right-padded [b, L] ids of prompt + response rows, and where each
/// response token's logp / value sits in the model's [b, L-1] outputs.
struct Padded {
  at::Tensor ids, mask; // [b, L] int64, bool
  at::Tensor pos, resp; // [b, Tmax] int64 indices into [b, L-1], bool
  at::Tensor tokenSeq;  // [N] int64, local sequence index
  int64_t numTokens = 0;
};

Padded padRollouts(const std::vector<const Rollout *> &rows, int64_t padId,
                   at::Device device) {
  int64_t b = static_cast<int64_t>(rows.size());
  int64_t L = 2, Tmax = 1;
  for (const Rollout *r : rows) {
    L = std::max<int64_t>(L, r->prompt.size() + r->response.size());
    Tmax = std::max<int64_t>(Tmax, r->response.size());
  }
  std::vector<int64_t> ids(b * L, padId), pos(b * Tmax, 0), seq;
  std::vector<uint8_t> mask(b * L, 0), resp(b * Tmax, 0);
  for (int64_t i = 0; i < b; ++i) {
    const Rollout &r = *rows[i];
    int64_t P = r.prompt.size(), T = r.response.size();
    for (int64_t j = 0; j < P; ++j)
      ids[i * L + j] = r.prompt[j], mask[i * L + j] = 1;
    for (int64_t t = 0; t < T; ++t) {
      ids[i * L + P + t] = r.response[t], mask[i * L + P + t] = 1;
      pos[i * Tmax + t] = P + t - 1;
      resp[i * Tmax + t] = 1;
      seq.push_back(i);
    }
  }
  Padded p;
  p.ids = at::tensor(ids, at::kLong).view({b, L}).to(device);
  p.mask = at::tensor(mask, at::kByte).view({b, L}).to(device, at::kBool);
  p.pos = at::tensor(pos, at::kLong).view({b, Tmax}).to(device);
  p.resp = at::tensor(resp, at::kByte).view({b, Tmax}).to(device, at::kBool);
  p.tokenSeq = at::tensor(seq, at::kLong).to(device);
  p.numTokens = static_cast<int64_t>(seq.size());
  return p;
}

/// [b, L-1] (or [b, L]) per-position values → packed [N] response values.
at::Tensor gatherResponse(const at::Tensor &perPos, const Padded &p) {
  return perPos.gather(1, p.pos).masked_select(p.resp);
}

at::Tensor packFloats(const std::vector<const std::vector<float> *> &rows,
                      at::Device device) {
  std::vector<float> all;
  for (const auto *r : rows)
    all.insert(all.end(), r->begin(), r->end());
  return at::tensor(all, at::kFloat).to(device);
}

/// A host copy of \p t as floats (for the loops that read it element by
/// element).
std::vector<float> hostFloats(const at::Tensor &t) {
  at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(),
                            c.data_ptr<float>() + c.numel());
}

/// Runs `argv` and waits; returns the exit status (127: could not start).
int runProcess(const std::vector<std::string> &argv) {
  std::vector<char *> args;
  for (const auto &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = fork();
  if (pid < 0)
    return 127;
  if (pid == 0) {
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return 127;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

} // namespace

//===----------------------------------------------------------------------===//
// Impl
//===----------------------------------------------------------------------===//

struct Trainer::Impl {
  TrainConfig cfg;
  TrainerOptions opts;

  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ArithmeticTask> arith;
  std::optional<TwoOperandTask> twoOp;
  /// `reward = command(..)`: the program that scores completions.
  std::unique_ptr<RewardCommand> rewardCommand;
  /// gsm8k and jsonl: the files' problems.
  std::vector<Problem> dataTrain, dataEval;
  bool jsonlTask = false;
  std::vector<Problem> evalSet;

  TransformerLM policy{nullptr}, reference{nullptr}, critic{nullptr};
  bool needReference = false;
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
  /// The KL penalty's coefficient in the reward (adaptive with a target;
  /// checkpointed).
  double klCoef = 0;
  /// `objective = "FILE.cac"`: the compiled objective, its parameters, and
  /// the inputs it reads besides logp_new.
  std::optional<CompiledObjective> objective;
  ParamMap objectiveParams;
  std::vector<std::string> objectiveInputs;
  /// The objective reads `group`: minibatches are whole groups.
  bool groupMinibatches = false;
  /// SPO-tree's replay buffer (the tree plan; off unless replay_steps > 0):
  /// this worker's node samples waiting to be trained.
  ReplayBuffer replay;

  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<double> baseLr;
  bool rlOptimizer = false;

  at::Generator sampleGen, shuffleGen;
  int64_t step = 0; // completed steps (SFT and RL together)
  double evalStart = std::numeric_limits<double>::quiet_NaN();
  double evalEnd = std::numeric_limits<double>::quiet_NaN();
  std::unique_ptr<MetricsLog> log;
  std::unique_ptr<SampleLog> samples;
  /// The last eval's completions for samples.jsonl (rank 0's first ones).
  std::vector<json> evalSamples;
  std::unique_ptr<ProgressBar> bar;
  Clock::time_point runStart;
  double elapsedBefore = 0;

  int64_t eosId = -1, padId = 0;

  /// Where the models, batches, estimator and update run (TrainerOptions).
  at::Device device() const { return opts.device; }
  /// Waits for the work queued on a GPU, so that a phase's time counts its
  /// kernels (a launch returns before the kernel runs).
  void syncForTiming() const {
    if (device().is_cuda())
      torch::cuda::synchronize(device().has_index() ? device().index() : -1);
  }
  /// A host vector as a tensor on the run's device.
  template <typename T>
  at::Tensor onDevice(const std::vector<T> &v, at::ScalarType type) const {
    return at::tensor(v, type).to(device());
  }

  // --- data parallelism (docs/training.md) -------------------------------

  Communicator *dist() const { return opts.dist; }
  int rank() const { return opts.dist ? opts.dist->rank() : 0; }
  int worldSize() const { return opts.dist ? opts.dist->size() : 1; }
  /// Rank 0 (or a lone process) writes metrics, plots and checkpoints.
  bool writer() const { return rank() == 0; }

  /// Sums \p v over the ranks (nothing for a lone process).
  void reduceSum(std::vector<double> &v) {
    if (opts.dist)
      opts.dist->sum(v);
  }

  // --- setup --------------------------------------------------------------

  ModelConfig builtinConfig(const ModelSpec &m) const {
    ModelConfig c;
    c.modelType = "llama";
    c.vocabSize = tokenizer->vocabSize();
    c.hiddenSize = m.hidden;
    c.intermediateSize = m.ffn;
    c.numHiddenLayers = m.layers;
    c.numAttentionHeads = m.heads;
    c.numKeyValueHeads = m.kvHeads;
    c.maxPositionEmbeddings = m.maxPositions;
    c.rmsNormEps = 1e-5;
    c.tieWordEmbeddings = true;
    c.bosTokenId = tokenizer->bosId();
    if (tokenizer->eosId())
      c.eosTokenIds = {*tokenizer->eosId()};
    c.padTokenId = tokenizer->padId();
    c.validate("builtin model");
    return c;
  }

  TransformerLM makeModel(const ModelSpec &m, bool valueHead) {
    if (m.kind == ModelSpec::Kind::Builtin)
      return TransformerLM(builtinConfig(m), valueHead);
    LoadOptions lo;
    lo.valueHead = valueHead ? ValueHeadMode::With : ValueHeadMode::Without;
    return loadPretrained(m.path, lo);
  }

  /// A fresh copy of the policy's architecture (weights are loaded later).
  TransformerLM cloneArchitecture(const TransformerLM &m) {
    TransformerLM c(m->config(), m->hasValueHead());
    c->to(device());
    return c;
  }

  void copyWeights(TransformerLM &to, const TransformerLM &from) {
    torch::NoGradGuard ng;
    auto src = from->named_parameters();
    for (auto &p : to->named_parameters())
      p.value().copy_(src[p.key()]);
  }

  bool checkPaths(DiagnosticEngine &diag) {
    bool ok = true;
    auto exists = [&](const fs::path &p, SourceLoc loc, const char *what) {
      if (!fs::exists(p)) {
        diag.error(loc,
                   std::string(what) + " '" + p.string() + "' does not exist");
        ok = false;
      }
    };
    if (cfg.model.kind == ModelSpec::Kind::HuggingFace)
      exists(cfg.model.path, cfg.model.loc, "model folder");
    if (cfg.critic.kind == CriticSpec::Kind::ValueModel &&
        cfg.critic.model.kind == ModelSpec::Kind::HuggingFace)
      exists(cfg.critic.model.path, cfg.critic.model.loc, "critic folder");
    if (cfg.task.kind == TaskSpec::Kind::Gsm8k ||
        cfg.task.kind == TaskSpec::Kind::Jsonl) {
      exists(cfg.task.trainPath, cfg.task.loc, "training set");
      exists(cfg.task.evalPath, cfg.task.loc, "evaluation set");
    }
    exists(cfg.estimator.path, cfg.estimator.loc,
           cfg.estimator.kind == EstimatorSpec::Kind::Source
               ? "estimator source"
               : "estimator bundle");
    return ok;
  }

  bool loadEstimator(DiagnosticEngine &diag) {
    fs::path dir = cfg.estimator.path;
    if (cfg.estimator.kind == EstimatorSpec::Kind::Source) {
      if (opts.compiler.empty()) {
        diag.error(cfg.estimator.loc,
                   "no `cac` compiler to compile '" + dir.string() +
                       "': put cac-run next to `cac` (or set CAC_COMPILER), "
                       "or give a bundle compiled elsewhere: "
                       "bundle(\"DIR\") from `cac compile FILE.cac --bundle "
                       "DIR`");
        return false;
      }
      fs::path bundles = cfg.out / "bundles";
      fs::create_directories(bundles);
      fs::path target = bundles / cfg.estimator.path.stem();
      // Rank 0 compiles; the other workers load its bundle.
      int rc = 0;
      if (writer())
        rc = runProcess(
            {opts.compiler.string(), "compile", cfg.estimator.path.string(),
             "-o",
             (bundles / (cfg.estimator.path.stem().string() + ".ptx")).string(),
             "--bundle", target.string()});
      if (rc != 0) {
        diag.error(cfg.estimator.loc,
                   "compiling '" + cfg.estimator.path.string() + "' with '" +
                       opts.compiler.string() + "' failed (exit status " +
                       std::to_string(rc) + ")");
        return false;
      }
      if (dist())
        dist()->barrier();
      dir = target;
    }
    try {
      bundle = Bundle::load(dir.string());
    } catch (const std::exception &e) {
      diag.error(cfg.estimator.loc,
                 std::string("cannot load the estimator bundle: ") + e.what());
      return false;
    }
    estimator.emplace(bundle);
    const Manifest &m = bundle->manifest();
    bool ok = true;
    if (device().is_cuda() && !bundle->hasCuda()) {
      diag.error(cfg.estimator.loc,
                 "the estimator bundle '" + dir.string() +
                     "' has no kernels.ptx, so it cannot run on " +
                     device().str() +
                     ": compile it again with `cac compile FILE.cac -o "
                     "FILE.ptx --bundle DIR` (which writes kernels.ptx), or "
                     "train with --device cpu");
      ok = false;
    }

    // Parameters: every given one must exist; every required one be given.
    for (const auto &p : cfg.estimator.params) {
      if (m.findParam(p.name) < 0) {
        std::vector<std::string> names = estimator->paramNames();
        std::string list;
        for (const auto &n : names)
          list += (list.empty() ? "" : ", ") + n;
        diag.error(p.loc, "estimator '" + m.estimator + "' has no parameter '" +
                              p.name + "'" +
                              (list.empty() ? " (it has none)"
                                            : " (parameters: " + list + ")"));
        ok = false;
        continue;
      }
      params[p.name] = p.value;
    }
    for (const auto &ps : m.params)
      if (!ps.defaultValue && !params.count(ps.name)) {
        diag.error(cfg.estimator.loc,
                   "estimator '" + m.estimator + "' needs the parameter '" +
                       ps.name + "' (it has no default): write cac(\"...\", " +
                       ps.name + " = VALUE)");
        ok = false;
      }

    // Inputs the trainer can provide.
    static const std::vector<std::pair<std::string, Domain>> provided = {
        {"logp", Domain::Token},  {"logp_old", Domain::Token},
        {"p_old", Domain::Token}, {"entropy", Domain::Token},
        {"value", Domain::Token}, {"logp_ref", Domain::Token},
        {"reward", Domain::Seq},  {"reward", Domain::Token},
        {"group", Domain::Seq},
        {"length", Domain::Seq},  {"value", Domain::Seq},
        {"mc_value", Domain::Seg}, {"newline", Domain::Token}};
    bool readsValue = false;
    for (const auto &b : m.buffers) {
      if (b.role != BufferRole::Input)
        continue;
      auto it = std::find_if(provided.begin(), provided.end(), [&](const auto &p) {
        return p.first == b.name && p.second == b.domain;
      });
      if (it == provided.end()) {
        std::string list;
        for (const auto &p : provided)
          list += (list.empty() ? "" : ", ") + p.first + " : " +
                  domainName(p.second);
        diag.error(cfg.estimator.loc,
                   "estimator '" + m.estimator + "' reads the input '" +
                       b.name + " : " + domainName(b.domain) +
                       "', which cac-run does not provide (it provides " +
                       list + ")");
        ok = false;
      }
      if (b.name == "value") {
        readsValue = true;
        promptCritic = b.domain == Domain::Seq;
      }
      if (b.name == "mc_value")
        readsMc = true;
      if (b.name == "reward")
        denseReward = b.domain == Domain::Token;
      if (b.name == "logp_ref")
        needReference = true;
    }
    int adv = m.findBuffer("adv");
    if (adv < 0 || m.buffers[adv].role != BufferRole::Output ||
        (m.buffers[adv].domain != Domain::Token &&
         m.buffers[adv].domain != Domain::Seq)) {
      diag.error(cfg.estimator.loc,
                 "estimator '" + m.estimator +
                     "' must have an output 'adv' on token or seq (the "
                     "advantage the policy loss uses)");
      ok = false;
    } else {
      advDomain = m.buffers[adv].domain;
    }
    int ret = m.findBuffer("ret");
    hasRet = ret >= 0 && m.buffers[ret].role == BufferRole::Output &&
             m.buffers[ret].domain == Domain::Token;
    auto tokenOutput = [&](const char *name) {
      int i = m.findBuffer(name);
      return i >= 0 && m.buffers[i].role == BufferRole::Output &&
             m.buffers[i].domain == Domain::Token;
    };
    hasWeight = tokenOutput("weight");
    hasValueWeight = tokenOutput("value_weight");
    if (!checkPlan(diag, m))
      ok = false;
    SourceLoc criticLoc =
        cfg.critic.loc.valid() ? cfg.critic.loc : cfg.estimator.loc;
    if (readsValue && cfg.critic.kind == CriticSpec::Kind::None) {
      diag.error(criticLoc, "estimator '" + m.estimator +
                                "' reads the token input 'value': set critic = "
                                "value_head(...) or value_model(...)");
      ok = false;
    }
    if (!readsValue && cfg.critic.kind != CriticSpec::Kind::None) {
      diag.error(criticLoc, "a critic is set but estimator '" + m.estimator +
                                "' reads no token input 'value'; use "
                                "critic = none");
      ok = false;
    }
    if (readsValue && !hasRet && !promptCritic) {
      diag.error(cfg.estimator.loc,
                 "estimator '" + m.estimator +
                     "' reads 'value' but has no token output 'ret' to "
                     "train the critic on");
      ok = false;
    }
    return ok;
  }

  /// Compiles and loads `objective = "FILE.cac"`: its gradient input must be
  /// logp_new, and it may read logp, adv, logp_ref, entropy, the estimator's
  /// weight, the rollout-time critic value and the reward
  /// (docs/training.md).
  bool loadObjective(DiagnosticEngine &diag) {
    const EstimatorSpec &spec = *cfg.objective.compiled;
    // A bundle compiled elsewhere (a GPU machine without the compiler).
    fs::path target = spec.path;
    if (spec.kind == EstimatorSpec::Kind::Bundle &&
        !fs::is_directory(spec.path)) {
      diag.error(spec.loc, "the objective bundle '" + spec.path.string() +
                               "' does not exist");
      return false;
    }
    if (spec.kind == EstimatorSpec::Kind::Source) {
      if (opts.compiler.empty()) {
        diag.error(spec.loc, "no `cac` compiler to compile '" +
                                 spec.path.string() +
                                 "': put cac-run next to `cac` (or set "
                                 "CAC_COMPILER), or give a bundle compiled "
                                 "elsewhere: objective = bundle(\"DIR\")");
        return false;
      }
      if (!fs::is_regular_file(spec.path)) {
        diag.error(spec.loc, "the objective '" + spec.path.string() +
                                 "' does not exist");
        return false;
      }
      fs::path bundles = cfg.out / "bundles";
      fs::create_directories(bundles);
      target = bundles / ("objective-" + spec.path.stem().string());
      // Rank 0 compiles; the other workers load its bundle.
      int rc = 0;
      if (writer())
        rc = runProcess({opts.compiler.string(), "compile",
                         spec.path.string(), "-o", (target.string() + ".ptx"),
                         "--bundle", target.string()});
      if (rc != 0) {
        diag.error(spec.loc, "compiling '" + spec.path.string() + "' with '" +
                                 opts.compiler.string() +
                                 "' failed (exit status " +
                                 std::to_string(rc) + ")");
        return false;
      }
      if (dist())
        dist()->barrier();
    }
    try {
      objective.emplace(Bundle::load(target.string()));
    } catch (const std::exception &e) {
      diag.error(spec.loc, std::string("cannot use the objective: ") +
                               e.what());
      return false;
    }
    bool ok = true;
    if (device().is_cuda() && !objective->bundle().bundle().hasCuda()) {
      diag.error(spec.loc, "the objective's bundle '" + target.string() +
                               "' has no kernels.ptx, so it cannot run on " +
                               device().str());
      ok = false;
    }
    if (objective->wrt() != "logp_new") {
      diag.error(spec.loc, "the objective '" + spec.path.stem().string() +
                               "' must be differentiated by logp_new (it is "
                               "differentiated by '" +
                               objective->wrt() + "')");
      ok = false;
    }
    const Manifest &m = objective->bundle().manifest();
    auto domainOf = [&](const std::string &name) {
      for (const BufferSpec &b : m.buffers)
        if (b.role == BufferRole::Input && b.name == name)
          return b.domain;
      return Domain::Token;
    };
    for (const std::string &in : objective->bundle().inputNames()) {
      if (in == "logp_new")
        continue;
      if (in == "logp" || in == "adv")
        ; // always there
      else if (in == "logp_ref")
        needReference = true;
      else if (in == "weight" && !hasWeight) {
        diag.error(spec.loc, "the objective reads 'weight', which estimator '" +
                                 bundle->manifest().estimator +
                                 "' does not output");
        ok = false;
      } else if (in == "value") {
        // The critic's rollout-time value: V(S_t) per token from a token
        // critic, the success probability per sequence from SPPO's prompt
        // critic.
        Domain want = promptCritic ? Domain::Seq : Domain::Token;
        if (cfg.critic.kind == CriticSpec::Kind::None ||
            domainOf(in) != want) {
          diag.error(spec.loc,
                     cfg.critic.kind == CriticSpec::Kind::None
                         ? std::string("the objective reads 'value': set a "
                                       "critic (critic = value_head(...))")
                         : "the objective reads 'value : " +
                               std::string(domainName(domainOf(in))) +
                               "', but the critic gives 'value : " +
                               domainName(want) + "'");
          ok = false;
        }
      } else if (in == "group") {
        // (a group id buffer; the group structure itself is below)
      } else if (in != "entropy" && in != "weight" && in != "reward") {
        diag.error(spec.loc, "the objective reads '" + in +
                                 "'; cac-run gives objectives logp_new, logp, "
                                 "adv, logp_ref, entropy, weight, value and "
                                 "reward");
        ok = false;
      }
      objectiveInputs.push_back(in);
    }
    // Group statistics inside the objective (stdlib/gspo.cac: GRPO's
    // advantage) must be the step's: the minibatches hold whole groups.
    if (m.needsGroups) {
      groupMinibatches = true;
      if (cfg.minibatches > cfg.prompts) {
        diag.error(cfg.locOf("minibatches"),
                   "the objective computes over groups, so each minibatch "
                   "holds whole groups: minibatches (" +
                       std::to_string(cfg.minibatches) +
                       ") exceeds the groups per step (prompts = " +
                       std::to_string(cfg.prompts) + ")");
        ok = false;
      }
    }
    for (const auto &p : spec.params) {
      if (m.findParam(p.name) < 0) {
        diag.error(p.loc, "objective '" + m.estimator +
                              "' has no parameter '" + p.name + "'");
        ok = false;
      }
      objectiveParams[p.name] = p.value;
    }
    // The training file's aggregation, and Dr. GRPO's length: max_tokens
    // (a token loss's parameters; a seq loss averages over the sequences).
    if (m.findParam("aggregation") >= 0)
      objectiveParams["aggregation"] = static_cast<double>(cfg.aggregation);
    if (m.findParam("norm_len") >= 0)
      objectiveParams["norm_len"] = static_cast<double>(cfg.rollout.maxTokens);
    return ok;
  }

  bool checkPlan(DiagnosticEngine &diag, const Manifest &m) {
    std::string err =
        planMismatch(cfg.rollout, m.estimator, readsMc, m.needsTree,
                     cfg.critic.kind != CriticSpec::Kind::None);
    if (err.empty())
      return true;
    diag.error(cfg.rollout.loc.valid() ? cfg.rollout.loc : cfg.estimator.loc,
               err);
    return false;
  }

  bool prepare(DiagnosticEngine &diag) {
    if (!checkPaths(diag))
      return false;
    if (dist() && cfg.steps > 0 && cfg.prompts < worldSize())
      throw TrainError("data-parallel: " + std::to_string(worldSize()) +
                       " workers need at least as many prompts per step "
                       "(the file sets prompts = " +
                       std::to_string(cfg.prompts) + ")");
    // ATen's pool; OpenBLAS's too for data-parallel workers (N workers of T
    // threads must not each run one BLAS thread per core). A single process
    // keeps OpenBLAS's default, one thread per core: its thread count
    // changes the rounding of some kernels, and the measured runs used it.
    if (cfg.threads > 0)
      setCpuThreads(static_cast<int>(cfg.threads), dist() != nullptr);
    fs::create_directories(cfg.out);
    if (!loadEstimator(diag))
      return false;
    if (cfg.kl.kind != KlSpec::Kind::None && cfg.kl.coef > 0)
      needReference = true;
    klCoef = cfg.kl.coef;
    if (cfg.kl.inReward && !denseReward) {
      diag.error(cfg.kl.loc,
                 "the KL penalty in the reward (in_reward = 1) goes on every "
                 "token's reward, but estimator '" +
                     bundle->manifest().estimator +
                     "' reads 'reward : seq'; use one that reads 'reward : "
                     "token' (e.g. stdlib/gae_dense.cac)");
      return false;
    }
    if (cfg.objective.compiled && !loadObjective(diag))
      return false;

    try {
      // Tokenizer and task.
      if (cfg.model.kind == ModelSpec::Kind::Builtin)
        tokenizer = std::make_unique<CharTokenizer>();
      else
        tokenizer = loadTokenizer(cfg.model.path);
      eosId = tokenizer->eosId().value_or(-1);
      padId = tokenizer->padId().value_or(eosId >= 0 ? eosId : 0);
      if (cfg.task.kind == TaskSpec::Kind::Arith && cfg.task.digits > 0) {
        twoOp.emplace(cfg.seed, cfg.task.digits, cfg.task.ops,
                      cfg.task.evalFraction, cfg.task.steps);
        evalSet = twoOp->evalSet(static_cast<size_t>(cfg.eval.size));
      } else if (cfg.task.kind == TaskSpec::Kind::Arith) {
        ArithmeticTask::Options o;
        o.seed = cfg.seed;
        o.minLevel = cfg.task.minLevel;
        o.maxLevel = cfg.task.maxLevel;
        o.evalFraction = cfg.task.evalFraction;
        arith.emplace(o);
        evalSet = arith->evalSet(static_cast<size_t>(cfg.eval.size));
      } else {
        jsonlTask = cfg.task.kind == TaskSpec::Kind::Jsonl;
        dataTrain = jsonlTask ? loadJsonl(cfg.task.trainPath, cfg.task.keys)
                              : loadGsm8k(cfg.task.trainPath);
        dataEval = jsonlTask ? loadJsonl(cfg.task.evalPath, cfg.task.keys)
                             : loadGsm8k(cfg.task.evalPath);
        if (jsonlTask)
          checkDataset();
        evalSet.assign(dataEval.begin(),
                       dataEval.begin() +
                           std::min<size_t>(dataEval.size(), cfg.eval.size));
      }

      if (cfg.reward.kind == RewardSpec::Kind::Command) {
        try {
          rewardCommand = std::make_unique<RewardCommand>(
              cfg.reward.command, cfg.file.parent_path(), cfg.reward.timeout);
        } catch (const std::exception &e) {
          diag.error(cfg.reward.loc, e.what());
          return false;
        }
      }

      // Models: the global generator decides the fresh initialization.
      torch::manual_seed(cfg.seed);
      policy =
          makeModel(cfg.model, cfg.critic.kind == CriticSpec::Kind::ValueHead);
      if (cfg.critic.kind == CriticSpec::Kind::ValueModel)
        critic = makeModel(cfg.critic.model, true);
      if (critic && critic->config().vocabSize != policy->config().vocabSize) {
        diag.error(cfg.critic.loc,
                   "the critic's vocabulary (" +
                       std::to_string(critic->config().vocabSize) +
                       ") differs from the policy's (" +
                       std::to_string(policy->config().vocabSize) + ")");
        return false;
      }
      // Initialized (or loaded) on the CPU, so a fresh model is the same
      // on every device; then moved.
      policy->to(device());
      if (critic)
        critic->to(device());
      sampleGen = makeGenerator(cfg.seed * 1000003ULL + 17);
      shuffleGen = makeGenerator(cfg.seed * 1000003ULL + 29);
    } catch (const TrainError &) {
      throw;
    } catch (const std::exception &e) {
      throw TrainError(e.what());
    }
    return true;
  }

  // --- data ---------------------------------------------------------------

  Problem trainProblem(uint64_t index) const {
    if (twoOp)
      return twoOp->problem(Split::Train, index);
    if (arith)
      return arith->problem(Split::Train, index);
    return dataTrain[index % dataTrain.size()];
  }

  /// A jsonl dataset holds what its run reads: answers for the default
  /// reward, solutions for an SFT warm start.
  void checkDataset() const {
    auto need = [&](const std::vector<Problem> &set, bool answers) {
      for (const Problem &p : set)
        if ((answers ? p.answer : p.solution).empty())
          throw TrainError(
              p.id + ": no '" +
              (answers ? cfg.task.keys.answer : cfg.task.keys.solution) +
              "' field: " +
              (answers ? "the task's reward compares completions with it "
                         "(or give `reward = command(..)`)"
                       : "the SFT warm start trains on it (or set "
                         "`warm_start = none`)"));
    };
    if (cfg.reward.kind == RewardSpec::Kind::Task) {
      need(dataTrain, true);
      need(dataEval, true);
    }
    if (cfg.sft.steps > 0)
      need(dataTrain, false);
  }

  std::string promptText(const Problem &p) const {
    if (arith || twoOp || jsonlTask)
      return p.prompt;
    return "Question: " + p.prompt + "\nAnswer:";
  }

  std::string targetText(const Problem &p) const {
    if (arith || twoOp)
      return cfg.task.lines ? ArithmeticTask::breakLines(p.solution)
                            : p.solution;
    if (jsonlTask)
      return p.solution;
    return " " + p.solution;
  }

  double reward(const Problem &p, const std::string &completion) const {
    if (rewardCommand)
      return rewardCommand->score(p.prompt, completion, p.answer, p.id);
    if (arith || twoOp)
      return ArithmeticTask::reward(p, completion);
    if (jsonlTask)
      return matchReward(p, completion);
    return gsm8kReward(p, completion);
  }

  std::vector<int64_t> encodePrompt(const Problem &p) const {
    std::vector<int64_t> ids = tokenizer->encode(promptText(p), true);
    if (ids.empty() && tokenizer->bosId())
      ids.push_back(*tokenizer->bosId());
    return ids;
  }

  SamplingOptions samplingOptions(bool greedy) const {
    SamplingOptions o;
    o.temperature = greedy ? 0.0 : cfg.rollout.temperature;
    o.topP = greedy ? 1.0 : cfg.rollout.topP;
    o.topK = greedy ? 0 : cfg.rollout.topK;
    o.maxNewTokens = cfg.rollout.maxTokens;
    if (eosId >= 0)
      o.stopTokens = {eosId};
    o.padId = padId;
    return o;
  }

  // --- optimizer ----------------------------------------------------------

  void buildOptimizer(bool rl) {
    const auto &o = cfg.optimizer;
    auto options = [&](double lr) {
      return torch::optim::AdamWOptions(lr)
          .betas(std::make_tuple(o.beta1, o.beta2))
          .eps(o.eps)
          .weight_decay(o.weightDecay);
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    baseLr.clear();
    double lr = rl ? o.lr : cfg.sft.lr;
    groups.emplace_back(
        policy->parameters(),
        std::make_unique<torch::optim::AdamWOptions>(options(lr)));
    baseLr.push_back(lr);
    if (rl && critic) {
      double clr = cfg.critic.lr > 0 ? cfg.critic.lr : o.lr;
      groups.emplace_back(
          critic->parameters(),
          std::make_unique<torch::optim::AdamWOptions>(options(clr)));
      baseLr.push_back(clr);
    }
    optimizer = std::make_unique<torch::optim::AdamW>(groups, options(lr));
    rlOptimizer = rl;
  }

  double setLr(double factor) {
    auto &groups = optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      static_cast<torch::optim::AdamWOptions &>(groups[g].options())
          .lr(baseLr[g] * factor);
    return baseLr[0] * factor;
  }

  std::vector<at::Tensor> trainableParameters() const {
    std::vector<at::Tensor> ps = policy->parameters();
    if (rlOptimizer && critic)
      for (auto &p : critic->parameters())
        ps.push_back(p);
    return ps;
  }

  /// Clips, steps and zeroes the gradients; returns the pre-clip norm.
  double optimizerStep() {
    auto ps = trainableParameters();
    // Each rank's loss carries its share of the global normaliser, so the
    // sum of the ranks' gradients is the one-process gradient.
    if (dist())
      dist()->sumGradients(ps);
    double norm = 0;
    if (cfg.optimizer.gradClip > 0) {
      norm = torch::nn::utils::clip_grad_norm_(ps, cfg.optimizer.gradClip);
    } else {
      double sq = 0;
      for (auto &p : ps)
        if (p.grad().defined())
          sq += p.grad().pow(2).sum().item<double>();
      norm = std::sqrt(sq);
    }
    optimizer->step();
    optimizer->zero_grad();
    return norm;
  }

  // --- checkpoints --------------------------------------------------------

  fs::path checkpointDir() const { return cfg.out / "checkpoint"; }

  CheckpointState checkpointState(bool rlPhase) {
    CheckpointState st;
    st.models.push_back({"policy", policy});
    if (rlPhase && needReference)
      st.models.push_back({"reference", reference});
    if (critic)
      st.models.push_back({"critic", critic});
    st.optimizer = optimizer.get();
    st.generators = {{"sampling", sampleGen}, {"shuffle", shuffleGen}};
    return st;
  }

  /// Every worker's replay buffer entries, packed (ReplayBuffer::pack), in
  /// rank order (a collective: every worker calls it).
  std::vector<double> gatherReplay() {
    std::vector<double> mine = ReplayBuffer::pack(replay.entries());
    if (!dist())
      return mine;
    std::vector<double> sizes(static_cast<size_t>(worldSize()), 0.0);
    sizes[static_cast<size_t>(rank())] = static_cast<double>(mine.size());
    reduceSum(sizes);
    size_t total = 0, at = 0;
    for (int r = 0; r < worldSize(); ++r) {
      size_t n = static_cast<size_t>(sizes[static_cast<size_t>(r)]);
      at += r < rank() ? n : 0;
      total += n;
    }
    std::vector<double> all(total, 0.0);
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<long>(at));
    reduceSum(all);
    return all;
  }

  /// Writes the checkpoint (rank 0; every worker calls it, for the replay
  /// buffer's gather).
  void saveCheckpointNow() {
    std::vector<double> replayPacked;
    if (replay.enabled())
      replayPacked = gatherReplay();
    if (!writer())
      return;
    bool rl = step >= cfg.sft.steps;
    CheckpointState st = checkpointState(rl);
    st.step = step;
    st.extra = {{"run", cfg.name},
                {"sft_steps", cfg.sft.steps},
                {"elapsed_s", elapsedBefore + seconds(runStart)},
                {"cpu_kernels", cpuKernelSet()},
                {"device", device().str()},
                {"kl_coef", klCoef}};
    if (replay.enabled()) // numbers, exactly (tokens, floats, counters)
      st.tensors["replay"] =
          at::tensor(replayPacked, at::kDouble).reshape({-1});
    if (!std::isnan(evalStart))
      st.extra["eval_acc_rl_start"] = evalStart;
    try {
      saveCheckpoint(checkpointDir(), st);
    } catch (const std::exception &e) {
      throw TrainError(std::string("writing the checkpoint failed: ") +
                       e.what());
    }
  }

  void enterRl() {
    if (needReference) {
      reference = cloneArchitecture(policy);
      copyWeights(reference, policy);
      reference->eval();
      for (auto &p : reference->parameters())
        p.set_requires_grad(false);
    }
    buildOptimizer(true);
  }

  /// Restores the last checkpoint; returns the step it was taken at.
  int64_t resume() {
    fs::path dir = checkpointDir();
    if (!fs::exists(dir))
      throw TrainError("--resume: no checkpoint in '" + dir.string() +
                       "' (start without --resume)");
    try {
      CheckpointInfo info = readCheckpointInfo(dir);
      int64_t sftSaved = info.extra.value("sft_steps", int64_t(-1));
      if (sftSaved != cfg.sft.steps)
        throw TrainError("--resume: checkpoint '" + dir.string() +
                         "' was written with " + std::to_string(sftSaved) +
                         " SFT steps, this run has " +
                         std::to_string(cfg.sft.steps));
      if (info.step > cfg.sft.steps + cfg.steps)
        throw TrainError("--resume: checkpoint '" + dir.string() +
                         "' is at step " + std::to_string(info.step) +
                         ", beyond this run's " +
                         std::to_string(cfg.sft.steps + cfg.steps) + " steps");
      bool rl = info.step >= cfg.sft.steps;
      if (rl)
        enterRl();
      else
        buildOptimizer(false);
      CheckpointState st = checkpointState(rl);
      loadCheckpoint(dir, st);
      if (st.extra.contains("eval_acc_rl_start"))
        evalStart = st.extra["eval_acc_rl_start"].get<double>();
      elapsedBefore = st.extra.value("elapsed_s", 0.0);
      klCoef = st.extra.value("kl_coef", cfg.kl.coef);
      // This worker's share of the replay buffer (its prompts' slots).
      if (replay.enabled() && st.tensors.count("replay")) {
        at::Tensor t = st.tensors.at("replay").to(at::kDouble).contiguous();
        auto [lo, hi] = shardRange(cfg.prompts, rank(), worldSize());
        try {
          replay.load(ReplayBuffer::unpack(std::vector<double>(
                          t.data_ptr<double>(), t.data_ptr<double>() + t.numel())),
                      lo, hi);
        } catch (const std::exception &e) {
          throw TrainError("--resume: checkpoint '" + dir.string() +
                           "': " + e.what());
        }
      }
      // Other CPU kernels round differently: the run goes on, but will not
      // match an uninterrupted one bit for bit.
      std::string saved = st.extra.value("cpu_kernels", std::string());
      const std::string here = cpuKernelSet();
      if (opts.verbose && !saved.empty() && saved != here)
        std::fprintf(stderr,
                     "cac-run: note: checkpoint '%s' was written with CPU "
                     "kernels '%s', this process runs '%s'; the run resumes, "
                     "but will not match an uninterrupted one bit for bit\n",
                     dir.string().c_str(), saved.c_str(), here.c_str());
      return st.step;
    } catch (const TrainError &) {
      throw;
    } catch (const std::exception &e) {
      throw TrainError(std::string("--resume: ") + e.what());
    }
  }

  // --- SFT ----------------------------------------------------------------

  json sftStep(int64_t sftIndex) {
    auto t0 = Clock::now();
    double lr = setLr(scheduleFactor(cfg.sft.schedule.value_or(cfg.schedule),
                                     sftIndex, cfg.sft.steps));
    int64_t b = cfg.sft.batch;
    // Data-parallel: this rank's share of the batch [first, first + b).
    int64_t first = 0;
    if (dist()) {
      auto [lo, hi] = shardRange(b, rank(), worldSize());
      first = lo;
      b = hi - lo;
    }
    std::vector<Rollout> rows(b);
    std::vector<const Rollout *> ptrs;
    for (int64_t i = 0; i < b; ++i) {
      Problem p = trainProblem(
          static_cast<uint64_t>(sftIndex * cfg.sft.batch + first + i));
      rows[i].prompt = encodePrompt(p);
      rows[i].response = tokenizer->encode(targetText(p), false);
      if (eosId >= 0)
        rows[i].response.push_back(eosId);
      ptrs.push_back(&rows[i]);
    }
    Padded pd = padRollouts(ptrs, padId, device());
    policy->train();
    double lossValue = 0, numTokens = static_cast<double>(pd.numTokens);
    if (!dist()) {
      at::Tensor logits = policy->forward(pd.ids, pd.mask);
      at::Tensor logp = gatherResponse(tokenLogProbs(logits, pd.ids, 1.0), pd);
      at::Tensor loss = -logp.mean();
      loss.backward();
      lossValue = loss.item<double>();
    } else {
      // The mean over the global batch's tokens: each rank sums its own
      // and divides by the global count.
      std::vector<double> count{numTokens};
      reduceSum(count);
      numTokens = count[0];
      std::vector<double> part{0.0};
      if (b > 0) {
        at::Tensor logits = policy->forward(pd.ids, pd.mask);
        at::Tensor logp =
            gatherResponse(tokenLogProbs(logits, pd.ids, 1.0), pd);
        at::Tensor loss = -logp.sum() / numTokens;
        loss.backward();
        part[0] = loss.item<double>();
      }
      reduceSum(part);
      lossValue = part[0];
    }
    double norm = optimizerStep();
    double dt = seconds(t0);
    json row = {{"step", step + 1},  {"phase", "sft"},
                {"loss", lossValue}, {"grad_norm", norm},
                {"lr", lr},          {"tokens_per_s", numTokens / dt},
                {"time_step_s", dt}};
    return row;
  }

  // --- evaluation ---------------------------------------------------------

  /// The fraction of the last evaluation's greedy answers written in steps
  /// (arith(digits, steps > 0) only; NaN otherwise).
  double lastEvalSteps = std::numeric_limits<double>::quiet_NaN();

  void addEvalSteps(json &row) const {
    if (!std::isnan(lastEvalSteps))
      row["eval_steps_frac"] = lastEvalSteps;
  }

  double evaluate() {
    if (evalSet.empty())
      return std::numeric_limits<double>::quiet_NaN();
    torch::NoGradGuard ng;
    policy->eval();
    at::Generator gen = makeGenerator(0);
    double correct = 0, stepped = 0;
    evalSamples.clear();
    const size_t chunk = 256;
    // Data-parallel: each rank decodes its share, the counts are summed.
    auto [from, to] =
        shardRange(static_cast<int64_t>(evalSet.size()), rank(), worldSize());
    for (size_t s = from; s < static_cast<size_t>(to); s += chunk) {
      std::vector<std::vector<int64_t>> prompts;
      size_t e = std::min(static_cast<size_t>(to), s + chunk);
      for (size_t i = s; i < e; ++i)
        prompts.push_back(encodePrompt(evalSet[i]));
      auto out = generate(policy, prompts, samplingOptions(true), gen,
                          tokenizer.get(), 1);
      for (size_t i = s; i < e; ++i) {
        const std::string &text = out[i - s].text;
        double r = reward(evalSet[i], text);
        correct += r >= 1.0 ? 1.0 : 0.0;
        stepped += TwoOperandTask::isStepped(text) ? 1.0 : 0.0;
        // Rank 0's share starts at problem 0: its first are the first.
        if (rank() == 0 &&
            static_cast<int64_t>(evalSamples.size()) < cfg.eval.samples)
          evalSamples.push_back({{"problem", evalSet[i].id},
                                 {"prompt", promptText(evalSet[i])},
                                 {"completion", text},
                                 {"answer", evalSet[i].answer},
                                 {"reward", r}});
      }
    }
    if (dist()) {
      std::vector<double> counts{correct, stepped};
      reduceSum(counts);
      correct = counts[0];
      stepped = counts[1];
    }
    lastEvalSteps = twoOp && cfg.task.steps > 0.0
                        ? stepped / static_cast<double>(evalSet.size())
                        : std::numeric_limits<double>::quiet_NaN();
    return correct / static_cast<double>(evalSet.size());
  }

  /// The last eval's completions to samples.jsonl, at \p stepNo (RL step
  /// \p rlStep).
  void logSamples(int64_t stepNo, int64_t rlStep) {
    std::vector<json> rows;
    for (json r : evalSamples) {
      r["step"] = stepNo;
      r["rl_step"] = rlStep;
      rows.push_back(std::move(r));
    }
    samples->append(rows);
  }

  // --- RL -----------------------------------------------------------------

  /// Per-token values of \p model's value head for the padded rows.
  at::Tensor values(TransformerLM &model, const Padded &pd) {
    at::Tensor h = model->forwardHidden(pd.ids, pd.mask);
    return gatherResponse(model->valueHead(h), pd);
  }

  /// What the estimator and the loss need of a set of rollouts, packed.
  struct RolloutTensors {
    Padded all;
    at::Tensor oldLogp, entropy;
    /// Token critic: V(S_t) per token; prompt critic (SPPO): the success
    /// probability sigmoid(V) read before the first response token, per
    /// sequence.
    at::Tensor oldValues;
    at::Tensor refLogp;
  };

  RolloutTensors rolloutTensors(const std::vector<Rollout> &rolls) {
    RolloutTensors rt;
    std::vector<const Rollout *> ptrs;
    std::vector<const std::vector<float> *> lp, en;
    for (const Rollout &r : rolls) {
      ptrs.push_back(&r);
      lp.push_back(&r.logp);
      en.push_back(&r.entropy);
    }
    if (rolls.empty())
      return rt;
    rt.all = padRollouts(ptrs, padId, device());
    rt.oldLogp = packFloats(lp, device());
    rt.entropy = packFloats(en, device());
    torch::NoGradGuard ng;
    if (cfg.critic.kind == CriticSpec::Kind::ValueHead)
      rt.oldValues = values(policy, rt.all);
    else if (critic) {
      critic->eval();
      rt.oldValues = values(critic, rt.all);
    }
    if (promptCritic && rt.oldValues.defined()) {
      std::vector<int64_t> first;
      int64_t pos = 0;
      for (const Rollout &r : rolls) {
        first.push_back(pos);
        pos += static_cast<int64_t>(r.response.size());
      }
      rt.oldValues = at::sigmoid(
          rt.oldValues.index_select(0, onDevice(first, at::kLong)));
    }
    if (needReference)
      rt.refLogp = gatherResponse(
          tokenLogProbs(reference->forward(rt.all.ids, rt.all.mask),
                        rt.all.ids, cfg.rollout.temperature),
          rt.all);
    return rt;
  }

  /// Runs the estimator bundle on \p rolls; \p plan supplies the chain
  /// plan's `mc_value` and the tree plans' node structure.
  TensorMap runEstimator(const std::vector<Rollout> &rolls,
                         const RolloutTensors &rt, const RolloutBatch &plan) {
    std::vector<int64_t> lengths, groups;
    std::vector<float> rewards, newline;
    for (const Rollout &r : rolls) {
      lengths.push_back(static_cast<int64_t>(r.response.size()));
      groups.push_back(r.group);
      rewards.push_back(static_cast<float>(r.reward));
    }
    PackedBatch batch = PackedBatch::fromLengths(lengths);
    batch.setGroups(at::tensor(groups, at::kLong));
    if (bundle->manifest().needsTree) {
      std::vector<int64_t> tn;
      for (const auto &t : plan.tokenNode)
        tn.insert(tn.end(), t.begin(), t.end());
      batch.setTree(at::tensor(plan.nodeParent, at::kLong),
                    at::tensor(tn, at::kLong));
    }
    TensorMap inputs;
    for (const auto &b : bundle->manifest().buffers) {
      if (b.role != BufferRole::Input)
        continue;
      if (b.name == "logp" || b.name == "logp_old")
        inputs[b.name] = rt.oldLogp;
      else if (b.name == "p_old")
        inputs[b.name] = rt.oldLogp.exp();
      else if (b.name == "entropy")
        inputs[b.name] = rt.entropy;
      else if (b.name == "value")
        inputs[b.name] = rt.oldValues;
      else if (b.name == "logp_ref")
        inputs[b.name] = rt.refLogp;
      else if (b.name == "reward" && b.domain == Domain::Token)
        inputs[b.name] = tokenRewards(rolls, rt);
      else if (b.name == "reward")
        inputs[b.name] = onDevice(rewards, at::kFloat);
      else if (b.name == "group")
        inputs[b.name] = onDevice(groups, at::kLong);
      else if (b.name == "length")
        inputs[b.name] = onDevice(lengths, at::kLong);
      else if (b.name == "newline")
        inputs[b.name] = newlineFlags(rolls);
      else if (b.name == "mc_value")
        inputs[b.name] =
            plan.mcValue.empty()
                ? at::zeros({rt.oldLogp.size(0)},
                            at::TensorOptions(at::kFloat).device(device()))
                : onDevice(plan.mcValue, at::kFloat);
    }
    try {
      return estimator->run(inputs, batch, params);
    } catch (const std::exception &e) {
      throw TrainError(std::string("running the estimator: ") + e.what());
    }
  }

  /// The token reward of \p rolls (packed): R on each rollout's last token,
  /// minus coef * KL(pi_old || pi_ref) on every token when the KL is in the
  /// reward (the estimator of the rollout-time log-probabilities, k1 or k3).
  at::Tensor tokenRewards(const std::vector<Rollout> &rolls,
                          const RolloutTensors &rt) const {
    std::vector<float> last(
        static_cast<size_t>(rt.oldLogp.defined() ? rt.oldLogp.size(0) : 0),
        0.0f);
    size_t off = 0;
    for (const Rollout &x : rolls) {
      off += x.response.size();
      if (!x.response.empty())
        last[off - 1] = static_cast<float>(x.reward);
    }
    at::Tensor r = onDevice(last, at::kFloat);
    if (cfg.kl.inReward && cfg.kl.coef > 0 && r.numel() > 0)
      r = r - klCoef * klEstimate(rt.oldLogp, rt.refLogp, cfg.kl.kind);
    return r;
  }

  /// 1 on response tokens whose text holds a line break (VinePPO's steps).
  at::Tensor newlineFlags(const std::vector<Rollout> &rolls) const {
    std::vector<float> f;
    for (const Rollout &r : rolls)
      for (int64_t id : r.response) {
        std::string text;
        try {
          text = tokenizer->decode({id}, /*skipSpecialTokens=*/true);
        } catch (const std::exception &) {
        }
        f.push_back(text.find('\n') != std::string::npos ? 1.0f : 0.0f);
      }
    return onDevice(f, at::kFloat);
  }

  /// The segment starts the estimator picks for \p rolls (its `_seg_start`
  /// output, with zero MC values: the segmentation must not read them).
  std::vector<std::vector<int64_t>>
  segmentStarts(const std::vector<Rollout> &rolls) {
    RolloutTensors rt = rolloutTensors(rolls);
    TensorMap outs = runEstimator(rolls, rt, RolloutBatch{});
    std::vector<std::vector<int64_t>> starts(rolls.size());
    auto it = outs.find("_seg_start");
    std::vector<float> ss;
    if (it != outs.end())
      ss = hostFloats(it->second);
    int64_t off = 0;
    const float *sp = it != outs.end() ? ss.data() : nullptr;
    for (size_t i = 0; i < rolls.size(); ++i) {
      int64_t T = static_cast<int64_t>(rolls[i].response.size());
      for (int64_t t = 0; t < T; ++t)
        if (sp ? sp[off + t] != 0.0f : t == 0)
          starts[i].push_back(t);
      off += T;
    }
    return starts;
  }

  /// Samples the step's rollouts of \p prompts, the global batch's prompts
  /// [p0, p0 + prompts.size()).
  RolloutBatch sampleRollouts(const std::vector<Problem> &problems,
                              const std::vector<std::vector<int64_t>> &prompts,
                              int64_t rlIndex, int64_t p0) {
    PlanContext ctx;
    ctx.model = policy;
    ctx.options = samplingOptions(false);
    ctx.tokenizer = tokenizer.get();
    ctx.gen = &sampleGen;
    if (dist()) {
      // Each token's uniform is a function of (seed, step, global prompt,
      // stream, position), so the rollouts do not depend on the worker
      // count.
      const uint64_t seed = cfg.seed;
      ctx.uniform = [=](int64_t prompt, int64_t stream, int64_t t) {
        return rolloutUniform(seed, rlIndex, p0 + prompt, stream, t);
      };
    }
    ctx.reward = [&](int64_t g, const std::string &text) {
      return reward(problems.at(static_cast<size_t>(g)), text);
    };
    const RolloutSpec &r = cfg.rollout;
    switch (r.kind) {
    case RolloutSpec::Kind::Chain:
      return sampleChain(ctx, prompts, r, [&](const std::vector<Rollout> &x) {
        return segmentStarts(x);
      });
    case RolloutSpec::Kind::Tree:
      return sampleTree(ctx, prompts, r);
    case RolloutSpec::Kind::Forest:
      return sampleForest(
          ctx, prompts, r,
          // The threshold decays by tau_step per RL step down to tau_min
          // (a floor above tau does not raise it).
          std::max(std::min(r.tauMin, r.tau),
                   r.tau - static_cast<double>(rlIndex) * r.tauStep));
    case RolloutSpec::Kind::Group:
      break;
    }
    return sampleGroups(ctx, prompts, r.n);
  }

  /// Token accounting of the step's plan (docs/training.md); the global
  /// batch's when data-parallel.
  void addPlanStats(json &row, PlanStats st) {
    if (cfg.rollout.kind == RolloutSpec::Kind::Group)
      return;
    if (dist()) {
      std::vector<double> v{double(st.tokensComputed),
                            double(st.tokensFlattened),
                            double(st.tokensSampled),
                            double(st.tokensFlattenedResponse),
                            double(st.nodes), double(st.leaves),
                            double(st.sharedQueries)};
      reduceSum(v);
      st.tokensComputed = std::llround(v[0]);
      st.tokensFlattened = std::llround(v[1]);
      st.tokensSampled = std::llround(v[2]);
      st.tokensFlattenedResponse = std::llround(v[3]);
      st.nodes = std::llround(v[4]);
      st.leaves = std::llround(v[5]);
      st.sharedQueries = std::llround(v[6]);
    }
    row["tokens_computed"] = st.tokensComputed;
    row["tokens_flattened"] = st.tokensFlattened;
    row["compute_ratio"] = st.tokensFlattened > 0
                               ? static_cast<double>(st.tokensComputed) /
                                     static_cast<double>(st.tokensFlattened)
                               : 0.0;
    row["tokens_sampled"] = st.tokensSampled;
    row["tokens_flattened_response"] = st.tokensFlattenedResponse;
    row["sample_ratio"] =
        st.tokensFlattenedResponse > 0
            ? static_cast<double>(st.tokensSampled) /
                  static_cast<double>(st.tokensFlattenedResponse)
            : 0.0;
    row["plan_nodes"] = st.nodes;
    row["plan_leaves"] = st.leaves;
    if (cfg.rollout.kind == RolloutSpec::Kind::Chain)
      row["mc_shared"] = st.sharedQueries;
  }

  json rlStep(int64_t rlIndex) {
    auto t0 = Clock::now();
    json row = {{"step", step + 1}, {"phase", "rl"}, {"rl_step", rlIndex + 1}};
    double lr = setLr(scheduleFactor(cfg.schedule, rlIndex, cfg.steps));

    // 1. Rollouts.
    auto tg = Clock::now();
    // Data-parallel: this rank takes the prompts [p0, p0 + P) of the global
    // batch of GP prompts with every rollout of each (whole groups, chains,
    // trees), so the estimator's groups and trees stay local.
    const int64_t GP = cfg.prompts;
    auto [p0, p1] = shardRange(GP, rank(), worldSize());
    const int64_t P = p1 - p0;
    std::vector<Problem> problems;
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t i = 0; i < P; ++i) {
      // RL prompts come from a stream disjoint from the SFT one.
      problems.push_back(trainProblem(
          (uint64_t(1) << 40) + static_cast<uint64_t>(rlIndex * GP + p0 + i)));
      prompts.push_back(encodePrompt(problems.back()));
    }
    policy->eval();
    RolloutBatch plan = sampleRollouts(problems, prompts, rlIndex, p0);
    std::vector<Rollout> &rolls = plan.rolls;
    int64_t B = static_cast<int64_t>(rolls.size());
    double rewardSum = 0, correct = 0, entSum = 0;
    int64_t tokens = 0;
    for (const Rollout &r : rolls) {
      rewardSum += r.reward;
      correct += r.correct ? 1 : 0;
      for (float e : r.entropy)
        entSum += e;
      tokens += static_cast<int64_t>(r.response.size());
    }
    const int64_t numPaths = B;
    double paths = static_cast<double>(numPaths); // the global batch's
    double timeGen = seconds(tg);
    addPlanStats(row, plan.stats);

    // Rollout-time values and reference log-probabilities (scoring).
    auto ts = Clock::now();
    RolloutTensors rt = rolloutTensors(rolls);
    double timeScore = seconds(ts);
    double stepKl = 0; // the mean KL per token in the reward
    if (cfg.kl.inReward && cfg.kl.coef > 0) {
      std::vector<double> v{0.0, 0.0};
      if (rt.oldLogp.defined() && rt.oldLogp.numel() > 0) {
        v[0] = klEstimate(rt.oldLogp, rt.refLogp, cfg.kl.kind)
                   .sum()
                   .item<double>();
        v[1] = static_cast<double>(rt.oldLogp.numel());
      }
      reduceSum(v);
      stepKl = v[1] > 0 ? v[0] / v[1] : 0.0;
      row["kl_reward"] = klCoef * stepKl; // the mean penalty per token
      row["kl_coef"] = klCoef;
    }

    // 2. The estimator (timed alone: what was queued before is waited for).
    syncForTiming();
    auto te = Clock::now();
    TensorMap outs = runEstimator(rolls, rt, plan);
    at::Tensor adv = outs.at("adv").to(at::kFloat);
    if (advDomain == Domain::Seq)
      adv = adv.index_select(0, rt.all.tokenSeq);
    at::Tensor ret, weight, valueWeight;
    if (hasRet && outs.count("ret"))
      ret = outs.at("ret").to(at::kFloat);
    if (hasWeight)
      weight = outs.at("weight").to(at::kFloat);
    if (hasValueWeight)
      valueWeight = outs.at("value_weight").to(at::kFloat);
    if (cfg.rollout.kind == RolloutSpec::Kind::Tree) {
      // SPO-tree trains each node once, on its own history: the paths'
      // per-token outputs become per-node samples (filtered by weight).
      std::vector<std::vector<float>> per = {hostFloats(adv)}, sampled;
      if (weight.defined())
        per.push_back(hostFloats(weight));
      std::vector<Rollout> nodes = nodeSamples(
          plan, per, weight.defined() ? per.back() : std::vector<float>{},
          sampled);
      // Through the replay buffer (off: this step's samples, in order).
      std::vector<ReplayEntry> fresh;
      size_t off = 0;
      for (Rollout &x : nodes) {
        ReplayEntry e;
        size_t T = x.response.size();
        e.adv.assign(sampled[0].begin() + off, sampled[0].begin() + off + T);
        if (weight.defined())
          e.weight.assign(sampled[1].begin() + off,
                          sampled[1].begin() + off + T);
        off += T;
        e.step = rlIndex;
        e.slot = p0 + x.group;
        e.sample = std::move(x);
        fresh.push_back(std::move(e));
      }
      replay.add(std::move(fresh));
      ReplayBuffer::Taken taken = replay.take(rlIndex, cfg.seed);
      rolls.clear();
      std::vector<float> advTaken, weightTaken;
      double ageSum = 0;
      std::set<std::pair<int64_t, int64_t>> questions;
      for (ReplayEntry &e : taken.entries) {
        advTaken.insert(advTaken.end(), e.adv.begin(), e.adv.end());
        weightTaken.insert(weightTaken.end(), e.weight.begin(), e.weight.end());
        ageSum += static_cast<double>(rlIndex - e.step);
        questions.insert({e.step, e.slot});
        rolls.push_back(std::move(e.sample));
      }
      B = static_cast<int64_t>(rolls.size());
      adv = onDevice(advTaken, at::kFloat);
      if (weight.defined())
        weight = onDevice(weightTaken, at::kFloat);
      rt = rolloutTensors(rolls);
      if (replay.enabled()) {
        // Per step: what waits, what was dropped as too old, how many
        // questions the trained samples come from and their mean age.
        std::vector<double> v{static_cast<double>(replay.size()),
                              static_cast<double>(taken.dropped),
                              static_cast<double>(questions.size()), ageSum,
                              static_cast<double>(B)};
        reduceSum(v);
        row["replay_size"] = std::llround(v[0]);
        row["replay_dropped"] = std::llround(v[1]);
        row["replay_questions"] = std::llround(v[2]);
        row["replay_age_mean"] = v[4] > 0 ? v[3] / v[4] : 0.0;
      }
    }
    std::vector<int64_t> lengths;
    for (const Rollout &r : rolls)
      lengths.push_back(static_cast<int64_t>(r.response.size()));
    // Token offsets of each rollout in the packed arrays.
    std::vector<int64_t> offsets(B + 1, 0);
    for (int64_t i = 0; i < B; ++i)
      offsets[i + 1] = offsets[i] + lengths[i];
    at::Tensor oldLogp = rt.oldLogp, oldValues = rt.oldValues,
               refLogp = rt.refLogp;
    syncForTiming();
    double timeEst = seconds(te);

    // Data-parallel: the global batch is the workers' samples in rank order
    // (worker r holds a contiguous run of prompts, so this is the order of
    // one process), sample g0 + i being this worker's sample i. Every worker
    // needs each sample's tokens and sums of weight and value_weight (the
    // minibatches' normalisers): each fills its own, the sums gather them.
    int64_t g0 = 0, GB = B;
    // [GB][tokens, weight, value_weight, group + 1]
    constexpr int64_t kCols = 4;
    std::vector<double> perSample;
    std::vector<int64_t> rankStart; // data-parallel: each rank's g0, and GB
    if (dist()) {
      std::vector<double> counts(static_cast<size_t>(worldSize()), 0.0);
      counts[static_cast<size_t>(rank())] = static_cast<double>(B);
      reduceSum(counts);
      GB = 0;
      for (int r = 0; r < worldSize(); ++r) {
        int64_t c = std::llround(counts[static_cast<size_t>(r)]);
        rankStart.push_back(GB);
        g0 += r < rank() ? c : 0;
        GB += c;
      }
      rankStart.push_back(GB);
      perSample.assign(static_cast<size_t>(kCols * GB), 0.0);
      auto sums = [&](const at::Tensor &x, int column) {
        if (!x.defined())
          return;
        at::Tensor c = x.to(at::kCPU, at::kDouble).contiguous();
        const double *p = c.data_ptr<double>();
        for (int64_t i = 0; i < B; ++i) {
          double s = 0;
          for (int64_t t = offsets[i]; t < offsets[i + 1]; ++t)
            s += p[t];
          perSample[static_cast<size_t>(kCols * (g0 + i) + column)] = s;
        }
      };
      for (int64_t i = 0; i < B; ++i) {
        perSample[static_cast<size_t>(kCols * (g0 + i))] =
            static_cast<double>(lengths[i]);
        perSample[static_cast<size_t>(kCols * (g0 + i) + 3)] =
            static_cast<double>(rolls[i].group + 1);
      }
      sums(weight, 1);
      sums(valueWeight, 2);
      reduceSum(perSample);
    }
    if (cfg.rollout.kind == RolloutSpec::Kind::Tree)
      row["node_samples"] = GB;
    if (!dist()) {
      row["adv_mean"] = adv.numel() > 0 ? adv.mean().item<double>() : 0.0;
      row["adv_std"] = adv.numel() > 1 ? adv.std().item<double>() : 0.0;
      if (cfg.whiten)
        adv = weight.defined() ? whitenMasked(adv, weight) : whiten(adv);
    } else {
      // Moments over the global batch's tokens: count, mean and unbiased
      // variance of \p x's elements on every worker together.
      struct Moments {
        double n, mean, var;
      };
      auto globalMoments = [&](const at::Tensor &x) {
        at::Tensor x64 = x.to(at::kDouble);
        std::vector<double> m{x64.sum().item<double>(),
                              x64.pow(2).sum().item<double>(),
                              static_cast<double>(x.numel())};
        reduceSum(m);
        double n = m[2], mean = n > 0 ? m[0] / n : 0.0;
        double var =
            n > 1 ? std::max(0.0, (m[1] - n * mean * mean) / (n - 1)) : 0.0;
        return Moments{n, mean, var};
      };
      Moments all = globalMoments(adv);
      row["adv_mean"] = all.mean;
      row["adv_std"] = std::sqrt(all.var);
      if (cfg.whiten) {
        // whiten() alike; with a weight whitenMasked() alike, over the
        // tokens whose weight is nonzero (none: unchanged).
        Moments w =
            weight.defined() ? globalMoments(adv.masked_select(weight != 0))
                             : all;
        if (w.n > 1)
          adv = (adv - w.mean) / std::sqrt(w.var + 1e-8);
        else if (w.n == 1)
          adv = adv - w.mean;
      }
    }

    // 3. PPO epochs over minibatches.
    auto tu = Clock::now();
    double pgSum = 0, vlSum = 0, klSum = 0, lossSum = 0, clipSum = 0,
           ratioSum = 0, normSum = 0;
    int64_t updates = 0;
    policy->train();
    if (critic)
      critic->train();
    const double normLen = static_cast<double>(cfg.rollout.maxTokens);
    // The batch the minibatches split: the global batch when data-parallel
    // (the same permutation on every rank; each takes the rollouts it
    // holds), else this step's rollouts (a tree step may keep fewer node
    // samples than minibatches, or none).
    const int64_t TB = GB;
    // What the minibatches shuffle: the samples, or, for an objective that
    // reads `group` (its group statistics must be the step's), the groups,
    // each a whole (a group's samples are on one rank).
    std::vector<std::vector<int64_t>> units;
    if (groupMinibatches) {
      std::map<std::pair<int64_t, int64_t>, size_t> unitOf;
      for (int64_t k = 0; k < TB; ++k) {
        int64_t r = 0, group;
        if (dist()) {
          while (k >= rankStart[static_cast<size_t>(r) + 1])
            ++r;
          group = std::llround(
                      perSample[static_cast<size_t>(kCols * k + 3)]) -
                  1;
        } else {
          group = rolls[static_cast<size_t>(k)].group;
        }
        auto [it, fresh] = unitOf.try_emplace({r, group}, units.size());
        if (fresh)
          units.emplace_back();
        units[it->second].push_back(k);
      }
    }
    const int64_t TU =
        groupMinibatches ? static_cast<int64_t>(units.size()) : TB;
    const int64_t M = std::min<int64_t>(cfg.minibatches, TU);
    for (int64_t epoch = 0; epoch < cfg.epochs && TB > 0; ++epoch) {
      at::Tensor perm = at::randperm(TU, shuffleGen, at::kLong);
      auto pa = perm.accessor<int64_t, 1>();
      for (int64_t mb = 0; mb < M; ++mb) {
        // The minibatch's samples (global indices), in shuffled order.
        std::vector<int64_t> members;
        for (int64_t k = TU * mb / M; k < TU * (mb + 1) / M; ++k) {
          if (!groupMinibatches) {
            members.push_back(pa[k]);
            continue;
          }
          const auto &u = units[static_cast<size_t>(pa[k])];
          members.insert(members.end(), u.begin(), u.end());
        }
        std::vector<const Rollout *> rows;
        std::vector<int64_t> tokIdx, rowIdx;
        double globalTokens = 0, globalWeight = 0, globalValueWeight = 0;
        for (int64_t gi : members) {
          int64_t i = gi - g0;
          if (dist()) {
            const double *ps = &perSample[static_cast<size_t>(kCols * gi)];
            globalTokens += ps[0];
            globalWeight += ps[1];
            globalValueWeight += ps[2];
          }
          if (i < 0 || i >= B)
            continue;
          rows.push_back(&rolls[i]);
          rowIdx.push_back(i);
          for (int64_t t = offsets[i]; t < offsets[i + 1]; ++t)
            tokIdx.push_back(t);
        }
        int64_t nb = static_cast<int64_t>(rows.size());
        // This rank's share of the minibatch's normaliser (tokens for
        // token-mean, sequences otherwise): its aggregate times the share
        // is its part of the one-process loss.
        double share = 1.0, seqShare = 1.0, tokenDenom = 0;
        if (dist()) {
          double localTokens = static_cast<double>(tokIdx.size());
          tokenDenom = globalTokens;
          seqShare = static_cast<double>(nb) /
                     static_cast<double>(members.size());
          share = cfg.aggregation == Aggregation::TokenMean
                      ? (globalTokens > 0 ? localTokens / globalTokens : 0.0)
                      : seqShare;
          if (nb == 0) { // nothing here; the others' gradients are summed in
            if (objective) { // the objective's normaliser: nothing from here
              std::vector<double> none{0.0};
              reduceSum(none);
            }
            normSum += optimizerStep();
            ++updates;
            continue;
          }
        }
        at::Tensor ti = onDevice(tokIdx, at::kLong);
        Padded pd = padRollouts(rows, padId, device());
        auto agg = [&](const at::Tensor &x) {
          at::Tensor r =
              aggregate(x, pd.tokenSeq, nb, cfg.aggregation, normLen);
          return dist() ? r * share : r;
        };
        // The same over the tokens that \p w weights: a token mean divides
        // by the sum of the weights (the minibatch's global sum \p globalW
        // when data-parallel), the seq-mean modes as agg() does.
        auto aggMasked = [&](const at::Tensor &x, const at::Tensor &w,
                             Aggregation mode, double globalW) {
          if (!dist())
            return aggregateMasked(x, w, pd.tokenSeq, nb, mode, normLen);
          if (mode == Aggregation::TokenMean)
            return (x * w).sum() / std::max(globalW, 1.0);
          return aggregateMasked(x, w, pd.tokenSeq, nb, mode, normLen) *
                 seqShare;
        };
        at::Tensor h = policy->forwardHidden(pd.ids, pd.mask);
        at::Tensor logp = gatherResponse(
            tokenLogProbs(policy->lmHead(h), pd.ids, cfg.rollout.temperature),
            pd);
        at::Tensor ratio = at::exp(logp - oldLogp.index_select(0, ti));
        at::Tensor a = adv.index_select(0, ti);
        at::Tensor f = clippedSurrogate(ratio, a, cfg.objective.epsLow,
                                        cfg.objective.epsHigh);
        at::Tensor pg;
        at::Tensor objClipped; // the objective's own `clipped`, if any
        if (objective) {
          // The compiled objective: its kernels give the loss and
          // d loss / d logp_new; the surrogate carries that gradient into
          // the model's backward pass.
          TensorMap in{{"logp_new", logp.detach()}};
          for (const std::string &name : objectiveInputs) {
            if (name == "logp")
              in[name] = oldLogp.index_select(0, ti);
            else if (name == "adv")
              in[name] = a;
            else if (name == "logp_ref")
              in[name] = refLogp.index_select(0, ti);
            else if (name == "entropy")
              in[name] = rt.entropy.index_select(0, ti);
            else if (name == "weight")
              in[name] = weight.index_select(0, ti);
            else if (name == "value")
              in[name] = promptCritic
                             ? oldValues.index_select(
                                   0, onDevice(rowIdx, at::kLong))
                             : oldValues.index_select(0, ti);
            else if (name == "reward") {
              std::vector<float> rw;
              for (const Rollout *r : rows)
                rw.push_back(static_cast<float>(r->reward));
              in[name] = onDevice(rw, at::kFloat);
            }
            else if (name == "group") {
              std::vector<int64_t> g;
              for (const Rollout *r : rows)
                g.push_back(r->group);
              in[name] = onDevice(g, at::kLong);
            }
          }
          std::vector<int64_t> mbLengths, mbGroups;
          for (const Rollout *r : rows) {
            mbLengths.push_back(static_cast<int64_t>(r->response.size()));
            mbGroups.push_back(r->group);
          }
          PackedBatch mbBatch = PackedBatch::fromLengths(mbLengths);
          if (groupMinibatches)
            mbBatch.setGroups(at::tensor(mbGroups, at::kLong));
          CompiledObjective::Result r;
          try {
            r = objective->run(in, mbBatch, objectiveParams);
          } catch (const std::exception &e) {
            throw TrainError(std::string("running the objective: ") +
                             e.what());
          }
          if (dist()) {
            // Its own normaliser (counted by its kernels: the tokens it
            // keeps, or the sequences) summed over the workers.
            std::vector<double> norm{r.normalizer};
            reduceSum(norm);
            objective->setNormalizer(r, norm[0]);
          }
          pg = CompiledObjective::surrogate(logp, r);
          if (r.outputs.count("clipped")) {
            objClipped = r.outputs.at("clipped");
            // A seq loss's `clipped` is per sequence: every token of a
            // clipped sequence counts, as GSPO-token's would.
            if (objClipped.numel() == nb && nb != logp.size(0))
              objClipped = objClipped.repeat_interleave(
                  onDevice(mbLengths, at::kLong));
          }
        } else {
          pg = weight.defined()
                   ? -aggMasked(f, weight.index_select(0, ti), cfg.aggregation,
                                globalWeight)
                   : -agg(f);
        }
        at::Tensor loss = pg;
        if (cfg.kl.kind != KlSpec::Kind::None && cfg.kl.coef > 0 &&
            !cfg.kl.inReward) {
          at::Tensor kl =
              agg(klEstimate(logp, refLogp.index_select(0, ti), cfg.kl.kind));
          loss = loss + cfg.kl.coef * kl;
          klSum += kl.item<double>();
        } else if (needReference) {
          klSum += agg(klEstimate(logp.detach(), refLogp.index_select(0, ti),
                                  KlSpec::Kind::K3))
                       .item<double>();
        }
        if (cfg.critic.kind != CriticSpec::Kind::None) {
          at::Tensor v = cfg.critic.kind == CriticSpec::Kind::ValueHead
                             ? gatherResponse(policy->valueHead(h), pd)
                             : values(critic, pd);
          at::Tensor vl;
          if (promptCritic) {
            // SPPO: V(prompt) is the success probability read before the
            // first response token, trained by BCE to the reward.
            std::vector<int64_t> first;
            std::vector<float> target;
            int64_t pos = 0;
            for (const Rollout *r : rows) {
              first.push_back(pos);
              target.push_back(static_cast<float>(r->reward));
              pos += static_cast<int64_t>(r->response.size());
            }
            vl = bceLoss(at::sigmoid(v.index_select(
                             0, onDevice(first, at::kLong))),
                         onDevice(target, at::kFloat)) *
                 seqShare;
          } else if (valueWeight.defined()) {
            // Only the positions the estimator marks (SAPO: segment
            // boundaries) train the critic: a mean over them.
            vl = aggMasked(valueLoss(v, oldValues.index_select(0, ti),
                                     ret.index_select(0, ti), cfg.critic.clip),
                           valueWeight.index_select(0, ti),
                           Aggregation::TokenMean, globalValueWeight);
          } else {
            vl = agg(valueLoss(v, oldValues.index_select(0, ti),
                               ret.index_select(0, ti), cfg.critic.clip));
          }
          loss = loss + cfg.critic.coef * vl;
          vlSum += vl.item<double>();
        }
        loss.backward();
        normSum += optimizerStep();
        pgSum += pg.item<double>();
        lossSum += loss.item<double>();
        {
          torch::NoGradGuard ng;
          at::Tensor clipped =
              objClipped.defined()
                  ? objClipped.to(at::kFloat)
                  : clippedMask(ratio, a, cfg.objective.epsLow,
                                cfg.objective.epsHigh)
                        .to(at::kFloat);
          if (!dist()) {
            clipSum += clipped.mean().item<double>();
            ratioSum += ratio.mean().item<double>();
          } else if (tokenDenom > 0) { // token means over the minibatch
            clipSum += clipped.sum().item<double>() / tokenDenom;
            ratioSum += ratio.sum().item<double>() / tokenDenom;
          }
        }
        ++updates;
      }
    }
    double timeUpd = seconds(tu);
    if (dist()) {
      // Each rank holds its part of every sum; rank 0 logs the totals.
      std::vector<double> sums{pgSum,    vlSum,
                               klSum,    lossSum,
                               clipSum,  ratioSum,
                               rewardSum, correct,
                               entSum,   static_cast<double>(tokens),
                               static_cast<double>(numPaths)};
      reduceSum(sums);
      pgSum = sums[0], vlSum = sums[1], klSum = sums[2], lossSum = sums[3];
      clipSum = sums[4], ratioSum = sums[5], rewardSum = sums[6];
      correct = sums[7], entSum = sums[8];
      tokens = static_cast<int64_t>(std::llround(sums[9]));
      paths = sums[10];
    }
    double u = static_cast<double>(std::max<int64_t>(updates, 1));
    double dt = seconds(t0);
    row["reward_mean"] = rewardSum / paths;
    row["acc"] = correct / paths;
    row["loss"] = lossSum / u;
    row["pg_loss"] = pgSum / u;
    if (cfg.critic.kind != CriticSpec::Kind::None)
      row["value_loss"] = vlSum / u;
    if (needReference)
      row["kl"] = klSum / u;
    row["entropy"] = tokens ? entSum / static_cast<double>(tokens) : 0.0;
    row["clip_frac"] = clipSum / u;
    row["ratio_mean"] = ratioSum / u;
    row["grad_norm"] = normSum / u;
    row["lr"] = lr;
    row["response_len"] = static_cast<double>(tokens) / paths;
    if (cfg.kl.inReward && cfg.kl.target > 0) {
      // The adaptive controller, after the step that used the coefficient.
      double err = std::clamp(stepKl / cfg.kl.target - 1.0, -0.2, 0.2);
      klCoef *= 1.0 + err * paths / cfg.kl.horizon;
    }
    row["tokens_per_s"] = static_cast<double>(tokens) / dt;
    row["time_gen_s"] = timeGen;
    row["time_score_s"] = timeScore;
    row["time_estimator_s"] = timeEst;
    row["time_update_s"] = timeUpd;
    row["time_step_s"] = dt;
    return row;
  }

  // --- the run ------------------------------------------------------------

  bool dueCheckpoint() const {
    int64_t total = cfg.sft.steps + cfg.steps;
    return step == total || step == cfg.sft.steps ||
           (cfg.checkpointEvery > 0 && step % cfg.checkpointEvery == 0);
  }

  void run() {
    runStart = Clock::now();
    int64_t start = 0;
    if (opts.resume) {
      start = resume();
    } else {
      if (fs::exists(checkpointDir()))
        throw TrainError("'" + cfg.out.string() +
                         "' already holds a checkpoint: pass --resume to "
                         "continue it, or choose another --out");
      if (cfg.sft.steps > 0)
        buildOptimizer(false);
      else
        enterRl();
    }
    step = start;
    // Only rank 0 writes files; the other workers keep their rows in memory
    // and stay quiet.
    log = writer()
              ? std::make_unique<MetricsLog>(cfg.out, opts.resume ? start : -1)
              : std::make_unique<MetricsLog>();
    samples = writer() ? std::make_unique<SampleLog>(cfg.out / "samples.jsonl",
                                                     opts.resume ? start : -1)
                       : std::make_unique<SampleLog>();
    bar = std::make_unique<ProgressBar>(opts.progress && writer());
    if (!writer())
      opts.verbose = false;
    const int64_t S = cfg.sft.steps, R = cfg.steps;
    int64_t ranHere = 0;
    auto stopNow = [&] {
      return opts.stopAfterSteps >= 0 && ranHere >= opts.stopAfterSteps;
    };
    auto addElapsed = [&](json &row) {
      row["elapsed_s"] = elapsedBefore + seconds(runStart);
    };

    if (opts.verbose && dist())
      bar->message("cac-run: " + std::to_string(worldSize()) + " workers (" +
                   (dist()->backend() == DistBackend::Nccl ? "nccl" : "gloo") +
                   "); each takes about " +
                   std::to_string(cfg.prompts / worldSize()) + " of the " +
                   std::to_string(cfg.prompts) + " prompts of a step");
    if (opts.verbose && start == 0)
      bar->message("cac-run: " + cfg.name + ": policy " +
                   std::to_string(policy->numParameters()) +
                   " parameters, estimator '" + bundle->manifest().estimator +
                   "', " + std::to_string(S) + " SFT + " + std::to_string(R) +
                   " RL steps, out " + cfg.out.string() + "; device " +
                   device().str() + "; CPU kernels " + cpuKernelSet());
    if (opts.verbose && start > 0)
      bar->message("cac-run: resuming '" + cfg.name + "' at step " +
                   std::to_string(start));

    // SFT.
    while (step < S) {
      json row = sftStep(step);
      ++step;
      ++ranHere;
      addElapsed(row);
      log->append(row);
      bar->update("sft", step, S,
                  "loss " + fmt("%.3f", row["loss"].get<double>()) + " tok/s " +
                      fmt("%.0f", row["tokens_per_s"].get<double>()));
      if (stopNow())
        return;
      if (step == S) {
        // The RL phase starts here: evaluate, snapshot the reference, and
        // checkpoint the RL-start state.
        auto t = Clock::now();
        evalStart = evaluate();
        logSamples(step, 0);
        json ev = {{"step", step},
                   {"phase", "eval"},
                   {"rl_step", 0},
                   {"eval_acc", evalStart},
                   {"time_eval_s", seconds(t)}};
        addEvalSteps(ev);
        addElapsed(ev);
        log->append(ev);
        enterRl();
      }
      if (dueCheckpoint())
        saveCheckpointNow();
    }
    if (S == 0 && step == 0) {
      auto t = Clock::now();
      evalStart = evaluate();
      logSamples(0, 0);
      json ev = {{"step", 0},
                 {"phase", "eval"},
                 {"rl_step", 0},
                 {"eval_acc", evalStart},
                 {"time_eval_s", seconds(t)}};
      addEvalSteps(ev);
      addElapsed(ev);
      log->append(ev);
    }
    if (opts.verbose && step == S && !std::isnan(evalStart))
      bar->message("cac-run: eval_acc at RL start " + fmt("%.3f", evalStart));

    // RL.
    std::string lastEval = std::isnan(evalStart) ? "-" : fmt("%.3f", evalStart);
    while (step < S + R) {
      int64_t rlIndex = step - S;
      json row = rlStep(rlIndex);
      ++step;
      ++ranHere;
      bool last = step == S + R;
      if (last || (cfg.eval.every > 0 && (rlIndex + 1) % cfg.eval.every == 0)) {
        auto t = Clock::now();
        double acc = evaluate();
        logSamples(step, rlIndex + 1);
        row["eval_acc"] = acc;
        addEvalSteps(row);
        row["time_eval_s"] = seconds(t);
        lastEval = fmt("%.3f", acc);
        if (last)
          evalEnd = acc;
      }
      addElapsed(row);
      log->append(row);
      bar->update("rl", rlIndex + 1, R,
                  "reward " + fmt("%.3f", row["reward_mean"].get<double>()) +
                      " acc " + fmt("%.3f", row["acc"].get<double>()) +
                      " eval " + lastEval + " tok/s " +
                      fmt("%.0f", row["tokens_per_s"].get<double>()));
      if ((row.contains("eval_acc") || last) && writer())
        writePlot(log->rows(), cfg.out / "plot.png");
      if (stopNow())
        return; // as if killed after logging, before the checkpoint
      if (dueCheckpoint())
        saveCheckpointNow();
    }
    bar->finish();
    if (!writer())
      return;
    writePlot(log->rows(), cfg.out / "plot.png");
    if (std::isnan(evalEnd))
      for (auto it = log->rows().rbegin(); it != log->rows().rend(); ++it)
        if (it->contains("eval_acc") && (*it)["eval_acc"].is_number()) {
          evalEnd = (*it)["eval_acc"].get<double>();
          break;
        }
    try {
      savePretrained(*policy, cfg.out / "final");
      if (cfg.model.kind == ModelSpec::Kind::HuggingFace)
        copyTokenizerFiles(cfg.model.path, cfg.out / "final");
    } catch (const std::exception &e) {
      throw TrainError(std::string("writing the final model: ") + e.what());
    }
    if (opts.verbose)
      bar->message("cac-run: done in " +
                   fmt("%.1f", elapsedBefore + seconds(runStart)) +
                   " s; eval_acc " +
                   (std::isnan(evalStart) ? "-" : fmt("%.3f", evalStart)) +
                   " at RL start, " +
                   (std::isnan(evalEnd) ? "-" : fmt("%.3f", evalEnd)) +
                   " at the end; metrics in " + cfg.out.string());
  }
};

//===----------------------------------------------------------------------===//
// Trainer
//===----------------------------------------------------------------------===//

Trainer::Trainer(TrainConfig config, TrainerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(config);
  impl_->opts = std::move(options);
  // The process's current CUDA device is the run's, so that nothing (the
  // caching allocator, NCCL, a kernel launched without a guard) makes a
  // context on GPU 0 in every worker of a node.
  if (impl_->opts.device.is_cuda())
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(impl_->opts.device);
  if (impl_->cfg.rollout.kind == RolloutSpec::Kind::Tree)
    impl_->replay = ReplayBuffer(impl_->cfg.rollout.replaySteps,
                                 impl_->cfg.rollout.replayTake);
}

Trainer::~Trainer() = default;

bool Trainer::prepare(DiagnosticEngine &diag) { return impl_->prepare(diag); }

void Trainer::run() {
  try {
    impl_->run();
  } catch (const TrainError &) {
    throw;
  } catch (const std::exception &e) {
    throw TrainError(e.what());
  }
}

const std::vector<json> &Trainer::metrics() const {
  static const std::vector<json> none;
  return impl_->log ? impl_->log->rows() : none;
}

double Trainer::evalAccAtRlStart() const { return impl_->evalStart; }
double Trainer::evalAccAtEnd() const { return impl_->evalEnd; }

} // namespace cac::rt::train
