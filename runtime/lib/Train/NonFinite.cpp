//===- NonFinite.cpp - No NaN trains silently -----------------------------===//
//
// A step checks what it computes in order: the advantages (and returns), each
// minibatch's loss, the gradient norm, and the weights after the update. The
// first non-finite one stops the run with the step and the quantity named,
// before it reaches the weights or a checkpoint; with --skip-nonfinite the
// update it would feed is skipped and counted (docs/reliability.md). The
// checks only read what the step computed, so a finite run's numbers are
// unchanged.
//
//===----------------------------------------------------------------------===//

#include "Phases.h"

#include <cmath>

namespace cac::rt::train {

namespace {

/// "NaN" or "inf" for a non-finite tensor.
const char *kindOf(const at::Tensor &t) {
  return at::isnan(t).any().item<bool>() ? "NaN" : "inf";
}

} // namespace

std::string describeStep(const TrainerState &s) {
  int64_t current = s.step + 1, sft = s.cfg.sft.steps;
  if (current <= sft)
    return "step " + std::to_string(current) + " (SFT step " +
           std::to_string(current) + ")";
  return "step " + std::to_string(current) + " (RL step " +
         std::to_string(current - sft) + ")";
}

bool allFinite(const at::Tensor &t) {
  return !t.defined() || t.numel() == 0 || at::isfinite(t).all().item<bool>();
}

bool skipNonFinite(TrainerState &s, const std::string &what, bool bad,
                   const std::string &hint) {
  if (!s.opts.skipNonFinite) {
    if (bad)
      throw TrainError(describeStep(s) + ": the " + what +
                       " is not finite, so the run stops before it reaches "
                       "the weights (the last checkpoint holds the state "
                       "before it)" +
                       (hint.empty() ? "" : "; " + hint) +
                       "; --skip-nonfinite skips such updates instead");
    return false;
  }
  // Every rank skips the same updates (their collectives must pair up).
  std::vector<double> flag{bad ? 1.0 : 0.0};
  s.world.sum(flag);
  if (flag[0] == 0)
    return false;
  ++s.nonFiniteSkips;
  if (s.opts.verbose && s.bar)
    s.bar->message("cac-run: " + describeStep(s) + ": the " + what +
                   " is not finite; its update is skipped "
                   "(--skip-nonfinite)");
  return true;
}

bool skipNonFiniteTensor(TrainerState &s, const std::string &what,
                         const at::Tensor &t, const std::string &hint) {
  bool bad = !allFinite(t);
  return skipNonFinite(s, what + (bad ? std::string(" (") + kindOf(t) + ")" : ""),
                       bad, hint);
}

std::string firstNonFiniteParameter(TransformerLM &model) {
  if (!model)
    return {};
  for (const auto &p : model->named_parameters())
    if (!allFinite(p.value()))
      return p.key() + " (" + kindOf(p.value()) + ")";
  return {};
}

void checkWeights(TrainerState &s) {
  for (auto [name, model] : {std::pair<const char *, TransformerLM *>{
                                 "policy", &s.models.policy},
                             {"critic", &s.models.critic}}) {
    std::string bad = firstNonFiniteParameter(*model);
    if (!bad.empty())
      throw TrainError(describeStep(s) + ": the " + name + "'s weight " + bad +
                       " is not finite after the update; the run stops (the "
                       "last checkpoint holds the state before it)");
  }
}

} // namespace cac::rt::train
