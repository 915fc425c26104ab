//===- TrainerInputs.cpp - What the trainer feeds its kernels -------------===//

#include "TrainerInputs.h"

#include "cac/Runtime/Train/Objective.h"

#include <algorithm>

namespace cac::rt::train {

const std::vector<TrainerInput> &trainerInputs() {
  static const std::vector<TrainerInput> table = {
      {"logp", Domain::Token, true, true},
      {"logp_old", Domain::Token, true, false},
      {"p_old", Domain::Token, true, false},
      {"entropy", Domain::Token, true, true},
      {"value", Domain::Token, true, true},
      {"logp_ref", Domain::Token, true, true},
      {"reward", Domain::Seq, true, true},
      {"reward", Domain::Token, true, false},
      {"group", Domain::Seq, true, true},
      {"length", Domain::Seq, true, false},
      {"value", Domain::Seq, true, true},
      {"mc_value", Domain::Seg, true, false},
      {"newline", Domain::Token, true, false},
      {"turn_start", Domain::Token, true, true},
      {"adv", Domain::Token, false, true},
      {"weight", Domain::Token, false, true},
  };
  return table;
}

const TrainerInput *findEstimatorInput(const std::string &name, Domain domain) {
  for (const TrainerInput &in : trainerInputs())
    if (in.estimator && in.name == name && in.domain == domain)
      return &in;
  return nullptr;
}

bool objectiveMayRead(const std::string &name) {
  for (const TrainerInput &in : trainerInputs())
    if (in.objective && in.name == name)
      return true;
  return false;
}

std::string estimatorInputList() {
  std::string list;
  for (const TrainerInput &in : trainerInputs())
    if (in.estimator)
      list += (list.empty() ? "" : ", ") + std::string(in.name) + " : " +
              domainName(in.domain);
  return list;
}

std::string objectiveInputList() {
  std::vector<std::string> names{"logp_new"};
  for (const TrainerInput &in : trainerInputs())
    if (in.objective &&
        std::find(names.begin(), names.end(), in.name) == names.end())
      names.push_back(in.name);
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return list;
}

namespace {

/// The token reward of the batch (packed): R on each rollout's last token,
/// minus coef * KL(pi_old || pi_ref) on every token when the KL is in the
/// reward (the estimator of the rollout-time log-probabilities, k1 or k3).
at::Tensor tokenRewards(const InputSource &src) {
  const TrainerState &s = src.s;
  const Scores &sc = src.sc;
  std::vector<float> last(
      static_cast<size_t>(sc.oldLogp.defined() ? sc.oldLogp.size(0) : 0), 0.0f);
  size_t off = 0;
  for (const Rollout &x : src.rolls) {
    size_t n = static_cast<size_t>(x.actions());
    off += n;
    if (n > 0) // the last action: a response may end on an observation
      last[off - 1] = static_cast<float>(x.reward);
  }
  at::Tensor r = s.onDevice(last, at::kFloat);
  if (s.cfg.kl.inReward && s.cfg.kl.coef > 0 && r.numel() > 0)
    r = r - s.klCoef * klEstimate(sc.oldLogp, sc.refLogp, s.cfg.kl.kind);
  return r;
}

/// 1 on response tokens whose text holds a line break (VinePPO's steps).
at::Tensor newlineFlags(const InputSource &src) {
  std::vector<float> f;
  for (const Rollout &r : src.rolls)
    for (size_t t = 0; t < r.response.size(); ++t) {
      if (r.isObs(t))
        continue;
      int64_t id = r.response[t];
      std::string text;
      try {
        text = src.s.task.tokenizer->decode({id}, /*skipSpecialTokens=*/true);
      } catch (const std::exception &) {
      }
      f.push_back(text.find('\n') != std::string::npos ? 1.0f : 0.0f);
    }
  return src.s.onDevice(f, at::kFloat);
}

} // namespace

at::Tensor makeInput(const InputSource &src, const std::string &name,
                     Domain domain) {
  const TrainerState &s = src.s;
  const Scores &sc = src.sc;
  if (name == "logp" || name == "logp_old")
    return sc.oldLogp;
  if (name == "p_old")
    return sc.oldLogp.exp();
  if (name == "entropy")
    return sc.entropy;
  if (name == "value")
    return sc.oldValues;
  if (name == "logp_ref")
    return sc.refLogp;
  if (name == "reward" && domain == Domain::Token)
    return tokenRewards(src);
  if (name == "newline")
    return newlineFlags(src);
  if (name == "turn_start")
    return turnStarts(src.rolls, s.device());
  if (name == "adv")
    return src.adv;
  if (name == "weight")
    return src.weight;
  if (name == "mc_value")
    return !src.plan || src.plan->mcValue.empty()
               ? at::zeros({sc.oldLogp.size(0)},
                           at::TensorOptions(at::kFloat).device(s.device()))
               : s.onDevice(src.plan->mcValue, at::kFloat);
  // Per sequence.
  if (name == "reward") {
    std::vector<float> rewards;
    for (const Rollout &r : src.rolls)
      rewards.push_back(static_cast<float>(r.reward));
    return s.onDevice(rewards, at::kFloat);
  }
  std::vector<int64_t> v;
  for (const Rollout &r : src.rolls)
    v.push_back(name == "group" ? r.group : r.actions());
  return s.onDevice(v, at::kLong);
}

} // namespace cac::rt::train
