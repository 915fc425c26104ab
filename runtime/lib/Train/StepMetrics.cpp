//===- StepMetrics.cpp - Metrics: the RL step's row -----------------------===//

#include "Phases.h"

#include <algorithm>

namespace cac::rt::train {

namespace {

/// Sums the rank's totals over the world (each rank holds its part of
/// every sum), in one all-reduce.
void sumOverWorld(const World &world, RolloutTotals &t, UpdateStats &u) {
  std::vector<double> v{u.pgLoss,    u.valueLoss, u.kl,       u.loss,
                        u.clipFrac,  u.ratio,     t.reward,   t.correct,
                        t.entropy,   t.tokens,    t.paths,    t.toolCalls,
                        t.toolTurns, t.toolOk,    t.logpDiff, t.toolFailed};
  world.sum(v);
  t.toolCalls = v[11], t.toolTurns = v[12], t.toolOk = v[13];
  t.logpDiff = v[14], t.toolFailed = v[15];
  u.pgLoss = v[0], u.valueLoss = v[1], u.kl = v[2], u.loss = v[3];
  u.clipFrac = v[4], u.ratio = v[5];
  t.reward = v[6], t.correct = v[7], t.entropy = v[8];
  t.tokens = static_cast<double>(std::llround(v[9]));
  t.paths = v[10];
}

} // namespace

RolloutTotals stepMetrics(TrainerState &s, nlohmann::json &row, RolloutTotals t,
                          UpdateStats u, double stepKl) {
  const TrainConfig &cfg = s.cfg;
  sumOverWorld(s.world, t, u);
  double n = static_cast<double>(std::max<int64_t>(u.updates, 1));
  row["reward_mean"] = t.reward / t.paths;
  row["acc"] = t.correct / t.paths;
  row["loss"] = u.loss / n;
  row["pg_loss"] = u.pgLoss / n;
  if (cfg.critic.kind != CriticSpec::Kind::None)
    row["value_loss"] = u.valueLoss / n;
  if (s.models.needReference)
    row["kl"] = u.kl / n;
  row["entropy"] = t.tokens != 0 ? t.entropy / t.tokens : 0.0;
  row["clip_frac"] = u.clipFrac / n;
  row["ratio_mean"] = u.ratio / n;
  row["grad_norm"] = u.gradNorm / n;
  row["response_len"] = t.tokens / t.paths;
  if (s.models.rollout)
    row["rollout_logp_diff"] = t.tokens != 0 ? t.logpDiff / t.tokens : 0.0;
  if (cfg.tools.enabled()) {
    // Turns: calls answered per rollout; accuracy: of the calls closed
    // (those past the turn limit included), the ones that evaluated (0
    // when no rollout called the tool).
    row["turns"] = t.toolTurns / t.paths;
    row["tool_accuracy"] = t.toolCalls > 0 ? t.toolOk / t.toolCalls : 0.0;
    // A tool program's own failures (timeouts, exits, replies too long):
    // the fraction of the calls closed.
    if (cfg.tools.kind == ToolSpec::Kind::Command)
      row["tool_failures"] = t.toolCalls > 0 ? t.toolFailed / t.toolCalls : 0.0;
  }
  if (cfg.kl.inReward && cfg.kl.target > 0) {
    // The adaptive controller, after the step that used the coefficient.
    double err = std::clamp(stepKl / cfg.kl.target - 1.0, -0.2, 0.2);
    s.klCoef *= 1.0 + err * t.paths / cfg.kl.horizon;
  }
  return t;
}

} // namespace cac::rt::train
