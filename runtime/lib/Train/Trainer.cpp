//===- Trainer.cpp - The RL training loop of cac-run ----------------------===//
//
// The run: setup (prepare), the SFT warm start, the RL steps as the phases
// of Phases.h, evaluations, checkpoints and the final model.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/Trainer.h"

#include "Phases.h"

#include "cac/Runtime/Model/CpuKernels.h"
#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Support/FileUtil.h"
#include "cac/Runtime/Support/StopSignals.h"
#include "cac/Runtime/Train/Distributed.h"

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt::train {

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

//===----------------------------------------------------------------------===//
// Impl
//===----------------------------------------------------------------------===//

struct Trainer::Impl : TrainerState {
  // --- setup --------------------------------------------------------------

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
    if (cfg.model.kind == ModelSpec::Kind::Random && !cfg.model.charTokenizer())
      exists(cfg.model.tokenizerPath, cfg.model.loc, "tokenizer folder");
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

  /// Every dataset prompt fits the policy's \p positions with room for a
  /// response token: one that does not would stop the run only when it is
  /// first sampled, perhaps hours in. Measured before the run starts.
  /// \p longest: the longest training prompt's tokens (of a generated
  /// task: the first RL prompt's).
  bool promptsFit(DiagnosticEngine &diag, int64_t positions,
                  int64_t &longest) {
    longest = 0;
    if (task.dataTrain.empty() && (task.arith || task.twoOp))
      longest = static_cast<int64_t>(
          task.encodePrompt(task.trainProblem(uint64_t(1) << 40)).size());
    for (const std::vector<Problem> *set : {&task.dataTrain, &task.dataEval})
      for (const Problem &p : *set) {
        auto n = static_cast<int64_t>(task.encodePrompt(p).size());
        if (set == &task.dataTrain)
          longest = std::max(longest, n);
        if (n < positions)
          continue;
        diag.error(cfg.task.loc,
                   p.id + ": the prompt has " + std::to_string(n) +
                       " tokens, but the model holds " +
                       std::to_string(positions) +
                       " positions, the prompt and at least one response "
                       "token; shorten it or use a model with more positions");
        return false;
      }
    return true;
  }

  /// The task, the models (the global generator decides a fresh
  /// initialization) and the generators.
  bool loadTaskAndModels(DiagnosticEngine &diag) {
    if (!task.load(cfg, diag))
      return false;
    for (const char *field : {"rollout_dtype", "update_dtype"}) {
      const std::string &name = std::string(field) == "rollout_dtype"
                                    ? cfg.rolloutDtype
                                    : cfg.updateDtype;
      try {
        checkModelDtype(parseModelDtype(name), device());
      } catch (const std::exception &e) {
        diag.error(cfg.locOf(field),
                   "'" + std::string(field) + "': " + e.what());
        return false;
      }
    }
    torch::manual_seed(cfg.seed);
    ModelSet &m = models;
    bool criticModel = cfg.critic.kind == CriticSpec::Kind::ValueModel;
    ModelConfig criticConfig;
    if (criticModel)
      criticConfig = modelConfig(task, cfg.critic.model);
    ModelConfig policyConfig = modelConfig(task, cfg.model);
    int64_t longestPrompt = 0;
    if (!promptsFit(diag, policyConfig.maxPositionEmbeddings, longestPrompt))
      return false;
    checkTrainingMemory(*this, policyConfig,
                        criticModel ? &criticConfig : nullptr, longestPrompt);
    m.policy = makeModel(task, cfg.model,
                         cfg.critic.kind == CriticSpec::Kind::ValueHead,
                         device());
    if (cfg.critic.kind == CriticSpec::Kind::ValueModel)
      m.critic = makeModel(task, cfg.critic.model, true, device());
    if (m.critic &&
        m.critic->config().vocabSize != m.policy->config().vocabSize) {
      diag.error(cfg.critic.loc,
                 "the critic's vocabulary (" +
                     std::to_string(m.critic->config().vocabSize) +
                     ") differs from the policy's (" +
                     std::to_string(m.policy->config().vocabSize) + ")");
      return false;
    }
    // A fresh model is initialized on the CPU, so that it is the same on
    // every device, then moved; a loaded one is already there.
    m.policy->to(device());
    if (m.critic)
      m.critic->to(device());
    for (TransformerLM *model : {&m.policy, &m.critic})
      if (*model)
        setUpdateOptions(*model, cfg);
    for (auto [model, spec] :
         {std::pair<TransformerLM *, const ModelSpec *>{&m.policy, &cfg.model},
          {&m.critic, &cfg.critic.model}}) {
      std::string bad = firstNonFiniteParameter(*model);
      if (!bad.empty()) {
        diag.error(spec->loc, "the weights of '" + spec->path.string() +
                                  "' are not finite: " + bad);
        return false;
      }
    }
    sampleGen = makeGenerator(cfg.seed * 1000003ULL + 17);
    shuffleGen = makeGenerator(cfg.seed * 1000003ULL + 29);
    return true;
  }

  bool prepare(DiagnosticEngine &diag) {
    if (!checkPaths(diag))
      return false;
    if (world.size() > 1 && cfg.steps > 0 && cfg.prompts < world.size())
      throw TrainError("data-parallel: " + std::to_string(world.size()) +
                       " workers need at least as many prompts per step "
                       "(the file sets prompts = " +
                       std::to_string(cfg.prompts) + ")");
    // ATen's pool; OpenBLAS's too for data-parallel workers (N workers of T
    // threads must not each run one BLAS thread per core). A single process
    // keeps OpenBLAS's default, one thread per core: its thread count
    // changes the rounding of some kernels, and the measured runs used it.
    if (cfg.threads > 0)
      setCpuThreads(static_cast<int>(cfg.threads),
                    world.communicator() != nullptr);
    // Process-wide, as torch.set_float32_matmul_precision: every float32
    // matrix product of the run (rollouts in float32, scoring, the update).
    at::globalContext().setFloat32MatmulPrecision(cfg.float32MatmulPrecision);
    fs::create_directories(cfg.out);
    if (!loadEstimator(*this, diag))
      return false;
    if (cfg.kl.kind != KlSpec::Kind::None && cfg.kl.coef > 0)
      models.needReference = true;
    klCoef = cfg.kl.coef;
    if (cfg.kl.inReward && !est.denseReward) {
      diag.error(cfg.kl.loc,
                 "the KL penalty in the reward (in_reward = 1) goes on every "
                 "token's reward, but estimator '" +
                     est.bundle->manifest().estimator +
                     "' reads 'reward : seq'; use one that reads 'reward : "
                     "token' (e.g. stdlib/gae_dense.cac)");
      return false;
    }
    if (cfg.objective.compiled && !loadObjective(*this, diag))
      return false;
    try {
      return loadTaskAndModels(diag);
    } catch (const TrainError &) {
      throw;
    } catch (const std::exception &e) {
      throw TrainError(e.what());
    }
  }

  // --- one RL step --------------------------------------------------------

  /// The first reward that is not finite as the estimator's 32-bit float
  /// (a reward program's 1e308), as "VALUE of rollout K"; empty if none.
  std::string firstNonFiniteReward(const std::vector<Rollout> &rolls) const {
    for (size_t k = 0; k < rolls.size(); ++k)
      if (!(std::fabs(rolls[k].reward) <=
            static_cast<double>(std::numeric_limits<float>::max())))
        return fmt("%g", rolls[k].reward) + " of rollout " +
               std::to_string(k + 1) +
               (world.size() > 1 ? " of worker " + std::to_string(world.rank())
                                 : "");
    return {};
  }

  /// Whether the step's rewards or advantages (of the samples trained) are
  /// not finite (stops the run, or skips the update with --skip-nonfinite).
  bool skipUpdate(const Advantages &adv) {
    // The rewards first: they explain a non-finite advantage.
    std::string reward = firstNonFiniteReward(adv.rolls);
    if (skipNonFinite(*this, "reward " + reward + " (as a 32-bit float)",
                      !reward.empty(),
                      "rewards must stay within +-3.4e38"))
      return true;
    return skipNonFiniteTensor(
               *this, "advantage", adv.adv,
               "e.g. a division by zero in the estimator (maxrl with eps = 0 "
               "on a group whose rewards are all 0)") ||
           skipNonFiniteTensor(*this, "return", adv.ret);
  }

  json rlStep(int64_t rlIndex) {
    auto t0 = Clock::now();
    json row = {{"step", step + 1}, {"phase", "rl"}, {"rl_step", rlIndex + 1}};
    nonFiniteSkips = 0;
    double lr = setLr(*this, scheduleFactor(cfg.schedule, rlIndex, cfg.steps));

    auto tg = Clock::now();
    StepBatch batch = sampleStep(*this, rlIndex);
    double timeGen = seconds(tg);
    addPlanStats(*this, row, batch.plan.stats);

    auto ts = Clock::now();
    Scores sc = score(*this, batch.plan.rolls);
    double timeScore = seconds(ts);
    double stepKl = rewardKl(*this, sc, row);

    // The estimator, timed alone: what was queued before is waited for.
    syncForTiming();
    auto te = Clock::now();
    Advantages adv = estimate(*this, batch, std::move(sc), row);
    double timeEst = seconds(te);
    row["adv_mean"] = adv.raw.meanValue();
    row["adv_std"] = adv.raw.stdValue();

    auto tu = Clock::now();
    UpdateStats u = skipUpdate(adv) ? UpdateStats() : update(*this, adv);
    checkWeights(*this);
    double timeUpd = seconds(tu);
    if (opts.skipNonFinite)
      row["nonfinite_skips"] = nonFiniteSkips;

    RolloutTotals totals = stepMetrics(*this, row, batch.totals, u, stepKl);
    double dt = seconds(t0);
    row["lr"] = lr;
    row["tokens_per_s"] = totals.tokens / dt;
    row["time_gen_s"] = timeGen;
    row["time_score_s"] = timeScore;
    row["time_estimator_s"] = timeEst;
    row["time_update_s"] = timeUpd;
    row["time_step_s"] = dt;
    return row;
  }

  // --- the run ------------------------------------------------------------

  /// Steps run by this process (TrainerOptions::stopAfterSteps).
  int64_t ranHere = 0;

  bool stopNow() const {
    return opts.stopAfterSteps >= 0 && ranHere >= opts.stopAfterSteps;
  }

  bool dueCheckpoint() const {
    int64_t total = cfg.sft.steps + cfg.steps;
    return step == total || step == cfg.sft.steps ||
           (cfg.checkpointEvery > 0 && step % cfg.checkpointEvery == 0);
  }

  /// After a step: the checkpoint when due, and the stop a signal asked
  /// for, with a checkpoint of this step (every rank decides alike).
  void checkpointOrStop() {
    bool due = dueCheckpoint();
    if (due)
      saveCheckpointNow(*this);
    int local = stopSignal();
    bool stop = local != 0;
    if (world.communicator()) {
      std::vector<double> any{stop ? 1.0 : 0.0};
      world.sum(any);
      stop = any[0] > 0;
    }
    if (!stop)
      return;
    if (!due)
      saveCheckpointNow(*this);
    bar->finish();
    int64_t total = cfg.sft.steps + cfg.steps;
    throw TrainStopped(
        std::string("stopped by ") +
            (local ? stopSignalName(local) : "a signal to another worker") +
            " after step " + std::to_string(step) + " of " +
            std::to_string(total) + "; the checkpoint in '" +
            checkpointDir(*this).string() + "' holds it: --resume continues",
        local);
  }

  void appendRow(json &row) {
    row["elapsed_s"] = elapsed();
    log->append(row);
  }

  /// Resumes or starts fresh, and opens the logs; returns the first step.
  int64_t begin() {
    runStart = Clock::now();
    if (world.writer()) {
      // What writes killed mid-way left (a checkpoint folder, a file being
      // replaced) is never read; it only fills the disk.
      int stale = removeStaleTemporaries(checkpointDir(*this));
      for (const char *f :
           {"metrics.jsonl", "metrics.csv", "samples.jsonl", "plot.png"})
        stale += removeStaleTemporaries(cfg.out / f);
      if (stale > 0 && opts.verbose)
        std::fprintf(stderr,
                     "cac-run: removed %d unfinished write%s of a killed run "
                     "in '%s'\n",
                     stale, stale == 1 ? "" : "s", cfg.out.string().c_str());
    }
    int64_t start = 0;
    if (opts.resume) {
      start = resume(*this);
    } else {
      if (fs::exists(checkpointDir(*this)))
        throw TrainError("'" + cfg.out.string() +
                         "' already holds a checkpoint: pass --resume to "
                         "continue it, or choose another --out");
      if (cfg.sft.steps > 0)
        buildOptimizer(*this, false);
      else
        enterRl(*this);
    }
    step = start;
    // Only rank 0 writes files; the other workers keep their rows in memory
    // and stay quiet.
    bool w = world.writer();
    log = w ? std::make_unique<MetricsLog>(cfg.out, opts.resume ? start : -1)
            : std::make_unique<MetricsLog>();
    samples = w ? std::make_unique<SampleLog>(cfg.out / "samples.jsonl",
                                              opts.resume ? start : -1)
                : std::make_unique<SampleLog>();
    bar = std::make_unique<ProgressBar>(opts.progress && w);
    if (!w)
      opts.verbose = false;
    return start;
  }

  void announce(int64_t start) {
    // Every rank's device (-1: the CPU), so that the log shows where the
    // ranks run, a GPU shared or one each; a collective, so before the
    // other ranks go quiet.
    std::vector<double> devices;
    if (world.communicator())
      devices = world.gather(
          {device().is_cuda() ? static_cast<double>(device().index()) : -1.0});
    if (!opts.verbose)
      return;
    std::string on;
    for (double d : devices)
      on += (on.empty() ? " on " : ", ") +
            (d < 0 ? std::string("cpu") : "cuda:" + std::to_string(int(d)));
    if (Communicator *comm = world.communicator())
      bar->message("cac-run: " + std::to_string(world.size()) + " workers (" +
                   (comm->backend() == DistBackend::Nccl ? "nccl" : "gloo") +
                   on + "); each takes about " +
                   std::to_string(cfg.prompts / world.size()) + " of the " +
                   std::to_string(cfg.prompts) + " prompts of a step");
    if (start == 0)
      bar->message(
          "cac-run: " + cfg.name + ": policy " +
          std::to_string(models.policy->numParameters()) +
          " parameters, estimator '" + est.bundle->manifest().estimator +
          "', " + std::to_string(cfg.sft.steps) + " SFT + " +
          std::to_string(cfg.steps) + " RL steps, out " + cfg.out.string() +
          "; device " + device().str() + "; CPU kernels " + cpuKernelSet());
    else
      bar->message("cac-run: resuming '" + cfg.name + "' at step " +
                   std::to_string(start));
  }

  /// The evaluation at RL start (after SFT, or before the first RL step).
  void evaluateRlStart() {
    auto t = Clock::now();
    evalStart = evaluate(*this);
    logSamples(*this, step, 0);
    json ev = {{"step", step},
               {"phase", "eval"},
               {"rl_step", 0},
               {"eval_acc", evalStart},
               {"time_eval_s", seconds(t)}};
    addEvalSteps(*this, ev);
    appendRow(ev);
  }

  /// The SFT steps; false where the run stops (stopAfterSteps).
  bool runSft() {
    const int64_t S = cfg.sft.steps;
    while (step < S) {
      nonFiniteSkips = 0;
      json row = sftStep(*this, step);
      checkWeights(*this);
      ++step;
      ++ranHere;
      appendRow(row);
      bar->update("sft", step, S,
                  "loss " + fmt("%.3f", row["loss"].get<double>()) + " tok/s " +
                      fmt("%.0f", row["tokens_per_s"].get<double>()));
      if (stopNow())
        return false;
      if (step == S) {
        // The RL phase starts here: evaluate, snapshot the reference, and
        // checkpoint the RL-start state.
        evaluateRlStart();
        enterRl(*this);
      }
      checkpointOrStop();
    }
    return true;
  }

  /// The RL steps; false where the run stops (stopAfterSteps).
  bool runRl() {
    const int64_t S = cfg.sft.steps, R = cfg.steps;
    std::string lastEval = std::isnan(evalStart) ? "-" : fmt("%.3f", evalStart);
    while (step < S + R) {
      int64_t rlIndex = step - S;
      json row = rlStep(rlIndex);
      ++step;
      ++ranHere;
      bool last = step == S + R;
      if (last || (cfg.eval.every > 0 && (rlIndex + 1) % cfg.eval.every == 0)) {
        auto t = Clock::now();
        double acc = evaluate(*this);
        logSamples(*this, step, rlIndex + 1);
        row["eval_acc"] = acc;
        addEvalSteps(*this, row);
        row["time_eval_s"] = seconds(t);
        lastEval = fmt("%.3f", acc);
        if (last)
          evalEnd = acc;
      }
      appendRow(row);
      bar->update("rl", rlIndex + 1, R,
                  "reward " + fmt("%.3f", row["reward_mean"].get<double>()) +
                      " acc " + fmt("%.3f", row["acc"].get<double>()) +
                      " eval " + lastEval + " tok/s " +
                      fmt("%.0f", row["tokens_per_s"].get<double>()));
      if ((row.contains("eval_acc") || last) && world.writer())
        writePlot(log->rows(), cfg.out / "plot.png");
      if (stopNow())
        return false; // as if killed after logging, before the checkpoint
      checkpointOrStop();
    }
    return true;
  }

  /// The plot, the final model and the summary (rank 0).
  void finish() {
    bar->finish();
    if (!world.writer())
      return;
    writePlot(log->rows(), cfg.out / "plot.png");
    if (std::isnan(evalEnd))
      for (auto it = log->rows().rbegin(); it != log->rows().rend(); ++it)
        if (it->contains("eval_acc") && (*it)["eval_acc"].is_number()) {
          evalEnd = (*it)["eval_acc"].get<double>();
          break;
        }
    try {
      savePretrained(*models.policy, cfg.out / "final");
      if (!cfg.model.charTokenizer())
        copyTokenizerFiles(cfg.model.tokenizerFolder(), cfg.out / "final");
    } catch (const std::exception &e) {
      throw TrainError(std::string("writing the final model: ") + e.what());
    }
    if (opts.verbose)
      bar->message("cac-run: done in " + fmt("%.1f", elapsed()) +
                   " s; eval_acc " +
                   (std::isnan(evalStart) ? "-" : fmt("%.3f", evalStart)) +
                   " at RL start, " +
                   (std::isnan(evalEnd) ? "-" : fmt("%.3f", evalEnd)) +
                   " at the end; metrics in " + cfg.out.string());
  }

  void run() {
    int64_t start = begin();
    announce(start);
    if (!runSft())
      return;
    if (cfg.sft.steps == 0 && step == 0)
      evaluateRlStart();
    if (opts.verbose && step == cfg.sft.steps && !std::isnan(evalStart))
      bar->message("cac-run: eval_acc at RL start " + fmt("%.3f", evalStart));
    if (!runRl())
      return;
    finish();
  }
};

//===----------------------------------------------------------------------===//
// Trainer
//===----------------------------------------------------------------------===//

Trainer::Trainer(TrainConfig config, TrainerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(config);
  impl_->opts = std::move(options);
  impl_->world = World(impl_->opts.dist);
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
