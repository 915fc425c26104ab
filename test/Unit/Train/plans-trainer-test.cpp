//===- plans-trainer-test.cpp - Short runs of every rollout plan ----------===//
//
// Each of SAPO, SPPO (critics), SPO-chain and VinePPO (chain plan), SPO-tree
// (tree plan) and TreeAdv (forest plan) trains two RL steps of a model of a few thousand
// parameters: the run completes, logs finite losses, the critic's loss where
// there is one, and the plan's token accounting (tree plans compute fewer
// tokens than their flattened paths hold). Mismatches between the plan and
// the estimator are diagnosed at the rollout field. Needs the stdlib bundles
// (CMakeLists.txt); skips without them.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/Trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

using namespace cac::rt::train;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string bundlesDir() { return CAC_TEST_TRAIN_BUNDLES; }

class PlansTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (bundlesDir().empty() ||
        !fs::exists(fs::path(bundlesDir()) / "spo_tree" / "manifest.json"))
      GTEST_SKIP() << "no compiled stdlib bundles (build with the compiler "
                      "or set CAC_TEST_STDLIB_BUNDLES)";
    dir_ = fs::temp_directory_path() /
           ("cac-plans-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  std::string source(const std::string &estimator, const std::string &critic,
                     const std::string &rollout,
                     const std::string &task =
                         "arith(min_level = 1, max_level = 1)",
                     const std::string &extra = "") const {
    std::string est = (fs::path(bundlesDir()) / estimator).string();
    return "train tiny {\n"
           "  model = builtin(\"custom\", hidden = 16, layers = 1, heads = 2, "
           "kv_heads = 1, ffn = 32, max_positions = 32)\n"
           "  task = " + task + "\n  estimator = bundle(\"" +
           est + "\")\n  critic = " + critic + "\n  rollout = " + rollout +
           "\n  prompts = 3\n  minibatches = 2\n"
           "  warm_start = sft(steps = 2, batch = 4, lr = 1e-2)\n"
           "  steps = 2\n  eval = greedy(every = 0, size = 4)\n"
           "  threads = 1\n  seed = 3\n" + extra + "}\n";
  }

  /// Parses \p src (written to dir_/OUT.cac) with dir_/OUT as output folder.
  TrainConfig config(const std::string &src, const std::string &out = "out") {
    fs::path file = dir_ / (out + ".cac");
    std::ofstream(file) << src;
    std::string errors;
    auto cfg = loadTrainFile(file, errors);
    EXPECT_TRUE(cfg) << errors;
    cfg->out = dir_ / out;
    return *cfg;
  }

  /// Trains \p cfg; returns its metrics rows without the timings.
  std::vector<json> runToEnd(const TrainConfig &cfg, TrainerOptions opts = {}) {
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_TRUE(t.prepare(diag)) << diag.render();
    t.run();
    std::vector<json> rows = t.metrics();
    for (auto &r : rows)
      for (const char *k :
           {"tokens_per_s", "time_gen_s", "time_score_s", "time_estimator_s",
            "time_update_s", "time_eval_s", "time_step_s", "elapsed_s"})
        r.erase(k);
    return rows;
  }

  std::vector<json> run(const std::string &src) {
    std::vector<json> rl;
    for (const json &r : runToEnd(config(src)))
      if (r["phase"] == "rl")
        rl.push_back(r);
    EXPECT_EQ(rl.size(), 2u);
    for (const json &r : rl)
      EXPECT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
    return rl;
  }

  std::string diagnose(const std::string &src) {
    TrainConfig cfg = config(src);
    TrainerOptions opts;
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_FALSE(t.prepare(diag));
    return diag.render();
  }

  fs::path dir_;
};

} // namespace

TEST_F(PlansTest, SapoTrainsItsCriticAtTheMarkedPositions) {
  for (const json &r :
       run(source("sapo", "value_head(coef = 0.5)",
                  "group(n = 2, max_tokens = 4)")))
    EXPECT_GT(r["value_loss"].get<double>(), 0.0);
}

TEST_F(PlansTest, SppoTrainsAPromptCriticWithBce) {
  for (const json &r : run(source("sppo", "value_head(coef = 0.5)",
                                  "group(n = 1, max_tokens = 4)"))) {
    // BCE of a probability: positive, and near log 2 for a fresh head.
    EXPECT_GT(r["value_loss"].get<double>(), 0.0);
    EXPECT_LT(r["value_loss"].get<double>(), 5.0);
  }
}

TEST_F(PlansTest, ChainEstimatesMonteCarloValues) {
  for (const json &r : run(source("spo_chain", "none",
                                  "chain(n = 2, samples = 2, max_tokens = 4)"))) {
    // >= 1 MC state a rollout, shared where prefixes are identical (the
    // empty prefix of a prompt's 2 rollouts at least).
    EXPECT_GE(r["plan_nodes"].get<int64_t>() + r["mc_shared"].get<int64_t>(),
              6);
    EXPECT_GE(r["mc_shared"].get<int64_t>(), 3);
    EXPECT_GT(r["tokens_computed"].get<int64_t>(), 0);
    EXPECT_LT(r["tokens_computed"].get<int64_t>(),
              r["tokens_flattened"].get<int64_t>());
  }
}

TEST_F(PlansTest, VinePpoEstimatesEveryStepStart) {
  // VinePPO on the chain plan, with the SFT solutions one step a line (level
  // 2 writes `2+12=` and `14` on two lines): every rollout has at least its
  // first step's start, the empty prefix, whose value its prompt's rollouts
  // share.
  for (const json &r :
       run(source("vineppo", "none", "chain(n = 2, samples = 2, max_tokens = 6)",
                  "arith(min_level = 2, max_level = 2, lines = 1)"))) {
    EXPECT_GE(r["plan_nodes"].get<int64_t>() + r["mc_shared"].get<int64_t>(),
              6);
    EXPECT_GE(r["mc_shared"].get<int64_t>(), 3);
    EXPECT_LT(r["tokens_computed"].get<int64_t>(),
              r["tokens_flattened"].get<int64_t>());
  }
}

TEST_F(PlansTest, RewardsComeFromTheCommand) {
  // A program's constant reward is what the step sees: its mean, and no
  // greedy answer counts as correct below 1.
  std::string group = "group(n = 2, max_tokens = 4)";
  for (const json &r :
       run(source("grpo", "none", group, "arith(min_level = 1, max_level = 1)",
                  "  reward = command(\"while read -r l; do echo 0.25; "
                  "done\")\n")))
    EXPECT_EQ(r["reward_mean"].get<double>(), 0.25) << r.dump();
  for (const json &r :
       runToEnd(config(source("grpo", "none", group,
                              "arith(min_level = 1, max_level = 1)",
                              "  reward = command(\"while read -r l; do "
                              "echo 1; done\")\n"),
                       "ones")))
    if (r.contains("eval_acc")) {
      EXPECT_EQ(r["eval_acc"].get<double>(), 1.0) << r.dump();
    }
}

TEST_F(PlansTest, TheExampleScorerReproducesTheTaskReward) {
  // examples/arith/score_arith.py computes the task's reward in Python: the
  // run is the run without it, metric for metric (20 SFT steps, so that
  // some rollouts are right).
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no python3";
  std::string scorer =
      std::string(CAC_TEST_SOURCE_DIR) + "/examples/arith/score_arith.py";
  auto src = [&](const std::string &extra) {
    std::string s =
        source("grpo", "none", "group(n = 4, max_tokens = 6)",
               "arith(min_level = 1, max_level = 1)", extra);
    size_t at = s.find("sft(steps = 2");
    return s.replace(at, 13, "sft(steps = 20");
  };
  std::vector<json> task = runToEnd(config(src(""), "task"));
  std::vector<json> cmd = runToEnd(config(
      src("  reward = command(\"python3 '" + scorer + "'\")\n"), "cmd"));
  EXPECT_EQ(task, cmd);
  double rewards = 0;
  for (const json &r : cmd)
    if (r["phase"] == "rl")
      rewards += r["reward_mean"].get<double>();
  EXPECT_GT(rewards, 0.0) << "no rollout was right: nothing compared";
}

TEST_F(PlansTest, AFailingRewardCommandStopsTheRunWithItsError) {
  TrainConfig cfg = config(source(
      "grpo", "none", "group(n = 2, max_tokens = 4)",
      "arith(min_level = 1, max_level = 1)",
      "  reward = command(\"read -r l; echo right\")\n"));
  TrainerOptions opts;
  opts.progress = false;
  opts.verbose = false;
  Trainer t(cfg, opts);
  DiagnosticEngine diag(cfg.file.string(), "");
  ASSERT_TRUE(t.prepare(diag)) << diag.render();
  try {
    t.run();
    ADD_FAILURE() << "the run ended";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "reward command 'read -r l; echo right': answered 'right' "
                  "to completion 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(PlansTest, JsonlDatasetsTrainWithTheirOwnRewards) {
  // Prompts, answers and SFT solutions from files beside the training file;
  // the default reward compares the completion with the answer, a program's
  // replaces it.
  std::ofstream(dir_ / "train.jsonl")
      << R"({"prompt": "ab=", "answer": "ba", "solution": "ba"})" "\n"
      << R"({"prompt": "abc=", "answer": "cba", "solution": "cba"})" "\n"
      << R"({"prompt": "xy=", "answer": "yx", "solution": "yx"})" "\n";
  std::ofstream(dir_ / "eval.jsonl")
      << R"({"prompt": "pq=", "answer": "qp"})" "\n"
      << R"({"prompt": "3+4=", "answer": 7})" "\n";
  std::string task = "jsonl(\"train.jsonl\", eval = \"eval.jsonl\")";
  std::string group = "group(n = 2, max_tokens = 4)";
  run(source("grpo", "none", group, task)); // 2 RL steps, finite losses
  for (const json &r :
       runToEnd(config(source("grpo", "none", group, task,
                              "  reward = command(\"while read -r l; do "
                              "echo 0.5; done\")\n"),
                       "command")))
    if (r["phase"] == "rl") {
      EXPECT_EQ(r["reward_mean"].get<double>(), 0.5);
    }

  // What a run reads must be there: answers for the task's reward, solutions
  // for an SFT warm start.
  std::ofstream(dir_ / "eval.jsonl")
      << R"({"prompt": "pq=", "answer": "qp"})" "\n"
      << R"({"prompt": "rs="})" "\n";
  int checks = 0;
  auto prepareError = [&](const std::string &extra) {
    TrainConfig cfg = config(source("grpo", "none", group, task, extra),
                             "check" + std::to_string(++checks));
    TrainerOptions opts;
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    try {
      t.prepare(diag);
    } catch (const std::exception &e) {
      return std::string(e.what());
    }
    return diag.render();
  };
  std::string e = prepareError("");
  EXPECT_NE(e.find("eval.jsonl:2: no 'answer' field: the task's reward "
                   "compares completions with it"),
            std::string::npos)
      << e;
  // With a reward program the answers are optional.
  EXPECT_EQ(prepareError("  reward = command(\"cat\")\n"), "");
  std::ofstream(dir_ / "train.jsonl")
      << R"({"prompt": "ab=", "answer": "ba"})" "\n";
  e = prepareError("  reward = command(\"cat\")\n");
  EXPECT_NE(e.find("train.jsonl:1: no 'solution' field: the SFT warm start "
                   "trains on it"),
            std::string::npos)
      << e;
}

TEST_F(PlansTest, TreeTrainsNodeSamples) {
  for (const json &r :
       run(source("spo_tree", "none",
                  "tree(branches = \"2-2-2\", seg_len = 1, max_tokens = 4)"))) {
    EXPECT_LT(r["tokens_computed"].get<int64_t>(),
              r["tokens_flattened"].get<int64_t>());
    EXPECT_LT(r["compute_ratio"].get<double>(), 1.0);
    EXPECT_TRUE(r.contains("node_samples"));
  }
}

TEST_F(PlansTest, ForestTrainsFlattenedPaths) {
  for (const json &r :
       run(source("treeadv", "none",
                  "forest(n = 4, trees = 1, tau = 0, max_tokens = 4)"))) {
    EXPECT_EQ(r["plan_leaves"].get<int64_t>(), 12);
    EXPECT_LT(r["sample_ratio"].get<double>(), 1.0);
  }
}

TEST_F(PlansTest, TreeReplayBufferSpreadsNodesOverStepsAndResumes) {
  // 4 prompts of up to 8 leaves after 40 SFT steps (so that some paths earn
  // a reward and nodes have A != 0); a node waits up to 3 steps and a
  // question gives at most 2 a step. The buffer is part of the checkpoint: a run killed
  // with nodes in its buffer and resumed equals an uninterrupted one.
  std::string est = (fs::path(bundlesDir()) / "spo_tree").string();
  std::string src =
      "train tiny {\n"
      "  model = builtin(\"custom\", hidden = 16, layers = 1, heads = 2, "
      "kv_heads = 1, ffn = 32, max_positions = 32)\n"
      "  task = arith(min_level = 1, max_level = 1)\n"
      "  estimator = bundle(\"" +
      est +
      "\")\n  critic = none\n"
      "  rollout = tree(branches = \"2-2-2\", seg_len = 1, max_tokens = 4, "
      "replay_steps = 3, replay_take = 2)\n"
      "  prompts = 4\n  minibatches = 2\n"
      "  warm_start = sft(steps = 40, batch = 8, lr = 1e-2)\n"
      "  steps = 5\n  eval = greedy(every = 0, size = 4)\n"
      "  checkpoint_every = 1\n  threads = 1\n  seed = 5\n}\n";
  std::vector<json> whole = runToEnd(config(src, "whole"));
  int64_t waited = 0;
  double oldest = 0;
  for (const json &r : whole) {
    if (r["phase"] != "rl")
      continue;
    ASSERT_TRUE(r.contains("replay_size")) << r.dump();
    // At most 2 per question, and questions of up to 3 steps.
    EXPECT_LE(r["node_samples"].get<int64_t>(),
              2 * r["replay_questions"].get<int64_t>());
    EXPECT_LE(r["replay_questions"].get<int64_t>(), 3 * 4);
    waited += r["replay_size"].get<int64_t>();
    oldest = std::max(oldest, r["replay_age_mean"].get<double>());
  }
  EXPECT_GT(waited, 0);   // nodes waited in the buffer
  EXPECT_GT(oldest, 0.0); // and were trained in a later step
  // Killed after RL step 4, when nodes wait in the buffer for step 5.
  ASSERT_EQ(whole[44]["rl_step"], 4);
  ASSERT_GT(whole[44]["replay_size"].get<int64_t>(), 0);
  TrainerOptions kill;
  kill.stopAfterSteps = 44; // 40 SFT + 4 RL steps
  runToEnd(config(src, "part"), kill);
  TrainerOptions resume;
  resume.resume = true;
  std::vector<json> resumed = runToEnd(config(src, "part"), resume);
  EXPECT_EQ(json(resumed).dump(), json(whole).dump());
}

TEST_F(PlansTest, PlanEstimatorMismatchesAreDiagnosed) {
  std::string e = diagnose(
      source("grpo", "none", "chain(n = 2, samples = 2, max_tokens = 4)"));
  EXPECT_NE(e.find(":6:13: error: rollout = chain(...) samples Monte-Carlo"),
            std::string::npos)
      << e;
  e = diagnose(source("spo_chain", "none", "group(n = 2, max_tokens = 4)"));
  EXPECT_NE(e.find("reads the segment input 'mc_value': set rollout = chain"),
            std::string::npos)
      << e;
  e = diagnose(source("spo_tree", "none", "group(n = 2, max_tokens = 4)"));
  EXPECT_NE(e.find("reads the rollout tree: set rollout = tree"),
            std::string::npos)
      << e;
  e = diagnose(source("grpo", "none",
                      "tree(branches = \"2-2\", seg_len = 2, max_tokens = 4)"));
  EXPECT_NE(e.find("builds a rollout tree, which estimator 'grpo' does not"),
            std::string::npos)
      << e;
}

TEST_F(PlansTest, BadBranchFactorsAreDiagnosed) {
  fs::path file = dir_ / "bad.cac";
  std::ofstream(file) << source("spo_tree", "none",
                                "tree(branches = \"2-x\", seg_len = 2)");
  std::string errors;
  EXPECT_FALSE(loadTrainFile(file, errors));
  EXPECT_NE(errors.find("'branches' of 'tree' must be positive integers"),
            std::string::npos)
      << errors;
  std::ofstream(file) << source("treeadv", "none",
                                "forest(n = 5, trees = 2)");
  EXPECT_FALSE(loadTrainFile(file, errors));
  EXPECT_NE(errors.find("must be a multiple of 'trees'"), std::string::npos)
      << errors;
}
