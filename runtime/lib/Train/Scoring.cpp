//===- Scoring.cpp - Score: rollout-time log-probabilities and values -----===//

#include "Phases.h"

#include "cac/Runtime/Train/Objective.h"

#include <algorithm>

namespace cac::rt::train {

at::Tensor rolloutLogProbs(TrainerState &s, TransformerLM &model,
                           const std::vector<const Rollout *> &rows) {
  const ModelConfig &c = model->config();
  torch::NoGradGuard ng;
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < rows.size();) {
    std::vector<const Rollout *> group;
    int64_t L = 1;
    for (; i < rows.size(); ++i) {
      int64_t len = static_cast<int64_t>(rows[i]->prompt.size() +
                                         rows[i]->response.size());
      int64_t n = static_cast<int64_t>(group.size()) + 1, l = std::max(L, len);
      double perLayer =
          4.0 * double(n) * double(l) *
          double(c.numAttentionHeads * l + 3 * c.intermediateSize);
      if (!group.empty() && perLayer > double(int64_t(1) << 30))
        break;
      L = l;
      group.push_back(rows[i]);
    }
    Padded pd = padRollouts(group, s.task.padId, s.device());
    parts.push_back(responseLogProbs(model,
                                     model->forwardHidden(pd.ids, pd.mask), pd,
                                     s.cfg.rollout.temperature));
  }
  if (parts.empty())
    return at::zeros({0},
                     at::TensorOptions().dtype(at::kFloat).device(s.device()));
  return parts.size() == 1 ? parts.front() : at::cat(parts);
}

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
    sc.refLogp = rolloutLogProbs(s, m.reference, ptrs);
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
