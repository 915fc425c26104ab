//===- WarmStart.cpp - The SFT warm start ---------------------------------===//

#include "Phases.h"

#include "cac/Runtime/Train/Objective.h"

#include <cmath>
#include <limits>

namespace cac::rt::train {

nlohmann::json sftStep(TrainerState &s, int64_t sftIndex) {
  const TrainConfig &cfg = s.cfg;
  const TaskSource &task = s.task;
  auto t0 = Clock::now();
  double lr = setLr(s, scheduleFactor(cfg.sft.schedule.value_or(cfg.schedule),
                                      sftIndex, cfg.sft.steps));
  // This rank's share of the batch [first, first + b).
  auto [first, end] = s.world.shard(cfg.sft.batch);
  int64_t b = end - first;
  std::vector<Rollout> rows(b);
  std::vector<const Rollout *> ptrs;
  for (int64_t i = 0; i < b; ++i) {
    Problem p = task.trainProblem(
        static_cast<uint64_t>(sftIndex * cfg.sft.batch + first + i));
    rows[i].prompt = task.encodePrompt(p);
    rows[i].response = task.targetTokens(p, rows[i].obs);
    if (task.eosId >= 0) {
      rows[i].response.push_back(task.eosId);
      if (!rows[i].obs.empty())
        rows[i].obs.push_back(0);
    }
    ptrs.push_back(&rows[i]);
  }
  Padded pd = padRollouts(ptrs, task.padId, s.device());
  s.models.policy->train();
  // The mean over the world's tokens: each rank sums its own and divides by
  // the world's count.
  std::vector<double> count{static_cast<double>(pd.numTokens)};
  s.world.sum(count);
  double numTokens = count[0];
  std::vector<double> part{0.0};
  if (b > 0) {
    at::Tensor h = s.models.policy->forwardHidden(pd.ids, pd.mask);
    at::Tensor logp = responseLogProbs(s.models.policy, h, pd, 1.0);
    at::Tensor loss = -logp.sum() / numTokens;
    loss.backward();
    part[0] = loss.item<double>();
  }
  s.world.sum(part);
  double norm = std::numeric_limits<double>::quiet_NaN();
  if (skipNonFinite(s, "loss", !std::isfinite(part[0])))
    s.models.optimizer->zero_grad();
  else
    norm = optimizerStep(s);
  double dt = seconds(t0);
  nlohmann::json row = {{"step", s.step + 1}, {"phase", "sft"},
                        {"loss", part[0]},    {"grad_norm", norm},
                        {"lr", lr},           {"tokens_per_s", numTokens / dt},
                        {"time_step_s", dt}};
  if (s.opts.skipNonFinite)
    row["nonfinite_skips"] = s.nonFiniteSkips;
  return row;
}

} // namespace cac::rt::train
