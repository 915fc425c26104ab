//===- RolloutPhase.cpp - Generate: the step's rollouts -------------------===//

#include "Phases.h"

#include "cac/Runtime/Train/Distributed.h"

#include <algorithm>
#include <cmath>

namespace cac::rt::train {

namespace {

/// With rollouts sampled from the policy's copy in another dtype
/// (rollout_dtype): replaces each action token's sampler log-probability
/// with the policy's own, so that the loss's ratio, the KL terms and the
/// estimator read the model the update trains (as verl recomputes the old
/// log-probabilities with its actor). Returns the sum of |sampler - policy|
/// over the actions; 0 and nothing changed when the rollouts came from the
/// policy itself.
double relabelLogProbs(TrainerState &s, std::vector<Rollout> &rolls) {
  if (!s.models.rollout || rolls.empty())
    return 0.0;
  std::vector<const Rollout *> rows;
  for (const Rollout &r : rolls)
    rows.push_back(&r);
  std::vector<float> policy =
      hostFloats(rolloutLogProbs(s, s.models.policy, rows));
  double diff = 0;
  size_t k = 0;
  for (Rollout &r : rolls)
    for (size_t t = 0; t < r.logp.size(); ++t) {
      if (r.isObs(t))
        continue;
      diff += std::abs(static_cast<double>(r.logp[t]) - policy.at(k));
      r.logp[t] = policy.at(k++);
    }
  return diff;
}

/// The segment starts the estimator picks for \p rolls (its `_seg_start`
/// output, with zero MC values: the segmentation must not read them).
std::vector<std::vector<int64_t>>
segmentStarts(TrainerState &s, const std::vector<Rollout> &sampled) {
  // The estimator reads the policy's log-probabilities, as in the step.
  std::vector<Rollout> relabeled;
  if (s.models.rollout) {
    relabeled = sampled;
    relabelLogProbs(s, relabeled);
  }
  const std::vector<Rollout> &rolls = s.models.rollout ? relabeled : sampled;
  Scores sc = score(s, rolls);
  TensorMap outs = runEstimator(s, rolls, sc, RolloutBatch{});
  std::vector<std::vector<int64_t>> starts(rolls.size());
  auto it = outs.find("_seg_start");
  std::vector<float> ss;
  if (it != outs.end())
    ss = hostFloats(it->second);
  int64_t off = 0;
  const float *sp = it != outs.end() ? ss.data() : nullptr;
  for (size_t i = 0; i < rolls.size(); ++i) {
    int64_t T = static_cast<int64_t>(rolls[i].response.size());
    for (int64_t t = 0; t < T; ++t)
      if (sp ? sp[off + t] != 0.0f : t == 0)
        starts[i].push_back(t);
    off += T;
  }
  return starts;
}

/// Samples the rollouts of \p prompts, the global batch's prompts
/// [p0, p0 + prompts.size()), as the file's plan says.
RolloutBatch sampleRollouts(TrainerState &s,
                            const std::vector<Problem> &problems,
                            const std::vector<std::vector<int64_t>> &prompts,
                            int64_t rlIndex, int64_t p0) {
  PlanContext ctx;
  ctx.model = rolloutPolicy(s);
  ctx.options = s.task.samplingOptions(false);
  ctx.tokenizer = s.task.tokenizer.get();
  ctx.gen = &s.sampleGen;
  if (s.world.communicator()) {
    // Workers draw each token's uniform as a function of (seed, step,
    // global prompt, stream, position), so the rollouts do not depend on
    // the worker count; a lone process draws from its sampling generator.
    const uint64_t seed = s.cfg.seed;
    ctx.uniform = [=](int64_t prompt, int64_t stream, int64_t t) {
      return rolloutUniform(seed, rlIndex, p0 + prompt, stream, t);
    };
  }
  ctx.reward = [&](int64_t g, const std::string &text) {
    return s.task.reward(problems.at(static_cast<size_t>(g)), text);
  };
  const RolloutSpec &r = s.cfg.rollout;
  switch (r.kind) {
  case RolloutSpec::Kind::Chain:
    return sampleChain(ctx, prompts, r, [&](const std::vector<Rollout> &x) {
      return segmentStarts(s, x);
    });
  case RolloutSpec::Kind::Tree:
    return sampleTree(ctx, prompts, r);
  case RolloutSpec::Kind::Forest:
    return sampleForest(
        ctx, prompts, r,
        // The threshold decays by tau_step per RL step down to tau_min
        // (a floor above tau does not raise it).
        std::max(std::min(r.tauMin, r.tau),
                 r.tau - static_cast<double>(rlIndex) * r.tauStep));
  case RolloutSpec::Kind::Group:
    break;
  }
  return sampleGroups(ctx, prompts, r.n);
}

} // namespace

StepBatch sampleStep(TrainerState &s, int64_t rlIndex) {
  StepBatch batch;
  batch.rlIndex = rlIndex;
  // This rank takes the prompts [p0, p0 + P) of the global batch of GP
  // prompts with every rollout of each (whole groups, chains, trees), so
  // the estimator's groups and trees stay local.
  const int64_t GP = s.cfg.prompts;
  auto [p0, p1] = s.world.shard(GP);
  batch.p0 = p0;
  std::vector<Problem> problems;
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < p1 - p0; ++i) {
    // RL prompts come from a stream disjoint from the SFT one.
    problems.push_back(s.task.trainProblem(
        (uint64_t(1) << 40) + static_cast<uint64_t>(rlIndex * GP + p0 + i)));
    prompts.push_back(s.task.encodePrompt(problems.back()));
    // Refused at the first prompt, before the other prompts are built,
    // where the rollouts cannot fit.
    if (i == 0)
      checkRolloutMemory(s, rlIndex, p1 - p0,
                         static_cast<int64_t>(prompts.back().size()));
  }
  s.models.policy->eval();
  batch.plan = sampleRollouts(s, problems, prompts, rlIndex, p0);
  RolloutTotals &t = batch.totals;
  t.logpDiff = relabelLogProbs(s, batch.plan.rolls);
  int64_t tokens = 0;
  for (const Rollout &r : batch.plan.rolls) {
    t.reward += r.reward;
    t.correct += r.correct ? 1 : 0;
    for (float e : r.entropy)
      t.entropy += e; // 0 on observation tokens
    tokens += r.actions();
    t.toolCalls += static_cast<double>(r.toolCalls);
    t.toolTurns += static_cast<double>(r.toolTurns);
    t.toolOk += static_cast<double>(r.toolOk);
    t.toolFailed += static_cast<double>(r.toolFailed);
  }
  t.tokens = static_cast<double>(tokens);
  t.paths = static_cast<double>(batch.plan.rolls.size());
  return batch;
}

void addPlanStats(const TrainerState &s, nlohmann::json &row, PlanStats st) {
  if (s.cfg.rollout.kind == RolloutSpec::Kind::Group)
    return;
  std::vector<double> v{
      double(st.tokensComputed), double(st.tokensFlattened),
      double(st.tokensSampled),  double(st.tokensFlattenedResponse),
      double(st.nodes),          double(st.leaves),
      double(st.sharedQueries)};
  s.world.sum(v);
  st.tokensComputed = std::llround(v[0]);
  st.tokensFlattened = std::llround(v[1]);
  st.tokensSampled = std::llround(v[2]);
  st.tokensFlattenedResponse = std::llround(v[3]);
  st.nodes = std::llround(v[4]);
  st.leaves = std::llround(v[5]);
  st.sharedQueries = std::llround(v[6]);
  row["tokens_computed"] = st.tokensComputed;
  row["tokens_flattened"] = st.tokensFlattened;
  row["compute_ratio"] = st.tokensFlattened > 0
                             ? static_cast<double>(st.tokensComputed) /
                                   static_cast<double>(st.tokensFlattened)
                             : 0.0;
  row["tokens_sampled"] = st.tokensSampled;
  row["tokens_flattened_response"] = st.tokensFlattenedResponse;
  row["sample_ratio"] =
      st.tokensFlattenedResponse > 0
          ? static_cast<double>(st.tokensSampled) /
                static_cast<double>(st.tokensFlattenedResponse)
          : 0.0;
  row["plan_nodes"] = st.nodes;
  row["plan_leaves"] = st.leaves;
  if (s.cfg.rollout.kind == RolloutSpec::Kind::Chain)
    row["mc_shared"] = st.sharedQueries;
}

} // namespace cac::rt::train
