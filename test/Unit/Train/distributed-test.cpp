//===- distributed-test.cpp - Data-parallel cac-run -----------------------===//
//
// `cac-run --workers 2` (two Gloo worker processes) against `--workers 1` on
// the same global batch and seed: the metrics rank 0 logs and the final
// weights must agree within float tolerance. The grad_norm row catches a
// wrong split or normaliser (duplicated rollouts or per-worker means give
// about twice the one-worker gradient, which AdamW alone would hide), and the
// rewards and lengths catch workers generating the wrong rollouts. Also: the
// launcher stops every worker when one fails, and the pieces the trainer
// relies on (shards, the rollout uniforms, gradient sums).
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Model/Safetensors.h"
#include "cac/Runtime/Train/Distributed.h"
#include "cac/Runtime/Train/ReplayBuffer.h"
#include "cac/Runtime/Train/Trainer.h"

#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace cac::rt;
using namespace cac::rt::train;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string bundlesDir() { return CAC_TEST_TRAIN_BUNDLES; }

/// Tolerances of the comparisons: the two runs differ only in how rows are
/// batched (padding, summation order), i.e. float rounding, which AdamW
/// turns into weight differences of up to about 1e-5 here (its update is
/// about lr * sign(g) for tiny g). A wrong split or normaliser changes
/// grad_norm by a factor (about 2) and the weights by about the RL rate.
constexpr double kRelTol = 1e-4, kAbsTol = 1e-5, kWeightTol = 5e-5;

class DistributedTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cac-dist-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  void needBundles() {
    if (bundlesDir().empty() ||
        !fs::exists(fs::path(bundlesDir()) / "grpo" / "manifest.json"))
      GTEST_SKIP() << "no compiled stdlib bundles";
  }

  /// A very small run: 40 SFT steps of 8 (so that some rollouts earn a
  /// reward and the RL gradients are more than rounding noise) and 2 RL
  /// steps of 4 prompts x 4 rollouts.
  /// \p rollout is the plan, \p critic the critic (none, or GAE's value
  /// head, when empty); \p prompts per step, \p rlSteps steps, \p seed.
  fs::path writeFile(const std::string &estimator, const std::string &extra,
                     const std::string &rollout = "group(n = 4, max_tokens = 4)",
                     std::string critic = "", int prompts = 4, int rlSteps = 2,
                     int seed = 5) {
    std::string est = (fs::path(bundlesDir()) / estimator).string();
    if (critic.empty())
      critic = estimator == "gae" ? "value_head(coef = 0.5)" : "none";
    critic = "critic = " + critic + "\n";
    std::string src =
        "train tiny {\n"
        "  model = builtin(\"custom\", hidden = 16, layers = 1, heads = 2, "
        "kv_heads = 1, ffn = 32, max_positions = 32)\n"
        "  task = arith(min_level = 1, max_level = 1)\n"
        "  estimator = bundle(\"" +
        est + "\")\n  " + critic +
        "  rollout = " + rollout + "\n"
        "  prompts = " + std::to_string(prompts) + "\n"
        "  warm_start = sft(steps = 40, batch = 8, lr = 1e-2)\n"
        "  steps = " + std::to_string(rlSteps) + "\n"
        "  eval = greedy(every = 1, size = 6)\n"
        "  threads = 1\n"
        "  seed = " + std::to_string(seed) + "\n" +
        extra + "}\n";
    fs::path file = dir_ / ("train-" + estimator + ".cac");
    std::ofstream(file) << src;
    return file;
  }

  /// Runs cac-run with \p args; returns its exit status, stderr in \p err.
  int cacRun(const std::string &args, std::string *err = nullptr) {
    return shell(std::string(CAC_TEST_CAC_RUN) + " " + args + " --no-progress",
                 err);
  }

  /// Runs the shell command \p cmd; returns its exit status.
  int shell(const std::string &cmdIn, std::string *err = nullptr) {
    fs::path errFile = dir_ / "stderr.txt";
    std::string cmd = "(" + cmdIn + ") 2> " + errFile.string();
    int rc = std::system(cmd.c_str());
    std::string text = readAll(errFile);
    if (err)
      *err = text;
    if (!WIFEXITED(rc))
      return -1;
    if (WEXITSTATUS(rc) != 0)
      std::cerr << cmdIn << ":\n" << text;
    return WEXITSTATUS(rc);
  }

  static std::string readAll(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  static std::vector<json> metrics(const fs::path &out) {
    std::vector<json> rows;
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty())
        rows.push_back(json::parse(line));
    return rows;
  }

  static bool close(double a, double b) {
    return std::fabs(a - b) <= kAbsTol + kRelTol * std::fabs(b);
  }

  /// Rank 0's metrics of \p got equal \p want's (timings aside).
  static void expectSameMetrics(const std::vector<json> &got,
                                const std::vector<json> &want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      for (auto it = want[i].begin(); it != want[i].end(); ++it) {
        const std::string &k = it.key();
        if (k.rfind("time_", 0) == 0 || k == "elapsed_s" || k == "tokens_per_s")
          continue;
        ASSERT_TRUE(got[i].contains(k)) << "row " << i << " lacks " << k;
        if (it->is_number_float())
          EXPECT_TRUE(close(got[i][k].get<double>(), it->get<double>()))
              << "row " << i << " " << k << ": " << got[i][k] << " vs " << *it;
        else
          EXPECT_EQ(got[i][k], *it) << "row " << i << " " << k;
      }
  }

  /// The final weights of \p got equal \p want's; returns the largest
  /// absolute difference.
  static double expectSameWeights(const fs::path &got, const fs::path &want) {
    LoadOptions lo;
    lo.valueHead = ValueHeadMode::Auto;
    TransformerLM a = loadPretrained(got / "final", lo);
    TransformerLM b = loadPretrained(want / "final", lo);
    auto pb = b->named_parameters();
    double worst = 0;
    size_t n = 0;
    for (auto &p : a->named_parameters()) {
      at::Tensor x = p.value(), y = pb[p.key()];
      double diff = (x - y).abs().max().item<double>();
      worst = std::max(worst, diff);
      EXPECT_TRUE(at::allclose(x, y, kRelTol, kWeightTol))
          << p.key() << ": max |diff| " << diff;
      ++n;
    }
    EXPECT_EQ(n, pb.size());
    return worst;
  }

  /// The final weights of \p got are bit-identical to \p want's.
  static void expectIdenticalWeights(const fs::path &got,
                                     const fs::path &want) {
    LoadOptions lo;
    TransformerLM a = loadPretrained(got / "final", lo);
    TransformerLM b = loadPretrained(want / "final", lo);
    auto pb = b->named_parameters();
    for (auto &p : a->named_parameters())
      EXPECT_TRUE(at::equal(p.value(), pb[p.key()])) << p.key();
  }

  /// One worker and two, same file (of \p rlSteps RL steps); compares what
  /// rank 0 wrote.
  void compareOneAndTwo(const fs::path &file, size_t rlSteps = 2) {
    fs::path one = dir_ / "one", two = dir_ / "two";
    ASSERT_EQ(cacRun(file.string() + " --workers 1 --out " + one.string()), 0);
    std::string err;
    ASSERT_EQ(
        cacRun(file.string() + " --workers 2 --out " + two.string(), &err), 0);
    // Rank 0 names every rank's device (a collective of all of them).
    EXPECT_NE(err.find("cac-run: 2 workers (gloo on cpu, cpu); "),
              std::string::npos)
        << err;
    auto m1 = metrics(one), m2 = metrics(two);
    // 40 SFT rows, the RL-start eval, the RL rows; some reward to learn from.
    ASSERT_EQ(m1.size(), 41 + rlSteps);
    double acc = 0;
    for (size_t i = 41; i < m1.size(); ++i)
      acc += m1[i]["acc"].get<double>();
    EXPECT_GT(acc, 0);
    expectSameMetrics(m2, m1);
    double worst = expectSameWeights(two, one);
    std::printf("max |weight difference|, 1 vs 2 workers: %.3g\n", worst);
    // Only rank 0 wrote: one metrics file, one checkpoint, one final.
    EXPECT_TRUE(fs::exists(two / "checkpoint"));
    EXPECT_TRUE(fs::exists(two / "plot.png"));
  }

  fs::path dir_;
};

TEST_F(DistributedTest, TwoGlooWorkersMatchOneGrpo) {
  needBundles();
  compareOneAndTwo(writeFile("grpo", "  minibatches = 2\n"
                                     "  kl = k3(coef = 0.01)\n"));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneGaeWhitenedSeqMean) {
  needBundles();
  compareOneAndTwo(writeFile("gae",
                             "  minibatches = 3\n"
                             "  epochs = 2\n"
                             "  whiten = true\n"
                             "  aggregation = \"seq-mean-token-mean\"\n"));
}

// The other plans and the masked losses. Each worker samples whole trees,
// chains and forests of its prompts, so the estimator's groups and trees stay
// local; what crosses workers is the normalisers.

TEST_F(DistributedTest, TwoGlooWorkersMatchOneSpoTreeMaskedAndWhitened) {
  // The tree plan's node samples (their global count differs from the
  // prompts'), a token mean over the nonzero `weight` and whitening over it.
  needBundles();
  compareOneAndTwo(writeFile(
      "spo_tree", "  minibatches = 2\n  whiten = true\n",
      "tree(branches = \"2-2-2\", seg_len = 1, max_tokens = 4)"));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneSpoTreeMaskedSeqMean) {
  // seq-mean-token-mean over the nonzero `weight`: B counts the world's
  // samples with a positive weight sum (aggregateMasked), so each worker's
  // share is its such samples over the world's.
  needBundles();
  compareOneAndTwo(writeFile(
      "spo_tree", "  minibatches = 2\n  aggregation = \"seq-mean-token-mean\"\n",
      "tree(branches = \"2-2-2\", seg_len = 1, max_tokens = 4)"));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneSpoTreeReplay) {
  // The replay buffer: each worker holds its prompts' node samples; what a
  // step takes and trains must be what one process takes, in the same order.
  // 8 prompts, 3 steps, seed 7: RL step 2 trains a node of step 2 from
  // prompt 1 and one of step 1 from prompt 5 (replay_age_mean 0.5), held by
  // different workers, so the order of the global batch (slot, then step)
  // matters: its minibatches of one node each update in that order.
  needBundles();
  fs::path file = writeFile("spo_tree", "  minibatches = 4\n",
                            "tree(branches = \"2-2-2\", seg_len = 1, "
                            "max_tokens = 4, replay_steps = 2, replay_take = 1)",
                            "", /*prompts=*/8, /*rlSteps=*/3, /*seed=*/7);
  compareOneAndTwo(file, 3);
  auto m = metrics(dir_ / "one");
  EXPECT_GT(m[42]["replay_age_mean"].get<double>(), 0.0);
  EXPECT_LT(m[42]["replay_age_mean"].get<double>(), 1.0);
}

TEST_F(DistributedTest, TwoGlooWorkersResumeTheReplayBuffer) {
  // Rank 0's checkpoint holds both workers' buffers (gathered); on resume
  // each worker takes back its prompts' entries.
  needBundles();
  fs::path file = writeFile(
      "spo_tree", "  minibatches = 2\n  checkpoint_every = 1\n",
      "tree(branches = \"2-2-2\", seg_len = 1, max_tokens = 4, "
      "replay_steps = 2, replay_take = 1)");
  fs::path full = dir_ / "full", cut = dir_ / "cut";
  ASSERT_EQ(cacRun(file.string() + " --workers 2 --out " + full.string()), 0);
  ASSERT_EQ(
      cacRun(file.string() + " --workers 2 --steps 1 --out " + cut.string()),
      0);
  // Entries of both workers' prompts wait in the checkpoint (its
  // tensors.safetensors, packed).
  SafetensorsReader ck(cut / "checkpoint" / "tensors.safetensors");
  at::Tensor packed = ck.readRaw("replay").contiguous();
  std::vector<ReplayEntry> waiting = ReplayBuffer::unpack(std::vector<double>(
      packed.data_ptr<double>(), packed.data_ptr<double>() + packed.numel()));
  std::set<int64_t> slots;
  for (const ReplayEntry &e : waiting)
    slots.insert(e.slot);
  EXPECT_TRUE(slots.count(0) || slots.count(1)) << waiting.size();
  EXPECT_TRUE(slots.count(2) || slots.count(3)) << waiting.size();
  ASSERT_EQ(
      cacRun(file.string() + " --workers 2 --resume --out " + cut.string()), 0);
  expectSameMetrics(metrics(cut), metrics(full));
  expectIdenticalWeights(cut, full);
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneTreeadvForest) {
  needBundles();
  compareOneAndTwo(writeFile(
      "treeadv",
      "  minibatches = 2\n  aggregation = \"seq-mean-token-sum-norm\"\n",
      "forest(n = 4, trees = 2, children = 2, tau = 0.2, max_tokens = 4)"));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneSpoChainCompiledObjective) {
  // Chain rollouts with their Monte-Carlo continuations, and a compiled
  // objective whose token mean is over its own mask (spo_loss: p <
  // threshold), counted by its kernels: the workers sum their counts.
  needBundles();
  std::string obj =
      (fs::path(CAC_TEST_SOURCE_DIR) / "stdlib" / "spo_loss.cac").string();
  compareOneAndTwo(writeFile("spo_chain",
                             "  minibatches = 2\n  whiten = true\n"
                             "  objective = \"" +
                                 obj + "\"\n",
                             "chain(n = 2, samples = 2, max_tokens = 4)"));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneGspoWholeGroups) {
  // GSPO's sequence objective computes GRPO's advantage over the groups of
  // its minibatch, so minibatches are whole groups (each on the worker that
  // sampled it): the same groups, shuffled alike, with 1 worker and with 2.
  needBundles();
  std::string obj =
      (fs::path(CAC_TEST_SOURCE_DIR) / "stdlib" / "gspo.cac").string();
  compareOneAndTwo(writeFile("grpo",
                             "  minibatches = 3\n  epochs = 2\n"
                             "  objective = cac(\"" +
                                 obj + "\", eps_low = 0.2, eps_high = 0.2)\n",
                             "group(n = 4, max_tokens = 4)", "", 6));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneSapoBoundaryCritic) {
  // The value loss is a token mean over `value_weight`'s positions.
  needBundles();
  compareOneAndTwo(
      writeFile("sapo",
                "  minibatches = 2\n  aggregation = \"seq-mean-token-mean\"\n",
                "group(n = 4, max_tokens = 4)", "value_head(coef = 0.5)"));
}

TEST_F(DistributedTest, TwoGlooWorkersMatchOneSppoPromptCritic) {
  // The prompt critic's BCE is a mean over sequences.
  needBundles();
  compareOneAndTwo(writeFile("sppo", "  minibatches = 2\n",
                             "group(n = 2, max_tokens = 4)",
                             "value_head(coef = 0.5)"));
}

TEST_F(DistributedTest, ResumeWithWorkersEqualsUninterrupted) {
  needBundles();
  fs::path file = writeFile("grpo", "  minibatches = 2\n"
                                    "  checkpoint_every = 1\n");
  fs::path full = dir_ / "full", cut = dir_ / "cut";
  ASSERT_EQ(cacRun(file.string() + " --workers 2 --out " + full.string()), 0);
  ASSERT_EQ(
      cacRun(file.string() + " --workers 2 --steps 1 --out " + cut.string()),
      0);
  ASSERT_EQ(
      cacRun(file.string() + " --workers 2 --resume --out " + cut.string()), 0);
  expectIdenticalWeights(cut, full);
}

TEST_F(DistributedTest, GpusWithoutNcclIsAClearError) {
  if (haveNccl())
    GTEST_SKIP() << "this build has NCCL";
  std::string err;
  EXPECT_EQ(cacRun("whatever.cac --gpus 1", &err), 2);
  EXPECT_NE(err.find("--gpus: this cac-run was built against a LibTorch "
                     "without NCCL"),
            std::string::npos)
      << err;
}

TEST_F(DistributedTest, BadDevicesAreUsageErrors) {
  std::string err;
  EXPECT_EQ(cacRun("whatever.cac --device gpu", &err), 2);
  EXPECT_NE(err.find("--device expects cpu, cuda or cuda:N, got 'gpu'"),
            std::string::npos)
      << err;
  EXPECT_EQ(cacRun("whatever.cac --device cpu:1", &err), 2);
  EXPECT_NE(err.find("got 'cpu:1'"), std::string::npos) << err;
  EXPECT_EQ(cacRun("whatever.cac --device", &err), 2);
  EXPECT_NE(err.find("--device needs cpu, cuda or cuda:N"), std::string::npos)
      << err;
  // --device cuda: a clear error where this LibTorch has no GPU; where it
  // has one, an index past the last device.
  int64_t n = torch::cuda::is_available()
                  ? static_cast<int64_t>(torch::cuda::device_count())
                  : 0;
  std::string bad = n == 0 ? "cuda" : "cuda:" + std::to_string(n);
  EXPECT_EQ(cacRun("whatever.cac --device " + bad, &err), 2);
  EXPECT_NE(err.find(n == 0 ? "this LibTorch sees no CUDA device"
                            : "CUDA device"),
            std::string::npos)
      << err;
}

// The devices of data-parallel workers: bad combinations stop cac-run with
// exit status 2 before a worker starts (the launcher checks what its workers
// will).
TEST_F(DistributedTest, BadWorkerDevicesAreUsageErrors) {
  std::string err;
  // An NCCL rank on the CPU.
  EXPECT_EQ(shell("LOCAL_RANK=0 " + std::string(CAC_TEST_CAC_RUN) +
                      " whatever.cac --worker nccl --device cpu",
                  &err),
            2);
  EXPECT_NE(err.find("--worker nccl runs on a GPU; --device cpu is for Gloo "
                     "workers"),
            std::string::npos)
      << err;
  // --gpus chooses the devices itself.
  EXPECT_EQ(cacRun("whatever.cac --gpus 2 --device cuda", &err), 2);
  EXPECT_NE(err.find(haveNccl() ? "--gpus N puts worker r on cuda:r"
                                : "--gpus: this cac-run was built against a "
                                  "LibTorch without NCCL"),
            std::string::npos)
      << err;
  if (torch::cuda::is_available()) {
    // More NCCL ranks than GPUs: NCCL would refuse two ranks on one GPU.
    int64_t n = static_cast<int64_t>(torch::cuda::device_count());
    if (haveNccl()) {
      EXPECT_EQ(cacRun("whatever.cac --gpus " + std::to_string(n + 1), &err),
                2);
      EXPECT_NE(err.find("has no GPU of its own"), std::string::npos) << err;
    }
    return;
  }
  // Gloo workers on a GPU where this LibTorch sees none: the launcher says
  // so, and so does a worker started by another launcher.
  EXPECT_EQ(cacRun("whatever.cac --workers 2 --device cuda", &err), 2);
  EXPECT_NE(err.find("--device cuda: this LibTorch sees no CUDA device"),
            std::string::npos)
      << err;
  EXPECT_EQ(shell("LOCAL_RANK=1 " + std::string(CAC_TEST_CAC_RUN) +
                      " whatever.cac --worker gloo --device cuda",
                  &err),
            2);
  EXPECT_NE(err.find("this LibTorch sees no CUDA device"), std::string::npos)
      << err;
}

TEST_F(DistributedTest, BadLauncherFlagsAreUsageErrors) {
  needBundles();
  fs::path file = writeFile("grpo", "");
  std::string err;
  EXPECT_EQ(cacRun(file.string() + " --workers 0", &err), 2);
  EXPECT_NE(err.find("--workers must be in [1, 1024]"), std::string::npos);
  EXPECT_EQ(cacRun(file.string() + " --workers 2 --nnodes 2", &err), 2);
  EXPECT_NE(err.find("needs --master-addr"), std::string::npos) << err;
  EXPECT_EQ(cacRun(file.string() + " --workers 2 --nnodes 2 --node-rank 2 "
                                   "--master-addr 127.0.0.1",
                   &err),
            2);
  EXPECT_NE(err.find("--node-rank 2 is not below --nnodes 2"),
            std::string::npos)
      << err;
  // More workers than prompts per step.
  EXPECT_EQ(
      cacRun(file.string() + " --workers 5 --out " + (dir_ / "o").string(),
             &err),
      1);
  EXPECT_NE(err.find("5 workers need at least as many prompts per step"),
            std::string::npos)
      << err;
  // --worker without the environment.
  EXPECT_EQ(shell("env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT " +
                      std::string(CAC_TEST_CAC_RUN) + " " + file.string() +
                      " --worker gloo",
                  &err),
            1);
  EXPECT_NE(err.find("--worker needs RANK, WORLD_SIZE, MASTER_ADDR and "
                     "MASTER_PORT in the environment"),
            std::string::npos)
      << err;
}

TEST_F(DistributedTest, TwoNodesOfOneWorkerEqualOneNodeOfTwo) {
  needBundles();
  fs::path file = writeFile("grpo", "  minibatches = 2\n");
  fs::path one = dir_ / "one-node", two = dir_ / "two-nodes";
  ASSERT_EQ(cacRun(file.string() + " --workers 2 --out " + one.string()), 0);
  std::string node = std::string(CAC_TEST_CAC_RUN) + " " + file.string() +
                     " --workers 1 --nnodes 2 --master-addr 127.0.0.1 "
                     "--master-port " +
                     std::to_string(pickFreePort()) + " --out " + two.string() +
                     " --no-progress --node-rank ";
  // Node 1 in the background, node 0 in the foreground; both must succeed.
  ASSERT_EQ(shell(node + "1 & n1=$!; " + node +
                  "0; r0=$?; wait $n1; r1=$?; "
                  "exit $((r0 + r1))"),
            0);
  expectIdenticalWeights(two, one);
}

TEST_F(DistributedTest, LauncherStopsAllWorkersWhenOneFails) {
  // Rank 1 fails at once; rank 0 would sleep for a minute.
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c",
               "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 60"};
  plan.nprocs = 2;
  plan.masterPort = 1;
  auto t0 = std::chrono::steady_clock::now();
  testing::internal::CaptureStderr();
  int rc = launchWorkers(plan);
  std::string err = testing::internal::GetCapturedStderr();
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(rc, 3);
  EXPECT_NE(err.find("worker 1 of 2 failed (exit status 3); stopping the "
                     "other workers"),
            std::string::npos)
      << err;
  EXPECT_LT(s, 30.0); // rank 0 was stopped, not waited for
}

TEST_F(DistributedTest, LauncherSetsTheTorchrunEnvironment) {
  fs::path out = dir_ / "env";
  fs::create_directories(out);
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c",
               "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE "
               "$MASTER_ADDR $MASTER_PORT > " +
                   out.string() + "/$RANK"};
  plan.nprocs = 2;
  plan.nnodes = 2;
  plan.nodeRank = 1;
  plan.masterAddr = "10.0.0.7";
  plan.masterPort = 29511;
  ASSERT_EQ(launchWorkers(plan), 0);
  EXPECT_EQ(readAll(out / "2"), "2 0 4 2 10.0.0.7 29511\n");
  EXPECT_EQ(readAll(out / "3"), "3 1 4 2 10.0.0.7 29511\n");
}

TEST(DistributedPieces, ShardsCoverTheRangeInOrder) {
  for (int64_t n : {0, 1, 5, 64})
    for (int w : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < w; ++r) {
        auto [lo, hi] = shardRange(n, r, w);
        EXPECT_EQ(lo, next);
        EXPECT_LE(hi - lo, n / w + 1);
        EXPECT_GE(hi - lo, n / w);
        next = hi;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(DistributedPieces, RanksTakeTheGpusInTurn) {
  auto gpu = [](int rank, int64_t gpus, bool share) {
    std::optional<c10::Device> d = rankGpu(rank, gpus, share);
    return d ? d->str() : std::string("none");
  };
  // One GPU each where there are enough, whatever the backend.
  for (bool share : {false, true}) {
    EXPECT_EQ(gpu(0, 2, share), "cuda:0");
    EXPECT_EQ(gpu(1, 2, share), "cuda:1");
    EXPECT_EQ(gpu(1, 8, share), "cuda:1");
    EXPECT_EQ(gpu(0, 0, share), "none");
    EXPECT_EQ(gpu(-1, 2, share), "none");
  }
  // Fewer GPUs than ranks: Gloo ranks share them in turn; NCCL ranks past
  // the last GPU have none.
  EXPECT_EQ(gpu(1, 1, true), "cuda:0");
  EXPECT_EQ(gpu(2, 2, true), "cuda:0");
  EXPECT_EQ(gpu(3, 2, true), "cuda:1");
  EXPECT_EQ(gpu(1, 1, false), "none");
  EXPECT_EQ(gpu(2, 2, false), "none");
  // A worker's cpu stays the CPU; its cuda is rankGpu's where there is one.
  c10::Device d(c10::kCPU);
  EXPECT_EQ(checkWorkerDevice("cpu", 3, true, d), "");
  EXPECT_TRUE(d.is_cpu());
  if (torch::cuda::is_available()) {
    int64_t n = static_cast<int64_t>(torch::cuda::device_count());
    EXPECT_EQ(checkWorkerDevice("cuda", 3, true, d), "");
    EXPECT_EQ(d.str(), gpu(3, n, true));
  } else {
    EXPECT_NE(checkWorkerDevice("cuda", 0, true, d)
                  .find("this LibTorch sees no CUDA device"),
              std::string::npos);
  }
}

TEST(DistributedPieces, RolloutUniformsArePositional) {
  std::set<float> seen;
  for (int64_t p = 0; p < 4; ++p)
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t t = 0; t < 16; ++t) {
        float u = rolloutUniform(7, 3, p, s, t);
        EXPECT_GE(u, 0.0f);
        EXPECT_LT(u, 1.0f);
        EXPECT_EQ(u, rolloutUniform(7, 3, p, s, t));
        seen.insert(u);
      }
  EXPECT_GT(seen.size(), 250u); // 256 draws, (almost) all distinct
  EXPECT_NE(rolloutUniform(7, 3, 0, 0, 0), rolloutUniform(8, 3, 0, 0, 0));
  EXPECT_NE(rolloutUniform(7, 3, 0, 0, 0), rolloutUniform(7, 4, 0, 0, 0));
  // Prompt and stream are not interchangeable.
  EXPECT_NE(rolloutUniform(7, 3, 1, 2, 0), rolloutUniform(7, 3, 2, 1, 0));
}

TEST(DistributedPieces, TwoRanksSumGradientsKeepingUndefinedOnes) {
  // Two ranks in two threads of this process. p0 has a gradient on both
  // ranks, p1 on rank 1 only, p2 on neither.
  int port = pickFreePort();
  std::vector<std::vector<at::Tensor>> params(2);
  std::vector<std::string> errors(2);
  std::vector<std::vector<double>> sums(2);
  auto work = [&](int rank) {
    try {
      DistOptions o;
      o.rank = rank;
      o.worldSize = 2;
      o.masterPort = port;
      o.timeout = std::chrono::seconds(60);
      auto c = Communicator::connect(o);
      auto &ps = params[rank];
      for (int i = 0; i < 3; ++i)
        ps.push_back(at::zeros({2, 3}).set_requires_grad(true));
      ps[0].mutable_grad() = at::full({2, 3}, 1.0 + rank);
      if (rank == 1)
        ps[1].mutable_grad() = at::arange(6, at::kFloat).view({2, 3});
      c->sumGradients(ps);
      sums[rank] = {double(rank), 0.25};
      c->sum(sums[rank]);
    } catch (const std::exception &e) {
      errors[rank] = e.what();
    }
  };
  std::thread t1(work, 1);
  work(0);
  t1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(at::equal(params[r][0].grad(), at::full({2, 3}, 3.0)));
    ASSERT_TRUE(params[r][1].grad().defined());
    EXPECT_TRUE(
        at::equal(params[r][1].grad(), at::arange(6, at::kFloat).view({2, 3})));
    EXPECT_FALSE(params[r][2].grad().defined());
    EXPECT_EQ(sums[r], (std::vector<double>{1.0, 0.5}));
  }
}

TEST(DistributedPieces, OneProcessGroupSumsNothing) {
  DistOptions o;
  o.masterPort = pickFreePort();
  auto c = Communicator::connect(o);
  EXPECT_EQ(c->size(), 1);
  std::vector<double> v{1.5, -2};
  c->sum(v);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2}));
}

} // namespace

// A fatal signal (a bug, never the user's input) makes cac-run print where
// it was before it dies with that signal.
TEST_F(DistributedTest, ACrashPrintsItsStack) {
  needBundles();
  fs::path file = writeFile("grpo", "");
  std::string src = readAll(file);
  size_t at = src.find("steps = 40");
  ASSERT_NE(at, std::string::npos);
  src.replace(at, 10, "steps = 100000");
  std::ofstream(file) << src;
  std::string err;
  // The run takes minutes; it is stopped once it has made its output folder
  // (its crash reporter is installed first thing), however busy the machine.
  std::string out = (dir_ / "o").string();
  int rc = shell(std::string(CAC_TEST_CAC_RUN) + " " + file.string() +
                     " --no-progress --out " + out + " & p=$!; while kill -0 $p"
                     " 2>/dev/null && [ ! -d " + out + " ]; do sleep 0.05;"
                     " done; kill -SEGV $p; wait $p; exit $?",
                 &err);
  EXPECT_EQ(rc, 128 + SIGSEGV) << err;
  EXPECT_NE(err.find("cac-run: crashed (segmentation fault); this is a bug in "
                     "cac, please report it with the stack below:"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("cac-run("), std::string::npos) << err;
}
