//===- trainer-test.cpp - Short runs of the training loop -----------------===//
//
// A model of a few thousand parameters, two SFT and three RL steps: resuming
// after a simulated kill must give exactly the metrics and weights of an
// uninterrupted run, the same seed must give the same metrics, and broken
// checkpoints or estimator mismatches must be reported, not crash. Needs the
// stdlib bundles (see CMakeLists.txt); skips without them.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Tasks/Tasks.h"
#include "cac/Runtime/Train/Trainer.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

using namespace cac::rt::train;
using cac::rt::ArithmeticTask;
using cac::rt::Problem;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string bundlesDir() { return CAC_TEST_TRAIN_BUNDLES; }

class TrainerTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (bundlesDir().empty() ||
        !fs::exists(fs::path(bundlesDir()) / "grpo" / "manifest.json"))
      GTEST_SKIP() << "no compiled stdlib bundles (build with the compiler "
                      "or set CAC_TEST_STDLIB_BUNDLES)";
    dir_ = fs::temp_directory_path() /
           ("cac-trainer-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  /// A very small run: 2 SFT + 3 RL steps, a checkpoint after every step.
  std::string source(const std::string &estimator = "grpo",
                     const std::string &extra = "") const {
    std::string est = (fs::path(bundlesDir()) / estimator).string();
    std::string critic = estimator == "gae"
                             ? "critic = value_head(coef = 0.5)\n"
                             : "critic = none\n";
    return "train tiny {\n"
           "  model = builtin(\"custom\", hidden = 16, layers = 1, heads = 2, "
           "kv_heads = 1, ffn = 32, max_positions = 32)\n"
           "  task = arith(min_level = 1, max_level = 1)\n"
           "  estimator = bundle(\"" +
           est + "\")\n  " + critic +
           "  rollout = group(n = 4, max_tokens = 4)\n"
           "  prompts = 3\n"
           "  minibatches = 2\n"
           "  epochs = 2\n"
           "  kl = k3(coef = 0.01)\n"
           "  aggregation = \"seq-mean-token-mean\"\n"
           "  warm_start = sft(steps = 2, batch = 4, lr = 1e-2)\n"
           "  steps = 3\n"
           "  eval = greedy(every = 2, size = 6)\n"
           "  checkpoint_every = 1\n"
           "  threads = 1\n"
           "  seed = 3\n" +
           extra + "}\n";
  }

  /// Parses \p src (written to dir_/NAME.cac) with \p out as output folder.
  TrainConfig config(const std::string &src, const std::string &out) {
    fs::path file = dir_ / "train.cac";
    std::ofstream(file) << src;
    std::string errors;
    auto cfg = loadTrainFile(file, errors);
    EXPECT_TRUE(cfg) << errors;
    cfg->out = dir_ / out;
    return *cfg;
  }

  std::vector<json> runToEnd(TrainConfig cfg, TrainerOptions opts = {}) {
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_TRUE(t.prepare(diag)) << diag.render();
    t.run();
    return t.metrics();
  }

  /// prepare() of \p cfg must fail; returns its diagnostics.
  static std::string prepareErrors(const TrainConfig &cfg,
                                   TrainerOptions opts = {}) {
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_FALSE(t.prepare(diag));
    return diag.render();
  }

  /// The RL rows of two runs of the same length agree on \p keys within
  /// 1e-4 relative (1e-3 for ratio_mean: AdamW divides each step by the root
  /// of its second moment, so the kernels' f32 rounding of tiny gradients
  /// moves the weights by ~1e-4 of a step, which the ratios after the first
  /// update see; measured 1.5e-4). Returns the RL rows compared.
  static int expectSameRlMetrics(const std::vector<json> &a,
                                 const std::vector<json> &b,
                                 std::initializer_list<const char *> keys) {
    EXPECT_EQ(a.size(), b.size());
    int rl = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i]["phase"] != "rl")
        continue;
      ++rl;
      for (const char *k : keys) {
        double x = a[i][k].get<double>(), y = b[i][k].get<double>();
        double tol = std::string(k) == "ratio_mean" ? 1e-3 : 1e-4;
        EXPECT_NEAR(x, y, tol * std::max(1.0, std::abs(x)))
            << k << " row " << i;
      }
    }
    return rl;
  }

  static std::vector<json> withoutTimes(std::vector<json> rows) {
    for (auto &r : rows)
      for (const char *k :
           {"tokens_per_s", "time_gen_s", "time_score_s", "time_estimator_s",
            "time_update_s", "time_eval_s", "time_step_s", "elapsed_s"})
        r.erase(k);
    return rows;
  }

  static std::string readAll(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  fs::path dir_;
};

TEST_F(TrainerTest, RunsAndWritesItsOutputs) {
  TrainConfig cfg = config(source(), "a");
  std::vector<json> rows = runToEnd(cfg);
  // 2 SFT rows, the RL-start eval, 3 RL rows.
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0]["phase"], "sft");
  EXPECT_EQ(rows[2]["phase"], "eval");
  EXPECT_EQ(rows[2]["step"], 2);
  EXPECT_EQ(rows[5]["phase"], "rl");
  EXPECT_EQ(rows[5]["step"], 5);
  EXPECT_TRUE(rows[4].contains("eval_acc")); // every = 2
  EXPECT_TRUE(rows[5].contains("eval_acc")); // the end
  EXPECT_TRUE(rows[5].contains("kl"));
  for (const char *k : {"reward_mean", "acc", "loss", "entropy", "clip_frac",
                        "grad_norm", "time_score_s", "time_estimator_s",
                        "tokens_per_s"})
    EXPECT_TRUE(rows[3].contains(k)) << k;
  for (const char *f : {"metrics.jsonl", "metrics.csv", "plot.png",
                        "samples.jsonl", "checkpoint/checkpoint.json",
                        "final/config.json"})
    EXPECT_TRUE(fs::exists(cfg.out / f)) << f;

  // samples.jsonl: each eval's greedy completions of its first 8 problems,
  // here all 6; their rewards are the task's and give the eval's accuracy.
  std::map<int64_t, std::vector<json>> byStep;
  std::ifstream in(cfg.out / "samples.jsonl");
  for (std::string line; std::getline(in, line);)
    byStep[json::parse(line)["step"].get<int64_t>()].push_back(
        json::parse(line));
  ASSERT_EQ(byStep.size(), 3u); // RL start (step 2), steps 4 and 5
  for (const json &row : rows) {
    if (!row.contains("eval_acc"))
      continue;
    const std::vector<json> &got = byStep[row["step"].get<int64_t>()];
    ASSERT_EQ(got.size(), 6u) << row.dump();
    double correct = 0;
    for (const json &x : got) {
      EXPECT_EQ(x["rl_step"], row["rl_step"]);
      Problem p;
      p.answer = x["answer"].get<std::string>();
      EXPECT_EQ(x["reward"].get<double>(),
                ArithmeticTask::reward(p, x["completion"].get<std::string>()))
          << x.dump();
      EXPECT_EQ(x["prompt"].get<std::string>().back(), '=') << x.dump();
      EXPECT_FALSE(x["problem"].get<std::string>().empty());
      correct += x["reward"].get<double>() >= 1.0 ? 1.0 : 0.0;
    }
    EXPECT_DOUBLE_EQ(row["eval_acc"].get<double>(), correct / 6.0);
  }
  // samples = 0: none written.
  std::string none = source();
  none.replace(none.find("size = 6)"), 9, "size = 6, samples = 0)");
  TrainConfig quiet = config(none, "quiet");
  runToEnd(quiet);
  EXPECT_EQ(readAll(quiet.out / "samples.jsonl"), "");
}

TEST_F(TrainerTest, SteppedTaskLogsTheStepFraction) {
  std::string src = source();
  std::string from = "task = arith(min_level = 1, max_level = 1)";
  src.replace(src.find(from), from.size(),
              "task = arith(digits = 1, ops = \"+-\", steps = 0.5)");
  std::vector<json> rows = runToEnd(config(src, "a"));
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i : {2u, 4u, 5u}) {
    ASSERT_TRUE(rows[i].contains("eval_steps_frac")) << rows[i].dump();
    double f = rows[i]["eval_steps_frac"].get<double>();
    EXPECT_GE(f, 0.0);
    EXPECT_LE(f, 1.0);
  }
  EXPECT_FALSE(rows[3].contains("eval_steps_frac"));
  // Without `steps`, no column.
  rows = runToEnd(config(source(), "b"));
  for (const json &r : rows)
    EXPECT_FALSE(r.contains("eval_steps_frac"));
}

// A token reward (stdlib/gae_dense.cac): without a KL in the reward it is R on
// the last token, so the run equals stdlib/gae.cac's; with `kl = k1(coef,
// in_reward = 1)` every token's reward carries -coef * KL(pi_old || pi_ref),
// which is 0 at the first RL step (the reference is the policy at RL start)
// and moves the advantages after it, and no KL loss term is added.
TEST_F(TrainerTest, KlInTheRewardNeedsAndShapesATokenReward) {
  auto noKl = [&](std::string src) {
    src.replace(src.find("kl = k3(coef = 0.01)"), 20, "kl = none");
    return src;
  };
  auto withCritic = [&](std::string src) {
    src.replace(src.find("critic = none"), 13,
                "critic = value_head(coef = 0.5)");
    return src;
  };
  std::vector<json> gae = withoutTimes(runToEnd(config(noKl(source("gae")), "a")));
  std::vector<json> dense =
      withoutTimes(runToEnd(config(withCritic(noKl(source("gae_dense"))), "b")));
  ASSERT_EQ(gae.size(), dense.size());
  for (size_t i = 0; i < gae.size(); ++i)
    for (const char *k : {"loss", "value_loss", "grad_norm", "adv_mean",
                          "adv_std", "reward_mean"})
      if (gae[i].contains(k)) {
        EXPECT_NEAR(gae[i][k].get<double>(), dense[i][k].get<double>(),
                    1e-6 * std::max(1.0, std::abs(gae[i][k].get<double>())))
            << k << " row " << i;
      }
  std::string src = withCritic(source("gae_dense"));
  src.replace(src.find("kl = k3(coef = 0.01)"), 20,
              "kl = k1(coef = 0.5, in_reward = 1)");
  std::vector<json> shaped = withoutTimes(runToEnd(config(src, "c")));
  ASSERT_EQ(shaped.size(), dense.size());
  int rl = 0;
  for (size_t i = 0; i < shaped.size(); ++i) {
    if (shaped[i]["phase"] != "rl")
      continue;
    ASSERT_TRUE(shaped[i].contains("kl_reward"));
    ASSERT_TRUE(shaped[i].contains("kl")); // logged, not in the loss
    double penalty = shaped[i]["kl_reward"].get<double>();
    double da = std::abs(shaped[i]["adv_mean"].get<double>() -
                         dense[i]["adv_mean"].get<double>());
    if (rl++ == 0) {
      // The first step's policy is the reference: their log-probabilities
      // agree up to the rounding of forward passes over batches of other
      // shapes (which BLAS kernels they take depends on the CPU).
      EXPECT_NEAR(penalty, 0.0, 1e-6);
      EXPECT_LT(da, 1e-6);
    } else {
      EXPECT_NE(penalty, 0.0);
      EXPECT_GT(da, 1e-6);
    }
  }
  EXPECT_EQ(rl, 3);
  // A seq reward cannot carry it.
  std::string bad = source("gae");
  bad.replace(bad.find("kl = k3(coef = 0.01)"), 20,
              "kl = k1(coef = 0.5, in_reward = 1)");
  std::string errors = prepareErrors(config(bad, "d"));
  EXPECT_NE(errors.find("estimator 'gae' reads 'reward : seq'; use one that "
                        "reads 'reward : token'"),
            std::string::npos)
      << errors;
}

// An adaptive KL coefficient in the reward (verl's AdaptiveKLController):
// after each step coef *= 1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon,
// n the step's sequences; the coefficient is in the checkpoint, so a killed
// and resumed run equals an uninterrupted one.
TEST_F(TrainerTest, AdaptiveKlCoefficientFollowsItsTargetAndResumes) {
  std::string src = source("gae_dense");
  src.replace(src.find("critic = none"), 13, "critic = value_head(coef = 0.5)");
  src.replace(src.find("kl = k3(coef = 0.01)"), 20,
              "kl = k1(coef = 0.5, in_reward = 1, target = 0.001, horizon = 30)");
  std::vector<json> whole = withoutTimes(runToEnd(config(src, "whole")));
  std::vector<const json *> rl;
  for (const json &r : whole)
    if (r["phase"] == "rl")
      rl.push_back(&r);
  ASSERT_EQ(rl.size(), 3u);
  EXPECT_DOUBLE_EQ((*rl[0])["kl_coef"].get<double>(), 0.5);
  bool moved = false;
  for (size_t i = 0; i + 1 < rl.size(); ++i) {
    double coef = (*rl[i])["kl_coef"].get<double>();
    double kl = (*rl[i])["kl_reward"].get<double>() / coef;
    double n = 3 * 4; // prompts x rollouts
    double want =
        coef * (1 + std::clamp(kl / 0.001 - 1, -0.2, 0.2) * n / 30.0);
    EXPECT_NEAR((*rl[i + 1])["kl_coef"].get<double>(), want, 1e-12 * want)
        << "step " << i + 2;
    moved = moved || want != coef;
  }
  EXPECT_TRUE(moved);
  // Killed after RL step 2 (logged, not checkpointed): the run resumes from
  // RL step 1's checkpoint, whose coefficient has moved once.
  TrainConfig cfg = config(src, "part");
  TrainerOptions kill;
  kill.stopAfterSteps = 4;
  runToEnd(cfg, kill);
  TrainerOptions resume;
  resume.resume = true;
  EXPECT_EQ(json(withoutTimes(runToEnd(cfg, resume))).dump(),
            json(whole).dump());
  // A target needs the KL in the reward.
  std::string bad = source("gae");
  bad.replace(bad.find("kl = k3(coef = 0.01)"), 20,
              "kl = k1(coef = 0.5, target = 0.1)");
  fs::path file = dir_ / "bad.cac";
  std::ofstream(file) << bad;
  std::string errors;
  EXPECT_FALSE(loadTrainFile(file, errors));
  EXPECT_NE(errors.find("an adaptive KL coefficient ('target') adjusts the "
                        "KL penalty in the reward: set in_reward = 1"),
            std::string::npos)
      << errors;
}

// `objective = "stdlib/ppo_kl.cac"` (the compiled kernels' loss and gradient)
// trains like the built-in ppo_clip with a k3 KL term: the same metrics, up to
// the kernels' f32 rounding.
TEST_F(TrainerTest, CompiledObjectiveTrainsLikeTheBuiltinLoss) {
  std::string compiler = CAC_TEST_COMPILER;
  if (compiler.empty())
    GTEST_SKIP() << "no cac compiler in this build";
  std::string obj =
      (fs::path(CAC_TEST_SOURCE_DIR) / "stdlib" / "ppo_kl.cac").string();
  TrainConfig builtin = config(source("grpo", "  objective = ppo_clip(eps = 0.2)\n"), "b");
  std::string src = source("grpo", "  objective = cac(\"" + obj +
                                       "\", kl_coef = 0.01)\n");
  src.replace(src.find("kl = k3(coef = 0.01)"), 20, "kl = none");
  TrainConfig compiled = config(src, "c");
  ASSERT_TRUE(compiled.objective.compiled);
  TrainerOptions opts;
  opts.compiler = compiler;
  std::vector<json> a = runToEnd(builtin, opts), b = runToEnd(compiled, opts);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(expectSameRlMetrics(a, b, {"loss", "grad_norm", "clip_frac",
                                       "reward_mean", "kl", "ratio_mean"}),
            3);
}

// GSPO's sequence objective (stdlib/gspo.cac) recomputes GRPO's advantage
// over the groups of its minibatch; minibatches hold whole groups, so with
// one minibatch they are the step's groups and the run is GSPO-token
// (stdlib/gspo_token.cac) on the grpo estimator's unwhitened advantages with
// seq-mean-token-mean: the same objective and gradient (estimators.md §1.4).
// Several minibatches train too; more minibatches than groups is an error.
TEST_F(TrainerTest, GspoSequenceObjectiveTrainsOnWholeGroups) {
  std::string compiler = CAC_TEST_COMPILER;
  if (compiler.empty())
    GTEST_SKIP() << "no cac compiler in this build";
  fs::path stdlib = fs::path(CAC_TEST_SOURCE_DIR) / "stdlib";
  auto with = [&](const std::string &obj, int minibatches) {
    std::string src = source(
        "grpo", "  objective = cac(\"" + (stdlib / obj).string() +
                    "\")\n"); // GSPO's eps 3e-4 / 4e-4: epoch 2 clips
    src.replace(src.find("kl = k3(coef = 0.01)"), 20, "kl = none");
    src.replace(src.find("minibatches = 2"), 15,
                "minibatches = " + std::to_string(minibatches));
    // Enough SFT that some rollouts are right: nonzero advantages.
    src.replace(src.find("sft(steps = 2,"), 14, "sft(steps = 60,");
    return src;
  };
  TrainerOptions opts;
  opts.compiler = compiler;
  std::vector<json> token = runToEnd(config(with("gspo_token.cac", 1), "t"),
                                     opts);
  std::vector<json> seq = runToEnd(config(with("gspo.cac", 1), "s"), opts);
  EXPECT_EQ(expectSameRlMetrics(token, seq,
                                {"loss", "grad_norm", "reward_mean",
                                 "ratio_mean", "clip_frac"}),
            3);
  double clipped = 0, norm = 0;
  for (const json &r : seq)
    if (r["phase"] == "rl") {
      clipped += r["clip_frac"].get<double>();
      norm += r["grad_norm"].get<double>();
    }
  EXPECT_GT(norm, 0.0) << "no gradient: nothing compared";
  EXPECT_GT(clipped, 0.0) << "nothing clipped: clip_frac compared nothing";
  // 3 prompts: 3 minibatches of one group each.
  for (const json &r : runToEnd(config(with("gspo.cac", 3), "s3"), opts))
    if (r["phase"] == "rl") {
      EXPECT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
    }
  std::string errors = prepareErrors(config(with("gspo.cac", 4), "s4"), opts);
  EXPECT_NE(errors.find("the objective computes over groups, so each "
                        "minibatch holds whole groups: minibatches (4) "
                        "exceeds the groups per step (prompts = 3)"),
            std::string::npos)
      << errors;
}

// An objective that reads the critic's value and the reward: SAPO's loss
// (stdlib/sapo_loss.cac) recomputes SAPO's advantages from them. With token
// ratios (naive_is = 1), no dual clip and eps 0.2 it is the built-in PPO clip
// on the sapo estimator's advantages, so the runs must agree.
TEST_F(TrainerTest, CompiledObjectiveReadsValueAndReward) {
  std::string compiler = CAC_TEST_COMPILER;
  if (compiler.empty())
    GTEST_SKIP() << "no cac compiler in this build";
  std::string obj =
      (fs::path(CAC_TEST_SOURCE_DIR) / "stdlib" / "sapo_loss.cac").string();
  auto withCritic = [&](std::string src) {
    src.replace(src.find("critic = none"), 13,
                "critic = value_head(coef = 0.5)");
    return src;
  };
  TrainConfig builtin = config(
      withCritic(source("sapo", "  objective = ppo_clip(eps = 0.2)\n")), "b");
  TrainConfig compiled =
      config(withCritic(source("sapo", "  objective = cac(\"" + obj +
                                           "\", naive_is = 1, dual_clip = 0, "
                                           "eps_high = 0.2)\n")),
             "c");
  TrainerOptions opts;
  opts.compiler = compiler;
  std::vector<json> a = runToEnd(builtin, opts), b = runToEnd(compiled, opts);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(expectSameRlMetrics(a, b, {"loss", "pg_loss", "value_loss",
                                       "grad_norm", "clip_frac",
                                       "reward_mean", "kl", "ratio_mean"}),
            3);
  // Without a critic there is no value to give it.
  TrainConfig noCritic = config(
      source("grpo", "  objective = cac(\"" + obj + "\", naive_is = 1)\n"),
      "d");
  std::string errors = prepareErrors(noCritic, opts);
  EXPECT_NE(errors.find("the objective reads 'value': set a critic"),
            std::string::npos)
      << errors;
}

// `objective = bundle("DIR", ...)`: an objective compiled elsewhere trains
// without a compiler, exactly as the same file compiled by the run; a missing
// folder is an error at the field.
TEST_F(TrainerTest, ObjectiveFromABundleNeedsNoCompiler) {
  std::string compiler = CAC_TEST_COMPILER;
  if (compiler.empty())
    GTEST_SKIP() << "no cac compiler in this build";
  std::string obj =
      (fs::path(CAC_TEST_SOURCE_DIR) / "stdlib" / "ppo_kl.cac").string();
  fs::path bundle = dir_ / "ppo_kl-bundle";
  std::string cmd = "'" + compiler + "' compile '" + obj + "' -o '" +
                    (dir_ / "ppo_kl.ptx").string() + "' --bundle '" +
                    bundle.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  TrainerOptions withCompiler;
  withCompiler.compiler = compiler;
  std::vector<json> a = withoutTimes(runToEnd(
      config(source("grpo", "  objective = cac(\"" + obj +
                                "\", kl_coef = 0.01)\n"),
             "src"),
      withCompiler));
  TrainerOptions none; // no compiler
  std::vector<json> b = withoutTimes(runToEnd(
      config(source("grpo", "  objective = bundle(\"" + bundle.string() +
                                "\", kl_coef = 0.01)\n"),
             "bundle"),
      none));
  EXPECT_EQ(json(a).dump(), json(b).dump());
  std::string errors = prepareErrors(
      config(source("grpo", "  objective = bundle(\"" +
                                (dir_ / "nowhere").string() + "\")\n"),
             "missing"),
      none);
  EXPECT_NE(errors.find("the objective bundle '"), std::string::npos) << errors;
  EXPECT_NE(errors.find("' does not exist"), std::string::npos) << errors;
}

// A compiled objective must be differentiated by logp_new and read what the
// trainer has; errors name the objective line.
TEST_F(TrainerTest, CompiledObjectiveMismatchesAreDiagnosed) {
  std::string compiler = CAC_TEST_COMPILER;
  if (compiler.empty())
    GTEST_SKIP() << "no cac compiler in this build";
  std::string obj =
      (fs::path(CAC_TEST_SOURCE_DIR) / "stdlib" / "value_bce.cac").string();
  TrainConfig cfg =
      config(source("grpo", "  objective = \"" + obj + "\"\n"), "d");
  TrainerOptions opts;
  opts.compiler = compiler;
  std::string errors = prepareErrors(cfg, opts);
  EXPECT_NE(errors.find("differentiated by logp_new"), std::string::npos)
      << errors;
}

TEST_F(TrainerTest, SameSeedSameMetrics) {
  auto a = withoutTimes(runToEnd(config(source(), "a")));
  auto b = withoutTimes(runToEnd(config(source(), "b")));
  EXPECT_EQ(json(a).dump(), json(b).dump());
  std::string other = source();
  other.replace(other.find("seed = 3"), 8, "seed = 4");
  auto c = withoutTimes(runToEnd(config(other, "c")));
  EXPECT_NE(json(a).dump(), json(c).dump());
}

TEST_F(TrainerTest, Bfloat16RolloutsTrainAgainstTheFloat32Policy) {
  // One update per step over the whole batch: its ratio is exactly 1 when
  // the old log-probabilities are the float32 policy's own, not the
  // bfloat16 sampler's (those differ by rollout_logp_diff per token).
  std::string src = source("grpo", "  rollout_dtype = \"bfloat16\"\n");
  src.replace(src.find("epochs = 2"), 10, "epochs = 1");
  src.replace(src.find("minibatches = 2"), 15, "minibatches = 1");
  auto rows = runToEnd(config(src, "bf16"));
  int rl = 0;
  for (const json &r : rows) {
    if (r["phase"] != "rl")
      continue;
    ++rl;
    for (const char *k : {"reward_mean", "loss", "pg_loss", "kl",
                          "grad_norm", "entropy", "rollout_logp_diff"}) {
      ASSERT_TRUE(r.contains(k)) << k;
      EXPECT_TRUE(std::isfinite(r[k].get<double>())) << k;
    }
    EXPECT_NEAR(r["ratio_mean"].get<double>(), 1.0, 1e-6);
    EXPECT_EQ(r["clip_frac"].get<double>(), 0.0);
    // bfloat16 sampling moved the log-probabilities, but only a little.
    double diff = r["rollout_logp_diff"].get<double>();
    EXPECT_GT(diff, 0.0);
    EXPECT_LT(diff, 0.1);
  }
  EXPECT_EQ(rl, 3);
  // float32 rollouts (the default) have no such metric.
  auto plain = runToEnd(config(source(), "f32"));
  for (const json &r : plain)
    EXPECT_FALSE(r.contains("rollout_logp_diff"));
}

TEST_F(TrainerTest, ActivationCheckpointingKeepsTheMetrics) {
  // The checkpointed layers recompute the same values and gradients (the
  // policy's, its value head's, through SFT and RL), so the run is the
  // same run: its metrics within float rounding.
  for (const char *estimator : {"grpo", "gae"}) {
    SCOPED_TRACE(estimator);
    std::string base = std::string("plain-") + estimator;
    auto plain = withoutTimes(runToEnd(config(source(estimator), base)));
    auto ckpt = withoutTimes(runToEnd(
        config(source(estimator, "  activation_checkpointing = true\n"),
               std::string("ckpt-") + estimator)));
    ASSERT_EQ(plain.size(), ckpt.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      if (plain[i]["phase"] != "sft")
        continue;
      double want = plain[i]["loss"].get<double>();
      EXPECT_NEAR(ckpt[i]["loss"].get<double>(), want, 1e-6 * std::abs(want));
    }
    EXPECT_EQ(expectSameRlMetrics(plain, ckpt,
                                  {"reward_mean", "loss", "pg_loss", "kl",
                                   "grad_norm", "entropy", "ratio_mean",
                                   "clip_frac"}),
              3);
  }
}

TEST_F(TrainerTest, Bfloat16UpdateTrainsWithFiniteMetrics) {
  // The SFT steps and the update compute in bfloat16 over float32 weights:
  // the first SFT loss (the same weights, the same batch) is float32's
  // within bfloat16's rounding, and every RL metric is finite.
  auto f32 = runToEnd(config(source("gae"), "f32"));
  auto bf16 = runToEnd(
      config(source("gae", "  update_dtype = \"bfloat16\"\n"), "bf16"));
  ASSERT_EQ(f32.size(), bf16.size());
  ASSERT_EQ(bf16[0]["phase"], "sft");
  double want = f32[0]["loss"].get<double>();
  double got = bf16[0]["loss"].get<double>();
  EXPECT_NE(got, want);
  EXPECT_NEAR(got, want, 2e-2 * std::abs(want));
  int rl = 0;
  for (const json &r : bf16) {
    if (r["phase"] != "rl")
      continue;
    ++rl;
    for (const char *k : {"reward_mean", "loss", "pg_loss", "kl", "grad_norm",
                          "entropy", "ratio_mean", "value_loss"}) {
      ASSERT_TRUE(r.contains(k)) << k;
      EXPECT_TRUE(std::isfinite(r[k].get<double>())) << k;
    }
    // The old log-probabilities are the float32 sampler's: the ratios
    // differ from 1 by bfloat16's rounding and what the epochs moved.
    EXPECT_NEAR(r["ratio_mean"].get<double>(), 1.0, 0.1);
  }
  EXPECT_EQ(rl, 3);
}

TEST_F(TrainerTest, Float16RolloutsNeedADeviceThatRunsThem) {
  // LibTorch 1.13 has no float16 matmul on the CPU: the run is refused at
  // the field, before any model is built.
  try {
    cac::rt::checkModelDtype(at::kHalf, torch::kCPU);
    GTEST_SKIP() << "this LibTorch runs float16 on the CPU";
  } catch (const std::exception &) {
  }
  std::string errors = prepareErrors(
      config(source("grpo", "  rollout_dtype = \"float16\"\n"), "f16"));
  EXPECT_NE(errors.find("error: 'rollout_dtype': a float16 model cannot run "
                        "on the CPU"),
            std::string::npos)
      << errors;
  // At the field's position in the file.
  EXPECT_NE(errors.find("train.cac:"), std::string::npos) << errors;
}

TEST_F(TrainerTest, Float32MatmulPrecisionIsTheRunsSetting) {
  // The file's precision is set for the process at prepare(), and a run
  // that does not name one sets "highest" back.
  auto precisionAfterPrepare = [&](const std::string &extra,
                                   const std::string &out) {
    TrainConfig cfg = config(source("grpo", extra), out);
    TrainerOptions opts;
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_TRUE(t.prepare(diag)) << diag.render();
    return at::globalContext().float32MatmulPrecision();
  };
  EXPECT_EQ(
      precisionAfterPrepare("  float32_matmul_precision = \"high\"\n", "high"),
      at::Float32MatmulPrecision::HIGH);
  EXPECT_EQ(precisionAfterPrepare("", "default"),
            at::Float32MatmulPrecision::HIGHEST);
}

TEST_F(TrainerTest, ResumeAfterKillEqualsUninterrupted) {
  for (int64_t killAfter : {2, 3, 4}) {
    SCOPED_TRACE("killed after " + std::to_string(killAfter) + " steps");
    std::string whole = "whole" + std::to_string(killAfter);
    std::string part = "part" + std::to_string(killAfter);
    auto expected = withoutTimes(runToEnd(config(source(), whole)));
    TrainConfig cfg = config(source(), part);
    TrainerOptions kill;
    kill.stopAfterSteps = killAfter; // logged, but not checkpointed
    runToEnd(cfg, kill);
    TrainerOptions resume;
    resume.resume = true;
    auto got = withoutTimes(runToEnd(cfg, resume));
    EXPECT_EQ(json(got).dump(), json(expected).dump());
    // The logged files agree too, and so do the final weights.
    EXPECT_EQ(readAll(dir_ / part / "final" / "model.safetensors"),
              readAll(dir_ / whole / "final" / "model.safetensors"));
    std::string csv = readAll(dir_ / part / "metrics.csv");
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);
    EXPECT_EQ(readAll(dir_ / part / "samples.jsonl"),
              readAll(dir_ / whole / "samples.jsonl"));
  }
}

TEST_F(TrainerTest, GaeWithValueHeadResumes) {
  auto expected = withoutTimes(runToEnd(config(source("gae"), "whole")));
  ASSERT_EQ(expected.size(), 6u);
  EXPECT_TRUE(expected[3].contains("value_loss"));
  TrainConfig cfg = config(source("gae"), "part");
  TrainerOptions kill;
  kill.stopAfterSteps = 3;
  runToEnd(cfg, kill);
  TrainerOptions resume;
  resume.resume = true;
  EXPECT_EQ(json(withoutTimes(runToEnd(cfg, resume))).dump(),
            json(expected).dump());
}

TEST_F(TrainerTest, MalformedCheckpointIsAnError) {
  TrainConfig cfg = config(source(), "a");
  TrainerOptions kill;
  kill.stopAfterSteps = 2;
  runToEnd(cfg, kill);
  fs::path ckpt = cfg.out / "checkpoint";
  ASSERT_TRUE(fs::exists(ckpt / "checkpoint.json"));

  auto resumeError = [&]() -> std::string {
    TrainerOptions o;
    o.resume = true;
    o.progress = false;
    o.verbose = false;
    Trainer t(cfg, o);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_TRUE(t.prepare(diag));
    try {
      t.run();
    } catch (const TrainError &e) {
      return e.what();
    }
    return "";
  };
  // Truncated weights.
  fs::resize_file(ckpt / "policy" / "model.safetensors", 10);
  std::string e = resumeError();
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  EXPECT_NE(e.find("checkpoint"), std::string::npos) << e;
  // Garbage metadata.
  std::ofstream(ckpt / "checkpoint.json") << "{ not json";
  e = resumeError();
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  // No checkpoint at all.
  fs::remove_all(ckpt);
  e = resumeError();
  EXPECT_NE(e.find("no checkpoint"), std::string::npos) << e;
}

TEST_F(TrainerTest, ResumeWithOtherSftStepsIsAnError) {
  TrainConfig cfg = config(source(), "a");
  TrainerOptions kill;
  kill.stopAfterSteps = 2; // checkpointed after step 1
  runToEnd(cfg, kill);
  cfg.sft.steps = 5;
  TrainerOptions o;
  o.resume = true;
  o.progress = o.verbose = false;
  Trainer t(cfg, o);
  DiagnosticEngine diag(cfg.file.string(), "");
  ASSERT_TRUE(t.prepare(diag));
  EXPECT_THROW(
      {
        try {
          t.run();
        } catch (const TrainError &e) {
          EXPECT_NE(std::string(e.what()).find("2 SFT steps"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      TrainError);
}

TEST_F(TrainerTest, RefusesToOverwriteACheckpoint) {
  TrainConfig cfg = config(source(), "a");
  TrainerOptions kill;
  kill.stopAfterSteps = 2;
  runToEnd(cfg, kill);
  TrainerOptions o;
  o.progress = o.verbose = false;
  Trainer t(cfg, o);
  DiagnosticEngine diag(cfg.file.string(), "");
  ASSERT_TRUE(t.prepare(diag));
  EXPECT_THROW(t.run(), TrainError);
}

TEST_F(TrainerTest, EstimatorMismatchesAreDiagnosedAtTheField) {
  // GAE reads `value`, so it needs a critic; GRPO reads none.
  std::string src = source("grpo", "");
  src.replace(src.find("/grpo\")"), 7, "/gae\", lamda = 0.9)");
  TrainConfig cfg = config(src, "a");
  fs::path file = dir_ / "train.cac";
  std::string text = readAll(file);
  DiagnosticEngine diag(file.string(), text);
  Trainer t(cfg, {});
  EXPECT_FALSE(t.prepare(diag));
  std::string errors = diag.render();
  EXPECT_NE(errors.find(":5:12: error: estimator 'gae' reads the token input "
                        "'value': set critic = value_head(...)"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("error: estimator 'gae' has no parameter 'lamda' "
                        "(parameters: gamma, lambda)"),
            std::string::npos)
      << errors;

  std::string src2 = source("grpo", "");
  src2.replace(src2.find("critic = none"), 13, "critic = value_head()");
  TrainConfig cfg2 = config(src2, "b");
  DiagnosticEngine diag2(file.string(), readAll(file));
  Trainer t2(cfg2, {});
  EXPECT_FALSE(t2.prepare(diag2));
  EXPECT_NE(diag2.render().find("error: a critic is set but estimator 'grpo' "
                                "reads no token input 'value'"),
            std::string::npos)
      << diag2.render();
}

TEST_F(TrainerTest, ChatTemplateFramesThePrompts) {
  // A template in the character vocabulary, so the built-in model can take
  // its prompts; the prompt is the user message after the system message.
  fs::create_directories(dir_ / "chat");
  std::ofstream(dir_ / "chat" / "tokenizer_config.json")
      << R"({"eos_token": "<eos>", "chat_template": "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{{ suffix }}{% endif %}"})";
  std::string src = source("grpo", "chat = template(\"chat\", system = "
                                   "\"Be exact.\", suffix = \" \")\n");
  src.replace(src.find("max_positions = 32"), 18, "max_positions = 64");
  TrainConfig cfg = config(src, "a");
  std::vector<json> rows = runToEnd(cfg);
  ASSERT_EQ(rows.size(), 6u);
  std::ifstream in(cfg.out / "samples.jsonl");
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    json x = json::parse(line);
    std::string problem = x["problem"].get<std::string>();
    std::string question = problem.substr(problem.rfind('/') + 1);
    EXPECT_EQ(x["prompt"],
              "[system] Be exact.\n[user] " + question + "\n[assistant] ")
        << line;
  }
  EXPECT_EQ(n, 18);

  // A template that fails on a prompt stops the run before it starts, at the
  // `chat` field, naming the problem and the template's position.
  std::ofstream(dir_ / "chat" / "tokenizer_config.json")
      << R"({"chat_template": "{{ raise_exception('no system message') if messages[0].role == 'system' }}"})";
  std::string errors = prepareErrors(config(src, "b"));
  EXPECT_NE(errors.find("train.cac:18:8: error: arith/"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("tokenizer_config.json: field 'chat_template': 1:4: "
                        "the template raised an exception: no system message"),
            std::string::npos)
      << errors;
  // Outside the subset: the parse error, at the field too.
  std::ofstream(dir_ / "chat" / "tokenizer_config.json")
      << R"({"chat_template": "{% macro m() %}{% endmacro %}"})";
  errors = prepareErrors(config(src, "c"));
  EXPECT_NE(errors.find("train.cac:18:8: error: "), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("field 'chat_template': 1:4: unsupported statement "
                        "'macro'"),
            std::string::npos)
      << errors;
}

} // namespace
