//===- Scoring.cpp - Score: rollout-time log-probabilities and values -----===//

#include "Phases.h"

#include "cac/Runtime/Train/Objective.h"

namespace cac::rt::train {

Scores score(TrainerState &s, const std::vector<Rollout> &rolls) {
  Scores sc;
  ModelSet &m = s.models;
  std::vector<const Rollout *> ptrs;
  for (const Rollout &r : rolls)
    ptrs.push_back(&r);
  if (rolls.empty())
    return sc;
  sc.all = padRollouts(ptrs, s.task.padId, s.device());
  sc.oldLogp = packActions(rolls, &Rollout::logp, s.device());
  sc.entropy = packActions(rolls, &Rollout::entropy, s.device());
  torch::NoGradGuard ng;
  if (s.cfg.critic.kind == CriticSpec::Kind::ValueHead)
    sc.oldValues = values(m.policy, sc.all);
  else if (m.critic) {
    m.critic->eval();
    sc.oldValues = values(m.critic, sc.all);
  }
  if (s.est.promptCritic && sc.oldValues.defined()) {
    std::vector<int64_t> first;
    int64_t pos = 0;
    for (const Rollout &r : rolls) {
      first.push_back(pos);
      pos += r.actions();
    }
    sc.oldValues =
        at::sigmoid(sc.oldValues.index_select(0, s.onDevice(first, at::kLong)));
  }
  if (m.needReference)
    sc.refLogp = gatherResponse(
        tokenLogProbs(m.reference->forward(sc.all.ids, sc.all.mask), sc.all.ids,
                      s.cfg.rollout.temperature),
        sc.all);
  return sc;
}

double rewardKl(TrainerState &s, const Scores &sc, nlohmann::json &row) {
  if (!s.cfg.kl.inReward || s.cfg.kl.coef <= 0)
    return 0.0;
  std::vector<double> v{0.0, 0.0};
  if (sc.oldLogp.defined() && sc.oldLogp.numel() > 0) {
    v[0] =
        klEstimate(sc.oldLogp, sc.refLogp, s.cfg.kl.kind).sum().item<double>();
    v[1] = static_cast<double>(sc.oldLogp.numel());
  }
  s.world.sum(v);
  double stepKl = v[1] > 0 ? v[0] / v[1] : 0.0;
  row["kl_reward"] = s.klCoef * stepKl; // the mean penalty per token
  row["kl_coef"] = s.klCoef;
  return stepKl;
}

} // namespace cac::rt::train
