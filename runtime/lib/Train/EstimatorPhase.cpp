//===- EstimatorPhase.cpp - Estimate: the advantages of the step ----------===//

#include "TrainerInputs.h"

#include <set>

namespace cac::rt::train {

TensorMap runEstimator(TrainerState &s, const std::vector<Rollout> &rolls,
                       const Scores &sc, const RolloutBatch &plan) {
  const Manifest &m = s.est.bundle->manifest();
  std::vector<int64_t> lengths, groups;
  for (const Rollout &r : rolls) {
    lengths.push_back(r.actions());
    groups.push_back(r.group);
  }
  PackedBatch batch = PackedBatch::fromLengths(lengths);
  batch.setGroups(at::tensor(groups, at::kLong));
  if (m.needsTree) {
    std::vector<int64_t> tn;
    for (const auto &t : plan.tokenNode)
      tn.insert(tn.end(), t.begin(), t.end());
    batch.setTree(at::tensor(plan.nodeParent, at::kLong),
                  at::tensor(tn, at::kLong));
  }
  InputSource src{s, rolls, sc, &plan, {}, {}};
  TensorMap inputs;
  for (const auto &b : m.buffers)
    if (b.role == BufferRole::Input)
      inputs[b.name] = makeInput(src, b.name, b.domain);
  try {
    return s.est.estimator->run(inputs, batch, s.est.params);
  } catch (const std::exception &e) {
    throw TrainError(std::string("running the estimator: ") + e.what());
  }
}

namespace {

/// SPO-tree trains each node once, on its own history: the paths' per-token
/// outputs become per-node samples (filtered by weight), which go through
/// the replay buffer (off: this step's samples, in order). Replaces the
/// samples, their scores, adv and weight of \p a by the ones taken.
void takeNodeSamples(TrainerState &s, StepBatch &batch, Advantages &a,
                     nlohmann::json &row) {
  const int64_t rlIndex = batch.rlIndex;
  std::vector<std::vector<float>> per = {hostFloats(a.adv)}, sampled;
  bool weighted = a.weight.defined();
  if (weighted)
    per.push_back(hostFloats(a.weight));
  std::vector<Rollout> nodes = nodeSamples(
      batch.plan, per, weighted ? per.back() : std::vector<float>{}, sampled);
  std::vector<ReplayEntry> fresh;
  size_t off = 0;
  for (Rollout &x : nodes) {
    ReplayEntry e;
    size_t T = x.response.size();
    e.adv.assign(sampled[0].begin() + off, sampled[0].begin() + off + T);
    if (weighted)
      e.weight.assign(sampled[1].begin() + off, sampled[1].begin() + off + T);
    off += T;
    e.step = rlIndex;
    e.slot = batch.p0 + x.group;
    e.sample = std::move(x);
    fresh.push_back(std::move(e));
  }
  s.replay.add(std::move(fresh));
  ReplayBuffer::Taken taken = s.replay.take(rlIndex, s.cfg.seed);
  a.rolls.clear();
  std::vector<float> advTaken, weightTaken;
  double ageSum = 0;
  std::set<std::pair<int64_t, int64_t>> questions;
  for (ReplayEntry &e : taken.entries) {
    advTaken.insert(advTaken.end(), e.adv.begin(), e.adv.end());
    weightTaken.insert(weightTaken.end(), e.weight.begin(), e.weight.end());
    ageSum += static_cast<double>(rlIndex - e.step);
    questions.insert({e.step, e.slot});
    a.rolls.push_back(std::move(e.sample));
  }
  a.adv = s.onDevice(advTaken, at::kFloat);
  if (weighted)
    a.weight = s.onDevice(weightTaken, at::kFloat);
  a.scores = score(s, a.rolls);
  if (!s.replay.enabled())
    return;
  // Per step: what waits, what was dropped as too old, how many questions
  // the trained samples come from and their mean age.
  std::vector<double> v{static_cast<double>(s.replay.size()),
                        static_cast<double>(taken.dropped),
                        static_cast<double>(questions.size()), ageSum,
                        static_cast<double>(a.rolls.size())};
  s.world.sum(v);
  row["replay_size"] = std::llround(v[0]);
  row["replay_dropped"] = std::llround(v[1]);
  row["replay_questions"] = std::llround(v[2]);
  row["replay_age_mean"] = v[4] > 0 ? v[3] / v[4] : 0.0;
}

/// Every rank's samples in one table (a world of one: this rank's).
SampleTable sampleTable(const TrainerState &s, const Advantages &a) {
  SampleTable t;
  const int64_t B = static_cast<int64_t>(a.rolls.size());
  std::vector<int64_t> counts = s.world.allCounts(B);
  for (int r = 0; r < s.world.size(); ++r) {
    t.rankStart.push_back(t.total);
    t.first += r < s.world.rank() ? counts[static_cast<size_t>(r)] : 0;
    t.total += counts[static_cast<size_t>(r)];
  }
  t.rankStart.push_back(t.total);
  // [total][tokens, weight, value_weight, group + 1]: each rank fills its
  // own rows, the sum gathers them.
  constexpr int64_t kCols = 4;
  std::vector<double> cells(static_cast<size_t>(kCols * t.total), 0.0);
  auto cell = [&](int64_t i, int column) -> double & {
    return cells[static_cast<size_t>(kCols * (t.first + i) + column)];
  };
  auto sums = [&](const at::Tensor &x, int column) {
    if (!x.defined())
      return;
    at::Tensor c = x.to(at::kCPU, at::kDouble).contiguous();
    const double *p = c.data_ptr<double>();
    for (int64_t i = 0; i < B; ++i) {
      double sum = 0;
      for (int64_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k)
        sum += p[k];
      cell(i, column) = sum;
    }
  };
  for (int64_t i = 0; i < B; ++i) {
    cell(i, 0) = static_cast<double>(a.offsets[i + 1] - a.offsets[i]);
    cell(i, 3) = static_cast<double>(a.rolls[i].group + 1);
  }
  sums(a.weight, 1);
  sums(a.valueWeight, 2);
  s.world.sum(cells);
  for (int64_t k = 0; k < t.total; ++k) {
    const double *c = &cells[static_cast<size_t>(kCols * k)];
    t.tokens.push_back(c[0]);
    t.weight.push_back(c[1]);
    t.valueWeight.push_back(c[2]);
    t.group.push_back(std::llround(c[3]) - 1);
  }
  return t;
}

} // namespace

Advantages estimate(TrainerState &s, StepBatch &batch, Scores sc,
                    nlohmann::json &row) {
  const EstimatorSetup &e = s.est;
  TensorMap outs = runEstimator(s, batch.plan.rolls, sc, batch.plan);
  Advantages a;
  a.adv = outs.at("adv").to(at::kFloat);
  if (e.advDomain == Domain::Seq)
    a.adv = a.adv.index_select(0, sc.all.tokenSeq);
  if (e.hasRet && outs.count("ret"))
    a.ret = outs.at("ret").to(at::kFloat);
  if (e.hasWeight)
    a.weight = outs.at("weight").to(at::kFloat);
  if (e.hasValueWeight)
    a.valueWeight = outs.at("value_weight").to(at::kFloat);
  if (s.cfg.rollout.kind == RolloutSpec::Kind::Tree) {
    takeNodeSamples(s, batch, a, row);
  } else {
    a.rolls = std::move(batch.plan.rolls);
    a.scores = std::move(sc);
  }
  a.offsets.assign(a.rolls.size() + 1, 0);
  for (size_t i = 0; i < a.rolls.size(); ++i)
    a.offsets[i + 1] = a.offsets[i] + a.rolls[i].actions();
  s.syncForTiming();
  a.table = sampleTable(s, a);
  if (s.cfg.rollout.kind == RolloutSpec::Kind::Tree)
    row["node_samples"] = a.table.total;
  a.raw = s.world.moments(a.adv);
  if (s.cfg.whiten)
    // With a weight, over the tokens whose weight is nonzero.
    a.adv =
        whiten(a.adv, a.weight.defined()
                          ? s.world.moments(a.adv.masked_select(a.weight != 0))
                          : a.raw);
  return a;
}

} // namespace cac::rt::train
