//===- TrainerInputs.h - What the trainer feeds its kernels -----*- C++ -*-===//
//
// The inputs cac-run gives the estimator bundle and the compiled objective
// (docs/training.md): one table of names, domains and readers, and one
// function that makes each input's tensor for a batch of samples.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_LIB_TRAIN_TRAINERINPUTS_H
#define CAC_LIB_TRAIN_TRAINERINPUTS_H

#include "Phases.h"

namespace cac::rt::train {

/// An input the trainer provides.
struct TrainerInput {
  const char *name;
  Domain domain;
  /// The estimator may read it (with this domain); the objective may read
  /// it (by name: its tensor is the estimator's, sliced to the minibatch).
  bool estimator, objective;
};

/// Every input, in the order the diagnostics list them.
const std::vector<TrainerInput> &trainerInputs();
/// The estimator's input \p name : \p domain, or null where cac-run has none.
const TrainerInput *findEstimatorInput(const std::string &name, Domain domain);
/// Whether the objective may read \p name.
bool objectiveMayRead(const std::string &name);
/// "a : token, b : seq, ..." of the estimator's inputs.
std::string estimatorInputList();
/// "logp_new, a, b and c": what an objective may read.
std::string objectiveInputList();

/// Where a batch's inputs come from: its samples, their scores, the plan
/// (chain and tree plans) and, for the objective, the estimator's
/// (whitened) advantage per token and weight.
struct InputSource {
  const TrainerState &s;
  const std::vector<Rollout> &rolls;
  const Scores &sc;
  const RolloutBatch *plan = nullptr;
  at::Tensor adv, weight;
};

/// The packed tensor of input \p name : \p domain over the batch.
at::Tensor makeInput(const InputSource &src, const std::string &name,
                     Domain domain);

} // namespace cac::rt::train

#endif // CAC_LIB_TRAIN_TRAINERINPUTS_H
