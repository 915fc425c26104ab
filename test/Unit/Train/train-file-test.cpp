//===- train-file-test.cpp - Training-file parser and diagnostics ---------===//

#include "cac/Runtime/Train/TrainFile.h"

#include <gtest/gtest.h>

using namespace cac::rt::train;
namespace fs = std::filesystem;

namespace {

struct Result {
  std::optional<TrainConfig> cfg;
  std::string errors;
};

Result check(const std::string &src, const std::string &file = "t.cac") {
  DiagnosticEngine diag(file, src);
  Result r;
  auto block = parseTrainFile(src, diag);
  if (block)
    r.cfg = buildTrainConfig(*block, file, diag);
  r.errors = diag.render();
  return r;
}

/// A valid file with \p extra lines appended inside the block.
std::string withFields(const std::string &extra) {
  return "train t {\n"
         "  model = builtin(\"tiny\")\n"
         "  task = arith(min_level = 1, max_level = 2)\n"
         "  estimator = \"grpo.cac\"\n"
         "  steps = 10\n" +
         extra + "}\n";
}

TEST(TrainFile, ParsesTheDefaults) {
  Result r = check(withFields(""), "dir/t.cac");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.errors, "");
  const TrainConfig &c = *r.cfg;
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.model.kind, ModelSpec::Kind::Builtin);
  EXPECT_EQ(c.model.hidden, 64);
  EXPECT_EQ(c.task.maxLevel, 2);
  // Paths are relative to the training file.
  EXPECT_EQ(c.estimator.path, std::filesystem::path("dir/grpo.cac"));
  EXPECT_EQ(c.estimator.kind, EstimatorSpec::Kind::Source);
  EXPECT_EQ(c.steps, 10);
  EXPECT_EQ(c.critic.kind, CriticSpec::Kind::None);
  EXPECT_EQ(c.aggregation, Aggregation::TokenMean);
}

TEST(TrainFile, ParsesEveryField) {
  Result r = check(withFields(
      "  critic = value_model(builtin(\"small\"), lr = 1e-4, coef = 0.1)\n"
      "  rollout = group(n = 4, temperature = 0.7, top_p = 0.9, top_k = 5, "
      "max_tokens = 12)\n"
      "  prompts = 8; objective = ppo_clip(eps = 0.1, eps_high = 0.28)\n"
      "  aggregation = \"seq-mean-token-sum-norm\"\n"
      "  kl = k3(coef = 0.01)  // comment\n"
      "  epochs = 2, minibatches = 4\n"
      "  whiten = true\n"
      "  optimizer = adamw(lr = 3e-4, beta2 = 0.95, weight_decay = 0.1, "
      "grad_clip = 0.5)\n"
      "  schedule = cosine(warmup = 3, min_ratio = 0.1)\n"
      "  warm_start = sft(steps = 20, batch = 8, lr = 1e-3,\n"
      "                   schedule = cosine(warmup = 2, min_ratio = 0.5))\n"
      "  eval = greedy(every = 5, size = 50)\n"
      "  checkpoint_every = 7\n"
      "  seed = 42\n"
      "  out = \"runs/x\"\n"
      "  threads = 2\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  const TrainConfig &c = *r.cfg;
  EXPECT_EQ(c.critic.kind, CriticSpec::Kind::ValueModel);
  EXPECT_EQ(c.critic.model.hidden, 128);
  EXPECT_DOUBLE_EQ(c.critic.lr, 1e-4);
  EXPECT_DOUBLE_EQ(c.critic.coef, 0.1);
  EXPECT_EQ(c.rollout.n, 4);
  EXPECT_DOUBLE_EQ(c.rollout.topP, 0.9);
  EXPECT_EQ(c.rollout.maxTokens, 12);
  EXPECT_EQ(c.prompts, 8);
  EXPECT_DOUBLE_EQ(c.objective.epsLow, 0.1);
  EXPECT_DOUBLE_EQ(c.objective.epsHigh, 0.28);
  EXPECT_EQ(c.aggregation, Aggregation::SeqMeanTokenSumNorm);
  EXPECT_EQ(c.kl.kind, KlSpec::Kind::K3);
  EXPECT_EQ(c.epochs, 2);
  EXPECT_EQ(c.minibatches, 4);
  EXPECT_TRUE(c.whiten);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.schedule.kind, ScheduleSpec::Kind::Cosine);
  EXPECT_EQ(c.sft.steps, 20);
  ASSERT_TRUE(c.sft.schedule);
  EXPECT_EQ(c.sft.schedule->kind, ScheduleSpec::Kind::Cosine);
  EXPECT_DOUBLE_EQ(c.sft.schedule->minRatio, 0.5);
  EXPECT_EQ(c.eval.every, 5);
  EXPECT_EQ(c.checkpointEvery, 7);
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.out, std::filesystem::path("runs/x"));
  EXPECT_EQ(c.threads, 2);
}

TEST(TrainFile, RolloutDtype) {
  Result r = check(withFields(""));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->rolloutDtype, "float32");
  r = check(withFields("  rollout_dtype = \"bf16\"\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->rolloutDtype, "bfloat16");
  // float16 is a name; whether the device runs it is the trainer's check.
  r = check(withFields("  rollout_dtype = \"fp16\"\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->rolloutDtype, "float16");
  r = check(withFields("  rollout_dtype = \"bfloat8\"\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_EQ(r.errors,
            "t.cac:6:19: error: 'rollout_dtype': unknown model dtype "
            "'bfloat8' (float32, bfloat16 or float16; also f32, fp32, bf16, "
            "f16, fp16)\n"
            "  rollout_dtype = \"bfloat8\"\n"
            "                  ^\n");
  r = check(withFields("  rollout_dtype = 16\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("'rollout_dtype' must be a string"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, Float32MatmulPrecision) {
  Result r = check(withFields(""));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->float32MatmulPrecision, "highest");
  for (const char *p : {"highest", "high", "medium"}) {
    r = check(withFields(std::string("  float32_matmul_precision = \"") + p +
                         "\"\n"));
    ASSERT_TRUE(r.cfg) << r.errors;
    EXPECT_EQ(r.cfg->float32MatmulPrecision, p);
  }
  r = check(withFields("  float32_matmul_precision = \"tf32\"\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_EQ(r.errors, "t.cac:6:30: error: 'float32_matmul_precision': "
                      "unknown precision 'tf32' (highest, high or medium)\n"
                      "  float32_matmul_precision = \"tf32\"\n"
                      "                             ^\n");
}

TEST(TrainFile, UpdateDtype) {
  Result r = check(withFields(""));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->updateDtype, "float32");
  for (const char *name : {"bfloat16", "bf16"}) {
    r = check(withFields(std::string("  update_dtype = \"") + name + "\"\n"));
    ASSERT_TRUE(r.cfg) << r.errors;
    EXPECT_EQ(r.cfg->updateDtype, "bfloat16");
  }
  r = check(withFields("  update_dtype = \"fp32\"\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->updateDtype, "float32");
  r = check(withFields("  update_dtype = \"bfloat8\"\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_EQ(r.errors,
            "t.cac:6:18: error: 'update_dtype': unknown model dtype "
            "'bfloat8' (float32, bfloat16 or float16; also f32, fp32, bf16, "
            "f16, fp16)\n"
            "  update_dtype = \"bfloat8\"\n"
            "                 ^\n");
  r = check(withFields("  update_dtype = \"float16\"\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_EQ(r.errors,
            "t.cac:6:18: error: 'update_dtype': float16 needs loss scaling, "
            "which the update has not; use float32 or bfloat16\n"
            "  update_dtype = \"float16\"\n"
            "                 ^\n");
  r = check(withFields("  update_dtype = 16\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("t.cac:6:18: error: 'update_dtype' must be a string"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, ActivationCheckpointing) {
  Result r = check(withFields(""));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_FALSE(r.cfg->activationCheckpointing);
  r = check(withFields("  activation_checkpointing = true\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_TRUE(r.cfg->activationCheckpointing);
  r = check(withFields("  activation_checkpointing = \"yes\"\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("t.cac:6:30: error: 'activation_checkpointing' "
                          "must be true or false"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, ArithDigitsAndOps) {
  Result r = check("train t { model = builtin(\"tiny\") steps = 1 estimator "
                   "= \"g.cac\"\n task = arith(digits = 2, ops = \"+-*\") }");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->task.digits, 2);
  EXPECT_EQ(r.cfg->task.ops, "+-*");
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, ops = \"+/\") }");
  EXPECT_NE(r.errors.find("t.cac:2:33: error: 'ops' of 'arith' must be a "
                          "non-empty subset of \"+-*\", got \"+/\""),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, ops = \"+-\", steps = 0.5) }");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->task.steps, 0.5);
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2) }");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->task.steps, 0.0);
  EXPECT_FALSE(r.cfg->task.lines);
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, steps = 1, lines = 1) }");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_TRUE(r.cfg->task.lines);
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(max_level = 3, lines = 1) }");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_TRUE(r.cfg->task.lines);
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, lines = 1) }");
  EXPECT_NE(r.errors.find("t.cac:2:35: error: 'lines' of 'arith' breaks "
                          "stepped solutions into lines: with 'digits' it "
                          "needs 'steps' > 0"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, steps = 1, lines = 2) }");
  EXPECT_NE(r.errors.find("'lines' of 'arith' must be"), std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, steps = 1.5) }");
  EXPECT_NE(r.errors.find("t.cac:2:35: error: 'steps' of 'arith' must be in "
                          "[0, 1], got 1.5"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, steps = -0.5) }");
  EXPECT_NE(r.errors.find("t.cac:2:35: error: 'steps' of 'arith' must be in "
                          "[0, 1], got -0.5"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, steps = \"half\") }");
  EXPECT_NE(r.errors.find("t.cac:2:35: error: 'steps' of 'arith' must be a "
                          "number"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(max_level = 2, steps = 0.5) }");
  EXPECT_NE(r.errors.find("t.cac:2:38: error: 'steps' of 'arith' needs "
                          "'digits'"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(digits = 2, max_level = 3) }");
  EXPECT_NE(r.errors.find("t.cac:2:24: error: 'digits' and "
                          "'min_level'/'max_level' of 'arith' exclude each "
                          "other"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, EstimatorParameters) {
  Result r =
      check("train t { model = builtin(\"tiny\") task = arith() steps = 1\n"
            "  estimator = cac(\"gae.cac\", lambda = 0.9, gamma = 1) }\n");
  ASSERT_TRUE(r.cfg) << r.errors;
  ASSERT_EQ(r.cfg->estimator.params.size(), 2u);
  EXPECT_EQ(r.cfg->estimator.params[0].name, "lambda");
  EXPECT_DOUBLE_EQ(r.cfg->estimator.params[0].value, 0.9);
  EXPECT_EQ(r.cfg->estimator.params[0].loc.line, 2);
  EXPECT_EQ(r.cfg->estimator.params[0].loc.col, 30);

  Result b = check("train t { model = builtin(\"tiny\") task = arith() "
                   "steps = 1 estimator = bundle(\"/abs/dir\") }\n");
  ASSERT_TRUE(b.cfg) << b.errors;
  EXPECT_EQ(b.cfg->estimator.kind, EstimatorSpec::Kind::Bundle);
  EXPECT_EQ(b.cfg->estimator.path, std::filesystem::path("/abs/dir"));
}

TEST(TrainFile, UnknownFieldHasLocationAndCaret) {
  Result r = check(withFields("  stesp = 3\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_EQ(r.errors, "t.cac:6:3: error: unknown field 'stesp'; did you "
                      "mean 'steps'?\n"
                      "  stesp = 3\n"
                      "  ^\n");
}

TEST(TrainFile, WrongTypes) {
  Result r = check(withFields("  prompts = \"many\"\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_EQ(r.errors,
            "t.cac:6:13: error: 'prompts' must be an integer, got string "
            "'\"many\"'\n"
            "  prompts = \"many\"\n"
            "            ^\n");
  r = check(withFields("  epochs = 1.5\n"));
  EXPECT_NE(r.errors.find("t.cac:6:12: error: 'epochs' must be an integer, "
                          "got 1.5"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  whiten = 1\n"));
  EXPECT_NE(r.errors.find("t.cac:6:12: error: 'whiten' must be true or "
                          "false"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  optimizer = sgd(lr = 1)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:15: error: 'optimizer' must be adamw("),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, BadValues) {
  Result r = check(withFields("  rollout = group(n = 0)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:23: error: 'n' of 'group' must be in "
                          "[1, 4096], got 0"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  aggregation = \"seq-mean\"\n"));
  EXPECT_NE(r.errors.find("t.cac:6:17: error: unknown aggregation "
                          "'seq-mean'"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  optimizer = adamw(lr = 0)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:26: error: 'lr' of 'adamw' must be in "
                          "(0, 10], got 0"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  optimizer = adamw(lr = 1e-3, lr = 2e-3)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:32: error: argument 'lr' of 'adamw' is "
                          "given twice"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  optimizer = adamw(weight_decy = 0.1)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:21: error: unknown argument 'weight_decy' "
                          "of 'adamw'"),
            std::string::npos)
      << r.errors;
  EXPECT_NE(r.errors.find("did you mean 'weight_decay'?"), std::string::npos);
  r = check(withFields("  minibatches = 1000\n"));
  EXPECT_NE(r.errors.find("t.cac:6:3: error: minibatches (1000) exceeds the "
                          "sequences per step"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"huge\") task = arith() steps = 1 "
            "estimator = \"g.cac\" }");
  EXPECT_NE(r.errors.find("t.cac:1:27: error: unknown builtin model size "
                          "'huge'"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = arith(min_level = 3, max_level = 2) }");
  EXPECT_NE(r.errors.find("t.cac:2:9: error: arith: min_level (3) exceeds "
                          "max_level (2)"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, ReplayTakeNeedsReplaySteps) {
  Result r = check(withFields(
      "  rollout = tree(branches = \"2-2\", replay_take = 4)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:50: error: 'replay_take' of 'tree' caps "
                          "what the replay buffer trains per question: set "
                          "'replay_steps'"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  rollout = tree(branches = \"2-2\", replay_steps = "
                       "8, replay_take = 32)\n"));
  EXPECT_TRUE(r.errors.empty()) << r.errors;
  ASSERT_TRUE(r.cfg);
  EXPECT_EQ(r.cfg->rollout.replaySteps, 8);
  EXPECT_EQ(r.cfg->rollout.replayTake, 32);
}

TEST(TrainFile, PlanSwitches) {
  // Distinct branch tokens (forest) and shared prefix queries (chain) are on
  // by default and can be turned off; other values are errors.
  Result r = check(withFields("  rollout = forest(n = 4)\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_TRUE(r.cfg->rollout.distinct);
  r = check(withFields("  rollout = forest(n = 4, distinct = 0)\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_FALSE(r.cfg->rollout.distinct);
  r = check(withFields("  rollout = chain(n = 2)\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_TRUE(r.cfg->rollout.dedup);
  r = check(withFields("  rollout = chain(n = 2, dedup = 0)\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_FALSE(r.cfg->rollout.dedup);
  r = check(withFields("  rollout = chain(n = 2, dedup = 2)\n"));
  EXPECT_NE(r.errors.find("'dedup' of 'chain' must be in [0, 1], got 2"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  rollout = group(n = 2, dedup = 0)\n"));
  EXPECT_NE(r.errors.find("unknown argument 'dedup' of 'group'"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, MissingRequiredAndDuplicates) {
  Result r = check("train run {\n  model = builtin(\"tiny\")\n"
                   "  model = builtin(\"small\")\n}\n");
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("t.cac:3:3: error: field 'model' is set twice\n"),
            std::string::npos)
      << r.errors;
  EXPECT_NE(r.errors.find("t.cac:2:3: note: first set here\n"),
            std::string::npos);
  for (const char *f : {"task", "estimator", "steps"})
    EXPECT_NE(r.errors.find(std::string("t.cac:1:1: error: training run "
                                        "'run' is missing the required "
                                        "field '") +
                            f + "'"),
              std::string::npos)
        << r.errors;
}

TEST(TrainFile, SyntaxErrors) {
  struct Case {
    const char *src;
    const char *expected;
  };
  const Case cases[] = {
      {"run t {}", "t.cac:1:1: error: expected 'train NAME { ... }'\n"
                   "run t {}\n^\n"},
      {"train t {\n  steps 10\n}",
       "t.cac:2:9: error: expected '=' after 'steps', found a number\n"
       "  steps 10\n"
       "        ^\n"},
      {"train t {\n  steps = \n}",
       "t.cac:3:1: error: expected a value (number, string, name or call), "
       "found '}'\n}\n^\n"},
      {"train t {\n  out = \"runs/x\n}",
       "t.cac:2:9: error: unterminated string\n"
       "  out = \"runs/x\n"
       "        ^\n"},
      {"train t {\n  steps = 10\n", "t.cac:3:1: error: expected '}' to close "
                                    "'train t'\n\n^\n"},
      {"train t {\n  steps = 3x\n}", "t.cac:2:11: error: malformed number "
                                     "'3x...'\n  steps = 3x\n          ^\n"},
      {"train t {\n  rollout = group(n = 8 temperature = 1)\n}",
       "t.cac:2:25: error: expected ',' or ')' in the arguments of 'group', "
       "found a name\n"
       "  rollout = group(n = 8 temperature = 1)\n"
       "                        ^\n"},
      {"train t {\n  steps = 1 $\n}", "t.cac:2:13: error: unexpected "
                                      "character '$'\n"
                                      "  steps = 1 $\n"
                                      "            ^\n"},
      {"train t { } train u { }",
       "t.cac:1:13: error: expected end of file after the training block\n"
       "train t { } train u { }\n"
       "            ^\n"},
  };
  for (const Case &c : cases) {
    Result r = check(c.src);
    EXPECT_FALSE(r.cfg) << c.src;
    EXPECT_EQ(r.errors, c.expected) << c.src;
  }
}

TEST(TrainFile, DeepNestingIsAnError) {
  // Positional calls nest without going through a keyword's value: they are
  // bounded like keyword arguments, never a stack overflow.
  const int depth = 20000;
  std::string positional = std::string("train t {\n  rollout = ");
  for (int i = 0; i < depth; ++i)
    positional += "f(";
  positional += std::string(depth, ')') + "\n}\n";
  Result r = check(positional);
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("t.cac:2:80: error: values nested too deeply"),
            std::string::npos)
      << r.errors.substr(0, 300);
  std::string keyword = std::string("train t {\n  rollout = ");
  for (int i = 0; i < depth; ++i)
    keyword += "f(a = ";
  keyword += std::string(depth, ')') + "\n}\n";
  r = check(keyword);
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("error: values nested too deeply"),
            std::string::npos)
      << r.errors.substr(0, 300);
}

TEST(TrainFile, NumberOutOfRange) {
  Result r = check(withFields("  prompts = 1e999\n"));
  EXPECT_FALSE(r.cfg);
  EXPECT_NE(r.errors.find("t.cac:6:13: error: number '1e999' is out of range "
                          "(it does not fit in a double)"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, CaretKeepsTabs) {
  Result r = check("train t {\n\tstesp = 1\n}");
  EXPECT_NE(r.errors.find("t.cac:2:2: error: unknown field 'stesp'"),
            std::string::npos);
  EXPECT_NE(r.errors.find("\tstesp = 1\n\t^\n"), std::string::npos) << r.errors;
}

TEST(TrainFile, Overrides) {
  Result r = check(withFields("  warm_start = sft(steps = 5)\n"
                              "  eval = greedy(every = 3)\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  TrainConfig c = *r.cfg;
  Overrides o;
  o.steps = 7;
  o.sftSteps = 0;
  o.evalEvery = 1;
  o.seed = 9;
  o.out = "elsewhere";
  o.threads = 1;
  applyOverrides(c, o);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.sft.steps, 0);
  EXPECT_EQ(c.eval.every, 1);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.out, std::filesystem::path("elsewhere"));
  EXPECT_EQ(c.threads, 1);
  // Nothing set: nothing changes.
  TrainConfig d = *r.cfg;
  applyOverrides(d, Overrides{});
  EXPECT_EQ(d.steps, 10);
  EXPECT_EQ(d.sft.steps, 5);
}

TEST(TrainFile, ExamplesParse) {
  size_t count = 0;
  for (const char *folder :
       {"/examples/arith", "/examples/reverse", "/examples/gsm8k",
        "/examples/tools"})
    for (const auto &entry : std::filesystem::directory_iterator(
             std::string(CAC_TEST_SOURCE_DIR) + folder)) {
      if (entry.path().extension() != ".cac")
        continue;
      ++count;
      std::string errors;
      auto cfg = loadTrainFile(entry.path(), errors);
      ASSERT_TRUE(cfg) << entry.path() << ": " << errors;
      EXPECT_EQ(errors, "");
      EXPECT_TRUE(std::filesystem::exists(cfg->estimator.path))
          << cfg->estimator.path;
      // examples/gsm8k/train.cac reads what the user provides (its README):
      // a Qwen2.5 folder and GSM8K's own files. It parses, and names them.
      if (entry.path().parent_path().filename() == "gsm8k" &&
          entry.path().filename() == "train.cac") {
        fs::path dir = entry.path().parent_path();
        EXPECT_EQ(cfg->model.kind, ModelSpec::Kind::HuggingFace);
        EXPECT_EQ(cfg->model.path, dir / "models/Qwen2.5-0.5B-Instruct");
        EXPECT_EQ(cfg->task.trainPath, dir / "data/train.jsonl");
        EXPECT_EQ(cfg->task.evalPath, dir / "data/test.jsonl");
        EXPECT_TRUE(cfg->chat.enabled);
        EXPECT_EQ(cfg->rolloutDtype, "bfloat16");
        continue;
      }
      if (cfg->task.kind == TaskSpec::Kind::Jsonl ||
          cfg->task.kind == TaskSpec::Kind::Gsm8k) {
        EXPECT_TRUE(std::filesystem::exists(cfg->task.trainPath))
            << cfg->task.trainPath;
        EXPECT_TRUE(std::filesystem::exists(cfg->task.evalPath))
            << cfg->task.evalPath;
      }
    }
  EXPECT_GE(count, 23u);
  std::string errors;
  EXPECT_FALSE(loadTrainFile("/nonexistent/train.cac", errors));
  EXPECT_EQ(errors,
            "/nonexistent/train.cac: error: cannot read the training file\n");
}

} // namespace

TEST(TrainFile, RewardCommand) {
  Result r = check(withFields(""));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->reward.kind, RewardSpec::Kind::Task);
  r = check(withFields("  reward = command(\"python3 s.py --strict\", "
                       "timeout = 5)\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->reward.kind, RewardSpec::Kind::Command);
  EXPECT_EQ(r.cfg->reward.command, "python3 s.py --strict");
  EXPECT_EQ(r.cfg->reward.timeout, 5.0);
  r = check(withFields("  reward = command(cmd = \"./score\")\n"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->reward.command, "./score");
  EXPECT_EQ(r.cfg->reward.timeout, 60.0);
  // Lines 6 and on are the extra fields.
  r = check(withFields("  reward = command(\" \")\n"));
  EXPECT_NE(r.errors.find("t.cac:6:20: error: the reward command is empty"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  reward = command(\"s\", timeout = 0)\n"));
  EXPECT_NE(r.errors.find("t.cac:6:35: error: 'timeout' of 'command' must be "
                          "in (0, 86400]"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  reward = command()\n"));
  EXPECT_NE(r.errors.find("'command' needs the argument 'cmd'"),
            std::string::npos)
      << r.errors;
  r = check(withFields("  reward = \"s.py\"\n"));
  EXPECT_NE(r.errors.find("t.cac:6:12: error: 'reward' must be "
                          "command(\"PROGRAM ARGS\", timeout = 60)"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, JsonlTask) {
  Result r = check(
      "train t { model = builtin(\"tiny\") steps = 1 estimator = \"g.cac\"\n"
      " task = jsonl(\"d/train.jsonl\", eval = \"d/eval.jsonl\") }",
      "dir/t.cac");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->task.kind, TaskSpec::Kind::Jsonl);
  EXPECT_EQ(r.cfg->task.trainPath, fs::path("dir/d/train.jsonl"));
  EXPECT_EQ(r.cfg->task.evalPath, fs::path("dir/d/eval.jsonl"));
  EXPECT_EQ(r.cfg->task.keys.prompt, "prompt");
  EXPECT_EQ(r.cfg->task.keys.answer, "answer");
  EXPECT_EQ(r.cfg->task.keys.solution, "solution");
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = jsonl(\"a\", eval = \"b\", prompt = \"q\", "
            "answer = \"gold\", solution = \"cot\") }");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->task.keys.prompt, "q");
  EXPECT_EQ(r.cfg->task.keys.answer, "gold");
  EXPECT_EQ(r.cfg->task.keys.solution, "cot");
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = jsonl(\"a\", eval = \"b\", answer = \"\") }");
  EXPECT_NE(r.errors.find("t.cac:2:41: error: 'answer' of 'jsonl' names a "
                          "field: it must not be empty"),
            std::string::npos)
      << r.errors;
  r = check("train t { model = builtin(\"tiny\") steps = 1 estimator = "
            "\"g.cac\"\n task = jsonl(\"a\") }");
  EXPECT_NE(r.errors.find("'jsonl' needs the argument 'eval'"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, RandomPublicArchitecture) {
  auto file = [](const std::string &model) {
    return "train t {\n  model = " + model +
           "\n  task = arith()\n  estimator = \"grpo.cac\"\n  steps = 1\n}\n";
  };
  Result r = check(file("random(\"qwen2.5-0.5b\", layers = 2, seed = 7, "
                        "tokenizer = \"tok\")"),
                   "dir/t.cac");
  ASSERT_TRUE(r.cfg) << r.errors;
  const ModelSpec &m = r.cfg->model;
  EXPECT_EQ(m.kind, ModelSpec::Kind::Random);
  EXPECT_EQ(m.arch, "qwen2.5-0.5b");
  EXPECT_EQ(m.layers, 2);
  EXPECT_EQ(m.maxPositions, 0); // the architecture's
  ASSERT_TRUE(m.seed.has_value());
  EXPECT_EQ(*m.seed, 7);
  EXPECT_EQ(m.tokenizerPath, std::filesystem::path("dir/tok"));
  EXPECT_FALSE(m.charTokenizer());

  r = check(file("random(\"llama-3.2-1b\")"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->model.layers, 0);
  EXPECT_FALSE(r.cfg->model.seed.has_value());
  EXPECT_TRUE(r.cfg->model.charTokenizer());

  r = check(file("random(\"qwen3-8b\")"));
  EXPECT_NE(r.errors.find("t.cac:2:18: error: unknown architecture 'qwen3-8b' "
                          "(architectures: qwen2.5-0.5b, qwen2.5-1.5b, "
                          "llama-3.2-1b)"),
            std::string::npos)
      << r.errors;
  // More layers than the architecture has.
  r = check(file("random(\"qwen2.5-0.5b\", layers = 25)"));
  EXPECT_NE(r.errors.find("t.cac:2:43: error: 'layers' of 'random' must be in "
                          "[1, 24], got 25"),
            std::string::npos)
      << r.errors;
}

TEST(TrainFile, ChatTemplate) {
  auto file = [](const std::string &chat, const std::string &model =
                                              "random(\"qwen2.5-0.5b\", "
                                              "tokenizer = \"tok\")") {
    return "train t {\n  model = " + model +
           "\n  task = gsm8k(\"a\", eval = \"b\")\n  estimator = \"g.cac\"\n"
           "  steps = 1\n  chat = " +
           chat + "\n}\n";
  };
  Result r = check(file("template(system = \"Be exact.\", enable_thinking = "
                        "false, temperature = 0.5, n = 3, who = \"x\", "
                        "nothing = none)"),
                   "dir/t.cac");
  ASSERT_TRUE(r.cfg) << r.errors;
  const ChatSpec &c = r.cfg->chat;
  EXPECT_TRUE(c.enabled);
  EXPECT_TRUE(c.folder.empty()); // the model's tokenizer folder
  EXPECT_EQ(c.system, "Be exact.");
  using Vars = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(c.variables, (Vars{{"enable_thinking", "false"},
                               {"temperature", "0.5"},
                               {"n", "3"},
                               {"who", "\"x\""},
                               {"nothing", "null"}}));

  r = check(file("template(\"other\")"), "dir/t.cac");
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_EQ(r.cfg->chat.folder, fs::path("dir/other"));
  for (const char *off : {"none", "false"}) {
    r = check(file(off));
    ASSERT_TRUE(r.cfg) << r.errors;
    EXPECT_FALSE(r.cfg->chat.enabled);
  }
  r = check(file("true"));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_TRUE(r.cfg->chat.enabled);
  r = check(withFields(""));
  ASSERT_TRUE(r.cfg) << r.errors;
  EXPECT_FALSE(r.cfg->chat.enabled); // the default

  // The built-in character tokenizer has no folder to take a template from.
  r = check(file("true", "builtin(\"tiny\")"));
  EXPECT_NE(r.errors.find("t.cac:6:10: error: the chat template comes from "
                          "the model's tokenizer folder, but this model uses "
                          "the built-in character tokenizer"),
            std::string::npos)
      << r.errors;
  r = check(file("template(\"tpl\")", "builtin(\"tiny\")"));
  EXPECT_TRUE(r.cfg) << r.errors;

  r = check(file("3"));
  EXPECT_NE(r.errors.find("t.cac:6:10: error: 'chat' must be none, true"),
            std::string::npos)
      << r.errors;
  r = check(file("template(add_generation_prompt = true)"));
  EXPECT_NE(r.errors.find("t.cac:6:19: error: 'add_generation_prompt' is set "
                          "by cac-run for every prompt"),
            std::string::npos)
      << r.errors;
  r = check(file("template(x = builtin(\"tiny\"))"));
  EXPECT_NE(r.errors.find("t.cac:6:23: error: template variable 'x' must be "
                          "a number, a string, true, false or none"),
            std::string::npos)
      << r.errors;
  r = check(file("template(system = 1)"));
  EXPECT_NE(r.errors.find("'system' of 'template' must be a string"),
            std::string::npos)
      << r.errors;
}
