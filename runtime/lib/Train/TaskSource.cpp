//===- TaskSource.cpp - Problems, prompts and rewards of a run ------------===//

#include "TrainerState.h"

#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Tasks/Calculator.h"
#include "cac/Runtime/Train/ToolUse.h"

#include <algorithm>

namespace cac::rt::train {

bool TaskSource::load(const TrainConfig &config, DiagnosticEngine &diag) {
  cfg = &config;
  if (cfg->model.charTokenizer())
    tokenizer = std::make_unique<CharTokenizer>();
  else
    tokenizer = loadTokenizer(cfg->model.tokenizerFolder());
  eosId = tokenizer->eosId().value_or(-1);
  padId = tokenizer->padId().value_or(eosId >= 0 ? eosId : 0);
  const TaskSpec &t = cfg->task;
  if (t.kind == TaskSpec::Kind::Arith && t.digits > 0) {
    twoOp.emplace(cfg->seed, t.digits, t.ops, t.evalFraction, t.steps);
    evalSet = twoOp->evalSet(static_cast<size_t>(cfg->eval.size));
  } else if (t.kind == TaskSpec::Kind::Arith) {
    ArithmeticTask::Options o;
    o.seed = cfg->seed;
    o.minLevel = t.minLevel;
    o.maxLevel = t.maxLevel;
    o.evalFraction = t.evalFraction;
    arith.emplace(o);
    evalSet = arith->evalSet(static_cast<size_t>(cfg->eval.size));
  } else {
    jsonlTask = t.kind == TaskSpec::Kind::Jsonl;
    dataTrain =
        jsonlTask ? loadJsonl(t.trainPath, t.keys) : loadGsm8k(t.trainPath);
    dataEval =
        jsonlTask ? loadJsonl(t.evalPath, t.keys) : loadGsm8k(t.evalPath);
    if (jsonlTask)
      checkDataset();
    evalSet.assign(dataEval.begin(),
                   dataEval.begin() +
                       std::min<size_t>(dataEval.size(), cfg->eval.size));
  }

  if (cfg->chat.enabled && !loadChat(diag))
    return false;

  if (cfg->tools.enabled() && !startTool(diag))
    return false;
  if (cfg->reward.kind == RewardSpec::Kind::Command) {
    try {
      rewardCommand = std::make_unique<RewardCommand>(
          cfg->reward.command, cfg->file.parent_path(), cfg->reward.timeout);
    } catch (const std::exception &e) {
      diag.error(cfg->reward.loc, e.what());
      return false;
    }
  }
  return true;
}

/// Checks that the tokenizer writes the tool's replies and starts a tool
/// program, so that one that cannot start is reported at the `tools` field.
bool TaskSource::startTool(DiagnosticEngine &diag) {
  const ToolSpec &t = cfg->tools;
  std::string why = checkToolTokens(*tokenizer, t);
  if (!why.empty()) {
    diag.error(t.loc, why);
    return false;
  }
  if (t.kind != ToolSpec::Kind::Command)
    return true;
  ToolCommandOptions o;
  o.command = t.command;
  o.dir = cfg->file.parent_path();
  o.timeout = t.timeout;
  o.startTimeout = t.startTimeout;
  o.maxBytes = static_cast<size_t>(t.maxBytes);
  try {
    toolCommand = std::make_unique<ToolCommand>(o);
  } catch (const std::exception &e) {
    diag.error(t.loc, e.what());
    return false;
  }
  return true;
}

std::string TaskSource::toolField() const {
  return cfg->file.string() + ":" + std::to_string(cfg->tools.loc.line) + ":" +
         std::to_string(cfg->tools.loc.col) + ": tools";
}

/// Reads the template and renders the prompts known now (the datasets', or
/// the evaluation set), so that a template that fails on them is reported
/// at the `chat` field before the run starts.
bool TaskSource::loadChat(DiagnosticEngine &diag) {
  const ChatSpec &c = cfg->chat;
  try {
    chat.emplace(loadChatTemplate(
        c.folder.empty() ? cfg->model.tokenizerFolder() : c.folder));
    chatVariables = nlohmann::ordered_json::object();
    for (const auto &[name, json] : c.variables)
      chatVariables[name] = nlohmann::ordered_json::parse(json);
  } catch (const std::exception &e) {
    diag.error(c.loc, e.what());
    return false;
  }
  const Problem *current = nullptr;
  try {
    for (const std::vector<Problem> *set : {&dataTrain, &dataEval, &evalSet})
      for (const Problem &p : *set) {
        current = &p;
        promptText(p);
      }
  } catch (const std::exception &e) {
    diag.error(c.loc, current->id + ": " + e.what());
    return false;
  }
  return true;
}

Problem TaskSource::trainProblem(uint64_t index) const {
  if (twoOp)
    return twoOp->problem(Split::Train, index);
  if (arith)
    return arith->problem(Split::Train, index);
  return dataTrain[index % dataTrain.size()];
}

/// A jsonl dataset holds what its run reads: answers for the default
/// reward, solutions for an SFT warm start.
void TaskSource::checkDataset() const {
  auto need = [&](const std::vector<Problem> &set, bool answers) {
    for (const Problem &p : set)
      if ((answers ? p.answer : p.solution).empty())
        throw TrainError(
            p.id + ": no '" +
            (answers ? cfg->task.keys.answer : cfg->task.keys.solution) +
            "' field: " +
            (answers ? "the task's reward compares completions with it "
                       "(or give `reward = command(..)`)"
                     : "the SFT warm start trains on it (or set "
                       "`warm_start = none`)"));
  };
  if (cfg->reward.kind == RewardSpec::Kind::Task) {
    need(dataTrain, true);
    need(dataEval, true);
  }
  if (cfg->sft.steps > 0)
    need(dataTrain, false);
}

std::string TaskSource::promptText(const Problem &p) const {
  if (chat)
    return chat->render(promptMessages(cfg->chat.system, p.prompt), true,
                        chatVariables);
  if (arith || twoOp || jsonlTask)
    return p.prompt;
  return "Question: " + p.prompt + "\nAnswer:";
}

std::string TaskSource::targetText(const Problem &p) const {
  if (arith || twoOp)
    return cfg->task.lines ? ArithmeticTask::breakLines(p.solution)
                           : p.solution;
  // The chat template ends the prompt with the assistant's header, so the
  // answer follows without the space that follows GSM8K's "Answer:".
  if (jsonlTask || chat)
    return p.solution;
  return " " + p.solution;
}

std::vector<int64_t> TaskSource::targetTokens(const Problem &p,
                                              std::vector<uint8_t> &obs) const {
  obs.clear();
  if (!cfg->tools.enabled() || !(arith || twoOp))
    return tokenizer->encode(targetText(p), false);
  const ToolSyntax &syntax = cfg->tools.syntax;
  std::string_view expr = promptExpression(p.prompt);
  std::vector<int64_t> ids =
      tokenizer->encode(syntax.open + std::string(expr) + syntax.close, false);
  std::vector<int64_t> reply;
  if (toolCommand) {
    // The program's own reply, as a rollout calling it would see it.
    ToolAnswer answer;
    try {
      answer = toolCommand->call(expr, 1, promptText(p));
    } catch (const std::exception &e) {
      throw TrainError(toolField() + ": the SFT target of '" + p.id +
                       "': " + e.what());
    }
    reply = toolAnswerTokens(*tokenizer, syntax, answer);
  } else {
    reply = tokenizer->encode(
        calculatorObservation(evaluateCalculator(expr), syntax), false);
  }
  obs.assign(ids.size(), 0);
  obs.resize(ids.size() + reply.size(), 1);
  ids.insert(ids.end(), reply.begin(), reply.end());
  return ids;
}

double TaskSource::reward(const Problem &p,
                          const std::string &completion) const {
  if (rewardCommand)
    return rewardCommand->score(p.prompt, completion, p.answer, p.id);
  if (arith || twoOp)
    return ArithmeticTask::reward(p, completion);
  if (jsonlTask)
    return matchReward(p, completion);
  return gsm8kReward(p, completion);
}

std::vector<int64_t> TaskSource::encodePrompt(const Problem &p) const {
  // A chat template writes its own special tokens (BOS included), as
  // Hugging Face's apply_chat_template(tokenize=True) encodes without them.
  std::vector<int64_t> ids = tokenizer->encode(promptText(p), !chat);
  if (ids.empty() && tokenizer->bosId())
    ids.push_back(*tokenizer->bosId());
  return ids;
}

SamplingOptions TaskSource::samplingOptions(bool greedy) const {
  const RolloutSpec &r = cfg->rollout;
  SamplingOptions o;
  o.temperature = greedy ? 0.0 : r.temperature;
  o.topP = greedy ? 1.0 : r.topP;
  o.topK = greedy ? 0 : r.topK;
  o.maxNewTokens = r.maxTokens;
  if (eosId >= 0)
    o.stopTokens = {eosId};
  o.padId = padId;
  if (toolCommand)
    o.tool = commandTool(*tokenizer, cfg->tools, *toolCommand, toolField());
  else if (cfg->tools.enabled())
    o.tool = calculatorTool(*tokenizer, cfg->tools);
  return o;
}

} // namespace cac::rt::train
