//===- tool-use-test.cpp - Multi-turn rollouts with the calculator --------===//
//
// The tool hook on a character tokenizer (a call, a malformed call, a call
// past the turn limit, a stray closing tag after an observation); the
// decoder appending a reply as observation tokens (flags, zero logprobs, the
// KV-cached continuation equal to a full forward, a reply cut at
// max_new_tokens, a failing tool named by its call); the packing that hands
// the estimator the actions only (GAE on a multi-turn row equals GAE on the
// row without its observations; turn_start); the `tools` field; and short
// GRPO and GAE runs on a task that calls the calculator. The calculator's
// expressions: test/Unit/Tasks/calculator-test.cpp.
//
//===----------------------------------------------------------------------===//

#include "Phases.h"
#include "tiny-model.h"

#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Train/ToolUse.h"
#include "cac/Runtime/Train/Trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace cac::rt;
using namespace cac::rt::train;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

//===--- The tool hook ----------------------------------------------------===//

ToolSpec bracketCalculator(int64_t maxTurns) {
  ToolSpec spec;
  spec.maxTurns = maxTurns;
  spec.syntax.open = "[";
  spec.syntax.close = "]";
  spec.syntax.resultOpen = "=";
  spec.syntax.resultClose = "";
  return spec;
}

GeneratedSequence rowOf(const Tokenizer &tok, const std::string &text) {
  GeneratedSequence g;
  g.prompt = tok.encode("q", true);
  g.tokens = tok.encode(text, false);
  return g;
}

TEST(ToolHook, AnswersACallWithItsResult) {
  CharTokenizer tok;
  ToolHook hook = calculatorTool(tok, bracketCalculator(2));
  std::optional<ToolReply> r = hook(rowOf(tok, "12[12*7]"));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok);
  EXPECT_EQ(tok.decode(r->observation), "=84");
  // No closing tag in the last token: no call.
  EXPECT_FALSE(hook(rowOf(tok, "[12*7")));
  EXPECT_FALSE(hook(rowOf(tok, "")));
}

TEST(ToolHook, MalformedCallsGetAnErrorReply) {
  CharTokenizer tok;
  ToolHook hook = calculatorTool(tok, bracketCalculator(2));
  for (const char *text : {"[12*]", "7]", "[1/0]"}) {
    std::optional<ToolReply> r = hook(rowOf(tok, text));
    ASSERT_TRUE(r) << text;
    EXPECT_FALSE(r->ok) << text;
    EXPECT_EQ(tok.decode(r->observation), "=error") << text;
  }
  // The opening tag of an earlier turn does not open this one.
  GeneratedSequence g = rowOf(tok, "[2+3]=5]");
  g.observation = {0, 0, 0, 0, 0, 1, 1, 0};
  std::optional<ToolReply> r = hook(g);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(tok.decode(r->observation), "=error");
}

TEST(ToolHook, CallsPastTheTurnLimitAreNotAnswered) {
  CharTokenizer tok;
  ToolHook hook = calculatorTool(tok, bracketCalculator(2));
  GeneratedSequence g = rowOf(tok, "[1+1]");
  g.toolCalls = 2;
  std::optional<ToolReply> r = hook(g);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_TRUE(r->observation.empty());
}

TEST(ToolHook, TheTokenizerMustWriteTheReplies) {
  CharTokenizer tok;
  EXPECT_EQ(checkToolTokens(tok, bracketCalculator(1)), "");
  ToolSpec bad = bracketCalculator(1);
  bad.syntax.resultOpen = "\xc3\xa9"; // not in the character vocabulary
  EXPECT_NE(checkToolTokens(tok, bad).find("cannot write"), std::string::npos);
}

//===--- The decoder ------------------------------------------------------===//

/// A scripted tool: replies \p reply once, after a row's \p after-th
/// generated token, to the rows whose first prompt token after BOS is odd.
ToolHook scriptedTool(size_t after, std::vector<int64_t> reply) {
  return [after,
          reply](const GeneratedSequence &g) -> std::optional<ToolReply> {
    if (g.tokens.size() != after || g.prompt.size() < 2 || g.prompt[1] % 2 == 0)
      return std::nullopt;
    return ToolReply{reply, true};
  };
}

/// Log-probabilities of every generated token under one forward pass of the
/// whole row (no cache).
std::vector<float> fullForwardLogp(TransformerLM &m, const GeneratedSequence &g,
                                   double temperature) {
  torch::NoGradGuard ng;
  std::vector<int64_t> ids = g.prompt;
  ids.insert(ids.end(), g.tokens.begin(), g.tokens.end());
  int64_t L = static_cast<int64_t>(ids.size());
  at::Tensor x = at::tensor(ids, at::kLong).view({1, L});
  at::Tensor lp = tokenLogProbs(m->forward(x), x, temperature)[0];
  std::vector<float> out;
  for (size_t t = 0; t < g.tokens.size(); ++t)
    out.push_back(
        lp[static_cast<int64_t>(g.prompt.size() + t) - 1].item<float>());
  return out;
}

TEST(ToolDecoder, ObservationsExtendTheCacheLikeAFullForward) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  SamplingOptions o;
  o.temperature = 1.0;
  o.maxNewTokens = 9;
  o.tool = scriptedTool(2, {10, 11, 12});
  std::vector<std::vector<int64_t>> prompts = {{1, 5, 6}, {1, 4}, {1, 7, 3, 2}};
  at::Generator gen = makeGenerator(11);
  std::vector<GeneratedSequence> rows =
      generate(m, prompts, o, gen, nullptr, 2);
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const GeneratedSequence &g = rows[i];
    bool calls = prompts[i / 2][1] % 2 != 0;
    ASSERT_EQ(g.tokens.size(), 9u) << i;
    if (!calls) {
      EXPECT_TRUE(g.observation.empty()) << i;
      EXPECT_EQ(g.toolCalls, 0) << i;
    } else {
      std::vector<uint8_t> flags = {0, 0, 1, 1, 1, 0, 0, 0, 0};
      EXPECT_EQ(g.observation, flags) << i;
      EXPECT_EQ(
          std::vector<int64_t>(g.tokens.begin() + 2, g.tokens.begin() + 5),
          (std::vector<int64_t>{10, 11, 12}));
      EXPECT_EQ(g.toolCalls, 1);
      EXPECT_EQ(g.toolTurns, 1);
      EXPECT_EQ(g.toolOk, 1);
    }
    // Every action token's logprob is the full forward's: the cache holds
    // the observation tokens at their positions.
    std::vector<float> ref = fullForwardLogp(m, g, o.temperature);
    for (size_t t = 0; t < g.tokens.size(); ++t) {
      if (g.isObservation(t))
        EXPECT_EQ(g.logprobs[t], 0.0f);
      else
        EXPECT_NEAR(g.logprobs[t], ref[t], 1e-4)
            << "row " << i << " token " << t;
    }
  }
  // The uncached decoder (each step a full forward) samples the same tokens.
  SamplingOptions u = o;
  u.useCache = false;
  at::Generator gen2 = makeGenerator(11);
  std::vector<GeneratedSequence> same =
      generate(m, prompts, u, gen2, nullptr, 2);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(same[i].tokens, rows[i].tokens) << i;
    EXPECT_EQ(same[i].observation, rows[i].observation) << i;
  }
}

TEST(ToolDecoder, AReplyIsCutAtMaxNewTokens) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  SamplingOptions o;
  o.maxNewTokens = 4;
  o.tool = scriptedTool(2, {10, 11, 12});
  at::Generator gen = makeGenerator(3);
  std::vector<GeneratedSequence> rows = generate(m, {{1, 5}}, o, gen);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].tokens.size(), 4u);
  EXPECT_EQ(rows[0].observation, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(rows[0].finish, FinishReason::Length);
}

TEST(ToolDecoder, AFailingToolIsAnErrorNamingTheCall) {
  TransformerLM m = cac::rt::test::tinyDecoderModel();
  SamplingOptions o;
  o.maxNewTokens = 6;
  o.tool = [](const GeneratedSequence &g) -> std::optional<ToolReply> {
    if (g.tokens.size() == 3)
      throw std::runtime_error("the tool's process exited");
    return std::nullopt;
  };
  at::Generator gen = makeGenerator(3);
  try {
    generate(m, {{1, 5}}, o, gen);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    std::string what = e.what();
    EXPECT_NE(what.find("row 0, tool call 1 (after 3 generated tokens): the "
                        "tool failed: the tool's process exited"),
              std::string::npos)
        << what;
  }
  o.tool = [](const GeneratedSequence &) -> std::optional<ToolReply> {
    return ToolReply{{99}, true};
  };
  try {
    generate(m, {{1, 5}}, o, gen);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("token id 99 outside the vocabulary"),
              std::string::npos)
        << e.what();
  }
}

//===--- Packing: the estimator sees the actions
//---------------------------===//

Rollout multiTurnRow() {
  Rollout r;
  r.prompt = {1, 5, 6};
  r.response = {7, 8, 10, 11, 9, 2};
  r.obs = {0, 0, 1, 1, 0, 0};
  r.logp = {-0.5f, -0.25f, 0.0f, 0.0f, -1.0f, -0.125f};
  r.entropy = {1.0f, 2.0f, 0.0f, 0.0f, 3.0f, 4.0f};
  r.reward = 1.0;
  return r;
}

TEST(ToolPacking, PackedArraysHoldTheActionsOnly) {
  Rollout r = multiTurnRow();
  EXPECT_EQ(r.actions(), 4);
  Padded pd = padRollouts({&r}, 0, at::kCPU);
  EXPECT_EQ(pd.numTokens, 4);
  EXPECT_EQ(pd.ids.size(1), 9); // the model still reads the observations
  // Per position p, the value p: the packed values are the positions before
  // each action token (prompt 3 tokens: action t at position 3 + t - 1).
  at::Tensor perPos = at::arange(8, at::kFloat).view({1, 8});
  EXPECT_EQ(hostFloats(gatherResponse(perPos, pd)),
            (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(hostFloats(packActions({r}, &Rollout::logp, at::kCPU)),
            (std::vector<float>{-0.5f, -0.25f, -1.0f, -0.125f}));
  EXPECT_EQ(hostFloats(packActions({r}, &Rollout::entropy, at::kCPU)),
            (std::vector<float>{1, 2, 3, 4}));
}

TEST(ToolPacking, TurnStartsMarkTheFirstActionAfterEachObservation) {
  Rollout a = multiTurnRow(); // 2 actions, 2 observations, 2 actions
  Rollout b;                  // no observations: one turn
  b.response = {4, 5, 6};
  Rollout c; // a reply that fills the row: no action after it
  c.response = {4, 10, 11};
  c.obs = {0, 1, 1};
  EXPECT_EQ(hostFloats(turnStarts({a, b, c}, at::kCPU)),
            (std::vector<float>{1, 0, 1, 0, 1, 0, 0, 1}));
}

TEST(ToolPacking, GaeOnAMultiTurnRowIgnoresItsObservations) {
  fs::path dir = fs::path(CAC_TEST_TRAIN_BUNDLES) / "gae";
  if (std::string(CAC_TEST_TRAIN_BUNDLES).empty() ||
      !fs::exists(dir / "manifest.json"))
    GTEST_SKIP() << "no compiled stdlib bundles";
  BundleEstimator gae = BundleEstimator::load(dir.string());
  // The same values at every action token; the observation positions hold
  // values the estimator must never read.
  Rollout withObs = multiTurnRow();
  Rollout without = withObs;
  without.response = {7, 8, 9, 2};
  without.obs.clear();
  at::Tensor perPosObs =
      at::tensor(std::vector<float>{0, 0, 0.5f, 0.25f, 99, -99, 0.75f, 0.125f})
          .view({1, 8});
  at::Tensor perPosPlain =
      at::tensor(std::vector<float>{0, 0, 0.5f, 0.25f, 0.75f, 0.125f})
          .view({1, 6});
  auto run = [&](const Rollout &r, const at::Tensor &perPos) {
    Padded pd = padRollouts({&r}, 0, at::kCPU);
    TensorMap in{{"value", gatherResponse(perPos, pd)},
                 {"reward", at::tensor(std::vector<float>{1.0f})}};
    return gae.run(in, PackedBatch::fromLengths({r.actions()}),
                   {{"gamma", 0.9}, {"lambda", 0.8}});
  };
  TensorMap a = run(withObs, perPosObs), b = run(without, perPosPlain);
  EXPECT_EQ(hostFloats(a.at("adv")), hostFloats(b.at("adv")));
  EXPECT_EQ(hostFloats(a.at("ret")), hostFloats(b.at("ret")));
  EXPECT_EQ(a.at("adv").numel(), 4);
}

//===--- The `tools` field ------------------------------------------------===//

/// The diagnostics of a file with \p tools (empty: it checks).
std::string toolsErrors(const std::string &tools, ToolSpec *out = nullptr) {
  std::string src = "train t {\n"
                    "  model = builtin(\"tiny\")\n"
                    "  task = arith(digits = 2, ops = \"*\")\n"
                    "  estimator = \"grpo.cac\"\n"
                    "  steps = 1\n"
                    "  tools = " +
                    tools + "\n}\n";
  DiagnosticEngine diag("t.cac", src);
  std::optional<TrainBlock> block = parseTrainFile(src, diag);
  std::optional<TrainConfig> cfg;
  if (block)
    cfg = buildTrainConfig(*block, "t.cac", diag);
  if (cfg && out)
    *out = cfg->tools;
  return diag.render();
}

TEST(ToolsField, ParsesTheCalculator) {
  ToolSpec t;
  EXPECT_EQ(toolsErrors("calculator()", &t), "");
  EXPECT_EQ(t.maxTurns, 3);
  EXPECT_EQ(t.syntax.open, "<calc>");
  EXPECT_EQ(t.syntax.resultClose, "</r>");
  EXPECT_EQ(toolsErrors("calculator(max_turns = 2, open = \"[\", close = "
                        "\"]\", result_open = \"=\", result_close = \"\")",
                        &t),
            "");
  EXPECT_EQ(t.maxTurns, 2);
  EXPECT_EQ(t.syntax.close, "]");
  EXPECT_EQ(t.syntax.resultClose, "");
  EXPECT_EQ(toolsErrors("none", &t), "");
  EXPECT_FALSE(t.enabled());
}

TEST(ToolsField, BadValuesAreErrorsAtTheField) {
  EXPECT_NE(toolsErrors("calculator(max_turns = 0)").find("t.cac:6:"),
            std::string::npos);
  EXPECT_NE(toolsErrors("calculator(max_turns = 0)").find("max_turns"),
            std::string::npos);
  std::string e = toolsErrors("calculator(close = \"\")");
  EXPECT_NE(e.find("t.cac:6:"), std::string::npos) << e;
  EXPECT_NE(e.find("the calculator's 'close' tag must not be empty"),
            std::string::npos)
      << e;
  e = toolsErrors("search()");
  EXPECT_NE(e.find("none, calculator("), std::string::npos) << e;
  EXPECT_NE(e.find(" or command(\"PROGRAM ARGS\""), std::string::npos) << e;
  e = toolsErrors("calculator(turns = 2)");
  EXPECT_NE(e.find("turns"), std::string::npos) << e;
}

TEST(ToolsField, ParsesAToolProgram) {
  ToolSpec t;
  EXPECT_EQ(toolsErrors("command(\"python3 tool.py\", timeout = 2.5, "
                        "start_timeout = 30, max_bytes = 100, open = \"[\", "
                        "close = \"]\")",
                        &t),
            "");
  EXPECT_EQ(t.kind, ToolSpec::Kind::Command);
  EXPECT_EQ(t.command, "python3 tool.py");
  EXPECT_EQ(t.timeout, 2.5);
  EXPECT_EQ(t.startTimeout, 30.0);
  EXPECT_EQ(t.maxBytes, 100);
  EXPECT_EQ(t.maxTurns, 3);
  EXPECT_EQ(t.syntax.open, "[");
  EXPECT_EQ(t.syntax.resultOpen, "<r>");
  EXPECT_EQ(toolsErrors("calculator()", &t), "");
  EXPECT_EQ(t.kind, ToolSpec::Kind::Calculator);
}

TEST(ToolsField, BadToolProgramsAreErrorsAtTheField) {
  std::string e = toolsErrors("command()");
  EXPECT_NE(e.find("t.cac:6:11: error: 'command' needs the argument 'cmd'"),
            std::string::npos)
      << e;
  e = toolsErrors("command(\" \")");
  EXPECT_NE(e.find("t.cac:6:19: error: the tool command is empty"),
            std::string::npos)
      << e;
  e = toolsErrors("command(\"t\", timeout = 0)");
  EXPECT_NE(e.find("'timeout' of 'command' must be in (0, 86400]"),
            std::string::npos)
      << e;
  e = toolsErrors("command(\"t\", max_bytes = 0)");
  EXPECT_NE(e.find("'max_bytes' of 'command' must be in [1, 16777216]"),
            std::string::npos)
      << e;
  e = toolsErrors("command(\"t\", open = \"\")");
  EXPECT_NE(e.find("the tool command's 'open' tag must not be empty"),
            std::string::npos)
      << e;
  // The program's own arguments are not the calculator's.
  e = toolsErrors("calculator(timeout = 2)");
  EXPECT_NE(e.find("unknown argument 'timeout' of 'calculator'"),
            std::string::npos)
      << e;
}

//===--- A tool program as the hook ---------------------------------------===//

class ToolProgramHook : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cac-tool-program-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A program that logs each request and replies `got CALL`, or hangs
  /// (blocked reading) on a call holding `9`, writes nonsense on a call
  /// holding `!`, exits on a call holding `x`.
  std::unique_ptr<ToolCommand> program(double timeout = 10.0) {
    ToolCommandOptions o;
    o.command = "printf '{\"ready\": true}\\n'; while IFS= read -r l; do "
                "printf '%s\\n' \"$l\" >>got.jsonl; "
                "c=${l#*\\\"call\\\":\\\"}; c=${c%%\\\"*}; case $c in "
                "*9*) cat >/dev/null;; *!*) echo nonsense;; *x*) exit 3;; "
                "*) printf '{\"observation\": \"got %s\"}\\n' \"$c\";; "
                "esac; done";
    o.dir = dir_;
    o.timeout = timeout;
    return std::make_unique<ToolCommand>(o);
  }
  size_t requests() const {
    std::ifstream in(dir_ / "got.jsonl");
    size_t n = 0;
    for (std::string line; std::getline(in, line);)
      ++n;
    return n;
  }

  fs::path dir_;
};

TEST_F(ToolProgramHook, TheProgramsObservationIsTheReply) {
  CharTokenizer tok;
  std::unique_ptr<ToolCommand> tool = program();
  ToolSpec spec = bracketCalculator(2);
  spec.kind = ToolSpec::Kind::Command;
  ToolHook hook = commandTool(tok, spec, *tool, "t.cac:4:11: tools");
  std::optional<ToolReply> r = hook(rowOf(tok, "12[12*7]"));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok);
  EXPECT_FALSE(r->failed);
  EXPECT_EQ(tok.decode(r->observation), "=got 12*7");
  EXPECT_EQ(requests(), 1u);
  // No call closed: the program is not asked.
  EXPECT_FALSE(hook(rowOf(tok, "[12*7")));
  // A closing tag with no opening one, and a call past the turn limit, are
  // answered without the program.
  r = hook(rowOf(tok, "7]"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_FALSE(r->failed);
  EXPECT_EQ(tok.decode(r->observation),
            "=[tool error: a closing tag without an opening one]");
  GeneratedSequence past = rowOf(tok, "[1+1]");
  past.toolCalls = 2;
  r = hook(past);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->observation.empty());
  EXPECT_EQ(requests(), 1u);
  // The second call of a row is its turn 2, with the row's prompt.
  GeneratedSequence second = rowOf(tok, "[1+1]=got 1+1[2+2]");
  second.observation.assign(second.tokens.size(), 0);
  std::fill(second.observation.begin() + 5, second.observation.begin() + 13, 1);
  second.toolCalls = 1;
  r = hook(second);
  ASSERT_TRUE(r);
  EXPECT_EQ(tok.decode(r->observation), "=got 2+2");
  std::ifstream in(dir_ / "got.jsonl");
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  json req = json::parse(line);
  EXPECT_EQ(req["call"], "2+2");
  EXPECT_EQ(req["turn"], 2);
  EXPECT_EQ(req["prompt"], "q");
}

TEST_F(ToolProgramHook, AHangingCallIsCutAtTheTimeoutAndCounted) {
  CharTokenizer tok;
  std::unique_ptr<ToolCommand> tool = program(0.5);
  ToolSpec spec = bracketCalculator(2);
  spec.kind = ToolSpec::Kind::Command;
  ToolHook hook = commandTool(tok, spec, *tool, "t.cac:4:11: tools");
  std::optional<ToolReply> r = hook(rowOf(tok, "[9*9]"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_TRUE(r->failed);
  EXPECT_EQ(tok.decode(r->observation), "=[tool error: no reply within 0.5 s]");
  // The next call reaches a new program.
  r = hook(rowOf(tok, "[1+1]"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->failed);
  EXPECT_EQ(tok.decode(r->observation), "=got 1+1");
  EXPECT_EQ(tool->restarts(), 1u);
}

// Each sampling pass makes its own hook; the warning comes once a run.
TEST_F(ToolProgramHook, TheFirstFailedCallOfARunIsReported) {
  CharTokenizer tok;
  std::unique_ptr<ToolCommand> tool = program();
  ToolSpec spec = bracketCalculator(2);
  spec.kind = ToolSpec::Kind::Command;
  ToolHook first = commandTool(tok, spec, *tool, "t.cac:4:11: tools");
  ToolHook second = commandTool(tok, spec, *tool, "t.cac:4:11: tools");
  ::testing::internal::CaptureStderr();
  std::optional<ToolReply> a = first(rowOf(tok, "[x]"));
  std::optional<ToolReply> b = second(rowOf(tok, "[1x]"));
  std::optional<ToolReply> c = first(rowOf(tok, "[2x]"));
  std::string err = ::testing::internal::GetCapturedStderr();
  for (const std::optional<ToolReply> &r : {a, b, c}) {
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->failed);
    EXPECT_EQ(tok.decode(r->observation),
              "=[tool error: it exited with status 3]");
  }
  EXPECT_EQ(tool->restarts(), 2u);
  size_t at = err.find("cac-run: warning: t.cac:4:11: tools: tool command '");
  EXPECT_NE(at, std::string::npos) << err;
  EXPECT_NE(err.find("failed on a call (it exited with status 3)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("cac-run: warning:", at + 1), std::string::npos) << err;
}

TEST_F(ToolProgramHook, AProtocolBreakIsAnErrorNamingTheField) {
  CharTokenizer tok;
  std::unique_ptr<ToolCommand> tool = program();
  ToolSpec spec = bracketCalculator(2);
  spec.kind = ToolSpec::Kind::Command;
  ToolHook hook = commandTool(tok, spec, *tool, "t.cac:4:11: tools");
  try {
    hook(rowOf(tok, "[1!]"));
    ADD_FAILURE() << "no error";
  } catch (const std::exception &e) {
    EXPECT_NE(
        std::string(e.what()).find("t.cac:4:11: tools: tool command 'printf"),
        std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(
                  "answered 'nonsense' to call 1 ('1!'): expected one line "
                  "of JSON per call"),
              std::string::npos)
        << e.what();
  }
}

//===--- Training on the calculator task ----------------------------------===//

class ToolTrainer : public ::testing::Test {
protected:
  void SetUp() override {
    std::string bundles = CAC_TEST_TRAIN_BUNDLES;
    if (bundles.empty() ||
        !fs::exists(fs::path(bundles) / "grpo" / "manifest.json"))
      GTEST_SKIP() << "no compiled stdlib bundles";
    dir_ = fs::temp_directory_path() /
           ("cac-tool-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  /// Two-digit products with the calculator (or the tool \p tools), a
  /// short SFT on its calls.
  std::optional<TrainConfig>
  config(const std::string &estimator, const std::string &extra,
         std::string &errors,
         const std::string &tools = "calculator(max_turns = 2, open = "
                                    "\"[\", close = \"]\", result_open = "
                                    "\"=\", result_close = \"\")",
         const std::string &eval = "greedy(every = 0, size = 8)") {
    std::string est = (fs::path(CAC_TEST_TRAIN_BUNDLES) / estimator).string();
    std::string src =
        "train tools {\n"
        "  model = builtin(\"custom\", hidden = 32, layers = 1, heads = 2, "
        "kv_heads = 1, ffn = 64, max_positions = 48)\n"
        "  task = arith(digits = 2, ops = \"*\")\n"
        "  tools = " +
        tools +
        "\n"
        "  estimator = bundle(\"" +
        est + "\")\n" + extra +
        "  rollout = group(n = 4, max_tokens = 16)\n"
        "  prompts = 4\n"
        "  minibatches = 2\n"
        "  warm_start = sft(steps = 30, batch = 16, lr = 1e-2)\n"
        "  steps = 3\n"
        "  eval = " +
        eval +
        "\n"
        "  threads = 1\n"
        "  seed = 5\n"
        "  out = \"" +
        (dir_ / "out").string() + "\"\n}\n";
    fs::path file = dir_ / "train.cac";
    std::ofstream(file) << src;
    return loadTrainFile(file, errors);
  }

  std::vector<json> run(const TrainConfig &cfg) {
    TrainerOptions opts;
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    DiagnosticEngine diag(cfg.file.string(), "");
    EXPECT_TRUE(t.prepare(diag)) << diag.render();
    t.run();
    return t.metrics();
  }

  /// The diagnostics of preparing \p cfg (empty: it prepares).
  static std::string prepareErrors(const TrainConfig &cfg) {
    TrainerOptions opts;
    opts.progress = false;
    opts.verbose = false;
    Trainer t(cfg, opts);
    std::ifstream in(cfg.file);
    std::stringstream src;
    src << in.rdbuf();
    DiagnosticEngine diag(cfg.file.string(), src.str());
    t.prepare(diag);
    return diag.render();
  }

  /// The RL rows have finite metrics, the tool's among them; returns the
  /// turns summed over the rows.
  static double expectFiniteToolMetrics(const std::vector<json> &rows) {
    double turns = 0;
    int rl = 0;
    for (const json &r : rows) {
      if (r["phase"] != "rl")
        continue;
      ++rl;
      for (const char *k : {"loss", "pg_loss", "grad_norm", "reward_mean",
                            "entropy", "turns", "tool_accuracy"}) {
        EXPECT_TRUE(r.contains(k) && r[k].is_number() &&
                    std::isfinite(r[k].get<double>()))
            << k << ": " << r;
      }
      double acc = r.value("tool_accuracy", -1.0);
      EXPECT_GE(acc, 0.0);
      EXPECT_LE(acc, 1.0);
      turns += r.value("turns", 0.0);
    }
    EXPECT_EQ(rl, 3);
    return turns;
  }

  fs::path dir_;
};

TEST_F(ToolTrainer, GrpoTrainsWithTheCalculator) {
  std::string errors;
  auto cfg = config("grpo", "  critic = none\n", errors);
  ASSERT_TRUE(cfg) << errors;
  std::vector<json> rows = run(*cfg);
  // After the SFT on calls, the rollouts call the calculator.
  EXPECT_GT(expectFiniteToolMetrics(rows), 0.0);
  std::ifstream csv(dir_ / "out" / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",turns,tool_accuracy,"), std::string::npos) << header;
}

TEST_F(ToolTrainer, GaeWithAValueHeadTrainsWithTheCalculator) {
  std::string errors;
  auto cfg = config("gae", "  critic = value_head(coef = 0.5)\n", errors);
  ASSERT_TRUE(cfg) << errors;
  std::vector<json> rows = run(*cfg);
  EXPECT_GT(expectFiniteToolMetrics(rows), 0.0);
  for (const json &r : rows) {
    if (r["phase"] != "rl")
      continue;
    EXPECT_TRUE(std::isfinite(r["value_loss"].get<double>())) << r;
  }
}

TEST_F(ToolTrainer, ToolsNeedTheGroupPlan) {
  std::string errors;
  auto cfg = config("grpo", "  critic = none\n", errors);
  ASSERT_TRUE(cfg) << errors;
  std::string src;
  {
    std::ifstream in(dir_ / "train.cac");
    std::stringstream ss;
    ss << in.rdbuf();
    src = ss.str();
  }
  size_t at = src.find("rollout = group(n = 4, max_tokens = 16)");
  ASSERT_NE(at, std::string::npos);
  src.replace(
      at, 39,
      "rollout = tree(branches = \"2-2\", seg_len = 4, max_tokens = 16)");
  std::ofstream(dir_ / "tree.cac") << src;
  EXPECT_FALSE(loadTrainFile(dir_ / "tree.cac", errors));
  EXPECT_NE(errors.find("tools need the group rollout plan (rollout = "
                        "group(..)); this file's plan is tree"),
            std::string::npos)
      << errors;
}

//===--- Training with a tool program -------------------------------------===//

TEST_F(ToolTrainer, AToolProgramThatCannotStartIsAnErrorAtTheField) {
  std::string errors;
  auto cfg = config("grpo", "  critic = none\n", errors,
                    "command(\"./no-such-tool\", open = \"[\", close = \"]\")");
  ASSERT_TRUE(cfg) << errors;
  std::string e = prepareErrors(*cfg);
  EXPECT_NE(e.find((dir_ / "train.cac").string() +
                   ":4:11: error: tool command './no-such-tool': it ended "
                   "before its ready line: it exited with status 127"),
            std::string::npos)
      << e;
}

/// The tool-program metric of every RL row, which must be a finite
/// fraction; returns their sum.
double toolFailures(const std::vector<json> &rows) {
  double sum = 0;
  for (const json &r : rows) {
    if (r["phase"] != "rl")
      continue;
    EXPECT_TRUE(r.contains("tool_failures") && r["tool_failures"].is_number())
        << r;
    double f = r.value("tool_failures", -1.0);
    EXPECT_GE(f, 0.0) << r;
    EXPECT_LE(f, 1.0) << r;
    sum += f;
  }
  return sum;
}

// examples/tools/calc_tool.py answers the calls of the SFT targets and of
// the rollouts; its observations are the rollouts' observation tokens.
TEST_F(ToolTrainer, GrpoTrainsWithAToolProgram) {
  if (!fs::exists("/usr/bin/python3"))
    GTEST_SKIP() << "no /usr/bin/python3";
  fs::path tool =
      fs::path(CAC_TEST_SOURCE_DIR) / "examples" / "tools" / "calc_tool.py";
  std::string errors;
  auto cfg = config("grpo", "  critic = none\n", errors,
                    "command(\"/usr/bin/python3 " + tool.string() +
                        "\", timeout = 60, max_turns = 2, open = \"[\", "
                        "close = \"]\", result_open = \"=\", result_close = "
                        "\"\")");
  ASSERT_TRUE(cfg) << errors;
  std::vector<json> rows = run(*cfg);
  EXPECT_GT(expectFiniteToolMetrics(rows), 0.0);
  EXPECT_EQ(toolFailures(rows), 0.0);
  std::ifstream csv(dir_ / "out" / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",turns,tool_accuracy,tool_failures,"),
            std::string::npos)
      << header;
}

// A program that blocks forever on the first call that is not its prompt's
// expression (the SFT targets' calls are; no greedy evaluation calls it
// first): the call, a rollout's, is cut at the timeout, the policy sees the
// error, the program starts again and the step's tool_failures counts it.
TEST_F(ToolTrainer, AHangingToolProgramIsCutAndCounted) {
  std::string program =
      "printf '{\\\"ready\\\": true}\\\\n'; while IFS= read -r l; do "
      "c=${l#*\\\\\\\"call\\\\\\\":\\\\\\\"}; c=${c%%\\\\\\\"*}; "
      "p=${l#*\\\\\\\"prompt\\\\\\\":\\\\\\\"}; p=${p%%\\\\\\\"*}; "
      "if [ \\\"$c=\\\" != \\\"$p\\\" ] && [ ! -e hung ]; then touch hung; "
      "cat >/dev/null; fi; echo '{\\\"observation\\\": \\\"1\\\"}'; done";
  std::string errors;
  auto cfg = config("grpo", "  critic = none\n", errors,
                    "command(\"" + program +
                        "\", timeout = 0.5, max_turns = 2, open = \"[\", "
                        "close = \"]\", result_open = \"=\", result_close = "
                        "\"\")",
                    "none");
  ASSERT_TRUE(cfg) << errors;
  std::vector<json> rows = run(*cfg);
  expectFiniteToolMetrics(rows);
  EXPECT_TRUE(fs::exists(dir_ / "hung"));
  EXPECT_GT(toolFailures(rows), 0.0);
}

} // namespace
