//===- reliability-test.cpp - Nothing lost, nothing silent ----------------===//
//
// The guarantees of docs/reliability.md on short runs of a very small model:
// a stop signal ends the run after its step with a checkpoint, and --resume
// gives the metrics and weights of an uninterrupted run (in process, and
// through cac-run with real signals, one process and two workers); a
// non-finite advantage or reward stops the run naming the step (or is
// skipped and counted); a full disk (the CAC_TEST_ENOSPC hook) stops the run
// naming the file and keeps the last checkpoint. Needs the stdlib bundles;
// skips without them.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Checkpoint.h"
#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Support/StopSignals.h"
#include "cac/Runtime/Train/MemoryCheck.h"
#include "cac/Runtime/Train/Trainer.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace cac::rt;
using namespace cac::rt::train;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string bundlesDir() { return CAC_TEST_TRAIN_BUNDLES; }

/// A reward program that pays the prompt line's length mod 2 (so that
/// groups differ) and, at its 30th completion, unless `ready` exists in its
/// folder, creates `ready` and waits until `go` exists: a test signals the
/// run while a step is surely in progress, then lets it go on.
const char *kPausingReward =
    "n=0; while read -r l; do n=$((n+1)); "
    "if [ $n -eq 30 ] && [ ! -e ready ]; then touch ready; "
    "while [ ! -e go ]; do sleep 0.01; done; fi; "
    "echo $(( ${#l} % 2 )); done";

class ReliabilityTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (bundlesDir().empty() ||
        !fs::exists(fs::path(bundlesDir()) / "grpo" / "manifest.json"))
      GTEST_SKIP() << "no compiled stdlib bundles";
    dir_ = fs::temp_directory_path() /
           ("cac-reliability-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    setStopSignal(0);
  }
  void TearDown() override {
    setStopSignal(0);
    unsetenv("CAC_TEST_ENOSPC");
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  /// 2 SFT + 3 RL steps of 3 prompts x 4 rollouts of the stdlib bundle
  /// \p method (with \p params, e.g. ", eps = 0"); \p extra adds keys.
  std::string source(const std::string &method = "grpo",
                     const std::string &params = "",
                     const std::string &extra = "", int rlSteps = 3) const {
    std::string est = "bundle(\"" +
                      (fs::path(bundlesDir()) / method).string() + "\"" +
                      params + ")";
    return "train tiny {\n"
           "  model = builtin(\"custom\", hidden = 16, layers = 1, heads = 2, "
           "kv_heads = 1, ffn = 32, max_positions = 32)\n"
           "  task = arith(min_level = 1, max_level = 1)\n"
           "  estimator = " +
           est +
           "\n"
           "  critic = none\n"
           "  rollout = group(n = 4, max_tokens = 4)\n"
           "  prompts = 3\n"
           "  minibatches = 2\n"
           "  warm_start = sft(steps = 2, batch = 4, lr = 1e-2)\n"
           "  steps = " +
           std::to_string(rlSteps) +
           "\n"
           "  eval = greedy(every = 2, size = 6)\n"
           "  threads = 1\n"
           "  seed = 3\n" +
           extra + "}\n";
  }

  /// \p src written to dir_/SUB/train.cac, with output SUB/out.
  TrainConfig config(const std::string &src, const std::string &sub) {
    fs::create_directories(dir_ / sub);
    fs::path file = dir_ / sub / "train.cac";
    std::ofstream(file) << src;
    std::string errors;
    auto cfg = loadTrainFile(file, errors);
    EXPECT_TRUE(cfg) << errors;
    cfg->out = dir_ / sub / "out";
    return *cfg;
  }

  /// The error Trainer::prepare throws for training file \p src (written in
  /// sub-folder "a"); empty when it prepares.
  std::string prepareError(const std::string &src) {
    TrainConfig cfg = config(src, "a");
    Trainer t(cfg, quiet());
    DiagnosticEngine diag(cfg.file.string(), "");
    try {
      t.prepare(diag);
    } catch (const std::exception &x) {
      return x.what();
    }
    return "";
  }

  static TrainerOptions quiet(TrainerOptions o = {}) {
    o.progress = false;
    o.verbose = false;
    return o;
  }

  /// Runs \p cfg; returns the error of the run (empty if none).
  static std::string runError(const TrainConfig &cfg, TrainerOptions o = {}) {
    Trainer t(cfg, quiet(o));
    DiagnosticEngine diag(cfg.file.string(), "");
    if (!t.prepare(diag))
      return "prepare: " + diag.render();
    try {
      t.run();
    } catch (const std::exception &e) {
      return e.what();
    }
    return "";
  }

  static std::vector<json> rows(const fs::path &out) {
    std::vector<json> r;
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty())
        r.push_back(json::parse(line));
    for (auto &row : r)
      for (const char *k :
           {"tokens_per_s", "time_gen_s", "time_score_s", "time_estimator_s",
            "time_update_s", "time_eval_s", "time_step_s", "elapsed_s"})
        row.erase(k);
    return r;
  }

  static std::string readAll(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// Every weight of \p folder's model is finite.
  static bool finiteWeights(const fs::path &folder) {
    LoadOptions lo;
    lo.valueHead = ValueHeadMode::Auto;
    TransformerLM m = loadPretrained(folder, lo);
    for (const auto &p : m->named_parameters())
      if (!at::isfinite(p.value()).all().item<bool>())
        return false;
    return true;
  }

  /// Runs the shell command \p cmd; its exit status, stderr in \p err.
  int shell(const std::string &cmd, std::string *err = nullptr) {
    fs::path errFile = dir_ / "stderr.txt";
    int rc = std::system(("(" + cmd + ") 2> " + errFile.string()).c_str());
    std::string text = readAll(errFile);
    if (err)
      *err = text;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  /// Starts cac-run on dir_/SUB/train.cac (\p args added) in the background,
  /// waits until its reward program paused in a step (`ready`), sends
  /// \p signals (shell `kill` arguments, in order) to it, lets the program
  /// go on, and returns cac-run's exit status (its stderr in \p err).
  int signalMidStep(const std::string &sub, const std::string &args,
                    const std::vector<std::string> &signals,
                    std::string *err) {
    fs::path d = dir_ / sub;
    std::string cmd = std::string(CAC_TEST_CAC_RUN) + " " +
                      (d / "train.cac").string() + " --no-progress --out " +
                      (d / "out").string() + " " + args + " & p=$!; " +
                      "while kill -0 $p 2>/dev/null && [ ! -e " +
                      (d / "ready").string() + " ]; do sleep 0.02; done; ";
    for (const std::string &s : signals)
      cmd += "kill " + s + " $p; ";
    cmd += "touch " + (d / "go").string() + "; wait $p";
    return shell(cmd, err);
  }

  fs::path dir_;
};

//===----------------------------------------------------------------------===//
// Graceful stop
//===----------------------------------------------------------------------===//

TEST_F(ReliabilityTest, AStopRequestCheckpointsTheStepAndResumeLosesNone) {
  // No periodic checkpoints: the stop writes its own.
  std::string src = source("grpo", "", "  checkpoint_every = 0\n");
  TrainConfig whole = config(src, "whole");
  ASSERT_EQ(runError(whole), "");
  TrainConfig part = config(src, "part");
  setStopSignal(SIGTERM); // as if the signal came during the first step
  try {
    Trainer t(part, quiet());
    DiagnosticEngine diag(part.file.string(), "");
    ASSERT_TRUE(t.prepare(diag));
    t.run();
    ADD_FAILURE() << "the run did not stop";
  } catch (const TrainStopped &e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_NE(std::string(e.what()).find("stopped by SIGTERM after step 1 of "
                                         "5; the checkpoint in '"),
              std::string::npos)
        << e.what();
  }
  setStopSignal(0);
  EXPECT_EQ(readCheckpointInfo(part.out / "checkpoint").step, 1);
  EXPECT_EQ(rows(part.out).size(), 1u);
  // What a write killed mid-way leaves is removed when the run starts.
  fs::create_directories(part.out / "checkpoint.tmp-Ab3dEf" / "policy");
  std::ofstream(part.out / "checkpoint.tmp-Ab3dEf" / "policy" / "x") << "x";
  TrainerOptions resume;
  resume.resume = true;
  ASSERT_EQ(runError(part, resume), "");
  EXPECT_FALSE(fs::exists(part.out / "checkpoint.tmp-Ab3dEf"));
  EXPECT_EQ(json(rows(part.out)).dump(), json(rows(whole.out)).dump());
  EXPECT_EQ(readAll(part.out / "final" / "model.safetensors"),
            readAll(whole.out / "final" / "model.safetensors"));
}

// cac-run with a real SIGTERM in the middle of an RL step: it finishes the
// step, checkpoints it, exits with 128 + SIGTERM, and --resume ends where an
// uninterrupted run ends.
TEST_F(ReliabilityTest, SigtermMidStepThenResumeEqualsUninterrupted) {
  std::string src =
      source("grpo", "",
             std::string("  reward = command(\"") + kPausingReward + "\")\n",
             6);
  config(src, "whole");
  std::ofstream(dir_ / "whole" / "ready") << ""; // never pauses
  ASSERT_EQ(shell(std::string(CAC_TEST_CAC_RUN) + " " +
                  (dir_ / "whole" / "train.cac").string() +
                  " --no-progress --out " + (dir_ / "whole" / "out").string()),
            0);
  config(src, "part");
  std::string err;
  int rc = signalMidStep("part", "", {"-TERM"}, &err);
  EXPECT_EQ(rc, 128 + SIGTERM) << err;
  EXPECT_NE(err.find("cac-run: SIGTERM: stopping after the current step"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("stopped by SIGTERM after step "), std::string::npos)
      << err;
  fs::path out = dir_ / "part" / "out";
  int64_t saved = readCheckpointInfo(out / "checkpoint").step;
  auto logged = rows(out);
  ASSERT_FALSE(logged.empty());
  EXPECT_EQ(logged.back()["step"].get<int64_t>(), saved)
      << "every logged step is in the checkpoint";
  EXPECT_GT(saved, 2) << "stopped in an RL step";
  EXPECT_LT(saved, 8) << "stopped before the end";
  ASSERT_EQ(shell(std::string(CAC_TEST_CAC_RUN) + " " +
                      (dir_ / "part" / "train.cac").string() +
                      " --no-progress --resume --out " + out.string(),
                  &err),
            0)
      << err;
  EXPECT_EQ(json(rows(out)).dump(),
            json(rows(dir_ / "whole" / "out")).dump());
  EXPECT_EQ(readAll(out / "final" / "model.safetensors"),
            readAll(dir_ / "whole" / "out" / "final" / "model.safetensors"));
}

// Two workers: the launcher alone gets the signal and forwards it; both
// ranks stop after the same step, and the resumed run equals an
// uninterrupted one of two workers.
TEST_F(ReliabilityTest, TwoWorkersStopAtTheSameStep) {
  std::string src =
      source("grpo", "",
             std::string("  reward = command(\"") + kPausingReward + "\")\n",
             8);
  src.replace(src.find("prompts = 3"), 11, "prompts = 4");
  config(src, "whole");
  std::ofstream(dir_ / "whole" / "ready") << "";
  ASSERT_EQ(shell(std::string(CAC_TEST_CAC_RUN) + " " +
                  (dir_ / "whole" / "train.cac").string() +
                  " --workers 2 --no-progress --out " +
                  (dir_ / "whole" / "out").string()),
            0);
  config(src, "part");
  std::string err;
  int rc = signalMidStep("part", "--workers 2", {"-TERM"}, &err);
  EXPECT_EQ(rc, 128 + SIGTERM) << err;
  EXPECT_EQ(err.find("failed"), std::string::npos) << err;
  fs::path out = dir_ / "part" / "out";
  int64_t saved = readCheckpointInfo(out / "checkpoint").step;
  EXPECT_GT(saved, 2);
  EXPECT_LT(saved, 10);
  ASSERT_EQ(shell(std::string(CAC_TEST_CAC_RUN) + " " +
                      (dir_ / "part" / "train.cac").string() +
                      " --workers 2 --no-progress --resume --out " +
                      out.string(),
                  &err),
            0)
      << err;
  EXPECT_EQ(json(rows(out)).dump(),
            json(rows(dir_ / "whole" / "out")).dump());
}

// A second signal does not wait for the step: the process dies of it, and
// the checkpoint is the last one written before.
TEST_F(ReliabilityTest, ASecondSignalStopsAtOnce) {
  std::string src =
      source("grpo", "",
             std::string("  reward = command(\"") + kPausingReward +
                 "\")\n  checkpoint_every = 1\n",
             6);
  config(src, "part");
  std::string err;
  // The reward program stays paused until both signals are sent, so the
  // step cannot end between them. (Not SIGINT: a shell starts background
  // commands with SIGINT ignored, and cac-run keeps an ignored signal so.)
  int rc = signalMidStep("part", "", {"-TERM", "-HUP"}, &err);
  EXPECT_EQ(rc, 128 + SIGHUP) << err;
  EXPECT_NE(err.find("cac-run: SIGHUP: a second stop signal, stopping at once"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("stopped by"), std::string::npos) << err;
  fs::path out = dir_ / "part" / "out";
  int64_t saved = readCheckpointInfo(out / "checkpoint").step;
  EXPECT_EQ(rows(out).back()["step"].get<int64_t>(), saved)
      << "the step in progress was neither logged nor checkpointed";
}

//===----------------------------------------------------------------------===//
// Non-finite values
//===----------------------------------------------------------------------===//

// MaxRL without its epsilon divides by the group's mean reward: 0 / 0 for a
// group whose rewards are all 0.
TEST_F(ReliabilityTest, ANonFiniteAdvantageStopsTheRunNamingTheStep) {
  std::string src = source("maxrl", ", eps = 0");
  TrainConfig cfg = config(src, "a");
  std::string e = runError(cfg);
  EXPECT_NE(e.find("step 3 (RL step 1): the advantage (NaN) is not finite"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("maxrl with eps = 0"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(cfg.out / "final"));
  // With --skip-nonfinite the updates are skipped and counted; the run ends
  // with finite weights.
  TrainConfig skip = config(src, "skip");
  TrainerOptions o;
  o.skipNonFinite = true;
  ASSERT_EQ(runError(skip, o), "");
  int64_t skipped = 0;
  for (const json &row : rows(skip.out))
    if (row["phase"] == "rl")
      skipped += row.at("nonfinite_skips").get<int64_t>();
  EXPECT_GE(skipped, 1);
  EXPECT_TRUE(finiteWeights(skip.out / "final"));
  std::string csv = readAll(skip.out / "metrics.csv");
  EXPECT_NE(csv.find(",nonfinite_skips\n"), std::string::npos);
}

// A reward program's 1e308 is a finite double but not a finite float.
TEST_F(ReliabilityTest, AHugeRewardStopsTheRunNamingIt) {
  std::string src = source(
      "grpo", "",
      "  reward = command(\"while read -r l; do echo 1e308; done\")\n");
  std::string e = runError(config(src, "a"));
  EXPECT_NE(e.find("step 3 (RL step 1): the reward 1e+308 of rollout 1 (as "
                   "a 32-bit float) is not finite"),
            std::string::npos)
      << e;
}

// A model folder whose weights hold a NaN is refused before the run.
TEST_F(ReliabilityTest, NanWeightsInAModelFolderAreRefused) {
  TrainConfig first = config(source(), "first");
  ASSERT_EQ(runError(first), "");
  LoadOptions lo;
  TransformerLM m = loadPretrained(first.out / "final", lo);
  {
    torch::NoGradGuard ng;
    m->named_parameters().begin()->value().view(-1)[0] = NAN;
  }
  savePretrained(*m, dir_ / "poisoned");
  std::string src = source("gae");
  src.replace(src.find("critic = none"), 13,
              "critic = value_model(hf(\"" + (dir_ / "poisoned").string() +
                  "\"), lr = 1e-3)");
  std::string e = runError(config(src, "b"));
  EXPECT_NE(e.find("the weights of '" + (dir_ / "poisoned").string() +
                   "' are not finite: " +
                   m->named_parameters().begin()->key() + " (NaN)"),
            std::string::npos)
      << e;
}

// A dataset prompt longer than the model's positions is refused before the
// run, naming the problem's line, not when it is first sampled.
// Found by test/fuzz (cac-fuzz-runargs): a path with a name longer than
// the system allows made cac-run's check of --compiler throw, and cac-run
// died of the uncaught exception.
TEST_F(ReliabilityTest, AnUnexaminableCompilerPathIsAUsageError) {
  std::string err;
  std::string path = "/" + std::string(300, 'v');
  EXPECT_EQ(shell(std::string(CAC_TEST_CAC_RUN) + " train.cac --compiler " +
                      path,
                  &err),
            2);
  EXPECT_NE(err.find("--compiler: '" + path + "' is not an executable"),
            std::string::npos)
      << err;
}

TEST_F(ReliabilityTest, APromptLongerThanThePositionsIsRefusedUpFront) {
  fs::create_directories(dir_ / "a");
  std::ofstream(dir_ / "a" / "train.jsonl")
      << R"({"prompt": "ab=", "answer": "ba", "solution": "ba"})" "\n"
      << R"({"prompt": ")" << std::string(40, 'x')
      << R"(=", "answer": "x", "solution": "x"})" "\n";
  std::ofstream(dir_ / "a" / "eval.jsonl")
      << R"({"prompt": "pq=", "answer": "qp"})" "\n";
  std::string src = source();
  src.replace(src.find("arith(min_level = 1, max_level = 1)"), 35,
              "jsonl(\"train.jsonl\", eval = \"eval.jsonl\")");
  std::string e = runError(config(src, "a"));
  EXPECT_NE(e.find((dir_ / "a" / "train.jsonl").string() +
                   ":2: the prompt has "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("tokens, but the model holds 32 positions"),
            std::string::npos)
      << e;
}

//===----------------------------------------------------------------------===//
// Full disk
//===----------------------------------------------------------------------===//

// The disk fills up while the second checkpoint is written: the run stops
// naming the file, the first checkpoint is intact, no temporary folder is
// left, and --resume (with space again) ends as an uninterrupted run.
TEST_F(ReliabilityTest, AFullDiskDuringACheckpointKeepsTheLastOne) {
  std::string src = source("grpo", "", "  checkpoint_every = 1\n");
  TrainConfig whole = config(src, "whole");
  ASSERT_EQ(runError(whole), "");
  // The bytes of the first checkpoint (step 1) in a run of its own.
  TrainConfig probe = config(src, "probe");
  TrainerOptions one;
  one.stopAfterSteps = 2; // checkpointed after step 1 only
  ASSERT_EQ(runError(probe, one), "");
  uint64_t bytes = 0;
  for (const auto &e :
       fs::recursive_directory_iterator(probe.out / "checkpoint"))
    if (e.is_regular_file())
      bytes += e.file_size();
  TrainConfig part = config(src, "part");
  setenv("CAC_TEST_ENOSPC",
         ("checkpoint.tmp-:" + std::to_string(bytes + 200)).c_str(), 1);
  std::string e = runError(part);
  EXPECT_NE(e.find("cannot write '" + (part.out).string() +
                   "/checkpoint.tmp-"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  unsetenv("CAC_TEST_ENOSPC");
  EXPECT_EQ(readCheckpointInfo(part.out / "checkpoint").step, 1);
  for (const auto &entry : fs::directory_iterator(part.out))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"),
              std::string::npos)
        << entry.path();
  TrainerOptions resume;
  resume.resume = true;
  ASSERT_EQ(runError(part, resume), "");
  EXPECT_EQ(json(rows(part.out)).dump(), json(rows(whole.out)).dump());
}

TEST_F(ReliabilityTest, AFullDiskOnTheMetricsNamesTheFile) {
  TrainConfig cfg = config(source(), "a");
  setenv("CAC_TEST_ENOSPC", "metrics.jsonl:1", 1);
  std::string e = runError(cfg);
  EXPECT_NE(e.find("cannot write '" + (cfg.out / "metrics.jsonl").string() +
                   "': No space left on device"),
            std::string::npos)
      << e;
}

} // namespace

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TEST(RolloutMemory, TheEstimateCountsTheKvCacheAndTheLogits) {
  ModelConfig c = ModelConfig::builtinSmall(40); // 4 layers, 2 KV heads of 32
  RolloutMemory m = estimateRolloutMemory(c, 4, 10, 100);
  EXPECT_EQ(m.kvCache, 10.0 * 100 * (2 * 4 * 2 * 32) * 4);
  EXPECT_EQ(m.logits, 3.0 * 4 * 10 * 40);
  EXPECT_EQ(m.total(), m.kvCache + m.logits);
}

TEST(TrainingMemory, TheEstimateCountsGradientsMomentsAndTheReference) {
  TrainingMemory m = estimateTrainingMemory(1000, 4, true);
  EXPECT_EQ(m.gradients, 4000.0);
  EXPECT_EQ(m.moments, 8000.0);
  EXPECT_EQ(m.reference, 4000.0);
  EXPECT_EQ(m.total(), 16000.0);
  EXPECT_EQ(estimateTrainingMemory(1000, 2, false).total(), 6000.0);
}

TEST(TrainingMemory, TheHostSaysWhatIsAvailable) {
  double host = availableMemory(c10::Device(c10::kCPU));
  double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                    static_cast<double>(::sysconf(_SC_PAGESIZE));
  EXPECT_GT(host, 0);
  EXPECT_LE(host, physical);
  EXPECT_EQ(formatGiB(1.5 * (1 << 30)), "1.5 GiB");
}

// A policy whose float32 weights take about 40% of this machine's memory:
// they would fit (the config's own check passes), its gradients and AdamW's
// moments with them would not. Refused before a weight is allocated (the
// test would otherwise take 40% of the memory), with the numbers.
TEST_F(ReliabilityTest, AModelThatCannotTrainIsRefusedBeforeAllocating) {
  double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                    static_cast<double>(::sysconf(_SC_PAGESIZE));
  // hidden 1024, 8 heads of 128 (q, k, v, o: 4 x 1024^2), ffn 4096
  // (3 x 1024 x 4096) and two norms per layer.
  double perLayer = 4.0 * 1024 * 1024 + 3.0 * 1024 * 4096 + 2 * 1024;
  int64_t layers = static_cast<int64_t>(0.4 * physical / 4 / perLayer) + 1;
  std::string src = source();
  src.replace(src.find("hidden = 16, layers = 1, heads = 2, kv_heads = 1, "
                       "ffn = 32"),
              58,
              "hidden = 1024, layers = " + std::to_string(layers) +
                  ", heads = 8, kv_heads = 8, ffn = 4096");
  std::string e = prepareError(src);
  EXPECT_NE(e.find("training needs at least about "), std::string::npos) << e;
  EXPECT_NE(e.find(" on cpu (the policy's "), std::string::npos) << e;
  EXPECT_NE(e.find(" float32 parameters (" + std::to_string(layers) +
                   " layers): weights "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(", gradients "), std::string::npos) << e;
  EXPECT_NE(e.find(", AdamW's moments "), std::string::npos) << e;
  EXPECT_NE(e.find(" available; use a smaller model (fewer layers) or a "
                   "device with more memory"),
            std::string::npos)
      << e;
}

// A model of a few thousand weights whose update cannot fit: one minibatch
// of long sequences, whose attention probabilities (rows x heads x
// tokens^2) alone take twice this machine's memory. Refused before a model
// is allocated, naming the minibatch and the sequence length, the need and
// what is available.
TEST_F(ReliabilityTest, AMinibatchWhoseActivationsCannotFitIsRefused) {
  double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                    static_cast<double>(::sysconf(_SC_PAGESIZE));
  // A sequence of about 4100 tokens through one layer of 2 heads holds
  // 4 bytes x 2 x 4100^2 of probabilities, and more besides.
  double perSequence = 4.0 * 2 * 4100 * 4100;
  int64_t prompts = static_cast<int64_t>(2 * physical / perSequence / 4) + 1;
  std::string src = source();
  src.replace(src.find("max_positions = 32"), 18, "max_positions = 8192");
  src.replace(src.find("max_tokens = 4"), 14, "max_tokens = 4096");
  src.replace(src.find("prompts = 3"), 11,
              "prompts = " + std::to_string(prompts));
  src.replace(src.find("minibatches = 2"), 15, "minibatches = 1");
  std::string e = prepareError(src);
  EXPECT_NE(e.find("training needs at least about "), std::string::npos) << e;
  EXPECT_NE(e.find("; the update's activations for a minibatch of " +
                   std::to_string(prompts * 4) + " sequences of "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(" prompt + 4096 new): "), std::string::npos) << e;
  EXPECT_NE(e.find("), more than the "), std::string::npos) << e;
  EXPECT_NE(e.find(" available; use fewer sequences per minibatch (prompts " +
                   std::to_string(prompts) +
                   " x 4 rollouts / minibatches 1) or fewer new tokens "
                   "(max_tokens)"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(dir_ / "a" / "out" / "metrics.jsonl"));
}

// A batch that cannot fit is refused at the first prompt with
// the estimate and the fields to lower, before anything is generated (and
// before the other prompts are built).
TEST_F(ReliabilityTest, ABatchThatCannotFitIsRefusedBeforeGenerating) {
  // 1M prompts (the field's limit) x 4 rollouts of a model whose KV cache
  // takes 128 KiB a token: about 4.5 TiB.
  std::string src = source();
  src.replace(src.find("prompts = 3"), 11, "prompts = 1000000");
  // Minibatches of 4 sequences: the update's activations fit, the rollouts
  // do not.
  src.replace(src.find("minibatches = 2"), 15, "minibatches = 1000000");
  src.replace(src.find("hidden = 16, layers = 1, heads = 2, kv_heads = 1"), 48,
              "hidden = 512, layers = 32, heads = 8, kv_heads = 8");
  std::string e = runError(config(src, "a"));
  EXPECT_NE(e.find("RL step 1: the rollouts need at least about "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("(4000000 rows = 1000000 prompts x 4, "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("of memory available; lower prompts, the rollouts per "
                   "prompt or max_tokens"),
            std::string::npos)
      << e;
  // The SFT warm start ran; no RL step did.
  for (const auto &row : rows(dir_ / "a" / "out"))
    EXPECT_NE(row["phase"], "rl") << row.dump();
}
