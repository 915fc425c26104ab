//===- Evaluation.cpp - Greedy held-out evaluation ------------------------===//

#include "Phases.h"

namespace cac::rt::train {

double evaluate(TrainerState &s) {
  const TaskSource &task = s.task;
  const std::vector<Problem> &evalSet = task.evalSet;
  if (evalSet.empty())
    return std::numeric_limits<double>::quiet_NaN();
  torch::NoGradGuard ng;
  s.models.policy->eval();
  at::Generator gen = makeGenerator(0);
  s.evalSamples.clear();
  const size_t chunk = 256;
  // Each rank decodes its share; the counts are summed.
  auto [from, to] = s.world.shard(static_cast<int64_t>(evalSet.size()));
  std::vector<double> counts{0.0, 0.0}; // correct, written in steps
  for (size_t b = from; b < static_cast<size_t>(to); b += chunk) {
    std::vector<std::vector<int64_t>> prompts;
    size_t e = std::min(static_cast<size_t>(to), b + chunk);
    for (size_t i = b; i < e; ++i)
      prompts.push_back(task.encodePrompt(evalSet[i]));
    auto out = generate(rolloutPolicy(s), prompts, task.samplingOptions(true),
                        gen, task.tokenizer.get(), 1);
    for (size_t i = b; i < e; ++i) {
      const std::string &text = out[i - b].text;
      double r = task.reward(evalSet[i], text);
      counts[0] += r >= 1.0 ? 1.0 : 0.0;
      counts[1] += TwoOperandTask::isStepped(text) ? 1.0 : 0.0;
      // Rank 0's share starts at problem 0: its first are the first.
      if (s.world.rank() == 0 &&
          static_cast<int64_t>(s.evalSamples.size()) < s.cfg.eval.samples)
        s.evalSamples.push_back({{"problem", evalSet[i].id},
                                 {"prompt", task.promptText(evalSet[i])},
                                 {"completion", text},
                                 {"answer", evalSet[i].answer},
                                 {"reward", r}});
    }
  }
  s.world.sum(counts);
  double n = static_cast<double>(evalSet.size());
  s.lastEvalSteps = task.twoOp && s.cfg.task.steps > 0.0
                        ? counts[1] / n
                        : std::numeric_limits<double>::quiet_NaN();
  return counts[0] / n;
}

void addEvalSteps(const TrainerState &s, nlohmann::json &row) {
  if (!std::isnan(s.lastEvalSteps))
    row["eval_steps_frac"] = s.lastEvalSteps;
}

void logSamples(TrainerState &s, int64_t stepNo, int64_t rlStep) {
  std::vector<nlohmann::json> rows;
  for (nlohmann::json r : s.evalSamples) {
    r["step"] = stepNo;
    r["rl_step"] = rlStep;
    rows.push_back(std::move(r));
  }
  s.samples->append(rows);
}

} // namespace cac::rt::train
