//===- UpdatePhase.cpp - Update: PPO epochs over minibatches --------------===//
//
// The minibatches split the world's samples (SampleTable): the same
// permutation on every rank, each rank training the samples it holds with
// its share of the minibatch's normalisers, so that the summed gradients
// are one process's. In a world of one every share is 1.
//
//===----------------------------------------------------------------------===//

#include "TrainerInputs.h"

#include "cac/Runtime/Train/Objective.h"

#include <cmath>
#include <map>

namespace cac::rt::train {

namespace {

/// What the minibatches shuffle: the samples, or, for an objective that
/// reads `group` (its group statistics must be the step's), the groups, each
/// a whole (a group's samples are on one rank).
std::vector<std::vector<int64_t>> shuffleUnits(const TrainerState &s,
                                               const SampleTable &t) {
  std::vector<std::vector<int64_t>> units;
  if (!s.est.groupMinibatches) {
    for (int64_t k = 0; k < t.total; ++k)
      units.push_back({k});
    return units;
  }
  std::map<std::pair<int64_t, int64_t>, size_t> unitOf;
  int64_t r = 0;
  for (int64_t k = 0; k < t.total; ++k) {
    while (k >= t.rankStart[static_cast<size_t>(r) + 1])
      ++r;
    auto [it, fresh] =
        unitOf.try_emplace({r, t.group[static_cast<size_t>(k)]}, units.size());
    if (fresh)
      units.emplace_back();
    units[it->second].push_back(k);
  }
  return units;
}

/// One minibatch as this rank sees it.
struct Minibatch {
  std::vector<const Rollout *> rows;
  /// This rank's samples and their tokens in the step's packed arrays.
  std::vector<int64_t> rowIdx, tokIdx;
  /// The world's tokens and sums of weight and value_weight.
  double tokens = 0, weight = 0, valueWeight = 0;
  /// This rank's share of the normaliser: of the tokens for token-mean, of
  /// the sequences otherwise (seqShare), of the sequences whose weights sum
  /// to more than 0 for a weighted seq-mean (weightedSeqShare).
  double share = 1, seqShare = 1, weightedSeqShare = 1;
};

Minibatch minibatch(const TrainerState &s, const Advantages &a,
                    const std::vector<int64_t> &members) {
  Minibatch mb;
  const SampleTable &t = a.table;
  const int64_t B = static_cast<int64_t>(a.rolls.size());
  double weighted = 0, localWeighted = 0;
  for (int64_t gi : members) {
    mb.tokens += t.tokens[static_cast<size_t>(gi)];
    mb.weight += t.weight[static_cast<size_t>(gi)];
    mb.valueWeight += t.valueWeight[static_cast<size_t>(gi)];
    bool kept = t.weight[static_cast<size_t>(gi)] > 0;
    weighted += kept;
    int64_t i = gi - t.first;
    if (i < 0 || i >= B)
      continue;
    localWeighted += kept;
    mb.rows.push_back(&a.rolls[i]);
    mb.rowIdx.push_back(i);
    for (int64_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k)
      mb.tokIdx.push_back(k);
  }
  double localTokens = static_cast<double>(mb.tokIdx.size());
  mb.seqShare =
      static_cast<double>(mb.rows.size()) / static_cast<double>(members.size());
  mb.weightedSeqShare = weighted > 0 ? localWeighted / weighted : 0.0;
  mb.share = s.cfg.aggregation == Aggregation::TokenMean
                 ? (mb.tokens > 0 ? localTokens / mb.tokens : 0.0)
                 : mb.seqShare;
  return mb;
}

/// The domain an objective's input \p name is sliced by.
Domain objectiveDomain(const TrainerState &s, const std::string &name) {
  if (name == "value")
    return s.est.promptCritic ? Domain::Seq : Domain::Token;
  for (const TrainerInput &in : trainerInputs())
    if (in.objective && in.name == name)
      return in.domain;
  return Domain::Token;
}

/// The loss of one minibatch and what the step's metrics sum of it.
class MinibatchLoss {
public:
  MinibatchLoss(TrainerState &s, const Advantages &a, const TensorMap &objIn,
                const Minibatch &mb)
      : s(s), a(a), objIn(objIn), mb(mb),
        nb(static_cast<int64_t>(mb.rows.size())),
        pd(padRollouts(mb.rows, s.task.padId, s.device())),
        ti(s.onDevice(mb.tokIdx, at::kLong)) {}

  /// Forward and backward; adds its terms to \p u. A non-finite loss or
  /// gradient stops the run, or skips this update (--skip-nonfinite) and
  /// adds nothing.
  void run(UpdateStats &u) {
    const TrainConfig &cfg = s.cfg;
    ModelSet &m = s.models;
    at::Tensor h = m.policy->forwardHidden(pd.ids, pd.mask);
    logp = responseLogProbs(m.policy, h, pd, cfg.rollout.temperature);
    ratio = at::exp(logp - a.scores.oldLogp.index_select(0, ti));
    adv = a.adv.index_select(0, ti);
    at::Tensor pg = s.est.objective ? compiledPolicyLoss() : policyLoss();
    at::Tensor loss = pg;
    double kl = 0, valueLoss = 0;
    if (cfg.kl.kind != KlSpec::Kind::None && cfg.kl.coef > 0 &&
        !cfg.kl.inReward) {
      at::Tensor klTerm = agg(
          klEstimate(logp, a.scores.refLogp.index_select(0, ti), cfg.kl.kind));
      loss = loss + cfg.kl.coef * klTerm;
      kl = klTerm.item<double>();
    } else if (m.needReference) {
      kl = agg(klEstimate(logp.detach(), a.scores.refLogp.index_select(0, ti),
                          KlSpec::Kind::K3))
               .item<double>();
    }
    if (cfg.critic.kind != CriticSpec::Kind::None) {
      at::Tensor vl = criticLoss(h);
      loss = loss + cfg.critic.coef * vl;
      valueLoss = vl.item<double>();
    }
    double lossValue = loss.item<double>();
    if (skipNonFinite(s, "loss", !std::isfinite(lossValue)))
      return;
    loss.backward();
    double gradNorm = optimizerStep(s);
    if (std::isnan(gradNorm)) // skipped
      return;
    ++u.updates;
    u.kl += kl;
    u.valueLoss += valueLoss;
    u.gradNorm += gradNorm;
    u.pgLoss += pg.item<double>();
    u.loss += lossValue;
    torch::NoGradGuard ng;
    at::Tensor clipped = objClipped.defined()
                             ? objClipped.to(at::kFloat)
                             : clippedMask(ratio, adv, cfg.objective.epsLow,
                                           cfg.objective.epsHigh)
                                   .to(at::kFloat);
    u.clipFrac += s.world.tokenMean(clipped, mb.tokens);
    u.ratio += s.world.tokenMean(ratio, mb.tokens);
  }

private:
  /// The file's aggregation over the minibatch, times this rank's share.
  at::Tensor agg(const at::Tensor &x) const {
    return aggregate(x, pd.tokenSeq, nb, s.cfg.aggregation, normLen()) *
           mb.share;
  }
  /// The same over the tokens that \p w weights: a token mean divides by
  /// the world's sum of the weights \p total, the seq-mean modes by the
  /// world's sequences of positive weight (aggregateMasked).
  at::Tensor aggMasked(const at::Tensor &x, const at::Tensor &w,
                       Aggregation mode, double total) const {
    if (mode == Aggregation::TokenMean)
      return s.world.weightedTokenMean(x, w, pd.tokenSeq, nb, total);
    return aggregateMasked(x, w, pd.tokenSeq, nb, mode, normLen()) *
           mb.weightedSeqShare;
  }
  double normLen() const {
    return static_cast<double>(s.cfg.rollout.maxTokens);
  }

  /// The clipped surrogate of the training file's objective.
  at::Tensor policyLoss() const {
    at::Tensor f = clippedSurrogate(ratio, adv, s.cfg.objective.epsLow,
                                    s.cfg.objective.epsHigh);
    if (a.weight.defined())
      return -aggMasked(f, a.weight.index_select(0, ti), s.cfg.aggregation,
                        mb.weight);
    return -agg(f);
  }

  /// The compiled objective: its kernels give the loss and d loss /
  /// d logp_new; the surrogate carries that gradient into the model's
  /// backward pass.
  at::Tensor compiledPolicyLoss() {
    const EstimatorSetup &e = s.est;
    TensorMap in{{"logp_new", logp.detach()}};
    at::Tensor rowsIdx = s.onDevice(mb.rowIdx, at::kLong);
    for (const std::string &name : e.objectiveInputs)
      in[name] = objIn.at(name).index_select(
          0, objectiveDomain(s, name) == Domain::Seq ? rowsIdx : ti);
    std::vector<int64_t> lengths, groups;
    for (const Rollout *r : mb.rows) {
      lengths.push_back(r->actions());
      groups.push_back(r->group);
    }
    PackedBatch batch = PackedBatch::fromLengths(lengths);
    if (e.groupMinibatches)
      batch.setGroups(at::tensor(groups, at::kLong));
    CompiledObjective::Result r;
    try {
      r = e.objective->run(in, batch, e.objectiveParams);
    } catch (const std::exception &ex) {
      throw TrainError(std::string("running the objective: ") + ex.what());
    }
    // Its own normaliser (counted by its kernels: the tokens it keeps, or
    // the sequences) summed over the world.
    std::vector<double> norm{r.normalizer};
    s.world.sum(norm);
    e.objective->setNormalizer(r, norm[0]);
    if (r.outputs.count("clipped")) {
      objClipped = r.outputs.at("clipped");
      // A seq loss's `clipped` is per sequence: every token of a clipped
      // sequence counts, as GSPO-token's would.
      if (objClipped.numel() == nb && nb != logp.size(0))
        objClipped =
            objClipped.repeat_interleave(s.onDevice(lengths, at::kLong));
    }
    return CompiledObjective::surrogate(logp, r);
  }

  /// The critic's loss: clipped value loss to the estimator's returns, or
  /// SPPO's BCE of the prompt's success probability.
  at::Tensor criticLoss(const at::Tensor &h) {
    const TrainConfig &cfg = s.cfg;
    ModelSet &m = s.models;
    at::Tensor v = cfg.critic.kind == CriticSpec::Kind::ValueHead
                       ? gatherResponse(m.policy->valueHead(h), pd)
                       : values(m.critic, pd);
    if (s.est.promptCritic) {
      // SPPO: V(prompt) is the success probability read before the first
      // response token, trained by BCE to the reward.
      std::vector<int64_t> first;
      std::vector<float> target;
      int64_t pos = 0;
      for (const Rollout *r : mb.rows) {
        first.push_back(pos);
        target.push_back(static_cast<float>(r->reward));
        pos += r->actions();
      }
      return bceLoss(
                 at::sigmoid(v.index_select(0, s.onDevice(first, at::kLong))),
                 s.onDevice(target, at::kFloat)) *
             mb.seqShare;
    }
    at::Tensor vl = valueLoss(v, a.scores.oldValues.index_select(0, ti),
                              a.ret.index_select(0, ti), cfg.critic.clip);
    if (a.valueWeight.defined())
      // Only the positions the estimator marks (SAPO: segment boundaries)
      // train the critic: a mean over them.
      return aggMasked(vl, a.valueWeight.index_select(0, ti),
                       Aggregation::TokenMean, mb.valueWeight);
    return agg(vl);
  }

  TrainerState &s;
  const Advantages &a;
  const TensorMap &objIn;
  const Minibatch &mb;
  const int64_t nb;
  const Padded pd;
  const at::Tensor ti;
  at::Tensor logp, ratio, adv;
  at::Tensor objClipped; // the objective's own `clipped`, if any
};

} // namespace

UpdateStats update(TrainerState &s, const Advantages &a) {
  UpdateStats u;
  s.models.policy->train();
  if (s.models.critic)
    s.models.critic->train();
  // The compiled objective's inputs over the step's samples (sliced to each
  // minibatch).
  TensorMap objIn;
  if (s.est.objective) {
    InputSource src{s, a.rolls, a.scores, nullptr, a.adv, a.weight};
    for (const std::string &name : s.est.objectiveInputs)
      objIn[name] = makeInput(src, name, objectiveDomain(s, name));
  }
  const int64_t TB = a.table.total;
  std::vector<std::vector<int64_t>> units = shuffleUnits(s, a.table);
  const int64_t TU = static_cast<int64_t>(units.size());
  const int64_t M = std::min<int64_t>(s.cfg.minibatches, TU);
  for (int64_t epoch = 0; epoch < s.cfg.epochs && TB > 0; ++epoch) {
    at::Tensor perm = at::randperm(TU, s.shuffleGen, at::kLong);
    auto pa = perm.accessor<int64_t, 1>();
    for (int64_t k = 0; k < M; ++k) {
      // The minibatch's samples (the world's indices), in shuffled order.
      std::vector<int64_t> members;
      for (int64_t j = TU * k / M; j < TU * (k + 1) / M; ++j) {
        const auto &unit = units[static_cast<size_t>(pa[j])];
        members.insert(members.end(), unit.begin(), unit.end());
      }
      Minibatch mb = minibatch(s, a, members);
      if (mb.rows.empty()) {
        // Nothing here; the others' gradients are summed in, and the
        // objective's normaliser gets nothing from here.
        if (s.est.objective) {
          std::vector<double> none{0.0};
          s.world.sum(none);
        }
        // The others' loss decides a skip (--skip-nonfinite) with this
        // rank taking part.
        if (skipNonFinite(s, "loss", false))
          continue;
        double gradNorm = optimizerStep(s);
        if (!std::isnan(gradNorm)) {
          u.gradNorm += gradNorm;
          ++u.updates;
        }
        continue;
      }
      MinibatchLoss(s, a, objIn, mb).run(u);
    }
  }
  return u;
}

} // namespace cac::rt::train
