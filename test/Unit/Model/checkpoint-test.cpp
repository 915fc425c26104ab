//===- checkpoint-test.cpp - Atomic, resumable checkpoints ----------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Checkpoint.h"
#include "cac/Runtime/Support/FileUtil.h"
#include "cac/Runtime/Model/Generation.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <set>
#include <sys/stat.h>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// A policy, a critic, AdamW over both (two groups) and a generator, as a
/// trainer would hold them.
struct Trainer {
  TransformerLM policy, critic;
  std::unique_ptr<torch::optim::AdamW> opt;
  at::Generator gen;

  explicit Trainer(uint64_t seed)
      : policy(tinyModel(tinyConfig(), seed)),
        critic(tinyModel(tinyConfig(), seed + 1, /*valueHead=*/true)),
        gen(makeGenerator(seed + 2)) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(policy->parameters(),
                        std::make_unique<torch::optim::AdamWOptions>(1e-2));
    groups.emplace_back(critic->parameters(),
                        std::make_unique<torch::optim::AdamWOptions>(3e-3));
    opt = std::make_unique<torch::optim::AdamW>(std::move(groups));
  }

  /// One optimizer step on a fixed loss.
  void train() {
    at::Tensor ids =
        at::tensor({1, 2, 3, 4, 5, 6}, at::kLong).view({1, 6});
    opt->zero_grad();
    at::Tensor loss = policy->forward(ids).pow(2).mean() +
                      critic->valueHead(critic->forwardHidden(ids)).pow(2).mean();
    loss.backward();
    opt->step();
  }

  CheckpointState state(int64_t step = 0) {
    CheckpointState s;
    s.step = step;
    s.models = {{"policy", policy}, {"critic", critic}};
    s.optimizer = opt.get();
    s.generators = {{"sampling", gen}};
    return s;
  }
};

void expectSameParameters(TransformerLM a, TransformerLM b) {
  auto pb = b->named_parameters();
  for (const auto &p : a->named_parameters())
    EXPECT_TRUE(at::equal(p.value(), *pb.find(p.key()))) << p.key();
}

} // namespace

TEST(Checkpoint, SaveLoadResumesExactly) {
  TempDir dir;
  Trainer a(100);
  a.train();
  a.train();
  CheckpointState st = a.state(2);
  st.extra = {{"lr_step", 7}, {"data", "arith"}};
  saveCheckpoint(dir / "ckpt", st);

  CheckpointInfo info = readCheckpointInfo(dir / "ckpt");
  EXPECT_EQ(info.step, 2);
  EXPECT_EQ(info.models, (std::vector<std::string>{"policy", "critic"}));
  EXPECT_TRUE(info.hasOptimizer);
  EXPECT_EQ(info.generators, std::vector<std::string>{"sampling"});
  EXPECT_EQ(info.extra["lr_step"], 7);

  Trainer b(200); // different weights, fresh optimizer and generator
  CheckpointState loaded = b.state();
  loadCheckpoint(dir / "ckpt", loaded);
  EXPECT_EQ(loaded.step, 2);
  EXPECT_EQ(loaded.extra["data"], "arith");
  expectSameParameters(a.policy, b.policy);
  expectSameParameters(a.critic, b.critic);
  // The generators continue from the same state.
  EXPECT_TRUE(at::equal(at::rand({5}, a.gen), at::rand({5}, b.gen)));
  // The optimizers too: one more step gives the same weights.
  a.train();
  b.train();
  expectSameParameters(a.policy, b.policy);
  expectSameParameters(a.critic, b.critic);
  EXPECT_DOUBLE_EQ(
      static_cast<torch::optim::AdamWOptions &>(b.opt->param_groups()[1].options())
          .lr(),
      3e-3);
}

TEST(Checkpoint, NamedTensorsRoundTripInTheirDtype) {
  // A trainer's other state (a replay buffer) as tensors: saved to
  // tensors.safetensors, restored exactly; a damaged file is reported.
  TempDir dir;
  Trainer a(100);
  CheckpointState st = a.state(3);
  st.tensors["replay"] = at::tensor({1.0, 0.1, 1e300, -2.5}, at::kDouble);
  st.tensors["ids"] = at::arange(5, at::kLong);
  saveCheckpoint(dir / "ckpt", st);
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "tensors.safetensors"));
  Trainer b(200);
  CheckpointState loaded = b.state();
  loaded.tensors["stale"] = at::zeros({1});
  loadCheckpoint(dir / "ckpt", loaded);
  ASSERT_EQ(loaded.tensors.size(), 2u);
  EXPECT_EQ(loaded.tensors["replay"].scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(loaded.tensors["replay"], st.tensors["replay"]));
  EXPECT_TRUE(at::equal(loaded.tensors["ids"], st.tensors["ids"]));
  // Without tensors there is no file, and loading gives none.
  Trainer c(300);
  saveCheckpoint(dir / "plain", c.state(1));
  EXPECT_FALSE(fs::exists(dir / "plain" / "tensors.safetensors"));
  CheckpointState none = c.state();
  none.tensors["stale"] = at::zeros({1});
  loadCheckpoint(dir / "plain", none);
  EXPECT_TRUE(none.tensors.empty());
  // Truncated: the recorded size no longer matches.
  fs::resize_file(dir / "ckpt" / "tensors.safetensors", 10);
  try {
    loadCheckpoint(dir / "ckpt", loaded);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("tensors.safetensors"),
              std::string::npos)
        << e.what();
  }
}

TEST(Checkpoint, OverwriteIsAtomicAndLeavesNoTemporaries) {
  TempDir dir;
  Trainer a(300);
  saveCheckpoint(dir / "ckpt", a.state(1));
  a.train();
  saveCheckpoint(dir / "ckpt", a.state(2));
  EXPECT_EQ(readCheckpointInfo(dir / "ckpt").step, 2);
  for (const auto &e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string(), "ckpt") << "left behind: " << e.path();

  // A save that fails half-way (an optimizer parameter of no saved model)
  // leaves the previous checkpoint and nothing else.
  Trainer stranger(400);
  CheckpointState bad = a.state(3);
  bad.optimizer = stranger.opt.get();
  EXPECT_ERROR([&] { saveCheckpoint(dir / "ckpt", bad); },
               {"optimizer group 0", "none of the saved models"});
  EXPECT_EQ(readCheckpointInfo(dir / "ckpt").step, 2);
  for (const auto &e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string(), "ckpt") << "left behind: " << e.path();
  CheckpointState dup = a.state(3);
  dup.models.emplace_back("policy", a.policy);
  EXPECT_ERROR([&] { saveCheckpoint(dir / "ckpt2", dup); },
               {"two models named 'policy'"});
  CheckpointState badName = a.state(3);
  badName.models[0].first = "../up";
  EXPECT_ERROR([&] { saveCheckpoint(dir / "ckpt2", badName); },
               {"'../up'"});
}

TEST(Checkpoint, LeftoversOfAKilledWriteAreIgnored) {
  TempDir dir;
  Trainer a(500);
  saveCheckpoint(dir / "step-1", a.state(1));
  // What a write killed before its rename leaves: a temporary folder with
  // partial contents, even a complete-looking checkpoint.json of a later
  // step, and a stray temporary file of writeFileAtomic.
  fs::path dead = dir / "step-2.tmp-Ab3dEf";
  fs::create_directories(dead / "policy");
  writeFile(dead / "policy" / "model.safetensors", "partial");
  writeFile(dead / "checkpoint.json",
            json{{"format", "cac-checkpoint-1"}, {"step", 2},
                 {"files", json::object()}}
                .dump());
  writeFile(dir / "step-1" / "rng.safetensors.tmp", "junk");
  EXPECT_EQ(latestCheckpoint(dir.path()).value_or("").string(),
            (dir / "step-1").string());

  Trainer b(600);
  CheckpointState st = b.state();
  loadCheckpoint(dir / "step-1", st);
  EXPECT_EQ(st.step, 1);
  expectSameParameters(a.policy, b.policy);

  // Saving the killed step again works and becomes the latest.
  saveCheckpoint(dir / "step-2", a.state(2));
  EXPECT_EQ(latestCheckpoint(dir.path()).value_or("").string(),
            (dir / "step-2").string());
  EXPECT_TRUE(fs::exists(dead)) << "not ours to delete";
  TempDir empty;
  EXPECT_FALSE(latestCheckpoint(empty.path()).has_value());
  EXPECT_FALSE(latestCheckpoint(empty / "absent").has_value());
}

TEST(Checkpoint, TruncatedOrDamagedCheckpointsAreRejected) {
  TempDir dir;
  Trainer a(700);
  a.train();
  fs::path ckpt = dir / "ckpt";
  saveCheckpoint(ckpt, a.state(5));
  auto reload = [&] {
    Trainer b(800);
    CheckpointState st = b.state();
    loadCheckpoint(ckpt, st);
  };
  auto damage = [&](const std::string &rel, const std::function<void()> &fn,
                    std::initializer_list<std::string> parts) {
    SCOPED_TRACE(rel);
    std::string saved = readFile(ckpt / rel);
    fn();
    std::string msg = errorOf(reload);
    EXPECT_NE(msg.find(ckpt.string()), std::string::npos) << msg;
    for (const std::string &p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nwants: " << p;
    writeFile(ckpt / rel, saved);
    reload(); // restored: loads again
  };
  for (const char *rel : {"policy/model.safetensors", "optimizer.safetensors",
                          "rng.safetensors", "critic/config.json"}) {
    fs::path f = ckpt / rel;
    damage(rel, [&] { truncateFile(f, fs::file_size(f) / 2); },
           {std::string("'") + rel + "'", "truncated or modified"});
  }
  damage("checkpoint.json",
         [&] { truncateFile(ckpt / "checkpoint.json", 40); },
         {"checkpoint.json", "not valid JSON"});
  damage("checkpoint.json",
         [&] { writeFile(ckpt / "checkpoint.json", "{\"format\": 3}"); },
         {"format"});
  damage("checkpoint.json",
         [&] {
           json j = json::parse(readFile(ckpt / "checkpoint.json"));
           j["step"] = "five";
           writeFile(ckpt / "checkpoint.json", j.dump());
         },
         {"'step'"});
  damage("checkpoint.json",
         [&] {
           json j = json::parse(readFile(ckpt / "checkpoint.json"));
           j["optimizer"]["param_groups"][0].erase("lr");
           writeFile(ckpt / "checkpoint.json", j.dump());
         },
         {"malformed optimizer entry"});
  // Found by test/fuzz (cac-fuzz-checkpoint): fewer than two betas read
  // past the end of the array.
  for (const char *betas : {"[]", "[0.9]", "{\"a\": 1, \"b\": 2}"})
    damage("checkpoint.json",
           [&] {
             json j = json::parse(readFile(ckpt / "checkpoint.json"));
             j["optimizer"]["param_groups"][1]["betas"] = json::parse(betas);
             writeFile(ckpt / "checkpoint.json", j.dump());
           },
           {"optimizer group 1", "'betas' is not two numbers"});
  damage("checkpoint.json",
         [&] {
           json j = json::parse(readFile(ckpt / "checkpoint.json"));
           j["files"]["../../etc/passwd"] = 1;
           writeFile(ckpt / "checkpoint.json", j.dump());
         },
         {"outside the checkpoint"});
  // Same size, different bytes (a corrupted header): the checksum catches
  // it before the safetensors reader sees it.
  damage("rng.safetensors",
         [&] {
           std::string s = readFile(ckpt / "rng.safetensors");
           s[8] = '[';
           writeFile(ckpt / "rng.safetensors", s);
         },
         {"file 'rng.safetensors' is corrupted", "checksum"});

  fs::remove(ckpt / "checkpoint.json");
  EXPECT_ERROR(reload, {ckpt.string(), "no checkpoint.json"});
  EXPECT_ERROR([&] { readCheckpointInfo(dir / "nothing"); },
               {"no such directory"});
}

TEST(Checkpoint, MismatchedStateIsReported) {
  TempDir dir;
  Trainer a(900);
  saveCheckpoint(dir / "ckpt", a.state(1));

  // Another architecture.
  ModelConfig bigger = tinyConfig();
  bigger.numHiddenLayers = 3;
  CheckpointState st;
  st.models = {{"policy", tinyModel(bigger, 1)}};
  EXPECT_ERROR([&] { loadCheckpoint(dir / "ckpt", st); },
               {"model 'policy'", "another config", "num_hidden_layers 2 vs 3"});
  // A model the checkpoint lacks.
  st.models = {{"reference", tinyModel(tinyConfig(), 1)}};
  EXPECT_ERROR([&] { loadCheckpoint(dir / "ckpt", st); },
               {"no model 'reference'"});
  // A generator the checkpoint lacks.
  Trainer b(1000);
  CheckpointState withGen = b.state();
  withGen.generators.emplace_back("other", makeGenerator(1));
  EXPECT_ERROR([&] { loadCheckpoint(dir / "ckpt", withGen); },
               {"no generator 'other'"});
  // An optimizer with groups in another order.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(b.critic->parameters(),
                      std::make_unique<torch::optim::AdamWOptions>(1e-2));
  groups.emplace_back(b.policy->parameters(),
                      std::make_unique<torch::optim::AdamWOptions>(1e-2));
  torch::optim::AdamW swapped(std::move(groups));
  CheckpointState sw = b.state();
  sw.optimizer = &swapped;
  EXPECT_ERROR([&] { loadCheckpoint(dir / "ckpt", sw); },
               {"optimizer group 0"});
}

TEST(FileUtil, AtomicWrites) {
  TempDir dir;
  fs::path f = dir / "a.txt";
  writeFileAtomic(f, "one");
  writeFileAtomic(f, "two");
  EXPECT_EQ(readFileToString(f), "two");
  EXPECT_FALSE(fs::exists(dir / "a.txt.tmp"));
  EXPECT_ERROR([&] {
    writeFileAtomic(f, [](FileWriter &w) {
      w.write("partial");
      throw std::runtime_error("disk full");
    });
  }, {"disk full"});
  EXPECT_EQ(readFileToString(f), "two") << "a failed write kept the old file";
  EXPECT_FALSE(fs::exists(dir / "a.txt.tmp"));
  EXPECT_ERROR([&] { readFileToString(dir / "none"); }, {"none", "cannot open"});
  // A device or a FIFO (a config.json, a tokenizer.json) is not read.
  EXPECT_ERROR([&] { readFileToString("/dev/zero"); },
               {"/dev/zero", "not a regular file"});
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_ERROR([&] { readFileToString(dir / "fifo"); },
               {"fifo", "not a regular file"});
  fs::remove(dir / "fifo");
  EXPECT_ERROR([&] { writeFileAtomic(dir / "no" / "such" / "dir", "x"); },
               {"cannot create"});
  {
    AtomicDirectory d(dir / "folder");
    writeFile(d.path() / "x", "1");
    // Not committed: vanishes.
  }
  EXPECT_FALSE(fs::exists(dir / "folder"));
  for (const auto &e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string(), "a.txt");
}

// A same-size corruption (a flipped byte in the tensor data, which no header
// check sees) of the weights, the optimizer or the RNG state is caught by
// the checksums, naming the file.
TEST(Checkpoint, SameSizeCorruptionIsCaughtByTheChecksums) {
  TempDir dir;
  Trainer a(1000);
  a.train();
  fs::path ckpt = dir / "ckpt";
  saveCheckpoint(ckpt, a.state(3));
  json meta = json::parse(readFile(ckpt / "checkpoint.json"));
  ASSERT_TRUE(meta.contains("checksums"));
  for (const char *rel : {"policy/model.safetensors", "critic/model.safetensors",
                          "optimizer.safetensors", "rng.safetensors"}) {
    SCOPED_TRACE(rel);
    std::string saved = readFile(ckpt / rel);
    std::string bad = saved;
    bad[bad.size() - 3] ^= 0x01; // the last tensor's data, not the header
    writeFile(ckpt / rel, bad);
    Trainer b(1100);
    CheckpointState st = b.state();
    EXPECT_ERROR([&] { loadCheckpoint(ckpt, st); },
                 {ckpt.string(), std::string("file '") + rel + "' is corrupted",
                  "checksum"});
    writeFile(ckpt / rel, saved);
    loadCheckpoint(ckpt, st);
    expectSameParameters(a.policy, b.policy);
  }
}

TEST(FileUtil, Crc32cKnownAnswers) {
  // RFC 3720's check value, and the same through the bytewise tail.
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string big(1000, 'x');
  uint32_t whole = crc32c(big.data(), big.size());
  EXPECT_EQ(crc32c(big.data() + 7, big.size() - 7, crc32c(big.data(), 7)),
            whole);
  TempDir dir;
  writeFile(dir / "f", "123456789");
  EXPECT_EQ(fileCrc32c(dir / "f"), "e3069283");
}

// The full-disk test hook fails writes to matching paths once the budget is
// spent, naming the file; checked appends report it too.
TEST(FileUtil, InjectedFullDiskNamesTheFile) {
  TempDir dir;
  setenv("CAC_TEST_ENOSPC", "victim:10", 1);
  appendToFile(dir / "other.txt", std::string(100, 'a'));
  appendToFile(dir / "victim.txt", "0123456789");
  EXPECT_ERROR([&] { appendToFile(dir / "victim.txt", "x"); },
               {"victim.txt", "No space left on device"});
  EXPECT_ERROR([&] { writeFileAtomic(dir / "victim2", "y"); },
               {"victim2", "No space left on device"});
  EXPECT_FALSE(fs::exists(dir / "victim2"));
  unsetenv("CAC_TEST_ENOSPC");
  appendToFile(dir / "victim.txt", "x");
  EXPECT_EQ(readFile(dir / "victim.txt"), "0123456789x");
}

TEST(FileUtil, StaleTemporariesAreRemoved) {
  TempDir dir;
  fs::create_directories(dir / "checkpoint");
  fs::create_directories(dir / "checkpoint.tmp-Ab3dEf" / "policy");
  writeFile(dir / "checkpoint.tmp-Ab3dEf" / "policy" / "x", "partial");
  fs::create_directories(dir / "checkpoint.tmp-Zz9yYx.old");
  writeFile(dir / "metrics.jsonl.tmp", "junk");
  writeFile(dir / "checkpoints-other", "not ours");
  EXPECT_EQ(removeStaleTemporaries(dir / "checkpoint"), 2);
  EXPECT_EQ(removeStaleTemporaries(dir / "metrics.jsonl"), 1);
  std::set<std::string> left;
  for (const auto &e : fs::directory_iterator(dir.path()))
    left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"checkpoint", "checkpoints-other"}));
}
